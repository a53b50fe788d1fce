#!/usr/bin/env bash
# Benchmark: the events API and the NATS publisher under load, through a
# private `sandboxd all` publishing to a private nats-server. Prints one table:
#   - wake latency of parked `GET /v1/events?after=NEWEST&wait=$WAIT`
#     long-polls, CLIENTS of them parked at once (default 1, 100 and 1000):
#     ONE event is then committed (PUT /v1/tenants/T/policy writes
#     tenant.policy; POST /v1/tenants writes no event) and each client's
#     answer is timed from the trigger's answer (negative when the long-poll
#     answered first) and from the trigger's request;
#   - NATS end-to-end lag during a burst of BURST sandbox create+delete
#     lifecycles, BURST_PAR at a time: each event's arrival at a subscriber
#     (tests/integration/nats_sub.py) minus its payload's `ts` (when its
#     transaction began, millisecond precision), and events per second;
#   - /metrics scrape time over SCRAPES scrapes, and its size, after the burst;
#   - the sandboxd process's peak RSS (VmHWM) before and after the largest
#     wake test.
# usage: tests/bench/events.sh                  (needs dockerd, nats-server and a build in $BUILD)
#   env: CLIENTS="1 100 1000"  WAIT=30  BURST=50  BURST_PAR=5  SCRAPES=20  NATS_SERVER=/usr/sbin/nats-server
# Each long-poll holds a socket in the client and in sandboxd, so the script
# raises `ulimit -n` to the largest CLIENTS + 512 when the soft limit is below
# that (the controller parks at most SBX_MAX_PARKED_PER_THREAD = 20000
# requests per HTTP thread and answers 503 beyond).
#
# Measured with the defaults on the development machine: 2 cores, with the
# full test suite running at the same time (load average 14-16), so every
# figure is noisy and an upper bound:
#   events and NATS (ms unless said)                  min      p50      p95      max
#   wake, 1 parked, from the trigger's answer         6.6      6.6      6.6      6.6  (trigger round trip 8.6 ms)
#   wake, 1 parked, from the trigger's request       15.2     15.2     15.2     15.2
#   wake, 100 parked, from the trigger's answer      29.7     39.5     41.2     41.4  (trigger round trip 6.5 ms)
#   wake, 100 parked, from the trigger's request     36.2     46.0     47.7     47.9
#   wake, 1000 parked, from the trigger's answer    190.2    618.0    641.8    642.3  (trigger round trip 9.3 ms)
#   wake, 1000 parked, from the trigger's request    199.5    627.3    651.1    651.6
#   NATS lag, commit ts -> subscriber                 3.2     23.2    129.3   1034.7
#     burst: 50 lifecycles (5 at a time) in 56.0 s: 800 events, 14 events/s; 800 received on NATS, 0 missing
#   /metrics scrape, 20 times                         5.3      7.4     41.3     73.4
#     /metrics size: 63122 bytes
#   sandboxd all peak RSS (VmHWM): 13860 kB before the 1000-client wake, 18816 kB after (+4956 kB)
# Reading it: a woken long-poll runs its own two queries, and a thread's
# answers leave together once it has run them all, so the wake grows with
# the number parked (1000: two clusters, one per HTTP thread). The NATS lag
# outliers near 1 s are operation.running / sandbox.provisioning events
# committed while the publisher was mid-round: libpq queued their
# notification during a query and publish_wait() polled the socket, so they
# waited for the 1 s idle timeout (checking PQnotifies() before poll()
# brought the maximum to 131-150 ms in a trial run).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
CLIENTS=${CLIENTS:-1 100 1000}
WAIT=${WAIT:-30}
BURST=${BURST:-50}
BURST_PAR=${BURST_PAR:-5}
SCRAPES=${SCRAPES:-20}
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server 2>/dev/null || echo /usr/sbin/nats-server)}
[ -x "$NATS_SERVER" ] || { echo "bench: nats-server not found (apt-get install nats-server, or set NATS_SERVER)" >&2; exit 2; }

maxc=0
for c in $CLIENTS; do [ "$c" -gt "$maxc" ] && maxc=$c; done
need=$((maxc + 512))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
  ulimit -n "$need" 2>/dev/null || { echo "bench: ulimit -n $(ulimit -n) is below $need and the hard limit is $(ulimit -Hn)" >&2; exit 2; }
  echo "bench: raised ulimit -n to $need" >&2
fi

# nats-server and the subscriber, before sandboxd so the publisher connects at once.
ndir="$BENCH_TMP/nats"
mkdir -p "$ndir"
nport=$(bench_freeport)
(cd "$ndir" && exec "$NATS_SERVER" -a 127.0.0.1 -p "$nport") >"$ndir/nats-server.log" 2>&1 </dev/null &
nats_pid=$!
bench_on_exit 'kill "$nats_pid"; wait "$nats_pid"'
for i in $(seq 100); do
  "$PY" -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 0.2).close()' "$nport" \
    2>/dev/null && break
  kill -0 "$nats_pid" 2>/dev/null || { cat "$ndir/nats-server.log" >&2; bench_fail "nats-server did not start"; }
  [ "$i" -lt 100 ] || bench_fail "nats-server did not listen on 127.0.0.1:$nport within 10 s"
  sleep 0.1
done
msgs="$ndir/msgs.jsonl"
"$PY" tests/integration/nats_sub.py sub 127.0.0.1 "$nport" 'sandbox.events.>' "$msgs" "$ndir/sub.status" \
  >"$ndir/sub.log" 2>&1 </dev/null &
sub_pid=$!
bench_on_exit 'kill "$sub_pid"; wait "$sub_pid"'
for i in $(seq 100); do
  grep -q '^connected' "$ndir/sub.status" 2>/dev/null && break
  [ "$i" -lt 100 ] || bench_fail "the NATS subscriber did not subscribe within 10 s"
  sleep 0.1
done

bench_start --nats-url "nats://127.0.0.1:$nport"
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$BENCH_PID/status"; }
api() { curl -sf -H "Authorization: Bearer $SANDBOX_TOKEN" "$@"; }
newest() { api "$SANDBOX_URL/v1/events?tail=1" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["next_after"])'; }
ms() { date +%s%3N; }
"$CLI" tenants create bench-wake >/dev/null

# ---------------------------------------------------------------- wake
# wake N: parks N long-polls, commits one event, writes each client's
# latency (ms) to $BENCH_TMP/wake.N and "ok bad trigger_ms" to stdout.
wake() {
  "$PY" - "$SANDBOX_URL" "$SANDBOX_TOKEN" "$1" "$WAIT" bench-wake "$BENCH_TMP/wake.$1" <<'EOF'
import http.client, json, selectors, socket, sys, threading, time, urllib.parse

url, token, n, wait, tenant, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
u = urllib.parse.urlsplit(url)
auth = {"Authorization": "Bearer " + token}

def call(method, path, body=None):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    c.request(method, path, body=body, headers=auth)
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status // 100 != 2:
        sys.exit(f"{method} {path}: {r.status} {data[:200]!r}")
    return json.loads(data)

after = call("GET", "/v1/events?tail=1")["next_after"]
req = (f"GET /v1/events?after={after}&wait={wait} HTTP/1.1\r\nHost: {u.netloc}\r\n"
       f"Authorization: Bearer {token}\r\nConnection: close\r\n\r\n").encode()
sel = selectors.DefaultSelector()
conns = {}
for i in range(n):
    s = socket.create_connection((u.hostname, u.port), timeout=10)
    s.sendall(req)
    s.setblocking(False)
    conns[s] = bytearray()
    sel.register(s, selectors.EVENT_READ)
done, early = {}, 0

def complete(buf):
    head, sep, body = bytes(buf).partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            return len(body) >= int(v)
    return False

def pump(deadline):
    while len(done) < n:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        for key, _ in sel.select(left):
            s = key.fileobj
            try:
                b = s.recv(65536)
            except BlockingIOError:
                continue
            conns[s] += b
            if not b or complete(conns[s]):
                done[s] = time.perf_counter()
                sel.unregister(s)

# Let every request reach the controller and park; an answer now is a failure.
pump(time.perf_counter() + 0.5 + n * 0.002)
early = len(done)
trig = {}
def trigger():
    trig["sent"] = time.perf_counter()
    call("PUT", f"/v1/tenants/{tenant}/policy", "{}")
    trig["answered"] = time.perf_counter()
th = threading.Thread(target=trigger)
th.start()
pump(time.perf_counter() + wait + 10)
th.join()
ok, lat = 0, []
for s, buf in conns.items():
    head, _, body = bytes(buf).partition(b"\r\n\r\n")
    good = False
    if s in done and head.startswith(b"HTTP/1.1 200"):
        try:
            good = any(e["kind"] == "tenant.policy" and e["tenant"] == tenant for e in json.loads(body)["events"])
        except (ValueError, KeyError, TypeError):
            pass
    if good:
        ok += 1
        lat.append((done[s] - trig["answered"]) * 1000)
    s.close()
with open(out, "w") as f:
    f.write("\n".join(f"{x:.2f}" for x in lat) + "\n")
with open(out + ".sent", "w") as f:
    f.write("\n".join(f"{x + (trig['answered'] - trig['sent']) * 1000:.2f}" for x in lat) + "\n")
print(ok, n - ok, early, f"{(trig['answered'] - trig['sent']) * 1000:.1f}")
EOF
}

hwm0= hwm1=
declare -A wake_res
for c in $CLIENTS; do
  [ "$c" -ne "$maxc" ] || hwm0=$(hwm)
  wake_res[$c]=$(wake "$c")
  [ "$c" -ne "$maxc" ] || hwm1=$(hwm)
done

# ---------------------------------------------------------------- NATS burst
printf '' >"$BENCH_TMP/created"
printf '' >"$BENCH_TMP/deleted"
burst_pids=()
# On exit: stop the burst, then delete what it left (the sandboxes the API
# still lists, and any it recorded), or at least their containers.
burst_cleanup() {
  local p id
  for p in "${burst_pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  for id in $({ "$CLI" list --tenant bench --limit 1000 --json 2>/dev/null |
      "$PY" -c 'import json,sys; print("\n".join(s["id"] for s in json.load(sys.stdin)["sandboxes"]))'
    sort "$BENCH_TMP/created" | comm -23 - <(sort "$BENCH_TMP/deleted"); } | sort -u); do
    "$CLI" delete "$id" --wait --timeout 60 >/dev/null 2>&1 || docker rm -f "sbx-$id" >/dev/null 2>&1
  done
}
bench_on_exit burst_cleanup
lifecycles() {
  local k out sbx
  for ((k = 0; k < $1; k++)); do
    out=$("$CLI" create --tenant bench --image "$IMAGE" --cpu-millis 100 --memory-mib 32 --wait --timeout 120)
    sbx=${out%% *}
    echo "$sbx" >>"$BENCH_TMP/created"
    "$CLI" delete "$sbx" --wait --timeout 120 >/dev/null
    echo "$sbx" >>"$BENCH_TMP/deleted"
  done
}
before=$(newest)
t0=$(ms)
for ((p = 0; p < BURST_PAR; p++)); do
  lifecycles $(((BURST + p) / BURST_PAR)) &
  burst_pids+=($!)
done
for p in "${burst_pids[@]}"; do wait "$p" || bench_fail "a lifecycle of the burst failed"; done
burst_pids=()
t1=$(ms)
last=$(newest)
# Every event of the burst on NATS (at most 10 s more).
for i in $(seq 100); do
  "$PY" - "$msgs" "$last" <<'EOF' && break
import json, sys
top = 0
for line in open(sys.argv[1]).read().split("\n")[:-1]:
    if line.strip():
        top = max(top, json.loads(line)["event"].get("id", 0))
sys.exit(0 if top >= int(sys.argv[2]) else 1)
EOF
  [ "$i" -lt 100 ] || echo "bench: not every event of the burst reached the subscriber within 10 s" >&2
  sleep 0.1
done
nats_res=$("$PY" - "$msgs" "$before" "$last" "$BENCH_TMP/lag" "$SANDBOX_URL" "$SANDBOX_TOKEN" <<'EOF'
import datetime, json, sys, urllib.request
msgs, lo, hi, out, url, token = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
# The ids the database holds in (lo, hi], to count what NATS missed.
want, after = set(), lo
while after < hi:
    rq = urllib.request.Request(f"{url}/v1/events?after={after}&limit=1000", headers={"Authorization": "Bearer " + token})
    page = json.load(urllib.request.urlopen(rq, timeout=30))
    want.update(e["id"] for e in page["events"] if e["id"] <= hi)
    if not page["events"]:
        break
    after = page["next_after"]
lag, seen, t_first, t_last = [], set(), None, None
for line in open(msgs).read().split("\n")[:-1]:
    if not line.strip():
        continue
    m = json.loads(line)
    e = m["event"]
    i = e.get("id", 0)
    if not (lo < i <= hi) or i in seen:
        continue
    seen.add(i)
    ts = datetime.datetime.strptime(e["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)
    lag.append((m["t"] - ts.timestamp()) * 1000)
    t_first = m["t"] if t_first is None else min(t_first, m["t"])
    t_last = m["t"] if t_last is None else max(t_last, m["t"])
with open(out, "w") as f:
    f.write("\n".join(f"{x:.2f}" for x in lag) + "\n")
print(len(seen), len(want), len(want - seen))
EOF
)

# ---------------------------------------------------------------- /metrics
: >"$BENCH_TMP/scrape"
for ((i = 0; i < SCRAPES; i++)); do
  curl -sf -o /dev/null -w '%{time_total} %{size_download}\n' "$SANDBOX_URL/metrics" >>"$BENCH_TMP/scrape"
done

# ---------------------------------------------------------------- the table
printf '%-44s %8s %8s %8s %8s\n' "events and NATS (ms unless said)" min p50 p95 max
for c in $CLIENTS; do
  read -r ok bad early trig <<<"${wake_res[$c]}"
  note="trigger round trip ${trig} ms"
  [ "$bad" -eq 0 ] || note="$note; $bad of $c failed ($early answered before the trigger)"
  if [ "$ok" -gt 0 ]; then
    printf '%-44s %s  (%s)\n' "wake, $c parked, from the trigger's answer" "$(STATS_FMT=%8.1f stats $(cat "$BENCH_TMP/wake.$c"))" "$note"
    printf '%-44s %s\n' "wake, $c parked, from the trigger's request" "$(STATS_FMT=%8.1f stats $(cat "$BENCH_TMP/wake.$c.sent"))"
  else
    printf '%-44s %s\n' "wake, $c parked long-poll(s)" "none answered ($note)"
  fi
done
read -r got want missed <<<"$nats_res"
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", (b - a) / 1000}')
rate=$(awk -v n="$want" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n * 1000 / (b - a)}')
if [ "$got" -gt 0 ]; then
  printf '%-44s %s\n' "NATS lag, commit ts -> subscriber" "$(STATS_FMT=%8.1f stats $(cat "$BENCH_TMP/lag"))"
else
  printf '%-44s %s\n' "NATS lag, commit ts -> subscriber" "no event of the burst arrived"
fi
printf '  burst: %d lifecycles (%d at a time) in %s s: %d events, %s events/s; %d received on NATS, %d missing\n' \
  "$BURST" "$BURST_PAR" "$secs" "$want" "$rate" "$got" "$missed"
printf '%-44s %s\n' "/metrics scrape, $SCRAPES times" \
  "$(STATS_FMT=%8.1f stats $(awk '{print $1 * 1000}' "$BENCH_TMP/scrape"))"
printf '  /metrics size: %s bytes\n' "$(tail -n 1 "$BENCH_TMP/scrape" | cut -d' ' -f2)"
printf 'sandboxd all peak RSS (VmHWM): %d kB before the %d-client wake, %d kB after (+%d kB)\n' \
  "$hwm0" "$maxc" "$hwm1" $((hwm1 - hwm0))
