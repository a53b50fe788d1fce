#!/usr/bin/env bash
# The microVM library through sbx-vmmctl on the real QEMU, kernel and image
# (tests/microvm/test_microvm_vmm.sh, the microvm suite's microvm_vmm: boot,
# exec, files, PTY, dial, isolation, destroy, a template restore), run by
# the integration runner as a standalone test beside the others instead of
# alone after them (its half minute of TCG boots then overlaps work that
# waits). It uses the run's dockerd for the image and starts no daemon of
# ours. Passes when that script ran checks and none failed.
# itest-standalone
# itest-cost: 45
# itest-timeout: 600
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (QEMU drops to an unprivileged user)"
command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86 is not installed (tools/lib.sh installs it)"
out="$ITEST_TMP/microvm-vmm-$$.out"
rc=0
bash "$(dirname "$0")/../microvm/test_microvm_vmm.sh" "$ITEST_BUILD" >"$out" 2>&1 || rc=$?
sed 's/^/  /' "$out"
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1 || true)
[ -n "$summary" ] || fail "test_microvm_vmm.sh ended (exit $rc) without its summary line"
[ "${summary#* passed, }" = "0 failed" ] || fail "test_microvm_vmm.sh: $summary (exit $rc): $(grep '^FAIL' "$out" | head -n 5)"
[ "${summary%% passed*}" -gt 0 ] || fail "test_microvm_vmm.sh ran no check"
[ "$rc" -eq 0 ] || fail "test_microvm_vmm.sh exited $rc after $summary"
echo "sbx-vmmctl on QEMU: $summary"
