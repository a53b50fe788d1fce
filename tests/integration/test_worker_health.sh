#!/usr/bin/env bash
# The worker's health endpoint (worker_health_listen): an extra worker,
# reaching Docker through a relay socket the test controls, serves
# /healthz and /readyz (200 once registered), /metrics in strict Prometheus
# text format whose assignment counters move when a sandbox runs there;
# 404/405/400/431 answers with JSON error bodies; slow clients holding
# connections do not block probes; a Docker that stops answering makes
# /readyz 503 naming the runtime (and /healthz still 200) until it answers
# again; a health port already in use is a start failure that says so.
# itest-waits: most of it is heartbeats and readiness flips
# itest-timeout: 180
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
here=$(cd "$(dirname "$0")" && pwd)
tag=$RANDOM$RANDOM
wname="itest-health-$tag"
wlog="$ITEST_TMP/worker-$wname.log"
relay_sock="$ITEST_TMP/docker-relay-$tag.sock"
mfile="$ITEST_TMP/metrics-$tag.txt"
itest_watch_log "$wlog"

# A unix socket relaying every connection to the real Docker socket: SIGSTOP
# makes "Docker" stop answering (connections queue unanswered), SIGCONT
# brings it back.
relay_code='
import socket, sys, threading
path = sys.argv[1]
srv = socket.socket(socket.AF_UNIX)
srv.bind(path)
srv.listen(128)
def pump(a, b):
    try:
        while True:
            d = a.recv(65536)
            if not d:
                break
            b.sendall(d)
    except OSError:
        pass
    try:
        b.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(c):
    u = socket.socket(socket.AF_UNIX)
    try:
        u.connect("/var/run/docker.sock")
    except OSError:
        c.close()
        return
    t = threading.Thread(target=pump, args=(u, c), daemon=True)
    t.start()
    pump(c, u)
    t.join()
    c.close()
    u.close()
while True:
    c, _ = srv.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
'
# (the interpreter itself, not lib.sh's python3 function: $! must be its pid)
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
"$py" -c "$relay_code" "$relay_sock" </dev/null >"$ITEST_TMP/relay-$tag.log" 2>&1 &
relay_pid=$!
itest_track_pid "$relay_pid"
itest_wait_until 10 "the Docker relay socket" test -S "$relay_sock"

wpid=
finish() {
  kill -CONT "$relay_pid" 2>/dev/null
  itest_delete_tracked
  "$SANDBOX_CLI" workers drain "$wname" >/dev/null 2>&1
  [ -z "$wpid" ] || itest_stop_pid "$wpid" worker 30
}
itest_on_exit finish

wtoken=$(itest_token itest-workers worker "$wname")
# port 0: the worker logs the port it got
SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=4000 SANDBOX_WORKER_MEMORY_MIB=4096 \
  SANDBOX_WORKER_LABELS="itest-health=$tag" SANDBOX_WORKER_GVISOR_RUNTIME='' \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" --docker-socket "$relay_sock" \
  --worker-health-listen 127.0.0.1:0 >>"$wlog" 2>&1 </dev/null &
wpid=$!
itest_track_pid "$wpid"
health_port() { sed -n 's/.*health checks on 127\.0\.0\.1:\([0-9][0-9]*\) .*/\1/p' "$wlog" | head -n 1; }
has_health_port() { [ -n "$(health_port)" ]; }
itest_wait_until 30 "the worker to log its health address" has_health_port
hport=$(health_port)
H="http://127.0.0.1:$hport"

# hget METHOD PATH [curl args...]: HTTP_STATUS, HTTP_BODY; headers in HTTP_HEADERS
hget() {
  local method=$1 path=$2 hf
  shift 2
  hf=$(mktemp "$ITEST_TMP/hdr.XXXXXX")
  HTTP_BODY=$(curl -s -X "$method" -D "$hf" --max-time 5 "$@" "$H$path" -w '\n%{http_code}') || true
  HTTP_STATUS=${HTTP_BODY##*$'\n'}
  HTTP_BODY=${HTTP_BODY%$'\n'*}
  HTTP_HEADERS=$(tr -d '\r' <"$hf")
  rm -f "$hf"
}
status_is() { # PATH CODE
  hget GET "$1"
  [ "$HTTP_STATUS" = "$2" ]
}
# raw PYTHON_BYTES_EXPR: sends exactly those bytes; HTTP_STATUS and HTTP_BODY of the answer
raw() {
  local out
  out=$(python3 - "$hport" "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(eval(sys.argv[2]))
data = b""
while True:
    d = s.recv(65536)
    if not d:
        break
    data += d
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b" ")[1].decode() if head else "000")
print(body.decode("utf-8", "replace").strip())
EOF
)
  HTTP_STATUS=${out%%$'\n'*}
  HTTP_BODY=${out#*$'\n'}
}
metrics() { # fetches /metrics into $mfile and checks the format strictly
  curl -fsS --max-time 5 "$H/metrics" -o "$mfile" || return 1
  python3 "$here/promparse.py" "$mfile" >"$mfile.samples"
}
mval() { # NAME [LABEL=VALUE...]: the sum of the matching samples in $mfile
  python3 - "$here" "$mfile" "$@" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
import promparse
with open(sys.argv[2]) as f:
    fams = promparse.parse(f.read())
labels = dict(a.split("=", 1) for a in sys.argv[4:])
print("%g" % promparse.value(fams, sys.argv[3], **labels))
EOF
}
metric_at_least() { # NAME MIN [LABEL=VALUE...]
  local name=$1 min=$2
  shift 2
  metrics && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)' \
    "$(mval "$name" "$@")" "$min"
}

# ---- 1. alive, then ready once registered
hget GET /healthz
assert_eq 200 "$HTTP_STATUS" "/healthz"
assert_eq ok "$(itest_json "$HTTP_BODY" status)" "/healthz status"
assert_contains "$HTTP_HEADERS" "Content-Type: application/json" "/healthz content type"
assert_contains "$HTTP_HEADERS" "Connection: close" "/healthz connection header"
itest_wait_until 30 "/readyz 200" status_is /readyz 200
assert_eq ready "$(itest_json "$HTTP_BODY" status)" "/readyz status"
assert_eq true "$(itest_json "$HTTP_BODY" checks.runtime.ok)" "/readyz runtime check"
assert_eq true "$(itest_json "$HTTP_BODY" checks.controller.ok)" "/readyz controller check"
assert_match "$(itest_json "$HTTP_BODY" checks.controller.worker_id)" '.+' "/readyz worker id"
itest_worker_ready "$wname" || fail "worker $wname is not listed ready"

# ---- 2. /metrics: strict text format, the worker's families
hget GET /metrics
assert_eq 200 "$HTTP_STATUS" "/metrics"
assert_contains "$HTTP_HEADERS" "Content-Type: text/plain; version=0.0.4; charset=utf-8" "/metrics content type"
itest_wait_until 20 "a heartbeat counted" metric_at_least sandbox_worker_heartbeats_total 1 result=ok
for fam in sandbox_worker_assignments_total sandbox_worker_assignment_duration_seconds sandbox_worker_sandboxes \
  sandbox_worker_heartbeats_total sandbox_worker_docker_requests_total sandbox_worker_docker_request_duration_seconds \
  sandbox_worker_route_connections sandbox_worker_capacity sandbox_worker_assignments_running; do
  grep -q "^# TYPE $fam " "$mfile" || fail "/metrics has no family $fam"
done
assert_eq 4000 "$(mval sandbox_worker_capacity resource=cpu_millis)" "capacity cpu_millis"
assert_eq 4096 "$(mval sandbox_worker_capacity resource=memory_mib)" "capacity memory_mib"
assert_eq 0 "$(mval sandbox_worker_route_connections)" "route connections"
metric_at_least sandbox_worker_docker_requests_total 1 result=ok || fail "no Docker request counted"
creates0=$(mval sandbox_worker_assignments_total kind=create outcome=succeeded)
execs0=$(mval sandbox_worker_assignments_total kind=exec outcome=succeeded)

# ---- 3. a sandbox on this worker moves the assignment counters
tenant=$(itest_tenant itest-health)
assert_exit 0 sandbox tenants create "$tenant"
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 \
  --selector "itest-health=$tag" --wait --timeout 60
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 sandbox get "$sbx" --json
assert_eq "$wname" "$(itest_json "$ITEST_OUT" sandbox.worker)" "the sandbox runs on the health worker"
assert_exit 0 sandbox exec "$sbx" -- echo hello
assert_eq hello "$ITEST_OUT" "exec output"
metrics
assert_eq "$((creates0 + 1))" "$(mval sandbox_worker_assignments_total kind=create outcome=succeeded)" "creates counted"
assert_eq "$((execs0 + 1))" "$(mval sandbox_worker_assignments_total kind=exec outcome=succeeded)" "execs counted"
metric_at_least sandbox_worker_assignment_duration_seconds_count 1 kind=create || fail "no create duration observed"
itest_wait_until 15 "the sandbox in the inventory gauge" metric_at_least sandbox_worker_sandboxes 1

# ---- 4. what is not a probe: JSON errors
hget GET /nope
assert_http 404 not_found "GET /nope"
hget POST /healthz
assert_http 405 method_not_allowed "POST /healthz"
assert_contains "$HTTP_HEADERS" "Allow: GET, HEAD" "405 Allow header"
hget DELETE /metrics
assert_http 405 method_not_allowed "DELETE /metrics"
hget HEAD /healthz --head
assert_eq 200 "$HTTP_STATUS" "HEAD /healthz"
raw 'b"BAD REQUEST\r\n\r\n"'
assert_http 400 invalid_argument "a malformed request line"
raw 'b"GET /healthz HTTP/1.1\r\nno colon\r\n\r\n"'
assert_http 400 invalid_argument "a malformed header line"
raw 'b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n"'
assert_http 431 headers_too_large "a head over 8 KiB"
raw 'b"GET /readyz?x=1 HTTP/1.0\r\n\r\n"'
assert_eq 200 "$HTTP_STATUS" "HTTP/1.0 with a query"

# ---- 5. slow clients (more than the 64 connections) do not block probes,
# and each is closed within the 5 s head deadline
ready_file="$ITEST_TMP/slow-$tag.ready"
"$py" - "$hport" 70 "$ready_file" >"$ITEST_TMP/slow-$tag.out" 2>&1 <<'EOF' &
import socket, sys, time
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # the head never ends
    socks.append((s, time.monotonic()))
open(ready, "w").write("ready\n")
worst = 0.0
for s, t0 in socks:
    s.settimeout(max(0.1, t0 + 9 - time.monotonic()))
    try:
        data = s.recv(4096)
        took = time.monotonic() - t0 if data == b"" else 99.0
    except socket.timeout:
        took = 99.0
    except OSError:
        took = time.monotonic() - t0
    worst = max(worst, took)
print("closed-within %.1f" % worst)
EOF
slow_pid=$!
itest_wait_until 10 "the slow clients to connect" test -s "$ready_file"
for i in 1 2 3; do
  t=$(curl -s -o /dev/null --max-time 2 -w '%{http_code} %{time_total}' "$H/healthz") || t="000 2"
  assert_eq 200 "${t% *}" "/healthz $i while 70 slow clients hold connections"
done
hget GET /metrics
assert_eq 200 "$HTTP_STATUS" "/metrics while slow clients hold connections"
wait "$slow_pid" || fail "the slow client script failed: $(cat "$ITEST_TMP/slow-$tag.out")"
worst=$(sed -n 's/^closed-within //p' "$ITEST_TMP/slow-$tag.out")
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 7.0 else 1)' "${worst:-99}" \
  || fail "a slow client was not closed within 7 s (worst: ${worst:-none}): $(cat "$ITEST_TMP/slow-$tag.out")"

# ---- 6. Docker stops answering: /readyz 503 naming the runtime; /healthz
# still answers at once; Docker back: ready again
kill -STOP "$relay_pid"
# the 503 that names Docker: a check still running when the relay stopped
# (the one before the ping fails: the open network's rules, slow on a busy
# host) first makes it 503 as a stale check ("finished 15 s ago")
docker_named() { status_is /readyz 503 && [[ $(itest_json "$HTTP_BODY" checks.runtime.error) == *"$relay_sock"* ]]; }
itest_wait_until 40 "/readyz 503 naming Docker while it does not answer" docker_named
assert_eq unready "$(itest_json "$HTTP_BODY" status)" "/readyz status without Docker"
assert_eq false "$(itest_json "$HTTP_BODY" checks.runtime.ok)" "runtime check without Docker"
assert_contains "$(itest_json "$HTTP_BODY" checks.runtime.error)" "docker engine at $relay_sock" "runtime error"
assert_eq true "$(itest_json "$HTTP_BODY" checks.controller.ok)" "controller check without Docker"
t=$(curl -s -o /dev/null --max-time 2 -w '%{http_code} %{time_total}' "$H/healthz") || t="000 2"
assert_eq 200 "${t% *}" "/healthz while Docker does not answer"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 1.0 else 1)' "${t#* }" \
  || fail "/healthz took ${t#* } s while Docker does not answer"
metric_at_least sandbox_worker_docker_requests_total 1 result=transport_error || fail "no failed Docker request counted"
kill -CONT "$relay_pid"
itest_wait_until 20 "/readyz 200 once Docker answers again" status_is /readyz 200

# ---- 7. a health port already in use is a start failure that says why
assert_exit 1 timeout 60 env SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_GVISOR_RUNTIME= \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname-dup" \
  --docker-socket /var/run/docker.sock --worker-health-listen "127.0.0.1:$hport"
assert_contains "$ITEST_ERR" "cannot listen for health checks on 127.0.0.1:$hport (--worker-health-listen): Address already in use" \
  "start failure message"

# ---- 8. clean stop: the sandbox goes, the worker exits 0, the port closes
assert_exit 0 sandbox delete "$sbx" --wait --timeout 60
metrics
assert_eq 1 "$(mval sandbox_worker_assignments_total kind=delete outcome=succeeded)" "deletes counted"
assert_exit 0 sandbox workers drain "$wname"
rc=0
itest_stop_pid "$wpid" worker 30 || rc=$?
wpid=
assert_eq 0 "$rc" "worker exit status after SIGTERM"
if curl -s -o /dev/null --max-time 2 "$H/healthz"; then
  fail "the health port still answers after the worker stopped"
fi
echo "worker health: /healthz, /readyz (runtime and controller checks), /metrics, errors, slow clients"
