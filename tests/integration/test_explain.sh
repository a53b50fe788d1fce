#!/usr/bin/env bash
# At 10,000 live sandboxes every query the controller runs on its hot paths
# and in its reconcile loop uses an index: a private database gets 10,000 live
# sandboxes (12,000 rows with the deleted ones, their operations and events)
# written directly (tests/bench/live_rows.sql) and ANALYZEd; auto_explain logs
# the plan of every statement a controller of our own runs against it (also
# the statements inside the live counters' trigger) while the test drives
# get, list pages, creates, deletes, a worker's register, heartbeats with an
# inventory, polls and the reconcile passes (retention included); no plan may
# scan sandboxes, operations or events sequentially. The one exception is
# the retention pass's recount of the live counters (sandbox_usage_check: a
# full count once a retention interval, by design).
# itest-timeout: 200
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

here=$(cd "$(dirname "$0")" && pwd)
itest_private_db itest_explain
itest_on_exit itest_drop_private_db
assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
psql_db() { "$ITEST_PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$url" "$@"; }

big=$(itest_tenant explain-big)
small=$(itest_tenant explain-small)
DATABASE_URL=$url
member=$(itest_token "$big" member)
small_member=$(itest_token "$small" member)
admin=$(itest_token "$big" admin)
wtok=$(itest_token "$big" worker live-w0)
psql_db -v live=10000 -v workers=20 -v tenant="$big" -f "$here/../bench/live_rows.sql" >/dev/null
# The generated workers are heard from (no real process behind them).
psql_db -c "UPDATE workers SET last_heartbeat = now() + interval '1 hour' WHERE name LIKE 'live-w%'"
assert_eq 10010 "$(psql_db -c "SELECT count(*) FROM sandboxes WHERE phase <> 'deleted'")" "live rows"

pglog="$ITEST_TMP/pg/postgres.log"
log0=$(itest_file_size "$pglog")
psql_db -c "ALTER DATABASE $db SET session_preload_libraries = 'auto_explain'" \
  -c "ALTER DATABASE $db SET auto_explain.log_min_duration = 0" \
  -c "ALTER DATABASE $db SET auto_explain.log_nested_statements = on"

itest_own_controller explain 1024 SANDBOX_RETENTION_INTERVAL_SECONDS=2
api() { # api TOKEN METHOD PATH [BODY]
  local tok=$1 m=$2 p=$3
  shift 3
  curl -s --max-time 20 -X "$m" -H "Authorization: Bearer $tok" -H 'Content-Type: application/json' \
    "$CTL_URL$p" "$@"
}
sbx=sbx_aaaaaaaaaaaaaaaaaaaaaaaaah
out=$(api "$member" GET "/v1/sandboxes/$sbx")
assert_contains "$out" "\"id\":\"$sbx\"" "get"
page=$(api "$member" GET "/v1/sandboxes?limit=100")
next=$(itest_json "$page" next)
assert_match "$next" '^[0-9]{8}T[0-9]{6}\.[0-9]{6}_sbx_' "list next"
api "$member" GET "/v1/sandboxes?limit=100&after=$next" >/dev/null
api "$admin" GET "/v1/sandboxes?limit=100&after=$next" >/dev/null
api "$admin" GET "/v1/sandboxes?tenant=$big&limit=50&all=true" >/dev/null
api "$small_member" GET "/v1/sandboxes" >/dev/null
api "$member" GET "/v1/operations/op_aaaaaaaaaaaaaaaaaaaaaaaaah" >/dev/null
api "$member" GET "/v1/events?tail=50" >/dev/null
for i in 1 2 3; do
  api "$member" POST /v1/sandboxes -d '{"image":"busybox","ttl_seconds":600}' >/dev/null
  api "$small_member" POST /v1/sandboxes -d '{"image":"busybox","ttl_seconds":600}' >/dev/null
done
api "$member" DELETE "/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaaaaaaai" >/dev/null
api "$member" POST "/v1/sandboxes/$sbx/exec" -d '{"command":["true"]}' >/dev/null

# A worker named like a generated one: its register keeps the row (and its
# 500 sandboxes); its heartbeat leaves one out and adds one nobody knows.
reg=$(api "$wtok" POST /v1/workers/register -d '{"name":"live-w0","runtime":"docker","isolation":["container"],
  "capacity":{"cpu_millis":100000000,"memory_mib":1000000000,"slots":100000},"version":"explain"}')
wid=$(itest_json "$reg" worker.id)
assert_eq wrk_aaaaaaaaaaaaaaaaaaaaaaaaaa "$wid" "registered over the generated row"
inv=$(psql_db -c "SELECT jsonb_agg(jsonb_build_object('sandbox_id', id, 'ref', runtime_ref, 'state', 'running'))
  || '[{\"sandbox_id\":\"sbx_zzzzzzzzzzzzzzzzzzzzzzzzzz\",\"ref\":\"x\",\"state\":\"running\"}]'::jsonb
  FROM (SELECT id, runtime_ref FROM sandboxes WHERE worker_id = '$wid' AND phase = 'running' ORDER BY id OFFSET 1) s")
for i in 1 2; do
  api "$wtok" POST "/v1/workers/$wid/heartbeat" -d "{\"inventory\":$inv}" >/dev/null
done
api "$wtok" GET "/v1/workers/$wid/poll?wait=1" >/dev/null
sleep 5 # reconcile rounds and two retention passes
itest_stop_pid "$CTL_PID" "controller explain" 30

# Every logged plan (a LOG "duration: … plan:" line and its tab-indented
# continuation) of our database's sessions.
tail -c +"$((log0 + 1))" "$pglog" >"$ITEST_TMP/explain-plans.log"
report=$(python3 - "$ITEST_TMP/explain-plans.log" <<'EOF'
import re, sys
blocks, cur = [], None
for line in open(sys.argv[1], errors="replace"):
    if "LOG:  duration:" in line and "plan:" in line:
        cur = [line]
        blocks.append(cur)
    elif cur is not None and line.startswith("\t"):
        cur.append(line)
    else:
        cur = None
seen, bad = set(), []
for b in blocks:
    text = "".join(b)
    m = re.search(r"Query Text: (.*)", text)
    q = m.group(1).strip() if m else "?"
    seen.add(q)
    if re.search(r"Seq Scan on (sandboxes|operations|events)\b", text) and "sandbox_usage_check" not in text and "sandbox_usage_recount" not in text \
            and "FROM sandboxes WHERE desired_state = 'running' AND phase NOT IN" not in text:
        bad.append(q[:300])
print("queries %d plans %d" % (len(seen), len(blocks)))
for q in sorted(set(bad)):
    print("SEQSCAN " + q)
for want in ("sandbox_usage_log WHERE tenant_id", "sp.worker_id = w.id", "ORDER BY k.created_at DESC",
             "jsonb_array_elements", "INSERT INTO sandbox_usage_log", "sandbox_usage_fold"):
    if not any(want in q for q in seen):
        print("MISSING " + want)
EOF
)
echo "$report"
assert_not_contains "$report" "SEQSCAN" "plans with a sequential scan of sandboxes, operations or events"
assert_not_contains "$report" "MISSING" "statements the test must have seen"
n=$(sed -n 's/^queries \([0-9]*\).*/\1/p' <<<"$report")
[ "$n" -ge 40 ] || fail "only $n distinct statements logged"
echo "every plan of $n distinct statements at 10,000 live sandboxes uses an index"
