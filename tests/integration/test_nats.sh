#!/usr/bin/env bash
# The NATS publisher, against a real nats-server on a private port: a
# subscriber receives a lifecycle's events in id order with the right
# subjects and payload; nats-server killed during a burst: every operation
# finishes, the state is exact, and the backlog arrives once it is back; of
# two controllers one leads and the other takes over after kill -9 with no
# id missing; a restart neither skips nor floods; a bad nats_url does not
# stop the API.
# itest-timeout: 150
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
here=$(cd "$(dirname "$0")" && pwd)
tenant=$(itest_tenant itest-nats)
itest_as_admin "$tenant"

psql_q() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }
# The sandbox CLI against one controller.
on() {
  local url=$1
  shift
  SANDBOX_URL=$url "$SANDBOX_CLI" "$@"
}
now_ms() { date +%s%3N; }

natsd=$(command -v nats-server 2>/dev/null || true)
for c in /usr/sbin/nats-server /usr/bin/nats-server; do
  if [ -z "$natsd" ] && [ -x "$c" ]; then natsd=$c; fi
done
[ -n "$natsd" ] || fail "nats-server is not installed (apt-get install nats-server)"
ndir=$(mktemp -d "$ITEST_TMP/nats.XXXXXX")
nport=$(itest_free_port)
nats_url="nats://127.0.0.1:$nport"
msgs="$ndir/msgs.jsonl"
NATS_PID=
CTL_PIDS=()

nats_start() {
  local i
  (cd "$ndir" && exec "$natsd" -a 127.0.0.1 -p "$nport") >>"$ndir/nats-server.log" 2>&1 </dev/null &
  NATS_PID=$!
  for ((i = 0; i < 100; i++)); do
    if python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2).close()' \
      "$nport" 2>/dev/null; then
      return 0
    fi
    if ! kill -0 "$NATS_PID" 2>/dev/null; then
      itest_log_tail "$ndir/nats-server.log" 0 20
      fail "nats-server ($natsd) could not start on 127.0.0.1:$nport (its log is above)"
    fi
    sleep 0.1
  done
  fail "nats-server ($natsd) did not listen on 127.0.0.1:$nport within 10 s"
}
nats_kill() {
  if [ -n "$NATS_PID" ]; then
    kill -9 "$NATS_PID" 2>/dev/null || true
    wait "$NATS_PID" 2>/dev/null || true
    NATS_PID=
  fi
}
# a controller left frozen by a failed step must still stop at the end
thaw_all() {
  local p
  for p in "${CTL_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null || true; done
}
itest_on_exit nats_kill
itest_on_exit thaw_all
itest_watch_log "$ndir/nats-server.log"

# ctl_start NAME NATS_URL: a controller of our own on the shared database;
# sets CTL_PID, CTL_URL, CTL_LOG.
ctl_start() {
  local port
  port=$(itest_free_port)
  CTL_LOG="$ndir/controller-$1.log"
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$port" --route-listen 127.0.0.1:0 \
    --nats-url "$2" >>"$CTL_LOG" 2>&1 </dev/null &
  CTL_PID=$!
  CTL_URL="http://127.0.0.1:$port"
  CTL_PIDS+=("$CTL_PID")
  itest_track_pid "$CTL_PID"
  itest_watch_log "$CTL_LOG"
  itest_wait_healthz "$CTL_URL" "$CTL_PID" "controller $1" "$CTL_LOG" || fail "controller $1 did not start"
}
leads() { grep -q "publishing events to NATS as the leader" "$1"; }

# The subscriber: status "connected N" after its N-th subscription.
sub_field() { # 1: state, 2: generation
  local s
  s=$(cat "$ndir/sub.status" 2>/dev/null || echo "down 0")
  if [ "$1" = 1 ]; then echo "${s%% *}"; else echo "${s#* }"; fi
}
sub_connected_after() { [ "$(sub_field 1)" = connected ] && [ "$(sub_field 2)" -gt "$1" ]; }
db_ids_after() { psql_q "SELECT id FROM events WHERE id > $1 ORDER BY id" >"$ndir/ids"; }
# sub_has_all FROM: every event the database holds after FROM was received
sub_has_all() {
  db_ids_after "$1"
  python3 "$here/nats_sub.py" missing "$msgs" "$ndir/ids" "$1"
}
# check_window FROM MAX_DUPS: in order, none missing, at most MAX_DUPS again
check_window() {
  local out
  db_ids_after "$1"
  out=$(python3 "$here/nats_sub.py" check "$msgs" "$ndir/ids" "$1" "$2") || fail "events on NATS after $1: $out"
  itest_log "NATS: $out"
}

# lifecycle URL N: create, three execs, delete through one controller; its
# outcome goes to $ndir/life.N ("sbx ID" first, "ok" last).
lifecycle() {
  local url=$1 n=$2 out sbx k
  {
    out=$(on "$url" create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 --wait \
      --timeout 90) || { echo "create failed"; exit 1; }
    sbx=${out%% *}
    echo "sbx $sbx"
    for k in 1 2 3; do
      out=$(on "$url" exec "$sbx" -- echo "life-$n-$k") || { echo "exec $k failed"; exit 1; }
      [ "$out" = "life-$n-$k" ] || { echo "exec $k printed [$out]"; exit 1; }
    done
    on "$url" delete "$sbx" --wait --timeout 90 >/dev/null || { echo "delete failed"; exit 1; }
    echo ok
  } >"$ndir/life.$n" 2>&1
}
# api_ok URL WHEN: five GET /v1/sandboxes answer 200, each within 2 s
api_ok() {
  local i out code secs worst=0
  for i in 1 2 3 4 5; do
    out=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 10 \
      -H "Authorization: Bearer $ITEST_ADMIN_TOKEN" "$1/v1/sandboxes") || true
    read -r code secs <<<"$out"
    [ "$code" = 200 ] || fail "GET /v1/sandboxes $2 answered ${code:-nothing}"
    worst=$(python3 -c 'import sys; print(max(float(sys.argv[1]), float(sys.argv[2])))' "$worst" "$secs")
  done
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 2 else 1)' "$worst" \
    || fail "GET /v1/sandboxes took up to $worst s $2"
  itest_log "GET /v1/sandboxes $2: 5 answers, slowest $worst s"
}
life_started() { grep -q '^sbx ' "$ndir/life.$1" 2>/dev/null; }
life_wait() { # PID N
  wait "$1" || fail "lifecycle $2 failed: $(cat "$ndir/life.$2")"
  itest_track "$(sed -n 's/^sbx //p' "$ndir/life.$2")"
}

# ---------------------------------------------------------------- a. a lifecycle, in order
was_null=$(psql_q "SELECT last_event_id IS NULL FROM event_publisher")
before=$(psql_q "SELECT coalesce(max(id), 0) FROM events")
# (not lib.sh's python3 function: $! must be the subscriber itself, so the
# test's end stops it)
pybin=/usr/bin/python3
[ -x "$pybin" ] || pybin=$(command -v python3)
"$pybin" "$here/nats_sub.py" sub 127.0.0.1 "$nport" 'sandbox.events.>' "$msgs" "$ndir/sub.status" \
  >>"$ndir/sub.log" 2>&1 </dev/null &
itest_track_pid $!
nats_start
itest_wait_until 10 "the subscriber to subscribe" sub_connected_after 0

ctl_start a "$nats_url"
A_PID=$CTL_PID A_URL=$CTL_URL A_LOG=$CTL_LOG
itest_wait_until 10 "controller a to lead the publishing" leads "$A_LOG"
start=$(psql_q "SELECT last_event_id FROM event_publisher")
if [ "$was_null" = t ] && [ "$start" -lt "$before" ]; then
  fail "first start: the cursor starts at $start, before the newest event $before"
fi

assert_exit 0 on "$A_URL" create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --wait --timeout 90
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 on "$A_URL" exec "$sbx" -- echo hello-nats
assert_eq hello-nats "$ITEST_OUT" "exec output"
assert_exit 0 on "$A_URL" delete "$sbx" --wait --timeout 60
t0=$(now_ms)
itest_wait_until 10 "the lifecycle's events on NATS" sub_has_all "$start"
itest_log "lifecycle events all on NATS $(($(now_ms) - t0)) ms after the delete returned"
psql_q "SELECT e.id, coalesce(tn.name, ''), e.kind, coalesce(e.sandbox_id, ''), coalesce(e.operation_id, ''), e.data::text
        FROM events e LEFT JOIN tenants tn ON tn.id = e.tenant_id WHERE e.sandbox_id = '$sbx' ORDER BY e.id" >"$ndir/lifecycle.rows"
python3 - "$msgs" "$ndir/lifecycle.rows" "$before" "$was_null" <<'EOF' || fail "lifecycle events on NATS (see above)"
import datetime, json, re, sys
msgs = [json.loads(l) for l in open(sys.argv[1]).read().split("\n")[:-1] if l.strip()]
rows = [l.split("|", 5) for l in open(sys.argv[2]).read().split("\n") if l]
before, was_null = int(sys.argv[3]), sys.argv[4] == "t"
first = {}
for m in msgs:
    first.setdefault(m["event"]["id"], m)
order = [m["event"]["id"] for m in msgs if m["event"]["id"] in {int(r[0]) for r in rows}]
dedup = list(dict.fromkeys(order))
ok = True
def bad(msg):
    global ok
    ok = False
    print(msg)
if dedup != sorted(dedup) or dedup != [int(r[0]) for r in rows]:
    bad("lifecycle ids arrived as %s, the database holds %s" % (dedup, [int(r[0]) for r in rows]))
kinds = [r[2] for r in rows]
for need in ("sandbox.pending", "operation.pending", "operation.succeeded"):
    if need not in kinds:
        bad("no %s among the lifecycle's events %s" % (need, kinds))
lags = []
for r in rows:
    i, tenant, kind, sbx, op, data = int(r[0]), r[1], r[2], r[3], r[4], r[5]
    m = first.get(i)
    if m is None:
        bad("event %d never arrived" % i)
        continue
    e = m["event"]
    subj = "sandbox.events.%s.%s" % (re.sub(r"[^A-Za-z0-9_-]", "_", tenant) if tenant else "_system", kind)
    if m["subject"] != subj:
        bad("event %d: subject %s, expected %s" % (i, m["subject"], subj))
    want = {"id": i, "tenant": tenant or None, "kind": kind, "sandbox_id": sbx or None,
            "operation_id": op or None, "data": json.loads(data)}
    for k, v in want.items():
        if e.get(k) != v:
            bad("event %d: %s is %r, expected %r" % (i, k, e.get(k), v))
    if set(e) != set(want) | {"ts"}:
        bad("event %d: fields %s" % (i, sorted(e)))
    if not re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$", e.get("ts", "")):
        bad("event %d: ts %r is not RFC 3339 UTC" % (i, e.get("ts")))
    else:
        ts = datetime.datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
        lags.append(m["t"] - ts.timestamp())
if was_null:
    early = sorted({m["event"]["id"] for m in msgs if m["event"]["id"] <= before})
    if early:
        bad("first start flooded NATS with history: %s" % early[:10])
lags.sort()
if lags:
    print("from each event's transaction start to the subscriber: median %.0f ms, max %.0f ms"
          % (lags[len(lags) // 2] * 1000, lags[-1] * 1000))
    # A publisher that slept on a notification already queued in libpq held
    # events back for its 1 s idle wait (seen at 0.5-1 s under load).
    if lags[-1] > 0.6:
        bad("an event reached NATS %.0f ms after its transaction began (limit 600 ms)" % (lags[-1] * 1000))
print("%d lifecycle events, kinds %s" % (len(rows), " ".join(kinds)))
sys.exit(0 if ok else 1)
EOF
check_window "$start" 0

# ---------------------------------------------------------------- b. NATS down during a burst
pids=()
for n in 1 2 3 4; do
  lifecycle "$A_URL" "$n" &
  pids+=($!)
done
itest_wait_until 90 "a sandbox of the burst created" life_started 1
# First freeze it: a flush then times out (nothing acknowledged, the cursor
# stays); then kill it.
itest_log "freeze nats-server during the burst, then kill -9 it"
kill -STOP "$NATS_PID"
sleep 2.5
nats_kill
api_ok "$A_URL" "while NATS was down"
for n in 1 2 3 4; do
  life_wait "${pids[$((n - 1))]}" "$n"
done
for n in 1 2 3 4; do
  assert_exit 0 on "$A_URL" get "$(sed -n 's/^sbx //p' "$ndir/life.$n")" --json
  assert_eq deleted "$(itest_json "$ITEST_OUT" sandbox.phase)" "sandbox $n of the burst"
done
assert_eq "succeeded|23" "$(psql_q "SELECT o.state, count(*) FROM operations o JOIN tenants t ON t.id = o.tenant_id
  WHERE t.name = '$tenant' GROUP BY o.state")" "every operation of the tenant"
itest_wait_until 10 "controller a to notice NATS is down" grep -q "is unreachable" "$A_LOG"
grep "is unreachable" "$A_LOG" >&2

# Bring NATS back with the subscriber subscribed before the publisher can
# publish again (the server keeps nothing for absent subscribers): freeze
# controller a, start nats-server, wait for the subscription, thaw it.
gen=$(sub_field 2)
kill -STOP "$A_PID"
nats_start
itest_wait_until 10 "the subscriber to subscribe again" sub_connected_after "$gen"
kill -CONT "$A_PID"
t0=$(now_ms)
itest_wait_until 20 "the backlog on NATS" sub_has_all "$start"
itest_log "backlog on NATS $(($(now_ms) - t0)) ms after the publisher could reach it again"
check_window "$start" 500
itest_wait_until 10 "controller a to say NATS is back" grep -q "is back after" "$A_LOG"
grep "is back after" "$A_LOG" >&2

# ---------------------------------------------------------------- c. two controllers, one leader
ctl_start b "$nats_url"
B_PID=$CTL_PID B_URL=$CTL_URL B_LOG=$CTL_LOG
itest_wait_until 10 "controller b to stand by" grep -q "standing by" "$B_LOG"
sleep 1.5
if leads "$B_LOG"; then fail "controller b leads while controller a does"; fi
assert_eq 1 "$(grep -c "publishing events to NATS as the leader" "$A_LOG")" "leader lines of controller a"
lifecycle "$B_URL" 5 &
lpid=$!
itest_wait_until 60 "a sandbox created through controller b" life_started 5
itest_log "kill -9 controller a, the leader"
kill -9 "$A_PID"
wait "$A_PID" 2>/dev/null || true
t0=$(now_ms)
itest_wait_until 15 "controller b to take over" leads "$B_LOG"
itest_log "controller b took over $(($(now_ms) - t0)) ms after the leader died"
life_wait "$lpid" 5
itest_wait_until 20 "every event on NATS across the handover" sub_has_all "$start"
check_window "$start" 1000

# ---------------------------------------------------------------- d. a restart neither skips nor floods
rc=0
itest_stop_pid "$B_PID" "controller b" 10 || rc=$?
assert_eq 0 "$rc" "controller b's exit status after SIGTERM"
stopped_at=$(psql_q "SELECT last_event_id FROM event_publisher")
lines=$(wc -l <"$msgs")
# events while no publisher runs wait for the next one
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --wait --timeout 90
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
ctl_start c "$nats_url"
C_PID=$CTL_PID C_URL=$CTL_URL C_LOG=$CTL_LOG
itest_wait_until 10 "controller c to lead" leads "$C_LOG"
assert_exit 0 on "$C_URL" exec "$sbx" -- echo after-restart
assert_exit 0 on "$C_URL" delete "$sbx" --wait --timeout 60
itest_wait_until 20 "every event on NATS across the restart" sub_has_all "$start"
check_window "$start" 1000
again=$(tail -n +"$((lines + 1))" "$msgs" | python3 -c '
import json, sys
print(sum(1 for l in sys.stdin if l.strip() and json.loads(l)["event"]["id"] <= int(sys.argv[1])))' "$stopped_at")
itest_log "after the restart, $again event(s) at or before the cursor $stopped_at were sent again"
[ "$again" -le 500 ] || fail "the restart sent $again old events again (at most one batch of 500 allowed)"

# ---------------------------------------------------------------- e. a bad nats_url does not stop the API
t0=$(now_ms)
rc=0
itest_stop_pid "$C_PID" "controller c" 10 || rc=$?
assert_eq 0 "$rc" "controller c's exit status after SIGTERM"
itest_log "controller c stopped in $(($(now_ms) - t0)) ms"
ctl_start d "nats://itest:s3cret-pw@127.0.0.1:1"
D_PID=$CTL_PID D_URL=$CTL_URL D_LOG=$CTL_LOG
itest_wait_until 10 "controller d to lead" leads "$D_LOG"
itest_wait_until 10 "controller d to find NATS unreachable" grep -q "is unreachable" "$D_LOG"
api_ok "$D_URL" "with an unreachable NATS"
assert_exit 0 on "$D_URL" create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --wait --timeout 90
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 on "$D_URL" delete "$sbx" --wait --timeout 60
assert_not_contains "$(cat "$D_LOG")" "s3cret-pw" "controller d's log"
assert_contains "$(cat "$D_LOG")" "nats://***@127.0.0.1:1" "controller d's log (redacted URL)"
t0=$(now_ms)
rc=0
itest_stop_pid "$D_PID" "controller d" 10 || rc=$?
took=$(($(now_ms) - t0))
assert_eq 0 "$rc" "controller d's exit status after SIGTERM"
[ "$took" -lt 3000 ] || fail "controller d took $took ms to stop while retrying NATS"
itest_log "controller d (NATS unreachable) stopped in $took ms"
