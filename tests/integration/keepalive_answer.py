#!/usr/bin/env python3
"""For test_api_nodelay.sh: times GET PATH (an answer of more than 16 KiB)
21 times on one kept-alive connection and, interleaved, 21 times on a new
connection each (a new connection's receiver ACKs at once, so it never
waits on a delayed ACK: the yardstick, under the same load). Prints
`bytes N`, `p50_ms X` (kept-alive) and `fresh_p50_ms Y`. Loopback only.
Usage: keepalive_answer.py URL TOKEN PATH"""
import http.client
import sys
import time
import urllib.parse

u = urllib.parse.urlparse(sys.argv[1])
hdr = {"Authorization": "Bearer " + sys.argv[2]}
kept = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
times = {"kept": [], "fresh": []}
size = 0


def timed(conn):
    """GET PATH on conn: milliseconds, or None after a 429 (waited as told)."""
    global size
    t = time.perf_counter()
    conn.request("GET", sys.argv[3], headers=hdr)
    r = conn.getresponse()
    body = r.read()
    if r.status == 429:  # the token's request rate: wait as told, not timed
        time.sleep(int(r.getheader("Retry-After", "1")))
        return None
    if r.status != 200:
        sys.exit("GET %s answered %d" % (sys.argv[3], r.status))
    size = len(body)
    return (time.perf_counter() - t) * 1000


timed(kept)  # the kept-alive connection past its first exchange
while len(times["kept"]) < 21 or len(times["fresh"]) < 21:
    kind = "kept" if len(times["kept"]) <= len(times["fresh"]) else "fresh"
    if kind == "kept":
        ms = timed(kept)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        conn.connect()  # the handshake is not timed
        ms = timed(conn)
        conn.close()
    if ms is not None:
        times[kind].append(ms)
for v in times.values():
    v.sort()
print("bytes", size)
print("p50_ms %.1f" % times["kept"][10])
print("fresh_p50_ms %.1f" % times["fresh"][10])
