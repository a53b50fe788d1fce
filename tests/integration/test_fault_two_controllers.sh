#!/usr/bin/env bash
# Fault injection: two controllers on one database and one worker; clients and
# the worker use both; one controller is killed mid-burst and stays dead.
# Nothing is placed or executed twice.
# itest-timeout: 600
# itest-standalone
# itest-cost: 150
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# A grace past the worker timeout, as a real installation has (300 s by
# default): killing a controller takes nothing from the worker, but a loaded
# host's worker may take more than the 4 s timeout to be heard through the
# other one (a sanitized run with two cores busy lost 16 sandboxes to that
# race); "nothing lost" must not hang on it.
FAULT_LOST_AFTER=20
# shellcheck source=tests/integration/fault/lib.sh
. "$(dirname "$0")/fault/lib.sh"
itest_begin
trap 'rc=$?; fault_teardown; itest_end $rc' EXIT

fault_setup two_controllers 2
fault_burst_start
itest_wait_until 90 "a few lifecycles done" fault_progress_at_least 10
itest_log "kill -9 controller 0 (controller 1 stays)"
t0=$(fault_now)
fault_kill_controller 0
fault_probe_recovery "$t0" "http://127.0.0.1:${FAULT_CTL_PORTS[1]}"
fault_burst_wait
FAULT_EXPECT_NO_LOSS=1 fault_audit
