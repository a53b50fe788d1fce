#!/usr/bin/env python3
"""Drives `sandbox shell SANDBOX_ID` in a pseudo-terminal (pty.fork; no
pexpect) as a person would, for tests/integration/test_shell.sh:
  echo $((6*7))          -> 42 on the terminal
  resize to 33x111       -> `stty size` says "33 111"
  sleep 100, then Ctrl-C -> the prompt is back within a few seconds
  exit 3                 -> the CLI exits 3
Prints "ok" and exits 0 when all held; else says what did not and exits 1."""
import fcntl
import os
import pty
import re
import select
import struct
import sys
import termios
import time

cli, sbx = sys.argv[1], sys.argv[2]
out = b""


def read_until(fd, pattern, timeout):
    """Reads the terminal until pattern (bytes regex) is in what came since
    the last match; returns True, or False after timeout seconds."""
    global out
    deadline = time.time() + timeout
    while time.time() < deadline:
        if re.search(pattern, out):
            out = out[re.search(pattern, out).end():]
            return True
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return bool(re.search(pattern, out))
            if not chunk:
                break
            out += chunk
    return bool(re.search(pattern, out))


def fail(msg):
    print("FAIL: %s; terminal so far: %r" % (msg, out[-600:]))
    sys.exit(1)


pid, fd = pty.fork()
if pid == 0:
    # The child: its stdin/stdout/stderr are the terminal's slave side.
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    os.execv(cli, [cli, "shell", sbx])

def send(s):
    os.write(fd, s.encode())

# The prompt (busybox ash: "/ # " as root); then a command's output.
if not read_until(fd, rb"[#$] ", 30):
    fail("no prompt within 30 s")
send("echo $((6*7))\r")
if not read_until(fd, rb"\r\n42\r\n", 10):
    fail("echo $((6*7)) did not print 42")
# The window size: set on the master, as a terminal emulator does (SIGWINCH).
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
time.sleep(1.0)
send("stty size\r")
if not read_until(fd, rb"\r\n33 111\r\n", 10):
    fail("stty size after the resize is not 33 111")
# Ctrl-C interrupts a long command: the prompt comes back soon.
send("sleep 100\r")
time.sleep(1.5)
t0 = time.time()
send("\x03")
send("echo back$((1+1))\r")
if not read_until(fd, rb"back2", 8):
    fail("Ctrl-C did not interrupt sleep 100 within 8 s")
took = time.time() - t0
send("exit 3\r")
status = None
deadline = time.time() + 20
while time.time() < deadline:
    r, _, _ = select.select([fd], [], [], 0.2)
    if r:
        try:
            chunk = os.read(fd, 65536)
            out += chunk
        except OSError:
            pass
    wp, st = os.waitpid(pid, os.WNOHANG)
    if wp == pid:
        status = st
        break
if status is None:
    os.kill(pid, 9)
    fail("the CLI did not exit within 20 s of exit 3")
if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 3:
    fail("the CLI ended with status %r, not exit 3" % status)
print("ok interrupted in %.1f s" % took)
