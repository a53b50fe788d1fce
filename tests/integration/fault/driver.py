#!/usr/bin/env python3
"""Fault-injection load driver: a mixed burst of sandbox operations (create,
exec, delete, and pause and resume in some lifecycles; several tenants) through the real API, the way a careful CI
client drives it: every POST carries an Idempotency-Key and is retried with the
same key on transport errors and 5xx, so a controller crash never makes an
operation twice. Every exec appends a unique marker line to a file inside its
sandbox; before deleting, the driver reads the file back and counts the
markers (an exec that ran twice shows up as a duplicate).

Prints one JSON summary line on stdout; progress on stderr.
Standard library only (runs on a fresh Debian 12)."""
import argparse
import json
import random
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

TERMINAL = {"succeeded", "failed", "cancelled"}


class Api:
    def __init__(self, urls, token, deadline):
        self.urls = urls
        self.token = token
        self.deadline = deadline
        self.idx = random.randrange(len(urls))

    def call(self, method, path, body=None, key=None, timeout=40):
        """Returns (status, json) retrying transport errors and 5xx until the
        deadline; the same idempotency key on every retry."""
        delay = 0.1
        while True:
            url = self.urls[self.idx] + path
            data = json.dumps(body).encode() if body is not None else None
            req = urllib.request.Request(url, data=data, method=method)
            req.add_header("Authorization", "Bearer " + self.token)
            if data is not None:
                req.add_header("Content-Type", "application/json")
            if key:
                req.add_header("Idempotency-Key", key)
            try:
                with urllib.request.urlopen(req, timeout=timeout) as r:
                    return r.status, json.loads(r.read() or b"null")
            except urllib.error.HTTPError as e:
                raw = e.read()
                if e.code < 500:
                    try:
                        return e.code, json.loads(raw or b"null")
                    except ValueError:
                        return e.code, None
            except (urllib.error.URLError, OSError, ValueError):
                pass
            # transport error or 5xx: try another controller, back off
            self.idx = (self.idx + 1) % len(self.urls)
            if time.time() > self.deadline:
                raise TimeoutError("%s %s: no answer before the deadline" % (method, path))
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def wait(self, op_id):
        while True:
            st, doc = self.call("GET", "/v1/operations/%s?wait=10" % op_id, timeout=30)
            if st != 200:
                raise RuntimeError("GET operation %s: HTTP %s %s" % (op_id, st, doc))
            op = doc["operation"]
            if op["state"] in TERMINAL:
                return op
            if time.time() > self.deadline:
                return op


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.accepted = []          # (op id, kind, tenant token)
        self.outcomes = {}          # op id -> final state / error code
        self.exec_markers = {}      # marker -> (sandbox id, op id)
        self.marker_counts = {}     # marker -> times found in its sandbox
        self.unverifiable = 0       # exec markers in sandboxes that did not survive to be read
        self.unverifiable_why = []  # why each read-back failed
        self.errors = []
        self.sandboxes = []

    def add(self, op, kind, token):
        with self.lock:
            self.accepted.append((op["id"], kind, token))


def pause_resume(api, sbx, key, stats):
    """Pauses the sandbox and resumes it; the read-back after it shows
    whether its files survived. Each verb is retried with its own key, the
    way a careful client would, when the fault failed it as "retry later"
    (unavailable: its worker not heard from yet after the fault; worker_lost)."""
    for verb in ("pause", "resume"):
        for attempt in range(5):
            st, doc = api.call("POST", "/v1/sandboxes/%s/%s" % (sbx, verb), {},
                               key="%s-%s-%d" % (verb, key, attempt))
            if st == 409:
                if attempt > 0:
                    break  # an earlier attempt did it after all
                return  # no longer running (lost with its worker): the read-back says so
            if st != 202:
                stats.errors.append("%s: HTTP %s %s" % (verb, st, doc))
                return
            stats.add(doc["operation"], verb, api.token)
            op = api.wait(doc["operation"]["id"])
            code = (op.get("error") or {}).get("code", "")
            stats.outcomes[op["id"]] = op["state"] if op["state"] != "failed" else "failed:" + code
            if op["state"] == "succeeded":
                break
            if code not in ("unavailable", "worker_lost"):
                return
            time.sleep(1 + attempt)
        else:
            return


def lifecycle(api, tenant, image, execs, stats, stop_at, pace, pause=False):
    key = uuid.uuid4().hex
    st, doc = api.call("POST", "/v1/sandboxes",
                       {"tenant": tenant, "image": image, "cpu_millis": 100, "memory_mib": 32, "ttl_seconds": 600},
                       key="c-" + key)
    if st != 202:
        stats.errors.append("create: HTTP %s %s" % (st, doc))
        return
    sbx = doc["sandbox"]["id"]
    stats.add(doc["operation"], "create", api.token)
    with stats.lock:
        stats.sandboxes.append(sbx)
    op = api.wait(doc["operation"]["id"])
    stats.outcomes[op["id"]] = op["state"]
    markers = []
    if op["state"] == "succeeded":
        for i in range(execs):
            time.sleep(random.random() * pace)
            marker = "m-%s-%d" % (key, i)
            st, doc = api.call("POST", "/v1/sandboxes/%s/exec" % sbx,
                               {"argv": ["sh", "-c", "echo %s >> /tmp/exec.log" % marker], "timeout_seconds": 60},
                               key="e-%s-%d" % (key, i))
            if st == 409:
                break  # the sandbox is no longer running (lost)
            if st != 202:
                stats.errors.append("exec: HTTP %s %s" % (st, doc))
                break
            stats.add(doc["operation"], "exec", api.token)
            eop = api.wait(doc["operation"]["id"])
            stats.outcomes[eop["id"]] = eop["state"] if eop["state"] != "failed" else "failed:" + (eop["error"] or {}).get("code", "")
            with stats.lock:
                stats.exec_markers[marker] = (sbx, eop["id"])
            markers.append(marker)
        # Some lifecycles pause and resume the sandbox before the read-back:
        # its markers must survive that too.
        if markers and pause:
            pause_resume(api, sbx, key, stats)
        # Read the markers back (not counted as an operation of the burst).
        if markers:
            # The read-back is a read, not what is verified: one the fault
            # cut (its worker restarted under it: worker_lost, never retried
            # by the controller since an exec may have run; or its worker not
            # heard from yet after the fault: unavailable) is asked again.
            read, why = None, None
            for attempt in range(3):
                st, doc = api.call("POST", "/v1/sandboxes/%s/exec" % sbx,
                                   {"argv": ["cat", "/tmp/exec.log"], "timeout_seconds": 60},
                                   key="r-%s-%d" % (key, attempt))
                why = "read-back: HTTP %s %s" % (st, doc)
                if st != 202:
                    break
                rop = api.wait(doc["operation"]["id"])
                if rop["state"] == "succeeded" and rop["result"]["exit_code"] == 0:
                    read = rop["result"]["stdout"].split()
                why = "read-back %s of %s: %s %s" % (rop["id"], sbx, rop["state"], rop.get("error"))
                if read is not None or (rop.get("error") or {}).get("code") not in ("worker_lost", "unavailable"):
                    break
                time.sleep(1 + attempt)
            with stats.lock:
                if read is None:
                    stats.unverifiable += len(markers)
                    stats.unverifiable_why.append(why)
                else:
                    for m in markers:
                        stats.marker_counts[m] = read.count(m)
    time.sleep(random.random() * pace)
    st, doc = api.call("DELETE", "/v1/sandboxes/%s" % sbx, key="d-" + key)
    if st != 202:
        stats.errors.append("delete: HTTP %s %s" % (st, doc))
        return
    stats.add(doc["operation"], "delete", api.token)
    dop = api.wait(doc["operation"]["id"])
    stats.outcomes[dop["id"]] = dop["state"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--urls", required=True, help="comma-separated controller URLs")
    ap.add_argument("--tokens", required=True, help="file: one 'tenant token' per line")
    ap.add_argument("--image", default="sandbox/busybox:latest")
    ap.add_argument("--sandboxes", type=int, default=50)
    ap.add_argument("--execs", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--pace", type=float, default=0.3, help="max random pause between steps (s)")
    ap.add_argument("--deadline", type=float, default=600, help="seconds the burst may take")
    ap.add_argument("--progress-file", help="file the driver touches with the count of finished lifecycles")
    ap.add_argument("--pause-every", type=int, default=0,
                    help="every Nth lifecycle pauses and resumes its sandbox before reading its markers back (0: none)")
    args = ap.parse_args()
    urls = [u.strip().rstrip("/") for u in args.urls.split(",") if u.strip()]
    tenants = [line.split() for line in open(args.tokens) if line.strip()]
    deadline = time.time() + args.deadline
    stats = Stats()
    todo = list(range(args.sandboxes))
    lock = threading.Lock()
    done = [0]

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                n = todo.pop()
            tenant, token = tenants[n % len(tenants)]
            api = Api(urls, token, deadline)
            try:
                lifecycle(api, tenant, args.image, args.execs, stats, deadline, args.pace,
                          pause=args.pause_every > 0 and n % args.pause_every == 0)
            except Exception as e:  # a lifecycle that could not finish is reported, not hidden
                stats.errors.append("lifecycle %d: %r" % (n, e))
            with lock:
                done[0] += 1
                if args.progress_file:
                    with open(args.progress_file, "w") as f:
                        f.write(str(done[0]))
                print("driver: %d/%d lifecycles done" % (done[0], args.sandboxes), file=sys.stderr, flush=True)

    threads = [threading.Thread(target=worker) for _ in range(args.concurrency)]
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # Final states of every accepted operation (the drain check).
    nonterminal = []
    for op_id, kind, token in stats.accepted:
        api = Api(urls, token, time.time() + 60)
        st, doc = api.call("GET", "/v1/operations/%s" % op_id)
        state = doc["operation"]["state"] if st == 200 else "missing"
        if state not in TERMINAL:
            nonterminal.append(op_id)
        stats.outcomes[op_id] = state if state != "failed" else "failed:" + (doc["operation"]["error"] or {}).get("code", "")
    dup = [m for m, c in stats.marker_counts.items() if c > 1]
    # A succeeded exec whose marker is missing would be a lost write.
    missing = [m for m, (sbx, op) in stats.exec_markers.items()
               if m in stats.marker_counts and stats.marker_counts[m] == 0 and stats.outcomes.get(op) == "succeeded"]
    kinds = {}
    for op_id, kind, _ in stats.accepted:
        kinds[kind] = kinds.get(kind, 0) + 1
    states = {}
    for s in stats.outcomes.values():
        states[s] = states.get(s, 0) + 1
    print(json.dumps({
        "accepted": len(stats.accepted),
        "by_kind": kinds,
        "terminal": len(stats.accepted) - len(nonterminal),
        "nonterminal": nonterminal[:20],
        "outcomes": states,
        "exec_markers": len(stats.exec_markers),
        "exec_verified": len(stats.marker_counts),
        "exec_unverifiable": stats.unverifiable,
        "unverifiable_why": stats.unverifiable_why,
        "duplicates": len(dup),
        "missing_writes": len(missing),
        "errors": stats.errors[:20],
        "sandboxes": stats.sandboxes,
        "seconds": round(time.time() - t0, 1),
    }))


if __name__ == "__main__":
    main()
