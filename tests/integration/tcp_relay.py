#!/usr/bin/env python3
"""A TCP relay on loopback: every connection to 127.0.0.1:LISTEN_PORT is
joined to 127.0.0.1:UPSTREAM_PORT, bytes copied both ways. A test puts it
between a worker and its controller and stops it (SIGSTOP) to make a
network partition: connections open but nothing passes, as when packets
are dropped; SIGCONT heals it. Prints "ready" once listening.

Usage: tcp_relay.py LISTEN_PORT UPSTREAM_PORT
Standard library only."""
import socket
import sys
import threading

listen_port, upstream_port = int(sys.argv[1]), int(sys.argv[2])


def pump(src, dst):
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    for s in (src, dst):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def serve(client):
    try:
        up = socket.create_connection(("127.0.0.1", upstream_port), timeout=10)
        up.settimeout(None)
    except OSError:
        client.close()
        return
    threading.Thread(target=pump, args=(client, up), daemon=True).start()
    threading.Thread(target=pump, args=(up, client), daemon=True).start()


srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", listen_port))
srv.listen(64)
print("ready", flush=True)
while True:
    conn, _ = srv.accept()
    serve(conn)
