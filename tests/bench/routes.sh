#!/usr/bin/env bash
# Benchmark: public routes through a private `sandboxd all` (controller proxy
# + worker forwarder) next to the same busybox httpd reached directly on its
# container address (network open). Prints a table: small-request latency,
# requests per second with 16 clients, 100 MB download and upload
# throughput, and the sandboxd process's peak RSS before and after.
# usage: tests/bench/routes.sh [REQUESTS]   (needs dockerd and a build in $BUILD, default build)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
N=${1:-500}
bench_start --route-listen "127.0.0.1:$(bench_freeport)"
pid=$BENCH_PID
sbx=
bench_on_exit '[ -z "$sbx" ] || "$CLI" delete "$sbx" --wait --timeout 60'

out=$("$CLI" create --tenant bench --image "$IMAGE" --network open --memory-mib 512 --wait --timeout 120)
sbx=${out%% *}
"$CLI" exec "$sbx" -- sh -c 'mkdir -p /tmp/www/cgi-bin && head -c 1024 /dev/zero >/tmp/www/small &&
  dd if=/dev/zero of=/tmp/www/big bs=1048576 count=100 2>/dev/null &&
  printf "#!/bin/sh\nprintf \"Content-Type: text/plain\\r\\n\\r\\n\"\nhead -c \"\$CONTENT_LENGTH\" | wc -c\n" >/tmp/www/cgi-bin/up &&
  chmod +x /tmp/www/cgi-bin/up && httpd -p 8080 -h /tmp/www' >/dev/null
route=$("$CLI" share "$sbx" --port 8080 --auth public --json | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["route"]["url"])')
ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "sbx-$sbx")
direct="http://$ip:8080/"
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$pid/status"; }
hwm0=$(hwm)

"$PY" - "$N" "$route" "$direct" <<'EOF' >"$BENCH_TMP/table"
import http.client, sys, threading, time, urllib.parse

n = int(sys.argv[1])

def conn(url):
    u = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=60), u.path

def get(url, path):
    c, base = conn(url)
    c.request("GET", base + path)
    r = c.getresponse()
    size = 0
    while True:
        b = r.read(1 << 16)
        if not b:
            break
        size += len(b)
    c.close()
    if r.status != 200:
        raise SystemExit(f"GET {url}{path}: {r.status}")
    return size

def latency(url):
    ts = []
    for _ in range(n):
        t0 = time.perf_counter()
        get(url, "small")
        ts.append((time.perf_counter() - t0) * 1000)
    ts.sort()
    return ts[len(ts) // 2], ts[int(len(ts) * 0.99) - 1]

def rps(url, clients=16):
    per = max(1, n // clients)
    def work():
        for _ in range(per):
            get(url, "small")
    th = [threading.Thread(target=work) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in th:
        t.start()
    for t in th:
        t.join()
    return per * clients / (time.perf_counter() - t0)

def download(url):
    t0 = time.perf_counter()
    size = get(url, "big")
    return size / (1 << 20) / (time.perf_counter() - t0)

def upload(url):
    size = 100 << 20
    c, base = conn(url)
    chunk = b"\0" * (1 << 16)
    t0 = time.perf_counter()
    c.putrequest("POST", base + "cgi-bin/up")
    c.putheader("Content-Length", str(size))
    c.endheaders()
    for _ in range(size // len(chunk)):
        c.send(chunk)
    r = c.getresponse()
    body = r.read().strip()
    c.close()
    if r.status != 200 or int(body) != size:
        raise SystemExit(f"upload to {url}: {r.status} {body!r}")
    return size / (1 << 20) / (time.perf_counter() - t0)

rows = []
for name, url in (("through the route", sys.argv[2]), ("direct to the container", sys.argv[3])):
    p50, p99 = latency(url)
    rows.append((name, p50, p99, rps(url), download(url), upload(url)))
print(f"{'path (' + str(n) + ' requests)':28} {'p50 ms':>8} {'p99 ms':>8} {'req/s@16':>9} {'down MB/s':>10} {'up MB/s':>8}")
for name, p50, p99, r, d, u in rows:
    print(f"{name:28} {p50:8.2f} {p99:8.2f} {r:9.0f} {d:10.0f} {u:8.0f}")
EOF
hwm1=$(hwm)
cat "$BENCH_TMP/table"
printf 'sandboxd all peak RSS: %d kB before, %d kB after (+%d kB)\n' "$hwm0" "$hwm1" $((hwm1 - hwm0))
