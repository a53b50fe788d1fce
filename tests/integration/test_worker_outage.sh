#!/usr/bin/env bash
# A worker's restart, upgrade or outage loses nothing (issue 29). Three
# workers of one controller each hold a sandbox with a file and a process
# counting once a second; then, for 60 s, one is stopped with SIGTERM (it
# says it is restarting), one is killed (SIGKILL), and one is cut off from
# the controller while it runs (a partition: the relay it reaches the
# controller through is stopped). Meanwhile their sandboxes are `running`
# and shown unreachable (sandbox get, list), execs, copies and routes are
# refused with 503 naming why, nothing new is placed there, their capacity
# stays taken, and a delete waits (deleting). When the workers are back,
# the same sandboxes are running, with their files and processes that kept
# counting, routes answer again and the waiting delete completes. Then,
# with a grace of 4 s, a worker that stays away makes its sandbox lost
# (capacity released, route removed) and its return removes the container.
# itest-standalone
# itest-cost: 285
# itest-waits: a minute of it is workers kept away
# itest-timeout: 300
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_outage
assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
sql() { "$ITEST_PGBIN/psql" -X -q -At "$url" -c "$1"; }
clog="$ITEST_TMP/outage-controller-$$.log"
itest_watch_log "$clog"
port=$(itest_free_port)
rport=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$port"
ctl_pid=
# start_ctl LOST_AFTER: the controller, a worker timeout of 8 s (a stopped
# worker says so at once: "restarting" before that) and the grace given
start_ctl() {
  "$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" \
    --heartbeat-seconds 1 --worker-timeout-seconds 8 --worker-lost-after-seconds "$1" --lease-seconds 10 \
    --reconcile-interval-ms 300 >>"$clog" 2>&1 </dev/null &
  ctl_pid=$!
  itest_track_pid "$ctl_pid"
  itest_wait_healthz "$SANDBOX_URL" "$ctl_pid" controller "$clog" || fail "controller did not start"
}
start_ctl 300
tenant=itest-outage
ITEST_ADMIN_TOKEN=$("$SANDBOXD" token create --database-url "$url" --tenant "$tenant" --role admin)
export ITEST_ADMIN_TOKEN SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN

relay_pid=
cleanup() {
  [ -z "$relay_pid" ] || kill -CONT "$relay_pid" 2>/dev/null || true
  itest_delete_tracked
  # what a lost worker left behind, should the test stop half way
  local id cids
  for id in $(sql "SELECT id FROM sandboxes" 2>/dev/null || true); do
    cids=$(docker ps -aq --filter "label=dev.sandbox.id=$id" 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$cids" ] || docker rm -f $cids >/dev/null 2>&1 || true
  done
  itest_drop_private_db
}
itest_on_exit cleanup

declare -A wpid wtok wlog wport
# start_worker ROLE [CONTROLLER_URL]: worker outage-ROLE (label role=ROLE)
start_worker() {
  local role=$1 name="outage-$1"
  if [ -z "${wtok[$role]:-}" ]; then
    wtok[$role]=$("$SANDBOXD" token create --database-url "$url" --tenant "$tenant" --role worker --name "$name")
    printf '%s\n' "${wtok[$role]}" >>"$ITEST_TMP/secrets.txt"
  fi
  [ -n "${wport[$role]:-}" ] || wport[$role]=$(itest_free_port)
  wlog[$role]="$ITEST_TMP/outage-worker-$role-$$.log"
  itest_watch_log "${wlog[$role]}"
  SANDBOX_WORKER_TOKEN="${wtok[$role]}" SANDBOX_WORKER_LABELS="role=$role" SANDBOX_WORKER_OPEN_NETWORK='' \
    SANDBOX_WORKER_GVISOR_RUNTIME='' SANDBOX_WORKER_CPU_MILLIS=8000 SANDBOX_WORKER_MEMORY_MIB=8192 \
    "$SANDBOXD" worker --controller-url "${2:-$SANDBOX_URL}" --listen "127.0.0.1:${wport[$role]}" \
    --worker-name "$name" --docker-socket /var/run/docker.sock >>"${wlog[$role]}" 2>&1 </dev/null &
  wpid[$role]=$!
  itest_track_pid "${wpid[$role]}"
}
wstate() { sql "SELECT state || coalesce(' ' || unreachable_reason, '') FROM workers WHERE name = 'outage-$1'"; }
is_ready() { [ "$(wstate "$1")" = ready ]; }

# the partitioned worker reaches the controller through a relay
pport=$(itest_free_port)
# (the interpreter itself, not lib.sh's python3 function: $! must be the
# process SIGSTOP freezes)
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
"$py" "$(dirname "$0")/tcp_relay.py" "$pport" "$port" >"$ITEST_TMP/outage-relay-$$.out" 2>&1 </dev/null &
relay_pid=$!
itest_track_pid "$relay_pid"
itest_wait_until 10 "the relay" grep -q ready "$ITEST_TMP/outage-relay-$$.out"
start_worker term
start_worker kill
start_worker part "http://127.0.0.1:$pport"
for r in term kill part; do itest_wait_until 60 "worker outage-$r ready" is_ready "$r"; done

declare -A sbx
for r in term kill part; do
  assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
    --selector "role=$r" --wait --timeout 120
  read -r sbx[$r] _ <<<"$ITEST_OUT"
  itest_track "${sbx[$r]}"
  assert_exit 0 sandbox exec "${sbx[$r]}" -- sh -c "echo kept-$r >/tmp/kept && mkdir -p /tmp/w && echo alive-$r >/tmp/w/index.html && httpd -p 8080 -h /tmp/w"
  assert_exit 0 itest_counter_start "${sbx[$r]}"
done
# one more on the killed worker, deleted while it is away
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --selector role=kill --wait --timeout 120
read -r doomed _ <<<"$ITEST_OUT"
itest_track "$doomed"
assert_exit 0 sandbox share "${sbx[term]}" --port 8080 --auth public --json
route=$(itest_json "$ITEST_OUT" route.url)
assert_eq alive-term "$(curl -s --max-time 10 "$route")" "the route before the outage"
count() { itest_counter "${sbx[$1]}"; } # count ROLE: the counter in its sandbox
declare -A before
for r in term kill part; do
  itest_wait_until 10 "the counter of ${sbx[$r]}" count "$r"
  before[$r]=$(count "$r") || fail "cannot read the counter of ${sbx[$r]}"
done
slots() { sql "SELECT alloc_slots FROM workers WHERE name = 'outage-$1'"; }
assert_eq 2 "$(slots kill)" "the killed worker's slots before the outage"

# ---- the outage: 60 s
t0=$(date +%s)
itest_stop_pid "${wpid[term]}" "worker outage-term" 30 || fail "worker outage-term did not stop on SIGTERM"
kill -KILL "${wpid[kill]}"
wait "${wpid[kill]}" 2>/dev/null || true
kill -STOP "$relay_pid"
# SIGTERM: it said it stopped, restarting, before any heartbeat is missed
assert_eq "unreachable restarting" "$(wstate term)" "the worker stopped with SIGTERM, at once"
silent() { [ "$(wstate "$1")" = "unreachable no heartbeat" ]; }
itest_wait_until 30 "the killed worker unreachable" silent kill
itest_wait_until 30 "the cut-off worker unreachable" silent part

for r in term kill part; do
  assert_exit 0 sandbox get "${sbx[$r]}" --json
  assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "the phase of ${sbx[$r]} while its worker is away"
  assert_eq "outage-$r" "$(itest_json "$ITEST_OUT" sandbox.unreachable.worker)" "unreachable.worker of ${sbx[$r]}"
  itest_json "$ITEST_OUT" sandbox.unreachable.lost_at >/dev/null || fail "no unreachable.lost_at: $ITEST_OUT"
  assert_exit 3 sandbox exec "${sbx[$r]}" -- true
  assert_contains "$ITEST_ERR" "unavailable" "an exec while its worker is away"
  assert_contains "$ITEST_ERR" "outage-$r is unreachable" "the exec's refusal names the worker"
done
assert_exit 0 sandbox get "${sbx[term]}"
assert_contains "$ITEST_OUT" "running (unreachable)" "sandbox get's phase"
assert_contains "$ITEST_OUT" "worker outage-term restarting since" "sandbox get's unreachable line"
assert_exit 0 sandbox list
assert_contains "$ITEST_OUT" "running (unreachable)" "sandbox list's phase"
assert_exit 0 sandbox workers list
assert_contains "$ITEST_OUT" "outage-kill unreachable" "workers list"
assert_contains "$ITEST_OUT" "unreachable: no heartbeat since" "workers list's unreachable line"
echo hi >"$ITEST_TMP/outage-hi-$$"
assert_exit 3 sandbox cp "$ITEST_TMP/outage-hi-$$" "${sbx[kill]}:/tmp/hi"
assert_contains "$ITEST_ERR" "unreachable" "a copy while its worker is away"
code=$(curl -s -o "$ITEST_TMP/outage-route-$$" -w '%{http_code}' --max-time 10 "$route" || true)
assert_eq 503 "$code" "the route while its worker is away"
assert_contains "$(cat "$ITEST_TMP/outage-route-$$")" "unreachable" "the route's 503 says why"
assert_eq 2 "$(slots kill)" "the away worker's capacity stays taken"
# nothing new goes there
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --selector role=term
read -r waiting _ <<<"$ITEST_OUT"
itest_track "$waiting"
sleep 3
assert_eq "pending" "$(sql "SELECT phase || coalesce(worker_id, '') FROM sandboxes WHERE id = '$waiting'")" \
  "a create for an away worker's label is not placed"
assert_exit 0 sandbox delete "$waiting"
# a delete waits for the worker (deleting)
assert_exit 0 sandbox delete "$doomed"
assert_eq deleting "$(sql "SELECT phase FROM sandboxes WHERE id = '$doomed'")" "a deleted sandbox of an away worker"
assert_eq 1 "$(sql "SELECT count(*) FROM events WHERE kind = 'worker.unreachable' AND data->>'worker' = 'outage-term' AND data->>'reason' = 'restarting'")" "the worker.unreachable event"
assert_eq 1 "$(sql "SELECT count(*) FROM events WHERE kind = 'sandbox.unreachable' AND sandbox_id = '${sbx[part]}'")" "the sandbox.unreachable event"

left=$((60 - ($(date +%s) - t0)))
[ "$left" -le 0 ] || sleep "$left"
start_worker term
start_worker kill
kill -CONT "$relay_pid"
for r in term kill part; do itest_wait_until 60 "worker outage-$r ready again" is_ready "$r"; done
itest_log "the workers were away for $(($(date +%s) - t0)) s"

for r in term kill part; do
  assert_exit 0 sandbox get "${sbx[$r]}" --json
  assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "the phase of ${sbx[$r]} after its worker is back"
  ! itest_json "$ITEST_OUT" sandbox.unreachable >/dev/null 2>&1 || fail "still unreachable: $ITEST_OUT"
  itest_wait_until 30 "an exec in ${sbx[$r]} after its worker is back" count "$r"
  assert_exit 0 sandbox exec "${sbx[$r]}" -- cat /tmp/kept
  assert_eq "kept-$r" "$ITEST_OUT" "the file of ${sbx[$r]}"
  now=$(count "$r") || fail "cannot read the counter of ${sbx[$r]} after the outage"
  [ "$now" -ge $((before[$r] + 55)) ] || fail "the counter of ${sbx[$r]} went from ${before[$r]} to $now over the outage"
  itest_log "${sbx[$r]} ($r): counted ${before[$r]} -> $now"
done
route_back() { [ "$(curl -s --max-time 5 "$route")" = alive-term ]; }
itest_wait_until 30 "the route answering again" route_back
gone() { [ "$(sql "SELECT phase FROM sandboxes WHERE id = '$doomed'")" = deleted ] && [ -z "$(docker ps -aq --filter "label=dev.sandbox.id=$doomed")" ]; }
itest_wait_until 60 "the delete made while its worker was away" gone
assert_eq 1 "$(slots kill)" "the killed worker's slots after the delete"
assert_eq 0 "$(sql "SELECT count(*) FROM events WHERE kind = 'worker.lost'")" "no worker was lost"

# ---- past the grace: lost, and the return removes the container
itest_stop_pid "$ctl_pid" controller 30 || true
start_ctl 4
itest_wait_until 60 "worker outage-kill ready under the restarted controller" is_ready kill
kill -KILL "${wpid[kill]}"
wait "${wpid[kill]}" 2>/dev/null || true
lost() { [ "$(sql "SELECT w.state || ' ' || s.phase FROM workers w, sandboxes s WHERE w.name = 'outage-kill' AND s.id = '${sbx[kill]}'")" = "lost lost" ]; }
itest_wait_until 60 "the worker and its sandbox lost past the grace" lost
assert_eq 0 "$(slots kill)" "the lost worker's capacity is released"
start_worker kill
itest_wait_until 60 "worker outage-kill ready after the grace" is_ready kill
container_gone() { [ -z "$(docker ps -aq --filter "label=dev.sandbox.id=${sbx[kill]}")" ]; }
itest_wait_until 60 "the lost sandbox's container removed on the worker's return" container_gone
assert_eq running "$(sql "SELECT phase FROM sandboxes WHERE id = '${sbx[term]}'")" "the other workers' sandboxes"
echo "worker outage: SIGTERM, SIGKILL and a partition of 60 s kept 3 sandboxes (files, counters, routes); past the grace, lost and removed"
