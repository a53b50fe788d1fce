#!/usr/bin/env bash
# Builds a local image for sandboxes with `docker import`, no registry needed.
#   tools/make-image.sh busybox [NAME]  sandbox/busybox:latest from Debian's
#       busybox-static: the server's default_image, what tools/run.sh builds
#       (tools/lib.sh sbx_base_image; about a second)
#   tools/make-image.sh debian [NAME]   sandbox/debian:12: a minimal Debian 12
#       (debootstrap --variant=minbase bookworm) from the mirror apt uses
#       (/etc/apt/sources.list.d/debian.sources); a few minutes, about 120 MB
# Nothing depends on the debian image; name it in a create (--image
# sandbox/debian:12) or as default_image. Run as root or as a user with sudo.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=tools/lib.sh
. tools/lib.sh

SBX_DEBIAN_RECIPE=debian-1

# The Debian mirror of the first bookworm entry in apt's sources.
debian_mirror() {
  local f=/etc/apt/sources.list.d/debian.sources uri
  if [ -r "$f" ]; then
    uri=$(awk '
      /^URIs:/ { uris = $2 }
      /^Suites:/ { for (i = 2; i <= NF; i++) if ($i == "bookworm") { print uris; exit } }
      /^$/ { uris = "" }' "$f")
  fi
  if [ -z "${uri:-}" ] && [ -r /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list)
  fi
  printf '%s\n' "${uri:-http://deb.debian.org/debian}"
}

make_debian() {
  local name=${1:-sandbox/debian:12} have mirror root rc=0
  have=$(sbx_docker image inspect --format '{{ index .Config.Labels "dev.sandbox.image-recipe" }}' "$name" 2>/dev/null || true)
  if [ "$have" = "$SBX_DEBIAN_RECIPE" ]; then
    sbx_say "$name is current (recipe $SBX_DEBIAN_RECIPE); docker image rm $name to rebuild it"
    return 0
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    sbx_say "installing debootstrap"
    sbx_apt_get install -y -q --no-install-recommends debootstrap || sbx_die "apt-get install debootstrap failed"
  fi
  mirror=$(debian_mirror)
  root=$(mktemp -d "${TMPDIR:-/tmp}/sbx-debian.XXXXXX")
  # shellcheck disable=SC2064 # the folder is fixed now
  trap "sbx_as_root rm -rf '$root'" EXIT
  sbx_say "debootstrap --variant=minbase bookworm from $mirror into $root (a few minutes)"
  sbx_as_root debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.log" 2>&1 \
    || { tail -n 20 "$root.log" >&2; sbx_die "debootstrap failed (log: $root.log)"; }
  rm -f "$root.log"
  # what a container does not need: downloaded packages, package lists
  sbx_as_root sh -c "rm -rf '$root'/var/cache/apt/archives/*.deb '$root'/var/lib/apt/lists/* '$root'/tmp/*"
  sbx_as_root tar -C "$root" --numeric-owner -c . \
    | sbx_docker import \
      --change 'CMD ["/bin/bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "LABEL dev.sandbox.image-recipe=$SBX_DEBIAN_RECIPE" \
      --message "Debian 12 minbase (tools/make-image.sh debian) from $mirror" \
      - "$name" >/dev/null || rc=$?
  [ "$rc" -eq 0 ] || sbx_die "docker import of $name failed"
  sbx_say "built $name ($(sbx_docker image inspect --format '{{.Size}}' "$name" | awk '{ printf "%d MB", $1 / 1e6 }'))"
}

case "${1:-}" in
  busybox) sbx_base_image "${2:-$SBX_BASE_IMAGE}" || exit 1 ;;
  debian) make_debian "${2:-}" ;;
  -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) echo "usage: tools/make-image.sh busybox|debian [NAME]  (see --help)" >&2; exit 2 ;;
esac
