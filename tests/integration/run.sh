#!/usr/bin/env bash
# Runs every tests/integration/test_*.sh against one environment set up here
# (PostgreSQL, dockerd, controller, worker), each under a time limit; prints
# PASS/FAIL per test and "N passed, N failed" as the last line.
# Usage: tests/integration/run.sh BUILD_DIR [TEST_NAME...]
# Env: ITEST_TIMEOUT (default per-test limit, seconds; a test may set its own
#      with a "# itest-timeout: N" line, capped by ITEST_MAX_TIMEOUT, default
#      240), ITEST_KEEP=1 keeps the temp folder, ITEST_EXCLUDE="GLOB ..." leaves
#      out the tests whose names match (only when no TEST_NAME is given; they
#      are listed, not counted).
# A test with a "# itest-standalone" line runs its own sandboxd: it runs after
# the shared controller and worker have stopped, ITEST_STANDALONE_JOBS
# (default 2) at a time: each runs its own cluster and worker names, whose
# inventories see only their own containers (dockerd's cluster label), in
# a database of its own. One that also has a "# itest-alone" line (it
# restarts the run's PostgreSQL, which the others' databases live in) runs
# after them, by itself. A test with a "# itest-beside" line (one that mostly
# waits, in a tenant of its own) runs in the background beside the shared
# tests, from the first to the last of them. Tests with a "# itest-parallel"
# line (each in tenants of its own, asserting nothing global, leaving the
# shared daemons alone) run first, ITEST_JOBS (default 2) at a time; the
# other shared tests then run one at a time. A failure names its test and
# prints its own output; the daemons' log lines since it began may then hold
# a concurrent test's lines too. A test is not itest-parallel when it counts
# anything another tenant changes (all sandboxes, workers, global metrics,
# Docker's containers, a log's lines), drains, stops or pauses the shared
# worker, controller or PostgreSQL, starts an extra worker (other tenants'
# sandboxes could land on it; a Docker worker also rebuilds the host-wide
# egress chains), fills a worker or floods the API, or asserts a latency a
# second test's CPU use could break.
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
trap 'exit 130' INT TERM

passed=0
failed=0
results=()
record() { # record PASS|FAIL NAME SECONDS [REASON]
  local line
  line=$(printf '%-4s %-28s %6ss%s' "$1" "$2" "$3" "${4:+  ($4)}")
  results+=("$line")
  echo "$line"
  if [ "$1" = PASS ]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
  # ITEST_DIGEST (set by tools/test.sh): failures again, short, for the end
  # of a long run's output (CI shows only its tail)
  if [ "$1" != PASS ] && [ -n "${ITEST_DIGEST:-}" ]; then
    printf '== %s: %s\n' "$(basename "$build")" "$line" >>"$ITEST_DIGEST" 2>/dev/null || true
  fi
}

# test_start TEST_FILE: starts one test under its time limit in the
# background (its own trace file and failure marker, found again by its
# name); test_finish NAME waits for it and records it, on failure with the
# tail of its trace and of the daemons' logs since it began. run_one runs
# one test to its end.
declare -A T_PID T_T0 T_COFF T_WOFF T_TMO T_BG
test_start() {
  local t=$1 name tmo
  name=$(basename "$t" .sh)
  tmo=$(sed -n 's/^# itest-timeout: *\([0-9][0-9]*\).*/\1/p' "$t" | head -n 1)
  tmo=${tmo:-$default_timeout}
  if [ "$tmo" -gt "$max_timeout" ]; then tmo=$max_timeout; fi
  if [ -n "${ITEST_CONTROLLER_PID:-}" ] && ! kill -0 "$ITEST_CONTROLLER_PID" 2>/dev/null; then
    itest_log "the shared controller is no longer running (see $ITEST_CONTROLLER_LOG)"
  fi
  T_COFF[$name]=$(itest_file_size "$ITEST_CONTROLLER_LOG")
  T_WOFF[$name]=$(itest_file_size "$ITEST_WORKER_LOG")
  T_TMO[$name]=$tmo
  rm -f "$ITEST_TMP/$name.failed"
  echo "=== RUN  $name (limit ${tmo}s)"
  T_T0[$name]=$(date +%s%N)
  # Into a file, not a pipe: a background process the test left with its
  # stdout (a sleep feeding a stdin, killed by its own timeout) does not
  # hold the runner until it ends.
  # $name.rc when it ends: how a pool of concurrent tests sees which ended
  rm -f "$ITEST_TMP/$name.rc"
  (
    rc=0
    ITEST_TRACE_FILE="$ITEST_TMP/$name.trace" ITEST_FAIL_MARKER="$ITEST_TMP/$name.failed" \
      timeout --kill-after=15 "$tmo" bash "$t" </dev/null >"$ITEST_TMP/$name.out" 2>&1 || rc=$?
    echo "$rc" >"$ITEST_TMP/$name.rc"
    exit "$rc"
  ) &
  T_PID[$name]=$!
}

test_finish() {
  local name=$1 rc=0 secs why='' left='' i coff woff
  local trace="$ITEST_TMP/$name.trace" marker="$ITEST_TMP/$name.failed"
  wait "${T_PID[$name]}" || rc=$?
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
  if [ "$rc" -eq 0 ]; then
    record PASS "$name" "$secs"
    return 0
  fi
  itest_log_tail "$trace" 0 25
  if [ -n "${ITEST_CONTROLLER_PID:-}" ]; then
    itest_log_tail "$ITEST_CONTROLLER_LOG" "$coff" 60
    itest_log_tail "$ITEST_WORKER_LOG" "$woff" 60
  fi
  record FAIL "$name" "$secs" "$why"
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

run_one() {
  test_start "$1"
  test_finish "$(basename "$1" .sh)"
}

# run_pool JOBS TEST_FILE...: runs the tests, JOBS at a time, each recorded
# (test_finish) as it ends.
run_pool() {
  local jobs=$1 t n left
  shift
  local running=()
  for t in "$@" ''; do
    while [ "${#running[@]}" -gt 0 ] && { [ -z "$t" ] || [ "${#running[@]}" -ge "$jobs" ]; }; do
      left=()
      for n in "${running[@]}"; do
        if [ -e "$ITEST_TMP/$n.rc" ]; then test_finish "$n"; else left+=("$n"); fi
      done
      running=("${left[@]}")
      if [ "${#running[@]}" -gt 0 ] && { [ -z "$t" ] || [ "${#running[@]}" -ge "$jobs" ]; }; then sleep 0.2; fi
    done
    [ -n "$t" ] || break
    test_start "$t"
    running+=("$(basename "$t" .sh)")
  done
}

setup_error=
itest_ensure_docker || setup_error="no Docker daemon (see above)"
if [ -z "$setup_error" ]; then itest_busybox_image || setup_error="cannot build image $ITEST_IMAGE"; fi
if [ -z "$setup_error" ]; then itest_start_postgres || setup_error="cannot start PostgreSQL"; fi
if [ -z "$setup_error" ]; then itest_start_controller || setup_error="cannot start the controller"; fi
if [ -z "$setup_error" ]; then itest_start_worker || setup_error="cannot start the worker"; fi

if [ -n "$setup_error" ]; then
  echo "integration environment failed: $setup_error" >&2
  for t in "${tests[@]}"; do
    record FAIL "$(basename "$t" .sh)" 0 "environment: $setup_error"
  done
else
  shared=()
  standalone=()
  alone=()
  beside=()
  parallel=()
  for t in "${tests[@]}"; do
    if grep -q '^# itest-standalone' "$t" && grep -q '^# itest-alone' "$t"; then
      alone+=("$t")
    elif grep -q '^# itest-standalone' "$t"; then
      standalone+=("$t")
    elif grep -q '^# itest-beside' "$t"; then
      beside+=("$t")
    elif grep -q '^# itest-parallel' "$t"; then
      parallel+=("$t")
    else
      shared+=("$t")
    fi
  done
  # Tests that mostly wait (a timing property of minutes) run beside the
  # others on the shared daemons, started first and recorded after them;
  # each keeps to its own tenant and counts nothing global.
  for t in "${beside[@]}"; do
    T_BG[$(basename "$t" .sh)]=1
    test_start "$t"
  done
  if [ "${#parallel[@]}" -gt 0 ]; then
    run_pool "${ITEST_JOBS:-2}" "${parallel[@]}"
  fi
  for t in "${shared[@]}"; do
    run_one "$t"
  done
  for t in "${beside[@]}"; do
    test_finish "$(basename "$t" .sh)"
  done

  # The shared daemons must stop cleanly: SIGTERM -> exit 0 (docs/server-setup.md: SIGTERM finishes or releases what is in flight).
  t0=$(date +%s%N)
  why=
  rc=0
  itest_stop_pid "$ITEST_WORKER_PID" worker 30 || rc=$?
  [ "$rc" -eq 0 ] || why="worker exited $rc after SIGTERM"
  rc=0
  itest_stop_pid "$ITEST_CONTROLLER_PID" controller 30 || rc=$?
  [ "$rc" -eq 0 ] || why="${why:+$why; }controller exited $rc after SIGTERM"
  ITEST_PIDS=()
  ITEST_WORKER_PID=
  ITEST_CONTROLLER_PID=
  secs=$(awk -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }')
  if [ -z "$why" ]; then
    record PASS shutdown_sigterm "$secs"
  else
    itest_log_tail "$ITEST_CONTROLLER_LOG" 0 30
    itest_log_tail "$ITEST_WORKER_LOG" 0 30
    record FAIL shutdown_sigterm "$secs" "$why"
  fi

  # Tests that run their own sandboxd, after the shared one stopped: two at
  # a time, each in its own cluster; then the ones that must be alone.
  if [ "${#standalone[@]}" -gt 0 ]; then
    run_pool "${ITEST_STANDALONE_JOBS:-2}" "${standalone[@]}"
  fi
  for t in "${alone[@]}"; do
    run_one "$t"
  done
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

if [ "$failed" -eq 0 ] && [ "${ITEST_KEEP:-0}" != 1 ]; then
  rm -rf "$ITEST_TMP"
else
  echo "logs kept in $ITEST_TMP"
fi
echo "---- integration summary"
for r in "${results[@]}"; do echo "$r"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
