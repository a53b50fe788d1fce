#!/usr/bin/env python3
"""Runs the shell blocks of a README section as a newcomer would type them,
in one bash session, and checks each command's exit status and output.

usage: readme_walkthrough.py README SECTION WORKDIR [FROM=TO ...]

In the section (from the heading "## SECTION" to the next "## " heading),
every ```sh block is run, in order:
- a block with lines starting with "$ " is a transcript: each "$ " line
  (with its "\\"-continued lines) is a command, and the lines after it, up
  to the next "$ " line, are what it prints (stdout and stderr together, as
  a terminal shows them);
- any other block is a list of commands whose output is not shown.
Every command must exit 0 (a README that shows a failing command ends it
with `; echo "exit $?"`, which shows the status instead). Output is compared
after masking what differs from run to run: ids (sbx_…, op_…), secrets
(sbt_…, sbr_…), route names (/r/…/), times (RFC 3339), event ids at the
start of an events line and `worker=NAME`. In expected output, a line "…"
stands for any number of lines. FROM=TO pairs are replaced in commands and
in expected output alike (the test's own ports for the README's).
Exits 0 when every command matched, 1 otherwise (each difference printed).
"""
import difflib
import os
import pty
import re
import select
import subprocess
import sys
import termios
import time

MARK = "@@readme-step"


def section_lines(text, title):
    lines = text.split("\n")
    out, inside = [], False
    for line in lines:
        if line.startswith("## "):
            if inside:
                break
            inside = line[3:].strip() == title
            continue
        if inside:
            out.append(line)
    if not inside and not out:
        sys.exit("readme_walkthrough: no section '## %s' in the README" % title)
    return out


def blocks(lines):
    """The ```sh blocks of the section, each a list of lines."""
    res, cur = [], None
    for line in lines:
        s = line.strip()
        if cur is None:
            if s == "```sh":
                cur = []
        elif s == "```":
            res.append(cur)
            cur = None
        else:
            cur.append(line)
    if cur is not None:
        sys.exit("readme_walkthrough: an unclosed ```sh block")
    return res


def steps(block):
    """[(command, expected lines or None)] of one block."""
    transcript = any(l.startswith("$ ") for l in block)
    res = []
    i = 0
    while i < len(block):
        line = block[i]
        if transcript and not line.startswith("$ "):
            if line.strip():
                sys.exit("readme_walkthrough: output before any command in a transcript block: %r" % line)
            i += 1
            continue
        cmd = [line[2:] if transcript else line]
        while cmd[-1].rstrip().endswith("\\") and i + 1 < len(block):
            i += 1
            cmd.append(block[i])
        i += 1
        expected = None
        if transcript:
            expected = []
            while i < len(block) and not block[i].startswith("$ "):
                expected.append(block[i])
                i += 1
            while expected and not expected[-1].strip():
                expected.pop()
        command = "\n".join(cmd)
        if command.strip() and not command.strip().startswith("#"):
            res.append((command, expected))
    return res


MASKS = [
    (re.compile(r"\b(sbt|sbr)_[A-Za-z0-9_-]+…?"), r"\1_…"),
    (re.compile(r"\b(sbx|op|tok|tnt|wrk|rt)_[A-Za-z0-9]+…?"), r"\1_…"),
    (re.compile(r"/r/[A-Za-z0-9]+…?/"), "/r/…/"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r"^\d+ <time>"), "N <time>"),
    (re.compile(r"\bworker=\S+"), "worker=…"),
]


def mask(line):
    line = line.rstrip()
    for rx, rep in MASKS:
        line = rx.sub(rep, line)
    return line


def matches(expected, actual):
    """expected may hold "…" lines (any number of lines)."""
    if not expected:
        return not actual
    if expected[0] == "…":
        return any(matches(expected[1:], actual[k:]) for k in range(len(actual) + 1))
    return bool(actual) and expected[0] == actual[0] and matches(expected[1:], actual[1:])


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    readme, title, workdir = sys.argv[1:4]
    subs = [a.split("=", 1) for a in sys.argv[4:]]
    text = open(readme, encoding="utf-8").read()
    for a, b in subs:
        text = text.replace(a, b)
    all_steps = [s for b in blocks(section_lines(text, title)) for s in steps(b)]
    if not all_steps:
        sys.exit("readme_walkthrough: no commands in section '%s'" % title)
    script = ["exec 2>&1", "cd %s || exit 99" % sh_quote(workdir)]
    for n, (cmd, _) in enumerate(all_steps):
        script.append("{\n%s\n}\nprintf '\\n%s %d rc=%%d@@\\n' $?" % (cmd, MARK, n))
    # a file, not stdin: a command that reads its stdin must not eat the
    # rest of the walkthrough
    path = os.path.join(workdir, ".readme-walkthrough.sh")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(script) + "\n")
    out = run_on_terminal(["bash", "--norc", "--noprofile", path], 900)
    os.unlink(path)
    chunks = {}
    pos = 0
    for m in re.finditer(r"\n%s (\d+) rc=(\d+)@@\n" % MARK, out):
        chunks[int(m.group(1))] = (out[pos:m.start()], int(m.group(2)))
        pos = m.end()
    failed = 0
    for n, (cmd, expected) in enumerate(all_steps):
        shown = cmd.replace("\n", "\n    ")
        if n not in chunks:
            print("FAIL step %d never finished (the session ended): $ %s" % (n + 1, shown))
            print("  the rest of the output: %r" % out[pos:][-2000:])
            failed += 1
            break
        got, rc = chunks[n]
        got_lines = [mask(l) for l in got.split("\n")] if got else []
        while got_lines and not got_lines[-1]:
            got_lines.pop()
        ok = True
        if rc != 0:
            print("FAIL step %d exited %d: $ %s" % (n + 1, rc, shown))
            ok = False
        if expected is not None:
            want = [mask(l) for l in expected]
            if not matches(want, got_lines):
                print("FAIL step %d printed something else than the README shows: $ %s" % (n + 1, shown))
                for d in difflib.unified_diff(want, got_lines, "README", "actual", lineterm="", n=2):
                    print("    " + d)
                ok = False
        if ok:
            print("ok   step %d: $ %s" % (n + 1, shown.split("\n")[0][:110]))
        else:
            failed += 1
            print("  its output: %r" % got[-1500:])
    print("%d of %d README commands ran as shown" % (len(all_steps) - failed, len(all_steps)))
    return 1 if failed else 0


def run_on_terminal(argv, timeout):
    """Runs argv with stdout and stderr on a pseudo-terminal, as in the
    shell a reader types into (programs buffer and interleave their two
    streams as they do there), stdin from /dev/null; returns what it showed."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.ONLCR  # no CR before each LF
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    data = bytearray()
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.killpg(proc.pid, 9)
            data += b"\n[readme_walkthrough: killed after %d s]\n" % timeout
            break
        r, _, _ = select.select([master], [], [], min(left, 1.0))
        if r:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every writer has closed the terminal
                break
            if not chunk:
                break
            data += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    proc.wait()
    return data.decode("utf-8", "replace")


def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


if __name__ == "__main__":
    sys.exit(main())
