#!/usr/bin/env bash
# Draining a worker: no new placements on it, its sandboxes keep running and
# answer exec; resuming it places what waited. Workers are admin-only.
# itest-timeout: 120
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
worker=${ITEST_WORKER_NAME:-itest-worker}
trap 'rc=$?; sandbox workers resume "$worker" >/dev/null 2>&1 || true; itest_end $rc' EXIT
tenant=$(itest_tenant itest-drain)
assert_exit 0 sandbox tenants create "$tenant"

assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --wait --timeout 120
read -r s1 _ <<<"$ITEST_OUT"
itest_track "$s1"

assert_exit 0 sandbox workers drain "$worker"
assert_contains "$ITEST_OUT" "$worker draining" "drain output"
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32
read -r s2 op2 <<<"$ITEST_OUT"
itest_track "$s2"
sleep 3
assert_exit 0 sandbox operation "$op2" --json
assert_eq admitted "$(itest_json "$ITEST_OUT" operation.state)" "create while the only worker drains"
assert_exit 0 sandbox exec "$s1" -- echo still-here
assert_eq still-here "$ITEST_OUT" "exec on the drained worker's sandbox"

assert_exit 0 sandbox workers resume "$worker"
assert_contains "$ITEST_OUT" "$worker ready" "resume output"
assert_exit 0 sandbox wait "$op2" --timeout 60

member=$("$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant "$tenant" --role member)
assert_exit 3 sandbox --token "$member" workers list
assert_contains "$ITEST_ERR" "forbidden" "member listing workers"
assert_exit 3 sandbox --token "$member" workers drain "$worker"
assert_contains "$ITEST_ERR" "forbidden" "member draining a worker"
echo "drain stops placements, resume restores them"
