#!/usr/bin/env bash
# A microvm snapshot's copy between two reference drivers (sandbox-vmm)
# spoken to directly, as a worker speaks to them (vmm_copy_check.py): the
# export and import of a disk snapshot and of one with its memory, and
# what a hostile worker could send (a disk backed by a host file, an
# external data file, a member outside the snapshot, a symlink, another
# tenant's snapshot, a cut stream, ...) refused with nothing kept. No VM
# boots, no daemon of ours runs; the copy through controller and workers is
# test_microvm_driver's.
# itest-parallel
# itest-timeout: 120
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (the driver gives a disk to QEMU's user)"
command -v qemu-img >/dev/null || fail "qemu-utils is not installed (tools/lib.sh installs it)"
vmm="$ITEST_BUILD/tools/sandbox-vmm"
[ -x "$vmm" ] || fail "no $vmm"
work=$(mktemp -d "$ITEST_TMP/vmmcopy.XXXXXX")
chmod 0755 "$work"
out="$work/check.out"
rc=0
python3 "$(dirname "$0")/vmm_copy_check.py" "$vmm" "$work" >"$out" 2>&1 || rc=$?
sed 's/^/  /' "$out"
[ "$rc" -eq 0 ] || fail "vmm_copy_check.py: $(grep -m1 '^FAIL' "$out" || tail -n 3 "$out")"
n=$(grep -c '^ok ' "$out")
[ "$n" -ge 20 ] || fail "only $n checks ran"
grep -q '^all checks passed$' "$out" || fail "vmm_copy_check.py ended without its last line"
rm -rf "$work"
echo "snapshot copies between drivers: $n checks passed"
