#!/usr/bin/env bash
# Benchmark: latency of `sandbox create --wait`, `exec` and `delete --wait`
# through a private `sandboxd all`, next to plain `docker run -d` / `docker
# exec` / `docker rm -f` of the same image. Prints a table (milliseconds).
# usage: tests/bench/lifecycle.sh [ITERATIONS]   (needs dockerd and a build in $BUILD, default build)
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-20}
BUILD=${BUILD:-build}
IMAGE=${IMAGE:-sandbox-test/busybox:latest}
SBXD="$BUILD/tools/sandboxd"
CLI="$BUILD/tools/sandbox"
[ -x "$SBXD" ] && [ -x "$CLI" ] || { echo "bench: build first (meson setup $BUILD && meson compile -C $BUILD)" >&2; exit 2; }
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "bench: image $IMAGE missing (tests/integration/lib.sh builds it)" >&2; exit 2; }

tmp=$(mktemp -d /tmp/sbx-bench.XXXXXX)
chmod 711 "$tmp"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$SBXD" all --data-dir "$tmp/data" --listen "127.0.0.1:$port" --route-listen 127.0.0.1:0 --log-level warn >"$tmp/out.log" 2>"$tmp/err.log" &
pid=$!
cleanup() { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
for _ in $(seq 100); do
  curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && [ -s "$tmp/data/admin.token" ] && break
  sleep 0.2
done
export SANDBOX_URL="http://127.0.0.1:$port" SANDBOX_TOKEN
SANDBOX_TOKEN=$(cat "$tmp/data/admin.token")
# Wait for the embedded worker to register.
for _ in $(seq 50); do
  curl -sf -H "Authorization: Bearer $SANDBOX_TOKEN" "$SANDBOX_URL/v1/workers" | grep -q '"ready"' && break
  sleep 0.2
done

ms() { date +%s%N | cut -c1-13; }
declare -a c_create c_exec c_delete d_run d_exec d_rm
for i in $(seq "$N"); do
  t0=$(ms); out=$("$CLI" create --tenant bench --image "$IMAGE" --wait --timeout 120); t1=$(ms)
  sbx=${out%% *}
  "$CLI" exec "$sbx" -- true; t2=$(ms)
  "$CLI" delete "$sbx" --wait --timeout 120 >/dev/null; t3=$(ms)
  c_create+=($((t1 - t0))); c_exec+=($((t2 - t1))); c_delete+=($((t3 - t2)))
  t0=$(ms); cid=$(docker run -d --network none "$IMAGE" sleep infinity); t1=$(ms)
  docker exec "$cid" true; t2=$(ms)
  docker rm -f "$cid" >/dev/null; t3=$(ms)
  d_run+=($((t1 - t0))); d_exec+=($((t2 - t1))); d_rm+=($((t3 - t2)))
done

stats() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {p50=a[int((NR+1)/2)]; p95=a[int(NR*0.95+0.999)]; printf "%6d %6d %6d %6d", a[1], p50, p95, a[NR]}'; }
printf '%-34s %6s %6s %6s %6s\n' "step ($N runs, ms)" min p50 p95 max
printf '%-34s %s\n' "sandbox create --wait" "$(stats "${c_create[@]}")"
printf '%-34s %s\n' "docker run -d (CLI)" "$(stats "${d_run[@]}")"
printf '%-34s %s\n' "sandbox exec -- true" "$(stats "${c_exec[@]}")"
printf '%-34s %s\n' "docker exec true (CLI)" "$(stats "${d_exec[@]}")"
printf '%-34s %s\n' "sandbox delete --wait" "$(stats "${c_delete[@]}")"
printf '%-34s %s\n' "docker rm -f (CLI)" "$(stats "${d_rm[@]}")"
