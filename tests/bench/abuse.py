#!/usr/bin/env python3
"""The load programs of tests/bench/abuse.sh (python3 standard library only).

  abuse.py logcount OUT COUNT [CAP]
      copies stdin to OUT up to CAP bytes (default 4 MiB) and keeps the total
      byte count in COUNT (rewritten at most every 0.2 s and at EOF): a
      controller's log is measured without filling the disk.
  abuse.py attack KIND PORT CONNS ADDRS HOLD OUT [options as key=value]
      KIND idle: CONNS connections that send nothing; slowloris: a request
      head one byte every interval=S seconds; body: `POST /v1/sandboxes`
      with Content-Length bytes=N and the body sent at rate=B bytes a second
      per connection (token=T adds a bearer token). ADDRS source addresses
      are used in turn: 127.0.0.2 onwards (first=K starts at 127.0.0.K). The
      connections are held HOLD seconds after the last was opened; then OUT
      gets {"opened", "failed", "held", "closed_by_peer", "answered"}. When
      the descriptor limit is below CONNS, several processes share them.
      rss_pid=P rss_abort_mib=M: stop early when P's VmRSS passes M MiB.
  abuse.py probe PORT PID OUT [rate=20] [timeout=2]
      /healthz from 127.0.0.1 at RATE requests a second, alternately on a
      fresh connection and on one kept alive, until SIGTERM; samples PID's
      VmRSS (kB) and CPU time five times a second. OUT gets the latencies
      (ms; a failed request counts as the timeout), errors and samples.
  abuse.py flood PORT TOKEN SANDBOXES IMAGE SECONDS CLIENTS OUT
      CLIENTS threads with TOKEN (tenant A) create sandboxes and exec `true`
      in the comma-separated SANDBOXES back to back for SECONDS or until the
      file OUT.stop exists; OUT gets the statuses counted.
  abuse.py createwait PORT TOKEN IMAGE N OUT [deadline=S]
      N times: create a sandbox, poll until it is running (ms from the POST
      to the first running answer), delete it and wait until it is gone;
      none starts after S seconds, and one pending then counts as its time so
      far (a lower bound, "pending").
  abuse.py report ROW.json... prints the table; exits 1 when a target fails.
Traffic goes only to 127.0.0.0/8.
"""
import errno
import json
import os
import resource
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time

IP_BIND_ADDRESS_NO_PORT = 24  # linux/in.h: the port is chosen at connect()


def opts(args):
    out = {}
    for a in args:
        k, _, v = a.partition("=")
        out[k] = v
    return out


def rss_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_ticks(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return int(parts[11]) + int(parts[12])
    except (OSError, IndexError, ValueError):
        return 0


# ---------------------------------------------------------------- logcount
def logcount(out, count, cap=4 << 20):
    total, last = 0, 0.0
    write_count(count + ".pid", os.getpid())  # abuse.sh waits for it before removing the directory
    inp = sys.stdin.buffer.raw
    with open(out, "ab") as f:
        while True:
            b = inp.read(1 << 16)
            if not b:
                break
            if total < cap:
                f.write(b[: cap - total])
                f.flush()
            total += len(b)
            now = time.monotonic()
            if now - last >= 0.2:
                last = now
                write_count(count, total)
    write_count(count, total)


def write_count(path, n):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{n}\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------- attack
class Conn:
    __slots__ = ("sock", "state", "todo", "sent", "t0")

    def __init__(self, sock, todo):
        self.sock, self.state, self.todo, self.sent, self.t0 = sock, "connecting", todo, 0, time.monotonic()


def attack(kind, port, conns, addrs, hold, out, o):
    """Splits CONNS over processes when one may not hold them all (each
    raises its soft descriptor limit to the hard one; raising the hard one
    needs CAP_SYS_RESOURCE, which a container may lack)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > 1 << 20:
        hard = 1 << 20
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ValueError, OSError):
        hard = soft
    per = max(64, hard - 256)
    if "offset" in o or conns <= per:
        return attack_one(kind, port, conns, addrs, hold, out, o)
    procs = (conns + per - 1) // per
    kids = []
    for j in range(procs):
        n = conns // procs + (1 if j < conns % procs else 0)
        off = sum(conns // procs + (1 if k < conns % procs else 0) for k in range(j))
        args = [sys.executable, os.path.abspath(__file__), "attack", kind, str(port), str(n), str(addrs), str(hold),
                f"{out}.{j}"] + [f"{k}={v}" for k, v in o.items()] + [f"offset={off}"]
        kids.append(subprocess.Popen(args))
    for k in kids:
        k.wait()
    res = {"opened": 0, "failed": 0, "held": 0, "closed_by_peer": 0, "answered": 0, "aborted": "",
           "fail_reasons": {}, "open_seconds": 0, "processes": procs}
    for j in range(procs):
        try:
            with open(f"{out}.{j}") as f:
                r = json.load(f)
        except (OSError, ValueError):
            res["aborted"] = f"attacker process {j} wrote nothing"
            continue
        for k in ("opened", "failed", "held", "closed_by_peer", "answered"):
            res[k] += r[k]
        for k, v in r["fail_reasons"].items():
            res["fail_reasons"][k] = res["fail_reasons"].get(k, 0) + v
        res["open_seconds"] = max(res["open_seconds"], r["open_seconds"])
        res["aborted"] = res["aborted"] or r["aborted"]
        if "body_bytes_sent_max" in r:
            res["body_bytes_sent_max"] = max(res.get("body_bytes_sent_max", 0), r["body_bytes_sent_max"])
    with open(out, "w") as f:
        json.dump(res, f)


def attack_one(kind, port, conns, addrs, hold, out, o):
    first = int(o.get("first", "2"))
    offset = int(o.get("offset", "0"))
    interval = float(o.get("interval", "20"))
    nbytes = int(o.get("bytes", str(8 << 20)))
    rate = int(o.get("rate", "16384"))
    token = o.get("token", "")
    rss_pid = int(o.get("rss_pid", "0"))
    rss_abort = int(o.get("rss_abort_mib", "0")) * 1024
    if kind == "slowloris":
        todo = (f"GET /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: abuse\r\n"
                "X-Padding: " + "a" * 200 + "\r\n\r\n").encode()
    elif kind == "body":
        head = f"POST /v1/sandboxes HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        head += f"Content-Length: {nbytes}\r\n\r\n"
        todo = head.encode()
    else:
        todo = b""
    sel = selectors.DefaultSelector()
    res = {"opened": 0, "failed": 0, "held": 0, "closed_by_peer": 0, "answered": 0, "aborted": ""}
    fails = {}

    # open: at most 512 connects in flight, each given 5 s
    pending = 0
    made = 0
    conn_by_fd = {}
    t_open = time.monotonic()

    def on_event(c, ev):
        nonlocal pending
        if c.state == "connecting":
            pending -= 1
            err = c.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                res["failed"] += 1
                fails[errno.errorcode.get(err, str(err))] = fails.get(errno.errorcode.get(err, str(err)), 0) + 1
                close(c)
                return
            res["opened"] += 1
            c.state = "open"
            sel.modify(c.sock, selectors.EVENT_READ, c)
            return
        try:
            b = c.sock.recv(65536)
        except OSError:
            b = b""
        if b:
            res["answered"] += 1
        res["closed_by_peer"] += 1 if not b else 0
        close(c)

    def close(c):
        try:
            sel.unregister(c.sock)
        except (KeyError, ValueError):
            pass
        conn_by_fd.pop(c.sock.fileno(), None)
        c.sock.close()
        c.state = "closed"

    def pump(timeout):
        for key, ev in sel.select(timeout):
            on_event(key.data, ev)

    def over_rss():
        if rss_abort and rss_pid and rss_kb(rss_pid) > rss_abort:
            res["aborted"] = f"controller RSS over {rss_abort // 1024} MiB"
            return True
        return False

    while made < conns:
        if pending >= 512:
            pump(0.05)
            now = time.monotonic()
            for c in list(conn_by_fd.values()):
                if c.state == "connecting" and now - c.t0 > 5:
                    pending -= 1
                    res["failed"] += 1
                    fails["ETIMEDOUT"] = fails.get("ETIMEDOUT", 0) + 1
                    close(c)
            continue
        src = f"127.0.0.{first + (offset + made) % addrs}"
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
            s.bind((src, 0))
            s.connect_ex(("127.0.0.1", port))
        except OSError as e:
            s.close()
            res["failed"] += 1
            fails[errno.errorcode.get(e.errno, str(e))] = fails.get(errno.errorcode.get(e.errno, str(e)), 0) + 1
            made += 1
            if e.errno in (errno.EMFILE, errno.ENFILE):
                break
            continue
        c = Conn(s, todo)
        conn_by_fd[s.fileno()] = c
        sel.register(s, selectors.EVENT_WRITE, c)
        pending += 1
        made += 1
    deadline = time.monotonic() + 5
    while pending > 0 and time.monotonic() < deadline:
        pump(0.1)
    for c in list(conn_by_fd.values()):
        if c.state == "connecting":
            pending -= 1
            res["failed"] += 1
            fails["ETIMEDOUT"] = fails.get("ETIMEDOUT", 0) + 1
            close(c)
    res["open_seconds"] = round(time.monotonic() - t_open, 1)

    # hold: send what the kind sends, on its schedule
    t_end = time.monotonic() + hold
    if kind == "idle":
        while time.monotonic() < t_end and not over_rss():
            pump(min(1.0, max(0.0, t_end - time.monotonic())))
    elif kind == "slowloris":
        nxt = time.monotonic()
        while time.monotonic() < t_end:
            now = time.monotonic()
            if now >= nxt:
                for c in list(conn_by_fd.values()):
                    if c.state == "open" and c.sent < len(c.todo):
                        try:
                            c.sock.send(c.todo[c.sent:c.sent + 1])
                            c.sent += 1
                        except OSError:
                            res["closed_by_peer"] += 1
                            close(c)
                nxt = now + interval
            pump(min(1.0, max(0.0, min(nxt, t_end) - time.monotonic())))
    else:
        tick = 0.25
        per_tick = max(1, int(rate * tick))
        chunk = b" " * per_tick
        nxt = time.monotonic()
        while time.monotonic() < t_end and not over_rss():
            now = time.monotonic()
            if now >= nxt:
                for c in list(conn_by_fd.values()):
                    if c.state != "open":
                        continue
                    try:
                        if c.sent < len(c.todo):
                            c.sent += c.sock.send(c.todo[c.sent:])
                        elif c.sent - len(c.todo) < nbytes:
                            left = nbytes - (c.sent - len(c.todo))
                            c.sent += c.sock.send(chunk[:left])
                    except BlockingIOError:
                        pass
                    except OSError:
                        res["closed_by_peer"] += 1
                        close(c)
                nxt = now + tick
            pump(max(0.0, min(nxt, t_end) - time.monotonic()))
    # what the controller has not closed (a final look at pending closes)
    pump(0)
    res["held"] = sum(1 for c in conn_by_fd.values() if c.state == "open")
    res["fail_reasons"] = fails
    if kind == "body":
        sent = [c.sent - len(todo) for c in conn_by_fd.values()]
        res["body_bytes_sent_max"] = max(sent) if sent else 0
    for c in list(conn_by_fd.values()):
        c.sock.close()
    with open(out, "w") as f:
        json.dump(res, f)


# ---------------------------------------------------------------- probe
def read_response(s, deadline):
    buf = b""
    while True:
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep:
            length = None
            for line in head.split(b"\r\n")[1:]:
                k, _, v = line.partition(b":")
                if k.strip().lower() == b"content-length":
                    length = int(v)
            if length is not None and len(body) >= length:
                return int(head.split(b" ", 2)[1])
        left = deadline - time.monotonic()
        if left <= 0:
            raise socket.timeout("deadline")
        s.settimeout(left)
        b = s.recv(65536)
        if not b:
            if not buf:
                raise ConnectionResetError("closed before an answer")
            if sep:
                return int(head.split(b" ", 2)[1])
            raise ConnectionResetError("closed mid-answer")
        buf += b


def probe(port, pid, out, o):
    rate = float(o.get("rate", "20"))
    timeout = float(o.get("timeout", "2"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    samples = []

    def sampler():
        while not stop.is_set():
            samples.append((time.monotonic(), rss_kb(pid), cpu_ticks(pid)))
            stop.wait(0.2)
    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    req_close = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
    req_keep = f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
    lat = {"fresh": [], "keep": []}
    errs = {"fresh": 0, "keep": 0}
    reasons = {}
    reconnects = 0
    keep = None
    i = 0
    nxt = time.monotonic()

    def connect(deadline):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(max(0.01, deadline - time.monotonic()))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.bind(("127.0.0.1", 0))
        s.connect(("127.0.0.1", port))
        return s

    while not stop.is_set():
        mode = "fresh" if i % 2 == 0 else "keep"
        i += 1
        t0 = time.monotonic()
        deadline = t0 + timeout
        ok = False
        try:
            if mode == "fresh":
                s = connect(deadline)
                try:
                    s.sendall(req_close)
                    ok = read_response(s, deadline) == 200
                finally:
                    s.close()
            else:
                for attempt in (0, 1):
                    try:
                        if keep is None:
                            keep = connect(deadline)
                        keep.sendall(req_keep)
                        ok = read_response(keep, deadline) == 200
                        break
                    except (ConnectionResetError, BrokenPipeError) as e:
                        # the controller closed the kept-alive connection
                        # between requests: connect again once
                        if keep is not None:
                            keep.close()
                        keep = None
                        if attempt:
                            raise
                        reconnects += 1
        except (OSError, ValueError, IndexError) as e:
            reasons[type(e).__name__] = reasons.get(type(e).__name__, 0) + 1
            if mode == "keep" and keep is not None:
                keep.close()
                keep = None
            ok = False
        ms = (time.monotonic() - t0) * 1000
        if ok:
            lat[mode].append(round(ms, 2))
        else:
            errs[mode] += 1
            lat[mode].append(max(round(ms, 2), timeout * 1000))
        nxt += 1.0 / rate
        now = time.monotonic()
        if nxt < now:
            nxt = now
        stop.wait(nxt - now)
    th.join()
    with open(out, "w") as f:
        json.dump({"lat": lat, "errors": errs, "reasons": reasons, "reconnects": reconnects,
                   "rss_kb": [s[1] for s in samples], "cpu": [samples[0][2], samples[-1][2]] if samples else [0, 0],
                   "seconds": samples[-1][0] - samples[0][0] if len(samples) > 1 else 0,
                   "hz": os.sysconf("SC_CLK_TCK")}, f)


# ---------------------------------------------------------------- tenants
def http(port, method, path, token, body=None, src="127.0.0.1", timeout=30):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(src, 0))
    try:
        data = json.dumps(body).encode() if body is not None else b""
        head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\n"
                f"Connection: close\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n")
        s.sendall(head.encode() + data)
        buf = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            buf += b
    finally:
        s.close()
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    try:
        return status, json.loads(rest) if rest else None
    except ValueError:
        return status, None


def flood(port, token, sandboxes, image, seconds, clients, out):
    ids = [x for x in sandboxes.split(",") if x]
    counts = {}
    lock = threading.Lock()
    t_end = time.monotonic() + seconds
    spec = {"image": image, "cpu_millis": 100, "memory_mib": 32}

    def one(k):
        n = 0
        while time.monotonic() < t_end and not os.path.exists(out + ".stop"):
            n += 1
            if n % 2 and ids:
                what, path, body = "exec", f"/v1/sandboxes/{ids[(n + k) % len(ids)]}/exec", {"argv": ["true"]}
            else:
                what, path, body = "create", "/v1/sandboxes", spec
            try:
                st, _ = http(port, "POST", path, token, body, src="127.0.0.50", timeout=10)
            except OSError:
                st = "error"
            key = f"{what} {st}"
            with lock:
                counts[key] = counts.get(key, 0) + 1
    ts = [threading.Thread(target=one, args=(k,)) for k in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    with open(out, "w") as f:
        json.dump(counts, f)


def createwait(port, token, image, n, out, deadline=0.0, timeout=120):
    """N creates, one at a time; with DEADLINE (seconds from now) no create
    starts after it, and one still pending at it is recorded with its time so
    far and "pending": true (a lower bound)."""
    res = []
    t_dead = time.monotonic() + deadline if deadline else float("inf")
    for _ in range(n):
        if time.monotonic() >= t_dead:
            break
        t0 = time.monotonic()
        st, body = http(port, "POST", "/v1/sandboxes", token, {"image": image, "cpu_millis": 100, "memory_mib": 32})
        if st != 202:
            res.append({"error": f"create: {st} {json.dumps(body)[:200]}"})
            time.sleep(1)
            continue
        sid = body["sandbox"]["id"]
        state = "?"
        while time.monotonic() - t0 < timeout and time.monotonic() < t_dead:
            st, body = http(port, "GET", f"/v1/sandboxes/{sid}", token)
            state = body["sandbox"]["phase"] if st == 200 else f"http {st}"
            if state in ("running", "failed", "deleted"):
                break
            time.sleep(0.05)
        ms = round((time.monotonic() - t0) * 1000, 1)
        if state == "running":
            res.append({"id": sid, "ms": ms})
        elif state in ("failed", "deleted") or not time.monotonic() >= t_dead:
            res.append({"id": sid, "error": state})
        else:
            res.append({"id": sid, "ms": ms, "pending": True})
        http(port, "DELETE", f"/v1/sandboxes/{sid}", token)
        t1 = time.monotonic()
        while time.monotonic() - t1 < timeout and time.monotonic() < t_dead:
            st, body = http(port, "GET", f"/v1/sandboxes/{sid}", token)
            if st == 404 or (st == 200 and body["sandbox"]["phase"] in ("deleted", "failed")):
                break
            time.sleep(0.1)
    with open(out, "w") as f:
        json.dump(res, f)


# ---------------------------------------------------------------- report
def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, int(len(xs) * p + 0.999) - 1))]


def report(paths):
    p99_max, grow_max, after_max, log_max, ratio_max = 50.0, 128 * 1024, 32 * 1024, 1 << 20, 2.0
    print("targets: /healthz p99 < 50 ms (fresh and kept-alive); RSS peak - start < 128 MiB; "
          "RSS after - start < 32 MiB; log growth < 1 MiB; slowloris: none held at the end; "
          "tenants: B's create->running p50 under flood <= 2x idle (the only target of that row)")
    hdr = (f"{'row':24} {'fresh p50/p99 ms':>17} {'kept p50/p99 ms':>16} {'err':>5} {'ctl cpu':>7} "
           f"{'RSS start/peak/after MiB':>25} {'log bytes':>10} {'held':>12}  result")
    print(hdr)
    bad = 0
    notes = []
    for path in paths:
        with open(path) as f:
            r = json.load(f)
        if "probe" not in r or (r.get("skipped") and r["row"] != "tenants") or (
                r["row"] == "tenants" and "tenants" not in r):
            print(f"{r['row']:24} not measured: {r.get('skipped', '?')}  FAIL")
            bad += 1
            continue
        pr = r["probe"]
        fr, kp = pr["lat"]["fresh"], pr["lat"]["keep"]
        f50, f99, k50, k99 = pct(fr, .5), pct(fr, .99), pct(kp, .5), pct(kp, .99)
        errs = pr["errors"]["fresh"] + pr["errors"]["keep"]
        start, after = r["rss_start"], r["rss_after"]
        peak = max([start, after] + pr["rss_kb"])
        cpu = ((pr["cpu"][1] - pr["cpu"][0]) / pr["hz"] / pr["seconds"] * 100) if pr["seconds"] else 0
        logb = r["log_after"] - r["log_start"]
        fails = []
        judged = not r.get("tenants")  # the tenants row is judged on B's ratio alone
        if not (f99 < p99_max and k99 < p99_max):
            fails.append("p99")
        if peak - start >= grow_max:
            fails.append("RSS growth")
        if after - start >= after_max:
            fails.append("RSS after")
        if logb >= log_max:
            fails.append("log")
        if r.get("kind") == "slowloris" and r.get("attack", {}).get("held", 0) > 0:
            fails.append("held")  # a head must arrive within a deadline
        if not judged:
            fails = []
        a = r.get("attack")
        held = f"{a['held']}/{r['conns']}" if a else "-"
        extra = ""
        if r.get("tenants"):
            t = r["tenants"]
            idle = [x["ms"] for x in t["idle"] if "ms" in x]
            fl = [x["ms"] for x in t["flood"] if "ms" in x]
            pend = sum(1 for x in t["flood"] if x.get("pending"))
            i50, f50b = pct(idle, .5), pct(fl, .5)
            missing = len(t["flood"]) - len(fl)
            ratio = f50b / i50 if idle and fl else float("inf")
            if not ratio <= ratio_max or missing:
                fails.append("B ratio")
            ge = ">= " if pend else ""
            extra = (f"\n  {'':22} B create->running p50: idle {i50:.0f} ms ({len(idle)}), under flood {ge}{f50b:.0f} ms "
                     f"({len(fl) - pend} running, {pend} still pending at the flood's end, {missing} failed), "
                     f"ratio {ge}{ratio:.2f} (target <= {ratio_max:g}); "
                     f"A's answers: {json.dumps(t['a_counts'], sort_keys=True)}")
        result = "PASS" if not fails else "FAIL (" + ", ".join(fails) + ")"
        bad += 1 if fails else 0
        mib = lambda kb: kb / 1024
        lat_f, lat_k = f"{f50:.1f}/{f99:.1f}", f"{k50:.1f}/{k99:.1f}"
        rss_s = f"{mib(start):.0f}/{mib(peak):.0f}/{mib(after):.0f}"
        print(f"{r['row']:24} {lat_f:>17} {lat_k:>16} {errs:5d} {cpu:6.0f}% "
              f"{rss_s:>25} {logb:10d} {held:>12}  {result}{extra}")
        if a:
            notes.append(f"  {r['row']}: opened {a['opened']} of {r['conns']} in {a.get('open_seconds', 0)} s "
                         f"(failed {a['failed']} {json.dumps(a.get('fail_reasons', {}))}), closed by the controller "
                         f"{a['closed_by_peer']}, answered {a['answered']}"
                         + (f", body bytes sent per connection up to {a['body_bytes_sent_max']}"
                            if "body_bytes_sent_max" in a else "")
                         + (f"; ABORTED: {a['aborted']}" if a.get("aborted") else "")
                         + (f"; probe errors {json.dumps(pr['reasons'])}" if pr["reasons"] else "")
                         + (f", kept-alive reconnects {pr['reconnects']}" if pr["reconnects"] else ""))
    if notes:
        print("attackers (held = connections still open at the end of the hold):")
        print("\n".join(notes))
    return 1 if bad else 0


def main():
    a = sys.argv[1:]
    if not a:
        sys.exit(__doc__)
    cmd = a[0]
    if cmd == "logcount":
        logcount(a[1], a[2], int(a[3]) if len(a) > 3 else 4 << 20)
    elif cmd == "attack":
        attack(a[1], int(a[2]), int(a[3]), int(a[4]), float(a[5]), a[6], opts(a[7:]))
    elif cmd == "probe":
        probe(int(a[1]), int(a[2]), a[3], opts(a[4:]))
    elif cmd == "flood":
        flood(int(a[1]), a[2], a[3], a[4], float(a[5]), int(a[6]), a[7])
    elif cmd == "createwait":
        createwait(int(a[1]), a[2], a[3], int(a[4]), a[5], float(opts(a[6:]).get("deadline", "0")))
    elif cmd == "report":
        sys.exit(report(a[1:]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
