#!/usr/bin/env bash
# Builds the compose deployment's image, sandbox/compose:TAG (TAG: the
# environment's SANDBOX_IMAGE_TAG, default latest), from Debian packages
# with no registry: sandbox/compose-base:12 by tools/make-image.sh debian
# (debootstrap from the mirror apt uses, with PostgreSQL 15, nats-server,
# the libraries sandboxd links, QEMU and Debian's kernel for microVMs; a few
# minutes the first time, then kept),
# sandbox/busybox:latest (the image sandboxes run by default), then this
# folder's Dockerfile over it with the binaries of BUILD_DIR.
# Usage: examples/compose/build.sh [BUILD_DIR]   (default: build; built
# first with meson and ninja when it has no sandboxd). As root or with sudo.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tools/lib.sh
. "$root/tools/lib.sh"
build=${1:-$root/build}
tag=${SANDBOX_IMAGE_TAG:-latest}
if [ ! -x "$build/tools/sandboxd" ]; then
  sbx_say "building sandboxd in $build"
  [ -f "$build/build.ninja" ] || meson setup "$build" "$root" >/dev/null
  ninja -C "$build" >/dev/null
fi
packages="postgresql-15 nats-server ca-certificates iptables libpq5 libcurl4 libevent-2.1-7 libevent-openssl-2.1-7"
packages+=" libevent-pthreads-2.1-7 libjson-c5 libnats3.4 libsodium23 libssl3"
# the microvm class (sandbox-vmm): QEMU, qemu-img, the guest kernel and
# what the driver builds root disks and its initramfs with
packages+=" qemu-system-x86 qemu-utils linux-image-amd64 e2fsprogs xz-utils busybox-static"
"$root/tools/make-image.sh" debian sandbox/compose-base:12 --packages "$packages"
"$root/tools/make-image.sh" busybox
ctx=$(mktemp -d "${TMPDIR:-/tmp}/sbx-compose.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
cp "$build/tools/sandboxd" "$build/tools/sandbox" "$build/tools/sandbox-egress" "$build/tools/sandbox-vmm" \
  "$build/worker/vmm/sbx-vmm-agent" "$ctx/"
cp "$here/Dockerfile" "$here/postgres.sh" "$here/controller.sh" "$here/worker.sh" "$ctx/"
chmod 755 "$ctx"/*.sh
sbx_say "docker build sandbox/compose:$tag"
DOCKER_BUILDKIT=0 sbx_docker build -q -t "sandbox/compose:$tag" "$ctx" >/dev/null
sbx_say "sandbox/compose:$tag is built: docker-compose -f $here/docker-compose.yml up -d"
