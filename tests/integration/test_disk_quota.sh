#!/usr/bin/env bash
# A disk quota per sandbox (issue 15, finding 3): disk_mib in the spec, with
# the server default and ceiling and the tenant policy's ceiling (422
# policy_denied naming the rule; bad values 400 naming the field). A sandbox
# that writes twice its quota into its writable layer (/root and /tmp) is
# stopped by its worker within one watch interval and fails with
# disk_quota_exceeded (an event, the worker's metric); the host's disk grew by
# at most the quota plus one interval's worth of writing. A sandbox under its
# quota runs on, and a read-only root's /tmp tmpfs is no larger than the quota.
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

QUOTA=64            # MiB, the quota of the sandboxes under test
INTERVAL_MS=2000    # worker_disk_interval_ms (the default)
HB=5                # heartbeat_seconds (the default)
tag=$RANDOM$RANDOM
wname="itest-disk-$tag"
wlog="$ITEST_TMP/worker-disk-$tag.log"
itest_watch_log "$wlog"

# ---- spec validation (no worker needed)
itest_as_member itest-disk
assert_exit 2 sandbox create --image "$ITEST_IMAGE" --disk 8
assert_contains "$ITEST_ERR" "--disk: 8 is out of range (16 to" "the CLI's bound of --disk"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"$ITEST_IMAGE\",\"disk_mib\":8}"
assert_http 400 invalid_argument "disk_mib below the minimum"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "disk_mib must be between 16 and" "the message names disk_mib"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"$ITEST_IMAGE\",\"disk_mib\":\"64\"}"
assert_http 400 invalid_argument "disk_mib as a string"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"$ITEST_IMAGE\",\"disk_mib\":100000}"
assert_http 422 policy_denied "disk_mib over the server ceiling"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "disk_mib 100000 is over the server ceiling max_disk_mib = 65536" \
  "the server ceiling's refusal"
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN sandbox tenants update "$tenant" --policy '{"max_disk_mib":70000}' >/dev/null 2>&1 \
  && fail "a tenant policy above the server's max_disk_mib was accepted"
assert_exit 0 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" tenants update "$tenant" --policy '{"max_disk_mib":128}'
assert_exit 1 sandbox create --image "$ITEST_IMAGE" --disk 256
assert_contains "$ITEST_ERR" "disk_mib 256 is over the tenant policy max_disk_mib = 128" "the tenant ceiling's refusal"

# a tenant ceiling below the smallest quota refuses a create without disk_mib
tiny=$(itest_tenant itest-disk-tiny)
assert_exit 0 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" tenants create "$tiny"
assert_exit 0 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" tenants update "$tiny" --policy '{"max_disk_mib":8}'
assert_exit 1 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" create --tenant "$tiny" --image "$ITEST_IMAGE"
assert_contains "$ITEST_ERR" "disk_mib 16 is over the tenant policy max_disk_mib = 8" "a tenant ceiling under the minimum"

# ---- a worker of our own: its metrics, its log, its interval
finish() {
  itest_delete_tracked
  [ -z "${wpid:-}" ] || itest_stop_pid "$wpid" worker 30
}
wpid=
itest_on_exit finish
wtoken=$(itest_token itest-workers worker "$wname")
SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=8000 SANDBOX_WORKER_MEMORY_MIB=8192 \
  SANDBOX_WORKER_LABELS="itest-disk=$tag" SANDBOX_WORKER_GVISOR_RUNTIME='' \
  SANDBOX_WORKER_DISK_INTERVAL_MS=$INTERVAL_MS \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" --docker-socket /var/run/docker.sock \
  --worker-health-listen 127.0.0.1:0 >>"$wlog" 2>&1 </dev/null &
wpid=$!
itest_track_pid "$wpid"
itest_await "$wpid" "$wlog" 40 "worker exited before registering" "worker $wname not ready" itest_worker_ready "$wname"
hport=$(sed -n 's/.*health checks on 127\.0\.0\.1:\([0-9][0-9]*\) .*/\1/p' "$wlog" | head -n 1)
[ -n "$hport" ] || fail "the worker did not log its health address"
assert_contains "$(cat "$wlog")" "disk quota: " "the worker logs how it holds disk quotas"
metric_disk() {
  curl -sf --max-time 5 "http://127.0.0.1:$hport/metrics" | sed -n 's/^sandbox_disk_quota_exceeded_total \([0-9.e+]*\)$/\1/p'
}
m0=$(metric_disk)
[ -n "$m0" ] || fail "the worker's /metrics has no sandbox_disk_quota_exceeded_total"

create() { # create [FLAGS...]: the id of a running sandbox on our worker (itest_track it)
  local sbx
  assert_exit 0 sandbox create --image "$ITEST_IMAGE" --ttl 300 --selector "itest-disk=$tag" --wait --timeout 120 "$@"
  read -r sbx _ <<<"$ITEST_OUT"
  assert_match "$sbx" '^sbx_' "sandbox id"
  printf '%s\n' "$sbx"
}
phase_is() { [ "$(itest_json "$(sandbox get "$1" --json)" sandbox.phase)" = "$2" ]; }
now() { date +%s.%N; }

# ---- a sandbox under its quota and a read-only root: both run on
small=$(create --disk "$QUOTA")
itest_track "$small"
assert_eq "$QUOTA" "$(itest_json "$(sandbox get "$small" --json)" sandbox.disk_mib)" "disk_mib in the sandbox object"
assert_exit 0 sandbox get "$small"
assert_contains "$ITEST_OUT" "$QUOTA MiB" "sandbox get shows the disk quota"
assert_exit 0 sandbox exec "$small" -- dd if=/dev/zero of=/root/small bs=1M count=16
ro=$(create --disk 32 --read-only-root)
itest_track "$ro"
# /tmp is a tmpfs there: memory, not disk, but sized within the quota
assert_exit 0 sandbox exec "$ro" -- sh -c 'df -m /tmp | tail -n 1'
assert_match "$ITEST_OUT" '^tmpfs +32 ' "the /tmp tmpfs of a 32 MiB quota"
assert_exit 1 sandbox exec "$ro" -- dd if=/dev/zero of=/tmp/fill bs=1M count=128
assert_contains "$ITEST_ERR$ITEST_OUT" "No space left" "writing past the /tmp tmpfs"
# no default: the server's default_disk_mib (1024) within the tenant's 128
dflt=$(create)
itest_track "$dflt"
assert_eq 128 "$(itest_json "$(sandbox get "$dflt" --json)" sandbox.disk_mib)" "default disk_mib within the tenant ceiling"

# ---- twice the quota into the writable layer, and on: the quota in /root,
# then 8 MiB chunks into /tmp (at most 80 MiB/s, 1 GiB in all) until stopped
RATE=80   # MiB/s at most, the chunk loop's bound
big=$(create --disk "$QUOTA")
itest_track "$big"
# what it writes lands in its container's writable layer, its upper
# directory on the host: the peak of that directory's disk use (not the
# host's, which other tests on a shared host write to as well: initdb's of
# two fault tests once took it 5 MiB past the bound), sampled every 0.1 s
upper=$(docker inspect -f '{{.GraphDriver.Data.UpperDir}}' "$(docker ps -q --filter "label=dev.sandbox.id=$big")")
[ -d "$upper" ] || fail "no upper directory of $big's container ($upper)"
disk_used() { du -sB1 "$upper" 2>/dev/null | cut -f1; }
before=$(disk_used)
peak_file="$ITEST_TMP/disk-peak-$tag"
echo "$before" >"$peak_file"
(
  p=$before
  while :; do
    u=$(disk_used)
    if [ "$u" -gt "$p" ]; then p=$u; echo "$p" >"$peak_file"; fi
    sleep 0.1
  done
) &
itest_track_pid $!
t0=$(now)
# whatever the exec's end: the worker kills the sandbox under it
sandbox exec "$big" --timeout 60 -- sh -c \
  "dd if=/dev/zero of=/root/fill bs=1M count=$QUOTA 2>/dev/null; i=0; while [ \$i -lt 128 ]; do
     dd if=/dev/zero bs=1M count=8 2>/dev/null >>/tmp/fill || exit 1; i=\$((i + 1)); sleep 0.1; done" \
  >/dev/null 2>&1 || true
t1=$(now)
wrote=$(python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$wrote" \
  "$((INTERVAL_MS / 1000 + 8))" || fail "the writer of $big ran ${wrote}s: the worker did not stop it"
max_end=$((HB + 5))
itest_wait_until $((max_end + 20)) "sandbox $big failed" phase_is "$big" failed
took=$(python3 -c "import time,sys; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t1")
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$took" "$max_end" \
  || fail "sandbox $big failed ${took}s after it was stopped; expected within ${max_end}s"
after=$(cat "$peak_file")
out=$(sandbox get "$big" --json)
assert_eq disk_quota_exceeded "$(itest_json "$out" sandbox.failure.reason)" "failure.reason"
assert_contains "$(itest_json "$out" sandbox.failure.message)" "disk quota" "failure.message"
itest_http GET "/v1/events?sandbox=$big&kind=sandbox.failed" "$SANDBOX_TOKEN"
assert_http 200 "" "events of $big"
assert_eq disk_quota_exceeded "$(itest_json "$HTTP_BODY" events.0.data.reason)" "the sandbox.failed event's reason"
m1=$(metric_disk)
python3 -c "import sys; sys.exit(0 if float(sys.argv[2]) >= float(sys.argv[1]) + 1 else 1)" "$m0" "$m1" \
  || fail "sandbox_disk_quota_exceeded_total did not grow ($m0 -> $m1)"
assert_contains "$(cat "$wlog")" "stopped sandbox $big" "the worker logs the stop"
# The host's disk under the sandbox: at most the quota plus one interval's
# worth of writing (RATE x (interval + 1 s to measure and kill)), plus 8 MiB
# of the file system's own. Unstopped, the writer would reach 1088 MiB.
grew=$(( (after - before) / 1048576 ))
allowed=$((QUOTA + RATE * (INTERVAL_MS / 1000 + 1) + 8))
itest_log "disk quota: the writer was stopped after ${wrote}s, the sandbox failed ${took}s later; its writable layer peaked ${grew} MiB above its start (allowed ${allowed})"
[ "$grew" -le "$allowed" ] || fail "its writable layer grew by ${grew} MiB on the host; at most ${allowed} MiB allowed"
[ "$grew" -ge "$QUOTA" ] || fail "its writable layer grew by ${grew} MiB only: the measure missed the writes"

# ---- the sandbox under its quota is unaffected
assert_eq running "$(itest_json "$(sandbox get "$small" --json)" sandbox.phase)" "the sandbox under its quota"
assert_eq running "$(itest_json "$(sandbox get "$ro" --json)" sandbox.phase)" "the read-only sandbox with a full /tmp"
assert_exit 0 sandbox exec "$small" -- true
