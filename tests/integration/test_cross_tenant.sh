#!/usr/bin/env bash
# Cross-tenant isolation on every endpoint: a member of tenant B never sees,
# changes or runs anything of tenant A (404 for A's objects, 403 for
# endpoints its role may not call), the same Idempotency-Key in two tenants
# gives two sandboxes, and A's sandbox is untouched afterwards.
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN

ta=$(itest_tenant itest-xa)
tb=$(itest_tenant itest-xb)
assert_exit 0 sandbox tenants create "$ta"
assert_exit 0 sandbox tenants create "$tb"
a=$("$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant "$ta" --role member)
b=$("$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant "$tb" --role member)
w=$("$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant itest-workers --role worker)

# A's sandbox, made with an idempotency key B will reuse.
itest_http POST /v1/sandboxes "$a" "{\"image\":\"$ITEST_IMAGE\",\"cpu_millis\":100,\"memory_mib\":32}"
assert_http 202 "" "A creates"
sa=$(itest_json "$HTTP_BODY" sandbox.id)
opa=$(itest_json "$HTTP_BODY" operation.id)
itest_track "$sa"
assert_exit 0 sandbox --token "$a" wait "$opa" --timeout 120
itest_http POST "/v1/sandboxes/$sa/exec" "$a" '{"argv":["echo","a"]}'
assert_http 202 "" "A execs"
exa=$(itest_json "$HTTP_BODY" operation.id)
assert_exit 0 sandbox --token "$a" wait "$exa" --timeout 60

# Every sandbox and operation endpoint, as B: not found, never forbidden
# (that would confirm the id exists).
itest_http GET "/v1/sandboxes/$sa" "$b"
assert_http 404 not_found "B gets A's sandbox"
assert_not_contains "$HTTP_BODY" "$ta" "the 404 names A's tenant"
itest_http DELETE "/v1/sandboxes/$sa" "$b"
assert_http 404 not_found "B deletes A's sandbox"
itest_http POST "/v1/sandboxes/$sa/exec" "$b" '{"argv":["echo","b"]}'
assert_http 404 not_found "B execs in A's sandbox"
itest_http GET "/v1/operations/$opa" "$b"
assert_http 404 not_found "B gets A's create operation"
itest_http GET "/v1/operations/$exa?wait=1" "$b"
assert_http 404 not_found "B waits on A's exec operation"
itest_http GET "/v1/sandboxes" "$b"
assert_http 200 "" "B lists"
assert_not_contains "$HTTP_BODY" "$sa" "B's list"
itest_http GET "/v1/sandboxes?tenant=$ta" "$b"
assert_not_contains "$HTTP_BODY" "$sa" "B's list filtered to A's tenant"
itest_http GET "/v1/sandboxes?all=true" "$b"
assert_not_contains "$HTTP_BODY" "$sa" "B's list with deleted ones"
itest_http POST /v1/sandboxes "$b" "{\"tenant\":\"$ta\",\"image\":\"$ITEST_IMAGE\"}"
assert_http 403 forbidden "B creates in A's tenant"

# Tenants and tokens.
itest_http GET "/v1/tenants/$ta" "$b"
assert_http 404 not_found "B gets A's tenant"
itest_http GET /v1/tenants "$b"
assert_not_contains "$HTTP_BODY" "$ta" "B's tenant list"
itest_http PUT "/v1/tenants/$ta/policy" "$b" '{"max_sandboxes":1}'
assert_http 403 forbidden "B sets A's policy"
itest_http PUT "/v1/tenants/$tb/policy" "$b" '{"max_sandboxes":1000}'
assert_http 403 forbidden "B sets its own policy"
itest_http GET /v1/tokens "$b"
assert_http 403 forbidden "B lists tokens"
itest_http POST /v1/tokens "$b" "{\"tenant\":\"$ta\",\"role\":\"member\"}"
assert_http 403 forbidden "B makes a token for A"
aid=$(printf '%s' "$a" | cut -d_ -f2)
itest_http DELETE "/v1/tokens/tok_$aid" "$b"
assert_http 403 forbidden "B revokes A's token"

# Worker endpoints with a member token, client endpoints with a worker token.
itest_http GET /v1/workers "$b"
assert_http 403 forbidden "B lists workers"
itest_http POST /v1/workers/itest-worker/drain "$b"
assert_http 403 forbidden "B drains a worker"
itest_http POST /v1/workers/register "$b" '{"name":"evil","runtime":"docker","isolation":["container"],"capacity":{"cpu_millis":1,"memory_mib":1,"slots":1}}'
assert_http 403 forbidden "B registers a worker"
itest_http GET /v1/workers/wrk_x/poll "$b"
assert_http 403 forbidden "B polls as a worker"
itest_http POST /v1/workers/wrk_x/report "$b" '{}'
assert_http 403 forbidden "B reports as a worker"
itest_http POST /v1/workers/wrk_x/heartbeat "$b" '{}'
assert_http 403 forbidden "B heartbeats as a worker"
itest_http GET "/v1/sandboxes/$sa" "$w"
assert_http 403 forbidden "a worker token reads a sandbox"
itest_http GET /v1/tenants "$w"
assert_http 403 forbidden "a worker token lists tenants"

# The same Idempotency-Key in B is B's own request.
key="xt-$RANDOM$RANDOM"
itest_http POST /v1/sandboxes "$a" "{\"image\":\"$ITEST_IMAGE\",\"cpu_millis\":100,\"memory_mib\":32}"
body_a=$HTTP_BODY
curl -s -o "$ITEST_TMP/xa.json" -X POST -H "Authorization: Bearer $a" -H "Idempotency-Key: $key" \
  -H 'Content-Type: application/json' --data-binary "{\"image\":\"$ITEST_IMAGE\",\"cpu_millis\":100,\"memory_mib\":32}" \
  "$SANDBOX_URL/v1/sandboxes"
curl -s -o "$ITEST_TMP/xb.json" -X POST -H "Authorization: Bearer $b" -H "Idempotency-Key: $key" \
  -H 'Content-Type: application/json' --data-binary "{\"image\":\"$ITEST_IMAGE\",\"cpu_millis\":100,\"memory_mib\":32}" \
  "$SANDBOX_URL/v1/sandboxes"
ka=$(itest_json "$(cat "$ITEST_TMP/xa.json")" sandbox.id)
kb=$(itest_json "$(cat "$ITEST_TMP/xb.json")" sandbox.id)
itest_track "$ka"
itest_track "$kb"
itest_track "$(itest_json "$body_a" sandbox.id)"
[ "$ka" != "$kb" ] || fail "the same Idempotency-Key in two tenants returned one sandbox ($ka)"
itest_http GET "/v1/sandboxes/$kb" "$b"
assert_http 200 "" "B reads its own keyed sandbox"
assert_eq "$tb" "$(itest_json "$HTTP_BODY" sandbox.tenant)" "tenant of B's keyed sandbox"

# A's sandbox is untouched and still answers; the admin sees both tenants.
itest_http GET "/v1/sandboxes/$sa" "$a"
assert_http 200 "" "A reads its sandbox"
assert_eq running "$(itest_json "$HTTP_BODY" sandbox.phase)" "A's sandbox after B's attempts"
assert_exit 0 sandbox --token "$a" exec "$sa" -- echo still-mine
assert_eq still-mine "$ITEST_OUT" "exec by A after B's attempts"
itest_http GET "/v1/sandboxes/$kb" "$ITEST_ADMIN_TOKEN"
assert_http 200 "" "the admin reads B's sandbox"
itest_http GET "/v1/sandboxes/$sa" "$ITEST_ADMIN_TOKEN"
assert_http 200 "" "the admin reads A's sandbox"
echo "no endpoint lets one tenant see or touch another's objects"
