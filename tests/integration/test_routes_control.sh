#!/usr/bin/env bash
# Public routes, control plane (issue 6, first part; the HTTP data path
# comes next): share and unshare are operations; a route has an unguessable
# name and a path-based URL; a token route's access token is shown once and
# only its hash is stored; routes go away with unshare, with their expiry
# (one reconcile tick) and in the same transaction as the sandbox leaving
# running; the tenant policy can forbid routes; another tenant sees nothing.
# itest-timeout: 120
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-rt)
other=$(itest_tenant itest-rt-other)
itest_as_admin "$tenant" "$other"
member=$(itest_token "$tenant" member)
stranger=$(itest_token "$other" member)
psql_q() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }

# The CLI pointed at the route listener instead of the API says so.
assert_exit 3 sandbox --url "$SANDBOX_ROUTE_URL" list
assert_contains "$ITEST_ERR" "route listener" "the CLI at the route port"
assert_contains "$ITEST_ERR" "SANDBOX_URL" "the CLI at the route port says what to change"

assert_exit 0 sandbox --token "$member" create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --wait --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"

# share with a token: 202, an operation, the URL and the token once
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":8080}'
assert_http 202 "" "share"
rid=$(itest_json "$HTTP_BODY" route.id)
name=$(itest_json "$HTTP_BODY" route.name)
url=$(itest_json "$HTTP_BODY" route.url)
secret=$(itest_json "$HTTP_BODY" access_token)
op=$(itest_json "$HTTP_BODY" operation.id)
assert_match "$rid" '^rt_[a-z2-7]{26}$' "route id"
assert_match "$name" '^[a-z2-7]{26}$' "route name (a DNS label, 130 random bits)"
assert_eq "$SANDBOX_ROUTE_URL/r/$name/" "$url" "path-based route URL (on the route listener)"
assert_match "$secret" '^sbr_[A-Za-z0-9_-]{43}$' "access token shown once"
assert_eq share "$(itest_json "$HTTP_BODY" operation.kind)" "operation kind"
assert_exit 0 sandbox --token "$member" wait "$op" --timeout 30
assert_exit 0 sandbox --token "$member" operation "$op" --json
assert_eq "$rid" "$(itest_json "$ITEST_OUT" operation.result.route.id)" "share result names the route"
assert_not_contains "$ITEST_OUT" "${secret#sbr_}" "the operation keeps no secret"
hash=$(psql_q "SELECT secret_hash FROM routes WHERE id = '$rid'")
assert_match "$hash" '^[0-9a-f]{64}$' "only a hash is stored"
assert_not_contains "$(psql_q "SELECT request::text FROM operations WHERE id = '$op'")" "${secret#sbr_}" "request row"
itest_http GET "/v1/sandboxes/$sbx/routes" "$member"
assert_http 200 "" "routes list"
assert_eq active "$(itest_json "$HTTP_BODY" routes.0.state)" "route state"
assert_eq "$url" "$(itest_json "$HTTP_BODY" routes.0.url)" "listed URL"
assert_not_contains "$HTTP_BODY" "${secret#sbr_}" "list shows no secret"

# another tenant: nothing
itest_http GET "/v1/sandboxes/$sbx/routes" "$stranger"
assert_http 404 not_found "another tenant lists the routes"
itest_http POST "/v1/sandboxes/$sbx/routes" "$stranger" '{"port":80,"auth":"public"}'
assert_http 404 not_found "another tenant shares"
itest_http DELETE "/v1/sandboxes/$sbx/routes/$rid" "$stranger"
assert_http 404 not_found "another tenant unshares"

# bad input
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":0}'
assert_http 400 invalid_argument "port 0"
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":80,"auth":"maybe"}'
assert_http 400 invalid_argument "unknown auth"
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":80,"host":"x"}'
assert_http 400 invalid_argument "unknown field"
itest_http DELETE "/v1/sandboxes/$sbx/routes/rt_aaaaaaaaaaaaaaaaaaaaaaaaaa" "$member"
assert_http 404 not_found "unshare of a route that does not exist"

# unshare: an operation; the route is removed
itest_http DELETE "/v1/sandboxes/$sbx/routes/$rid" "$member"
assert_http 202 "" "unshare"
assert_exit 0 sandbox --token "$member" wait "$(itest_json "$HTTP_BODY" operation.id)" --timeout 30
itest_http GET "/v1/sandboxes/$sbx/routes" "$member"
assert_eq '[]' "$(itest_json "$HTTP_BODY" routes)" "no active route after unshare"
itest_http GET "/v1/sandboxes/$sbx/routes?all=true" "$member"
assert_eq unshare "$(itest_json "$HTTP_BODY" routes.0.removed_reason)" "removed reason"

# expiry: a public route with a 10 s TTL is gone within a tick after it
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":8081,"auth":"public","ttl_seconds":10}'
assert_http 202 "" "share public with ttl"
[ -z "$(itest_json "$HTTP_BODY" access_token 2>/dev/null || true)" ] || fail "a public route got an access token"
rexp=$(itest_json "$HTTP_BODY" route.id)
assert_exit 0 sandbox --token "$member" wait "$(itest_json "$HTTP_BODY" operation.id)" --timeout 30
itest_wait_until 20 "route $rexp expired" \
  sh -c "[ \"\$($ITEST_PGBIN/psql -X -q -At '$DATABASE_URL' -c \"SELECT removed_reason FROM routes WHERE id = '$rexp'\")\" = expired ]"

# delete: the routes go in the same transaction as the sandbox leaving running
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":8082,"auth":"public"}'
rdel=$(itest_json "$HTTP_BODY" route.id)
assert_exit 0 sandbox --token "$member" wait "$(itest_json "$HTTP_BODY" operation.id)" --timeout 30
assert_exit 0 sandbox --token "$member" delete "$sbx" --wait --timeout 60
assert_eq "removed|sandbox deleting" "$(psql_q "SELECT state || '|' || removed_reason FROM routes WHERE id = '$rdel'")" "route of the deleted sandbox"
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":8083}'
assert_http 409 conflict "sharing a deleted sandbox"

# the CLI: share prints the URL and the token once, routes lists, unshare
assert_exit 0 sandbox --token "$member" create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --wait --timeout 120
read -r sbx3 _ <<<"$ITEST_OUT"
itest_track "$sbx3"
assert_exit 0 sandbox --token "$member" share "$sbx3" --port 8080 --wait --timeout 30
assert_match "$(printf '%s\n' "$ITEST_OUT" | sed -n 1p)" "^$SANDBOX_ROUTE_URL/r/[a-z2-7]{26}/\$" "share prints the URL first"
assert_match "$(printf '%s\n' "$ITEST_OUT" | sed -n 2p)" '^sbr_' "then the access token"
assert_contains "$ITEST_ERR" "shown only now" "the token is announced once"
cli_rid=$(printf '%s' "$ITEST_ERR" | sed -n 's/^route \(rt_[a-z2-7]*\),.*/\1/p')
assert_match "$cli_rid" '^rt_' "route id on stderr"
assert_exit 0 sandbox --token "$member" routes "$sbx3"
assert_contains "$ITEST_OUT" "$cli_rid" "routes lists the route"
assert_contains "$ITEST_OUT" "active" "routes shows its state"
assert_exit 2 sandbox --token "$member" share "$sbx3" --port 8080 --auth maybe
assert_exit 0 sandbox --token "$member" unshare "$sbx3" "$cli_rid" --wait --timeout 30
assert_contains "$ITEST_OUT" "succeeded" "unshare --wait"
assert_exit 0 sandbox --token "$member" routes "$sbx3" --all --json
assert_eq removed "$(itest_json "$ITEST_OUT" routes.0.state)" "state after the CLI unshare"

# a tenant policy without routes
assert_exit 0 sandbox tenants update "$tenant" --policy '{"routes":false}'
assert_exit 0 sandbox --token "$member" create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --wait --timeout 120
read -r sbx2 _ <<<"$ITEST_OUT"
itest_track "$sbx2"
itest_http POST "/v1/sandboxes/$sbx2/routes" "$member" '{"port":8080}'
assert_http 422 policy_denied "routes forbidden by the tenant policy"
echo "routes are operations, unguessable, hashed, and removed with unshare, expiry and delete"
