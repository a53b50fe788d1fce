#!/usr/bin/env python3
"""The measurements of tests/bench/live.sh (see there): get and list latency,
create latency and placement cost per create in a full and an empty tenant,
PostgreSQL CPU and WAL while hollow workers heartbeat. Talks to the
controller at --url over loopback only; prints one table."""
import argparse
import http.client
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


class Api:
    def __init__(self, url, token):
        u = urllib.parse.urlparse(url)
        self.host, self.port, self.token = u.hostname, u.port, token
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)

    def call(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        hdr = {"Authorization": "Bearer " + self.token, "Content-Type": "application/json"}
        for attempt in (0, 1):
            try:
                self.conn.request(method, path, data, hdr)
                r = self.conn.getresponse()
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
            except (http.client.HTTPException, ConnectionError, OSError):
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                if attempt:
                    raise

    def timed(self, method, path, body=None, fresh=False):
        """Milliseconds of one request; fresh: on a new connection, as curl in
        a loop (a kept-alive one meets Nagle's delay on answers over 16 KiB
        while the server does not set TCP_NODELAY)."""
        if fresh:
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        t0 = time.perf_counter()
        st, doc = self.call(method, path, body)
        return (time.perf_counter() - t0) * 1000.0, st, doc


def psql(db, sql):
    return subprocess.run([os.environ["PSQL"], "-X", "-q", "-At", db, "-c", sql], check=True,
                          capture_output=True, text=True).stdout.strip()


def pg_cpu_ticks(data_dir):
    """utime+stime of the postmaster and all its children."""
    with open(os.path.join(data_dir, "postmaster.pid")) as f:
        pm = int(f.readline())
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % pid) as f:
                st = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(pid) == pm or int(st[1]) == pm:
            total += int(st[11]) + int(st[12])
    return total


def metric_sum(url, name, label):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    out = {}
    for line in text.splitlines():
        for suffix in ("_sum", "_count"):
            if line.startswith(name + suffix + "{") and label in line:
                out[suffix] = float(line.rsplit(" ", 1)[1])
    return out.get("_sum", 0.0), out.get("_count", 0.0)


def heartbeaters(url, workers, inventories, mode, seconds, period, halt=None):
    """Each worker beats every period s: full (whole inventory each time) or
    delta (a full one, then empty deltas from the acknowledged generation),
    for seconds or until halt is set. Returns (beats, acked_deltas)."""
    stop = time.time() + seconds
    counts = {"beats": 0, "deltas": 0}
    lock = threading.Lock()

    def run(w):
        api = Api(url, w["token"])
        gen, acked = 0, 0
        next_t = time.time() + random.random() * period
        while time.time() < stop and not (halt and halt.is_set()):
            time.sleep(max(0.0, next_t - time.time()))
            next_t += period
            inv = inventories.get(w["name"], [])
            if mode == "delta" and acked:
                body = {"inventory_delta": {"base": acked, "generation": acked + 1, "upsert": [], "gone": []}}
                gen = acked + 1
            else:
                gen = gen + 1 if gen else int(time.time() * 1000)
                body = {"inventory": inv, "inventory_generation": gen}
            st, doc = api.call("POST", "/v1/workers/%s/heartbeat" % w["id"], body)
            with lock:
                counts["beats"] += 1
                if "inventory_delta" in body and st == 200 and doc.get("inventory_generation") == gen:
                    counts["deltas"] += 1
            acked = gen if st == 200 and doc and doc.get("inventory_generation") == gen else 0

    ts = [threading.Thread(target=run, args=(w,)) for w in workers]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts["beats"], counts["deltas"]


def idle(args, workers, inventories, mode, label, rows):
    db = args.db
    hz = os.sysconf("SC_CLK_TCK")
    lsn0 = psql(db, "SELECT pg_current_wal_lsn()")
    c0, t0 = pg_cpu_ticks(args.pgdata), time.time()
    beats, deltas = heartbeaters(args.url, workers, inventories, mode, args.idle_seconds, 5.0)
    c1, t1 = pg_cpu_ticks(args.pgdata), time.time()
    wal = int(psql(db, "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '%s')" % lsn0))
    el = t1 - t0
    rows.append(("idle PostgreSQL CPU, %s" % label, "%.1f ms/s" % ((c1 - c0) * 1000.0 / hz / el),
                 "%d beats (%d deltas) of %d workers" % (beats, deltas, len(workers))))
    rows.append(("idle WAL, %s" % label, "%.1f KiB/s" % (wal / 1024.0 / el), ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--db", required=True)
    ap.add_argument("--pgdata", required=True)
    ap.add_argument("--big-token", required=True)
    ap.add_argument("--empty-token", required=True)
    ap.add_argument("--workers", required=True, help="JSON file: [{name,id,token}]")
    ap.add_argument("--phase", choices=["empty", "live"], required=True)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--idle-seconds", type=float, default=30)
    ap.add_argument("--controller-pid", type=int)
    args = ap.parse_args()
    workers = json.load(open(args.workers))
    rows = []
    if args.phase == "empty":
        idle(args, workers, {}, "full", "0 live", rows)
    else:
        inventories = {}
        for w in workers:
            doc = psql(args.db, "SELECT coalesce(jsonb_agg(jsonb_build_object('sandbox_id', id, 'tenant', '', "
                                "'ref', runtime_ref, 'state', 'running')), '[]') FROM sandboxes "
                                "WHERE worker_id = '%s' AND phase = 'running'" % w["id"])
            inventories[w["name"]] = json.loads(doc)
        # idle first: the creates below leave leases that expire and are
        # placed again, which is no idle work
        idle(args, workers, inventories, "full", "10,000 live, full inventories", rows)
        idle(args, workers, inventories, "delta", "10,000 live, deltas", rows)
        # the workers keep beating meanwhile (else they would be lost, and
        # their 10,000 sandboxes with them)
        halt = threading.Event()
        bg = threading.Thread(target=heartbeaters,
                              args=(args.url, workers, inventories, "delta", 3600, 5.0, halt))
        bg.start()
        big = Api(args.url, args.big_token)
        ids = psql(args.db, "SELECT id FROM sandboxes WHERE phase = 'running' ORDER BY random() LIMIT %d"
                   % args.n).split()
        for what, paths, fresh in (("GET /v1/sandboxes/{id}", ["/v1/sandboxes/" + i for i in ids], True),
                                   ("GET /v1/sandboxes (100)", ["/v1/sandboxes?limit=100"] * args.n, True),
                                   ("GET /v1/sandboxes (100), kept-alive", ["/v1/sandboxes?limit=100"] * 50, False)):
            big.timed("GET", paths[0])
            ms = [big.timed("GET", p, fresh=fresh)[0] for p in paths]
            rows.append((what, "p50 %.2f ms  p99 %.2f ms" % (pct(ms, 50), pct(ms, 99)),
                         "%d requests%s" % (len(ms), ", a new connection each" if fresh else "")))
        # pages through after=, when the controller knows it
        st, doc = big.call("GET", "/v1/sandboxes?limit=100")
        if doc.get("next"):
            ms, nxt, pages = [], doc["next"], 0
            while nxt and pages < 100:
                t, st, d = big.timed("GET", "/v1/sandboxes?limit=100&after=" + nxt, fresh=True)
                ms.append(t)
                nxt, pages = d.get("next"), pages + 1
            rows.append(("GET /v1/sandboxes (100, after=)", "p50 %.2f ms  p99 %.2f ms" % (pct(ms, 50), pct(ms, 99)),
                         "%d pages" % pages))
        # creates: accepted latency and the place pass's time per create, big vs empty tenant
        for label, tok in (("full tenant (10,000 live)", args.big_token), ("empty tenant", args.empty_token)):
            api = Api(args.url, tok)
            s0, _ = metric_sum(args.url, "sandbox_reconcile_pass_duration_seconds", 'pass="place"')
            ms = []
            for i in range(60):
                t, st, d = api.timed("POST", "/v1/sandboxes", {"image": "busybox", "ttl_seconds": 600})
                if st == 202:
                    ms.append(t)
            deadline = time.time() + 30
            while time.time() < deadline and psql(args.db, "SELECT count(*) FROM operations WHERE kind = 'create' "
                                                  "AND state IN ('pending', 'admitted')") != "0":
                time.sleep(0.2)
            s1, _ = metric_sum(args.url, "sandbox_reconcile_pass_duration_seconds", 'pass="place"')
            rows.append(("create accepted, %s" % label,
                         "p50 %.2f ms  p99 %.2f ms  (%.0f/s one at a time)" % (pct(ms, 50), pct(ms, 99),
                                                                              1000.0 / statistics.mean(ms)),
                         "%d accepted; place pass %.2f ms per create" % (len(ms), (s1 - s0) * 1000.0 / max(1, len(ms)))))
        halt.set()
        bg.join()
    if args.controller_pid:
        with open("/proc/%d/status" % args.controller_pid) as f:
            rss = [l.split()[1] for l in f if l.startswith("VmRSS")][0]
        rows.append(("controller RSS", "%.1f MiB" % (int(rss) / 1024.0), ""))
    for r in rows:
        print("| %s | %s | %s |" % r)


if __name__ == "__main__":
    sys.exit(main())
