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
  get PATH FORMAT OUT             download PATH (tar, raw or list) into OUT
  digest-mismatch PATH            a get whose line differs from the signed one
Prints the worker's answer line (without SANDBOX-FORWARD/1); a get prints its
line and then "end: <message>" when the stream failed midway.
"""
import hashlib
import io
import json
import socket
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
    return s


def open_conn(args, purpose, req, signed=None):
    line = json.dumps(req, separators=(",", ":")).encode()
    g = grant(args["token"], args["worker"], args["sandbox"], purpose, signed if signed is not None else line)
    s = connect(args["addr"])
    s.sendall(f"{PROTO} {g}\r\n".encode() + line + b"\r\n")
    return s


def frame(kind, data=b""):
    return struct.pack(">BI", kind, len(data)) + data


def read_line(s):
    buf = b""
    while not buf.endswith(b"\r\n"):
        c = s.recv(1)
        if not c:
            break
        buf += c
    return buf.decode("utf-8", "replace").rstrip("\r\n")


def answer(line):
    return line[len(PROTO) + 1:] if line.startswith(PROTO + " ") else "(no answer) " + line


def send_stream(s, chunks):
    """Sends data frames from chunks, stopping when the worker answers early."""
    s.setblocking(True)
    for data in chunks:
        for off in range(0, len(data), FRAME_MAX):
            try:
                s.sendall(frame(1, data[off:off + FRAME_MAX]))
            except (BrokenPipeError, ConnectionResetError):
                return False
    return True


def early_answer(s):
    s.settimeout(0)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return False
    finally:
        s.settimeout(120)


def put(args, req, chunks):
    s = open_conn(args, "fput", req)
    ok = True
    for data in chunks:
        if early_answer(s):
            ok = False
            break
        if not send_stream(s, [data]):
            ok = False
            break
    if ok:
        try:
            s.sendall(frame(3))
        except (BrokenPipeError, ConnectionResetError):
            pass
    print(answer(read_line(s)))
    s.close()


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
    s = open_conn(args, "fget", {"op": "get", "path": path, "format": fmt})
    line = read_line(s)
    print(answer(line))
    if " 200 ok" not in line:
        return 0
    buf = b""
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
        s.shutdown(socket.SHUT_WR)
        line = read_line(s)
        print(answer(line) if line else "(no answer)")
        s.close()
    elif cmd == "get":
        return get(args, rest[0], rest[1], rest[2])
    elif cmd == "digest-mismatch":
        signed = json.dumps({"op": "get", "path": "/work", "format": "tar"}, separators=(",", ":")).encode()
        s = open_conn(args, "fget", {"op": "get", "path": rest[0], "format": "raw"}, signed=signed)
        print(answer(read_line(s)))
        s.close()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
