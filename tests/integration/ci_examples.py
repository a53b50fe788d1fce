#!/usr/bin/env python3
"""Runs the shell of examples/ci/ as their CI systems would, for
tests/integration/test_ci_examples.sh: no YAML library, only the shapes those
two files use.

  ci_examples.py github FILE WORKDIR   the steps' `run:` scripts in order
      (bash -e, in WORKDIR); a step without `if:` runs only while every
      earlier one succeeded, one with `if: always() && steps.ID.outputs.K
      != ''` whenever that output is set; ${{ secrets.X }} is $X,
      ${{ github.run_id }} 4242, ${{ github.run_attempt }} 1, and
      ${{ steps.ID.outputs.K }} what the step wrote to $GITHUB_OUTPUT.
  ci_examples.py gitlab FILE WORKDIR   the job's `script:` items in one bash
      -e session, then its `after_script:` items in another, as GitLab does
      (an item's continuation lines are folded into it with spaces).

Prints one JSON line: {"steps":[{"name","rc"}...]} and exits 0 (the steps' own
output goes to stderr); a step's
failure is in its rc, not in ours."""
import json
import os
import re
import subprocess
import sys
import tempfile


def indent(line):
    return len(line) - len(line.lstrip(" "))


def github_steps(text):
    lines = text.splitlines()
    steps, cur, i = [], None, 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        m = re.match(r"^(\s*)- (\w[\w-]*):\s*(.*)$", line)
        if m and cur is not None or (m and any(l.strip() == "steps:" for l in lines[:i])):
            cur = {"_indent": len(m.group(1)) + 2}
            steps.append(cur)
            line = " " * cur["_indent"] + m.group(2) + ": " + m.group(3)
            s = line.strip()
        if cur is not None and s and not s.startswith("#") and indent(line) == cur["_indent"]:
            k, _, v = s.partition(":")
            v = v.strip()
            if v == "|":
                block, j = [], i + 1
                while j < len(lines) and (not lines[j].strip() or indent(lines[j]) > cur["_indent"]):
                    block.append(lines[j])
                    j += 1
                base = min(indent(l) for l in block if l.strip())
                cur[k] = "\n".join(l[base:] for l in block) + "\n"
                i = j
                continue
            cur[k] = v
        i += 1
    return steps


def substitute(text, outputs):
    def repl(m):
        expr = m.group(1).strip()
        if expr.startswith("secrets."):
            return os.environ.get(expr[len("secrets."):], "")
        if expr == "github.run_id":
            return os.environ.get("GITHUB_RUN_ID", "4242")
        if expr == "github.run_attempt":
            return "1"
        sm = re.match(r"steps\.(\w+)\.outputs\.(\w+)$", expr)
        if sm:
            return outputs.get(sm.group(1), {}).get(sm.group(2), "")
        raise SystemExit(f"ci_examples.py: unknown expression {expr}")
    return re.sub(r"\$\{\{(.*?)\}\}", repl, text)


def run_github(path, work):
    steps = github_steps(open(path).read())
    outputs, results, failed = {}, [], False
    for st in steps:
        if "run" not in st:
            continue
        cond = st.get("if")
        if cond:
            m = re.match(r"always\(\) && steps\.(\w+)\.outputs\.(\w+) != ''$", cond)
            if not m:
                raise SystemExit(f"ci_examples.py: unknown if: {cond}")
            if not outputs.get(m.group(1), {}).get(m.group(2)):
                continue
        elif failed:
            continue
        with tempfile.NamedTemporaryFile("r", delete=False) as out:
            env = dict(os.environ, GITHUB_OUTPUT=out.name)
            rc = subprocess.run(["bash", "-e", "-c", substitute(st["run"], outputs)], cwd=work, env=env, stdout=sys.stderr).returncode
            got = {}
            for l in open(out.name):
                k, _, v = l.rstrip("\n").partition("=")
                got[k] = v
            os.unlink(out.name)
        if "id" in st:
            outputs[st["id"]] = got
        results.append({"name": st.get("name", ""), "rc": rc})
        failed = failed or rc != 0
    return results


def gitlab_lists(text):
    lists, key, items, base = {}, None, None, 0
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = re.match(r"^(\s*)(script|after_script|artifacts|stage|timeout|paths|when):\s*(.*)$", line)
        if m:
            key = m.group(2) if m.group(2) in ("script", "after_script") else None
            if key:
                items = lists.setdefault(key, [])
            continue
        if key is None:
            continue
        if s.startswith("- "):
            items.append(s[2:])
            base = indent(line)
        elif indent(line) > base and items:
            items[-1] += " " + s
    return lists


def run_gitlab(path, work):
    lists = gitlab_lists(open(path).read())
    results = []
    for key in ("script", "after_script"):
        script = "\n".join(lists.get(key, [])) + "\n"
        rc = subprocess.run(["bash", "-e", "-c", script], cwd=work, env=dict(os.environ, CI_JOB_ID=os.environ.get("CI_JOB_ID", "4242")),
                            stdout=sys.stderr).returncode
        results.append({"name": key, "rc": rc})
    return results


def main():
    kind, path, work = sys.argv[1], sys.argv[2], sys.argv[3]
    res = run_github(path, work) if kind == "github" else run_gitlab(path, work)
    print(json.dumps({"steps": res}))


if __name__ == "__main__":
    main()
