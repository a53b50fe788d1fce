#!/usr/bin/env bash
# tools/install-client.sh in a temporary HOME and prefix (never the real ones):
# --dry-run writes nothing; a client-only build (-Dserver=false) installs
# sandbox, sandbox-mcp and the agent skill (identical to examples'); the MCP
# configuration merged into existing Claude Code, Codex, Gemini CLI and Cursor
# files is valid JSON/TOML, names the installed sandbox-mcp (which answers
# tools/list when started as the file says) and keeps every other key; a
# --token-file token lands only in mode-600 files and is never printed;
# re-running changes nothing; bad input exits 2, an unparsable config 3;
# docs/mcp.md's member-token steps work against the shared controller.
# Needs no network (loopback only).
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

src=$(cd "$(dirname "$0")/../.." && pwd)
installer=$src/tools/install-client.sh
[ -x "$installer" ] || fail "$installer is missing or not executable"

work=$(mktemp -d "$ITEST_TMP/install-client.XXXXXX")
export HOME=$work/home
unset CODEX_HOME SUDO_USER XDG_CONFIG_HOME
mkdir -p "$HOME"
prefix=$work/prefix
build=$work/build-client
url=http://127.0.0.1:9
mcp=$prefix/bin/sandbox-mcp
skill_src=$src/examples/skills/sandbox-platform/SKILL.md
skills=("$prefix/share/sandbox/skills/sandbox-platform/SKILL.md"
  "$HOME/.claude/skills/sandbox-platform/SKILL.md" "$HOME/.agents/skills/sandbox-platform/SKILL.md")
base=(--user --prefix "$prefix" --build-dir "$build" --no-packages --url "$url")

# fingerprint DIR...: one line per file (path, mode, checksum), sorted.
fingerprint() {
  find "$@" -type f -printf '%p %m ' -exec sha256sum {} \; 2>/dev/null | awk '{print $1, $2, $3}' | sort
}

# ---- --help and usage errors
assert_exit 0 "$installer" --help
assert_contains "$ITEST_OUT" "--write-config CLIENT" "--help"
assert_contains "$ITEST_OUT" "Exit codes:" "--help"
assert_exit 2 "$installer" --bogus
assert_contains "$ITEST_ERR" "unknown argument '--bogus'" "unknown flag"
assert_exit 2 "$installer" "${base[@]}" --write-config vim
assert_contains "$ITEST_ERR" "'vim' is not one of claude, codex, gemini, cursor, all" "bad client"
assert_exit 2 "$installer" "${base[@]}" --url ftp://example.com
assert_exit 2 "$installer" "${base[@]}" --user --system
assert_exit 2 "$installer" "${base[@]}" --token-file "$work/nonexistent"

# ---- pre-existing client configurations, with keys of their own
mkdir -p "$HOME/.codex" "$HOME/.gemini" "$HOME/.cursor"
cat >"$HOME/.claude.json" <<'EOF'
{"numStartups": 7, "projects": {"/src/app": {"mcpServers": {}}}, "mcpServers": {"github": {"command": "gh-mcp"}}}
EOF
cat >"$HOME/.codex/config.toml" <<'EOF'
model = "o4-mini"

[mcp_servers.other]
command = "other-mcp"

[mcp_servers.sandbox]
command = "/old/sandbox-mcp"

[mcp_servers.sandbox.env]
SANDBOX_URL = "http://old:8080"

[profiles.fast]
model = "o3"
EOF
printf '{"theme": "GitHub", "mcpServers": {"fs": {"command": "fs-mcp", "args": ["/src"]}}}\n' \
  >"$HOME/.gemini/settings.json"
printf '{"mcpServers": {"db": {"url": "http://127.0.0.1:7000/mcp"}}}\n' >"$HOME/.cursor/mcp.json"
chmod 644 "$HOME/.claude.json" "$HOME/.codex/config.toml" "$HOME/.gemini/settings.json" "$HOME/.cursor/mcp.json"

# ---- --dry-run: says what it would do, writes nothing
before=$(fingerprint "$HOME")
assert_exit 0 "$installer" "${base[@]}" --write-config all --dry-run
assert_contains "$ITEST_ERR" "would run meson setup $build" "dry-run"
assert_contains "$ITEST_ERR" "would install $mcp" "dry-run"
assert_contains "$ITEST_ERR" "would write $HOME/.codex/config.toml" "dry-run"
assert_eq "$before" "$(fingerprint "$HOME")" "HOME after --dry-run"
[ ! -e "$prefix" ] || fail "--dry-run created $prefix"
[ ! -e "$build" ] || fail "--dry-run created $build"

# ---- install: a client-only build, the binaries, the skill, the configs
assert_exit 0 "$installer" "${base[@]}" --write-config all
[ -x "$build/tools/sandbox" ] || fail "no $build/tools/sandbox"
[ ! -e "$build/tools/sandboxd" ] || fail "the client build (-Dserver=false) also built sandboxd"
assert_exit 0 "$prefix/bin/sandbox" --version
assert_match "$ITEST_OUT" '^sandbox [0-9]' "sandbox --version"
assert_exit 0 "$prefix/bin/sandbox" --help
assert_contains "$ITEST_OUT" "usage: sandbox" "installed sandbox --help"
assert_exit 0 "$mcp" --version
assert_match "$ITEST_OUT" '^sandbox-mcp [0-9]' "sandbox-mcp --version"
for f in "${skills[@]}"; do
  [ -f "$f" ] || fail "no skill at $f"
  cmp -s "$skill_src" "$f" || fail "$f differs from $skill_src"
done
ls "$HOME"/.codex/config.toml.bak.* "$HOME"/.claude.json.bak.* "$HOME"/.gemini/settings.json.bak.* \
  "$HOME"/.cursor/mcp.json.bak.* >/dev/null || fail "a pre-existing config was not backed up"

# Every file is valid, names the installed sandbox-mcp and the URL, keeps the
# other keys, and holds no token (none was given).
python3 - "$HOME" "$mcp" "$url" <<'EOF' || fail "the written client configurations are not as expected (above)"
import json, sys, tomllib
home, mcp, url = sys.argv[1:]
def check(cond, what):
    if not cond:
        print("FAIL: " + what, file=sys.stderr)
        sys.exit(1)
claude = json.load(open(home + "/.claude.json"))
s = claude["mcpServers"]["sandbox"]
check(s == {"type": "stdio", "command": mcp, "args": [], "env": {"SANDBOX_URL": url, "SANDBOX_TOKEN": "${SANDBOX_TOKEN}"}}, "claude entry %r" % s)
check(claude["numStartups"] == 7 and "/src/app" in claude["projects"] and claude["mcpServers"]["github"] == {"command": "gh-mcp"}, "claude's other keys")
codex = tomllib.load(open(home + "/.codex/config.toml", "rb"))
s = codex["mcp_servers"]["sandbox"]
check(s["command"] == mcp and s["env"] == {"SANDBOX_URL": url} and s["env_vars"] == ["SANDBOX_TOKEN"] and s["tool_timeout_sec"] == 660, "codex entry %r" % s)
check(codex["model"] == "o4-mini" and codex["mcp_servers"]["other"] == {"command": "other-mcp"} and codex["profiles"]["fast"] == {"model": "o3"}, "codex's other keys %r" % codex)
gemini = json.load(open(home + "/.gemini/settings.json"))
s = gemini["mcpServers"]["sandbox"]
check(s["command"] == mcp and s["env"]["SANDBOX_URL"] == url and s["env"]["SANDBOX_TOKEN"] == "${SANDBOX_TOKEN}", "gemini entry %r" % s)
check(gemini["theme"] == "GitHub" and gemini["mcpServers"]["fs"]["args"] == ["/src"], "gemini's other keys")
cursor = json.load(open(home + "/.cursor/mcp.json"))
s = cursor["mcpServers"]["sandbox"]
check(s["command"] == mcp and s["env"] == {"SANDBOX_URL": url}, "cursor entry %r" % s)
check(cursor["mcpServers"]["db"] == {"url": "http://127.0.0.1:7000/mcp"}, "cursor's other keys")
EOF

# The server the Cursor file names starts and answers as an MCP server.
reply=$(python3 - "$HOME/.cursor/mcp.json" <<'EOF'
import json, os, subprocess, sys
s = json.load(open(sys.argv[1]))["mcpServers"]["sandbox"]
env = dict(os.environ, **s["env"])
env.pop("SANDBOX_TOKEN", None)
msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
         "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}]
p = subprocess.run([s["command"]] + s["args"], input="".join(json.dumps(m) + "\n" for m in msgs),
                   capture_output=True, text=True, env=env, timeout=30)
tools = [json.loads(l) for l in p.stdout.splitlines() if '"id":2' in l.replace(" ", "")][0]["result"]["tools"]
print(" ".join(t["name"] for t in tools))
EOF
) || fail "the configured sandbox-mcp did not answer tools/list"
assert_contains "$reply" "sandbox_create" "tools of the configured sandbox-mcp"

# ---- re-running changes nothing
before=$(fingerprint "$HOME" "$prefix")
assert_exit 0 "$installer" "${base[@]}" --write-config all
assert_eq "$before" "$(fingerprint "$HOME" "$prefix")" "HOME and prefix after a second run"
assert_contains "$ITEST_ERR" "unchanged: $mcp" "second run"
assert_contains "$ITEST_ERR" "unchanged: $HOME/.claude.json" "second run"
assert_not_contains "$ITEST_ERR" "wrote " "second run"

# ---- --token-file: the token goes into the file (mode 600), never to the terminal
token=sbt_itestinstall_$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')
printf '%s\n' "$token" >"$work/token"
chmod 600 "$work/token"
assert_exit 0 "$installer" "${base[@]}" --token-file "$work/token" --write-config cursor --write-config codex
assert_not_contains "$ITEST_OUT$ITEST_ERR" "$token" "installer output with --token-file"
assert_eq 600 "$(stat -c %a "$HOME/.cursor/mcp.json")" "mode of the cursor config holding the token"
assert_eq 600 "$(stat -c %a "$HOME/.codex/config.toml")" "mode of the codex config holding the token"
assert_eq "$token" "$(itest_json "$(cat "$HOME/.cursor/mcp.json")" mcpServers.sandbox.env.SANDBOX_TOKEN)" "cursor token"
python3 -c 'import sys, tomllib; s = tomllib.load(open(sys.argv[1], "rb"))["mcp_servers"]["sandbox"]; sys.exit(0 if s["env"]["SANDBOX_TOKEN"] == sys.argv[2] and "env_vars" not in s and s["command"] == sys.argv[3] else 1)' \
  "$HOME/.codex/config.toml" "$token" "$mcp" || fail "codex config does not hold the token as expected"
assert_exit 0 "$installer" "${base[@]}" --token-file "$work/token"
assert_not_contains "$ITEST_OUT$ITEST_ERR" "$token" "printed configuration with --token-file"
assert_contains "$ITEST_OUT" "sbt_REPLACE_WITH_A_MEMBER_TOKEN" "printed cursor configuration"
assert_contains "$ITEST_OUT" "command = \"$mcp\"" "printed codex configuration"
# without --token-file, a token already in the entry is kept (and so is mode 600)
assert_exit 0 "$installer" "${base[@]}" --write-config cursor
assert_eq "$token" "$(itest_json "$(cat "$HOME/.cursor/mcp.json")" mcpServers.sandbox.env.SANDBOX_TOKEN)" "cursor token kept"
assert_eq 600 "$(stat -c %a "$HOME/.cursor/mcp.json")" "mode kept"

# ---- --config-path, and a file that is not JSON is left alone (exit 3)
assert_exit 0 "$installer" "${base[@]}" --write-config claude --config-path "$work/project/.mcp.json"
assert_eq "$mcp" "$(itest_json "$(cat "$work/project/.mcp.json")" mcpServers.sandbox.command)" "project .mcp.json"
printf '{"mcpServers": {' >"$work/broken.json"
assert_exit 3 "$installer" "${base[@]}" --write-config gemini --config-path "$work/broken.json"
assert_contains "$ITEST_ERR" "not valid JSON" "broken config"
assert_eq '{"mcpServers": {' "$(cat "$work/broken.json")" "the broken file after exit 3"

# ---- --system with a prefix and a skills folder of the test's own
assert_exit 0 "$installer" --system --prefix "$work/sys" --skills-dir "$work/sys-skills" --build-dir "$build" \
  --no-packages --url "$url"
assert_contains "$ITEST_OUT" "\"command\": \"$work/sys/bin/sandbox-mcp\"" "printed configuration of the system install"
assert_exit 0 "$work/sys/bin/sandbox" --version
cmp -s "$skill_src" "$work/sys-skills/sandbox-platform/SKILL.md" || fail "system skill differs from examples'"
cmp -s "$skill_src" "$work/sys/share/sandbox/skills/sandbox-platform/SKILL.md" || fail "reference skill differs"

# ---- docs/mcp.md's member token steps, end to end against the shared controller:
# tenant, member token into a file, --token-file, the configured server lists
tenant=$(itest_tenant itest-install)
assert_exit 0 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$prefix/bin/sandbox" tenants create "$tenant"
(umask 077; SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$prefix/bin/sandbox" tokens create --tenant "$tenant" --role member \
  --name agent --ttl 3600 >"$work/agent.token") || fail "sandbox tokens create failed"
member=$(cat "$work/agent.token")
assert_match "$member" '^sbt_' "the member token"
assert_exit 0 "$installer" "${base[@]}" --url "$SANDBOX_URL" --token-file "$work/agent.token" \
  --write-config claude --config-path "$work/e2e/.mcp.json"
assert_not_contains "$ITEST_OUT$ITEST_ERR" "$member" "installer output"
assert_eq 600 "$(stat -c %a "$work/e2e/.mcp.json")" "mode of the config with the member token"
listed=$(python3 - "$work/e2e/.mcp.json" <<'EOF'
import json, os, subprocess, sys
s = json.load(open(sys.argv[1]))["mcpServers"]["sandbox"]
env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_")}
env.update(s["env"])
msgs = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25",
         "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "sandbox_list", "arguments": {}}}]
p = subprocess.run([s["command"]] + s["args"], input="".join(json.dumps(m) + "\n" for m in msgs),
                   capture_output=True, text=True, env=env, timeout=60)
res = [json.loads(l) for l in p.stdout.splitlines() if json.loads(l).get("id") == 2][0]["result"]
print(json.dumps({"isError": res.get("isError", False), "sandboxes": (res.get("structuredContent") or {}).get("sandboxes")}))
EOF
) || fail "the configured sandbox-mcp did not answer sandbox_list"
assert_eq '{"isError": false, "sandboxes": []}' "$listed" "sandbox_list through the configured server, as the member"

echo "install-client installs the clients and merges their MCP configuration as its --help says"
