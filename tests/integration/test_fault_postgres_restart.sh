#!/usr/bin/env bash
# Fault injection: restart PostgreSQL (pg_ctl restart -m fast) in the middle of
# a burst, then stop it for a few seconds (API calls answer 503 at once);
# controller and worker reconnect and lose nothing.
# The PostgreSQL it restarts is a cluster of its own, so that it runs beside
# the other standalone tests, whose databases are on the run's.
# itest-timeout: 600
# itest-standalone
# itest-cost: 145
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
pgdir="$ITEST_TMP/pg-restart-$$"
trap 'rc=$?; fault_teardown; itest_as_pg "$ITEST_PGBIN/pg_ctl" stop -D "$pgdir/data" -m immediate -w -t 60 >/dev/null 2>&1; itest_end $rc' EXIT
itest_pg_cluster "$pgdir" || fail "cannot start a PostgreSQL cluster of this test's own in $pgdir"

fault_setup postgres_restart 1
fault_burst_start
itest_wait_until 90 "a few lifecycles done" fault_progress_at_least 8
itest_log "pg_ctl restart -m fast"
t0=$(fault_now)
pgdata=$("$ITEST_PGBIN/psql" -X -q -At "$FAULT_BASE/postgres" -c "SHOW data_directory")
itest_as_pg "$ITEST_PGBIN/pg_ctl" restart -D "$pgdata" -m fast -w -t 60 >/dev/null
fault_probe_recovery "$t0"
# An outage: while PostgreSQL is down the API answers 503 at once (no hang).
itest_wait_until 120 "more lifecycles done" fault_progress_at_least 25
itest_log "pg_ctl stop -m fast (outage)"
itest_as_pg "$ITEST_PGBIN/pg_ctl" stop -D "$pgdata" -m fast -w -t 60 >/dev/null
for _ in 1 2 3; do
  s0=$(fault_now)
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $FAULT_ADMIN" \
    "http://127.0.0.1:${FAULT_CTL_PORTS[0]}/v1/sandboxes")
  took=$(awk -v a="$s0" -v b="$(fault_now)" 'BEGIN { printf "%.2f", b - a }')
  assert_eq 503 "$code" "API status during the outage"
  awk -v t="$took" 'BEGIN { exit !(t < 2) }' || fail "an API call during the outage took ${took}s"
  sleep 0.5
done
sleep 2
itest_as_pg "$ITEST_PGBIN/pg_ctl" start -D "$pgdata" -l "$pgdata/../postgres.log" -w -t 60 >/dev/null
fault_probe_recovery "$(fault_now)"  # from the moment PostgreSQL is back
fault_burst_wait
FAULT_EXPECT_NO_LOSS=1 fault_audit
