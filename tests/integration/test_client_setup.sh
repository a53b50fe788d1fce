#!/usr/bin/env bash
# The one-line client installer (docs/client-setup.md): `curl -fsSL
# URL/setup.sh | sh` run by a fresh unprivileged user against a real
# `sandboxd all`, over plain HTTP and then over TLS with a private CA
# (`--ca-file`). The installed `sandbox` creates, execs and deletes with the
# URL the installer wrote (never a token); the installed `sandbox-mcp` lists
# its tools through the official MCP SDK. A served file that does not match
# its sum stops the installer with a clear message and installs nothing; a
# machine of another architecture is told it is unsupported; the user's own
# "sandbox" MCP entry and other settings are kept; running it again upgrades
# in place; `--uninstall` leaves the home as it was (names, modes, bytes).
# Traffic goes only to the test's own controller and file server on loopback.
# itest-standalone
# itest-cost: 90
# itest-timeout: 420
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (it makes a user of its own)"
mcp_dir="$(cd "$(dirname "$0")/../mcp" && pwd)"
itest_npm_install "$mcp_dir" "the MCP SDK" || fail "$ITEST_NPM_ERROR"

# ---- a fresh user of the test's own, removed on exit with its home
user="sbxsetup$$"
useradd -m -s /bin/sh "$user" || fail "useradd $user failed"
home=$(getent passwd "$user" | cut -d: -f6)
# what the user reads (ITEST_TMP is root's alone)
pub=$(mktemp -d /tmp/sbx-setup-pub.XXXXXX)
chmod 755 "$pub"
drop_user() {
  pkill -KILL -u "$user" 2>/dev/null || true
  userdel -r "$user" >/dev/null 2>&1 || true
  rm -rf "$pub"
}
itest_on_exit drop_user
# as_user CMD: CMD in the user's login shell (its own HOME and PATH)
as_user() { su -s /bin/sh - "$user" -c "$1"; }
# what the home holds: every name with its mode and type, every file's bytes
home_state() {
  (cd "$home" && find . -printf '%p %M\n' | sort && find . -type f -exec sha256sum {} + | sort -k2)
}

dir="$ITEST_TMP/setup-all-$$"
port=$(itest_free_port)
log="$ITEST_TMP/setup-all-$$.log"
itest_watch_log "$log"
pki="$pub/pki"
itest_make_pki "$pki"
chmod 755 "$pki"
chmod 644 "$pki/ca.pem"
# start_all URL [FLAGS...]
start_all() {
  local url=$1
  shift
  env -u SANDBOX_DATABASE_URL -u DATABASE_URL SANDBOX_WORKER_RUNTIME=docker \
    "$SANDBOXD" all --data-dir "$dir" --listen "127.0.0.1:$port" --controller-url "$url" "$@" >>"$log" 2>&1 </dev/null &
  all_pid=$!
  itest_track_pid "$all_pid"
  itest_wait_healthz "$url" "$all_pid" "sandboxd all" "$log" || fail "sandboxd all did not come up"
  itest_wait_until 30 "$dir/admin.token" test -s "$dir/admin.token"
}

url="http://127.0.0.1:$port"
export SANDBOX_URL=$url
start_all "$url"
token=$(tr -d '[:space:]' <"$dir/admin.token")
printf '%s\n' "$token" >>"$ITEST_TMP/secrets.txt"
export SANDBOX_TOKEN=$token

# ---- what is served: the script with this controller's URL and the sums
# of the files, which are this build's
setup="$pub/setup.sh"
curl -fsS "$url/setup.sh" -o "$setup" || fail "GET /setup.sh"
chmod 644 "$setup"
assert_contains "$(cat "$setup")" "SBX_URL='$url'" "the controller's URL in the script"
for f in sandbox sandbox-mcp; do
  assert_contains "$(cat "$setup")" "$(sha256sum "$ITEST_BUILD/tools/$f" | cut -d' ' -f1) 755 $f" "$f's sum in the script"
  assert_eq "$(sha256sum <"$ITEST_BUILD/tools/$f" | cut -d' ' -f1)" "$(curl -fsS "$url/client/$f" | sha256sum | cut -d' ' -f1)" \
    "GET /client/$f is this build's $f"
done
itest_http GET /client/nosuch ""
assert_http 404 not_found "a file the controller does not serve"
itest_http POST /setup.sh ""
assert_http 405 method_not_allowed "the installer is read with GET"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Host: a'b" "$url/setup.sh")
assert_eq 400 "$code" "a Host that could break out of the script's quotes"

# the user's own settings, which the installer must keep
as_user 'mkdir -p .cursor .gemini && printf "%s\n" "{\"mcpServers\": {\"sandbox\": {\"command\": \"/opt/mine/mcp\"}}}" >.cursor/mcp.json &&
  printf "%s\n" "{\"theme\": \"Dracula\", \"mcpServers\": {\"other\": {\"command\": \"other-mcp\"}}}" >.gemini/settings.json &&
  chmod 644 .gemini/settings.json'
before=$(home_state)

# run_edited NAME SED: the served installer with SED applied, run by the
# user as $pub/NAME: its output in out, its exit code in rc
run_edited() {
  sed "$2" "$setup" >"$pub/$1"
  chmod 644 "$pub/$1"
  rc=0
  out=$(as_user "sh $pub/$1" 2>&1) || rc=$?
}

# ---- another architecture: unsupported, and it says where to go instead
run_edited setup-other.sh "s/^SBX_ARCH='.*'/SBX_ARCH='riscv64'/"
assert_eq 3 "$rc" "exit code of the installer on another architecture"
assert_contains "$out" "is not supported" "the installer on another architecture"
assert_contains "$out" "tools/install-client.sh" "the installer points to the build from source"

# ---- a tampered file: the installer stops, names it, installs nothing
files="$ITEST_TMP/setup-files-$$"
mkdir -p "$files/client"
for f in sandbox sandbox-mcp SKILL.md mcp_config.py; do curl -fsS "$url/client/$f" -o "$files/client/$f"; done
printf 'x' >>"$files/client/sandbox-mcp"
fport=$(itest_free_port)
(cd "$files" && exec python3 -m http.server --bind 127.0.0.1 "$fport") >"$ITEST_TMP/setup-files-$$.log" 2>&1 &
itest_track_pid "$!"
itest_wait_until 10 "the file server" curl -fsS -o /dev/null "http://127.0.0.1:$fport/client/SKILL.md"
run_edited setup-tampered.sh "s#^SBX_URL='.*'#SBX_URL='http://127.0.0.1:$fport'#"
assert_eq 1 "$rc" "exit code of the installer given a tampered file"
assert_contains "$out" "sandbox-mcp does not match its SHA-256 sum" "the installer names the tampered file"
assert_contains "$out" "nothing was installed" "the installer says nothing was installed"
assert_eq "$before" "$(home_state)" "the home after the tampered install"

# ---- the one line, plain HTTP
rc=0
out=$(as_user "curl -fsSL $url/setup.sh | sh" 2>&1) || rc=$?
printf '%s\n' "$out" | sed 's/^/  | /'
assert_eq 0 "$rc" "exit code of curl | sh"
for f in sandbox sandbox-mcp; do
  cmp -s "$ITEST_BUILD/tools/$f" "$home/.local/bin/$f" || fail "$home/.local/bin/$f is not this build's"
  assert_eq "755 $user" "$(stat -c '%a %U' "$home/.local/bin/$f")" "mode and owner of ~/.local/bin/$f"
done
for d in .claude/skills .agents/skills; do
  cmp -s "$(dirname "$0")/../../examples/skills/sandbox-platform/SKILL.md" "$home/$d/sandbox-platform/SKILL.md" ||
    fail "no sandbox-platform skill in ~/$d"
done
assert_contains "$(cat "$home/.config/sandbox/config")" "url = $url" "the CLI's config names the controller"
assert_not_contains "$(cat "$home/.config/sandbox/config")" "token" "the CLI's config holds no token"
assert_eq 600 "$(stat -c %a "$home/.config/sandbox/config")" "mode of the CLI's config"
assert_contains "$out" "kept your own \"sandbox\" MCP server in $home/.cursor/mcp.json" "the user's own entry kept"
assert_eq '{"mcpServers": {"sandbox": {"command": "/opt/mine/mcp"}}}' "$(cat "$home/.cursor/mcp.json")" \
  "the user's own sandbox entry, untouched"
python3 - "$home" "$url" <<'PY' || fail "the agents' MCP configurations"
import json, sys, tomllib
home, url = sys.argv[1], sys.argv[2]
mcp = home + "/.local/bin/sandbox-mcp"
g = json.load(open(home + "/.gemini/settings.json"))
assert g["theme"] == "Dracula" and g["mcpServers"]["other"]["command"] == "other-mcp", g
for f in ("/.gemini/settings.json", "/.claude.json"):
    s = json.load(open(home + f))["mcpServers"]["sandbox"]
    assert s["command"] == mcp and s["env"]["SANDBOX_URL"] == url and not s["env"].get("SANDBOX_TOKEN", "").startswith("sbt_"), (f, s)
c = tomllib.load(open(home + "/.codex/config.toml", "rb"))["mcp_servers"]["sandbox"]
assert c["command"] == mcp and c["env"]["SANDBOX_URL"] == url, c
PY
assert_eq 644 "$(stat -c %a "$home/.gemini/settings.json")" "the merged file keeps its mode"
! grep -rq "${token#sbt_*_}" "$home" || fail "a file in the home holds the token: $(grep -rl "${token#sbt_*_}" "$home")"

# the installed CLI, with the URL from its config and the token from the environment
rc=0
out=$(as_user "SANDBOX_TOKEN=$token ~/.local/bin/sandbox create --image $ITEST_IMAGE --memory-mib 64 --wait --timeout 120 --json") || rc=$?
assert_eq 0 "$rc" "sandbox create by the installed CLI"
sbx=$(itest_json "$out" sandbox.id)
itest_track "$sbx"
assert_eq "setup-42" "$(as_user "SANDBOX_TOKEN=$token ~/.local/bin/sandbox exec $sbx -- echo setup-42")" \
  "sandbox exec by the installed CLI"
as_user "SANDBOX_TOKEN=$token ~/.local/bin/sandbox delete $sbx --wait --timeout 60" >/dev/null ||
  fail "sandbox delete by the installed CLI"
# the installed sandbox-mcp through the official MCP SDK
tools=$(cd "$mcp_dir" && timeout 60 node list_tools.mjs runuser -u "$user" -- env "SANDBOX_URL=$url" \
  "SANDBOX_TOKEN=$token" "$home/.local/bin/sandbox-mcp") || fail "the MCP SDK could not list the installed sandbox-mcp's tools"
for t in sandbox_create sandbox_exec sandbox_delete; do
  grep -qx "$t" <<<"$tools" || fail "no $t among the installed sandbox-mcp's tools: $tools"
done
echo "the installed sandbox-mcp lists $(wc -l <<<"$tools") tools through the MCP SDK"

# ---- again: an upgrade in place (an older sandbox there, as a former run left it)
printf 'older' >>"$home/.local/bin/sandbox"
sed -i "s#^new [0-9a-f]* $home/.local/bin/sandbox\$#new $(sha256sum "$home/.local/bin/sandbox" | cut -d' ' -f1) $home/.local/bin/sandbox#" \
  "$home/.local/share/sandbox/installed"
out=$(as_user "curl -fsSL $url/setup.sh | sh" 2>&1) || fail "the second run: $out"
assert_contains "$out" "installed: $home/.local/bin/sandbox" "the second run installs the newer sandbox"
assert_contains "$out" "unchanged: $home/.local/bin/sandbox-mcp" "the second run leaves what is current"
cmp -s "$ITEST_BUILD/tools/sandbox" "$home/.local/bin/sandbox" || fail "the upgraded sandbox is not this build's"

# ---- uninstall: the home as it was
out=$(as_user "curl -fsSL $url/setup.sh | sh -s -- --uninstall" 2>&1) || fail "--uninstall: $out"
assert_eq "$before" "$(home_state)" "the home after --uninstall"

# ---- over TLS with a private CA
itest_stop_pid "$all_pid" "sandboxd all" 30 || fail "sandboxd all did not stop"
url="https://127.0.0.1:$port"
export CURL_CA_BUNDLE="$pki/ca.pem" SANDBOX_URL=$url
start_all "$url" --api-tls-cert "$pki/server.pem" --api-tls-key "$pki/server.key" --worker-controller-ca "$pki/ca.pem"
rc=0
as_user "curl -fsSL $url/setup.sh" >/dev/null 2>&1 || rc=$?
assert_eq 60 "$rc" "curl without the CA refuses the controller (exit 60)"
rc=0
out=$(as_user "curl --cacert $pki/ca.pem -fsSL $url/setup.sh | sh -s -- --ca-file $pki/ca.pem" 2>&1) || rc=$?
printf '%s\n' "$out" | sed 's/^/  | /'
assert_eq 0 "$rc" "exit code of curl | sh over TLS"
assert_contains "$(cat "$home/.config/sandbox/config")" "ca_file = $pki/ca.pem" "the CA in the CLI's config"
out=$(as_user "SANDBOX_TOKEN=$token ~/.local/bin/sandbox create --image $ITEST_IMAGE --memory-mib 64 --wait --timeout 120 --json") ||
  fail "sandbox create over TLS by the installed CLI"
sbx=$(itest_json "$out" sandbox.id)
itest_track "$sbx"
assert_eq "tls-7" "$(as_user "SANDBOX_TOKEN=$token ~/.local/bin/sandbox exec $sbx -- echo tls-7")" "exec over TLS"
as_user "SANDBOX_TOKEN=$token ~/.local/bin/sandbox delete $sbx --wait --timeout 60" >/dev/null || fail "delete over TLS"
out=$(as_user "curl --cacert $pki/ca.pem -fsSL $url/setup.sh | sh -s -- --uninstall" 2>&1) || fail "--uninstall: $out"
assert_eq "$before" "$(home_state)" "the home after --uninstall (TLS)"
echo "the one-line installer works over HTTP and TLS, refuses a tampered file, and uninstalls without a trace"
