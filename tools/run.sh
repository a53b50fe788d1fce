#!/usr/bin/env bash
# README command 1: installs what is missing (waiting for a busy apt), starts
# dockerd if needed and registers gVisor with it, builds Sandbox and the base
# image sandbox/busybox:latest (the server's default_image), and runs
# `sandboxd all` (controller + worker + embedded PostgreSQL).
# Usage: tools/run.sh [sandboxd all flags...]   as root, or as a user with sudo
#        (env SANDBOX_* passes through)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=tools/lib.sh
. tools/lib.sh

build_dir=${SANDBOX_BUILD_DIR:-build}
data_dir=${SANDBOX_DATA_DIR:-./.sandbox}
listen=${SANDBOX_LISTEN:-127.0.0.1:8080}
for ((i = 1; i <= $#; i++)); do
  case "${!i}" in
    --listen) j=$((i + 1)); listen=${!j:-$listen} ;;
    --listen=*) listen=${!i#--listen=} ;;
    --data-dir) j=$((i + 1)); data_dir=${!j:-$data_dir} ;;
    --data-dir=*) data_dir=${!i#--data-dir=} ;;
  esac
done

sbx_install_packages
if [ "$(id -u)" -eq 0 ]; then
  sbx_ensure_dockerd /var/log/sandbox-dockerd.log
else
  sbx_ensure_dockerd "${TMPDIR:-/tmp}/sandbox-dockerd.$(id -un).log"
fi
sbx_ensure_gvisor
sbx_base_image "$SBX_BASE_IMAGE" || sbx_die "cannot build the base image $SBX_BASE_IMAGE"
sbx_build "$build_dir"

# The token file belongs to whoever runs sandboxd: run through sudo, the
# user's other shell needs sudo to read it.
cat_token="cat $data_dir/admin.token"
if [ "$(id -u)" -eq 0 ] && [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ]; then
  cat_token="sudo $cat_token"
fi
cat >&2 <<EOF
==> starting: $build_dir/tools/sandboxd all --data-dir $data_dir $*
    The bootstrap admin token is kept in $data_dir/admin.token (mode 600), and printed
    below once when this runs in a terminal (never into a file or a journal).
    In another shell, use the CLI (no --image: the server's default, $SBX_BASE_IMAGE):
      export SANDBOX_URL=http://$listen
      export SANDBOX_TOKEN=\$($cat_token)
      $build_dir/tools/sandbox create --wait     # in the token's tenant, "default"
      $build_dir/tools/sandbox exec SANDBOX_ID -- uname -a
    Stop with Ctrl-C (the embedded PostgreSQL stops with it).
EOF
exec "$build_dir/tools/sandboxd" all --data-dir "$data_dir" "$@"
