#!/usr/bin/env python3
"""Worker-API driver for test_lock_order.sh: one scripted worker (no runtime)
whose heartbeats, each extending every lease it holds, race its delete
reports, each releasing the sandbox's share of the same worker's capacity.
Rounds of: create N sandboxes, report them running, delete them all, then
report the N deletes from N threads while H threads heartbeat and C threads
create more sandboxes of the tenant (each placed in its own transaction:
the tenant row, then the worker row). Prints `statuses {code: count}` and
exits 1 on any answer other than 200 or 202.
Loopback only. Usage: lock_order.py URL ADMIN_TOKEN WORKER_TOKEN TENANT ROUNDS N"""
import collections
import json
import sys
import threading
import urllib.error
import urllib.request

URL, ADMIN, WTOK, TENANT = sys.argv[1:5]
ROUNDS, N = int(sys.argv[5]), int(sys.argv[6])
HEARTBEATERS = 6
CREATERS = 3
CREATED = []
STATUS = collections.Counter()
LOCK = threading.Lock()


def call(method, path, token, body=None, count=True):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", "Bearer " + token)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            code, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        code, text = e.code, e.read()
    if count:
        with LOCK:
            STATUS[code] += 1
    return code, json.loads(text or b"{}")


def poll_until(wid, want):
    """Polls until every operation id in `want` was assigned: {operation_id:
    attempt} of everything assigned meanwhile (creates made while racing
    come in too)."""
    got = {}
    while not want <= got.keys():
        code, b = call("GET", "/v1/workers/%s/poll?wait=10&max=64" % wid, WTOK)
        if code != 200:
            sys.exit("poll answered %d: %s" % (code, b))
        for a in b.get("assignments", []):
            got[a["operation_id"]] = a["attempt"]
    return got


def report(wid, op, attempt, extra=None):
    body = {"operation_id": op, "attempt": attempt, "outcome": "succeeded"}
    body.update(extra or {})
    call("POST", "/v1/workers/%s/report" % wid, WTOK, body)


def main():
    code, b = call("POST", "/v1/workers/register", WTOK, {
        "name": "lock-order", "runtime": "docker", "isolation": ["container"], "labels": {},
        "capacity": {"cpu_millis": 1000000, "memory_mib": 1000000, "slots": 1000}, "version": "test"})
    if code != 200:
        sys.exit("register answered %d: %s" % (code, b))
    wid = b["worker"]["id"]
    call("POST", "/v1/workers/%s/heartbeat" % wid, WTOK, {})
    for _ in range(ROUNDS):
        sbxs, ops = [], set()
        for _ in range(N):
            code, b = call("POST", "/v1/sandboxes", ADMIN,
                           {"tenant": TENANT, "image": "img:1", "cpu_millis": 100, "memory_mib": 64})
            if code != 202:
                sys.exit("create answered %d: %s" % (code, b))
            sbxs.append(b["sandbox"]["id"])
            ops.add(b["operation"]["id"])
        # every create assigned runs (the round's, and those made while the
        # last round raced)
        for op, att in poll_until(wid, ops).items():
            report(wid, op, att, {"runtime_ref": "ref-" + op})
        dels = set()
        for s in sbxs:
            code, b = call("DELETE", "/v1/sandboxes/" + s, ADMIN)
            if code != 202:
                sys.exit("delete answered %d: %s" % (code, b))
            dels.add(b["operation"]["id"])
        deletes = {}
        for op, att in poll_until(wid, dels).items():
            if op in dels:
                deletes[op] = att
            else:
                report(wid, op, att, {"runtime_ref": "ref-" + op})
        stop = threading.Event()

        def beat():
            while not stop.is_set():
                call("POST", "/v1/workers/%s/heartbeat" % wid, WTOK, {})

        def create():
            # a create is placed in its own transaction: it holds the
            # tenant row while it takes the worker row the reports release
            while not stop.is_set():
                code, b = call("POST", "/v1/sandboxes", ADMIN,
                               {"tenant": TENANT, "image": "img:1", "cpu_millis": 100, "memory_mib": 64})
                if code == 202:
                    CREATED.append(b["sandbox"]["id"])

        beaters = [threading.Thread(target=beat) for _ in range(HEARTBEATERS)]
        beaters += [threading.Thread(target=create) for _ in range(CREATERS)]
        for t in beaters:
            t.start()
        reporters = [threading.Thread(target=report, args=(wid, op, att)) for op, att in deletes.items()]
        for t in reporters:
            t.start()
        for t in reporters:
            t.join()
        stop.set()
        for t in beaters:
            t.join()
        if not set(STATUS) <= {200, 202}:
            break
    print("statuses", json.dumps(dict(sorted(STATUS.items()))), "created while racing", len(CREATED))
    sys.exit(0 if set(STATUS) <= {200, 202} else 1)


main()
