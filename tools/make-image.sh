#!/usr/bin/env bash
# Builds a local image for sandboxes with `docker import`, no registry needed.
#   tools/make-image.sh busybox [NAME]  sandbox/busybox:latest from Debian's
#       busybox-static: the server's default_image, what tools/run.sh builds
#       (tools/lib.sh sbx_base_image; about a second)
#   tools/make-image.sh debian [NAME] [--packages "PKG..."]
#       sandbox/debian:12: a minimal Debian 12 (debootstrap --variant=minbase
#       bookworm) from the mirror apt uses (/etc/apt/sources.list.d/
#       debian.sources); a few minutes, about 120 MB. --packages adds Debian
#       packages (and what they depend on) to it: a toolchain image, e.g.
#       --packages "python3 python3-pytest", named sandbox/debian:12-python3-
#       python3-pytest unless NAME is given
# Nothing depends on the debian images; name one in a create (--image
# sandbox/debian:12) or as default_image; `sandbox images` lists what the
# workers have. Another worker host gets an image without a registry by
#   docker save NAME | ssh HOST docker load
# Run as root or as a user with sudo.
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

# The image name for a package list: sandbox/debian:12-PKG-PKG (a tag's
# characters; a list too long for a tag gets a digest of it instead).
debian_name() {
  local tag
  [ -n "$1" ] || { echo sandbox/debian:12; return; }
  tag=12-$(tr ' ' '\n' <<<"$1" | sed '/^$/d' | tr '+' 'p' | paste -sd- -)
  if [ "${#tag}" -gt 100 ]; then tag=12-$(sha256sum <<<"$1" | cut -c1-12); fi
  echo "sandbox/debian:$tag"
}

make_debian() {
  local packages=$2 name=${1:-} have mirror root cache try rc=0 recipe include=()
  [ -n "$name" ] || name=$(debian_name "$packages")
  recipe=$SBX_DEBIAN_RECIPE${packages:+ packages=$(tr ' ' ',' <<<"$packages")}
  [ -z "$packages" ] || include=(--include="$(tr ' ' ',' <<<"$packages")")
  have=$(sbx_docker image inspect --format '{{ index .Config.Labels "dev.sandbox.image-recipe" }}' "$name" 2>/dev/null || true)
  if [ "$have" = "$recipe" ]; then
    sbx_say "$name is current (recipe $recipe); docker image rm $name to rebuild it"
    return 0
  fi
  if ! command -v debootstrap >/dev/null 2>&1; then
    sbx_say "installing debootstrap"
    sbx_apt_get install -y -q --no-install-recommends debootstrap || sbx_die "apt-get install debootstrap failed"
  fi
  mirror=$(debian_mirror)
  root=$(mktemp -d "${TMPDIR:-/tmp}/sbx-debian.XXXXXX")
  cache=$(mktemp -d "${TMPDIR:-/tmp}/sbx-debian-cache.XXXXXX")
  # shellcheck disable=SC2064 # the folders are fixed now
  trap "sbx_as_root rm -rf '$root' '$cache'" EXIT
  # A mirror may drop a burst of downloads: up to five tries, each into an
  # empty folder, the packages already fetched kept between them
  # (--cache-dir), so a try downloads only what the last one missed; the
  # pause before the next one grows (10 s, 20 s, ...).
  for try in 1 2 3 4 5; do
    sbx_say "debootstrap --variant=minbase ${include[*]} bookworm from $mirror into $root (a few minutes; try $try)"
    rc=0
    sbx_as_root debootstrap --variant=minbase --cache-dir="$cache" "${include[@]}" bookworm "$root" "$mirror" \
      >"$root.log" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || break
    tail -n 5 "$root.log" >&2
    [ "$try" -lt 5 ] || sbx_die "debootstrap failed five times (log: $root.log)"
    sbx_as_root sh -c "rm -rf '$root' && mkdir -p '$root'"
    sleep $((10 * try))
  done
  rm -f "$root.log"
  # what a container does not need: downloaded packages, package lists
  sbx_as_root sh -c "rm -rf '$root'/var/cache/apt/archives/*.deb '$root'/var/lib/apt/lists/* '$root'/tmp/*"
  sbx_as_root tar -C "$root" --numeric-owner -c . \
    | sbx_docker import \
      --change 'CMD ["/bin/bash"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "LABEL dev.sandbox.image-recipe=\"$recipe\"" \
      --message "Debian 12 minbase${packages:+ with $packages} (tools/make-image.sh debian) from $mirror" \
      - "$name" >/dev/null || rc=$?
  [ "$rc" -eq 0 ] || sbx_die "docker import of $name failed"
  sbx_say "built $name ($(sbx_docker image inspect --format '{{.Size}}' "$name" | awk '{ printf "%d MB", $1 / 1e6 }'))"
}

usage() { echo "usage: tools/make-image.sh busybox [NAME] | debian [NAME] [--packages \"PKG...\"]  (see --help)" >&2; exit 2; }
kind=${1:-}
[ $# -eq 0 ] || shift
name='' packages=''
while [ $# -gt 0 ]; do
  case "$1" in
    --packages)
      if [ "$kind" != debian ] || [ $# -lt 2 ]; then usage; fi
      packages=$(tr -s ' \t,' ' ' <<<"$2" | sed 's/^ //; s/ $//')
      # Debian package names: lowercase letters, digits, + - . (policy 5.6.1)
      grep -Eq '^[a-z0-9][a-z0-9+.-]*( [a-z0-9][a-z0-9+.-]*)*$' <<<"$packages" \
        || sbx_die "--packages: '$2' is not a list of Debian package names"
      shift 2 ;;
    -h | --help) kind=--help; shift ;;
    -*) usage ;;
    *) [ -z "$name" ] || usage; name=$1; shift ;;
  esac
done
case "$kind" in
  busybox) sbx_base_image "${name:-$SBX_BASE_IMAGE}" || exit 1 ;;
  debian) make_debian "$name" "$packages" ;;
  -h | --help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' ;;
  *) usage ;;
esac
