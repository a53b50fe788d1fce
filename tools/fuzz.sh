#!/usr/bin/env bash
# Builds the libFuzzer harnesses of tests/fuzz (clang, -Dfuzz=true, ASan +
# UBSan), runs every kept input of tests/fuzz/corpus once (the
# regression inputs), then fuzzes each harness for a bounded time. New inputs
# go to a temporary folder, never into the repository; a crash leaves its
# input there and is printed with the command that replays it (copy it into
# tests/fuzz/corpus/NAME/ once fixed: it then stays a regression test).
# Prints one line per harness and "N passed, N failed"; exits 1 on a failure.
# Usage: tools/fuzz.sh [--seconds N] [--build-only] [HARNESS...]   (default: 15 s each, all)
#   --build-only  builds the harnesses and stops (tools/test.sh builds them
#                 early, beside tests that mostly wait)
# Env: SANDBOX_FUZZ_BUILD_DIR (default build-fuzz), SANDBOX_FUZZ_SECONDS.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=tools/lib.sh
. tools/lib.sh

seconds=${SANDBOX_FUZZ_SECONDS:-15}
dir=${SANDBOX_FUZZ_BUILD_DIR:-build-fuzz}
targets=()
build_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) [ $# -ge 2 ] || sbx_die "--seconds needs a number"; seconds=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) sbx_die "unknown option: $1 (see --help)" ;;
    *) targets+=("$1"); shift ;;
  esac
done
case "$seconds" in ''|*[!0-9]*) sbx_die "--seconds wants a whole number, not '$seconds'" ;; esac
if [ "${#targets[@]}" -eq 0 ]; then
  for d in tests/fuzz/corpus/*/; do targets+=("$(basename "$d")"); done
fi
command -v clang >/dev/null 2>&1 || sbx_die "clang is missing (apt-get install clang libclang-rt-14-dev, or run tools/test.sh, which installs it)"

if [ ! -f "$dir/meson-private/coredata.dat" ]; then
  sbx_say "meson setup $dir -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false (clang)"
  CC=clang meson setup "$dir" -Dfuzz=true -Dtests=false -Db_sanitize=address,undefined -Db_lundef=false ||
    sbx_die "meson setup $dir failed"
fi
# the harnesses asked for and what they link, not the daemons and tools
# (half of the tree's compiles)
sbx_say "meson compile -C $dir ${targets[*]/#/tests/fuzz/}"
meson compile -C "$dir" "${targets[@]/#/tests/fuzz/}" || sbx_die "build failed (meson compile -C $dir)"
[ "$build_only" -eq 0 ] || exit 0

work=$(mktemp -d /tmp/sbx-fuzz.XXXXXX)
passed=0
failed=0
lines=()
for t in "${targets[@]}"; do
  exe="$dir/tests/fuzz/$t"
  corpus="tests/fuzz/corpus/$t"
  [ -x "$exe" ] && [ -d "$corpus" ] || sbx_die "no harness $t (tests/fuzz/$t.c and $corpus/)"
  mkdir -p "$work/$t/new" "$work/$t/crash"
  log="$work/$t/log"
  rc=0
  # the kept inputs first, then fuzzing; halt on the first sanitizer report
  ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$exe" -runs=0 -artifact_prefix="$work/$t/crash/" "$corpus" >"$log" 2>&1 || rc=$?
  if [ "$rc" -eq 0 ]; then
    ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
      "$exe" -max_total_time="$seconds" -max_len=8192 -timeout=10 -rss_limit_mb=1024 \
      -artifact_prefix="$work/$t/crash/" -print_final_stats=1 "$work/$t/new" "$corpus" >>"$log" 2>&1 || rc=$?
  fi
  runs=$(grep -Eo 'stat::number_of_executed_units: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+$' || echo 0)
  if [ "$rc" -eq 0 ]; then
    passed=$((passed + 1))
    lines+=("$(printf 'PASS %-22s %9s inputs in %ss' "$t" "$runs" "$seconds")")
  else
    failed=$((failed + 1))
    crash=$(find "$work/$t/crash" -type f | head -n 1)
    lines+=("$(printf 'FAIL %-22s exit %d; input: %s; replay: %s %s' "$t" "$rc" "${crash:-(none: see $log)}" "$exe" "${crash:-$corpus}")")
    tail -n 40 "$log" >&2
  fi
done
echo "---- fuzz summary"
for l in "${lines[@]}"; do echo "$l"; done
echo "$passed passed, $failed failed"
if [ "$failed" -eq 0 ]; then
  rm -rf "$work"
else
  sbx_say "kept $work for the failing inputs"
fi
[ "$failed" -eq 0 ]
