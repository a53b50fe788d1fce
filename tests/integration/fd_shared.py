#!/usr/bin/env python3
"""Descriptors a daemon's children share with it (docs/security.md, "Descriptors").

Usage: fd_shared.py PID [EXTRA_PID...]

Lists every descendant of PID (by parent pid, through /proc) and of each
EXTRA_PID (a process started through PID but reparented away, such as the
embedded PostgreSQL's postmaster, and its own descendants), and every socket
each holds. Prints one line per descendant ("PID COMM: N fds, sockets ...")
and, for each socket a descendant holds that PID holds too, a line starting
"SHARED". Exits 1 when there is one, 2 when PID is not running, else 0.
"""
import os
import sys


def children():
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d, encoding="utf-8", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces or ")"
        rest = stat[stat.rfind(")") + 2:].split()
        kids.setdefault(int(rest[1]), []).append(int(d))
    return kids


def descendants(root, kids):
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        for c in kids.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def sockets(pid):
    found = {}
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        return None
    for fd in fds:
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if target.startswith("socket:"):
            found[target] = int(fd)
    return found


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid, encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = int(sys.argv[1])
    mine = sockets(root)
    if mine is None:
        print("process %d is not running" % root, file=sys.stderr)
        return 2
    kids = children()
    procs = descendants(root, kids)
    for extra in sys.argv[2:]:
        e = int(extra)
        procs += [e] + descendants(e, kids)
    shared = 0
    for p in sorted(set(procs)):
        s = sockets(p)
        if s is None:
            continue
        print("%d %s: %d sockets" % (p, comm(p), len(s)))
        for target, fd in sorted(s.items()):
            if target in mine:
                shared += 1
                print("SHARED %d %s fd %d is %s, which process %d holds as fd %d"
                      % (p, comm(p), fd, target, root, mine[target]))
    return 1 if shared else 0


if __name__ == "__main__":
    sys.exit(main())
