#!/usr/bin/env python3
"""The egress filter tests' parts that speak protocols (test_egress_filter.sh).

  serve DIR                 in the "internet" namespace: HTTPS on 443 and
                            HTTP on 80 (every address), answering
                            "hello NAME" with the Host asked for; a UDP
                            listener on 443 that logs each datagram to
                            DIR/udp.log and answers it (a TFTP read
                            request with one block, an echo otherwise)
  dns NAME SERVER           in the sandbox: ask SERVER:53 (UDP) for NAME's A
                            record; prints "rcode N" and the addresses
  dnstcp NAME SERVER        the same over TCP; prints "rcode N" or "refused: ..."
  https NAME ADDR CA [HOST] in the sandbox: TLS to ADDR:443 with SNI NAME
                            (verified against CA), GET / with Host HOST
                            (default NAME); prints the body or "refused: ..."
  http HOST ADDR            plain HTTP GET / to ADDR:80 with Host HOST
  fetch NAME ADDR CA PATH [HEADER [HOST]]
                            in the sandbox: HTTPS GET PATH verified as NAME
                            against CA, with HEADER ("K: V") and Host HOST;
                            prints the body or "refused: ..." (the servers
                            answer /headers with the Authorization, Host
                            and Connection they got)
  download NAME ADDR CA     HTTPS GET /big (8 MiB); prints the body's length
  hold NAME ADDR CA SECS    a TLS connection held open until it ends (or SECS)
  bench NAME ADDR CA N MIB  median TLS setup of N connections and median
                            MiB/s of 5 downloads of MIB MiB, as JSON
  quic ADDR                 a UDP datagram to ADDR:443; "sent"
  udp ADDR PORT [TEXT [S]]  a datagram, and its answer "echo TEXT from A:P"
                            or "no reply" (within S seconds, default 3)
  burst PARENT SERVER N     N queries for random names below PARENT; prints
                            how many were answered NXDOMAIN
  control SOCK JSON         one request to sandbox-egress's control socket;
                            prints the answer
"""
import http.server
import json
import os
import random
import socket
import ssl
import string
import struct
import sys
import threading


def dns_query(name, qtype=1):
    qid = random.randrange(65536)
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return qid, q + b"\x00" + struct.pack(">HH", qtype, 1)


def dns_parse(resp):
    rcode = resp[3] & 0xF
    an = struct.unpack(">H", resp[6:8])[0]
    at = 12
    while resp[at] != 0:  # the question's name (never compressed in ours)
        at += 1 + resp[at]
    at += 5
    addrs = []
    for _ in range(an):
        if resp[at] & 0xC0 == 0xC0:
            at += 2
        else:
            while resp[at] != 0:
                at += 1 + resp[at]
            at += 1
        typ, _cls, _ttl, rdl = struct.unpack(">HHIH", resp[at:at + 10])
        at += 10
        if typ == 1 and rdl == 4:
            addrs.append(socket.inet_ntoa(resp[at:at + 4]))
        at += rdl
    return rcode, addrs


def udp_ask(name, server, timeout=3):
    qid, q = dns_query(name)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    s.sendto(q, (server, 53))
    resp, _ = s.recvfrom(4096)
    return dns_parse(resp)


def read_all(s, size=65536):
    data = b""
    while True:
        chunk = s.recv(size)
        if not chunk:
            return data
        data += chunk


def cmd_serve(d):
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = ("hello %s\n" % self.headers.get("Host", "?")).encode()
            if self.path == "/headers":  # what arrived, for secrets at egress
                body = ("auth=%s host=%s conn=%s\n" % (self.headers.get("Authorization"), self.headers.get("Host"),
                                                      self.headers.get("Connection"))).encode()
            elif self.path == "/big":
                body = b"x" * (8 << 20)
            elif self.path.startswith("/mib/"):
                body = b"x" * (min(int(self.path[5:]), 256) << 20)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    http.server.ThreadingHTTPServer.allow_reuse_address = True
    plain = http.server.ThreadingHTTPServer(("0.0.0.0", 80), H)
    tls = http.server.ThreadingHTTPServer(("0.0.0.0", 443), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(os.path.join(d, "server.crt"), os.path.join(d, "server.key"))
    tls.socket = ctx.wrap_socket(tls.socket, server_side=True)

    IP_PKTINFO = 8  # <linux/in.h>; not in Python's socket module

    def udp():
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.setsockopt(socket.IPPROTO_IP, IP_PKTINFO, 1)
        u.bind(("0.0.0.0", 443))
        while True:
            data, anc, _, peer = u.recvmsg(4096, socket.CMSG_SPACE(12))
            with open(os.path.join(d, "udp.log"), "a") as f:
                f.write("%s %d\n" % (peer[0], len(data)))
            # an answer from the address it came to (as a server there
            # would): a TFTP read request gets its one block (busybox's
            # tftp is a sandbox's UDP client), an ACK nothing, the rest an echo
            to = [(socket.IPPROTO_IP, IP_PKTINFO, struct.pack("i4s4s", 0, c[2][8:12], b"\0" * 4))
                  for c in anc if c[0] == socket.IPPROTO_IP and c[1] == IP_PKTINFO]
            if data[:2] == b"\x00\x01":
                fname = data[2:].split(b"\x00")[0]
                u.sendmsg([b"\x00\x03\x00\x01udp " + fname + b" from " + peer[0].encode() + b"\n"], to, 0, peer)
            elif data[:2] != b"\x00\x04":
                u.sendmsg([b"echo " + data], to, 0, peer)

    for f in (plain.serve_forever, tls.serve_forever, udp):
        threading.Thread(target=f, daemon=True).start()
    open(os.path.join(d, "serving"), "w").close()
    threading.Event().wait()


def cmd_download(name, addr, ca):
    ctx = ssl.create_default_context(cafile=ca)
    with socket.create_connection((addr, 443), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname=name) as s:
            s.sendall(("GET /big HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % name).encode())
            data = read_all(s, 1 << 20)
    print(len(data.split(b"\r\n\r\n", 1)[-1]))


def cmd_bench(name, addr, ca, n, mib):
    """Median TLS connection setup (connect + handshake) of n, and the
    median throughput of 5 downloads of mib MiB, as JSON."""
    import statistics
    import time
    ctx = ssl.create_default_context(cafile=ca)
    setup = []
    for _ in range(int(n)):
        t0 = time.perf_counter()
        with socket.create_connection((addr, 443), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname=name):
                setup.append((time.perf_counter() - t0) * 1000)
    rates = []
    for _ in range(5):
        t0 = time.perf_counter()
        with socket.create_connection((addr, 443), timeout=30) as raw:
            with ctx.wrap_socket(raw, server_hostname=name) as s:
                s.sendall(("GET /mib/%s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (mib, name)).encode())
                got = 0
                while True:
                    chunk = s.recv(1 << 20)
                    if not chunk:
                        break
                    got += len(chunk)
        rates.append(got / (1 << 20) / (time.perf_counter() - t0))
    print(json.dumps({"setup_ms": statistics.median(setup), "mibps": statistics.median(rates)}))


def cmd_https(name, addr, ca, host=None):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False  # a fronted Host is sent under another SNI on purpose
    try:
        with socket.create_connection((addr, 443), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=name) as s:
                s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (host or name)).encode())
                data = read_all(s)
        print(data.split(b"\r\n\r\n", 1)[-1].decode().strip())
    except (OSError, ssl.SSLError) as e:
        print("refused: %s" % e)


def cmd_fetch(name, addr, ca, path, header=None, host=None):
    """HTTPS GET path verified as name against ca, with an extra header."""
    ctx = ssl.create_default_context(cafile=ca)
    extra = (header + "\r\n") if header else ""
    try:
        with socket.create_connection((addr, 443), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname=name) as s:
                s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\n%sConnection: keep-alive\r\n\r\n"
                           % (path, host or name, extra)).encode())
                data = b""
                while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < clen(data):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
        if not data:
            print("refused: closed")
        else:
            print(data.split(b"\r\n\r\n", 1)[-1].decode().strip())
    except (OSError, ssl.SSLError) as e:
        print("refused: %s" % e)


def clen(data):
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            return int(v)
    return 1 << 30


def cmd_http(host, addr):
    try:
        with socket.create_connection((addr, 80), timeout=5) as s:
            s.sendall(("GET / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % host).encode())
            data = read_all(s)
        if not data:
            print("refused: closed")
        else:
            print(data.split(b"\r\n\r\n", 1)[-1].decode().strip())
    except OSError as e:
        print("refused: %s" % e)


def cmd_dnstcp(name, server):
    _, q = dns_query(name)
    try:
        with socket.create_connection((server, 53), timeout=5) as s:
            s.sendall(struct.pack(">H", len(q)) + q)
            n = s.recv(2)
            if len(n) < 2:
                print("refused: closed")
                return
            resp = s.recv(65536)
            print("rcode %d" % dns_parse(resp)[0])
    except OSError as e:
        print("refused: %s" % e)


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "serve":
        cmd_serve(args[0])
    elif cmd == "dns":
        try:
            rcode, addrs = udp_ask(args[0], args[1])
            print("rcode %d %s" % (rcode, " ".join(addrs)))
        except OSError as e:
            print("no answer: %s" % e)
    elif cmd == "dnstcp":
        cmd_dnstcp(args[0], args[1])
    elif cmd == "https":
        cmd_https(*args)
    elif cmd == "fetch":
        cmd_fetch(*args)
    elif cmd == "hold":  # hold NAME ADDR CA SECONDS: a TLS connection kept open; how it ended
        import time
        ctx = ssl.create_default_context(cafile=args[2])
        with socket.create_connection((args[1], 443), timeout=float(args[3])) as raw:
            with ctx.wrap_socket(raw, server_hostname=args[0]) as s:
                t0 = time.time()
                try:
                    got = s.recv(1)
                    print("closed after %.1f s%s" % (time.time() - t0, "" if not got else " (data)"))
                except (OSError, ssl.SSLError) as e:
                    print("ended after %.1f s: %s" % (time.time() - t0, e))
    elif cmd == "idle":  # idle ADDR PORT: connect, send nothing; how (and when) it ended
        import time
        with socket.create_connection((args[0], int(args[1])), timeout=30) as s:
            t0 = time.time()
            try:
                got = s.recv(1)
                print("closed after %.1f s%s" % (time.time() - t0, " (data)" if got else ""))
            except OSError as e:
                print("reset after %.1f s: %s" % (time.time() - t0, e.__class__.__name__))
    elif cmd == "bench":
        cmd_bench(*args)
    elif cmd == "download":
        cmd_download(*args)
    elif cmd == "http":
        cmd_http(args[0], args[1])
    elif cmd == "quic":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.sendto(b"\xc0quic-initial", (args[0], 443))
        print("sent")
    elif cmd == "udp":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.settimeout(float(args[3]) if len(args) > 3 else 3)
        s.sendto(args[2].encode() if len(args) > 2 else b"ping", (args[0], int(args[1])))
        try:
            data, peer = s.recvfrom(4096)
            print("%s from %s:%d" % (data.decode(errors="replace"), peer[0], peer[1]))
        except socket.timeout:
            print("no reply")
    elif cmd == "burst":
        parent, server, n = args[0], args[1], int(args[2])
        nx = 0
        for _ in range(n):
            label = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(20))
            try:
                if udp_ask(label + "." + parent, server, timeout=2)[0] == 3:
                    nx += 1
            except OSError:
                pass
        print(nx)
    elif cmd == "control":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(args[0])
        s.sendall(args[1].encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(1 << 20)
            if not chunk:
                break
            data += chunk
        print(data.decode().strip())
    else:
        sys.exit("unknown command %s" % cmd)


if __name__ == "__main__":
    main()
