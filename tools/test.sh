#!/usr/bin/env bash
# README command 2: installs what is missing, builds, runs the unit tests and
# the integration tests (real PostgreSQL, real dockerd), prints "N passed, N failed".
# Usage: sudo tools/test.sh [--sanitize] [--unit-only]
#   --sanitize   build in build-asan with -Db_sanitize=address,undefined
#   --unit-only  skip the integration tests
# Env: SANDBOX_BUILD_DIR overrides the build directory.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=tools/lib.sh
. tools/lib.sh

sanitize=0
unit_only=0
for arg in "$@"; do
  case "$arg" in
    --sanitize) sanitize=1 ;;
    --unit-only) unit_only=1 ;;
    -h|--help) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) sbx_die "unknown argument: $arg (see --help)" ;;
  esac
done

setup_opts=()
if [ "$sanitize" -eq 1 ]; then
  build_dir=${SANDBOX_BUILD_DIR:-build-asan}
  # shellcheck disable=SC2054 # one meson option, not two elements
  setup_opts=(-Db_sanitize=address,undefined -Db_lundef=false)
  # Fail on the first sanitizer report, in every binary the tests start.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
else
  build_dir=${SANDBOX_BUILD_DIR:-build}
fi

start=$(date +%s)
sbx_install_packages
sbx_build "$build_dir" "${setup_opts[@]}"

passed=0
failed=0

# Unit tests: one Check program per module; anything but OK (fail, timeout,
# skip) counts as failed.
sbx_say "unit tests: meson test -C $build_dir --suite unit"
unit_rc=0
testlog="$build_dir/meson-logs/testlog.json"
rm -f "$testlog"
meson test -C "$build_dir" --suite unit --print-errorlogs || unit_rc=$?
if [ -f "$testlog" ]; then
  read -r up uf < <(python3 - "$testlog" <<'EOF'
import json, sys
ok = bad = 0
for line in open(sys.argv[1], encoding="utf-8"):
    line = line.strip()
    if not line:
        continue
    t = json.loads(line)
    if t.get("result") == "OK":
        ok += 1
    else:
        bad += 1
print(ok, bad)
EOF
  )
  passed=$((passed + up))
  failed=$((failed + uf))
fi
if [ "$unit_rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  sbx_say "meson test failed (exit $unit_rc) without a failed test in $testlog"
  failed=$((failed + 1))
fi

if [ "$unit_only" -eq 0 ]; then
  ilog=$(mktemp /tmp/sbx-itest-summary.XXXXXX)
  sbx_say "integration tests: tests/integration/run.sh $build_dir"
  irc=0
  bash tests/integration/run.sh "$build_dir" 2>&1 | tee "$ilog" || irc=$?
  summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$ilog" | tail -n 1 || true)
  rm -f "$ilog"
  if [ -n "$summary" ]; then
    ip=${summary%% passed*}
    if_=${summary#*passed, }
    if_=${if_%% failed}
    passed=$((passed + ip))
    failed=$((failed + if_))
  else
    sbx_say "integration runner ended (exit $irc) without a summary line"
    failed=$((failed + 1))
  fi
  if [ "$irc" -ne 0 ] && [ "$failed" -eq 0 ]; then
    failed=1
  fi
fi

sbx_say "done in $(( $(date +%s) - start ))s ($build_dir)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
