#!/usr/bin/env bash
# Benchmark: a small file is as fast as an exec (issue 28, item 2). Side by
# side in one run against one sandbox, N rounds (default 9) of each pair:
#   CLI:  `sandbox exec SBX -- true` next to `sandbox cp` of a 3-byte file in,
#         and `sandbox cp` of it back out;
#   MCP:  sandbox-mcp's `sandbox_exec` of `true` next to `sandbox_write_file`
#         and `sandbox_read_file` of a 3-byte file, over one JSON-RPC session
#         (the calls an agent makes; the process starts once).
# Prints min/p50/p95/max in milliseconds and each one's p50 over its exec's
# p50 (the yardstick, measured in the same rounds). Target: ratio <= 2.
# usage: tests/bench/smallfiles.sh [N]   (needs dockerd and a build in $BUILD)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
N=${1:-9}
bench_start
sbx=
bench_on_exit '[ -z "$sbx" ] || "$CLI" delete "$sbx" --wait --timeout 60'

out=$("$CLI" create --tenant bench --image "$IMAGE" --wait --timeout 120) || bench_fail "create failed: $out"
sbx=${out%% *}
printf 'hi\n' >"$BENCH_TMP/small.txt"
"$CLI" exec "$sbx" -- mkdir -p /work >/dev/null || bench_fail "mkdir /work failed"

ms() { date +%s%N | cut -c1-13; }
declare -A t
run() { # KEY CMD...: appends the milliseconds CMD took to t[KEY]
  local key=$1 t0 t1
  shift
  t0=$(ms)
  "$@" >/dev/null || bench_fail "$key: $* failed"
  t1=$(ms)
  t[$key]="${t[$key]:-} $((t1 - t0))"
}
for ((i = 0; i < N; i++)); do
  run exec "$CLI" exec "$sbx" -- true
  run cp_in "$CLI" cp "$BENCH_TMP/small.txt" "$sbx:/work/small.txt"
  rm -f "$BENCH_TMP/back.txt"
  run cp_out "$CLI" cp "$sbx:/work/small.txt" "$BENCH_TMP/back.txt"
done
cmp -s "$BENCH_TMP/small.txt" "$BENCH_TMP/back.txt" || bench_fail "the file that came back differs"

# The MCP rounds: one sandbox-mcp process, N rounds of the three calls; the
# client prints "KEY MS" per call.
mcp=$("$PY" - "$BUILD/tools/sandbox-mcp" "$sbx" "$N" <<'PY'
import json, subprocess, sys, time
exe, sbx, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = subprocess.Popen([exe], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
seq = 0
def call(method, params):
    global seq
    seq += 1
    p.stdin.write(json.dumps({"jsonrpc": "2.0", "id": seq, "method": method, "params": params}) + "\n")
    p.stdin.flush()
    while True:
        line = p.stdout.readline()
        if not line:
            sys.exit("sandbox-mcp closed its output")
        m = json.loads(line)
        if m.get("id") == seq:
            if "error" in m or m.get("result", {}).get("isError"):
                sys.exit(f"{method} {params.get('name', '')}: {line.strip()}")
            return m
call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "bench", "version": "1"}})
p.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
p.stdin.flush()
tools = {
    "mcp_exec": ("sandbox_exec", {"sandbox_id": sbx, "argv": ["true"]}),
    "mcp_write": ("sandbox_write_file", {"sandbox_id": sbx, "path": "/work/mcp.txt", "content": "hi\n"}),
    "mcp_read": ("sandbox_read_file", {"sandbox_id": sbx, "path": "/work/mcp.txt"}),
}
for _ in range(n):
    for key, (name, args) in tools.items():
        t0 = time.monotonic()
        call("tools/call", {"name": name, "arguments": args})
        print(key, int((time.monotonic() - t0) * 1000))
p.stdin.close()
p.wait(timeout=10)
PY
) || bench_fail "the MCP rounds failed: $mcp"
while read -r key v; do t[$key]="${t[$key]:-} $v"; done <<<"$mcp"

# shellcheck disable=SC2086 # the values, one word each
p50() { printf '%s\n' $1 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
printf '\n%-10s %6s %6s %6s %6s %8s\n' what min p50 p95 max "p50/exec"
for key in exec cp_in cp_out mcp_exec mcp_write mcp_read; do
  # shellcheck disable=SC2086 # the values, one word each
  read -r lo mid hi top <<<"$(stats ${t[$key]})"
  base=$(p50 "${t[exec]}")
  [ "${key#mcp_}" != "$key" ] && base=$(p50 "${t[mcp_exec]}")
  printf '%-10s %6d %6d %6d %6d %8s\n' "$key" "$lo" "$mid" "$hi" "$top" \
    "$(awk -v a="$mid" -v b="$base" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
done
echo "(milliseconds over $N rounds; the ratio is the p50 over its exec's p50 in the same run, target <= 2)"
