#!/usr/bin/env bash
# Extend: `sandbox extend SBX --ttl N` (POST /v1/sandboxes/{id}/extend) sets
# a sandbox to expire N seconds from now, as an extend operation finished
# before the answer, with a sandbox.extended event. A sandbox with a 10 s TTL
# extended to 120 s outlives its first TTL; extended to 5 s it is deleted by
# the TTL pass soon after. Over the ceilings 422 naming the rule, another
# tenant's 404, a deleted one 409, a malformed body 400, an Idempotency-Key
# replayed, the tenant's operation rate applied; a sandbox not running yet
# gets the TTL it starts with. Traffic goes only to the test's controller.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

# A member of tenant A does the work; a member of tenant B tries to reach it.
ta=$(itest_tenant itest-exta)
a=$(itest_token "$ta" member)
b=$(itest_token "$(itest_tenant itest-extb)" member)
export SANDBOX_TOKEN=$a

# epoch seconds of an RFC 3339 time
epoch() { date -u -d "$1" +%s; }
field() { # field SANDBOX_ID PATH: a field of the sandbox as the API shows it now
  local out
  out=$(sandbox get "$1" --json) || return 1
  itest_json "$out" "sandbox.$2"
}
phase_is() { [ "$(field "$1" phase)" = "$2" ]; }

assert_exit 0 sandbox create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --ttl 10 --wait --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
t0=$(date +%s)
e0=$(field "$sbx" expires_at)
assert_match "$e0" '^20[0-9-]+T[0-9:.]+Z$' "expires_at of the 10 s sandbox"

# --- 120 s from now: printed, stored, the operation already succeeded
assert_exit 0 sandbox extend "$sbx" --ttl 120
e1=$ITEST_OUT
assert_match "$e1" '^20[0-9-]+T[0-9:.]+Z$' "the new expiry printed by extend"
now=$(date +%s)
d=$(($(epoch "$e1") - now))
[ "$d" -ge 110 ] && [ "$d" -le 121 ] || fail "extend --ttl 120 expires in ${d}s"
[ "$(epoch "$e1")" -gt "$(epoch "$e0")" ] || fail "expires_at did not move: $e0 -> $e1"
assert_eq "$e1" "$(field "$sbx" expires_at)" "sandbox.expires_at after the extend"
assert_eq 10 "$(field "$sbx" ttl_seconds)" "ttl_seconds keeps what create asked for"

assert_exit 0 sandbox extend "$sbx" --ttl 120 --json
op=$(itest_json "$ITEST_OUT" operation.id)
assert_eq extend "$(itest_json "$ITEST_OUT" operation.kind)" "operation.kind"
assert_eq succeeded "$(itest_json "$ITEST_OUT" operation.state)" "operation.state"
assert_eq "$e1" "$(itest_json "$ITEST_OUT" operation.result.previous_expires_at)" "result.previous_expires_at"
assert_eq 120 "$(itest_json "$ITEST_OUT" operation.result.ttl_seconds)" "result.ttl_seconds"
e2=$(itest_json "$ITEST_OUT" operation.result.expires_at)
assert_exit 0 sandbox wait "$op" --timeout 5
assert_exit 0 sandbox get "$sbx" --json
assert_contains "$ITEST_OUT" "$op" "the sandbox's operations list the extend"

# --- the events: sandbox.extended with both expiries, the operation's states
assert_exit 0 sandbox events --sandbox "$sbx" --operation "$op" --json
python3 - "$ITEST_OUT" "$e1" "$e2" "$op" <<'EOF' || fail "events of the extend"
import json, sys
evs = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
kinds = [e["kind"] for e in evs]
assert kinds == ["operation.pending", "operation.admitted", "sandbox.extended", "operation.succeeded"] or \
    kinds == ["operation.pending", "operation.admitted", "operation.succeeded", "sandbox.extended"], kinds
ext = [e for e in evs if e["kind"] == "sandbox.extended"][0]
assert ext["data"] == {"ttl_seconds": 120, "previous_expires_at": sys.argv[2], "expires_at": sys.argv[3]}, ext
assert ext["operation_id"] == sys.argv[4], ext
assert all(e["data"].get("kind") == "extend" for e in evs if e["kind"].startswith("operation.")), evs
EOF

# --- over the ceilings: 422 naming the rule (CLI exit 1); nothing moves
itest_http POST "/v1/sandboxes/$sbx/extend" "$a" '{"ttl_seconds":86401}'
assert_http 422 policy_denied "extend over the server ceiling"
assert_contains "$HTTP_BODY" "over the server ceiling max_ttl_seconds = 86400" "the ceiling named"
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$ta" --policy '{"max_ttl_seconds":300}'
assert_exit 1 sandbox extend "$sbx" --ttl 301
assert_contains "$ITEST_ERR" "policy_denied: ttl_seconds 301 is over the tenant policy max_ttl_seconds = 300" \
  "the tenant rule named"
assert_exit 0 sandbox extend "$sbx" --ttl 300
e3=$ITEST_OUT
assert_eq "$e3" "$(field "$sbx" expires_at)" "expires_at after the extend at the tenant limit"

# --- strict bodies: 400 invalid_argument
for body in '{}' '{"ttl_seconds":0}' '{"ttl_seconds":"60"}' '{"ttl_seconds":60.0}' '{"ttl_seconds":true}' \
  '{"ttl_seconds":60,"extra":1}' '[60]' '{"ttl_seconds":2592001}'; do
  itest_http POST "/v1/sandboxes/$sbx/extend" "$a" "$body"
  assert_http 400 invalid_argument "extend with the body $body"
done
itest_http POST "/v1/sandboxes/$sbx/extend" "$a" 'not json'
assert_http 400 invalid_json "extend with a body that is not JSON"
assert_eq "$e3" "$(field "$sbx" expires_at)" "expires_at after the refused requests"

# --- another tenant: 404, as if there were no such sandbox; A's is untouched
itest_http POST "/v1/sandboxes/$sbx/extend" "$b" '{"ttl_seconds":60}'
assert_http 404 not_found "B extends A's sandbox"
assert_not_contains "$HTTP_BODY" "$ta" "the 404 names A's tenant"
assert_exit 3 sandbox --token "$b" extend "$sbx" --ttl 60
assert_contains "$ITEST_ERR" "not_found" "the CLI's error for B"
itest_http POST "/v1/sandboxes/sbx_nosuch/extend" "$a" '{"ttl_seconds":60}'
assert_http 404 not_found "extend of a sandbox that does not exist"
assert_eq "$e3" "$(field "$sbx" expires_at)" "A's expiry after B's attempts"

# --- Idempotency-Key: the same operation again, the expiry moved once
assert_exit 0 sandbox extend "$sbx" --ttl 200 --idempotency-key "ext-$sbx" --json
k1=$(itest_json "$ITEST_OUT" operation.id)
ek=$(itest_json "$ITEST_OUT" operation.result.expires_at)
sleep 1.2
assert_exit 0 sandbox extend "$sbx" --ttl 200 --idempotency-key "ext-$sbx" --json
assert_eq "$k1" "$(itest_json "$ITEST_OUT" operation.id)" "the replayed extend's operation"
assert_eq "$ek" "$(field "$sbx" expires_at)" "expires_at after the replay"
itest_http POST "/v1/sandboxes/$sbx/extend" "$a" '{"ttl_seconds":250}' # no key: a new one
assert_http 200 "" "extend without a key"
curl -s -o "$ITEST_TMP/idem.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $a" \
  -H "Idempotency-Key: ext-$sbx" -H 'Content-Type: application/json' --data-binary '{"ttl_seconds":100}' \
  "$SANDBOX_URL/v1/sandboxes/$sbx/extend" >"$ITEST_TMP/idem.code"
assert_eq 409 "$(cat "$ITEST_TMP/idem.code")" "the key reused for another ttl"
assert_contains "$(cat "$ITEST_TMP/idem.json")" "was already used for a different extend request" "its message"

# --- it outlives its first TTL (10 s from t0) by far
left=$((t0 + 16 - $(date +%s)))
[ "$left" -gt 0 ] && sleep "$left"
phase_is "$sbx" running || fail "the extended sandbox is $(field "$sbx" phase) 16 s after a 10 s TTL"
[ -n "$(docker ps -q --filter "label=dev.sandbox.id=$sbx")" ] || fail "no running container 16 s after a 10 s TTL"

# --- 5 s from now: the TTL pass deletes it soon after, not before
assert_exit 0 sandbox extend "$sbx" --ttl 5
t5=$(date +%s)
sleep 2
phase_is "$sbx" running || fail "deleted before its 5 s were up"
itest_wait_until 20 "phase deleted after extend --ttl 5" phase_is "$sbx" deleted
took=$(($(date +%s) - t5))
[ "$took" -ge 4 ] || fail "deleted after ${took}s of a 5 s TTL"
assert_eq "" "$(docker ps -aq --filter "label=dev.sandbox.id=$sbx")" "containers left after the TTL"
assert_exit 0 sandbox events --sandbox "$sbx" --kind sandbox.expired --json
assert_contains "$ITEST_OUT" '"sandbox.expired"' "the TTL pass's sandbox.expired"
echo "extended to 5 s: deleted after ${took}s"

# --- a deleted sandbox: 409 conflict (CLI exit 3)
itest_http POST "/v1/sandboxes/$sbx/extend" "$a" '{"ttl_seconds":60}'
assert_http 409 conflict "extend of a deleted sandbox"
assert_contains "$HTTP_BODY" "is deleted" "the conflict says why"
assert_exit 3 sandbox extend "$sbx" --ttl 60
assert_contains "$ITEST_ERR" "conflict" "the CLI's error for a deleted sandbox"

# --- not running yet (no worker has its label): '-' and the TTL it starts with
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --ttl 60 --selector nosuch=label
read -r pend _ <<<"$ITEST_OUT"
itest_track "$pend"
assert_exit 0 sandbox extend "$pend" --ttl 90
assert_eq "-" "$ITEST_OUT" "extend of a pending sandbox prints"
assert_contains "$ITEST_ERR" "not running yet: it expires 90 s after it starts" "its note"
assert_eq 90 "$(field "$pend" ttl_seconds)" "ttl_seconds of the pending sandbox"
assert_eq null "$(field "$pend" expires_at)" "expires_at of the pending sandbox"
# an admin reaches every tenant's sandbox
assert_exit 0 sandbox --token "$ITEST_ADMIN_TOKEN" extend "$pend" --ttl 95
assert_eq 95 "$(field "$pend" ttl_seconds)" "ttl_seconds after the admin's extend"

# --- an extend is an operation for the rate limits: 180 at once from two
# tokens of A (90 each, within a token's request burst of 100) pass the
# tenant's operation burst (40 at 20 a second): 429 rate_limited naming
# rate_operations_per_second. Their bodies are refused (400), so they cost
# the controller little: the operation bucket is taken before the body is
# read, and the flood outpaces the refill however slow the machine.
a2=$(itest_token "$ta" member)
python3 - "$SANDBOX_URL" "$pend" "$a" "$a2" <<'EOF' || fail "extends past the operation rate"
import http.client, json, sys, threading, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
codes, msgs, lock = [], set(), threading.Lock()
def flood(token, n):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    for _ in range(n):
        c.request("POST", "/v1/sandboxes/%s/extend" % sys.argv[2], body=b'{"ttl_seconds":0}',
                  headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read()
        with lock:
            codes.append(r.status)
            if r.status == 429:
                msgs.add(json.loads(body)["error"]["message"])
        if r.status == 429 or r.getheader("Connection", "").lower() == "close":
            c.close()
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
ts = [threading.Thread(target=flood, args=(t, 45)) for t in sys.argv[3:] for _ in range(2)]
for t in ts:
    t.start()
for t in ts:
    t.join()
refused, limited = codes.count(400), codes.count(429)
assert refused + limited == 180 and refused >= 40 and limited >= 1, codes
assert all("rate_operations_per_second" in m for m in msgs), msgs
print("extends at once: %d answered 400, %d answered 429" % (refused, limited))
EOF
sleep 3 # the bucket refills (Retry-After is at most a second or two)
assert_exit 0 sandbox extend "$pend" --ttl 60
echo "extend: moved, bounded, scoped, recorded, replayed and rate-limited"
