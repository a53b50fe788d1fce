#!/usr/bin/env bash
# GET /v1/openapi.json: the controller serves the OpenAPI document it was
# built with, byte for byte docs/openapi.json, as application/json, with no
# token (and with a bad one: the document is public), HEAD too; other
# methods are 405. That every answer of the run meets the document is the
# run's api_schema check (tests/openapi/check.mjs); that every route is in
# it, tests/unit/test_openapi.c.
# itest-timeout: 60
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
doc="$(dirname "$0")/../../docs/openapi.json"

out="$ITEST_TMP/openapi.$$.json"
hdr=$(curl -s -D - -o "$out" "$SANDBOX_URL/v1/openapi.json") || fail "GET /v1/openapi.json failed"
assert_contains "$hdr" "HTTP/1.1 200" "GET /v1/openapi.json without a token"
assert_contains "$hdr" "Content-Type: application/json" "the document's content type"
cmp -s "$out" "$doc" || fail "the served document differs from docs/openapi.json (rebuild the controller?)"
# read from the file: the document is over the 128 KiB one argument may be
assert_eq "3.1.0" "$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["openapi"])' "$out")" \
  "the served document's openapi version"

itest_http GET /v1/openapi.json "sbt_notatoken"
assert_http 200 "" "the document with a malformed token"
assert_eq "$(head -c 300 "$doc")" "${HTTP_BODY:0:300}" "the document's start with a malformed token"
hdr=$(curl -s -I "$SANDBOX_URL/v1/openapi.json") || fail "HEAD /v1/openapi.json failed"
assert_contains "$hdr" "HTTP/1.1 200" "HEAD /v1/openapi.json"
itest_http POST /v1/openapi.json "$ITEST_ADMIN_TOKEN" '{}'
assert_http 405 method_not_allowed "POST /v1/openapi.json"
rm -f "$out"
echo "the controller serves docs/openapi.json at /v1/openapi.json without a token"
