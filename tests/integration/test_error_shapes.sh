#!/usr/bin/env bash
# Every error a client can see has the JSON shape {"error":{"code","message"}}
# (issue 15, finding 7): what libevent refuses before our handlers run (a
# body over 8 MiB, a malformed request line, an unknown method, a head over
# 64 KiB, an Expect it does not know), and text PostgreSQL would refuse
# (invalid UTF-8 in a body string, a key, a query parameter, the path or a
# header; a NUL in a body string) answers 400 invalid_argument naming where,
# never 503 with the database's words; the route listener's own errors are
# JSON too; afterwards the controller still serves.
# itest-timeout: 120
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

tenant=$(itest_tenant itest-shapes)
tok=$(itest_token "$tenant" member)
api_port=${SANDBOX_URL##*:}
route_port=${SANDBOX_ROUTE_URL##*:}

# raw PORT: sends stdin (Python bytes literal syntax) as it is and prints the
# status, then the Content-Type, then the body of the answer.
raw_py="$ITEST_TMP/raw-$$.py"
cat >"$raw_py" <<'PY'
import socket, sys
data = eval(sys.stdin.read(), {"__builtins__": {}})  # bytes expressions the test writes
if len(sys.argv) > 2:  # a body: its Content-Length ends the head
    body = eval(sys.argv[2], {"__builtins__": {}})
    data += b"Content-Length: %d\r\n\r\n" % len(body) + body
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=20)
try:
    s.sendall(data)
except (BrokenPipeError, ConnectionResetError):
    pass
out = b""
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
except (socket.timeout, ConnectionResetError):
    pass
head, _, body = out.partition(b"\r\n\r\n")
lines = head.decode("latin-1").split("\r\n")
status = lines[0].split(" ")[1] if len(lines[0].split(" ")) > 1 else "000"
ctype = next((l.split(":", 1)[1].strip() for l in lines[1:] if l.lower().startswith("content-type:")), "")
print(status)
print(ctype)
sys.stdout.write(body.decode("utf-8", "replace"))
PY
raw() { # PORT PYBYTES [PYBODY] → HTTP_STATUS HTTP_CTYPE HTTP_BODY
  local out
  out=$(printf '%s' "$2" | python3 "$raw_py" "$1" "${@:3}")
  HTTP_STATUS=$(sed -n 1p <<<"$out")
  HTTP_CTYPE=$(sed -n 2p <<<"$out")
  HTTP_BODY=$(sed -n '3,$p' <<<"$out")
}
assert_json_error() { # STATUS CODE WHAT
  assert_http "$1" "$2" "$3"
  assert_contains "$HTTP_CTYPE" "application/json" "$3: Content-Type"
}

# ---- what libevent refuses on the API listener
raw "$api_port" 'b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 9000000\r\n\r\n"'
assert_json_error 413 payload_too_large "a body over 8 MiB (Content-Length)"
raw "$api_port" 'b"GARBAGE\r\n\r\n"'
assert_json_error 400 invalid_argument "a malformed request line"
raw "$api_port" 'b"GET /healthz HTTP/9.9 extra\r\nHost: x\r\n\r\n"'
assert_json_error 400 invalid_argument "a request line with four parts"
raw "$api_port" 'b"FOO /healthz HTTP/1.1\r\nHost: x\r\n\r\n"'
assert_json_error 405 method_not_allowed "an unknown method"
raw "$api_port" 'b"TRACE /healthz HTTP/1.1\r\nHost: x\r\n\r\n"'
assert_json_error 405 method_not_allowed "a method the API does not take (TRACE)"
raw "$api_port" 'b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n"'
assert_json_error 431 headers_too_large "a head over 64 KiB (431, refused before libevent sees it)"
raw "$api_port" 'b"POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 2\r\n\r\n{}"'
assert_json_error 400 invalid_argument "an Expect other than 100-continue"
raw "$api_port" 'b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGARBAGE\r\n\r\n"'
assert_contains "$HTTP_BODY" '{"error":{"code":"invalid_argument"' "a malformed request after a good one on the same connection"
assert_not_contains "$HTTP_BODY" "<HTML>" "no HTML after a good answer"

# ---- text PostgreSQL refuses: 400 invalid_argument naming where, never 503
auth="Authorization: Bearer $tok"
post="b'POST /v1/sandboxes HTTP/1.1\\r\\nHost: x\\r\\n$auth\\r\\nConnection: close\\r\\n'"
raw "$api_port" "$post" "b'{\"image\":\"a\\xff\"}'"
assert_json_error 400 invalid_argument "invalid UTF-8 in a body string"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" 'invalid UTF-8 in "image"' "the message names the field"
raw "$api_port" "$post" "b'{\"image\":\"$ITEST_IMAGE\",\"labels\":{\"t\\xfe\":\"x\"}}'"
assert_json_error 400 invalid_argument "invalid UTF-8 in a key"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" 'invalid UTF-8 in a key of "labels"' "the message names the object"
itest_http POST /v1/sandboxes "$tok" '{"image":"'"$ITEST_IMAGE"'","labels":{"team":"a\u0000b"}}'
assert_http 400 invalid_argument "a NUL in a label value"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" '"labels.team"' "the NUL's field is named"
itest_http GET "/v1/sandboxes?tenant=%FF" "$tok"
assert_http 400 invalid_argument "invalid UTF-8 in a query parameter"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" 'query parameter "tenant"' "the parameter is named"
itest_http GET "/v1/sandboxes/sbx_%FF" "$tok"
case "$HTTP_STATUS" in
  400|404) assert_http "$HTTP_STATUS" "*" "a percent-encoded %FF in the path" ;;
  *) fail "a percent-encoded %FF in the path: expected 400 or 404, got $HTTP_STATUS: $HTTP_BODY" ;;
esac
raw "$api_port" "b'GET /v1/sandboxes/sbx_\\xff HTTP/1.1\\r\\nHost: x\\r\\n$auth\\r\\nConnection: close\\r\\n\\r\\n'"
assert_json_error 400 invalid_argument "a raw 0xFF byte in the path"
raw "$api_port" "b'GET /v1/operations/op_\\xff\\xfe HTTP/1.1\\r\\nHost: x\\r\\n$auth\\r\\nConnection: close\\r\\n\\r\\n'"
assert_json_error 400 invalid_argument "raw invalid UTF-8 in an operation id"
raw "$api_port" "b'POST /v1/sandboxes HTTP/1.1\\r\\nHost: x\\r\\n$auth\\r\\nIdempotency-Key: k\\xff\\r\\nContent-Length: 2\\r\\nConnection: close\\r\\n\\r\\n{}'"
assert_json_error 400 invalid_argument "invalid UTF-8 in Idempotency-Key"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "Idempotency-Key" "the header is named"

# ---- the route listener answers its own errors as JSON
raw "$route_port" 'b"GARBAGE\r\n\r\n"'
assert_json_error 400 invalid_argument "a malformed request to the route listener"
raw "$route_port" 'b"GET /r/nosuchroute/ HTTP/1.1\r\nHost: x\r\n\r\n"'
assert_json_error 404 not_found "no such route"

# ---- still serving
code=$(curl -s -o /dev/null -w "%{http_code}" --max-time 10 "$SANDBOX_URL/healthz" || true)
assert_eq 200 "$code" "GET /healthz after the bad requests"
itest_http GET /v1/sandboxes "$tok"
assert_http 200 "" "an authenticated list after the bad requests"
echo "every error has the JSON shape: libevent's own, invalid UTF-8 and NUL (400, never 503), the route listener's"
