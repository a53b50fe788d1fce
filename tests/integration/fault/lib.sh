# Fault-injection helpers: a database of the scenario's own in the run's
# PostgreSQL, controllers and a worker with short timeouts, the load driver,
# fault actions, recovery probes and the invariant audit.
# shellcheck shell=bash

FAULT_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# Short timeouts so that recovery happens within a test's time.
FAULT_LEASE=6
# (no grace past the worker timeout unless a scenario sets FAULT_LOST_AFTER:
# most are about a worker declared lost)
FAULT_OPTS=(--lease-seconds "$FAULT_LEASE" --heartbeat-seconds 1 --worker-timeout-seconds 4
            --worker-lost-after-seconds "${FAULT_LOST_AFTER:-4}" --reconcile-interval-ms 250 --max-attempts 5 --log-level info)
FAULT_CTL_PIDS=()
FAULT_CTL_PORTS=()
FAULT_WORKER_PID=
FAULT_DRIVER_PID=
FAULT_RECOVERY=()

# fault_setup NAME NCONTROLLERS: database, migrations, controllers, worker, tokens.
fault_setup() {
  local name=$1 n=${2:-1} i
  FAULT_NAME=$name
  FAULT_DIR="$ITEST_TMP/fault-$name"
  mkdir -p "$FAULT_DIR"
  FAULT_DB="fault_${name}_$RANDOM$RANDOM"
  FAULT_BASE=${DATABASE_URL%/*}
  FAULT_URL="$FAULT_BASE/$FAULT_DB"
  "$ITEST_PGBIN/psql" -X -q "$FAULT_BASE/postgres" -c "CREATE DATABASE $FAULT_DB" >/dev/null
  "$SANDBOXD" migrate --database-url "$FAULT_URL" >/dev/null
  FAULT_CLUSTER=$(fault_sql "SELECT id FROM cluster")
  for ((i = 0; i < n; i++)); do
    FAULT_CTL_PORTS[i]=$(itest_free_port)
    fault_start_controller "$i"
  done
  FAULT_URLS=$(for ((i = 0; i < n; i++)); do printf '%shttp://127.0.0.1:%s' "$([ "$i" -gt 0 ] && echo ,)" "${FAULT_CTL_PORTS[i]}"; done)
  FAULT_ADMIN=$("$SANDBOXD" token create --database-url "$FAULT_URL" --tenant fault-admin --role admin)
  FAULT_WORKER_TOKEN=$("$SANDBOXD" token create --database-url "$FAULT_URL" --tenant fault-workers --role worker)
  # the recovery probe's tenant (a create never makes one)
  SANDBOX_URL="http://127.0.0.1:${FAULT_CTL_PORTS[0]}" SANDBOX_TOKEN=$FAULT_ADMIN "$SANDBOX_CLI" tenants create fault-probe \
    >/dev/null || fail "sandbox tenants create fault-probe failed"
  : >"$FAULT_DIR/tokens"
  for t in alpha beta gamma; do
    echo "$t $("$SANDBOXD" token create --database-url "$FAULT_URL" --tenant "$t" --role member)" >>"$FAULT_DIR/tokens"
  done
  fault_start_worker
}

fault_sql() { "$ITEST_PGBIN/psql" -X -q -At "$FAULT_URL" -c "$1"; }

fault_start_controller() {
  local i=$1 log="$FAULT_DIR/controller$1.log"
  "$SANDBOXD" controller --database-url "$FAULT_URL" --listen "127.0.0.1:${FAULT_CTL_PORTS[i]}" "${FAULT_OPTS[@]}" \
    >>"$log" 2>&1 </dev/null &
  FAULT_CTL_PIDS[i]=$!
  itest_track_pid "${FAULT_CTL_PIDS[i]}"
  itest_watch_log "$log"
  itest_wait_healthz "http://127.0.0.1:${FAULT_CTL_PORTS[i]}" "${FAULT_CTL_PIDS[i]}" "controller $i" "$log" \
    || fail "controller $i did not start"
}

fault_kill_controller() { kill -KILL "${FAULT_CTL_PIDS[$1]}" 2>/dev/null || true; wait "${FAULT_CTL_PIDS[$1]}" 2>/dev/null || true; }

fault_start_worker() {
  local log="$FAULT_DIR/worker.log" i
  SANDBOX_WORKER_TOKEN="$FAULT_WORKER_TOKEN" SANDBOX_WORKER_CPU_MILLIS=64000 SANDBOX_WORKER_MEMORY_MIB=262144 \
    "$SANDBOXD" worker --controller-url "$FAULT_URLS" --worker-name "fault-$FAULT_NAME" --log-level info \
    >>"$log" 2>&1 </dev/null &
  FAULT_WORKER_PID=$!
  itest_track_pid "$FAULT_WORKER_PID"
  itest_watch_log "$log"
  for ((i = 0; i < 100; i++)); do
    [ "$(fault_sql "SELECT count(*) FROM workers WHERE name = 'fault-$FAULT_NAME' AND state = 'ready' AND last_heartbeat > now() - interval '2 seconds'")" = 1 ] && return 0
    sleep 0.2
  done
  fail "worker did not become ready"
}

fault_kill_worker() { kill -KILL "$FAULT_WORKER_PID" 2>/dev/null || true; wait "$FAULT_WORKER_PID" 2>/dev/null || true; }

# Starts the load driver in the background (summary in $FAULT_DIR/summary.json).
fault_burst_start() {
  python3 "$FAULT_HERE/driver.py" --urls "$FAULT_URLS" --tokens "$FAULT_DIR/tokens" --image "$ITEST_IMAGE" \
    --sandboxes "${FAULT_SANDBOXES:-45}" --execs 3 --concurrency 6 --deadline 420 --pause-every 3 \
    --progress-file "$FAULT_DIR/progress" >"$FAULT_DIR/summary.json" 2>"$FAULT_DIR/driver.log" &
  FAULT_DRIVER_PID=$!
  itest_track_pid "$FAULT_DRIVER_PID"
}

fault_burst_progress() { cat "$FAULT_DIR/progress" 2>/dev/null || echo 0; }
fault_progress_at_least() { [ "$(fault_burst_progress)" -ge "$1" ]; }
fault_burst_running() { kill -0 "$FAULT_DRIVER_PID" 2>/dev/null; }

fault_burst_wait() {
  local rc=0
  wait "$FAULT_DRIVER_PID" || rc=$?
  [ "$rc" -eq 0 ] || { tail -n 20 "$FAULT_DIR/driver.log" >&2; fail "the load driver exited $rc"; }
}

fault_now() { date +%s.%N; }

# fault_probe_recovery T0 [URL]: the seconds from T0 until a new sandbox can be
# created and reaches running (then deleted); recorded for the summary.
fault_probe_recovery() {
  local t0=$1 url=${2:-http://127.0.0.1:${FAULT_CTL_PORTS[0]}} out sbx secs deadline
  deadline=$(($(date +%s) + 120))
  until out=$(SANDBOX_URL=$url SANDBOX_TOKEN=$FAULT_ADMIN "$SANDBOX_CLI" create --tenant fault-probe \
      --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --wait --timeout 30 2>/dev/null); do
    [ "$(date +%s)" -lt "$deadline" ] || fail "no recovery within 120 s of the fault"
    sleep 0.1
  done
  secs=$(awk -v a="$t0" -v b="$(fault_now)" 'BEGIN { printf "%.2f", b - a }')
  sbx=${out%% *}
  SANDBOX_URL=$url SANDBOX_TOKEN=$FAULT_ADMIN "$SANDBOX_CLI" delete "$sbx" --wait --timeout 60 >/dev/null 2>&1 || true
  FAULT_RECOVERY+=("$secs")
  itest_log "recovered ${secs}s after the fault"
}

fault_json() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$FAULT_DIR/summary.json" "$1"; }

# Counts runtime objects of this scenario's cluster that the controller does
# not want (orphans), plus running sandboxes without exactly one object.
fault_orphans() {
  local containers running bad=0 id sbx phase n
  containers=$(docker ps -aq --filter "label=dev.sandbox.cluster=$FAULT_CLUSTER")
  for id in $containers; do
    sbx=$(docker inspect --format '{{index .Config.Labels "dev.sandbox.id"}}' "$id" 2>/dev/null) || continue
    phase=$(fault_sql "SELECT phase FROM sandboxes WHERE id = '$sbx'")
    [ "$phase" = running ] || bad=$((bad + 1))
  done
  running=$(fault_sql "SELECT id FROM sandboxes WHERE phase = 'running'")
  for sbx in $running; do
    n=$(docker ps -q --filter "label=dev.sandbox.id=$sbx" --filter "label=dev.sandbox.cluster=$FAULT_CLUSTER" | wc -l)
    [ "$n" -eq 1 ] || bad=$((bad + 1))
  done
  echo "$bad"
}

# What a failed audit needs to be understood from CI's log alone: the
# operations that failed and why, the workers' state changes, and the
# worker's failed exchanges with the controller (times in UTC).
fault_explain() {
  echo "failed operations (updated_at, kind, code, message):"
  fault_sql "SELECT to_char(updated_at AT TIME ZONE 'UTC', 'HH24:MI:SS.MS'), kind, error_code, left(error_message, 300)
    FROM operations WHERE state = 'failed' ORDER BY updated_at" | sed 's/^/  /' || true
  echo "worker events (ts, kind, data):"
  fault_sql "SELECT to_char(ts AT TIME ZONE 'UTC', 'HH24:MI:SS.MS'), kind, data FROM events
    WHERE kind LIKE 'worker.%' ORDER BY id" | sed 's/^/  /' || true
  echo "the worker's failed exchanges and the controllers' worker judgements:"
  grep -h -E 'failed to (send a heartbeat|poll|register)|unreachable|database reachable again|pass failed' \
    "$FAULT_DIR"/worker*.log "$FAULT_DIR"/controller*.log 2>/dev/null | cut -c1-300 | tail -40 | sed 's/^/  /' || true
}

# The end of every scenario: drain, audit the invariants, print the row.
fault_audit() {
  local accepted terminal lost dups stale twice orphans errors i max rec
  accepted=$(fault_json accepted)
  terminal=$(fault_json terminal)
  lost=$((accepted - terminal))
  dups=$(fault_json duplicates)
  errors=$(fault_json errors)
  # A report with a stale fencing token that had been accepted would show as
  # a second terminal transition of one operation.
  stale=$(fault_sql "SELECT count(*) FROM (SELECT operation_id FROM events WHERE kind IN
    ('operation.succeeded', 'operation.failed', 'operation.cancelled') GROUP BY operation_id HAVING count(*) > 1) x")
  # An exec is handed to a worker at most once: a hand-out whose answer
  # never reached the worker (the controller killed between the claim's
  # commit and the answer) is taken back (running -> leased, reason
  # answer_lost) and does not count; the markers (dups) show what ran.
  twice=$(fault_sql "SELECT count(*) FROM (SELECT e.operation_id FROM events e JOIN operations o ON o.id = e.operation_id
    WHERE o.kind = 'exec' AND e.kind IN ('operation.running', 'operation.leased') GROUP BY e.operation_id
    HAVING count(*) FILTER (WHERE e.kind = 'operation.running')
      - count(*) FILTER (WHERE e.kind = 'operation.leased' AND e.data->>'reason' = 'answer_lost') > 1) x")
  for ((i = 0; i < 60; i++)); do
    orphans=$(fault_orphans)
    [ "$orphans" -eq 0 ] && break
    sleep 0.5
  done
  max=0
  for rec in "${FAULT_RECOVERY[@]}"; do
    max=$(awk -v a="$max" -v b="$rec" 'BEGIN { print (b > a) ? b : a }')
  done
  printf '%-22s %8s %8s %5s %10s %7s %7s %12s\n' scenario accepted terminal lost duplicates stale orphans "recovery(s)"
  printf '%-22s %8s %8s %5s %10s %7s %7s %12s\n' "$FAULT_NAME" "$accepted" "$terminal" "$lost" "$((dups + twice))" \
    "$stale" "$orphans" "$max"
  echo "outcomes: $(fault_json outcomes); exec markers verified $(fault_json exec_verified), unverifiable $(fault_json exec_unverifiable)"
  echo "recovery times: ${FAULT_RECOVERY[*]:-none}"
  echo "times a worker was called unreachable for its silence: $(fault_sql "SELECT count(*) FROM events
    WHERE kind = 'worker.unreachable' AND data->>'reason' = 'no heartbeat'")"
  # not a vacuous burst: each sandbox's create and delete and most of its
  # execs (a sandbox on a worker declared lost ends its lifecycle early: with
  # three of them, a busy host's worker_pause saw 195 of 225)
  local floor=$((${FAULT_SANDBOXES:-45} * 4))
  [ "$accepted" -ge "$floor" ] || fail "only $accepted operations were accepted (need at least $floor)"
  [ "$lost" -eq 0 ] || fail "$lost accepted operations are not terminal: $(fault_json nonterminal)"
  [ "$dups" -eq 0 ] || fail "$dups exec markers appear more than once"
  [ "$twice" -eq 0 ] || fail "$twice exec operations were handed to a worker twice"
  [ "$(fault_json missing_writes)" -eq 0 ] || fail "succeeded execs whose marker is missing: $(fault_json missing_writes)"
  [ "$stale" -eq 0 ] || fail "$stale operations have two terminal transitions (a stale report was accepted)"
  [ "$orphans" -eq 0 ] || fail "$orphans orphaned or missing containers after the drain"
  [ "$errors" = "[]" ] || fail "driver errors: $errors"
  # Faults that take nothing from the workers (a controller, the database)
  # must not lose a sandbox (no false worker loss). The one cost allowed: an
  # exec handed out in the instant its controller died fails worker_lost
  # (it is never run twice), at most one per fault. A worker that restarts
  # (FAULT_ALLOW_UNAVAILABLE=1) is away for a while: an operation admitted
  # just before it said it stopped is failed unavailable ("retry once it is
  # back"), which the driver's lifecycles retry; the markers still tell
  # whether anything was lost.
  if [ "${FAULT_EXPECT_NO_LOSS:-0}" = 1 ]; then
    local wl_max=${#FAULT_RECOVERY[@]} unjustified
    # A worker that stops (FAULT_WORKER_LOST_IN_FLIGHT=1) ends the execs it
    # was running worker_lost, however many the burst had in its hands then:
    # each such exec must have been running before the worker said it
    # stopped, and then they need no other bound.
    if [ "${FAULT_WORKER_LOST_IN_FLIGHT:-0}" = 1 ]; then
      unjustified=$(fault_sql "SELECT count(*) FROM operations o WHERE o.state = 'failed'
        AND o.error_code = 'worker_lost' AND NOT EXISTS (SELECT 1 FROM events e WHERE e.operation_id = o.id
          AND e.kind = 'operation.running'
          AND e.id < (SELECT min(id) FROM events WHERE kind = 'worker.unreachable' AND data->>'reason' = 'restarting'))")
      [ "$unjustified" -eq 0 ] || { fault_explain; fail "$unjustified execs failed worker_lost that were not running when the worker stopped"; }
      wl_max=$(fault_sql "SELECT count(*) FROM operations WHERE state = 'failed' AND error_code = 'worker_lost'")
      echo "execs running when the worker stopped, failed worker_lost: $wl_max"
    fi
    [ "$(fault_json exec_unverifiable)" = 0 ] || fail "sandboxes were lost: $(fault_json exec_unverifiable) exec markers unverifiable ($(fault_json unverifiable_why))"
    python3 -c '
import json, sys
o = json.load(open(sys.argv[1]))["outcomes"]
ok = ("succeeded", "failed:worker_lost") + (("failed:unavailable",) if sys.argv[3] == "1" else ())
bad = {k: v for k, v in o.items() if k not in ok}
wl = o.get("failed:worker_lost", 0)
if bad or wl > int(sys.argv[2]):
    sys.exit("unexpected outcomes %r (at most %s worker_lost allowed)" % (o, sys.argv[2]))
' "$FAULT_DIR/summary.json" "$wl_max" "${FAULT_ALLOW_UNAVAILABLE:-0}" \
      || { fault_explain; fail "operations failed that a controller or database fault must not fail"; }
  fi
}

# Drops the scenario's database (the controllers must be stopped first).
fault_teardown() {
  local i
  fault_kill_worker
  for i in "${!FAULT_CTL_PIDS[@]}"; do fault_kill_controller "$i"; done
  for id in $(docker ps -aq --filter "label=dev.sandbox.cluster=$FAULT_CLUSTER"); do docker rm -f "$id" >/dev/null 2>&1 || true; done
  "$ITEST_PGBIN/psql" -X -q "$FAULT_BASE/postgres" -c "DROP DATABASE IF EXISTS $FAULT_DB" >/dev/null 2>&1 || true
}
