#!/usr/bin/env bash
# A restarted worker (same name, so the same worker id) gets every new
# operation: nothing is handed to the long-poll of the process that stopped
# (docs/worker.md: restarted, it re-registers and continues). A poll whose
# answer is lost on the way (lost_answer_proxy.py) costs its exec nothing:
# it runs once, at once, not worker_lost at its lease's expiry.
# itest-standalone
# itest-after-shared: its lost-answer timings failed once beside the shared tests (a poll answered 503)
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

db="itest_restart_$$"
"$ITEST_PGBIN/psql" -X -q "$DATABASE_URL" -c "CREATE DATABASE $db"
dburl="${DATABASE_URL%/*}/$db"
assert_exit 0 "$SANDBOXD" migrate --database-url "$dburl"

clog="$ITEST_TMP/restart-controller-$$.log"
wlog="$ITEST_TMP/restart-worker-$$.log"
itest_watch_log "$clog"
itest_watch_log "$wlog"
port=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$port"
"$SANDBOXD" controller --database-url "$dburl" --listen "127.0.0.1:$port" >>"$clog" 2>&1 </dev/null &
cpid=$!
itest_track_pid "$cpid"
itest_wait_healthz "$SANDBOX_URL" "$cpid" controller "$clog" || fail "controller did not come up"

ITEST_ADMIN_TOKEN=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-restart --role admin)
export ITEST_ADMIN_TOKEN SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
wtoken=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-restart --role worker)
wname=itest-restart-worker

start_worker() {
  SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=64000 SANDBOX_WORKER_MEMORY_MIB=262144 \
    "$SANDBOXD" worker --controller-url "${1:-$SANDBOX_URL}" --worker-name "$wname" \
    >>"$wlog" 2>&1 </dev/null &
  wpid=$!
  itest_track_pid "$wpid"
  itest_wait_until 60 "worker $wname ready" itest_worker_ready "$wname"
}

start_worker
assert_exit 0 timeout 120 "$SANDBOX_CLI" create --tenant itest-restart --image "$ITEST_IMAGE" --wait --timeout 100
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"

# restart the worker while its previous long-poll (wait up to 30 s) would
# still be parked, then run operations: each must finish promptly
rc=0
itest_stop_pid "$wpid" worker 30 || rc=$?
assert_eq 0 "$rc" "worker exit status after SIGTERM"
start_worker
# An exec handed to the stopped process's parked long-poll would only come
# back after its 30 s lease expired: each must take well under that.
for i in 1 2 3 4 5; do
  t0=$(date +%s%N)
  assert_exit 0 timeout 45 "$SANDBOX_CLI" exec "$sbx" -- echo "after restart $i"
  ms=$((($(date +%s%N) - t0) / 1000000))
  assert_eq "after restart $i" "$ITEST_OUT" "exec $i after the worker restart"
  [ "$ms" -lt 10000 ] || fail "exec $i after the worker restart took $ms ms (a lease expiry, not a prompt answer)"
  itest_log "exec $i after the restart: $ms ms"
done

# ---- a poll's answer lost on the way, as when the controller dies between
# the claim's commit and the write: the worker never got the exec, and its
# next poll names the poll that got no answer; the exec is handed out again
pport=$(itest_free_port)
arm="$ITEST_TMP/lost-arm-$$"
plog="$ITEST_TMP/lost-proxy-$$.log"
python3 "$(dirname "$0")/lost_answer_proxy.py" "$pport" "$port" "$arm" "$plog" >"$plog.out" 2>&1 </dev/null &
itest_track_pid "$!"
itest_wait_until 10 "the proxy" grep -q ready "$plog.out"
itest_stop_pid "$wpid" worker 30 || fail "the worker did not stop"
start_worker "http://127.0.0.1:$pport"
# close: libcurl sends the same poll again; cut: the poll fails and the
# worker's next poll names it (poll?…&unanswered=ID)
n=0
for mode in close cut; do
  n=$((n + 1))
  echo "$mode" >"$arm"
  t0=$(date +%s%N)
  assert_exit 0 timeout 60 "$SANDBOX_CLI" exec "$sbx" -- sh -c 'echo ran >>/tmp/lost.log && wc -l </tmp/lost.log'
  ms=$((($(date +%s%N) - t0) / 1000000))
  [ ! -e "$arm" ] || fail "the proxy lost no answer ($mode: still armed)"
  lop=$(sed -n "s/^lost ($mode) the answer handing out //p" "$plog")
  assert_match "$lop" '^op_' "the operation whose answer was lost ($mode)"
  assert_eq "$n" "$ITEST_OUT" "times the execs ran ($mode)"
  [ "$ms" -lt 15000 ] || fail "the exec whose answer was lost ($mode) took $ms ms (its lease's expiry, not the next poll)"
  itest_log "an exec whose poll answer was lost ($mode, $lop): $ms ms"
done
assert_eq 2 "$(grep -c "got no answer to a poll: 1 operations it never started handed out again" "$clog")" \
  "the controller's log lines for the two lost answers"
assert_contains "$(cat "$wlog")" "failed to poll the controller" "the worker's log after the cut answer"
assert_exit 0 timeout 60 "$SANDBOX_CLI" delete "$sbx" --wait --timeout 50
