#!/usr/bin/env bash
# `sandbox logs` (GET /v1/sandboxes/{id}/logs): what the main process
# writes reaches the client through the controller and the worker's
# forwarder. The worker runs `sleep infinity` under docker-init as the main
# process, so output is made by writing to pid 1's stdout/stderr (Docker's
# log pipes) from an exec. Pins: stdout to stdout and stderr to stderr,
# --tail, --json lines, --follow receiving a line written after it started
# and ending (exit 0) when the container is killed and when the sandbox is
# deleted (a quiet follow past the connection timeout:
# test_logs_quiet_follow), another tenant's 404,
# bad parameters 400, a pending sandbox 409, a 5 MB burst cut at 1 MiB with
# a truncated line and the controller's RSS bounded, a client that stops
# reading, and a gVisor sandbox's logs.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-logs)
other=$(itest_tenant itest-logs-other)
SANDBOX_TOKEN=$(itest_token "$tenant" member)
export SANDBOX_TOKEN
stranger=$(itest_token "$other" member)

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# The memory checks read a second controller on the same database with one
# HTTP thread (a blocked event loop would show) and ASan's quarantine kept
# small (freed buffers must not count as growth).
c2port=$(itest_free_port)
c2log="$ITEST_TMP/controller-logs.log"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1" \
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$c2port" \
  --route-listen "127.0.0.1:$(itest_free_port)" --http-threads 1 >>"$c2log" 2>&1 </dev/null &
c2pid=$!
itest_track_pid "$c2pid"
itest_watch_log "$c2log"
itest_wait_healthz "http://127.0.0.1:$c2port" "$c2pid" "second controller" "$c2log" || fail "second controller did not start"
c2="http://127.0.0.1:$c2port"

# Creates a sandbox and prints its id.
make_sandbox() {
  local out id
  out=$(sandbox create --image "$ITEST_IMAGE" --memory-mib 128 --wait --timeout 120) ||
    fail "create failed: $out"
  id=${out%% *}
  itest_track "$id"
  printf '%s\n' "$id"
}

# say SBX FD TEXT: the main process writes TEXT (printf format) to its fd.
say() {
  sandbox exec "$1" -- sh -c "printf '$3' > /proc/1/fd/$2" >/dev/null ||
    fail "exec writing to /proc/1/fd/$2 in $1 failed"
}

sbx=$(make_sandbox)
itest_log "sandbox $sbx"
# pid 1 is docker-init, whose stdout and stderr are Docker's log pipes.
p1=$(sandbox exec "$sbx" -- sh -c "tr '\\000' ' ' </proc/1/cmdline")
assert_contains "$p1" "sleep infinity" "pid 1 runs the main process (cmdline [$p1])"
say "$sbx" 1 'hello-out-1\nhello-out-2\n'
say "$sbx" 2 'hello-err-1\n'
say "$sbx" 1 'last-line\n'

# ---- stdout to stdout, stderr to stderr
sandbox logs "$sbx" >"$ITEST_TMP/out" 2>"$ITEST_TMP/err" || fail "sandbox logs failed: $(cat "$ITEST_TMP/err")"
assert_eq "$(printf 'hello-out-1\nhello-out-2\nlast-line')" "$(cat "$ITEST_TMP/out")" "stdout of sandbox logs"
assert_eq "hello-err-1" "$(cat "$ITEST_TMP/err")" "stderr of sandbox logs"

# ---- --tail 1: only the last line; --tail 0 nothing
assert_eq "last-line" "$(sandbox logs "$sbx" --tail 1 2>/dev/null)" "logs --tail 1"
assert_eq "" "$(sandbox logs "$sbx" --tail 0 2>&1)" "logs --tail 0"

# ---- --json: the NDJSON lines as the API sends them
json=$(sandbox logs "$sbx" --json)
# (not printf | head: head may exit before bash's line-buffered printf has
# written the rest, and pipefail turns that SIGPIPE into a failure)
first=${json%%$'\n'*}
assert_eq "stdout" "$(itest_json "$first" stream)" "first NDJSON line's stream"
assert_contains "$json" '"stream":"stderr","data":"hello-err-1\n"' "the stderr line in --json output"

# ---- the API directly: content type, errors
hdrs=$(curl -s -D - -o /dev/null -H "Authorization: Bearer $SANDBOX_TOKEN" "$SANDBOX_URL/v1/sandboxes/$sbx/logs")
assert_contains "$hdrs" "Content-Type: application/x-ndjson" "logs answer content type"
for q in 'tail=-1' 'tail=abc' 'tail=01' 'tail=10000001' 'follow=yes' 'follow='; do
  itest_http GET "/v1/sandboxes/$sbx/logs?$q" "$SANDBOX_TOKEN"
  assert_http 400 invalid_argument "logs ?$q"
done
itest_http GET "/v1/sandboxes/$sbx/logs" "$stranger"
assert_http 404 not_found "another tenant's sandbox logs"
itest_http GET "/v1/sandboxes/sbx_00000000000000000000000000/logs" "$SANDBOX_TOKEN"
assert_http 404 not_found "an unknown sandbox's logs"
itest_http POST "/v1/sandboxes/$sbx/logs" "$SANDBOX_TOKEN"
assert_http 405 "*" "POST to logs"
assert_exit 3 env SANDBOX_TOKEN="$stranger" "$SANDBOX_CLI" logs "$sbx"
assert_exit 2 sandbox logs
assert_exit 2 sandbox logs "$sbx" --tail x
assert_contains "$(sandbox logs --help)" "--follow" "sandbox logs --help"

# A sandbox that waits for placement has no container: 409.
pend=$(sandbox create --image "$ITEST_IMAGE" --selector "nowhere=$RANDOM" --memory-mib 64) || fail "create: $pend"
pend=${pend%% *}
itest_track "$pend"
itest_http GET "/v1/sandboxes/$pend/logs" "$SANDBOX_TOKEN"
assert_http 409 conflict "logs of a sandbox that is not placed"

# ---- --follow: a line written after it started arrives, and the stream
# ends (exit 0) when the container is killed.
fol="$ITEST_TMP/follow.out"
"$SANDBOX_CLI" logs "$sbx" --follow --tail 0 >"$fol" 2>"$ITEST_TMP/follow.err" &
fpid=$!
itest_track_pid "$fpid"
sleep 1
t0=$(date +%s%N)
say "$sbx" 1 'followed-line\n'
itest_wait_until 5 "the followed line arrives" grep -q followed-line "$fol"
t1=$(date +%s%N)
itest_log "followed line arrived $(((t1 - t0) / 1000000)) ms after the exec started"
kill -0 "$fpid" 2>/dev/null || fail "follow ended early: $(cat "$ITEST_TMP/follow.err")"
docker kill "sbx-$sbx" >/dev/null
itest_wait_until 10 "follow ends once the container is killed" bash -c "! kill -0 $fpid 2>/dev/null"
wait "$fpid" && frc=0 || frc=$?
assert_eq 0 "$frc" "follow exit code after the container was killed (stderr: $(cat "$ITEST_TMP/follow.err"))"
assert_eq "followed-line" "$(cat "$fol")" "what the follow printed"

# ---- a quiet follow ends (exit 0) when its sandbox is deleted
sbx2=$(make_sandbox)
"$SANDBOX_CLI" logs "$sbx2" -f >"$ITEST_TMP/quiet.out" 2>"$ITEST_TMP/quiet.err" &
qpid=$!
itest_track_pid "$qpid"
sleep 2
kill -0 "$qpid" 2>/dev/null || fail "the quiet follow ended early: $(cat "$ITEST_TMP/quiet.err")"
assert_exit 0 sandbox delete "$sbx2" --wait --timeout 60
itest_wait_until 15 "a quiet follow ends once its sandbox is deleted" bash -c "! kill -0 $qpid 2>/dev/null"
wait "$qpid" && qrc=0 || qrc=$?
assert_eq 0 "$qrc" "quiet follow exit code (stderr: $(cat "$ITEST_TMP/quiet.err"))"
# A deleted sandbox answers from its kept tail (empty unless one was kept).
itest_http GET "/v1/sandboxes/$sbx2/logs?follow=true" "$SANDBOX_TOKEN"
assert_http 200 "" "logs of a deleted sandbox"

# ---- Ctrl-C ends a follow: exit 130
sbx3=$(make_sandbox)
"$SANDBOX_CLI" logs "$sbx3" --follow >/dev/null 2>&1 &
cpid=$!
sleep 1
kill -INT "$cpid"
wait "$cpid" && crc=0 || crc=$?
assert_eq 130 "$crc" "follow exit code after SIGINT"

# ---- a 5 MB burst: a read forwards 1 MiB and says it cut there; the
# controller's memory does not grow with it.
for _ in 1 2; do sandbox --url "$c2" logs "$sbx" >/dev/null 2>&1; done # warm up
rss0=$(rss_kb "$c2pid")
sandbox exec "$sbx3" --timeout 120 -- sh -c \
  'i=0; while [ $i -lt 5000 ]; do printf "%01000d\n" $i; i=$((i+1)); done > /proc/1/fd/1' >/dev/null ||
  fail "the 5 MB burst failed"
sandbox --url "$c2" logs "$sbx3" >"$ITEST_TMP/burst.out" 2>"$ITEST_TMP/burst.err" || fail "logs of the burst failed"
bytes=$(itest_file_size "$ITEST_TMP/burst.out")
[ "$bytes" -eq 1048576 ] || fail "a read of 5 MB of logs printed $bytes bytes, not 1048576"
assert_contains "$(cat "$ITEST_TMP/burst.err")" "output cut at 1048576 bytes" "the truncation note"
last=$(sandbox logs "$sbx3" --json | tail -n 1)
assert_eq "true" "$(itest_json "$last" truncated)" "the last NDJSON line of a cut read"
assert_eq "0000000000" "$(sandbox logs "$sbx3" --tail 1 | head -c 10 | tr -d 123456789)" "--tail 1 of the burst"
for _ in 1 2 3; do sandbox --url "$c2" logs "$sbx3" >/dev/null 2>&1; done
rss1=$(rss_kb "$c2pid")
itest_log "controller RSS ${rss0} kB before the burst reads, ${rss1} kB after"
[ $((rss1 - rss0)) -lt 65536 ] || fail "the controller grew by $((rss1 - rss0)) kB reading 4 MiB of logs"

# ---- a client that follows and stops reading: bounded memory, and the
# controller still answers others.
python3 - "$c2" "$SANDBOX_TOKEN" "$sbx3" >"$ITEST_TMP/stall.port" <<'EOF' &
import socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port))
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.sendall(("GET /v1/sandboxes/%s/logs?follow=true HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
           % (sys.argv[3], sys.argv[2])).encode())
print("sent", flush=True)
time.sleep(25)   # never reads
EOF
spid=$!
itest_track_pid "$spid"
itest_wait_until 5 "the stalled client connects" grep -q sent "$ITEST_TMP/stall.port"
rss2=$(rss_kb "$c2pid")
burst_pids=()
for _ in 1 2 3; do
  sandbox exec "$sbx3" --timeout 120 -- sh -c \
    'i=0; while [ $i -lt 5000 ]; do printf "%01000d\n" $i; i=$((i+1)); done > /proc/1/fd/1' >/dev/null &
  burst_pids+=($!)
done
sleep 8
assert_eq "followed-line" "$(sandbox --url "$c2" logs "$sbx" --tail 1 2>/dev/null || true)" \
  "logs through the one thread of a controller that a stalled client reads from"
rss3=$(rss_kb "$c2pid")
itest_log "controller RSS ${rss2} kB before 15 MB to a client that does not read, ${rss3} kB after"
[ $((rss3 - rss2)) -lt 65536 ] || fail "a client that does not read grew the controller by $((rss3 - rss2)) kB"
wait "${burst_pids[@]}"
# $spid may be a subshell that forked python3 (a trap is set): both go now
for p in $(itest_descendants "$spid") "$spid"; do kill "$p" 2>/dev/null || true; done


# ---- gVisor: its container's logs too
itest_require_gvisor
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"$ITEST_IMAGE\",\"isolation\":\"gvisor\",\"memory_mib\":128}"
assert_http 202 "" "create a gVisor sandbox"
gv=$(itest_json "$HTTP_BODY" sandbox.id)
itest_track "$gv"
assert_exit 0 sandbox wait "$(itest_json "$HTTP_BODY" operation.id)" --timeout 120
say "$gv" 1 'from-gvisor\n'
say "$gv" 2 'gvisor-err\n'
sandbox logs "$gv" >"$ITEST_TMP/gv.out" 2>"$ITEST_TMP/gv.err" || fail "logs of a gVisor sandbox: $(cat "$ITEST_TMP/gv.err")"
assert_eq "from-gvisor" "$(cat "$ITEST_TMP/gv.out")" "stdout of a gVisor sandbox"
assert_eq "gvisor-err" "$(cat "$ITEST_TMP/gv.err")" "stderr of a gVisor sandbox"

echo "logs stream stdout and stderr, tail, follow to the end, 404 across tenants, bounded reads and a gVisor sandbox"
