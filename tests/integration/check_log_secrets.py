#!/usr/bin/env python3
"""Greps the daemon logs of a whole integration run for every secret the run
created: API tokens (sbt_<id>_<secret>) and route tokens (sbr_<secret>).

Secrets are harvested from everything the run wrote except daemon logs (test
traces, which record each command with its tokens, API answers, client
transcripts) and from $ITEST_TMP/secrets.txt (itest_token). Each one's
43-character secret part must appear in no daemon log; nothing in a daemon
log may even look like a token. Exits 0 when clean, 1 naming each hit, 2
when nothing was harvested (the check would prove nothing).

Usage: check_log_secrets.py ITEST_TMP
"""
import os
import re
import sys

TOKEN = re.compile(rb"sbt_[a-z2-7]{26}_([A-Za-z0-9_-]{43})|sbr_([A-Za-z0-9_-]{43})")
# Transcripts of clients, not daemons: they hold tokens by design.
CLIENT_LOGS = {"mcp-client.log", "mcp-npm.log", "driver.log"}


def daemon_log(path):
    name = os.path.basename(path)
    return name.endswith(".log") and name not in CLIENT_LOGS


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: check_log_secrets.py ITEST_TMP", file=sys.stderr)
        return 2
    root = sys.argv[1]
    logs, others = [], []
    for d, dirs, files in os.walk(root):
        # PostgreSQL's data directories: the server log is kept, the rest is data.
        dirs[:] = [x for x in dirs if x not in ("base", "global", "pg_wal", "pg_xact", "rootfs", "busybox-rootfs")]
        for f in files:
            p = os.path.join(d, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            (logs if daemon_log(p) else others).append(p)
    secrets = set()
    for p in others:
        try:
            with open(p, "rb") as fh:
                data = fh.read(64 << 20)
        except OSError:
            continue
        for m in TOKEN.finditer(data):
            secrets.add(m.group(1) or m.group(2))
    if not secrets:
        print("no tokens found in the run's traces: nothing to check against", file=sys.stderr)
        return 2
    hits = 0
    size = 0
    for p in logs:
        with open(p, "rb") as fh:
            data = fh.read()
        size += len(data)
        where = {}
        for s in secrets:
            i = data.find(s)
            while i >= 0:
                where.setdefault(data.count(b"\n", 0, i) + 1, "a token's secret")
                i = data.find(s, i + 1)
        for m in TOKEN.finditer(data):
            where.setdefault(data.count(b"\n", 0, m.start()) + 1, "something shaped like a token")
        for lineno in sorted(where):
            hits += 1
            print("%s:%d: %s" % (os.path.relpath(p, root), lineno, where[lineno]), file=sys.stderr)
    print("checked %d daemon logs (%.1f MB) for %d secrets: %s" %
          (len(logs), size / 1e6, len(secrets), "clean" if hits == 0 else "%d lines leak" % hits))
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
