#!/usr/bin/env bash
# Runs every tests/integration/test_*.sh against one environment set up here
# (PostgreSQL, dockerd, controller, worker), each under a time limit; prints
# PASS/FAIL per test (its time, and the CPU time of the processes it ran and
# waited for) and "N passed, N failed" as the last line.
# Usage: tests/integration/run.sh BUILD_DIR [TEST_NAME...]
# Env: ITEST_TIMEOUT (default per-test limit, seconds; a test may set its own
#      with a "# itest-timeout: N" line, capped by ITEST_MAX_TIMEOUT, default
#      240), ITEST_KEEP=1 keeps the temp folder, ITEST_EXCLUDE="GLOB ..." leaves
#      out the tests whose names match (only when no TEST_NAME is given; they
#      are listed, not counted).
# Env: ITEST_JOBS (default 2) parallel tests at a time, ITEST_STANDALONE_JOBS
#      (default 2) standalone ones; ITEST_LANES=1 runs without environment B.
# What may run beside what is said by a line in each test (run_lanes below
# schedules the shared ones; a test without any line is a "shared" one):
# - Shared environments: A, the run's controller and worker, and B, a second
#   pair on database sandbox_b whose worker has no open network.
# - "# itest-parallel": in tenants of its own, asserting nothing global,
#   leaving the shared daemons alone; ITEST_JOBS at a time on A, first. Not
#   parallel: a test that counts anything another tenant changes (all
#   sandboxes, workers, global metrics, Docker's containers, a log's lines),
#   drains, stops or pauses the shared worker, controller or PostgreSQL,
#   starts an extra worker (other tenants' sandboxes could land on it),
#   fills a worker or floods the API, or asserts a latency a second test's
#   CPU use could break.
# - shared (no line): one at a time on A, once the parallel ones have ended;
#   those with "# itest-waits" (mostly waiting on timeouts) first.
# - "# itest-any-env": a shared test that leaves the host alone: a Docker
#   worker it starts takes SANDBOX_WORKER_OPEN_NETWORK from the environment
#   (empty on B: one with the open network rebuilds that network's host-wide
#   egress rules), it needs no open network, changes no Docker state but its
#   own containers and images, and asserts no latency a busy host could
#   break (budgets of seconds, not milliseconds). One at a time on B from
#   the start (beside the parallel ones), and on A once A's shared tests are
#   done.
# - "# itest-beside": mostly waits, in a tenant of its own; on A in the
#   background from the first shared test to the last.
# - "# itest-standalone": runs its own sandboxd (its own cluster, worker
#   names and database on the run's PostgreSQL; inventories see only their
#   own cluster's containers) whose workers have no open network
#   (SANDBOX_WORKER_OPEN_NETWORK empty), ITEST_STANDALONE_JOBS at a time
#   beside A's shared tests, once the parallel ones have ended. With
#   "# itest-after-shared" (e.g. its worker has the open network, which
#   rebuilds the host-wide egress rules A's tests rely on) it runs after the
#   shared daemons have stopped. (A test that restarts PostgreSQL restarts a
#   cluster of its own: itest_pg_cluster.) With "# itest-waits" (a minute
#   or more of its time is a deliberate wait, e.g. a worker kept away) it
#   runs in a slot of its own beside those, one such test after another.
#   "# itest-cost: N" (its usual seconds in the sanitized run) orders a
#   standalone test among the others: the longest start first.
# A failure names its test and prints its own output and the tail of its
# environment's daemon logs since it began (which may hold a concurrent
# test's lines too).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/integration/lib.sh
. "$here/lib.sh"

[ $# -ge 1 ] || { echo "usage: $0 BUILD_DIR [TEST_NAME...]" >&2; exit 2; }
[ -d "$1" ] || { echo "error: build directory $1 does not exist" >&2; echo "0 passed, 1 failed"; exit 1; }
build=$1
shift
default_timeout=${ITEST_TIMEOUT:-300}
# no single test may hold the suite longer than this, whatever it declares:
# the whole of tools/test.sh must stay well under 30 minutes
max_timeout=${ITEST_MAX_TIMEOUT:-240}

tests=()
if [ $# -gt 0 ]; then
  for n in "$@"; do
    n=${n%.sh}
    [ -f "$here/$n.sh" ] || { echo "error: no test $here/$n.sh" >&2; echo "0 passed, 1 failed"; exit 1; }
    tests+=("$here/$n.sh")
  done
else
  excluded=()
  for t in "$here"/test_*.sh; do
    [ -f "$t" ] || continue
    n=$(basename "$t" .sh)
    skip=0
    for g in ${ITEST_EXCLUDE:-}; do
      # shellcheck disable=SC2053 # a glob on purpose
      if [[ $n == $g ]]; then skip=1; fi
    done
    if [ "$skip" -eq 1 ]; then excluded+=("$n"); else tests+=("$t"); fi
  done
  if [ "${#excluded[@]}" -gt 0 ]; then
    echo "not run in this suite (ITEST_EXCLUDE=\"$ITEST_EXCLUDE\"): ${excluded[*]}"
  fi
fi

itest_init "$build"
trap 'itest_cleanup' EXIT
# Every controller of the run appends each JSON answer it sends to this file
# (controller/server.c, record_answer); api_schema below checks them all
# against docs/openapi.json.
export SANDBOXD_RECORD_RESPONSES="$ITEST_TMP/api-answers.ndjson"
trap 'exit 130' INT TERM

passed=0
failed=0
results=()
RUN_T0=$(date +%s%N)
record() { # record PASS|FAIL NAME SECONDS [REASON [CPU_SECONDS]]
  local line
  line=$(printf '%-4s %-28s %6ss%s%s' "$1" "$2" "$3" "${5:+  cpu ${5}s}" "${4:+  ($4)}")
  results+=("$line")
  echo "$line"
  if [ "$1" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  # ITEST_DIGEST (set by tools/test.sh): failures again, short, for the end
  # of a long run's output (CI shows only its tail)
  if [ "$1" != PASS ] && [ -n "${ITEST_DIGEST:-}" ]; then
    printf '== %s: %s\n' "$(basename "$build")" "$line" >>"$ITEST_DIGEST" 2>/dev/null || true
  fi
}

# The shared environments, each a controller and a worker: A, and (with
# ITEST_LANES=2, the default) B on a database of its own whose worker has no
# open network (it leaves the host's egress rules to A's). env_save NAME
# keeps the current environment's variables in the map NAME, env_load NAME
# exports them again.
ENV_VARS=(DATABASE_URL SANDBOX_URL SANDBOX_ROUTE_URL ITEST_CONTROLLER_LOG ITEST_CONTROLLER_PID ITEST_ADMIN_TOKEN
  ITEST_WORKER_NAME ITEST_WORKER_LOG ITEST_WORKER_PID ITEST_WORKER_TOKEN)
# shellcheck disable=SC2034 # ENV_A is read through env_load's nameref
declare -A ENV_A=() ENV_B=()
env_save() {
  # shellcheck disable=SC2178 # a nameref to an associative array
  local -n m=$1
  local v
  for v in "${ENV_VARS[@]}"; do m["$v"]=${!v-}; done
}
env_load() {
  # shellcheck disable=SC2178 # a nameref to an associative array
  local -n m=$1
  local v
  for v in "${ENV_VARS[@]}"; do export "$v=${m[$v]-}"; done
}
# env_use A|B|S: exports environment A's or B's variables; in B the workers
# a test starts have no open network (SANDBOX_WORKER_OPEN_NETWORK empty). S,
# a standalone test's, is A's without its daemons (the test starts its own)
# and without the open network either.
env_use() {
  env_load "ENV_${1/S/A}"
  case $1 in
    B) export SANDBOX_WORKER_OPEN_NETWORK= ;;
    S) export ITEST_CONTROLLER_PID='' ITEST_WORKER_PID='' SANDBOX_WORKER_OPEN_NETWORK= ;;
    *) unset SANDBOX_WORKER_OPEN_NETWORK ;;
  esac
}

# test_start TEST_FILE [ENV]: starts one test under its time limit in the
# background (its own trace file and failure marker, found again by its
# name) in environment ENV (env_use; A by default); test_finish NAME waits
# for it and records it, on failure with the tail of its trace and of its
# environment's daemons' logs since it began.
declare -A T_PID T_T0 T_COFF T_WOFF T_TMO T_BG T_ENV
test_start() {
  local t=$1 name tmo env=${2:-A}
  name=$(basename "$t" .sh)
  tmo=$(sed -n 's/^# itest-timeout: *\([0-9][0-9]*\).*/\1/p' "$t" | head -n 1)
  tmo=${tmo:-$default_timeout}
  if [ "$tmo" -gt "$max_timeout" ]; then tmo=$max_timeout; fi
  T_ENV[$name]=$env
  # the environment's variables, in this shell until the next test_start
  env_use "$env"
  if [ -n "${ITEST_CONTROLLER_PID:-}" ] && ! kill -0 "$ITEST_CONTROLLER_PID" 2>/dev/null; then
    itest_log "the shared controller is no longer running (see $ITEST_CONTROLLER_LOG)"
  fi
  T_COFF[$name]=$(itest_file_size "$ITEST_CONTROLLER_LOG")
  T_WOFF[$name]=$(itest_file_size "$ITEST_WORKER_LOG")
  T_TMO[$name]=$tmo
  rm -f "$ITEST_TMP/$name.failed"
  T_T0[$name]=$(date +%s%N)
  # when it started, in seconds from the runner's start: how a run's
  # schedule can be read again from its output
  echo "=== RUN  $name (limit ${tmo}s, environment $env, at $(((T_T0[$name] - RUN_T0) / 1000000000))s)"
  # Into a file, not a pipe: a background process the test left with its
  # stdout (a sleep feeding a stdin, killed by its own timeout) does not
  # hold the runner until it ends.
  # $name.rc when it ends: how a pool of concurrent tests sees which ended
  rm -f "$ITEST_TMP/$name.rc"
  (
    rc=0
    ITEST_TRACE_FILE="$ITEST_TMP/$name.trace" ITEST_FAIL_MARKER="$ITEST_TMP/$name.failed" \
      timeout --kill-after=15 "$tmo" bash "$t" </dev/null >"$ITEST_TMP/$name.out" 2>&1 || rc=$?
    # the CPU time of what the test ran and waited for (not the shared
    # daemons', not its containers'): what makes a run CPU-bound
    times >"$ITEST_TMP/$name.times"
    echo "$rc" >"$ITEST_TMP/$name.rc"
    exit "$rc"
  ) &
  T_PID[$name]=$!
}

test_finish() {
  local name=$1 rc=0 secs why='' left='' i coff woff cpu
  local trace="$ITEST_TMP/$name.trace" marker="$ITEST_TMP/$name.failed"
  # The exit status is the one the test's subshell wrote, not wait's: a run
  # goes through pid_max's 32768 pids, and once a later child of this shell
  # takes an ended test's pid, bash drops that test's status and `wait`
  # answers 127 (a beside test's pass was once recorded as exit 127), or
  # waits for that other child. So wait only for a test still running.
  [ -e "$ITEST_TMP/$name.rc" ] || wait "${T_PID[$name]}" 2>/dev/null || true
  while [ ! -e "$ITEST_TMP/$name.rc" ] && kill -0 "${T_PID[$name]}" 2>/dev/null; do sleep 0.2; done
  rc=$(cat "$ITEST_TMP/$name.rc" 2>/dev/null) || rc=
  [ -n "$rc" ] || { rc=1; why="its runner subshell ended without an exit status"; }
  env_use "${T_ENV[$name]}"
  coff=${T_COFF[$name]}
  woff=${T_WOFF[$name]}
  secs=$(awk -v a="${T_T0[$name]}" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  [ "${T_BG[$name]:-0}" = 1 ] && echo "=== END  $name (ran beside the others)"
  sed "s/^/    /" "$ITEST_TMP/$name.out"
  if [ "$rc" -eq 0 ] && [ -s "$marker" ]; then
    # an assertion failed but the exit status was lost (e.g. a replaced EXIT trap)
    rc=1
    why="exit 0 after a failed assertion: $(head -n 1 "$marker")"
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then why="timed out after ${T_TMO[$name]}s"; fi
  if [ "$rc" -ne 0 ]; then why=${why:-"exit $rc"}; fi
  # Nothing the test started may outlive it (a stopping daemon gets 10 s);
  # what does is listed, killed by pid, and fails the test. The shared
  # PostgreSQL is the run's, whoever restarted it (test_fault_postgres_restart).
  for ((i = 0; i < 100; i++)); do
    left=$(itest_leftovers "$trace" "$(head -n 1 "${ITEST_PG_DATA:-/nonexistent}/postmaster.pid" 2>/dev/null)")
    [ -n "$left" ] || break
    sleep 0.1
  done
  if [ -n "$left" ]; then
    printf '    left running after the test ended (killed now):\n%s\n' "$(sed 's/^/      /' <<<"$left")"
    # shellcheck disable=SC2046 # pids, one word each
    kill -KILL $(cut -d' ' -f1 <<<"$left") 2>/dev/null || true
    why="${why:+$why; }left $(wc -l <<<"$left") process(es) running: $(head -n 1 <<<"$left" | cut -c1-80)"
    [ "$rc" -ne 0 ] || rc=1
  fi
  # user + system seconds of its children (the second line of `times`)
  cpu=$(awk 'NR == 2 { t = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); t += p[1] * 60 + p[2] } printf "%.1f", t }' \
    "$ITEST_TMP/$name.times" 2>/dev/null)
  if [ "$rc" -eq 0 ]; then
    record PASS "$name" "$secs" "" "$cpu"
    return 0
  fi
  itest_log_tail "$trace" 0 25
  if [ -n "${ITEST_CONTROLLER_PID:-}" ]; then
    itest_log_tail "$ITEST_CONTROLLER_LOG" "$coff" 60
    itest_log_tail "$ITEST_WORKER_LOG" "$woff" 60
  fi
  record FAIL "$name" "$secs" "$why" "$cpu"
  if [ -n "${ITEST_DIGEST:-}" ]; then
    {
      tail -n 30 "$ITEST_TMP/$name.out"
      if [ -n "${ITEST_CONTROLLER_PID:-}" ]; then
        echo "-- controller log (last 10 lines of this test)"
        tail -c +"$((coff + 1))" "$ITEST_CONTROLLER_LOG" 2>/dev/null | tail -n 10
      fi
    } >>"$ITEST_DIGEST" 2>/dev/null || true
  fi
}

# run_pool JOBS TEST_FILE...: runs the tests, JOBS at a time, each recorded
# (test_finish) as it ends.
run_pool() {
  local jobs=$1 t
  shift
  local running=()
  for t in "$@" ''; do
    while [ "${#running[@]}" -gt 0 ] && { [ -z "$t" ] || [ "${#running[@]}" -ge "$jobs" ]; }; do
      lane_reap running
      if [ "${#running[@]}" -gt 0 ] && { [ -z "$t" ] || [ "${#running[@]}" -ge "$jobs" ]; }; then sleep 0.2; fi
    done
    [ -n "$t" ] || break
    test_start "$t"
    running+=("$(basename "$t" .sh)")
  done
}

# run_lanes: the shared tests, in slots that each run one test at a time:
# - beside tests start first (environment A) and are recorded last;
# - ITEST_JOBS (default 2) slots run the itest-parallel tests on A;
# - slot A runs the other shared tests on A once the parallel ones have
#   ended, then itest-any-env ones;
# - slot B runs the itest-any-env tests on B from the start;
# - ITEST_STANDALONE_JOBS (default 2) slots run the standalone tests
#   (environment S) once the parallel ones have ended, beside slot A: they
#   wait on their own daemons while A's shared tests mostly wait on theirs;
#   slot W beside them runs the standalone itest-waits ones (they sleep:
#   their waits cost no CPU and need not hold an S slot), then standalone
#   ones from the S queue; both queues go longest first (by_cost).
# Without B, the itest-any-env tests run on A, last.
run_lanes() {
  local -a pq=("${parallel[@]}") aq=("${shared[@]}") bq=("${anyenv[@]}") sq=("${standalone[@]}") prun=() srun=()
  local -a wq=("${swaits[@]}")
  local arun='' brun='' wrun='' n t
  for t in "${beside[@]}"; do
    T_BG[$(basename "$t" .sh)]=1
    test_start "$t" A
  done
  while :; do
    lane_reap prun
    lane_reap srun
    for n in arun brun wrun; do
      if [ -n "${!n}" ] && [ -e "$ITEST_TMP/${!n}.rc" ]; then test_finish "${!n}"; printf -v "$n" ''; fi
    done
    while [ "${#prun[@]}" -lt "${ITEST_JOBS:-2}" ] && lane_start pq A; do prun+=("$started"); done
    if [ -z "$brun" ] && [ "${#ENV_B[@]}" -gt 0 ] && lane_start bq B; then brun=$started; fi
    if [ "${#pq[@]}" -eq 0 ] && [ "${#prun[@]}" -eq 0 ]; then
      if [ -z "$arun" ] && { lane_start aq A || lane_start bq A; }; then arun=$started; fi
      while [ "${#srun[@]}" -lt "${ITEST_STANDALONE_JOBS:-2}" ] && lane_start sq S; do srun+=("$started"); done
      # slot W, once its own queue is done, takes standalone tests too
      if [ -z "$wrun" ] && { lane_start wq S || lane_start sq S; }; then wrun=$started; fi
    fi
    if [ -z "$arun$brun$wrun" ] && [ "$((${#prun[@]} + ${#srun[@]}))" -eq 0 ] &&
      [ "$((${#pq[@]} + ${#aq[@]} + ${#bq[@]} + ${#sq[@]} + ${#wq[@]}))" -eq 0 ]; then
      break
    fi
    sleep 0.2
  done
  for t in "${beside[@]}"; do
    test_finish "$(basename "$t" .sh)"
  done
}

# lane_reap RUNNING: records (test_finish) the tests of the array named
# RUNNING that have ended and takes them off it.
lane_reap() {
  # shellcheck disable=SC2178 # a nameref to an array
  local -n r=$1
  local n left=()
  for n in "${r[@]}"; do
    if [ -e "$ITEST_TMP/$n.rc" ]; then test_finish "$n"; else left+=("$n"); fi
  done
  r=("${left[@]}")
}

# lane_start QUEUE ENV: starts the first test of the array named QUEUE in
# environment ENV and takes it off the queue; its name in $started. 1 when
# the queue is empty.
lane_start() {
  # shellcheck disable=SC2178 # a nameref to an array
  local -n q=$1
  [ "${#q[@]}" -gt 0 ] || return 1
  test_start "${q[0]}" "$2"
  started=$(basename "${q[0]}" .sh)
  q=("${q[@]:1}")
}

# start_env_b: environment B (a database sandbox_b on the run's PostgreSQL,
# controller-b.log, worker itest-worker-b without an open network).
start_env_b() {
  local base=${DATABASE_URL%/*}
  "$ITEST_PGBIN/psql" -X -q "$base/postgres" -c 'CREATE DATABASE sandbox_b' || return 1
  export DATABASE_URL="$base/sandbox_b"
  ITEST_DBS+=("$DATABASE_URL")
  itest_start_controller -b || return 1
  itest_start_worker -b SANDBOX_WORKER_OPEN_NETWORK= || return 1
  env_save ENV_B
}

setup_error=
ITEST_DBS=()
itest_ensure_docker || setup_error="no Docker daemon (see above)"
if [ -z "$setup_error" ]; then itest_busybox_image || setup_error="cannot build image $ITEST_IMAGE"; fi
if [ -z "$setup_error" ]; then itest_start_postgres || setup_error="cannot start PostgreSQL"; fi
ITEST_DBS+=("${DATABASE_URL:-}")
if [ -z "$setup_error" ]; then itest_start_controller || setup_error="cannot start the controller"; fi
if [ -z "$setup_error" ]; then itest_start_worker || setup_error="cannot start the worker"; fi
env_save ENV_A
shared=()
anyenv=()
waits=()
standalone=()
swaits=()
after=()
started=
beside=()
parallel=()
for t in "${tests[@]}"; do
  if grep -q '^# itest-standalone' "$t" && grep -q '^# itest-after-shared' "$t"; then
    after+=("$t")
  elif grep -q '^# itest-standalone' "$t" && grep -q '^# itest-waits' "$t"; then
    swaits+=("$t")
  elif grep -q '^# itest-standalone' "$t"; then
    standalone+=("$t")
  elif grep -q '^# itest-beside' "$t"; then
    beside+=("$t")
  elif grep -q '^# itest-parallel' "$t"; then
    parallel+=("$t")
  elif grep -q '^# itest-any-env' "$t"; then
    anyenv+=("$t")
  elif grep -q '^# itest-waits' "$t"; then
    waits+=("$t")
  else
    shared+=("$t")
  fi
done
# the shared tests that mostly wait go first: beside the standalone ones,
# which keep the CPU busy
shared=("${waits[@]}" "${shared[@]}")
# by_cost TEST...: the tests, the longest first, by their "# itest-cost: N"
# line (their usual seconds in the sanitized run on two cores; 60 without
# one), ties in name order. The standalone slots start the longest first,
# so that no long test starts last and runs alone at the end (a run's tail
# the CPU idles through).
by_cost() {
  local t c
  for t in "$@"; do
    c=$(sed -n 's/^# itest-cost: \([0-9][0-9]*\).*/\1/p' "$t" | head -n 1)
    printf '%s %s\n' "${c:-60}" "$t"
  done | sort -s -k1,1nr | cut -d' ' -f2-
}
if [ "${#standalone[@]}" -gt 0 ]; then mapfile -t standalone < <(by_cost "${standalone[@]}"); fi
if [ "${#swaits[@]}" -gt 0 ]; then mapfile -t swaits < <(by_cost "${swaits[@]}"); fi
# B only when it has tests to run and A has others beside them
if [ -z "$setup_error" ] && [ "${ITEST_LANES:-2}" -ge 2 ] && [ "${#anyenv[@]}" -gt 0 ] &&
  [ "$((${#shared[@]} + ${#parallel[@]}))" -gt 0 ]; then
  start_env_b || setup_error="cannot start environment B (controller and worker on database sandbox_b)"
  env_load ENV_A
fi

if [ -n "$setup_error" ]; then
  echo "integration environment failed: $setup_error" >&2
  for t in "${tests[@]}"; do
    record FAIL "$(basename "$t" .sh)" 0 "environment: $setup_error"
  done
else
  run_lanes

  # The shared daemons must stop cleanly: SIGTERM -> exit 0 (docs/server-setup.md: SIGTERM finishes or releases what is in flight).
  t0=$(date +%s%N)
  why=
  for e in B A; do
    [ "$e" = A ] || [ "${#ENV_B[@]}" -gt 0 ] || continue
    env_load "ENV_$e"
    wrc=0
    crc=0
    itest_stop_pid "$ITEST_WORKER_PID" "worker $ITEST_WORKER_NAME" 30 || wrc=$?
    [ "$wrc" -eq 0 ] || why="${why:+$why; }worker $ITEST_WORKER_NAME exited $wrc after SIGTERM"
    itest_stop_pid "$ITEST_CONTROLLER_PID" "controller $e" 30 || crc=$?
    [ "$crc" -eq 0 ] || why="${why:+$why; }controller $e exited $crc after SIGTERM"
    # this environment's logs, when one of its daemons did not stop cleanly
    [ "$wrc$crc" != 00 ] || continue
    itest_log_tail "$ITEST_CONTROLLER_LOG" 0 30
    itest_log_tail "$ITEST_WORKER_LOG" 0 30
  done
  ITEST_PIDS=()
  export ITEST_WORKER_PID='' ITEST_CONTROLLER_PID=''
  env_save ENV_A
  ENV_B=()
  secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  if [ -z "$why" ]; then
    record PASS shutdown_sigterm "$secs"
  else
    record FAIL shutdown_sigterm "$secs" "$why"
  fi
  # Standalone tests marked itest-after-shared, after the shared daemons
  # stopped: ITEST_STANDALONE_JOBS at a time, each in its own cluster.
  if [ "${#after[@]}" -gt 0 ]; then
    run_pool "${ITEST_STANDALONE_JOBS:-2}" "${after[@]}"
  fi
fi

itest_cleanup

# Secrets never reach a log: every token the run created (harvested from the
# test traces) is looked for in every daemon log of the run.
if [ -z "${setup_error:-}" ]; then
  t0=$(date +%s%N)
  echo "=== RUN  log_secrets"
  rc=0
  python3 "$here/check_log_secrets.py" "$ITEST_TMP" 2>&1 | sed -u "s/^/    /" || rc=${PIPESTATUS[0]}
  secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  if [ "$rc" -eq 0 ]; then record PASS log_secrets "$secs"; else record FAIL log_secrets "$secs" "exit $rc"; fi
fi

# The API's answers match its OpenAPI document: docs/openapi.json is valid
# OpenAPI 3.1 and every JSON answer the controllers sent in this run meets
# the schema of its path, method and status (tests/openapi/check.mjs).
if [ -z "${setup_error:-}" ]; then
  t0=$(date +%s%N)
  echo "=== RUN  api_schema"
  rc=0
  oa_dir=$(cd "$here/../openapi" && pwd)
  if ! itest_npm_install "$oa_dir" "the OpenAPI checks (swagger-parser, ajv)"; then
    echo "    $ITEST_NPM_ERROR"
    rc=1
  else
    node "$oa_dir/check.mjs" "$(cd "$here/../.." && pwd)/docs/openapi.json" "$SANDBOXD_RECORD_RESPONSES" 2>&1 | sed -u "s/^/    /" ||
      rc=${PIPESTATUS[0]}
  fi
  secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  if [ "$rc" -eq 0 ]; then record PASS api_schema "$secs"; else record FAIL api_schema "$secs" "exit $rc"; fi
fi

if [ "$failed" -eq 0 ] && [ "${ITEST_KEEP:-0}" != 1 ]; then
  rm -rf "$ITEST_TMP"
else
  echo "logs kept in $ITEST_TMP"
fi
echo "---- integration summary"
for r in "${results[@]}"; do echo "$r"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
