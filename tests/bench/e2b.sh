#!/usr/bin/env bash
# Benchmark: the official E2B SDK against Sandbox (issue 31) next to the
# `sandbox` CLI doing the same, side by side in one run, N rounds each
# (default 5):
#   create -> first command:  Sandbox.create + commands.run('true') next to
#                             `sandbox create --wait` + `sandbox exec SBX -- true`
#   a command:                commands.run('true') in a running sandbox next to
#                             `sandbox exec SBX -- true`
# Prints min/p50/p95/max in milliseconds and the E2B p50 over the CLI's p50
# (the yardstick, measured in the same run).
# usage: tests/bench/e2b.sh [N]   (needs dockerd, node and npm, and a build in $BUILD)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
N=${1:-5}
dir="$(cd "$(dirname "$0")/../e2b" && pwd)"
command -v node >/dev/null || bench_fail "node is not installed (apt-get install nodejs npm)"
[ -d "$dir/node_modules/e2b" ] || (cd "$dir" && npm ci --no-audit --no-fund >/dev/null) ||
  bench_fail "npm ci in $dir failed"
bench_start
key=$("$CLI" tokens create --tenant bench --role member 2>/dev/null) || bench_fail "sandbox tokens create failed"
sbx=
bench_on_exit '[ -z "$sbx" ] || "$CLI" delete "$sbx" --wait --timeout 60'

ms() { date +%s%N | cut -c1-13; }
declare -A t
for ((i = 0; i < N; i++)); do
  t0=$(ms)
  out=$("$CLI" create --tenant bench --image "$IMAGE" --wait --timeout 120) || bench_fail "create failed: $out"
  one=${out%% *}
  "$CLI" exec "$one" -- true >/dev/null || bench_fail "exec failed"
  t[cli_create_first]="${t[cli_create_first]:-} $(($(ms) - t0))"
  "$CLI" delete "$one" >/dev/null || bench_fail "delete failed"
done
out=$("$CLI" create --tenant bench --image "$IMAGE" --wait --timeout 120) || bench_fail "create failed: $out"
sbx=${out%% *}
for ((i = 0; i < N; i++)); do
  t0=$(ms)
  "$CLI" exec "$sbx" -- true >/dev/null || bench_fail "exec failed"
  t[cli_run]="${t[cli_run]:-} $(($(ms) - t0))"
done
e2b=$(cd "$dir" && E2B_API_URL="$SANDBOX_URL/e2b" E2B_SANDBOX_URL="$SANDBOX_URL/e2b/envd" E2B_API_KEY="$key" \
  node bench.mjs "$N") || bench_fail "the E2B rounds failed: $e2b"
while read -r k v; do t[$k]="${t[$k]:-} $v"; done <<<"$e2b"

# shellcheck disable=SC2086 # the values, one word each
p50() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '\n%-18s %6s %6s %6s %6s %9s\n' what min p50 p95 max "p50/CLI"
for pair in create_first run; do
  for side in cli e2b; do
    key="${side}_$pair"
    # shellcheck disable=SC2086 # the values, one word each
    read -r lo mid hi top <<<"$(stats ${t[$key]})"
    printf '%-18s %6d %6d %6d %6d %9s\n' "$key" "$lo" "$mid" "$hi" "$top" \
      "$(awk -v a="$mid" -v b="$(p50 "${t[cli_$pair]}")" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
  done
done
echo "(milliseconds over $N rounds; create_first: create until its first command returned; run: one command)"
