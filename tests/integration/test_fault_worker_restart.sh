#!/usr/bin/env bash
# Fault injection: the worker is restarted (SIGTERM, as for an upgrade) while
# the burst runs and stays away past the worker timeout (4 s) but within the
# grace (worker_lost_after_seconds 120): it says it stopped, its sandboxes
# are unreachable, execs meanwhile are refused (503, which the load driver
# retries; one admitted just before the worker said it stopped fails
# unavailable), and when it is back they run on. Nothing is lost or duplicated,
# and no sandbox is lost (issue 29).
# itest-timeout: 600
# itest-standalone
# itest-cost: 90
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
FAULT_LOST_AFTER=120
# a smaller burst than the other scenarios': one restart needs fewer
# lifecycles around it, and the suite's time is CPU-bound
FAULT_SANDBOXES=30
# shellcheck source=tests/integration/fault/lib.sh
. "$(dirname "$0")/fault/lib.sh"
itest_begin
trap 'rc=$?; fault_teardown; itest_end $rc' EXIT

fault_setup worker_restart 1
fault_burst_start
itest_wait_until 90 "a few lifecycles done" fault_progress_at_least 5
running=$(fault_sql "SELECT count(*) FROM sandboxes WHERE phase = 'running'")
itest_log "SIGTERM to the worker with $running sandboxes running"
t0=$(fault_now)
itest_stop_pid "$FAULT_WORKER_PID" "worker fault-worker_restart" 40 || fail "the worker did not stop on SIGTERM"
assert_eq "unreachable restarting" \
  "$(fault_sql "SELECT state || ' ' || unreachable_reason FROM workers WHERE name = 'fault-worker_restart'")" \
  "the worker once it stopped"
sleep 8
fault_start_worker
fault_probe_recovery "$t0"
fault_burst_wait
FAULT_EXPECT_NO_LOSS=1 FAULT_ALLOW_UNAVAILABLE=1 FAULT_WORKER_LOST_IN_FLIGHT=1 fault_audit
assert_eq 0 "$(fault_sql "SELECT count(*) FROM sandboxes WHERE phase = 'lost'")" "sandboxes lost"
assert_eq 0 "$(fault_sql "SELECT count(*) FROM events WHERE kind = 'worker.lost'")" "worker.lost events"
for k in sandbox.unreachable sandbox.reachable; do
  [ "$(fault_sql "SELECT count(*) FROM events WHERE kind = '$k'")" -ge 1 ] || fail "no $k event"
done
