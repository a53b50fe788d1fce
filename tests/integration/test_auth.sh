#!/usr/bin/env bash
# Authentication and tenancy: bad or missing token 401 with an error body;
# another tenant's member sees 404 and an empty list; role checks (403).
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

ta=$(itest_tenant itest-auth-a)
tb=$(itest_tenant itest-auth-b)
tok_a=$(itest_token "$ta" member)
tok_b=$(itest_token "$tb" member)
tok_w=$(itest_token "$ta" worker itest-auth-worker)

export SANDBOX_TOKEN=$tok_a
assert_exit 0 sandbox create --tenant "$ta" --image "$ITEST_IMAGE" --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"

# bad, malformed and missing tokens
itest_http GET /v1/sandboxes "sbt_aaaaaaaaaaaaaaaaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
assert_http 401 unauthorized "unknown token"
itest_http GET /v1/sandboxes "not-a-token"
assert_http 401 unauthorized "malformed token"
itest_http GET /v1/sandboxes ""
assert_http 401 unauthorized "no token"
itest_http GET "/v1/sandboxes/$sbx" ""
assert_http 401 unauthorized "no token on a sandbox"
SANDBOX_TOKEN="sbt_aaaaaaaaaaaaaaaaaaaaaaaaaa_bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" assert_exit 3 sandbox get "$sbx"

# the owner sees it
itest_http GET "/v1/sandboxes/$sbx" "$tok_a"
assert_http 200 "" "owner get"

# another tenant's member: 404 everywhere, and not in its list
itest_http GET "/v1/sandboxes/$sbx" "$tok_b"
assert_http 404 not_found "other tenant get"
itest_http POST "/v1/sandboxes/$sbx/exec" "$tok_b" '{"argv":["true"]}'
assert_http 404 not_found "other tenant exec"
itest_http DELETE "/v1/sandboxes/$sbx" "$tok_b"
assert_http 404 not_found "other tenant delete"
itest_http GET /v1/sandboxes "$tok_b"
assert_http 200 "" "other tenant list"
assert_not_contains "$HTTP_BODY" "$sbx" "other tenant's list"
itest_http GET "/v1/sandboxes?tenant=$ta" "$tok_b"
assert_not_contains "$HTTP_BODY" "$sbx" "other tenant's list naming our tenant"
SANDBOX_TOKEN=$tok_b assert_exit 3 sandbox get "$sbx"
# a member may not create in another tenant
itest_http POST /v1/sandboxes "$tok_b" "{\"tenant\":\"$ta\",\"image\":\"$ITEST_IMAGE\"}"
case "$HTTP_STATUS" in
  403|404) ;;
  *) fail "member creating in another tenant: expected 403/404, got $HTTP_STATUS: $HTTP_BODY" ;;
esac

# the owner's list has it
itest_http GET /v1/sandboxes "$tok_a"
assert_http 200 "" "owner list"
assert_contains "$HTTP_BODY" "$sbx" "owner's list"

# a worker token may not use client endpoints
itest_http GET /v1/sandboxes "$tok_w"
assert_http 403 forbidden "worker token list"
itest_http GET "/v1/sandboxes/$sbx" "$tok_w"
assert_http 403 forbidden "worker token get"
itest_http POST /v1/sandboxes "$tok_w" "{\"image\":\"$ITEST_IMAGE\"}"
assert_http 403 forbidden "worker token create"

# a member token may not use worker endpoints
itest_http POST /v1/workers/register "$tok_a" \
  '{"name":"evil","runtime":"docker","isolation":["container"],"labels":{},"capacity":{"cpu_millis":1000,"memory_mib":512,"slots":1},"version":"x"}'
assert_http 403 forbidden "member register"
itest_http GET "/v1/workers/wrk_aaaaaaaaaaaaaaaaaaaaaaaaaa/poll?wait=1" "$tok_a"
assert_http 403 forbidden "member poll"
itest_http POST "/v1/workers/wrk_aaaaaaaaaaaaaaaaaaaaaaaaaa/report" "$tok_a" '{"operation_id":"op_x","attempt":1,"outcome":"succeeded"}'
assert_http 403 forbidden "member report"
itest_http GET /v1/workers "$tok_a"
assert_http 403 forbidden "member list workers"
itest_http POST "/v1/workers/wrk_aaaaaaaaaaaaaaaaaaaaaaaaaa/drain" "$tok_w"
assert_http 403 forbidden "worker token draining a worker"

# the route table's order: a /v1 path needs a token even when unknown (401),
# then an unknown path is 404, a known path with another method 405, and a
# known endpoint with a token of the wrong role 403
itest_http GET /v1/no-such-thing ""
assert_http 401 unauthorized "unknown /v1 path without a token"
itest_http GET /v1/no-such-thing "$tok_a"
assert_http 404 not_found "unknown /v1 path"
itest_http GET /no-such-thing ""
assert_http 404 not_found "unknown path outside /v1 (no token needed)"
itest_http POST "/v1/operations/op_aaaaaaaaaaaaaaaaaaaaaaaaaa" "$tok_a" '{}'
assert_http 405 method_not_allowed "POST on an operation"
itest_http PUT /v1/sandboxes "$tok_a" '{}'
assert_http 405 method_not_allowed "PUT on the sandboxes collection"
itest_http GET "/v1/sandboxes/$sbx" "$tok_w"
assert_http 403 forbidden "worker token reading a sandbox"
itest_http GET "/v1/sandboxes/$sbx/nope" "$tok_a"
assert_http 404 not_found "unknown sandbox subpath"
code=$(curl -s -o /dev/null -w '%{http_code}' -I --max-time 10 "$SANDBOX_URL/healthz")
assert_eq 200 "$code" "HEAD /healthz"

export SANDBOX_TOKEN=$tok_a
assert_exit 0 sandbox delete "$sbx" --wait
