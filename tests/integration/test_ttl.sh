#!/usr/bin/env bash
# TTL: a sandbox with --ttl 10 (the minimum) is deleted by the controller
# after it expires (phase deleted, container gone) within a few ticks.
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-ttl

assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --ttl 10 --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"
t0=$(date +%s)
cid=$(docker ps -aq --filter "label=dev.sandbox.id=$sbx")
[ -n "$cid" ] || fail "no container for $sbx while running"

phase_of() {
  local out
  out=$(sandbox get "$1" --json) || return 1
  itest_json "$out" sandbox.phase phase
}
phase_is_deleted() { [ "$(phase_of "$1")" = deleted ]; }

# 10 s of TTL + reconcile ticks + a delete round trip
itest_wait_until 70 "phase deleted after the TTL" phase_is_deleted "$sbx"
took=$(($(date +%s) - t0))
[ "$took" -ge 8 ] || fail "deleted after ${took}s, before its 10 s TTL"
assert_eq "" "$(docker ps -a --filter "label=dev.sandbox.id=$sbx" -q)" "containers left after TTL expiry"
echo "expired and deleted after ${took}s"
