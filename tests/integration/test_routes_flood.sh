#!/usr/bin/env bash
# The route listener under a flood of idle connections (issue 15, finding
# 5): idle sockets that never send a byte used to fill route_max_connections
# and a request with a valid route token got 503 for 15 s. Now the oldest
# idle connection makes room for a new one; one client address holds at most
# route_max_connections_per_address; the listener's cap fits the open files
# limit, so a flood cannot starve /healthz of file descriptors; and accept()
# failing (EMFILE) pauses accepting and logs at most once a second. The test
# runs controllers of its own (small caps, two HTTP threads, one with
# `ulimit -n 256`) on the run's database; clients are on loopback only
# (127.0.0.1 and 127.0.0.2).
# itest-timeout: 360
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-flood)
itest_as_admin "$tenant"
member=$(itest_token "$tenant" member)

assert_exit 0 sandbox --token "$member" create --image "$ITEST_IMAGE" --cpu-millis 500 --memory-mib 128 --wait \
  --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 sandbox --token "$member" exec "$sbx" -- sh -c \
  'mkdir -p /tmp/www && echo flood-ok >/tmp/www/index.html && httpd -p 8080 -h /tmp/www'
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":8080,"auth":"token"}'
assert_http 202 "" "share port 8080 with a token"
name=$(itest_json "$HTTP_BODY" route.name)
secret=$(itest_json "$HTTP_BODY" access_token)

# flood PORT IDLE_FROM IDLE_COUNT CHECK_FROM...: opens IDLE_COUNT sockets
# from address IDLE_FROM that send nothing, then one routed request with the
# token from each CHECK_FROM address (while the idle ones are held); prints
# "FROM STATUS SECONDS" per request, then "idle-open N" (how many idle
# sockets the controller has not closed).
flood() {
  python3 - "$@" "$name" "$secret" <<'PY'
import resource, socket, sys, time
args = sys.argv[1:]
port, idle_from, idle_n = int(args[0]), args[1], int(args[2])
checks, name, secret = args[3:-2], args[-2], args[-1]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
idle = []
for _ in range(idle_n):
    s = socket.socket()
    s.bind((idle_from, 0))
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    idle.append(s)
time.sleep(1.0)  # let the controller accept them all
req = (f"GET /r/{name}/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {secret}\r\n"
       "Connection: close\r\n\r\n").encode()
for src in checks:
    t0 = time.monotonic()
    status = "000"
    try:
        c = socket.socket()
        c.bind((src, 0))
        c.settimeout(10)
        c.connect(("127.0.0.1", port))
        c.sendall(req)
        out = b""
        while True:
            b = c.recv(65536)
            if not b:
                break
            out += b
        c.close()
        status = out.split(b" ", 2)[1].decode() if out.startswith(b"HTTP/1.") else "bad"
        if status == "200" and b"flood-ok" not in out:
            status = "200-without-body"
    except OSError as e:
        status = "err-" + type(e).__name__
    print(src, status, "%.2f" % (time.monotonic() - t0))
still = 0
for s in idle:
    s.setblocking(False)
    try:
        b = s.recv(1)
        still += 0 if b == b"" else 1
    except BlockingIOError:
        still += 1
    except OSError:
        pass
print("idle-open", still)
for s in idle:
    s.close()
PY
}

# check OUT FROM WHAT: the request from FROM got 200 within 5 s.
check_served() {
  local line st secs
  line=$(printf '%s\n' "$1" | grep "^$2 " | head -1)
  read -r _ st secs <<<"$line"
  assert_eq 200 "$st" "$3 (a valid routed request from $2)"
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 5 else 1)' "$secs" \
    || fail "$3: the request from $2 took ${secs}s"
}

# ---- the listener's cap: idle sockets make room
itest_own_controller cap 20000 SANDBOX_ROUTE_MAX_CONNECTIONS=32 SANDBOX_ROUTE_MAX_CONNECTIONS_PER_ADDRESS=0
out=$(flood "$CTL_RPORT" 127.0.0.1 48 127.0.0.1 127.0.0.1 127.0.0.1)
itest_log "cap 32, 48 idle: $(printf '%s' "$out" | tr '\n' ';')"
check_served "$out" 127.0.0.1 "route_max_connections 32 held by 48 idle sockets"
[ "$(printf '%s\n' "$out" | grep -c '^127.0.0.1 200 ')" = 3 ] || fail "every request got through: $out"
idle_open=$(printf '%s\n' "$out" | sed -n 's/^idle-open //p')
[ "$idle_open" -le 32 ] || fail "the controller holds $idle_open idle connections over a cap of 32"
assert_contains "$(curl -s --max-time 5 "$CTL_URL/metrics")" 'sandbox_route_connections_shed_total{action="evicted",cap="listener"}' \
  "evictions are counted"
itest_stop_pid "$CTL_PID" "controller cap" 30 || fail "controller cap did not stop cleanly"

# ---- one address cannot hold the listener
itest_own_controller addr 20000 SANDBOX_ROUTE_MAX_CONNECTIONS=32 SANDBOX_ROUTE_MAX_CONNECTIONS_PER_ADDRESS=8
out=$(flood "$CTL_RPORT" 127.0.0.1 48 127.0.0.2 127.0.0.1)
itest_log "cap 32, 8 per address, 48 idle from 127.0.0.1: $(printf '%s' "$out" | tr '\n' ';')"
check_served "$out" 127.0.0.2 "another address while 127.0.0.1 floods"
check_served "$out" 127.0.0.1 "the flooding address itself (its oldest idle one evicted)"
idle_open=$(printf '%s\n' "$out" | sed -n 's/^idle-open //p')
[ "$idle_open" -le 8 ] || fail "127.0.0.1 holds $idle_open idle connections over a per-address cap of 8"
itest_stop_pid "$CTL_PID" "controller addr" 30 || fail "controller addr did not stop cleanly"

# ---- file descriptors: ulimit -n 256, 400 idle sockets
itest_own_controller nofile 256 SANDBOX_ROUTE_MAX_CONNECTIONS_PER_ADDRESS=0
assert_contains "$(cat "$CTL_LOG")" "route listener: serving at most 64 connections" "the cap fits RLIMIT_NOFILE"
log0=$(itest_file_size "$CTL_LOG")
python3 - "$CTL_RPORT" "$CTL_URL" >"$ITEST_TMP/flood-nofile.out" <<'PY' &
import resource, socket, sys, time, urllib.request
port, url = int(sys.argv[1]), sys.argv[2]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
idle = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(400)]
time.sleep(1.0)
t0 = time.monotonic()
try:
    code = urllib.request.urlopen(url + "/healthz", timeout=5).status
except Exception as e:
    code = type(e).__name__
print("healthz", code, "%.2f" % (time.monotonic() - t0))
sys.stdout.flush()
time.sleep(3)  # the routed request runs meanwhile
for s in idle:
    s.close()
PY
hold=$!
sleep 2
out=$(flood "$CTL_RPORT" 127.0.0.1 0 127.0.0.1)
check_served "$out" 127.0.0.1 "ulimit -n 256 with 400 idle sockets"
wait "$hold" || true
read -r _ hcode hsecs <"$ITEST_TMP/flood-nofile.out"
assert_eq 200 "$hcode" "/healthz with 400 idle route sockets and ulimit -n 256 (took ${hsecs:-?}s)"
sleep 1
out=$(flood "$CTL_RPORT" 127.0.0.1 0 127.0.0.1)
check_served "$out" 127.0.0.1 "the route listener after the idle sockets closed"
n=$(tail -c +"$((log0 + 1))" "$CTL_LOG" | grep -ci 'too many open files' || true)
[ "$n" -le 3 ] || fail "$n 'too many open files' lines in the log"

# ---- accept() failing: EMFILE pauses the listener, logged at most once a second
itest_emfile_backoff "$CTL_PID" "$CTL_RPORT" "$CTL_LOG" "route listener"
out=$(flood "$CTL_RPORT" 127.0.0.1 0 127.0.0.1)
check_served "$out" 127.0.0.1 "the route listener once file descriptors are back"
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$CTL_URL/healthz")" "/healthz afterwards"
itest_stop_pid "$CTL_PID" "controller nofile" 30 || fail "controller nofile did not stop cleanly"
echo "route listener flood: idle sockets evicted, per-address cap, fd-fitted cap, accept backoff"
