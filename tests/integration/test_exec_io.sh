#!/usr/bin/env bash
# Exec I/O: output that is not UTF-8 round-trips byte for byte (the JSON
# result keeps a text form and adds stdout_b64/stderr_b64); `sandbox exec -i`
# gives the command the CLI's stdin (text and bytes, container and gvisor
# classes) and refuses stdin over the inline limit with exit 2.
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
# over the inline limit: exit 2, saying the limit and what to use instead
rc=0
head -c 524289 /dev/zero | sandbox exec -i "$sbx" -- cat >/dev/null 2>"$ITEST_TMP/big.err" || rc=$?
assert_eq 2 "$rc" "exit code of exec -i with stdin over the limit"
assert_contains "$(cat "$ITEST_TMP/big.err")" "524288 bytes" "over-limit message"
assert_contains "$(cat "$ITEST_TMP/big.err")" "sandbox cp" "over-limit message"

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
assert_exit 0 sandbox delete "$gsbx" --wait

echo "exec output is binary-safe and exec -i gives the command its stdin"
assert_exit 0 sandbox delete "$sbx" --wait
