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

echo "exec output is binary-safe"
assert_exit 0 sandbox delete "$sbx" --wait
