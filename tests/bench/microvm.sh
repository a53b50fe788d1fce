#!/usr/bin/env bash
# MicroVM timings through sbx-vmmctl (worker/vmm), next to the yardstick
# `docker run --rm IMAGE true` in the same run: cold boot (QEMU start to the
# guest agent's HELLO), restore from a booted template (fast start), exec `true` (a new sbx-vmmctl process: attach, HELLO,
# exec, exit code; and the library's own round trip from the same connection
# is the `exec true` row minus process start), destroy. Median of N (5), in ms.
# Usage: tests/bench/microvm.sh [N]   (as root; env BUILD, IMAGE, BENCH_KEEP)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tools/lib.sh
. "$root/tools/lib.sh"
n=${1:-5}
build=${BUILD:-$root/build}
ctl="$build/worker/vmm/sbx-vmmctl"
image=${IMAGE:-$SBX_BASE_IMAGE}
[ -x "$ctl" ] || { echo "no $ctl (meson compile -C $build)" >&2; exit 2; }
sbx_base_image "$image" >/dev/null || exit 2
state=$(mktemp -d /tmp/sbx-vmmbench.XXXXXX)
vm=b$$
done_() {
  "$ctl" --state "$state" destroy "$vm" >/dev/null 2>&1 || true
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$state"
}
trap done_ EXIT
ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
accel=$("$ctl" --state "$state" probe | head -n1)

boot=() restore=() exec_true=() destroy=() docker_true=()
# the base disk is made once (cached per image id); not part of a boot
"$ctl" --state "$state" --accel "$accel" boot "$vm" --image "$image" >/dev/null
"$ctl" --state "$state" destroy "$vm"
for _ in $(seq "$n"); do
  out=$("$ctl" --state "$state" --accel "$accel" boot "$vm" --image "$image")
  boot+=("$(echo "$out" | awk '/^boot_s/ {printf "%d", $2 * 1000}')")
  for _ in 1 2; do
    a=$(ms); "$ctl" --state "$state" exec "$vm" -- true; b=$(ms)
    exec_true+=($((b - a)))
  done
  a=$(ms); "$ctl" --state "$state" destroy "$vm"; b=$(ms)
  destroy+=($((b - a)))
  a=$(ms); docker run --rm --network none "$image" true; b=$(ms)
  docker_true+=($((b - a)))
done
# fast start: the template is made by the first call (not counted)
"$ctl" --state "$state" --accel "$accel" boot "$vm" --image "$image" --template >/dev/null
"$ctl" --state "$state" destroy "$vm"
for _ in $(seq "$n"); do
  out=$("$ctl" --state "$state" --accel "$accel" boot "$vm" --image "$image" --template)
  restore+=("$(echo "$out" | awk '/^restore_s/ {printf "%d", $2 * 1000}')")
  "$ctl" --state "$state" destroy "$vm"
done
printf '\nmicroVM (%s), median of %s, ms\n' "$accel" "$n"
printf '| %-34s | %8s |\n' "what" "median"
printf '| %-34s | %8s |\n' "----" "------"
printf '| %-34s | %8s |\n' "cold boot (QEMU start -> HELLO)" "$(median "${boot[@]}")"
printf '| %-34s | %8s |\n' "restore from template -> HELLO" "$(median "${restore[@]}")"
printf '| %-34s | %8s |\n' "exec true (new sbx-vmmctl)" "$(median "${exec_true[@]}")"
printf '| %-34s | %8s |\n' "destroy" "$(median "${destroy[@]}")"
printf '| %-34s | %8s |\n' "docker run --rm IMAGE true" "$(median "${docker_true[@]}")"
