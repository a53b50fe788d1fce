#!/usr/bin/env bash
# Exec bounds: output over --max-output is truncated and flagged with the real
# byte count; --timeout kills (137, timed_out); a missing command is 127 and a non-executable 126, each named in the project's words;
# stderr goes to stderr.
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-exec

assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --network none --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"

# 5000 bytes of output, 1000 kept
assert_exit 0 sandbox exec "$sbx" --max-output 1000 --json -- sh -c 'head -c 5000 /dev/zero | tr "\0" a'
json=$ITEST_OUT
assert_eq "true" "$(itest_json "$json" operation.result.stdout_truncated result.stdout_truncated stdout_truncated)" "stdout_truncated"
assert_eq "5000" "$(itest_json "$json" operation.result.stdout_bytes result.stdout_bytes stdout_bytes)" "stdout_bytes"
kept=$(itest_json "$json" operation.result.stdout result.stdout stdout)
assert_eq "1000" "${#kept}" "bytes of stdout kept"
assert_eq "false" "$(itest_json "$json" operation.result.stderr_truncated result.stderr_truncated stderr_truncated)" "stderr_truncated"

# and without --json the truncated stdout is what the CLI prints
assert_exit 0 sandbox exec "$sbx" --max-output 1000 -- sh -c 'head -c 5000 /dev/zero | tr "\0" a'
assert_eq "1000" "${#ITEST_OUT}" "bytes printed by a truncated exec"

# a timeout kills the command: 128+9, within ~10 s
t0=$(date +%s)
assert_exit 137 sandbox exec "$sbx" --timeout 2 -- sleep 100
took=$(($(date +%s) - t0))
[ "$took" -le 12 ] || fail "exec --timeout 2 took ${took}s"

assert_exit 137 sandbox exec "$sbx" --timeout 2 --json -- sleep 100
assert_eq "true" "$(itest_json "$ITEST_OUT" operation.result.timed_out result.timed_out timed_out)" "timed_out"
assert_eq "137" "$(itest_json "$ITEST_OUT" operation.result.exit_code result.exit_code exit_code)" "exit_code in JSON"

# a command that does not exist: 127 as from a shell, and a message in the
# project's words on stderr (not the OCI runtime's preamble)
assert_exit 127 sandbox exec "$sbx" -- /no/such/command
assert_contains "$ITEST_ERR" "sandbox: /no/such/command: command not found in the sandbox" "a missing command's stderr"
assert_not_contains "$ITEST_ERR" "OCI runtime" "a missing command's stderr"
assert_eq "" "$ITEST_OUT" "a missing command's stdout"
assert_exit 127 sandbox exec "$sbx" -- nosuchcommand
assert_contains "$ITEST_ERR" "sandbox: nosuchcommand: command not found in the sandbox" "a command not in PATH"
# not executable: 126
assert_exit 0 sandbox exec "$sbx" -- sh -c 'printf x >/tmp/noexec; chmod 644 /tmp/noexec'
assert_exit 126 sandbox exec "$sbx" -- /tmp/noexec
assert_contains "$ITEST_ERR" "sandbox: /tmp/noexec: cannot be run in the sandbox" "a file that is not executable"
assert_not_contains "$ITEST_ERR" "OCI runtime" "a non-executable's stderr"

# stdout and stderr go to their own streams
assert_exit 0 sandbox exec "$sbx" -- sh -c 'echo to-out; echo to-err >&2'
assert_eq "to-out" "$ITEST_OUT" "stdout"
assert_eq "to-err" "$ITEST_ERR" "stderr"

# env and cwd reach the command
# shellcheck disable=SC2016 # expanded by the sandbox's shell
assert_exit 0 sandbox exec "$sbx" --env GREETING=hi --cwd /tmp -- sh -c 'echo "$GREETING $(pwd)"'
assert_eq "hi /tmp" "$ITEST_OUT" "env and cwd"
# a working directory that does not exist: the request's error, said plainly
assert_exit 1 sandbox exec "$sbx" --cwd /nope -- true
assert_contains "$ITEST_ERR" "invalid_argument" "exec --cwd /nope"
assert_contains "$ITEST_ERR" "cwd /nope does not exist in the sandbox" "exec --cwd /nope"
assert_not_contains "$ITEST_ERR" "OCI" "exec --cwd /nope hides the runtime's text"

assert_exit 0 sandbox delete "$sbx" --wait
