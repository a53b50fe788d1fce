#!/usr/bin/env bash
# Benchmark: latency of `sandbox create --wait`, `exec` and `delete --wait`
# through a private `sandboxd all`, next to plain `docker run -d` / `docker
# exec` / `docker rm -f` of the same image. Prints a table (milliseconds).
# usage: tests/bench/lifecycle.sh [ITERATIONS]   (needs dockerd and a build in $BUILD, default build)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
N=${1:-20}
bench_start
sbx= cid=
bench_on_exit '[ -z "$sbx" ] || "$CLI" delete "$sbx" --wait --timeout 60; [ -z "$cid" ] || docker rm -f "$cid"'

ms() { date +%s%N | cut -c1-13; }
declare -a c_create c_exec c_delete d_run d_exec d_rm
for i in $(seq "$N"); do
  t0=$(ms); out=$("$CLI" create --tenant bench --image "$IMAGE" --wait --timeout 120); t1=$(ms)
  sbx=${out%% *}
  "$CLI" exec "$sbx" -- true; t2=$(ms)
  "$CLI" delete "$sbx" --wait --timeout 120 >/dev/null; t3=$(ms)
  sbx=
  c_create+=($((t1 - t0))); c_exec+=($((t2 - t1))); c_delete+=($((t3 - t2)))
  t0=$(ms); cid=$(docker run -d --network none "$IMAGE" sleep infinity); t1=$(ms)
  docker exec "$cid" true; t2=$(ms)
  docker rm -f "$cid" >/dev/null; t3=$(ms)
  cid=
  d_run+=($((t1 - t0))); d_exec+=($((t2 - t1))); d_rm+=($((t3 - t2)))
done

printf '%-34s %6s %6s %6s %6s\n' "step ($N runs, ms)" min p50 p95 max
printf '%-34s %s\n' "sandbox create --wait" "$(stats "${c_create[@]}")"
printf '%-34s %s\n' "docker run -d (CLI)" "$(stats "${d_run[@]}")"
printf '%-34s %s\n' "sandbox exec -- true" "$(stats "${c_exec[@]}")"
printf '%-34s %s\n' "docker exec true (CLI)" "$(stats "${d_exec[@]}")"
printf '%-34s %s\n' "sandbox delete --wait" "$(stats "${c_delete[@]}")"
printf '%-34s %s\n' "docker rm -f (CLI)" "$(stats "${d_rm[@]}")"
