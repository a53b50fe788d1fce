#!/usr/bin/env python3
"""Clients for test_routes_data.sh that curl cannot play.

slow HOST PORT PATH   a client that sends half a head and stalls, and one
                      that downloads PATH without reading, while fast
                      requests go on: prints the slowest fast request in ms.
ws HOST PORT PATH     an Upgrade request through the route; after the 101,
                      what is sent must come back (the echo server in the
                      sandbox): prints "tunnel ok".
trickle HOST PORT PATH  sends a request head one byte every second and
                      prints how many seconds passed until the server
                      closed the connection (gives up after 40).
raw HOST PORT         sends stdin as it is and prints the first line of
                      the answer (for requests curl will not send).
"""
import socket
import sys
import time


def fetch(host, port, path, timeout=10):
    s = socket.create_connection((host, port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    return data


def slow(host, port, path, big_path):
    # 1: half a request head, never finished
    stall = socket.create_connection((host, port))
    stall.sendall(b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    # 2: a large download that is never read (its buffers fill up)
    hog = socket.create_connection((host, port))
    hog.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    hog.sendall(f"GET {big_path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    time.sleep(1.0)
    worst = 0.0
    for _ in range(10):
        t0 = time.monotonic()
        data = fetch(host, port, path)
        ms = (time.monotonic() - t0) * 1000
        if not data.startswith(b"HTTP/1.") or b" 200 " not in data.split(b"\r\n", 1)[0]:
            print(f"fast request failed: {data[:200]!r}")
            return 1
        worst = max(worst, ms)
    stall.close()
    hog.close()
    print(f"{worst:.0f}")
    return 0


def ws(host, port, path):
    s = socket.create_connection((host, port), timeout=10)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        if not chunk:
            print(f"closed before the 101: {head!r}")
            return 1
        head += chunk
    first = head.split(b"\r\n", 1)[0]
    if b" 101 " not in first:
        print(f"no 101: {head!r}")
        return 1
    rest = head.split(b"\r\n\r\n", 1)[1]
    for msg in (b"ping-1\n", b"ping-2 " + b"x" * 100000 + b"\n"):
        s.sendall(msg)
        got = rest
        rest = b""
        while len(got) < len(msg):
            chunk = s.recv(65536)
            if not chunk:
                print(f"tunnel closed after {len(got)} of {len(msg)} bytes")
                return 1
            got += chunk
        if got != msg:
            print(f"echo differs: sent {len(msg)} bytes, got {got[:60]!r}")
            return 1
    s.close()
    print("tunnel ok")
    return 0


def raw(host, port):
    data = sys.stdin.buffer.read()
    s = socket.create_connection((host, port), timeout=10)
    try:
        s.sendall(data)
    except OSError:
        pass  # the server may answer and stop reading before the end
    got = b""
    try:
        while b"\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
    except OSError as e:
        print(f"error: {e}")
        return 1
    print(got.split(b"\r\n", 1)[0].decode(errors="replace"))
    return 0


def trickle(host, port, path):
    s = socket.create_connection((host, port), timeout=5)
    head = f"GET {path} HTTP/1.1\r\nHost: x\r\nX-Pad: {'a' * 100}\r\n\r\n".encode()
    t0 = time.monotonic()
    for b in head:
        if time.monotonic() - t0 > 40:
            break
        try:
            s.sendall(bytes([b]))
            s.settimeout(1.0)
            got = s.recv(4096)
            if not got:
                break  # closed
            # an answer (408/400) counts as closing too
            break
        except socket.timeout:
            continue
        except OSError:
            break
    print(f"{time.monotonic() - t0:.0f}")
    return 0


def main():
    cmd = sys.argv[1]
    host, port = sys.argv[2], int(sys.argv[3])
    if cmd == "slow":
        return slow(host, port, sys.argv[4], sys.argv[5])
    if cmd == "trickle":
        return trickle(host, port, sys.argv[4])
    if cmd == "raw":
        return raw(host, port)
    if cmd == "ws":
        return ws(host, port, sys.argv[4])
    print(f"unknown command {cmd}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
