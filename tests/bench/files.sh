#!/usr/bin/env bash
# Benchmark: file transfer throughput of `sandbox cp` (client -> controller
# -> worker forwarder -> Docker's archive API, and back) next to `docker cp`
# of the same files into and out of a plain container of the same image, in
# one run. Two payloads: one large file (SIZE_MIB, default 256) and a tree
# of many small files (FILES, default 2000, of 4 KiB). Each transfer runs N
# times (default 5); the table shows medians and the sandbox/docker ratio,
# and the peak RSS growth of `sandboxd all` (controller and worker in one
# process) during the large upload.
# usage: tests/bench/files.sh [N]   (needs dockerd and a build in $BUILD, default build)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
N=${1:-5}
SIZE_MIB=${SIZE_MIB:-256}
FILES=${FILES:-2000}
bench_start
sbx= cid=
bench_on_exit '[ -z "$sbx" ] || "$CLI" delete "$sbx" --wait --timeout 60; [ -z "$cid" ] || docker rm -f "$cid"'

out=$("$CLI" create --tenant bench --image "$IMAGE" --memory-mib 512 --disk 4096 --wait --timeout 120) ||
  bench_fail "create failed: $out"
sbx=${out%% *}
cid=$(docker run -d --network none "$IMAGE" sleep infinity)

src="$BENCH_TMP/src"
mkdir -p "$src/big" "$src/tree"
head -c $((SIZE_MIB * 1024 * 1024)) /dev/urandom >"$src/big/blob.bin"
"$PY" - "$src/tree" "$FILES" <<'PY'
import os, sys
root, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    d = os.path.join(root, f"d{i % 50:02d}")
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"f{i:05d}.txt"), "wb") as f:
        f.write(os.urandom(4096))
PY

ms() { date +%s%N | cut -c1-13; }
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }
declare -A t
run() { # KEY CMD...: appends the milliseconds CMD took to t[KEY]
  local key=$1 t0 t1
  shift
  t0=$(ms)
  "$@" >/dev/null || bench_fail "$key: $* failed"
  t1=$(ms)
  t[$key]="${t[$key]:-} $((t1 - t0))"
}
clean() { "$CLI" exec "$sbx" -- rm -rf /in >/dev/null; docker exec "$cid" rm -rf /in; rm -rf "$BENCH_TMP/back"; }

rss0=$(rss_kb "$BENCH_PID") rssmax=$rss0
for i in $(seq "$N"); do
  for what in big tree; do
    clean
    if [ "$what" = big ] && [ "$i" = 1 ]; then
      ( while :; do rss_kb "$BENCH_PID"; sleep 0.1; done ) >"$BENCH_TMP/rss" &
      sampler=$!
      run "sbx up $what" "$CLI" cp "$src/$what" "$sbx:/in"
      kill "$sampler"; wait "$sampler" 2>/dev/null || true
      rssmax=$(sort -n "$BENCH_TMP/rss" | tail -n 1)
    else
      run "sbx up $what" "$CLI" cp "$src/$what" "$sbx:/in"
    fi
    run "docker up $what" docker cp "$src/$what" "$cid:/in"
    run "sbx down $what" "$CLI" cp "$sbx:/in" "$BENCH_TMP/back"
    rm -rf "$BENCH_TMP/back"
    run "docker down $what" docker cp "$cid:/in" "$BENCH_TMP/back"
  done
done
# the copies are equal (checked once, after the last round)
"$CLI" cp "$sbx:/in" "$BENCH_TMP/check" >/dev/null
diff -r "$src/tree" "$BENCH_TMP/check" >/dev/null || bench_fail "the tree came back different"

median() { printf '%s\n' $1 | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mib() { # BYTES MS: MiB/s
  awk -v b="$1" -v m="$2" 'BEGIN { if (m < 1) m = 1; printf "%.0f", b / 1048576 / (m / 1000) }'
}
big_bytes=$((SIZE_MIB * 1024 * 1024))
tree_bytes=$((FILES * 4096))
printf '%-32s %10s %10s %10s %10s %8s\n' "transfer ($N runs, medians)" "sandbox ms" "docker ms" "sbx MiB/s" "dkr MiB/s" "ratio"
for dir in up down; do
  for what in big tree; do
    s=$(median "${t["sbx $dir $what"]}") d=$(median "${t["docker $dir $what"]}")
    b=$big_bytes label="$SIZE_MIB MiB file"
    [ "$what" = tree ] && b=$tree_bytes label="$FILES files of 4 KiB"
    printf '%-32s %10s %10s %10s %10s %8s\n' "$dir: $label" "$s" "$d" "$(mib "$b" "$s")" "$(mib "$b" "$d")" \
      "$(awk -v a="$s" -v b="$d" 'BEGIN { if (b < 1) b = 1; printf "%.2f", a / b }')"
  done
done
echo "sandboxd all RSS during the first $SIZE_MIB MiB upload: $((rss0 / 1024)) MiB before, peak $((rssmax / 1024)) MiB (+$(((rssmax - rss0) / 1024)) MiB)"
