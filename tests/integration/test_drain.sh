#!/usr/bin/env bash
# Draining a worker: no new placements on it, its sandboxes keep running and
# answer exec; resuming it places what waited. Workers are admin-only.
# itest-any-env
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
# ---- a worker that stops (SIGTERM) says so: nothing new is placed on it
# while the controller still hears it, and it is shown stopping. With the
# only other worker drained, a create then waits admitted (no worker), not
# leased to the process going away until its lease runs out.
wname="itest-stopping-$$"
wlog="$ITEST_TMP/worker-$wname.log"
itest_watch_log "$wlog"
wtoken=$(itest_token itest-workers worker "$wname")
SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_GVISOR_RUNTIME='' \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" --docker-socket /var/run/docker.sock \
  >>"$wlog" 2>&1 </dev/null &
wpid=$!
itest_track_pid "$wpid"
itest_await "$wpid" "$wlog" 40 "worker exited before registering" "worker $wname not ready" itest_worker_ready "$wname"
assert_exit 0 sandbox workers drain "$worker"
itest_stop_pid "$wpid" "worker $wname" 30 || fail "worker $wname did not stop cleanly on SIGTERM"
assert_contains "$(cat "$wlog")" "is stopping: nothing new is placed on it" "the stopping worker's log line"
assert_exit 0 sandbox workers list --json
stopping=$(python3 -c 'import json,sys; print([w.get("stopping") for w in json.loads(sys.argv[1])["workers"] if w["name"] == sys.argv[2]][0])' "$ITEST_OUT" "$wname")
assert_eq True "$stopping" "the stopped worker is listed stopping"
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32
read -r s3 op3 <<<"$ITEST_OUT"
itest_track "$s3"
sleep 2
assert_exit 0 sandbox operation "$op3" --json
assert_eq admitted "$(itest_json "$ITEST_OUT" operation.state)" "a create while one worker drains and the other stops"
assert_exit 0 sandbox workers resume "$worker"
t0=$(date +%s)
assert_exit 0 sandbox wait "$op3" --timeout 60
[ $(($(date +%s) - t0)) -le 15 ] || fail "the create took $(($(date +%s) - t0)) s once a worker was ready again"
assert_exit 0 sandbox get "$s3" --json
assert_eq "$worker" "$(itest_json "$ITEST_OUT" sandbox.worker)" "the create ran on the ready worker"

echo "drain stops placements, resume restores them; a stopping worker gets nothing new"
