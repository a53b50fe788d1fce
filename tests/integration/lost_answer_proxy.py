#!/usr/bin/env python3
"""A proxy between a worker and the controller (loopback only) that loses
the answer of one poll: while ARM_FILE exists, the first answer to a
`GET /v1/workers/{id}/poll` that hands out an assignment is read from the
controller in full (its claim is committed) and never sent: the worker's
connection is closed instead, as when the controller dies between the
claim's commit and the write — at once when ARM_FILE says "close" (libcurl
then sends the request again on a new connection: nothing came back on a
reused one), after the answer's first 20 bytes when it says "cut" (the
worker's request fails). The lost operation ids go to LOG_FILE and
ARM_FILE is removed. Everything else passes through unchanged.

Usage: lost_answer_proxy.py LISTEN_PORT UPSTREAM_PORT ARM_FILE LOG_FILE
Standard library only."""
import os
import re
import socket
import sys
import threading

listen_port, upstream_port, arm_file, log_file = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
lock = threading.Lock()


def read_head(sock, buf):
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            return None, buf
        buf += chunk
    i = buf.index(b"\r\n\r\n") + 4
    return buf[:i], buf[i:]


def read_exact(sock, buf, n):
    while len(buf) < n:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError
        buf += chunk
    return buf[:n], buf[n:]


def header(head, name):
    m = re.search(rb"\r\n" + name + rb":\s*([^\r]*)", head, re.I)
    return m.group(1).strip().lower() if m else None


def read_body(sock, head, buf):
    """The message's body (raw, as framed) and what follows it."""
    if header(head, b"transfer-encoding") == b"chunked":
        body = b""
        while True:
            while b"\r\n" not in buf:
                chunk = sock.recv(65536)
                if not chunk:
                    raise EOFError
                buf += chunk
            line, buf = buf.split(b"\r\n", 1)
            size = int(line.split(b";")[0], 16)
            data, buf = read_exact(sock, buf, size + 2)
            body += line + b"\r\n" + data
            if size == 0:
                return body, buf
    n = int(header(head, b"content-length") or b"0")
    return read_exact(sock, buf, n)


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client):
    up = socket.create_connection(("127.0.0.1", upstream_port))
    cbuf, ubuf = b"", b""
    try:
        while True:
            head, cbuf = read_head(client, cbuf)
            if head is None:
                break
            if header(head, b"expect") or header(head, b"transfer-encoding"):
                # not a worker's small exchange: pass the rest through as it is
                up.sendall(head + cbuf)
                threading.Thread(target=pipe, args=(up, client), daemon=True).start()
                pipe(client, up)
                return
            body, cbuf = read_body(client, head, cbuf)
            up.sendall(head + body)
            rhead, ubuf = read_head(up, ubuf)
            if rhead is None:
                break
            rbody, ubuf = read_body(up, rhead, ubuf)
            is_poll = re.match(rb"GET /v1/workers/[^/ ]+/poll", head) is not None
            ops = re.findall(rb'"operation_id":\s*"([a-z0-9_]+)"', rbody) if is_poll else []
            with lock:
                drop = bool(ops) and os.path.exists(arm_file)
                if drop:
                    with open(arm_file) as f:
                        mode = f.read().strip()
                    os.unlink(arm_file)
                    with open(log_file, "a") as f:
                        f.write("lost (%s) the answer handing out %s\n" % (mode, " ".join(o.decode() for o in ops)))
            if drop:
                if mode == "cut":
                    client.sendall(rhead[:20])
                break
            client.sendall(rhead + rbody)
    except (OSError, EOFError, ValueError):
        pass
    finally:
        for s in (client, up):
            try:
                s.close()
            except OSError:
                pass


srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", listen_port))
srv.listen(64)
print("ready", flush=True)
while True:
    conn, _ = srv.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
