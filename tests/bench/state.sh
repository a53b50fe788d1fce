#!/usr/bin/env bash
# Benchmark: a sandbox's state operations through a private `sandboxd all`,
# next to what Docker does for the same, in one run, K rounds (default 10):
#   snapshot   `sandbox snapshot SBX --wait` of a sandbox holding a SIZE_MIB
#              (20) MiB file it wrote (dd from /dev/urandom inside it), next to
#              `docker commit` of a plain container holding the same
#              (written with docker exec);
#   create     `sandbox create --from SNAP --wait` next to `sandbox create
#              --image IMAGE --wait` (the round's source sandbox) and to
#              `docker run -d` of the committed image;
#   fork       `sandbox fork SBX --count FORKS (3) --wait`, once a round;
#   pause      `sandbox pause SBX --wait` / `sandbox resume SBX --wait` next
#              to `docker stop -t 5` / `docker start` of the plain container.
# The plain containers run `sleep infinity` with --init and --network none,
# as the worker runs a sandbox's main process (docker-init as pid 1): without
# an init, `sleep` as pid 1 ignores SIGTERM and every `docker stop -t 5` would
# wait out its 5 s. Prints min/p50/p95/max in milliseconds and each
# operation's p50 over its yardstick's p50 measured in the same run.
# Everything it made is removed on exit, also on failure: the sandboxes (by
# their label) and snapshots through the API, the snapshot images by the
# worker's next heartbeat (else by their installation's label), the plain
# containers and committed images by the names it gave them.
# usage: tests/bench/state.sh [K]   (needs dockerd and a build in $BUILD, default build)
set -euo pipefail
# shellcheck source=tests/bench/lib.sh
. "$(dirname "$0")/lib.sh"
K=${1:-10}
SIZE_MIB=${SIZE_MIB:-20}
FORKS=${FORKS:-3}
# shellcheck disable=SC2119 # no extra sandboxd flags
bench_start

RUN="sbx-bench-state-$$" # the label of our sandboxes, the prefix of our Docker names
cluster=                 # our installation's id (dev.sandbox.cluster on its Docker objects)

rm_containers() { # FILTER: docker rm -f of every container `docker ps -a --filter FILTER` lists
  local ids
  mapfile -t ids < <(docker ps -aq --filter "$1")
  [ "${#ids[@]}" = 0 ] || docker rm -f "${ids[@]}" >/dev/null 2>&1 || true
}
rm_images() { # ARGS...: docker rmi -f of every image `docker images ARGS...` lists
  local ids
  mapfile -t ids < <(docker images -q "$@" | sort -u)
  [ "${#ids[@]}" = 0 ] || docker rmi -f "${ids[@]}" >/dev/null 2>&1 || true
}
# What our installation still has in Docker (empty: nothing).
cluster_left() {
  [ -z "$cluster" ] || { docker ps -aq --filter "label=dev.sandbox.cluster=$cluster"; docker images -q --filter "label=dev.sandbox.cluster=$cluster"; }
}

# What this run made in its private controller and in Docker, removed by
# id, label or name; safe to run again.
state_cleanup() {
  local s i
  "$CLI" delete -l "bench-run=$RUN" --wait --timeout 120 >/dev/null 2>&1 || true
  # every snapshot of the private controller is this run's
  for s in $("$CLI" snapshots list -q 2>/dev/null); do "$CLI" snapshots delete "$s" >/dev/null 2>&1 || true; done
  rm_containers "name=^$RUN-"
  rm_images "$RUN"
  [ -n "$cluster" ] || return 0
  # The worker removes a deleted snapshot's image at its next heartbeat (5 s)
  # once no sandbox runs from it; what is still there after 30 s goes by hand.
  for i in $(seq 60); do
    [ -n "$(cluster_left)" ] || return 0
    sleep 0.5
  done
  rm_containers "label=dev.sandbox.cluster=$cluster"
  rm_images --filter "label=dev.sandbox.cluster=$cluster"
}
bench_on_exit state_cleanup

ms() { date +%s%N | cut -c1-13; }
declare -A t
out=
run() { # KEY CMD...: appends the milliseconds CMD took to t[KEY]; its stdout in $out
  local key=$1 t0 t1
  shift
  t0=$(ms)
  out=$("$@") || bench_fail "$key: $* failed: $out"
  t1=$(ms)
  t[$key]="${t[$key]:-} $((t1 - t0))"
}
write="dd if=/dev/urandom of=/state.bin bs=1048576 count=$SIZE_MIB 2>/dev/null && sync"
sbx_sum() { "$CLI" exec "$1" -- md5sum /state.bin | cut -d' ' -f1; }
snp_mib='' img_mib=''

for i in $(seq "$K"); do
  # --- the sandbox ---
  run create_image "$CLI" create --tenant bench --image "$IMAGE" --name "state-src-$i" -l "bench-run=$RUN" --wait --timeout 120
  src=${out%% *}
  if [ -z "$cluster" ]; then
    cluster=$(docker ps -a --filter "label=dev.sandbox.id=$src" --format '{{.Label "dev.sandbox.cluster"}}' | head -n 1)
    [ -n "$cluster" ] || bench_fail "no container labelled dev.sandbox.id=$src"
  fi
  "$CLI" exec "$src" -- sh -c "$write" >/dev/null || bench_fail "writing $SIZE_MIB MiB in $src failed"
  run snapshot "$CLI" snapshot "$src" --name "state-snap-$i" --wait --timeout 300
  snp=${out%% *}
  run create_from "$CLI" create --tenant bench --from "$snp" --name "state-from-$i" -l "bench-run=$RUN" --wait --timeout 120
  from=${out%% *}
  run fork "$CLI" fork "$src" --count "$FORKS" --name-prefix "state-fork-$i" --wait --timeout 300
  if [ "$i" = 1 ]; then # the copies hold the file (checked once)
    sum=$(sbx_sum "$src")
    [ -n "$sum" ] || bench_fail "md5sum in $src failed"
    [ "$(sbx_sum "$from")" = "$sum" ] || bench_fail "the sandbox from $snp does not hold the file"
    [ "$(sbx_sum "state-fork-1-$FORKS")" = "$sum" ] || bench_fail "fork state-fork-1-$FORKS does not hold the file"
    snp_mib=$("$CLI" snapshots get "$snp" --json |
      "$PY" -c 'import json,sys; print("%.1f" % (json.load(sys.stdin)["snapshot"]["size_bytes"] / 1048576))')
  fi
  run pause "$CLI" pause "$src" --wait --timeout 120
  run resume "$CLI" resume "$src" --wait --timeout 120
  "$CLI" delete -l "bench-run=$RUN" --wait --timeout 120 >/dev/null || bench_fail "deleting round $i's sandboxes failed"
  "$CLI" snapshots delete "$snp" >/dev/null || bench_fail "deleting snapshot $snp failed"

  # --- Docker ---
  run docker_run docker run -d --init --network none --name "$RUN-src-$i" "$IMAGE" sleep infinity
  docker exec "$RUN-src-$i" sh -c "$write" || bench_fail "writing $SIZE_MIB MiB in $RUN-src-$i failed"
  run commit docker commit "$RUN-src-$i" "$RUN:r$i"
  run docker_run_from docker run -d --init --network none --name "$RUN-from-$i" "$RUN:r$i" sleep infinity
  if [ "$i" = 1 ]; then
    img_mib=$(($(docker image inspect --format '{{.Size}}' "$RUN:r$i") - $(docker image inspect --format '{{.Size}}' "$IMAGE")))
    img_mib=$(awk -v b="$img_mib" 'BEGIN { printf "%.1f", b / 1048576 }')
  fi
  run stop docker stop -t 5 "$RUN-src-$i"
  run start docker start "$RUN-src-$i"
  docker rm -f "$RUN-src-$i" "$RUN-from-$i" >/dev/null || bench_fail "docker rm of round $i's containers failed"
  docker rmi "$RUN:r$i" >/dev/null || bench_fail "docker rmi $RUN:r$i failed"
done

# shellcheck disable=SC2086 # the values, one word each
p50() { printf '%s\n' ${t[$1]} | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
row() { # LABEL KEY [RATIO YARDSTICK]
  # shellcheck disable=SC2086 # the values, one word each
  printf '%-36s %s' "$1" "$(stats ${t[$2]})"
  [ $# -lt 3 ] || printf ' %7s  %s' "$3" "$4"
  echo
}
printf '\n%-36s %6s %6s %6s %6s %7s  %s\n' "step ($K rounds, ms)" min p50 p95 max ratio "(p50 over the yardstick's p50)"
row "sandbox snapshot --wait ($SIZE_MIB MiB)" snapshot "$(ratio "$(p50 snapshot)" "$(p50 commit)")" "docker commit"
row "docker commit ($SIZE_MIB MiB)" commit
row "sandbox create --from SNAP --wait" create_from "$(ratio "$(p50 create_from)" "$(p50 create_image)")" "sandbox create --image --wait"
printf '%-36s %27s %7s  %s\n' "" "" "$(ratio "$(p50 create_from)" "$(p50 docker_run_from)")" "docker run -d (committed image)"
row "sandbox create --image --wait" create_image "$(ratio "$(p50 create_image)" "$(p50 docker_run)")" "docker run -d IMAGE"
row "docker run -d (committed image)" docker_run_from
row "docker run -d IMAGE" docker_run
row "sandbox fork --count $FORKS --wait" fork "$(ratio "$(p50 fork)" "$(($(p50 snapshot) + $(p50 create_from)))")" \
  "sandbox snapshot + one create --from"
row "sandbox pause --wait" pause "$(ratio "$(p50 pause)" "$(p50 stop)")" "docker stop -t 5"
row "docker stop -t 5" stop
row "sandbox resume --wait" resume "$(ratio "$(p50 resume)" "$(p50 start)")" "docker start"
row "docker start" start
echo "snapshot size_bytes $snp_mib MiB; the committed image adds $img_mib MiB to $IMAGE (round 1)"

start_clean=$(ms)
state_cleanup
left=$({ docker ps -aq --filter "name=^$RUN-"; docker images -q "$RUN"; cluster_left; } | sort -u | tr '\n' ' ')
if [ -n "$left" ]; then
  echo "bench: left behind in Docker: $left" >&2
  exit 1
else
  echo "cleaned up in $(($(ms) - start_clean)) ms: nothing left behind"
fi
