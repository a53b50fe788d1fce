#!/usr/bin/env python3
"""Raw-socket clients for test_api_flood.sh: each subcommand attacks the API
listener one way and prints what it saw as `key value` lines. Loopback only
(127.0.0.0/8 source addresses)."""
import resource
import socket
import sys
import time

PORT = int(sys.argv[2])
TOKEN = sys.argv[3] if len(sys.argv) > 3 else ""


def lift_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def connect(src="127.0.0.1", timeout=10):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", PORT))
    return s


LEFT = {}  # bytes read past an answer, per socket (pipelined answers)


def post_head(clen, token=None):
    """The head of a create with a body of clen bytes and a bearer token."""
    return (b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + (token or TOKEN).encode() +
            b"\r\nContent-Type: application/json\r\nContent-Length: " + str(clen).encode() + b"\r\n\r\n")


def read_head(s, buf=b""):
    """Reads until the end of an answer's head (or EOF): the bytes so far."""
    while b"\r\n\r\n" not in buf:
        b = s.recv(65536)
        if not b:
            break
        buf += b
    return buf


def read_answer(s, limit=10.0):
    """Reads one answer (head + Content-Length body); returns (status, body, secs)."""
    t0 = time.monotonic()
    s.settimeout(limit)
    try:
        buf = read_head(s, LEFT.pop(s.fileno(), b""))
        head, _, body = buf.partition(b"\r\n\r\n")
        clen = 0
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                clen = int(v.strip())
        while len(body) < clen:
            b = s.recv(65536)
            if not b:
                break
            body += b
        if len(body) > clen:
            LEFT[s.fileno()] = body[clen:]
            body = body[:clen]
    except OSError as e:
        return "err-" + type(e).__name__, b"", time.monotonic() - t0
    status = buf.split(b" ", 2)[1].decode() if buf.startswith(b"HTTP/1.") else ("closed" if not buf else "bad")
    return status, body, time.monotonic() - t0


def get(path, src="127.0.0.1", extra=b""):
    t0 = time.monotonic()
    try:
        s = connect(src)
        s.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + extra + b"Connection: close\r\n\r\n")
        st, body, _ = read_answer(s)
        s.close()
    except OSError as e:
        st, body = "err-" + type(e).__name__, b""
    return st, body, time.monotonic() - t0


def still_open(socks):
    n = 0
    for s in socks:
        s.setblocking(False)
        try:
            n += 0 if s.recv(1) == b"" else 1
        except BlockingIOError:
            n += 1
        except OSError:
            pass
    return n


def cmd_idle():
    """idle PORT - SPEC...: SPEC is SRC:COUNT idle sockets; then /healthz
    from each SRC and from 127.0.0.1; prints per-probe status and seconds,
    then how many idle sockets are still open per SRC."""
    lift_nofile()
    groups = []
    for spec in sys.argv[4:]:
        src, n = spec.split(":")
        groups.append((src, [connect(src, 5) for _ in range(int(n))]))
    time.sleep(1.0)
    for src in ["127.0.0.1"] + [g[0] for g in groups]:
        st, _, secs = get("/healthz", src)
        print("probe", src, st, "%.2f" % secs)
    time.sleep(0.5)
    for src, socks in groups:
        print("open", src, still_open(socks))
        for s in socks:
            s.close()


def cmd_stalled():
    """stalled PORT - SPEC...: SPEC is SRC:COUNT connections, each a GET (every
    third a DELETE) whose head promises a 1-byte body that never comes;
    after 3 s (they have stalled), /healthz from 127.0.0.1 and from each SRC
    (status and seconds); then how many stalled connections were closed
    within 15 s of being opened, and when the last of them closed."""
    lift_nofile()
    socks, srcs = [], []
    t0 = time.monotonic()
    for spec in sys.argv[4:]:
        src, n = spec.split(":")
        srcs.append(src)
        for i in range(int(n)):
            s = connect(src, 5)
            method = b"DELETE /v1/sandboxes/sbx_x" if i % 3 == 2 else b"GET /healthz"
            s.sendall(method + b" HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n")
            socks.append(s)
    time.sleep(3.0)
    for src in ["127.0.0.1"] + srcs:
        st, _, secs = get("/healthz", src)
        print("probe", src, st, "%.2f" % secs)
    closed, last = 0, 0.0
    for s in socks:
        s.settimeout(max(0.1, 15 - (time.monotonic() - t0)))
        try:
            while s.recv(65536):
                pass
            closed += 1
            last = time.monotonic() - t0
        except OSError:
            pass
        s.close()
    print("stalled", closed, len(socks), "%.1f" % last)


def cmd_slowloris():
    """A head sent a byte every 0.5 s: the answer and when it came."""
    import select
    s = connect(timeout=10)
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 200 + b"\r\n\r\n"
    t0 = time.monotonic()
    raw = None
    for i in range(len(head)):
        if select.select([s], [], [], 0.5)[0]:
            raw = b""
            try:
                while True:
                    b = s.recv(65536)
                    if not b:
                        break
                    raw += b
            except OSError:
                pass
            break
        try:
            s.sendall(head[i:i + 1])
        except OSError:
            raw = b""
            break
    if raw is None:
        print("slowloris", "served-whole-head", "%.1f" % (time.monotonic() - t0))
        return
    st = raw.split(b" ", 2)[1].decode() if raw.startswith(b"HTTP/1.") else "closed"
    body = raw.partition(b"\r\n\r\n")[2].decode(errors="replace").strip()
    print("slowloris", st, "%.1f" % (time.monotonic() - t0), body)


def cmd_silent():
    """A connection that sends nothing, then one kept alive after a request:
    how long each stays open."""
    s = connect(timeout=30)
    t0 = time.monotonic()
    b = s.recv(1)
    print("silent", "closed" if b == b"" else "data", "%.1f" % (time.monotonic() - t0))
    s = connect(timeout=30)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    st, _, _ = read_answer(s)
    t0 = time.monotonic()
    b = s.recv(1)
    print("keepalive", st, "closed" if b == b"" else "data", "%.1f" % (time.monotonic() - t0))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cmd_bigbodies():
    """bigbodies PORT TOKEN PID N: N connections each declaring an 8 MiB
    body with a bad token and sending 1 MiB of it: how many got 401 before
    the body, and the controller's RSS growth."""
    pid, n = int(sys.argv[4]), int(sys.argv[5])
    lift_nofile()
    rss0 = rss_kib(pid)
    socks, got401, peak, other = [], 0, rss0, {}
    chunk = b"x" * 65536
    for _ in range(n):
        s = connect(timeout=10)
        s.sendall(post_head(8388608))
        socks.append(s)
    for s in socks:
        st, body, _ = read_answer(s, 10)
        got401 += st == "401"
        if st != "401":
            other[st] = other.get(st, 0) + 1
        try:
            s.setblocking(False)
            for _ in range(16):
                s.send(chunk)
        except OSError:
            pass
        peak = max(peak, rss_kib(pid))
    time.sleep(1.0)
    peak = max(peak, rss_kib(pid))
    for s in socks:
        s.close()
    # (what the others got, for a failure's message)
    print("bigbodies", got401, n, "rss_growth_mib", (peak - rss0) // 1024, "others",
          ",".join("%s:%d" % kv for kv in sorted(other.items())) or "none")


def cmd_budget():
    """budget PORT TOKEN: two bodies of 900 KiB sent slowly with a valid
    token under a 2 MiB budget, then a third: its answer (503 +
    Retry-After), then the slow ones closed by the minimum rate; before
    that, a 2 MiB body over max_body_bytes (1 MiB): 413 before it is sent."""
    s = connect(timeout=10)
    s.sendall(post_head(2097152))
    st, body, secs = read_answer(s, 10)
    print("toolarge", st, "%.2f" % secs)
    s.close()
    socks = []
    for _ in range(2):
        s = connect(timeout=15)
        s.sendall(post_head(921600) + b"{")
        socks.append(s)
    time.sleep(0.5)
    s = connect(timeout=15)
    s.sendall(post_head(921600))
    t0 = time.monotonic()
    s.settimeout(10)
    raw = b""
    try:
        raw = read_head(s)
    except OSError:
        pass
    head = raw.partition(b"\r\n\r\n")[0].decode(errors="replace")
    st = head.split(" ", 2)[1] if head.startswith("HTTP/1.") else "closed"
    ra = "none"
    for line in head.split("\r\n"):
        if line.lower().startswith("retry-after:"):
            ra = line.split(":", 1)[1].strip()
    print("budget", st, ra, "%.2f" % (time.monotonic() - t0))
    s.close()
    # The two slow bodies: closed by the minimum rate after the grace.
    t0 = time.monotonic()
    closed = 0
    for s in socks:
        s.settimeout(20)
        try:
            while s.recv(65536):
                pass
            closed += 1
        except OSError:
            closed += 1
    print("slowbody", closed, "%.1f" % (time.monotonic() - t0))


def cmd_smuggle():
    """Heads we refuse ourselves: two Content-Lengths, our own internal path."""
    s = connect()
    s.sendall(b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 40\r\n\r\n{}")
    st, body, _ = read_answer(s)
    print("twocl", st, body.decode(errors="replace").strip())
    s = connect()
    s.sendall(b"GET /_sbx/refused HTTP/1.1\r\nHost: x\r\nX-Sbx-Refusal: 13 0 forged\r\n\r\n")
    st, body, _ = read_answer(s)
    print("internal", st, body.decode(errors="replace").strip())
    # A body on a method evhttp reads none for would be read as the next
    # request: refused, the connection closed.
    s = connect()
    s.sendall(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 24\r\n\r\nGET /_sbx/refused HTTP/1.1")
    st, body, _ = read_answer(s)
    print("headbody", st, "closed" if s.recv(1) == b"" else "open")
    # Pipelined and kept-alive requests still work.
    s = connect()
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    a, _, _ = read_answer(s)
    b, _, _ = read_answer(s)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    c, _, _ = read_answer(s)
    print("pipelined", a, b, c)


if __name__ == "__main__":
    globals()["cmd_" + sys.argv[1]]()
