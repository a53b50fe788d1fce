#!/usr/bin/env bash
# Wake-ups re-check only what changed: with ten clients parked on ten
# operations, a worker's report ending one of them wakes its waiter at once
# and re-checks that wait alone (sandbox_wake_rechecked_total), not all ten;
# the nine others stay parked and answer when their own operations end. A
# lease wakes the poll of the worker it went to alone. Room freed or a
# worker come (";room", migration 0016) turns another controller's loop;
# a lease or an ended operation does not.
# Execs on a running sandbox are leased in their own requests and kick no
# turn of the reconcile loop.
# itest-timeout: 120
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_wake
ctl_pid='' ctl2_pid=''
stop_ctl() {
  local p
  for p in "$ctl_pid" "$ctl2_pid"; do
    if [ -n "$p" ]; then kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
  done
  ctl_pid='' ctl2_pid=''
}
trap 'rc=$?; stop_ctl; itest_drop_private_db; itest_end $rc' EXIT

port=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$port"
log="$ITEST_TMP/wake-controller.log"
itest_watch_log "$log"
"$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port" --lease-seconds 60 \
  --heartbeat-seconds 1 --worker-timeout-seconds 60 --reconcile-interval-ms 200 >>"$log" 2>&1 </dev/null &
ctl_pid=$!
itest_wait_healthz "$SANDBOX_URL" "$ctl_pid" controller "$log" || fail "controller did not start"
admin=$("$SANDBOXD" token create --database-url "$url" --tenant wake --role admin)
wtok=$("$SANDBOXD" token create --database-url "$url" --tenant wake-w --role worker)
itest_http POST /v1/workers/register "$wtok" \
  '{"name":"scripted","runtime":"docker","isolation":["container"],"labels":{},"capacity":{"cpu_millis":64000,"memory_mib":65536,"slots":64},"version":"test"}'
assert_http 200 "" register
wid=$(itest_json "$HTTP_BODY" worker.id)
itest_http POST "/v1/workers/$wid/heartbeat" "$wtok" '{"inventory":[]}'
assert_http 200 "" heartbeat

ops=()
for i in $(seq 10); do
  itest_http POST /v1/sandboxes "$admin" '{"tenant":"wake","image":"img:1","cpu_millis":100,"memory_mib":64}'
  assert_http 202 "" "create $i"
  ops+=("$(itest_json "$HTTP_BODY" operation.id)")
done
: >"$ITEST_TMP/wake-assigned"
while [ "$(wc -l <"$ITEST_TMP/wake-assigned")" -lt 10 ]; do
  itest_http GET "/v1/workers/$wid/poll?wait=10" "$wtok"
  assert_http 200 "" poll
  python3 -c 'import json, sys
for a in json.loads(sys.argv[1])["assignments"]: print(a["operation_id"], a["attempt"])' "$HTTP_BODY" \
    >>"$ITEST_TMP/wake-assigned"
done
attempt_of() { sed -n "s/^$1 //p" "$ITEST_TMP/wake-assigned" | tail -n 1; }

# Ten clients wait on the ten creates (running at the worker).
for i in $(seq 0 9); do
  curl -s --max-time 40 -H "Authorization: Bearer $admin" "$SANDBOX_URL/v1/operations/${ops[$i]}?wait=30" \
    >"$ITEST_TMP/wake-$i.json" &
  itest_track_pid $!
done
rechecked() {
  curl -s -H "Authorization: Bearer $admin" "$SANDBOX_URL/metrics" \
    | sed -n 's/^sandbox_wake_rechecked_total{kind="operation"} \([0-9.e+]*\)$/\1/p'
}
sleep 2 # all ten parked
r0=$(rechecked)
itest_http POST "/v1/workers/$wid/report" "$wtok" \
  "{\"operation_id\":\"${ops[0]}\",\"attempt\":$(attempt_of "${ops[0]}"),\"outcome\":\"succeeded\",\"runtime_ref\":\"r0\"}"
assert_http 200 "" "report of the first create"
woken() { [ "$(itest_json "$(cat "$ITEST_TMP/wake-0.json")" operation.state 2>/dev/null)" = succeeded ]; }
itest_wait_until 5 "the first waiter answered" woken
sleep 1 # the NOTIFY's wake-up too
r1=$(rechecked)
itest_log "operation waits re-checked: ${r0:-none} before, ${r1:-none} after the report"
[ -n "$r1" ] || fail "no sandbox_wake_rechecked_total metric"
python3 -c 'import sys; a, b = float(sys.argv[1] or 0), float(sys.argv[2]); sys.exit(0 if 1 <= b - a <= 3 else 1)' \
  "${r0:-0}" "$r1" || fail "one ended operation re-checked $r0 -> $r1 parked waits (not only its own)"
for i in $(seq 1 9); do
  [ ! -s "$ITEST_TMP/wake-$i.json" ] || fail "waiter $i answered before its operation ended: $(cat "$ITEST_TMP/wake-$i.json")"
done
# The others still answer when their own operation ends.
itest_http POST "/v1/workers/$wid/report" "$wtok" \
  "{\"operation_id\":\"${ops[5]}\",\"attempt\":$(attempt_of "${ops[5]}"),\"outcome\":\"failed\",\"error\":{\"code\":\"runtime_error\",\"message\":\"no\"}}"
assert_http 200 "" "report of the sixth create"
woken5() { [ "$(itest_json "$(cat "$ITEST_TMP/wake-5.json")" operation.state 2>/dev/null)" = failed ]; }
itest_wait_until 5 "the sixth waiter answered" woken5

# An exec on a running sandbox is admitted and leased in its own request
# (its 202 says leased) and kicks no turn of the reconcile loop, here nor
# through the events' NOTIFY: twenty execs run the loop's admission about
# as often as its 200 ms clock does, not once or more per exec.
sbx0=$(itest_json "$(cat "$ITEST_TMP/wake-0.json")" operation.sandbox_id)
admits() {
  curl -s -H "Authorization: Bearer $admin" "$SANDBOX_URL/metrics" \
    | sed -n 's/^sandbox_reconcile_pass_duration_seconds_count{pass="admit"} \([0-9.e+]*\)$/\1/p'
}
a0=$(admits) t0=$(date +%s%N)
for i in $(seq 20); do
  itest_http POST "/v1/sandboxes/$sbx0/exec" "$admin" '{"argv":["true"]}'
  assert_http 202 "" "exec $i"
  assert_eq leased "$(itest_json "$HTTP_BODY" operation.state)" "exec $i's state in its 202"
done
a1=$(admits) ms=$(( ($(date +%s%N) - t0) / 1000000 ))
itest_log "20 execs in $ms ms: the admit pass ran ${a0:-0} -> $a1 times"
python3 -c 'import sys; a0, a1, ms = (float(x) for x in sys.argv[1:]); sys.exit(0 if a1 - a0 <= ms / 200 + 4 else 1)' \
  "${a0:-0}" "${a1:-0}" "$ms" || fail "20 execs ran the loop's admission ${a0:-0} -> $a1 times in $ms ms (kicked per exec)"

# A lease's wake-up names its worker (migration 0018): of two workers'
# parked polls, the one the exec was leased to answers with it and is the
# only poll re-checked (a bare wake-up re-checked both); the other stays
# parked.
wtok2=$("$SANDBOXD" token create --database-url "$url" --tenant wake-w --role worker)
itest_http POST /v1/workers/register "$wtok2" \
  '{"name":"scripted2","runtime":"docker","isolation":["container"],"labels":{},"capacity":{"cpu_millis":64000,"memory_mib":65536,"slots":64},"version":"test"}'
assert_http 200 "" "register a second worker"
wid2=$(itest_json "$HTTP_BODY" worker.id)
itest_http GET "/v1/workers/$wid/poll?wait=0" "$wtok"
assert_http 200 "" "the first worker takes the twenty execs"
polls_rechecked() {
  curl -s -H "Authorization: Bearer $admin" "$SANDBOX_URL/metrics" \
    | sed -n 's/^sandbox_wake_rechecked_total{kind="poll"} \([0-9.e+]*\)$/\1/p'
}
curl -s --max-time 30 -H "Authorization: Bearer $wtok" "$SANDBOX_URL/v1/workers/$wid/poll?wait=20" \
  >"$ITEST_TMP/poll-1.json" &
itest_track_pid $!
curl -s --max-time 30 -H "Authorization: Bearer $wtok2" "$SANDBOX_URL/v1/workers/$wid2/poll?wait=20" \
  >"$ITEST_TMP/poll-2.json" &
itest_track_pid $!
sleep 1 # both parked
p0=$(polls_rechecked)
itest_http POST "/v1/sandboxes/$sbx0/exec" "$admin" '{"argv":["true"]}'
assert_http 202 "" "an exec for the first worker"
xid=$(itest_json "$HTTP_BODY" operation.id)
got_exec() { grep -q "$xid" "$ITEST_TMP/poll-1.json"; }
itest_wait_until 5 "the first worker's parked poll got the exec" got_exec
sleep 1 # any other wake-up too
p1=$(polls_rechecked)
itest_log "worker polls re-checked: ${p0:-none} before, ${p1:-none} after the lease"
[ ! -s "$ITEST_TMP/poll-2.json" ] || fail "the other worker's poll answered: $(cat "$ITEST_TMP/poll-2.json")"
python3 -c 'import sys; a, b = float(sys.argv[1] or 0), float(sys.argv[2] or 0); sys.exit(0 if b - a == 1 else 1)' \
  "${p0:-0}" "${p1:-0}" || fail "one lease re-checked ${p0:-0} -> ${p1:-0} parked polls (not only its worker's)"

# ";room" turns another controller's loop. Controller b shares the database
# and has a 600 s clock, so its loop turns only when kicked: none of its own
# requests do (it gets none), and of the wake-ups only ";room" (a worker
# came, room was freed) or one it cannot read. A lease, an admitted create
# and an ended operation leave it still; a worker registering on controller
# a turns it within the second.
port2=$(itest_free_port)
log2="$ITEST_TMP/wake-controller-b.log"
itest_watch_log "$log2"
"$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port2" --lease-seconds 60 \
  --heartbeat-seconds 1 --worker-timeout-seconds 60 --reconcile-interval-ms 600000 >>"$log2" 2>&1 </dev/null &
ctl2_pid=$!
itest_wait_healthz "http://127.0.0.1:$port2" "$ctl2_pid" "controller b" "$log2" || fail "controller b did not start"
rounds_b() {
  curl -s -H "Authorization: Bearer $admin" "http://127.0.0.1:$port2/metrics" \
    | sed -n 's/^sandbox_reconcile_round_duration_seconds_count \([0-9.e+]*\)$/\1/p'
}
b_started() { python3 -c 'import sys; sys.exit(0 if float(sys.argv[1] or 0) >= 1 else 1)' "$(rounds_b)"; }
itest_wait_until 10 "controller b's first reconcile round" b_started
sleep 1 # its LISTEN on too
b0=$(rounds_b)
itest_http POST "/v1/sandboxes/$sbx0/exec" "$admin" '{"argv":["true"]}'
assert_http 202 "" "an exec on controller a (a lease)"
itest_http POST "/v1/workers/$wid/report" "$wtok" \
  "{\"operation_id\":\"${ops[1]}\",\"attempt\":$(attempt_of "${ops[1]}"),\"outcome\":\"succeeded\",\"runtime_ref\":\"r1\"}"
assert_http 200 "" "a create's report on controller a (an ended operation)"
itest_http POST /v1/sandboxes "$admin" '{"tenant":"wake","image":"img:1","cpu_millis":100,"memory_mib":64,"selector":{"zone":"b"}}'
assert_http 202 "" "a create no worker matches (it waits admitted)"
zid=$(itest_json "$HTTP_BODY" operation.id)
sleep 1.5 # their wake-ups reached b
b1=$(rounds_b)
itest_log "controller b's loop: $b0 rounds before, $b1 after a lease, an ended create and an admitted one"
assert_eq "$b0" "$b1" "controller b's rounds after wake-ups without ;room"
wtok3=$("$SANDBOXD" token create --database-url "$url" --tenant wake-w --role worker)
itest_http POST /v1/workers/register "$wtok3" \
  '{"name":"scripted3","runtime":"docker","isolation":["container"],"labels":{"zone":"b"},"capacity":{"cpu_millis":64000,"memory_mib":65536,"slots":64},"version":"test"}'
assert_http 200 "" "a worker registers on controller a"
b_turned() { [ "$(rounds_b)" != "$b1" ]; }
itest_wait_until 3 "controller b's loop turned on the ;room wake-up" b_turned
itest_log "controller b's loop: $(rounds_b) rounds after the registration"
placed() {
  itest_http GET "/v1/operations/$zid" "$admin"
  [ "$(itest_json "$HTTP_BODY" operation.state)" = leased ]
}
itest_wait_until 5 "the waiting create placed on the new worker" placed
echo "an ended operation wakes its own waiters only, a lease its worker's poll only; execs are placed on their request; ;room turns another controller's loop"
