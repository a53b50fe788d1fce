#!/usr/bin/env bash
# README command 2: installs what is missing, builds, runs the unit tests and
# the integration tests (real PostgreSQL, real dockerd), first with a plain
# build, then with AddressSanitizer + UBSan; prints "N passed, N failed".
# The fault-injection tests (test_fault_*, about 7 minutes) run once, in the
# sanitized build, when both builds run: what they add over the plain run is
# the crash and recovery paths, and those are where a memory error would hide.
# tools/fuzz.sh replays tests/fuzz/corpus and fuzzes each libFuzzer harness
# for SANDBOX_FUZZ_SECONDS (15) seconds: one test per harness. Compiles and
# fuzzing run niced beside integration tests, which mostly wait (bg_start).
# Usage: tools/test.sh [--plain | --sanitize] [--unit-only]   (as root, or a user with sudo)
#   --plain      only the plain build (build/)
#   --sanitize   only the sanitized build (build-asan/, -Db_sanitize=address,undefined)
#   --unit-only  skip the integration tests and the fuzzing
# Env: SANDBOX_BUILD_DIR / SANDBOX_ASAN_BUILD_DIR / SANDBOX_FUZZ_BUILD_DIR override the build directories.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=tools/lib.sh
. tools/lib.sh

plain=1
sanitize=1
unit_only=0
for arg in "$@"; do
  case "$arg" in
    --plain) plain=1; sanitize=0 ;;
    --sanitize) plain=0; sanitize=1 ;;
    --unit-only) unit_only=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) sbx_die "unknown argument: $arg (see --help)" ;;
  esac
done

passed=0
failed=0
lines=()
# Every failure again, short, printed last (CI shows only a run's tail):
# the integration runner and meson_digest below write to it.
ITEST_DIGEST=$(mktemp /tmp/sbx-test-digest.XXXXXX)
export ITEST_DIGEST
trap 'rm -f "$ITEST_DIGEST"' EXIT

# meson_digest DIR TESTLOG_JSON: the tests in a meson test log that did not
# pass, each with the tail of its output, into the digest.
meson_digest() {
  [ -f "$2" ] || return 0
  python3 - "$1" "$2" >>"$ITEST_DIGEST" <<'EOF2' || true
import json, sys
for line in open(sys.argv[2], encoding="utf-8"):
    line = line.strip()
    if not line:
        continue
    t = json.loads(line)
    if t.get("result") == "OK":
        continue
    print("== %s: meson test %s: %s (%.0fs)" % (sys.argv[1], t.get("name"), t.get("result"), t.get("duration", 0)))
    out = (t.get("stdout") or "").splitlines()
    print("\n".join(out[-30:]))
EOF2
}

# run_suite NAME BUILD_DIR [meson setup options...]: builds, runs the unit
# tests (anything but OK counts as failed: fail, timeout, skip) and the
# integration tests; adds to passed/failed.
run_suite() {
  local name=$1 dir=$2 testlog unit_rc=0 up=0 uf=0 ip=0 if_=0 irc=0 ilog summary
  shift 2
  if ! (sbx_build "$dir" "$@"); then
    lines+=("$(printf '%-10s build failed (%s)' "$name" "$dir")")
    failed=$((failed + 1))
    return 0
  fi

  testlog="$dir/meson-logs/testlog.json"
  if [ "$dir" = "$unit_beside_dir" ] && [ -f "$dir/meson-logs/unit-beside.rc" ]; then
    sbx_say "[$name] unit tests: meson test -C $dir --suite unit ran beside the plain integration tests (niced, timeouts x4); its output:"
    cat "$dir/meson-logs/unit-beside.out"
    unit_rc=$(cat "$dir/meson-logs/unit-beside.rc")
    rm -f "$dir/meson-logs/unit-beside.rc" "$dir/meson-logs/unit-beside.out"
  else
    sbx_say "[$name] unit tests: meson test -C $dir --suite unit"
    rm -f "$testlog"
    meson test -C "$dir" --suite unit --print-errorlogs || unit_rc=$?
  fi
  if [ -f "$testlog" ]; then
    read -r up uf < <(python3 - "$testlog" <<'EOF'
import json, sys
ok = bad = 0
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.strip()
    if line:
        if json.loads(line).get("result") == "OK":
            ok += 1
        else:
            bad += 1
print(ok, bad)
EOF
    )
  fi
  meson_digest "$dir" "$testlog"
  if [ "$unit_rc" -ne 0 ] && [ "$uf" -eq 0 ]; then
    sbx_say "[$name] meson test failed (exit $unit_rc) without a failed test in $testlog"
    uf=1
  fi

  if [ "$unit_only" -eq 0 ]; then
    bg_start "$name"
    ilog=$(mktemp /tmp/sbx-itest-summary.XXXXXX)
    sbx_say "[$name] integration tests: tests/integration/run.sh $dir"
    # test_microvm_* (the microvm suite of meson runs them too: microvm_vmm
    # is test_microvm_vmm, microvm_driver the driver and embedded ones):
    # here, as standalone tests beside the others, in the build that runs
    # them (up to 600 s each under TCG on a busy host), else left out
    # (a test's own limit up to 900 s: test_compose builds an image with
    # debootstrap)
    if [ "${SBX_SKIP_MICROVM:-0}" = 1 ]; then
      ITEST_MAX_TIMEOUT=900 ITEST_EXCLUDE="${SBX_ITEST_EXCLUDE:-} test_microvm_*" bash tests/integration/run.sh "$dir" \
        2>&1 | tee "$ilog" || irc=$?
    else
      ITEST_MAX_TIMEOUT=600 ITEST_EXCLUDE="${SBX_ITEST_EXCLUDE:-}" bash tests/integration/run.sh "$dir" 2>&1 |
        tee "$ilog" || irc=$?
    fi
    summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$ilog" | tail -n 1 || true)
    rm -f "$ilog"
    if [ -n "$summary" ]; then
      ip=${summary%% passed*}
      if_=${summary#*passed, }
      if_=${if_%% failed}
    else
      sbx_say "[$name] integration runner ended (exit $irc) without a summary line"
      if_=1
    fi
    if [ "$irc" -ne 0 ] && [ "$if_" -eq 0 ]; then
      if_=1
    fi
  fi
  if [ "$unit_only" -eq 0 ]; then
    bg_wait "$name"
  fi
  lines+=("$(printf '%-10s unit %d passed, %d failed; integration %d passed, %d failed' \
    "$name" "$up" "$uf" "$ip" "$if_")")
  passed=$((passed + up + ip))
  failed=$((failed + uf + if_))
}

# tests/integration/test_mcp.sh drives sandbox-mcp through the MCP TypeScript
# SDK (installed with npm into tests/mcp), test_sdk_typescript.sh builds
# client/typescript with tsc and the run's api_schema check uses swagger-parser
# and ajv (tests/openapi): Debian's Node.js and npm, only when no node is
# installed (a newer one from elsewhere is kept).
sbx_install_node() {
  if command -v node >/dev/null 2>&1; then
    return 0
  fi
  sbx_say "node is missing (tests/integration/test_mcp.sh needs it): installing nodejs npm"
  sbx_apt_get update -q || sbx_die "apt-get update failed"
  sbx_apt_get install -y -q --no-install-recommends nodejs npm || sbx_die "apt-get install nodejs npm failed"
}

# tools/fuzz.sh builds its harnesses with clang and libFuzzer;
# test_nginx_recipe.sh runs docs/custom-domains.md's nginx block;
# test_sdk_python.sh installs client/python offline into a venv (pip and
# setuptools from python3-venv, wheel from python3-wheel); test_console.sh
# drives the web console in Debian's headless chromium; test_compose.sh
# brings examples/compose up with Debian's docker-compose (its image built
# by debootstrap)
SBX_PACKAGES+=(clang libclang-rt-14-dev nginx-light python3-venv python3-wheel chromium docker-compose debootstrap)

# Work in the background, at the lowest CPU priority, beside the integration
# tests (which mostly wait on Docker): while the plain build's run, the
# sanitized and fuzzing builds compile; while the sanitized build's run, the
# fuzzers run (each harness for a fixed time: fewer inputs when the CPU is
# busy, never a later end). bg_start NAME starts what goes beside NAME's
# integration tests, bg_wait NAME waits for it (and records the fuzzing).
bg_pid=
bg_log=
fuzz_done=0
# the build whose unit tests bg_start runs in the background (run_suite then
# takes their result instead of running them; never a result left by
# another invocation)
unit_beside_dir=
# The sanitized build: its folder and meson options (bg_start builds it
# beside the plain tests, run_suite builds it again when that did not run).
ASAN_DIR=${SANDBOX_ASAN_BUILD_DIR:-build-asan}
# shellcheck disable=SC2054 # one meson option, not two array elements
ASAN_OPTS=(-Db_sanitize=address,undefined -Db_lundef=false)
bg_start() {
  bg_pid=
  if [ "$1" = plain ] && [ "$sanitize" -eq 1 ]; then
    bg_log=$(mktemp /tmp/sbx-prebuild.XXXXXX)
    sbx_say "[plain] beside the integration tests (niced; log $bg_log): meson compile -C $ASAN_DIR, tools/fuzz.sh --build-only, the sanitized unit tests"
    rm -f "$ASAN_DIR/meson-logs/unit-beside.rc"
    unit_beside_dir=$ASAN_DIR
    (
      renice -n 19 -p "$BASHPID" >/dev/null
      sbx_build "$ASAN_DIR" "${ASAN_OPTS[@]}"
      bash tools/fuzz.sh --build-only
      unit_beside "$ASAN_DIR"
    ) >"$bg_log" 2>&1 </dev/null &
    bg_pid=$!
  elif [ "$1" = sanitized ]; then
    bg_log=$(mktemp /tmp/sbx-fuzz-summary.XXXXXX)
    sbx_say "[fuzz] beside the sanitized integration tests (niced): tools/fuzz.sh --seconds ${SANDBOX_FUZZ_SECONDS:-15}"
    (
      renice -n 19 -p "$BASHPID" >/dev/null
      bash tools/fuzz.sh --seconds "${SANDBOX_FUZZ_SECONDS:-15}"
    ) >"$bg_log" 2>&1 </dev/null &
    bg_pid=$!
  fi
}
# unit_beside DIR: the sanitized build's unit tests, in the background (the
# CPU-bound half minute fills the plain run's tail instead of running
# alone); niced, so each test's timeout is 4 times meson's. run_suite shows
# the output (DIR/meson-logs/unit-beside.out) and takes the result (.rc).
unit_beside() {
  local dir=$1 rc=0
  rm -f "$dir/meson-logs/testlog.json"
  ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1} \
    meson test -C "$dir" --suite unit --print-errorlogs -t 4 >"$dir/meson-logs/unit-beside.out" 2>&1 || rc=$?
  echo "$rc" >"$dir/meson-logs/unit-beside.rc"
}
bg_wait() {
  local rc=0
  [ -n "$bg_pid" ] || return 0
  wait "$bg_pid" || rc=$?
  bg_pid=
  if [ "$1" = plain ]; then
    # a failed build is built again, in the foreground, by its own suite
    [ "$rc" -eq 0 ] || { sbx_say "[plain] the background build failed (exit $rc); its log:"; tail -n 40 "$bg_log"; }
  else
    sbx_say "[fuzz] tools/fuzz.sh (it ran beside the sanitized integration tests)"
    cat "$bg_log"
    fuzz_record "$bg_log" "$rc"
    fuzz_done=1
  fi
  rm -f "$bg_log"
}

# run_fuzz: tools/fuzz.sh; each harness is one test.
run_fuzz() {
  local flog frc=0
  flog=$(mktemp /tmp/sbx-fuzz-summary.XXXXXX)
  sbx_say "[fuzz] tools/fuzz.sh --seconds ${SANDBOX_FUZZ_SECONDS:-15}"
  bash tools/fuzz.sh --seconds "${SANDBOX_FUZZ_SECONDS:-15}" 2>&1 | tee "$flog" || frc=$?
  fuzz_record "$flog" "$frc"
  rm -f "$flog"
}

# fuzz_record LOG RC: tools/fuzz.sh's summary in LOG into the totals.
fuzz_record() {
  local flog=$1 frc=$2 fp=0 ff=0 summary
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$flog" | tail -n 1 || true)
  grep -E '^FAIL' "$flog" | sed 's/^/== fuzz: /' >>"$ITEST_DIGEST" || true
  if [ -n "$summary" ]; then
    fp=${summary%% passed*}
    ff=${summary#*passed, }
    ff=${ff%% failed}
  fi
  if [ "$frc" -ne 0 ] && [ "$ff" -eq 0 ]; then
    sbx_say "[fuzz] tools/fuzz.sh ended (exit $frc) without a failed harness"
    ff=1
  fi
  lines+=("$(printf '%-10s %d harnesses passed, %d failed' fuzz "$fp" "$ff")")
  passed=$((passed + fp))
  failed=$((failed + ff))
}

start=$(date +%s)
sbx_install_packages
# a dockerd that answers (systemd's, after apt installed docker.io) gets
# gVisor registered, for the gvisor tests; with none, the integration
# runner starts its own with runsc
if sbx_docker_answers; then
  sbx_ensure_gvisor
fi
if [ "$unit_only" -eq 0 ]; then
  sbx_install_node
fi
if [ "$plain" -eq 1 ]; then
  # What runs once, in the sanitized build, when both run: the fault
  # injection, the external driver's crash and hang cases, the microVMs,
  # and tests of a minute whose time is fixed waits, not speed (they take
  # as long sanitized): sandbox-sim's lost workers, worker identity's
  # heartbeat graces, the MCP SDK's client and the Python and TypeScript
  # SDKs (clients in other languages: the sanitizers see only the
  # controller's side of them), workers away for a minute.
  # Their code paths get the sanitizers there.
  if [ "$sanitize" -eq 1 ]; then
    SBX_ITEST_EXCLUDE='test_fault_* test_external_driver test_sim test_worker_identity test_mcp test_sdk_* test_worker_outage'
    SBX_SKIP_MICROVM=1
  fi
  run_suite plain "${SANDBOX_BUILD_DIR:-build}"
  # once, in the plain run: timing properties (minutes of a quiet follow;
  # the milliseconds of TCP_NODELAY, which the saturated sanitized run
  # blurs: 76 ms against 37 once), the client installer (its own
  # client-only build, whatever build runs the tests) and the README's
  # walkthrough (what it checks is the README's text; it runs after the
  # shared daemons stop, at the end), the compose deployment (its image
  # holds the plain build's binaries)
  SBX_ITEST_EXCLUDE='test_logs_quiet_follow test_api_nodelay test_install_client test_readme test_compose'
  SBX_SKIP_MICROVM=0
fi
if [ "$sanitize" -eq 1 ]; then
  # Fail on the first sanitizer report, in every binary the tests start
  # (the integration tests' one-shot CLI calls through their sandbox helper
  # skip LeakSanitizer's check at exit: tests/integration/lib.sh says why).
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
  run_suite sanitized "$ASAN_DIR" "${ASAN_OPTS[@]}"
fi
if [ "$unit_only" -eq 0 ] && [ "$fuzz_done" -eq 0 ]; then
  run_fuzz
fi

if [ -s "$ITEST_DIGEST" ]; then
  echo "---- failures (the tail of each; the whole output is above)"
  tail -n 250 "$ITEST_DIGEST"
fi
echo "---- test summary ($(( $(date +%s) - start ))s)"
for l in "${lines[@]}"; do echo "$l"; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
