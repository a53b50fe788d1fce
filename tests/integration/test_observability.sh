#!/usr/bin/env bash
# Health, metrics, request ids, structured logs and retention (issue 7):
# /healthz and /readyz (503 naming the database once it is gone, while
# /healthz and /metrics still answer); X-Request-Id taken from the client or
# made, returned on every answer and found in the access log; /metrics in
# the Prometheus text format (tests/integration/promparse.py) with counters
# that move as a sandbox lives; a controller logging JSON lines; and the
# retention loop pruning backdated events, operations and a deleted sandbox
# while leaving newer rows alone.
# itest-timeout: 150
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
here=$(cd "$(dirname "$0")" && pwd)
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
tenant=$(itest_tenant itest-obs)
assert_exit 0 sandbox tenants create "$tenant"

# curl_head URL [curl args...]: status line and headers of a GET into HEADERS,
# body into BODY.
curl_full() {
  local url=$1 hf bf
  shift
  hf=$(mktemp "$ITEST_TMP/h.XXXXXX")
  bf=$(mktemp "$ITEST_TMP/b.XXXXXX")
  STATUS=$(curl -s -D "$hf" -o "$bf" -w '%{http_code}' --max-time 30 "$@" "$url") || STATUS=000
  HEADERS=$(tr -d '\r' <"$hf")
  BODY=$(cat "$bf")
  rm -f "$hf" "$bf"
}
header() { printf '%s\n' "$HEADERS" | awk -v h="$(printf '%s' "$1" | tr 'A-Z' 'a-z')" \
  'BEGIN { FS = ": " } { k = tolower($1) } k == h { sub(/^[^:]*: /, ""); print; exit }'; }

# metrics URL FILE: fetches /metrics into FILE and checks the text format.
metrics() {
  curl -sf --max-time 30 "$1/metrics" -o "$2" || fail "GET $1/metrics failed"
  python3 "$here/promparse.py" "$2" >/dev/null || fail "$1/metrics is not valid Prometheus text (see above)"
}
# metric FILE 'name{labels}': the sample's value, 0 when absent.
metric() { awk -v k="$2" '$1 == k { print $2; found = 1; exit } END { if (!found) print 0 }' "$1"; }
# assert_grew BEFORE AFTER WHAT: AFTER > BEFORE, both numbers.
assert_grew() {
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) else 1)' "$1" "$2" \
    || fail "$3: expected it to grow, was $1 then $2"
}

# ---- probes and request ids
curl_full "$SANDBOX_URL/healthz"
assert_eq 200 "$STATUS" "/healthz"
assert_eq ok "$(itest_json "$BODY" status)" "/healthz status"
assert_match "$(header X-Request-Id)" '^req_[a-z2-7]{26}$' "a request id made by the controller"
curl_full "$SANDBOX_URL/readyz"
assert_eq 200 "$STATUS" "/readyz with the database up"
assert_eq ready "$(itest_json "$BODY" status)" "/readyz status"
assert_eq true "$(itest_json "$BODY" checks.database.ok)" "/readyz database check"
curl_full "$SANDBOX_URL/readyz" -X POST
assert_eq 405 "$STATUS" "POST /readyz"

rid="itest-obs-$RANDOM-$RANDOM"
curl_full "$SANDBOX_URL/v1/sandboxes?tenant=$tenant" -H "Authorization: Bearer $SANDBOX_TOKEN" -H "X-Request-Id: $rid"
assert_eq 200 "$STATUS" "list with a client request id"
assert_eq "$rid" "$(header X-Request-Id)" "the client's request id is returned"
curl_full "$SANDBOX_URL/v1/sandboxes/sbx_nosuchsandboxaaaaaaaaaaaaa" -H "Authorization: Bearer $SANDBOX_TOKEN" \
  -H "X-Request-Id: $rid-404"
assert_eq 404 "$STATUS" "get of a missing sandbox"
assert_eq "$rid-404" "$(header X-Request-Id)" "an error answer carries the request id"
curl_full "$SANDBOX_URL/v1/sandboxes" -H "Authorization: Bearer $SANDBOX_TOKEN" -H "X-Request-Id: has spaces and \"quotes\""
assert_match "$(header X-Request-Id)" '^req_[a-z2-7]{26}$' "a malformed client request id is replaced"
curl_full "$SANDBOX_URL/v1/sandboxes" -H "Authorization: Bearer $SANDBOX_TOKEN" -H "X-Request-Id: $(printf 'x%.0s' {1..65})"
assert_match "$(header X-Request-Id)" '^req_' "an over-long client request id is replaced"
# the access log: one line per request with its id, tenant, route and status
itest_wait_until 5 "a log line with request_id=\"$rid-404\" in $ITEST_CONTROLLER_LOG" \
  grep -q "request_id=\"$rid-404\"" "$ITEST_CONTROLLER_LOG"
line=$(grep "request_id=\"$rid-404\"" "$ITEST_CONTROLLER_LOG" | grep 'component=http' | tail -n 1)
assert_contains "$line" 'level=info' "access log level"
assert_contains "$line" 'status=404' "access log status"
assert_contains "$line" 'route=/v1/sandboxes/{id}' "access log route template"
assert_contains "$line" 'sandbox="sbx_nosuchsandboxaaaaaaaaaaaaa"' "access log sandbox id"
assert_match "$line" 'tenant="tnt_[a-z2-7]{26}"' "access log tenant"
assert_match "$line" 'duration_ms=[0-9.]+' "access log duration"

# ---- /metrics moves as a sandbox lives
m0="$ITEST_TMP/obs-metrics-0.txt"
m1="$ITEST_TMP/obs-metrics-1.txt"
metrics "$SANDBOX_URL" "$m0"
assert_eq 1 "$(metric "$m0" sandbox_database_up)" "sandbox_database_up"
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --network none --wait --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 sandbox exec "$sbx" -- echo hi
assert_exit 0 sandbox delete "$sbx" --wait --timeout 120
metrics "$SANDBOX_URL" "$m1"
assert_grew "$(metric "$m0" 'sandbox_http_requests_total{route="/v1/sandboxes",method="POST",status="202"}')" \
  "$(metric "$m1" 'sandbox_http_requests_total{route="/v1/sandboxes",method="POST",status="202"}')" "POST /v1/sandboxes 202 count"
assert_grew "$(metric "$m0" 'sandbox_http_request_duration_seconds_count{route="/v1/sandboxes/{id}/exec"}')" \
  "$(metric "$m1" 'sandbox_http_request_duration_seconds_count{route="/v1/sandboxes/{id}/exec"}')" "exec latency samples"
for kind in create exec delete; do
  assert_grew "$(metric "$m0" "sandbox_operations_finished_total{kind=\"$kind\",state=\"succeeded\"}")" \
    "$(metric "$m1" "sandbox_operations_finished_total{kind=\"$kind\",state=\"succeeded\"}")" "$kind operations succeeded"
  for stage in queued starting running; do
    assert_grew "$(metric "$m0" "sandbox_operation_stage_duration_seconds_count{kind=\"$kind\",stage=\"$stage\"}")" \
      "$(metric "$m1" "sandbox_operation_stage_duration_seconds_count{kind=\"$kind\",stage=\"$stage\"}")" \
      "$kind $stage stage samples"
  done
done
assert_grew "$(metric "$m0" 'sandbox_sandboxes{phase="deleted"}')" "$(metric "$m1" 'sandbox_sandboxes{phase="deleted"}')" \
  "deleted sandboxes"
assert_grew 0 "$(metric "$m1" 'sandbox_workers{state="ready"}')" "ready workers"
assert_grew 0 "$(metric "$m1" 'sandbox_workers_capacity{state="ready",resource="memory_bytes"}')" "worker memory capacity"
# the place pass runs in every timed round (reconcile_interval_ms, 1 s);
# the three operations above can all fit between two of them
place0=$(metric "$m0" 'sandbox_reconcile_pass_duration_seconds_count{pass="place"}')
place_grew() {
  metrics "$SANDBOX_URL" "$ITEST_TMP/obs-metrics-2.txt" &&
    python3 -c 'import sys; sys.exit(0 if float(sys.argv[2]) > float(sys.argv[1]) else 1)' "$place0" \
      "$(metric "$ITEST_TMP/obs-metrics-2.txt" 'sandbox_reconcile_pass_duration_seconds_count{pass="place"}')"
}
itest_wait_until 10 "place pass samples to grow from $place0" place_grew
# on an idle controller each of the three is admitted and placed in its own
# request's transaction, not by the loop's passes
for kind in create exec delete; do
  assert_grew "$(metric "$m0" "sandbox_operations_placed_on_request_total{kind=\"$kind\"}")" \
    "$(metric "$m1" "sandbox_operations_placed_on_request_total{kind=\"$kind\"}")" "$kind placed on its request"
done
assert_grew 0 "$(metric "$m1" sandbox_events_last_id)" "newest event id"
assert_grew 0 "$(metric "$m1" 'sandbox_db_connections{state="active"}')" "active sandboxd database connections"
assert_grew 2 "$(metric "$m1" sandbox_db_pool_size)" "the controller's connection pool size"

# ---- a second controller: JSON logs, and retention every second for rows
# older than an hour (only the rows backdated below qualify)
c2port=$(itest_free_port)
c2log="$ITEST_TMP/controller-obs.log"
"$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$c2port" \
  --route-listen "127.0.0.1:$(itest_free_port)" --log-format json --retention-interval-seconds 1 \
  --retention-operations-seconds 3600 --retention-events-seconds 3600 >>"$c2log" 2>&1 </dev/null &
c2pid=$!
itest_track_pid "$c2pid"
itest_watch_log "$c2log"
itest_wait_healthz "http://127.0.0.1:$c2port" "$c2pid" "second controller" "$c2log" || fail "second controller did not start"
c2="http://127.0.0.1:$c2port"

# sbx (deleted above) is backdated two hours; keep (deleted now) is not
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --network none --wait --timeout 120
read -r keep _ <<<"$ITEST_OUT"
itest_track "$keep"
assert_exit 0 sandbox delete "$keep" --wait --timeout 120
psql_q() { psql -X -q -t -A -v ON_ERROR_STOP=1 "$DATABASE_URL" -c "$1"; }
count_rows() { # count_rows SANDBOX: "events operations sandboxes"
  psql_q "SELECT (SELECT count(*) FROM events WHERE sandbox_id = '$1') || ' ' ||
                 (SELECT count(*) FROM operations WHERE sandbox_id = '$1') || ' ' ||
                 (SELECT count(*) FROM sandboxes WHERE id = '$1')"
}
read -r ev ops sb <<<"$(count_rows "$sbx")"
[ "$ev" -ge 6 ] && [ "$ops" -eq 3 ] && [ "$sb" -eq 1 ] || fail "rows of $sbx before pruning: $ev events, $ops operations, $sb sandboxes"
m2="$ITEST_TMP/obs-metrics-2.txt"
metrics "$c2" "$m2"
psql_q "UPDATE events SET ts = ts - interval '2 hours' WHERE sandbox_id = '$sbx';
        UPDATE operations SET finished_at = finished_at - interval '2 hours' WHERE sandbox_id = '$sbx';
        UPDATE sandboxes SET deleted_at = deleted_at - interval '2 hours' WHERE id = '$sbx'" >/dev/null
pruned() { [ "$(count_rows "$1")" = "0 0 0" ]; }
itest_wait_until 15 "retention to delete the events, operations and row of $sbx" pruned "$sbx"
read -r ev ops sb <<<"$(count_rows "$keep")"
[ "$ev" -ge 6 ] && [ "$ops" -eq 2 ] && [ "$sb" -eq 1 ] || fail "retention took newer rows of $keep: $ev events, $ops operations, $sb sandboxes"
m3="$ITEST_TMP/obs-metrics-3.txt"
metrics "$c2" "$m3"
for t in events operations sandboxes; do
  assert_grew "$(metric "$m2" "sandbox_retention_pruned_total{table=\"$t\"}")" \
    "$(metric "$m3" "sandbox_retention_pruned_total{table=\"$t\"}")" "pruned $t"
done

# every line the JSON controller wrote is one JSON object with the fields
python3 - "$c2log" <<'PY' || fail "the JSON log of the second controller is malformed (see above)"
import json, sys
n = 0
for i, line in enumerate(open(sys.argv[1], encoding="utf-8"), 1):
    if not line.strip():
        continue
    try:
        o = json.loads(line)
    except ValueError as e:
        sys.exit("line %d is not JSON: %s: %r" % (i, e, line[:200]))
    for k in ("ts", "level", "component", "msg"):
        if k not in o:
            sys.exit("line %d has no %s: %r" % (i, k, line[:200]))
    n += 1
if n < 2:
    sys.exit("only %d JSON lines" % n)
print("%d JSON log lines" % n)
PY
itest_stop_pid "$c2pid" "second controller" 30 || fail "the second controller did not stop cleanly"

# ---- /readyz when the database is gone: a controller on a database of its own, dropped
db="itest_obs_$RANDOM$RANDOM"
psql -X -q -v ON_ERROR_STOP=1 "${DATABASE_URL%/*}/postgres" -c "CREATE DATABASE $db" >/dev/null \
  || fail "cannot create database $db"
url="${DATABASE_URL%/*}/$db"
c3port=$(itest_free_port)
c3log="$ITEST_TMP/controller-obs-nodb.log"
"$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$c3port" --route-listen "127.0.0.1:$(itest_free_port)" \
  >>"$c3log" 2>&1 </dev/null &
c3pid=$!
itest_track_pid "$c3pid"
itest_watch_log "$c3log"
c3="http://127.0.0.1:$c3port"
itest_wait_healthz "$c3" "$c3pid" "third controller" "$c3log" || fail "third controller did not start"
curl_full "$c3/readyz"
assert_eq 200 "$STATUS" "/readyz of the third controller"
psql -X -q -v ON_ERROR_STOP=1 "${DATABASE_URL%/*}/postgres" -c "DROP DATABASE $db WITH (FORCE)" >/dev/null \
  || fail "cannot drop $db"
readyz_503() { [ "$(curl -s -o /dev/null -w '%{http_code}' "$c3/readyz")" = 503 ]; }
itest_wait_until 10 "/readyz to answer 503 once the database is dropped" readyz_503
curl_full "$c3/readyz"
assert_eq unready "$(itest_json "$BODY" status)" "/readyz status without a database"
assert_eq false "$(itest_json "$BODY" checks.database.ok)" "/readyz database check without a database"
assert_contains "$(itest_json "$BODY" checks.database.error)" "database" "/readyz names the database"
curl_full "$c3/healthz"
assert_eq 200 "$STATUS" "/healthz without a database"
m4="$ITEST_TMP/obs-metrics-4.txt"
metrics "$c3" "$m4"
assert_eq 0 "$(metric "$m4" sandbox_database_up)" "sandbox_database_up without a database"
itest_stop_pid "$c3pid" "third controller" 30 || fail "the third controller did not stop cleanly"
