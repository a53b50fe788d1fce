#!/usr/bin/env bash
# Fault injection: the worker freezes (SIGSTOP) past its heartbeat timeout and
# lease, then resumes (SIGCONT): it was declared lost, its late reports are
# refused, its containers are reconciled, nothing is lost or duplicated.
# itest-timeout: 600
# itest-standalone
# itest-cost: 145
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/fault/lib.sh
. "$(dirname "$0")/fault/lib.sh"
itest_begin
trap 'rc=$?; kill -CONT "$FAULT_WORKER_PID" 2>/dev/null || true; fault_teardown; itest_end $rc' EXIT

fault_setup worker_pause 1
fault_burst_start
itest_wait_until 90 "a few lifecycles done" fault_progress_at_least 5
itest_log "SIGSTOP worker"
t0=$(fault_now)
kill -STOP "$FAULT_WORKER_PID"
worker_lost() { [ "$(fault_sql "SELECT state FROM workers WHERE name = 'fault-worker_pause'")" = lost ]; }
itest_wait_until 30 "the worker declared lost" worker_lost
sleep $((FAULT_LEASE + 2))
itest_log "SIGCONT worker"
kill -CONT "$FAULT_WORKER_PID"
fault_probe_recovery "$t0"
# its first heartbeat after the pause said so (the heartbeat's own update
# tells that the worker was lost)
heard() { [ "$(fault_sql "SELECT count(*) FROM events WHERE kind = 'worker.ready' AND data->>'reason' = 'heard again'
  AND data->>'worker' = 'fault-worker_pause'")" -ge 1 ]; }
itest_wait_until 30 "a worker.ready event (heard again) once the worker resumed" heard
fault_burst_wait
fault_audit
