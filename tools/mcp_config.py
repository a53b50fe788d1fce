#!/usr/bin/env python3
"""The MCP configuration of Claude Code, Codex CLI, Gemini CLI and Cursor for
sandbox-mcp (docs/client-setup.md), for tools/install-client.sh and the
controller's one-line installer (GET /setup.sh, which serves this file):
  mcp_config.py MODE CLIENT FILE
MODE print: the snippet on stdout; merge: the merged file on stdout (its
first line token=0|1), exit 3 when FILE cannot be merged; check: exit 0 when
FILE holds our entry for BIN; add: as merge, but a "sandbox" entry of the
user's own (another command than BIN) is kept: exit 4, nothing printed;
remove: FILE without our entry (one whose command is BIN) on stdout, exit 4
when it has none. CLIENT: claude, codex, gemini, cursor. Settings come from
the environment: SBX_BIN, SBX_URL, SBX_TOKEN (may be empty). Python's
standard library only."""
import json, os, re, sys

mode, client, path = sys.argv[1], sys.argv[2], sys.argv[3]
BIN, URL, TOKEN = os.environ["SBX_BIN"], os.environ["SBX_URL"], os.environ.get("SBX_TOKEN", "")
PLACEHOLDER = "sbt_REPLACE_WITH_A_MEMBER_TOKEN"
ENV_REF = "${SANDBOX_TOKEN}"

def fail(msg, code=3):
    print("install-client: %s: %s" % (path, msg), file=sys.stderr)
    sys.exit(code)

def is_literal(tok):
    return isinstance(tok, str) and tok.startswith("sbt_") and tok != PLACEHOLDER

def json_entry(kept):
    env = {"SANDBOX_URL": URL}
    if TOKEN:
        env["SANDBOX_TOKEN"] = TOKEN
    elif kept:
        env["SANDBOX_TOKEN"] = kept
    elif client in ("claude", "gemini"):
        env["SANDBOX_TOKEN"] = ENV_REF
    elif mode == "print":
        env["SANDBOX_TOKEN"] = PLACEHOLDER
    e = {"command": BIN, "args": [], "env": env}
    if client == "claude":
        e = {"type": "stdio", **e}
    return e

def toml_str(s):
    return json.dumps(s)  # a JSON string is a valid TOML basic string

def toml_block(kept):
    tok = TOKEN or kept
    lines = ["[mcp_servers.sandbox]", "command = " + toml_str(BIN), "args = []"]
    if not tok:
        lines.append('env_vars = ["SANDBOX_TOKEN"]')
    lines += ["tool_timeout_sec = 660", "", "[mcp_servers.sandbox.env]", "SANDBOX_URL = " + toml_str(URL)]
    if tok:
        lines.append("SANDBOX_TOKEN = " + toml_str(tok))
    return "\n".join(lines) + "\n"

def read_text():
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return ""
    except (OSError, UnicodeDecodeError) as e:
        fail("cannot read it (%s)" % e)

def load_toml(text, what):
    try:
        import tomllib
    except ImportError:
        return None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        fail("%s is not valid TOML (%s)" % (what, e))

# [mcp_servers.sandbox] and its sub-tables, in any of TOML's key spellings.
OUR_TABLE = re.compile(r'^\s*\[\s*(mcp_servers|"mcp_servers")\s*\.\s*(sandbox|"sandbox")\s*(\.[^\]]*)?\]\s*(#.*)?$')
ANY_TABLE = re.compile(r'^\s*\[')

def without_our_tables(text):
    out, skipping = [], False
    for line in text.splitlines(keepends=True):
        if OUR_TABLE.match(line):
            skipping = True
            continue
        if skipping and ANY_TABLE.match(line):
            skipping = False
        if not skipping:
            out.append(line)
    return "".join(out)

TOKEN_LINE = re.compile(r'^\s*SANDBOX_TOKEN\s*=\s*["\'](sbt_[A-Za-z0-9_-]+)["\']', re.M)

def kept_toml_token(text):
    # the token line of our [mcp_servers.sandbox.env] table, if a literal one
    ours, inside = [], False
    for line in text.splitlines():
        if OUR_TABLE.match(line):
            inside = True
        elif ANY_TABLE.match(line):
            inside = False
        elif inside:
            ours.append(line)
    m = TOKEN_LINE.search("\n".join(ours))
    return m.group(1) if m and is_literal(m.group(1)) else ""

if client == "codex":
    if mode == "print":
        sys.stdout.write(toml_block(""))
        sys.exit(0)
    text = read_text()
    doc = load_toml(text, "the file") if text.strip() else {}
    if mode == "check":
        if doc is None:  # no tomllib (Python < 3.11): look for the line
            sys.exit(0 if ("command = " + toml_str(BIN)) in text else 1)
        s = (doc.get("mcp_servers") or {}).get("sandbox") or {}
        sys.exit(0 if s.get("command") == BIN and (s.get("env") or {}).get("SANDBOX_URL") == URL else 1)
    if mode in ("add", "remove"):
        if doc is None:  # no tomllib: our table's command line
            ours = OUR_TABLE.search(text) is None or ("command = " + toml_str(BIN)) in text
            theirs = OUR_TABLE.search(text) is not None and not ours
        else:
            s = (doc.get("mcp_servers") or {}).get("sandbox")
            theirs = isinstance(s, dict) and s.get("command") != BIN
            ours = isinstance(s, dict) and s.get("command") == BIN
        if theirs or (mode == "remove" and not ours):
            sys.exit(4)
        if mode == "remove":
            sys.stdout.write(without_our_tables(text).rstrip("\n") + "\n" if without_our_tables(text).strip() else "")
            sys.exit(0)
    kept = kept_toml_token(text)
    rest = without_our_tables(text)
    rest_doc = load_toml(rest, "the file without [mcp_servers.sandbox]") if rest.strip() else {}
    if rest_doc is not None and "sandbox" in (rest_doc.get("mcp_servers") or {}):
        fail("it defines mcp_servers.sandbox other than as [mcp_servers.sandbox] tables; edit it by hand")
    rest = rest.rstrip("\n")
    merged = (rest + "\n\n" if rest else "") + toml_block(kept)
    final = load_toml(merged, "the merged file")
    if final is not None and final["mcp_servers"]["sandbox"]["command"] != BIN:
        fail("the merged file does not name %s" % BIN)
    print("token=%d" % (1 if (TOKEN or kept) else 0))
    sys.stdout.write(merged)
    sys.exit(0)

# JSON clients: {"mcpServers": {"sandbox": {...}}}
if mode == "print":
    json.dump({"mcpServers": {"sandbox": json_entry("")}}, sys.stdout, indent=2)
    sys.stdout.write("\n")
    sys.exit(0)
text = read_text()
try:
    doc = json.loads(text) if text.strip() else {}
except json.JSONDecodeError as e:
    fail("it is not valid JSON (%s)" % e)
if not isinstance(doc, dict):
    fail("its top level is not a JSON object")
servers = doc.get("mcpServers", {})
if not isinstance(servers, dict):
    fail('its "mcpServers" is not a JSON object')
if mode == "check":
    s = servers.get("sandbox") or {}
    sys.exit(0 if s.get("command") == BIN and (s.get("env") or {}).get("SANDBOX_URL") == URL else 1)
old = servers.get("sandbox")
if mode in ("add", "remove"):
    ours = isinstance(old, dict) and old.get("command") == BIN
    if (old is not None and not ours) or (mode == "remove" and not ours):
        sys.exit(4)
    if mode == "remove":
        del servers["sandbox"]
        if servers:
            doc["mcpServers"] = servers
        else:
            doc.pop("mcpServers", None)
        if doc:
            json.dump(doc, sys.stdout, indent=2, ensure_ascii=False)
            sys.stdout.write("\n")
        sys.exit(0)
kept = ""
if isinstance(old, dict) and isinstance(old.get("env"), dict) and is_literal(old["env"].get("SANDBOX_TOKEN")):
    kept = old["env"]["SANDBOX_TOKEN"]
servers["sandbox"] = json_entry(kept)
doc["mcpServers"] = servers
print("token=%d" % (1 if (TOKEN or kept) else 0))
json.dump(doc, sys.stdout, indent=2, ensure_ascii=False)
sys.stdout.write("\n")
