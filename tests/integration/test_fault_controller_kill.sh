#!/usr/bin/env bash
# Fault injection: kill -9 the controller at random moments (5 times) during
# a burst of 200+ operations and restart it; nothing is lost or duplicated.
# itest-timeout: 600
# itest-standalone
# itest-cost: 85
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# A grace past the worker timeout, as a real installation has (300 s by
# default): these faults take nothing from the worker, and a loaded host's
# worker may take a few seconds to be heard again after one (a run with two
# cores busy saw 5.7 s after a controller kill, 12.9 s after a PostgreSQL
# outage); "nothing lost" must not hang on that race.
FAULT_LOST_AFTER=20
# shellcheck source=tests/integration/fault/lib.sh
. "$(dirname "$0")/fault/lib.sh"
itest_begin
trap 'rc=$?; fault_teardown; itest_end $rc' EXIT

fault_setup controller_kill 1
fault_burst_start
for k in 1 2 3 4 5; do
  sleep "$(awk -v r="$RANDOM" 'BEGIN { printf "%.2f", 1 + (r % 300) / 100 }')"
  itest_log "kill -9 controller (#$k) at $(fault_burst_progress) lifecycles"
  t0=$(fault_now)
  fault_kill_controller 0
  fault_start_controller 0
  fault_probe_recovery "$t0"
done
fault_burst_wait
FAULT_EXPECT_NO_LOSS=1 fault_audit
