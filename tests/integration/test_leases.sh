#!/usr/bin/env bash
# Leases and fencing, driven step by step with a scripted worker (curl): an
# expired create lease is leased again with attempt+1; a report with the old
# fencing token gets 409 stale_lease and changes nothing; an exec whose lease
# expires fails with worker_lost and is never handed out again; a silent
# worker becomes lost, its running sandbox lost, and when it comes back its
# heartbeat is told to remove the orphan. Idempotency keys replay creates.
# itest-timeout: 180
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_leases
ctl_pid=
stop_ctl() { if [ -n "$ctl_pid" ]; then kill -TERM "$ctl_pid" 2>/dev/null || true; wait "$ctl_pid" 2>/dev/null || true; fi; ctl_pid=; }
trap 'rc=$?; stop_ctl; itest_drop_private_db; itest_end $rc' EXIT
sql() { "$ITEST_PGBIN/psql" -X -q -At "$url" -c "$1"; }

port=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$port"
log="$ITEST_TMP/leases-controller.log"
itest_watch_log "$log"
start_ctl() { # start_ctl WORKER_TIMEOUT
  "$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port" --lease-seconds 4 \
    --heartbeat-seconds 1 --worker-timeout-seconds "$1" --worker-lost-after-seconds "$1" --reconcile-interval-ms 200 --max-attempts 3 \
    >>"$log" 2>&1 </dev/null &
  ctl_pid=$!
  itest_wait_healthz "$SANDBOX_URL" "$ctl_pid" controller "$log" || fail "controller did not start"
}
start_ctl 60
admin=$("$SANDBOXD" token create --database-url "$url" --tenant leases --role admin)
wtok=$("$SANDBOXD" token create --database-url "$url" --tenant leases-w --role worker)

itest_http POST /v1/workers/register "$wtok" \
  '{"name":"scripted","runtime":"docker","isolation":["container"],"labels":{},"capacity":{"cpu_millis":8000,"memory_mib":8192,"slots":8},"version":"test"}'
assert_http 200 "" register
wid=$(itest_json "$HTTP_BODY" worker.id)
itest_http POST "/v1/workers/$wid/heartbeat" "$wtok" '{"inventory":[]}'
assert_http 200 "" heartbeat

# Idempotency: the same key and body replay the operation; another body is a conflict.
SANDBOX_TOKEN=$admin
export SANDBOX_TOKEN
assert_exit 0 sandbox create --tenant leases --image img:1 --idempotency-key k1
read -r sbx op <<<"$ITEST_OUT"
assert_exit 0 sandbox create --tenant leases --image img:1 --idempotency-key k1
assert_eq "$sbx $op" "$ITEST_OUT" "replayed create"
assert_exit 3 sandbox create --tenant leases --image img:2 --idempotency-key k1
assert_contains "$ITEST_ERR" "conflict" "same key, other body"
assert_eq 1 "$(sql "SELECT count(*) FROM sandboxes")" "sandboxes after replays"

poll() { # poll [QUERY] -> sets ASSIGN (first assignment JSON) or fails
  itest_http GET "/v1/workers/$wid/poll?wait=10${1:+&$1}" "$wtok"
  assert_http 200 "" poll
  ASSIGN=$(itest_json "$HTTP_BODY" assignments.0) || fail "no assignment in [$HTTP_BODY]"
}
poll
assert_eq "$op" "$(itest_json "$ASSIGN" operation_id)" "assigned operation"
assert_eq 1 "$(itest_json "$ASSIGN" attempt)" "first attempt"
# No report, no heartbeat: the 4 s lease expires; the create is leased again.
poll
assert_eq 2 "$(itest_json "$ASSIGN" attempt)" "attempt after the lease expired"
report() { # report OP ATTEMPT OUTCOME [EXTRA_JSON_FIELDS]
  itest_http POST "/v1/workers/$wid/report" "$wtok" "{\"operation_id\":\"$1\",\"attempt\":$2,\"outcome\":\"$3\"${4:+,$4}}"
}
report "$op" 1 succeeded '"runtime_ref":"stale"'
assert_http 409 stale_lease "report with the old fencing token"
assert_eq "running 2" "$(sql "SELECT state || ' ' || attempt FROM operations WHERE id = '$op'")" "operation after the stale report"
report "$op" 2 succeeded '"runtime_ref":"c0ffee"'
assert_http 200 "" "report with the current token"
assert_eq "running c0ffee" "$(sql "SELECT phase || ' ' || runtime_ref FROM sandboxes WHERE id = '$sbx'")" "sandbox after the report"
report "$op" 2 failed '"error":{"code":"runtime_error","message":"late"}'
assert_http 409 stale_lease "a second report of a finished operation"

# exec whose poll's answer never reached the worker (the controller killed
# between the claim's commit and the write): the worker's next poll names
# that poll, and the exec, which never started, is handed out again, not
# left to expire into worker_lost.
# (a second worker, registered first: the exec's 4 s lease has no heartbeat
# to renew it, so little may run between its claim and the checks)
wtok2=$("$SANDBOXD" token create --database-url "$url" --tenant leases-w2 --role worker)
itest_http POST /v1/workers/register "$wtok2" \
  '{"name":"other","runtime":"docker","isolation":["container"],"labels":{},"capacity":{"cpu_millis":1000,"memory_mib":1024,"slots":1},"version":"test"}'
assert_http 200 "" "register a second worker"
wid2=$(itest_json "$HTTP_BODY" worker.id)
sandbox exec "$sbx" --timeout 20 -- echo once >"$ITEST_TMP/leases-lost.out" 2>&1 &
lost_pid=$!
poll "poll=lost-1"
lop=$(itest_json "$ASSIGN" operation_id)
assert_eq "running lost-1" "$(sql "SELECT state || ' ' || claim_poll FROM operations WHERE id = '$lop'")" "exec claimed by poll lost-1"
itest_http GET "/v1/workers/$wid/poll?wait=0&poll=bad!" "$wtok"
assert_http 400 invalid_argument "a poll id that is not letters and digits"
itest_http GET "/v1/workers/$wid/poll?wait=0&unanswered=a,b,c,d,e,f,g,h,i" "$wtok"
assert_http 400 invalid_argument "nine unanswered polls"
# another worker (its own token) naming that poll moves nothing
itest_http GET "/v1/workers/$wid2/poll?wait=0&poll=x1&unanswered=lost-1" "$wtok2"
assert_http 200 "" "the other worker's poll"
assert_eq running "$(sql "SELECT state FROM operations WHERE id = '$lop'")" "exec after another worker named its poll"
# the same poll sent again (libcurl resends a request whose reused
# connection closed before any answer): what that id claimed comes again
poll "poll=lost-1"
assert_eq "$lop" "$(itest_json "$ASSIGN" operation_id)" "the exec handed to the resent poll"
poll "poll=lost-2&unanswered=lost-1"
assert_eq "$lop" "$(itest_json "$ASSIGN" operation_id)" "the exec handed out again"
assert_eq 1 "$(itest_json "$ASSIGN" attempt)" "its attempt (it never started)"
report "$lop" 1 succeeded '"result":{"exit_code":0,"stdout":"once\n","stderr":""}'
assert_http 200 "" "report of the exec handed out again"
rc=0
wait "$lost_pid" || rc=$?
assert_eq 0 "$rc" "exit code of the exec whose first answer was lost ($(cat "$ITEST_TMP/leases-lost.out"))"
assert_eq "leased running leased running leased running succeeded" \
  "$(sql "SELECT string_agg(data->>'to', ' ' ORDER BY id) FROM events WHERE operation_id = '$lop' AND data->>'to' IN ('leased', 'running', 'succeeded')")" \
  "exec history"
assert_eq answer_lost "$(sql "SELECT data->>'reason' FROM events WHERE operation_id = '$lop' AND data->>'from' = 'running' AND data->>'to' = 'leased' LIMIT 1")" "why it was leased again"
# naming it again once it ended moves nothing
itest_http GET "/v1/workers/$wid/poll?wait=0&poll=lost-3&unanswered=lost-1,lost-2" "$wtok"
assert_http 200 "" "a poll naming ended polls"
assert_eq succeeded "$(sql "SELECT state FROM operations WHERE id = '$lop'")" "exec after its polls were named again"

# exec: its lease expires -> worker_lost, never leased again.
sandbox exec "$sbx" --timeout 20 -- true >"$ITEST_TMP/leases-exec.out" 2>&1 &
exec_pid=$!
poll
eop=$(itest_json "$ASSIGN" operation_id)
assert_eq exec "$(itest_json "$ASSIGN" kind)" "assignment kind"
rc=0
wait "$exec_pid" || rc=$?
assert_eq 1 "$rc" "exit code of an exec whose worker went silent"
assert_contains "$(cat "$ITEST_TMP/leases-exec.out")" "worker_lost" "exec error"
assert_eq "failed worker_lost" "$(sql "SELECT state || ' ' || error_code FROM operations WHERE id = '$eop'")" "exec after lease expiry"
assert_eq 1 "$(sql "SELECT count(*) FROM events WHERE operation_id = '$eop' AND kind = 'operation.leased'")" "exec leases"
report "$eop" 1 succeeded '"result":{"exit_code":0}'
assert_http 409 stale_lease "late report of the expired exec"

# Worker loss: restart the controller with a 3 s worker timeout and no grace
# past it; the silent worker becomes lost and its running sandbox lost.
stop_ctl
start_ctl 3
lost() { [ "$(sql "SELECT w.state || ' ' || s.phase FROM workers w, sandboxes s WHERE w.id = '$wid' AND s.id = '$sbx'")" = "lost lost" ]; }
itest_wait_until 20 "worker and sandbox lost" lost
assert_eq "0 0" "$(sql "SELECT alloc_cpu_millis || ' ' || alloc_slots FROM workers WHERE id = '$wid'")" "capacity released"
# It comes back with the sandbox's container: the heartbeat says to remove it.
itest_http POST "/v1/workers/$wid/heartbeat" "$wtok" \
  "{\"inventory\":[{\"sandbox_id\":\"$sbx\",\"tenant\":\"leases\",\"ref\":\"c0ffee\",\"state\":\"running\"}]}"
assert_http 200 "" "heartbeat after coming back"
assert_eq "$sbx" "$(itest_json "$HTTP_BODY" remove.0.sandbox_id)" "orphan to remove"
assert_eq ready "$(sql "SELECT state FROM workers WHERE id = '$wid'")" "worker state after its heartbeat"
# History of the create shows the retry.
assert_eq "pending admitted leased running admitted leased running succeeded" \
  "$(sql "SELECT string_agg(data->>'to', ' ' ORDER BY id) FROM events WHERE operation_id = '$op'")" "create history"
echo "leases, fencing, worker loss and orphans behave"
