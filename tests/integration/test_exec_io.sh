#!/usr/bin/env bash
# Exec I/O: output that is not UTF-8 round-trips byte for byte (the JSON
# result keeps a text form and adds stdout_b64/stderr_b64); `sandbox exec -i`
# gives the command the CLI's stdin (text and bytes, container and gvisor
# classes); stdin over the inline limit is streamed over a shell connection
# without a terminal (checksum, stdout/stderr apart, exit code, timeout).
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-execio

assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --network none --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"

# ---- binary-safe output: a NUL and a 0xff byte come back exactly
printf 'a\0b\377' >"$ITEST_TMP/want.bin"
printf 'e\377\0' >"$ITEST_TMP/want-err.bin"
sandbox exec "$sbx" -- sh -c "printf 'a\\0b\\377'; printf 'e\\377\\0' >&2" \
  >"$ITEST_TMP/got.bin" 2>"$ITEST_TMP/got-err.bin" || fail "binary exec exited $?"
cmp "$ITEST_TMP/want.bin" "$ITEST_TMP/got.bin" ||
  fail "stdout bytes differ: want $(od -An -tx1 "$ITEST_TMP/want.bin"), got $(od -An -tx1 "$ITEST_TMP/got.bin")"
cmp "$ITEST_TMP/want-err.bin" "$ITEST_TMP/got-err.bin" ||
  fail "stderr bytes differ: got $(od -An -tx1 "$ITEST_TMP/got-err.bin")"
# the JSON has both forms: text with U+FFFD, base64 with the bytes
assert_exit 0 sandbox exec "$sbx" --json -- sh -c "printf 'a\\0b\\377'"
assert_eq "YQBi/w==" "$(itest_json "$ITEST_OUT" operation.result.stdout_b64)" "stdout_b64"
assert_eq "a�b�" "$(itest_json "$ITEST_OUT" operation.result.stdout)" "stdout text form"
# text output has no base64 form
assert_exit 0 sandbox exec "$sbx" --json -- echo plain
assert_eq "plain" "$(itest_json "$ITEST_OUT" operation.result.stdout)" "text stdout"
if itest_json "$ITEST_OUT" operation.result.stdout_b64 >/dev/null 2>&1; then
  fail "a text result carries stdout_b64"
fi
# 32 KiB of random bytes round-trip too
head -c 32768 /dev/urandom >"$ITEST_TMP/rand.bin"
b64=$(base64 -w0 "$ITEST_TMP/rand.bin")
sandbox exec "$sbx" -- sh -c "echo $b64 | base64 -d" >"$ITEST_TMP/rand-got.bin" || fail "random exec exited $?"
cmp "$ITEST_TMP/rand.bin" "$ITEST_TMP/rand-got.bin" || fail "32 KiB of random bytes did not round-trip"

# ---- stdin
# without -i the command's stdin is empty, as before
out=$(echo hi | sandbox exec "$sbx" -- cat) || fail "exec cat without -i exited $?"
assert_eq "" "$out" "stdin without -i"
# with -i it is the CLI's stdin, closed at its end
out=$(echo hi | sandbox exec -i "$sbx" -- cat) || fail "exec -i cat exited $?"
assert_eq "hi" "$out" "echo hi | sandbox exec -i -- cat"
out=$(printf 'x%.0s' $(seq 1 1000) | sandbox exec --stdin "$sbx" -- wc -c) || fail "exec --stdin wc exited $?"
assert_eq "1000" "$(echo $out)" "bytes the command read from stdin"
# empty stdin: the command sees EOF at once
out=$(sandbox exec -i "$sbx" -- wc -c </dev/null) || fail "exec -i with empty stdin exited $?"
assert_eq "0" "$(echo $out)" "empty stdin"
# bytes round-trip: 300 KiB of random bytes through cat
head -c 307200 /dev/urandom >"$ITEST_TMP/in.bin"
sandbox exec -i "$sbx" --max-output 1048576 -- cat <"$ITEST_TMP/in.bin" >"$ITEST_TMP/in-got.bin" ||
  fail "exec -i cat of random bytes exited $?"
cmp "$ITEST_TMP/in.bin" "$ITEST_TMP/in-got.bin" || fail "300 KiB of random stdin did not come back byte for byte"
# a command that does not read its stdin still ends, with its own code
t0=$(date +%s)
rc=0
head -c 524288 /dev/zero | sandbox exec -i "$sbx" -- sh -c 'exit 7' || rc=$?
assert_eq 7 "$rc" "exit code of a command that ignores its stdin"
[ $(($(date +%s) - t0)) -le 20 ] || fail "a command that ignores its stdin took over 20 s"
# a timeout still kills a command that has stdin
t0=$(date +%s)
rc=0
echo x | sandbox exec -i --timeout 2 "$sbx" -- sh -c 'cat; sleep 100' >/dev/null || rc=$?
assert_eq 137 "$rc" "exit code of exec -i that timed out"
[ $(($(date +%s) - t0)) -le 15 ] || fail "exec -i --timeout 2 took over 15 s"
# ---- over the inline limit: streamed (a shell connection without a terminal)
# 24 MiB of random bytes through sha256sum: the checksum, stdout and stderr
# apart, the command's own exit code, --env and --cwd kept
head -c 25165824 /dev/urandom >"$ITEST_TMP/big.bin"
want=$(sha256sum <"$ITEST_TMP/big.bin" | cut -d' ' -f1)
rc=0
sandbox exec -i --env GREETING=streamed --cwd /tmp "$sbx" -- \
  sh -c 'sha256sum | cut -d" " -f1; echo "$GREETING in $(pwd)" >&2; exit 5' \
  <"$ITEST_TMP/big.bin" >"$ITEST_TMP/big.out" 2>"$ITEST_TMP/big.err" || rc=$?
assert_eq 5 "$rc" "exit code of exec -i with 24 MiB of streamed stdin"
assert_eq "$want" "$(cat "$ITEST_TMP/big.out")" "sha256 of 24 MiB of stdin streamed into the sandbox"
assert_eq "streamed in /tmp" "$(cat "$ITEST_TMP/big.err")" "stderr apart, --env and --cwd of a streamed exec"
# bytes round-trip both ways: 2 MiB through cat
head -c 2097152 "$ITEST_TMP/big.bin" >"$ITEST_TMP/two.bin"
sandbox exec -i "$sbx" -- cat <"$ITEST_TMP/two.bin" >"$ITEST_TMP/two-got.bin" ||
  fail "streamed exec -i cat exited $?"
cmp "$ITEST_TMP/two.bin" "$ITEST_TMP/two-got.bin" || fail "2 MiB of streamed stdin did not come back byte for byte"
# recorded as an exec operation with tty false and the exit code
got=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT request->>'tty', result->>'exit_code' FROM operations
  WHERE sandbox_id = '$sbx' AND kind = 'exec' AND request->>'tty' = 'false' ORDER BY created_at LIMIT 1")
assert_eq "false|5" "$got" "the streamed exec's operation (tty false, exit code 5)"
# a command that stops reading: the rest is dropped, its own code comes back
rc=0
head -c 4194304 /dev/zero | sandbox exec -i "$sbx" -- sh -c 'head -c 10 >/dev/null; exit 4' || rc=$?
assert_eq 4 "$rc" "exit code of a streamed command that stops reading"
# the timeout kills it (137), as an inline exec's
t0=$(date +%s)
rc=0
sandbox exec -i --timeout 2 "$sbx" -- sh -c 'cat >/dev/null' < <(head -c 600000 /dev/zero; exec timeout 20 sleep 30 2>/dev/null) || rc=$?
itest_track_pid "$!" # the feeder that holds stdin open: stopped at the end
assert_eq 137 "$rc" "exit code of a streamed exec that timed out"
[ $(($(date +%s) - t0)) -le 20 ] || fail "a streamed exec -i --timeout 2 took over 20 s"
itest_wait_until 20 "the timed-out streamed command is killed" \
  sh -c "! \"$SANDBOX_CLI\" exec $sbx -- ps | grep -q 'cat'"
# --json and --detach need an operation: refused, saying why (exit 2)
rc=0
head -c 524289 /dev/zero | sandbox exec -i --json "$sbx" -- cat >/dev/null 2>"$ITEST_TMP/big.err" || rc=$?
assert_eq 2 "$rc" "exit code of exec -i --json with stdin over the inline limit"
assert_contains "$(cat "$ITEST_TMP/big.err")" "524288 bytes" "the message says the inline limit"
# the stream path's own checks: tty must be a boolean, env KEY=VALUE, cwd absolute
for q in "tty=maybe" "tty=false&env=NOEQUALS" "tty=false&env=1BAD=x" "tty=false&cwd=relative"; do
  code=$(curl -s -o "$ITEST_TMP/body" -w '%{http_code}' --max-time 20 -X POST -H "Authorization: Bearer $SANDBOX_TOKEN" \
    -H 'Connection: Upgrade' -H 'Upgrade: sandbox-shell' "$SANDBOX_URL/v1/sandboxes/$sbx/shell?argv=cat&$q") || true
  assert_eq 400 "$code" "a shell request with $q"
  assert_contains "$(cat "$ITEST_TMP/body")" '"invalid_argument"' "the error code for $q"
done

# the API: text stdin, base64 stdin, and bad forms refused as invalid_argument
itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" '{"argv":["cat"],"stdin":"text in\n"}'
assert_http 202 "" "exec with stdin text"
op=$(itest_json "$HTTP_BODY" operation.id)
assert_exit 0 sandbox wait "$op" --json
assert_eq "text in" "$(itest_json "$ITEST_OUT" operation.result.stdout)" "stdout of an exec with stdin text"
itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" '{"argv":["cat"],"stdin":"a","stdin_b64":"YQ=="}'
assert_http 400 invalid_argument "exec with stdin and stdin_b64"
itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" '{"argv":["cat"],"stdin_b64":"not base64!"}'
assert_http 400 invalid_argument "exec with bad stdin_b64"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "stdin_b64" "message of a bad stdin_b64"

# ---- the gvisor class takes stdin too
itest_require_gvisor
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --isolation gvisor --network none --wait --timeout 300
read -r gsbx _ <<<"$ITEST_OUT"
itest_track "$gsbx"
out=$(echo hi | sandbox exec -i "$gsbx" -- cat) || fail "gvisor exec -i cat exited $?"
assert_eq "hi" "$out" "echo hi | sandbox exec -i -- cat in a gvisor sandbox"
sandbox exec -i "$gsbx" --max-output 1048576 -- cat <"$ITEST_TMP/in.bin" >"$ITEST_TMP/in-gv.bin" ||
  fail "gvisor exec -i cat of random bytes exited $?"
cmp "$ITEST_TMP/in.bin" "$ITEST_TMP/in-gv.bin" || fail "random stdin did not round-trip in a gvisor sandbox"
sandbox exec -i "$gsbx" -- cat <"$ITEST_TMP/two.bin" >"$ITEST_TMP/two-gv.bin" ||
  fail "gvisor streamed exec -i cat exited $?"
cmp "$ITEST_TMP/two.bin" "$ITEST_TMP/two-gv.bin" || fail "streamed stdin did not round-trip in a gvisor sandbox"
assert_exit 0 sandbox delete "$gsbx" --wait

echo "exec output is binary-safe and exec -i gives the command its stdin"
assert_exit 0 sandbox delete "$sbx" --wait
