#!/usr/bin/env bash
# A `sandbox logs --follow` of a sandbox that never prints outlives the
# controller's connection timeout (120 s: a quiet stream is not a read
# timeout) and ends (exit 0) once its sandbox is deleted. A timing property,
# not a memory one: it runs beside the other shared tests (itest-beside),
# and tools/test.sh leaves it to the plain run when both runs happen.
# itest-beside
# itest-timeout: 200
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-logs-quiet)
SANDBOX_TOKEN=$(itest_token "$tenant" member)
export SANDBOX_TOKEN

assert_exit 0 sandbox create --image "$ITEST_IMAGE" --memory-mib 128 --wait --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
t0=$(date +%s)
"$SANDBOX_CLI" logs "$sbx" --follow >"$ITEST_TMP/quiet.out" 2>"$ITEST_TMP/quiet.err" &
fpid=$!
itest_track_pid "$fpid"
sleep 130
kill -0 "$fpid" 2>/dev/null || fail "a quiet follow ended after $(($(date +%s) - t0)) s: $(cat "$ITEST_TMP/quiet.err")"
assert_exit 0 sandbox delete "$sbx" --wait --timeout 60
itest_wait_until 15 "the quiet follow ends once its sandbox is deleted" bash -c "! kill -0 $fpid 2>/dev/null"
wait "$fpid" && rc=0 || rc=$?
assert_eq 0 "$rc" "the quiet follow's exit code (stderr: $(cat "$ITEST_TMP/quiet.err"))"
echo "a quiet follow lived $(($(date +%s) - t0)) s, past the 120 s connection timeout, and ended with its sandbox"
