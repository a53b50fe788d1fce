#!/usr/bin/env bash
# Fault injection: restart PostgreSQL (pg_ctl restart -m fast) in the middle of
# a burst; controller and worker reconnect and lose nothing.
# itest-timeout: 600
# itest-standalone
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source=tests/integration/fault/lib.sh
. "$(dirname "$0")/fault/lib.sh"
itest_begin
trap 'rc=$?; fault_teardown; itest_end $rc' EXIT

fault_setup postgres_restart 1
fault_burst_start
itest_wait_until 90 "a few lifecycles done" fault_progress_at_least 8
itest_log "pg_ctl restart -m fast"
t0=$(fault_now)
pgdata=$("$ITEST_PGBIN/psql" -X -q -At "$FAULT_BASE/postgres" -c "SHOW data_directory")
itest_as_pg "$ITEST_PGBIN/pg_ctl" restart -D "$pgdata" -m fast -w -t 60 >/dev/null
fault_probe_recovery "$t0"
fault_burst_wait
fault_audit
