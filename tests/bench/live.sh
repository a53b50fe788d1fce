#!/usr/bin/env bash
# Flat cost at 10,000 live sandboxes (issue 18): a private PostgreSQL, a
# controller, and 20 hollow workers (registered through the API, heartbeating
# from tests/bench/live_bench.py: there are no containers — 10,000 real ones
# would take this machine hours). 10,000 live sandboxes, their operations and
# events are written directly into the database (tests/bench/live_rows.sql).
# Prints one table:
#   - idle PostgreSQL CPU (its processes' utime+stime) and WAL bytes per second
#     while the 20 workers heartbeat every 5 s: at 0 live; at 10,000 live with
#     full inventories each beat (what a worker sent before); with deltas;
#   - GET /v1/sandboxes/{id}, GET /v1/sandboxes?limit=100 and its pages by
#     after= (one kept-alive connection, one request at a time: p50/p99);
#   - creates one at a time in the tenant holding the 10,000 and in an empty
#     one: the POST's latency until accepted (quota check included) and the
#     reconcile place pass's time per create (its spread count included);
#   - the controller's RSS.
# usage: tests/bench/live.sh BUILD_DIR [LIVE]   (LIVE default 10000)
# Works against an older build too (figures it cannot take are left out).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:?usage: tests/bench/live.sh BUILD_DIR [LIVE]}
live=${2:-10000}
# shellcheck source=../integration/lib.sh
. "$here/../integration/lib.sh"
itest_init "$build"
# No containers exist: stop the controller and PostgreSQL only (the tests'
# cleanup would look for a container of each of the 12,000 sandboxes).
bench_cleanup() {
  local i
  for ((i = ${#ITEST_PIDS[@]} - 1; i >= 0; i--)); do
    itest_stop_pid "${ITEST_PIDS[$i]}" "process" 30 || true
  done
  if [ -n "${ITEST_PG_DATA:-}" ]; then
    itest_as_pg "$ITEST_PGBIN/pg_ctl" stop -D "$ITEST_PG_DATA" -m fast -w -t 60 >/dev/null 2>&1 || true
  fi
  rm -rf "$ITEST_TMP"
}
trap 'bench_cleanup' EXIT
itest_start_postgres >/dev/null
export PSQL="$ITEST_PGBIN/psql"
itest_start_controller >/dev/null
db=$DATABASE_URL
big_tok=$(itest_token bench-big member)
empty_tok=$(itest_token bench-empty member)
"$PSQL" -X -q -At "$db" -c "UPDATE tenants SET policy = '{\"max_sandboxes\":100000}' WHERE name LIKE 'bench-%'"
workers=[]
for i in $(seq 0 19); do
  tok=$(itest_token bench-workers worker "live-w$i")
  reg=$(curl -s --max-time 20 -X POST -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
    -d "{\"name\":\"live-w$i\",\"runtime\":\"docker\",\"isolation\":[\"container\"],\"networks\":{\"container\":[\"none\"]},
         \"capacity\":{\"cpu_millis\":100000000,\"memory_mib\":1000000000,\"slots\":100000},\"version\":\"bench\"}" \
    "$SANDBOX_URL/v1/workers/register")
  wid=$(itest_json "$reg" worker.id)
  workers=$(python3 -c 'import json,sys; w=json.loads(sys.argv[1]); w.append({"name":sys.argv[2],"id":sys.argv[3],"token":sys.argv[4]}); print(json.dumps(w))' \
    "$workers" "live-w$i" "$wid" "$tok")
done
printf '%s\n' "$workers" >"$ITEST_TMP/workers.json"
run() {
  python3 "$here/live_bench.py" --url "$SANDBOX_URL" --db "$db" --pgdata "$ITEST_PG_DATA" --big-token "$big_tok" \
    --empty-token "$empty_tok" --workers "$ITEST_TMP/workers.json" --controller-pid "$ITEST_CONTROLLER_PID" "$@"
}
echo "| figure | value | notes |"
echo "|---|---|---|"
run --phase empty
"$PSQL" -X -q "$db" -v live="$live" -v workers=20 -v tenant=bench-big -f "$here/live_rows.sql" >/dev/null
"$PSQL" -X -q -At "$db" -c "UPDATE workers SET state = 'ready', last_heartbeat = now()" >/dev/null
sleep 5
run --phase live
