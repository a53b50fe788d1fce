#!/usr/bin/env bash
# Hostile and broken requests get 400/413/422 with the error body and never
# hurt the controller; a missing image fails the operation with
# image_unavailable; afterwards the controller still serves.
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

tenant=$(itest_tenant itest-bad)
tok=$(itest_token "$tenant" member)
export SANDBOX_TOKEN=$tok
img=$ITEST_IMAGE

# create requests
itest_http POST /v1/sandboxes "$tok" '{"image":'
assert_http 400 invalid_json "truncated JSON"
itest_http POST /v1/sandboxes "$tok" 'not json at all'
assert_http 400 invalid_json "not JSON"
itest_http POST /v1/sandboxes "$tok" "{\"image\":\"$img\"} {\"image\":\"$img\"}"
assert_http 400 invalid_json "two JSON values"
itest_http POST /v1/sandboxes "$tok" '[1,2,3]'
assert_http 400 "*" "an array instead of an object"
itest_http POST /v1/sandboxes "$tok" '{"image":""}'
assert_http 400 invalid_argument "an empty image (a missing one is the server's default_image: test_lifecycle)"
itest_http POST /v1/sandboxes "$tok" '{"image":"bad image name"}'
assert_http 400 invalid_argument "an image name with spaces"
itest_http POST /v1/sandboxes "$tok" "{\"image\":\"$img\",\"bogus\":1}"
assert_http 400 invalid_argument "unknown field"
itest_http POST /v1/sandboxes "$tok" "{\"image\":\"$img\",\"trust\":{\"nope\":true}}"
assert_http 400 invalid_argument "unknown trust field"
itest_http POST /v1/sandboxes "$tok" "{\"image\":42}"
assert_http 400 invalid_argument "image of the wrong type"
for field in cpu_millis memory_mib ttl_seconds; do
  for v in -1 0 99999999999999 1e400 '"12"' 1.5; do
    itest_http POST /v1/sandboxes "$tok" "{\"image\":\"$img\",\"$field\":$v}"
    assert_http 400 "*" "$field = $v"
  done
done
itest_http POST /v1/sandboxes "$tok" "{\"image\":\"$img\",\"network\":\"everything\"}"
assert_http 400 invalid_argument "unknown network mode"
# within the absolute bounds but over the server ceiling (max_cpu_millis 16000)
itest_http POST /v1/sandboxes "$tok" "{\"image\":\"$img\",\"cpu_millis\":20000}"
assert_http 422 policy_denied "cpu over the server ceiling"

# 2 MiB body: over max_body_bytes
big="$ITEST_TMP/big-$$.json"
python3 -c 'import sys; sys.stdout.write("{\"image\":\"" + "a" * (2 * 1024 * 1024) + "\"}")' >"$big"
itest_http POST /v1/sandboxes "$tok" "@$big"
rm -f "$big"
assert_http 413 payload_too_large "2 MiB body"

# exec requests need a running sandbox
assert_exit 0 sandbox create --tenant "$tenant" --image "$img" --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok" '{}'
assert_http 400 invalid_argument "exec without argv"
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok" '{"argv":"ls -l"}'
assert_http 400 invalid_argument "argv as a string"
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok" '{"argv":[]}'
assert_http 400 invalid_argument "empty argv"
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok" '{"argv":["ls",1]}'
assert_http 400 invalid_argument "argv with a number"
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok" '{"argv":["ls"],"timeout_seconds":-5}'
assert_http 400 invalid_argument "negative exec timeout"
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok" '{"argv":["ls"],"max_output_bytes":99999999999}'
case "$HTTP_STATUS" in
  400|422) assert_http "$HTTP_STATUS" "*" "huge max_output_bytes" ;;
  *) fail "huge max_output_bytes: expected 400 or 422, got $HTTP_STATUS: $HTTP_BODY" ;;
esac
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok" '{"argv":["ls"],"surprise":true}'
assert_http 400 invalid_argument "unknown exec field"
itest_http GET /v1/sandboxes/sbx_doesnotexist "$tok"
assert_http 404 not_found "unknown sandbox id"
itest_http GET "/v1/operations/op_doesnotexist" "$tok"
assert_http 404 not_found "unknown operation id"
itest_http GET "/v1/operations/op_doesnotexist?wait=abc" "$tok"
case "$HTTP_STATUS" in
  400|404) ;;
  *) fail "wait=abc: expected 400 or 404, got $HTTP_STATUS" ;;
esac

# a missing image: the create is accepted and its operation fails
assert_exit 0 sandbox create --tenant "$tenant" --image no-such-image:1
read -r bad_sbx bad_op <<<"$ITEST_OUT"
itest_track "$bad_sbx"
assert_exit 1 sandbox wait "$bad_op" --timeout 240 --json
assert_eq "failed" "$(itest_json "$ITEST_OUT" operation.state state)" "operation state for a missing image"
assert_eq "image_unavailable" "$(itest_json "$ITEST_OUT" operation.error.code error.code)" "operation error for a missing image"

# still healthy, and a normal exec and create still work
code=$(curl -s -o /dev/null -w "%{http_code}" --max-time 10 "$SANDBOX_URL/healthz" || true)
assert_eq 200 "$code" "GET /healthz after bad input"
assert_exit 0 sandbox exec "$sbx" -- echo still-alive
assert_eq "still-alive" "$ITEST_OUT" "exec after bad input"
assert_exit 0 sandbox create --tenant "$tenant" --image "$img" --wait --timeout 300
read -r sbx2 _ <<<"$ITEST_OUT"
itest_track "$sbx2"
assert_exit 0 sandbox delete "$sbx2" --wait
assert_exit 0 sandbox delete "$sbx" --wait
