#!/usr/bin/env bash
# Fault injection: kill -9 the worker with sandboxes running, restart it after
# its lease timeout; it re-registers, its inventory is reconciled, nothing is
# lost or duplicated.
# itest-timeout: 600
# itest-standalone
# itest-cost: 145
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/fault/lib.sh
. "$(dirname "$0")/fault/lib.sh"
itest_begin
trap 'rc=$?; fault_teardown; itest_end $rc' EXIT

fault_setup worker_kill 1
fault_burst_start
itest_wait_until 90 "a few lifecycles done" fault_progress_at_least 5
running=$(fault_sql "SELECT count(*) FROM sandboxes WHERE phase = 'running'")
itest_log "kill -9 worker with $running sandboxes running"
t0=$(fault_now)
fault_kill_worker
sleep $((FAULT_LEASE + 2))
fault_start_worker
fault_probe_recovery "$t0"
fault_burst_wait
fault_audit
