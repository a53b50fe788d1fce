#!/usr/bin/env python3
"""NATS helpers for the integration tests, speaking the raw text protocol.

  nats_sub.py sub HOST PORT SUBJECT OUT STATUS
      Subscribes to SUBJECT and appends one JSON line per message to OUT:
      {"subject": ..., "t": <receive time>, "event": <payload as JSON>}. STATUS holds
      "connected N" once the server confirmed the N-th subscription (a PONG
      after SUB), "down N" while it is gone; it reconnects every 50 ms.

  nats_sub.py check OUT IDS FROM [MAX_DUPS]
      Checks the messages with FROM < id against IDS (a file of the event ids
      the database holds in that window, one per line): every id received,
      first deliveries in increasing id order, no id the database does not
      hold, at most MAX_DUPS re-deliveries (default 0). Exit 0 and a summary,
      or exit 1 with the reason.

  nats_sub.py missing OUT IDS FROM
      Exit 0 when every id of IDS above FROM was received, else 1.
"""
import json
import os
import socket
import sys
import time


def write_status(path, text):
    tmp = path + ".tmp"
    try:
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except OSError:
        sys.exit(0)  # the test's folder is gone: so is the test


def read_line(sock, buf):
    while b"\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    line, _, rest = buf.partition(b"\r\n")
    return line.decode(), rest


def read_exact(sock, buf, n):
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf[:n], buf[n:]


def subscribe(host, port, subject, out_path, status_path):
    gen = 0
    write_status(status_path, "down 0")
    out = open(out_path, "a", buffering=1)
    while True:
        sock = None
        try:
            sock = socket.create_connection((host, port), timeout=1)
            sock.settimeout(None)
            buf = b""
            line, buf = read_line(sock, buf)
            if not line.startswith("INFO "):
                raise ConnectionError("no INFO: %r" % line)
            sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"name":"itest-sub"}\r\n'
                         + ("SUB %s 1\r\n" % subject).encode() + b"PING\r\n")
            subscribed = False
            while True:
                line, buf = read_line(sock, buf)
                if line == "PING":
                    sock.sendall(b"PONG\r\n")
                elif line == "PONG" and not subscribed:
                    subscribed = True
                    gen += 1
                    write_status(status_path, "connected %d" % gen)
                elif line.startswith("MSG "):
                    parts = line.split(" ")
                    size = int(parts[-1])
                    payload, buf = read_exact(sock, buf, size + 2)
                    try:
                        event = json.loads(payload[:size].decode())
                    except ValueError:
                        event = {"invalid": payload[:size].decode(errors="replace")}
                    out.write(json.dumps({"subject": parts[1], "t": time.time(), "event": event}) + "\n")
                elif line.startswith("-ERR"):
                    raise ConnectionError(line)
        except (OSError, ConnectionError, ValueError):
            pass
        finally:
            if sock is not None:
                sock.close()
        write_status(status_path, "down %d" % gen)
        time.sleep(0.05)


def load(out_path, ids_path, lo):
    received = []
    with open(out_path) as f:
        lines = f.read().split("\n")
    for line in lines[:-1]:  # the last one may be half written
        line = line.strip()
        if line:
            msg = json.loads(line)
            i = msg["event"].get("id")
            if isinstance(i, int) and i > lo:
                received.append(i)
    with open(ids_path) as f:
        expected = [int(x) for x in f.read().split()]
    return received, [i for i in expected if i > lo]


def check(out_path, ids_path, lo, max_dups):
    received, expected = load(out_path, ids_path, lo)
    seen, top, dups = set(), lo, 0
    for i in received:
        if i in seen:
            dups += 1
            continue
        if i < top:
            print("out of order: event %d first arrived after %d" % (i, top))
            return 1
        seen.add(i)
        top = i
    hi = expected[-1] if expected else lo
    missing = [i for i in expected if i not in seen]
    phantom = sorted(i for i in seen if i <= hi and i not in set(expected))
    if missing:
        print("missing events: %s (of %d expected)" % (missing[:20], len(expected)))
        return 1
    if phantom:
        print("received ids the database does not hold: %s" % phantom[:20])
        return 1
    if dups > max_dups:
        print("%d re-deliveries, at most %d allowed" % (dups, max_dups))
        return 1
    print("%d events after %d, in order, none missing, %d re-delivered" % (len(expected), lo, dups))
    return 0


def main():
    cmd = sys.argv[1]
    if cmd == "sub":
        subscribe(sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6])
    elif cmd == "check":
        sys.exit(check(sys.argv[2], sys.argv[3], int(sys.argv[4]),
                       int(sys.argv[5]) if len(sys.argv) > 5 else 0))
    elif cmd == "missing":
        received, expected = load(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        got = set(received)
        sys.exit(0 if all(i in got for i in expected) else 1)
    else:
        sys.exit("usage: see the docstring")


if __name__ == "__main__":
    main()
