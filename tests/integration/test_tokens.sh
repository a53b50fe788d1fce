#!/usr/bin/env bash
# Tenants and tokens through the API and CLI: an admin creates a tenant and a
# member token (secret printed once, only its hash kept); the member works in
# its tenant only and cannot manage tokens; list never shows secrets; revoked
# and expired tokens get 401 at once, on a second controller sharing the
# database within a second (its remembered lookup is forgotten by NOTIFY).
# itest-timeout: 120
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

tenant=$(itest_tenant itest-tok)
other=$(itest_tenant itest-tok-other)
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN

assert_exit 0 sandbox tenants create "$tenant"
assert_contains "$ITEST_OUT" "$tenant" "tenants create output"
assert_exit 3 sandbox tenants create "$tenant"
assert_contains "$ITEST_ERR" "conflict" "creating a tenant twice"
assert_exit 0 sandbox tenants create "$other"
assert_exit 3 sandbox tokens create --tenant "no-such-$tenant" --role member
assert_contains "$ITEST_ERR" "not_found" "token for a missing tenant"
# Creating a sandbox in a tenant that does not exist is not_found for an
# admin too (a typo never makes a new tenant), on the API and the CLI alike.
itest_http POST /v1/sandboxes "$ITEST_ADMIN_TOKEN" "{\"tenant\":\"no-such-$tenant\",\"image\":\"$ITEST_IMAGE\"}"
assert_http 404 not_found "admin create in a missing tenant"
assert_contains "$HTTP_BODY" "sandbox tenants create" "the 404 says how to make the tenant"
assert_exit 3 sandbox create --tenant "no-such-$tenant" --image "$ITEST_IMAGE"
assert_contains "$ITEST_ERR" "not_found" "CLI create in a missing tenant"
n=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT count(*) FROM tenants WHERE name = 'no-such-$tenant'")
assert_eq 0 "$n" "no tenant made by a create or a token request"

assert_exit 0 sandbox tokens create --tenant "$tenant" --role member --name ci
member=$ITEST_OUT
assert_match "$member" '^sbt_[a-z2-7]{26}_[A-Za-z0-9_-]{43}$' "member secret alone on stdout"
tid=$(printf '%s' "$ITEST_ERR" | sed -n 's/.*token id: \(tok_[a-z2-7]*\).*/\1/p')
assert_match "$tid" '^tok_' "token id on stderr"
# the secret part: everything after the id (it may itself hold "_" or "-",
# so it is not "after the last _")
secret=${member#sbt_*_}
assert_eq 43 "${#secret}" "length of the secret part"
hash=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT hash FROM api_tokens WHERE id = '$tid'")
assert_not_contains "$hash" "$secret" "the stored hash holds no secret"

# list shows the token without its secret
assert_exit 0 sandbox tokens list --tenant "$tenant" --json
assert_contains "$ITEST_OUT" "$tid" "token listed"
assert_not_contains "$ITEST_OUT" "$secret" "secret in the list"
assert_eq member "$(itest_json "$ITEST_OUT" tokens.0.role)" "listed role"

# the member: own tenant yes, other tenant no, token management no
assert_exit 0 sandbox --token "$member" tenants list --json
assert_eq "$tenant" "$(itest_json "$ITEST_OUT" tenants.0.name)" "member sees its tenant"
assert_eq 1 "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["tenants"]))' "$ITEST_OUT")" "member sees one tenant"
assert_exit 3 sandbox --token "$member" tenants get "$other"
assert_contains "$ITEST_ERR" "not_found" "another tenant is not found for a member"
assert_exit 3 sandbox --token "$member" tokens list
assert_contains "$ITEST_ERR" "forbidden" "member listing tokens"
itest_http POST /v1/tokens "$member" "{\"tenant\":\"$tenant\",\"role\":\"admin\"}"
assert_http 403 forbidden "member creating an admin token"
itest_http POST /v1/tokens "$ITEST_ADMIN_TOKEN" "{\"tenant\":\"$tenant\",\"role\":\"root\"}"
assert_http 400 invalid_argument "unknown role"
itest_http POST /v1/tokens "$ITEST_ADMIN_TOKEN" "{\"tenant\":\"$tenant\",\"role\":\"member\",\"x\":1}"
assert_http 400 invalid_argument "unknown field"
itest_http GET /v1/sandboxes "$member"
assert_http 200 "" "member before revocation"

# revocation takes effect at once
assert_exit 0 sandbox tokens revoke "$tid"
assert_contains "$ITEST_OUT" "revoked=20" "revoke output"
itest_http GET /v1/sandboxes "$member"
assert_http 401 unauthorized "revoked token"

# expiry
# (5 s: a busy host once took over a second from the create to the first use)
assert_exit 0 sandbox tokens create --tenant "$tenant" --role member --ttl 5
short=$ITEST_OUT
itest_http GET /v1/sandboxes "$short"
assert_http 200 "" "token before it expires"
itest_wait_until 15 "the 5 s token expires" bash -c \
  "[ \"\$(curl -s -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $short' '$SANDBOX_URL/v1/sandboxes')\" = 401 ]"
itest_http GET /v1/sandboxes "$short"
assert_http 401 unauthorized "expired token"

# A second controller on the same database remembers a token's lookup
# (sandbox_auth_cache_total hits), and a revocation through the first
# reaches it within a second (a NOTIFY), not after its cache time.
port2=$(itest_free_port)
url2="http://127.0.0.1:$port2"
log2="$ITEST_TMP/tokens-controller2.log"
itest_watch_log "$log2"
"$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$port2" >>"$log2" 2>&1 </dev/null &
ctl2=$!
itest_track_pid "$ctl2"
itest_wait_healthz "$url2" "$ctl2" controller "$log2" || fail "second controller did not start"
assert_exit 0 sandbox tokens create --tenant "$tenant" --role member --name two
two=$ITEST_OUT
tid2=$(printf '%s' "$ITEST_ERR" | sed -n 's/.*token id: \(tok_[a-z2-7]*\).*/\1/p')
# three requests back to back (no check between them: a lookup is kept
# 2 s, which a loaded, sanitized host's checks between requests outlasted)
codes=
for i in 1 2 3; do
  codes+="$(curl -s -o /dev/null -w '%{http_code}' --max-time 30 -H "Authorization: Bearer $two" \
    "$url2/v1/sandboxes") "
done
assert_eq "200 200 200 " "$codes" "member on the second controller, three times"
hits=$(curl -s -H "Authorization: Bearer $ITEST_ADMIN_TOKEN" "$url2/metrics" \
  | sed -n 's/^sandbox_auth_cache_total{result="hit"} \([0-9.e+]*\)$/\1/p')
[ -n "$hits" ] && python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 2 else 1)' "$hits" \
  || fail "second controller remembered no token lookup (hits: ${hits:-none})"
# Make sure the token is cached there right now, then revoke it on the first.
SANDBOX_URL=$url2 itest_http GET /v1/sandboxes "$two"
assert_http 200 "" "member on the second controller before revocation"
assert_exit 0 sandbox tokens revoke "$tid2"
t0=$(date +%s%N)
refused() { SANDBOX_URL=$url2 itest_http GET /v1/sandboxes "$two"; [ "$HTTP_STATUS" = 401 ]; }
until refused; do
  [ $(( ($(date +%s%N) - t0) / 1000000 )) -lt 1000 ] || fail "the second controller still took the revoked token after 1 s"
  sleep 0.05
done
itest_log "second controller refused the revoked token after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
echo "tenants and tokens managed; revoked and expired tokens refused"
