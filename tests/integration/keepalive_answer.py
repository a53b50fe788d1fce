#!/usr/bin/env python3
"""For test_api_nodelay.sh: on one kept-alive connection, times GET PATH
(an answer of more than 16 KiB) 21 times and prints `bytes N` and
`p50_ms X`. Loopback only. Usage: keepalive_answer.py URL TOKEN PATH"""
import http.client
import sys
import time
import urllib.parse

u = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
hdr = {"Authorization": "Bearer " + sys.argv[2]}
times, size = [], 0
while len(times) < 21:
    t = time.perf_counter()
    conn.request("GET", sys.argv[3], headers=hdr)
    r = conn.getresponse()
    body = r.read()
    if r.status == 429:  # the token's request rate: wait as told, not timed
        time.sleep(int(r.getheader("Retry-After", "1")))
        continue
    if r.status != 200:
        sys.exit("GET %s answered %d" % (sys.argv[3], r.status))
    size = len(body)
    times.append((time.perf_counter() - t) * 1000)
times.sort()
print("bytes", size)
print("p50_ms %.1f" % times[10])
