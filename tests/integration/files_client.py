#!/usr/bin/env python3
"""A client of the worker forwarder's file transfers, for test_files_worker.sh:
it plays the controller (docs/worker.md "File transfers"), signing grants as
the controller does from the worker's token.

files_client.py ADDR TOKEN WORKER_ID SANDBOX_ID CMD ARGS...
  put-tar DIR TARFILE [MAX]       upload TARFILE (a tar stream) into DIR
  put-raw PATH LOCAL MODE [MAX]   upload the file LOCAL as PATH with MODE (octal)
  put-raw-size PATH SIZE [MAX]    a raw upload that says SIZE and sends zeros
                                  until the worker answers (or SIZE bytes)
  put-abort PATH SIZE             a raw upload of SIZE bytes whose connection
                                  closes after the data, before the END frame
  put-tar-stream DIR BYTES [MAX]  a tar upload of one file of BYTES zero bytes,
                                  streamed until the worker answers
  put-slow PATH                   a raw upload of 100 MiB sent 1 KiB every 50 ms
                                  until the worker answers
  get PATH FORMAT OUT             download PATH (tar, raw or list) into OUT
  digest-mismatch PATH            a get whose line differs from the signed one
Prints the worker's answer line (without SANDBOX-FORWARD/1); a get prints its
line and then "end: <message>" when the stream failed midway. With FILES_CA
set (a PEM file) the connection is TLS, verified against it for 127.0.0.1.
"""
import hashlib
import io
import json
import os
import socket
import ssl
import struct
import sys
import tarfile
import time

PROTO = "SANDBOX-FORWARD/1"
CONTEXT = b"sandbox route grant key v1"
FRAME_MAX = 65536


def grant(token, worker, sandbox, purpose, line, ttl=60):
    token_hash = hashlib.blake2b(token.encode(), digest_size=32).digest()
    key = hashlib.blake2b(token_hash, digest_size=32, key=CONTEXT).digest()
    digest = hashlib.blake2b(line, digest_size=16).hexdigest()
    body = f"v1.{worker}.{sandbox}.{purpose}-{digest}.{int(time.time()) + ttl}"
    mac = hashlib.blake2b(body.encode(), digest_size=32, key=key).hexdigest()
    return f"{body}.{mac}"


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=120)
    ca = os.environ.get("FILES_CA")
    if ca:
        ctx = ssl.create_default_context(cafile=ca)
        s = ctx.wrap_socket(s, server_hostname=host)
    return s


class Conn:
    """A socket and what was read ahead of the answer line."""

    def __init__(self, s):
        self.s = s
        self.buf = b""

    def try_recv(self):
        """Reads what is there without waiting: True when the worker answered or closed."""
        self.s.setblocking(False)
        try:
            d = self.s.recv(4096)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
        finally:
            self.s.setblocking(True)
            self.s.settimeout(120)
        self.buf += d
        return True

    def read_line(self):
        while b"\r\n" not in self.buf:
            try:
                c = self.s.recv(4096)
            except (ConnectionResetError, BrokenPipeError):
                c = b""
            if not c:
                break
            self.buf += c
        line, _, self.buf = self.buf.partition(b"\r\n")
        return line.decode("utf-8", "replace")


def open_conn(args, purpose, req, signed=None):
    line = json.dumps(req, separators=(",", ":")).encode()
    g = grant(args["token"], args["worker"], args["sandbox"], purpose, signed if signed is not None else line)
    s = connect(args["addr"])
    s.sendall(f"{PROTO} {g}\r\n".encode() + line + b"\r\n")
    return s


def frame(kind, data=b""):
    return struct.pack(">BI", kind, len(data)) + data


def answer(line):
    return line[len(PROTO) + 1:] if line.startswith(PROTO + " ") else "(no answer) " + line


def send_stream(s, chunks):
    """Sends data frames from chunks; False when the worker closed."""
    for data in chunks:
        for off in range(0, len(data), FRAME_MAX):
            try:
                s.sendall(frame(1, data[off:off + FRAME_MAX]))
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                return False
    return True


def put(args, req, chunks):
    c = Conn(open_conn(args, "fput", req))
    ok = True
    for data in chunks:
        if c.try_recv() or not send_stream(c.s, [data]):
            ok = False    # the worker answered early (or closed)
            break
    if ok:
        try:
            c.s.sendall(frame(3))
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass
    print(answer(c.read_line()))
    c.s.close()


def file_chunks(path):
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 16)
            if not b:
                return
            yield b


def zeros(n, step=1 << 16):
    while n > 0:
        k = min(n, step)
        yield b"\0" * k
        n -= k


def tar_of_zeros(n):
    ti = tarfile.TarInfo("zeros.bin")
    ti.size = n
    yield ti.tobuf(format=tarfile.USTAR_FORMAT)
    yield from zeros(n)
    pad = (512 - n % 512) % 512
    yield b"\0" * (pad + 1024)


def get(args, path, fmt, out):
    c = Conn(open_conn(args, "fget", {"op": "get", "path": path, "format": fmt}))
    s = c.s
    line = c.read_line()
    print(answer(line))
    if " 200 ok" not in line:
        return 0
    buf = c.buf
    with open(out, "wb") as f:
        while True:
            while len(buf) < 5:
                c = s.recv(1 << 16)
                if not c:
                    print("end: (connection closed without END)")
                    return 1
                buf += c
            kind, n = struct.unpack(">BI", buf[:5])
            while len(buf) < 5 + n:
                c = s.recv(1 << 16)
                if not c:
                    print("end: (connection closed inside a frame)")
                    return 1
                buf += c
            data, buf = buf[5:5 + n], buf[5 + n:]
            if kind == 3:
                if data:
                    print("end: " + data.decode("utf-8", "replace"))
                    return 1
                return 0
            if kind != 1:
                print(f"end: (frame of type {kind})")
                return 1
            f.write(data)


def main(argv):
    args = {"addr": argv[1], "token": argv[2], "worker": argv[3], "sandbox": argv[4]}
    cmd, rest = argv[5], argv[6:]
    big = 1 << 30
    if cmd == "put-tar":
        mx = int(rest[2]) if len(rest) > 2 else big
        put(args, {"op": "put", "path": rest[0], "format": "tar", "max_bytes": mx}, file_chunks(rest[1]))
    elif cmd == "put-raw":
        import os
        mx = int(rest[3]) if len(rest) > 3 else big
        put(args, {"op": "put", "path": rest[0], "format": "raw", "size": os.path.getsize(rest[1]),
                   "mode": int(rest[2], 8), "max_bytes": mx}, file_chunks(rest[1]))
    elif cmd == "put-raw-size":
        n = int(rest[1])
        mx = int(rest[2]) if len(rest) > 2 else big
        put(args, {"op": "put", "path": rest[0], "format": "raw", "size": n, "mode": 0o644, "max_bytes": mx},
            zeros(n))
    elif cmd == "put-tar-stream":
        n = int(rest[1])
        mx = int(rest[2]) if len(rest) > 2 else big
        put(args, {"op": "put", "path": rest[0], "format": "tar", "max_bytes": mx}, tar_of_zeros(n))
    elif cmd == "put-abort":
        n = int(rest[1])
        s = open_conn(args, "fput", {"op": "put", "path": rest[0], "format": "raw", "size": n, "mode": 0o644,
                                     "max_bytes": big})
        send_stream(s, [b"A" * n])
        time.sleep(0.5)
        s.shutdown(socket.SHUT_WR)    # over TLS: the TCP end, no close_notify
        line = Conn(s).read_line()
        print(answer(line) if line else "(no answer)")
        s.close()
    elif cmd == "put-slow":
        def slow():
            while True:
                time.sleep(0.05)
                yield b"s" * 1024
        put(args, {"op": "put", "path": rest[0], "format": "raw", "size": 100 << 20, "mode": 0o644,
                   "max_bytes": big}, slow())
    elif cmd == "get":
        return get(args, rest[0], rest[1], rest[2])
    elif cmd == "digest-mismatch":
        signed = json.dumps({"op": "get", "path": "/work", "format": "tar"}, separators=(",", ":")).encode()
        s = open_conn(args, "fget", {"op": "get", "path": rest[0], "format": "raw"}, signed=signed)
        print(answer(Conn(s).read_line()))
        s.close()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
