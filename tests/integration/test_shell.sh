#!/usr/bin/env bash
# Shell: `sandbox shell SBX` opens a terminal in a running sandbox over an
# upgraded connection through the controller and the worker's forwarder.
# Driven in a pseudo-terminal by shell_client.py: a command's output, the
# window size after a resize (stty size), Ctrl-C interrupting sleep, `exit 3`
# as the CLI's exit code; the session is an exec operation with exit_code 3
# and tty true. Stdin from a pipe is typed input ending in EOF; another
# tenant's sandbox is 404, a stopped one 409, a plain POST 400, bad sizes
# 400; a gVisor sandbox's shell works too. Traffic goes only to the test's
# controller and worker on loopback.
# itest-timeout: 300
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-shell
a=$SANDBOX_TOKEN
b=$(itest_token "$(itest_tenant itest-shellb)" member)

assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --network none --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"

# ---- a person at a terminal
python3 "$(dirname "$0")/shell_client.py" "$SANDBOX_CLI" "$sbx" >"$ITEST_TMP/pty.out" 2>&1 ||
  fail "the terminal session: $(cat "$ITEST_TMP/pty.out")"
itest_log "pty session: $(cat "$ITEST_TMP/pty.out")"

# ---- the session is an exec operation with its exit code
assert_exit 0 sandbox get "$sbx" --json
python3 - "$ITEST_OUT" <<'PY' >"$ITEST_TMP/op" || fail "no exec operation of the shell in sandbox get"
import json, sys
ops = json.loads(sys.argv[1])["operations"]
sh = [o for o in ops if o["kind"] == "exec" and (o.get("result") or {}).get("exit_code") == 3]
assert sh, ops
print(sh[0]["id"])
PY
op=$(cat "$ITEST_TMP/op")
assert_exit 0 sandbox operation "$op" --json
assert_eq succeeded "$(itest_json "$ITEST_OUT" operation.state)" "the shell operation's state"
assert_eq 3 "$(itest_json "$ITEST_OUT" operation.result.exit_code)" "the shell operation's exit_code"
# the request ({"argv","tty":true}) as stored
got=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT request::text FROM operations WHERE id = '$op'")
assert_eq '{"tty": true, "argv": ["/bin/sh"]}' "$got" "the shell operation's stored request"
assert_exit 0 sandbox events --sandbox "$sbx" --operation "$op" --json
assert_contains "$ITEST_OUT" '"sandbox.shell"' "the sandbox.shell event"
# the access log says what the request was: upgraded, 101
if [ -n "${ITEST_CONTROLLER_LOG:-}" ] && [ -f "$ITEST_CONTROLLER_LOG" ]; then
  assert_contains "$(grep "route=/v1/sandboxes/{id}/shell" "$ITEST_CONTROLLER_LOG")" "status=101" \
    "the access log line of a shell session"
fi

# ---- stdin from a pipe: typed input, its end as EOF; the exit code
out=$(echo 'echo hi' | sandbox shell "$sbx") || fail "piped shell exited $?: $out"
assert_contains "$out" "hi" "echo 'echo hi' | sandbox shell"
rc=0
printf 'exit 7\n' | sandbox shell "$sbx" >/dev/null || rc=$?
assert_eq 7 "$rc" "the exit code of a piped shell"
# the end of input reaches the shell even after a command it ran read one:
# `cat` takes the first Ctrl-D, the shell a later one (not a hang)
rc=0
printf 'cat\n' | timeout 30 "$SANDBOX_CLI" shell "$sbx" >/dev/null 2>&1 || rc=$?
assert_eq 0 "$rc" "a piped shell whose command read the first end of input"
rc=0
sandbox shell "$sbx" -- sh -c 'exit $((2+3))' </dev/null >/dev/null || rc=$?
assert_eq 5 "$rc" "sandbox shell -- ARGV runs ARGV (a + in it kept)"

# ---- a session whose client dies: its command is killed, not left running
# (its stdin stays open: a feeder the test stops, by pid, at the end)
exec {feed}< <(exec timeout 25 sleep 30 2>/dev/null)
itest_track_pid "$!"
"$SANDBOX_CLI" shell "$sbx" -- sleep 4242 <&"$feed" >/dev/null 2>&1 &
cli_pid=$!
itest_track_pid "$cli_pid"
exec {feed}<&-
itest_wait_until 20 "the abandoned shell's command runs" \
  sh -c "\"$SANDBOX_CLI\" exec $sbx -- ps | grep -q 'sleep 4242'"
kill -9 "$cli_pid" 2>/dev/null || true
itest_wait_until 20 "the abandoned shell's command is killed" \
  sh -c "! \"$SANDBOX_CLI\" exec $sbx -- ps | grep -q 'sleep 4242'"

# ---- usage: no id, nothing after --, --help; exit 2 and 0
# docker's habit: exec -it is the shell's terminal session, with exec's -e and -w
out=$(printf 'echo "tty=$(tty) v=$V wd=$(pwd)"\nexit 4\n' | sandbox exec "$sbx" -it -e V=x9 -w /tmp -- /bin/sh) && rc=0 || rc=$?
assert_eq 4 "$rc" "exec -it exits with the command's code"
assert_contains "$out" "tty=/dev/pts/" "exec -it runs on a pseudo-terminal"
assert_contains "$out" "v=x9 wd=/tmp" "exec -it passes -e and -w"
assert_exit 2 sandbox exec "$sbx" -it --detach -- sh
assert_exit 2 sandbox shell
assert_exit 2 sandbox shell "$sbx" --
assert_exit 0 sandbox shell --help
assert_contains "$ITEST_OUT" "Exit codes: the command's own" "shell --help names its exit codes"

# ---- refusals: another tenant's 404, a plain POST 400, bad sizes 400
rc=0
SANDBOX_TOKEN=$b sandbox shell "$sbx" </dev/null >/dev/null 2>"$ITEST_TMP/err" || rc=$?
assert_eq 3 "$rc" "another tenant's shell exits 3"
assert_contains "$(cat "$ITEST_TMP/err")" "not_found" "another tenant's sandbox is not found"
itest_http POST "/v1/sandboxes/$sbx/shell" "$a"
assert_http 400 invalid_argument "a shell without Upgrade"
code=$(curl -s -o "$ITEST_TMP/body" -w '%{http_code}' --max-time 20 -X POST -H "Authorization: Bearer $a" \
  -H 'Connection: Upgrade' -H 'Upgrade: sandbox-shell' "$SANDBOX_URL/v1/sandboxes/$sbx/shell?cols=0&rows=24") || true
assert_eq 400 "$code" "cols=0"
assert_contains "$(cat "$ITEST_TMP/body")" "cols must be a whole number from 1 to 1000" "the cols message"
code=$(curl -s -o "$ITEST_TMP/body" -w '%{http_code}' --max-time 20 -X POST \
  -H 'Connection: Upgrade' -H 'Upgrade: sandbox-shell' "$SANDBOX_URL/v1/sandboxes/$sbx/shell") || true
assert_eq 401 "$code" "a shell without a token"

# ---- a sandbox that is not running: 409
assert_exit 0 sandbox delete "$sbx" --wait --timeout 120
rc=0
sandbox shell "$sbx" </dev/null >/dev/null 2>"$ITEST_TMP/err" || rc=$?
assert_eq 3 "$rc" "a deleted sandbox's shell exits 3"
assert_contains "$(cat "$ITEST_TMP/err")" "conflict" "a deleted sandbox's shell is a conflict"

# ---- gVisor
if docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; then
  assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --isolation gvisor --network none \
    --wait --timeout 300
  read -r gv _ <<<"$ITEST_OUT"
  itest_track "$gv"
  # gVisor's line discipline can drop a Ctrl-D that comes while the line
  # editor changes the terminal's mode: it is typed again, every time ends
  for i in 1 2 3 4 5 6; do
    out=$(printf 'echo gv$((2*21))\n' | timeout 30 "$SANDBOX_CLI" shell "$gv" 2>&1) ||
      fail "gVisor shell $i exited $?: $out"
    assert_contains "$out" "gv42" "a gVisor sandbox's shell ($i)"
  done
  rc=0
  printf 'cat\n' | timeout 30 "$SANDBOX_CLI" shell "$gv" >/dev/null 2>&1 || rc=$?
  assert_eq 0 "$rc" "a gVisor piped shell whose command read the first end of input"
  python3 "$(dirname "$0")/shell_client.py" "$SANDBOX_CLI" "$gv" >"$ITEST_TMP/pty-gv.out" 2>&1 ||
    fail "the gVisor terminal session: $(cat "$ITEST_TMP/pty-gv.out")"
else
  itest_log "no runsc runtime: the gVisor shell is not tried"
fi

echo "shell: a terminal driven by a script, resized, interrupted, exit codes, recorded, piped, refused, gVisor"
