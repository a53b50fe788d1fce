#!/usr/bin/env bash
# AEGIS placement across workers with different capacity and labels, on
# the real controller: the shared worker is drained, two more are started
# ("big" 8000m/8192 MiB zone=a, "small" 2000m/2048 MiB zone=b). Checks, each
# against what docs/architecture.md documents: best fit picks the fuller
# worker; a selector restricts the choice; a full worker is filtered with
# its numbers; the spread penalty moves a tenant's next sandbox; a draining
# worker is filtered; every decision is explained by `sandbox get`.
# itest-any-env
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
shared=${ITEST_WORKER_NAME:-itest-worker}
tag=$RANDOM$RANDOM
big="itest-big-$tag"
small="itest-small-$tag"

start_worker() { # NAME CPU MEM LABELS
  local port tok
  tok=$(itest_token itest-workers worker "$1")
  port=$(itest_free_port)
  # container class only: no gVisor on these two
  SANDBOX_WORKER_TOKEN="$tok" SANDBOX_WORKER_CPU_MILLIS=$2 SANDBOX_WORKER_MEMORY_MIB=$3 SANDBOX_WORKER_LABELS=$4 \
    SANDBOX_WORKER_GVISOR_RUNTIME= \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --listen "127.0.0.1:$port" --worker-name "$1" \
    --docker-socket /var/run/docker.sock >>"$ITEST_TMP/worker-$1.log" 2>&1 </dev/null &
  itest_track_pid $!
  itest_watch_log "$ITEST_TMP/worker-$1.log"
  itest_wait_until 60 "worker $1 ready" itest_worker_ready "$1"
}

# On exit, while the extra workers still run: delete what the test made,
# drain the extra workers (so nothing is placed on them once they stop) and
# give the shared worker back.
finish() {
  itest_delete_tracked
  "$SANDBOX_CLI" workers drain "$big" >/dev/null 2>&1
  "$SANDBOX_CLI" workers drain "$small" >/dev/null 2>&1
  "$SANDBOX_CLI" workers resume "$shared" >/dev/null 2>&1
}
itest_on_exit finish
assert_exit 0 sandbox workers drain "$shared"
start_worker "$big" 8000 8192 "zone=a,size=big"
start_worker "$small" 2000 2048 "zone=b,size=small"

t1=$(itest_tenant itest-pl1)
t2=$(itest_tenant itest-pl2)
assert_exit 0 sandbox tenants create "$t1"
assert_exit 0 sandbox tenants create "$t2"

create() { # TENANT CPU MEM [extra flags] → sets SBX, prints nothing
  local t=$1 c=$2 m=$3
  shift 3
  assert_exit 0 sandbox create --tenant "$t" --image "$ITEST_IMAGE" --cpu-millis "$c" --memory-mib "$m" "$@" \
    --wait --timeout 120
  read -r SBX _ <<<"$ITEST_OUT"
  itest_track "$SBX"
}
worker_of() {
  sandbox get "$1" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandbox"]["worker"])'
}
placement_of() { # the create operation's placement JSON
  sandbox get "$1" --json | python3 -c '
import json, sys
doc = json.load(sys.stdin)
print(json.dumps([o for o in doc["operations"] if o["kind"] == "create"][0]["placement"]))'
}

# 1. Best fit: 500m/512MiB leaves small 75% full, big 6% full → small.
create "$t1" 500 512
s1=$SBX
s1_at=$(date +%s)
assert_eq "$small" "$(worker_of "$s1")" "best fit chooses the fuller worker"
pl=$(placement_of "$s1")
assert_eq "$small" "$(itest_json "$pl" worker)" "placement.worker"
assert_eq 250 "$(itest_json "$pl" score.fit)" "fit of small (1000 - 375 - 375)"
assert_eq 200 "$(itest_json "$pl" score.image)" "the image is on the worker"
assert_contains "$(itest_json "$pl" reasons.0)" "$small: chosen, score 450 = fit 250 + image 200 - spread 0" "chosen reason"
assert_contains "$pl" "$big: eligible, lower rank, score 264 = fit 64 + image 200 - spread 0" "the other worker's score"
assert_contains "$pl" "$shared: filtered, draining" "the drained worker's reason"

# 2. A selector overrides the best fit.
create "$t2" 500 512 --selector zone=a
assert_eq "$big" "$(worker_of "$SBX")" "selector zone=a"
pl=$(placement_of "$SBX")
assert_contains "$pl" "$small: filtered, selector zone=a does not match (worker has b)" "selector reason"

# 3. Spread: tenant 1 already has a sandbox on small. Another 500m/512MiB:
# small 500 + 200 - 150 = 550 against big 126 + 200 - 0 = 326 (it holds
# tenant 2's sandbox): small still wins on fit; the penalty shows.
create "$t1" 500 512
s3=$SBX
assert_eq "$small" "$(worker_of "$s3")" "fit still wins over one spread penalty"
pl=$(placement_of "$s3")
assert_eq 150 "$(itest_json "$pl" score.spread)" "one sandbox of the tenant already on small"

# 4. Capacity: small has 1000m/1024MiB left; 1500m does not fit there.
create "$t2" 1500 512
assert_eq "$big" "$(worker_of "$SBX")" "a sandbox too big for small"
pl=$(placement_of "$SBX")
assert_contains "$pl" "$small: filtered, not enough free capacity (needs 1500m cpu and 512 MiB; has 1000m, 1024 MiB" "capacity reason"

# 5. Nothing fits anywhere: it waits, and says why.
assert_exit 0 sandbox create --tenant "$t2" --image "$ITEST_IMAGE" --cpu-millis 9000 --memory-mib 64 --selector size=big
read -r sw opw <<<"$ITEST_OUT"
itest_track "$sw"
itest_wait_until 30 "waiting placement recorded" \
  sh -c "$SANDBOX_CLI operation $opw --json | grep -q 'waiting:'"
assert_exit 0 sandbox operation "$opw"
assert_contains "$ITEST_OUT" "state:          admitted" "a create nobody can take waits"
assert_contains "$ITEST_OUT" "$big: filtered, not enough free capacity" "why it waits"
assert_exit 0 sandbox delete "$sw" --wait --timeout 60

# Two workers share one dockerd: neither may take the other's containers
# for orphans. Let more than the inventory grace (2 heartbeats + 5 s) pass
# since s1 started, then s1 must still run on small.
while [ $(($(date +%s) - s1_at)) -lt 22 ]; do sleep 1; done
assert_exit 0 sandbox get "$s1" --json
assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "small's sandbox after big's inventories"
assert_eq 1 "$(docker ps -q --filter "label=dev.sandbox.id=$s1" | wc -l)" "small's container still there"
assert_eq "$small" "$(docker inspect -f '{{index .Config.Labels "dev.sandbox.worker"}}' "$(docker ps -q --filter "label=dev.sandbox.id=$s1")")" "container labelled with its worker"

# 6. Drain the small worker: new sandboxes go to big, with the reason.
assert_exit 0 sandbox workers drain "$small"
create "$t1" 100 64
assert_eq "$big" "$(worker_of "$SBX")" "small drained"
assert_exit 0 sandbox get "$SBX"
assert_contains "$ITEST_OUT" "placement: placed on $big as container" "human placement summary"
assert_contains "$ITEST_OUT" "$small: filtered, draining (takes no new sandboxes)" "human reason for the drained worker"
# small's sandboxes keep running and answer exec
assert_exit 0 sandbox exec "$s1" -- echo on-small
assert_eq on-small "$ITEST_OUT" "exec on the drained worker's sandbox"
# 7. Only container workers ready: work that needs gvisor is refused at
# once, naming the class; with the gVisor worker back, the same request
# runs there, under gVisor's own kernel.
assert_exit 0 sandbox workers resume "$small"
assert_exit 1 sandbox create --tenant "$t1" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --isolation gvisor --wait --timeout 60
read -r sg _ <<<"$ITEST_OUT"
itest_track "$sg"
assert_contains "$ITEST_ERR" "isolation_unavailable: no ready worker offers isolation class gvisor" "gvisor with container workers only"
assert_exit 0 sandbox get "$sg"
assert_contains "$ITEST_OUT" "$big: filtered, offers container but not gvisor or stronger" "why big cannot"
assert_eq "" "$(docker ps -aq --filter "label=dev.sandbox.id=$sg")" "no container for the refused sandbox"
itest_require_gvisor
assert_exit 0 sandbox workers resume "$shared"
create "$t1" 100 64 --isolation gvisor
assert_eq "$shared" "$(worker_of "$SBX")" "gvisor work goes to the gVisor worker"
assert_exit 0 sandbox exec "$SBX" -- uname -r
[ "$ITEST_OUT" != "$(uname -r)" ] || fail "uname -r inside ($ITEST_OUT) is the host's: not gVisor"
echo "placement across two workers chooses and explains as documented"
