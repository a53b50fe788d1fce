#!/usr/bin/env bash
# Worker identity (issue 15, finding 1): a worker token acts for exactly one
# worker name. Another worker token (of another tenant, or of the same one)
# cannot register under a worker's name, nor heartbeat, long-poll or report
# as its id (403 forbidden, logged once per token and worker, counted in
# sandbox_worker_identity_denied_total, a worker.identity_denied event); its
# empty-inventory heartbeat marks nothing lost. A token made with --worker
# NAME acts as NAME only; an unbound one binds at its first registration (or,
# from before bindings, at its worker's next request). The worker checks a
# container's labels before exec and delete: a runtime_ref pointing at a
# plain container or at another sandbox's is refused with not_found.
# itest-waits: most of its minute is heartbeat graces slept through
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
psql_q() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }
token_id() { printf '%s' "$1" | sed -n 's/^\(sbt_[a-z2-7]*\)_.*/\1/p' | sed 's/^sbt_/tok_/'; }
register_body() { # NAME
  printf '{"name":"%s","runtime":"docker","isolation":["container"],"labels":{},"capacity":{"cpu_millis":1000,"memory_mib":1024,"slots":1},"version":"test","route_address":"127.0.0.1:9"}' "$1"
}
suffix=$(printf '%04x%04x' "$RANDOM" "$RANDOM")
victim=itest-wid-victim-$suffix
other_tenant=$(itest_tenant itest-wid-evil)
assert_exit 0 sandbox tenants create "$other_tenant"

# ---- a token made for one worker name (sandboxd token create --worker)
t1=$("$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant itest-workers --role worker --worker "$victim")
printf '%s\n' "$t1" >>"$ITEST_TMP/secrets.txt"
t1_id=$(psql_q "SELECT id FROM api_tokens WHERE worker_name = '$victim'")
assert_match "$t1_id" '^tok_' "the token made with --worker is bound at once"
assert_exit 2 "$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant itest-workers --role member --worker x
assert_contains "$ITEST_ERR" "--worker needs --role worker" "--worker on a member token"
itest_http POST /v1/workers/register "$t1" "$(register_body "$victim")"
assert_http 200 "" "the bound token registers its worker"
wid=$(itest_json "$HTTP_BODY" worker.id)
hb=$(itest_json "$HTTP_BODY" heartbeat_seconds)
assert_match "$wid" '^wrk_' "victim worker id"
assert_exit 0 sandbox workers drain "$victim" # scripted: nothing is placed on it

# ---- other worker tokens cannot take it over
t2=$(itest_token "$other_tenant" worker itest-wid-evil)   # another tenant's, unbound
t3=$(itest_token itest-workers worker itest-wid-same)      # the same tenant's, unbound
for t in "$t2" "$t3"; do
  itest_http POST /v1/workers/register "$t" "$(register_body "$victim")"
  assert_http 403 forbidden "another worker token registering as $victim"
  assert_contains "$(itest_json "$HTTP_BODY" error.message)" "belongs to another worker token" "the 403 says why"
  assert_not_contains "$HTTP_BODY" "$wid" "the 403 gives away the worker id"
done
assert_eq "" "$(psql_q "SELECT coalesce(worker_name, '') FROM api_tokens WHERE id = '$(token_id "$t3")'")" \
  "a refused registration binds nothing"
assert_eq "127.0.0.1:9" "$(psql_q "SELECT route_address FROM workers WHERE id = '$wid'")" \
  "route_address unchanged by the refused registrations"
for i in 1 2 3; do
  itest_http POST "/v1/workers/$wid/heartbeat" "$t2" '{"inventory":[]}'
  assert_http 403 forbidden "heartbeat $i as $victim with another tenant's worker token"
done
itest_http GET "/v1/workers/$wid/poll?wait=1" "$t2"
assert_http 403 forbidden "long-poll as $victim with another token"
itest_http POST "/v1/workers/$wid/report" "$t3" '{"operation_id":"op_x","attempt":1,"outcome":"succeeded"}'
assert_http 403 forbidden "report as $victim with another token of the same tenant"

# ---- the bound token works, and only as its own name
itest_http POST "/v1/workers/$wid/heartbeat" "$t1" '{"inventory":[]}'
assert_http 200 "" "heartbeat with the bound token"
itest_http GET "/v1/workers/$wid/poll?wait=0" "$t1"
assert_http 200 "" "poll with the bound token"
# the controller remembers that t1 acts for $wid (no lookup per request):
# for that worker id only, and not past a revocation (at the end)
swid0=$(psql_q "SELECT id FROM workers WHERE name = '${ITEST_WORKER_NAME:-itest-worker}'")
itest_http POST "/v1/workers/$swid0/heartbeat" "$t1" '{"inventory":[]}'
assert_http 403 forbidden "the bound token as another worker once its own was remembered"
itest_http POST /v1/workers/register "$t1" "$(register_body "$victim-2")"
assert_http 403 forbidden "a token made with --worker registering as another name"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "acts for worker $victim" "the 403 names the binding"

# ---- logged once per (token, worker), counted, an event for the admin
n=$(grep -c "$(token_id "$t2") .*refused as worker $wid" "$ITEST_CONTROLLER_LOG" || true)
assert_eq 1 "$n" "log lines for 5 refusals of one token as one worker"
metrics_body=$(curl -fsS --max-time 5 "$SANDBOX_URL/metrics")
total=$(printf '%s\n' "$metrics_body" | awk '/^sandbox_worker_identity_denied_total/ { s += $2 } END { print s + 0 }')
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 8 else 1)' "$total" \
  || fail "sandbox_worker_identity_denied_total is $total, expected at least 8"
assert_contains "$metrics_body" 'sandbox_worker_identity_denied_total{endpoint="heartbeat"}' "metric by endpoint"
itest_http GET "/v1/events?kind=worker.identity_denied&tail=50" "$ITEST_ADMIN_TOKEN"
assert_http 200 "" "events"
assert_contains "$HTTP_BODY" "\"token_id\":\"$(token_id "$t2")\"" "the event names the token"
assert_contains "$HTTP_BODY" "\"worker\":\"$wid\"" "the event names the worker"

# ---- tokens list shows the binding; the API and CLI make bound tokens
assert_exit 0 sandbox tokens list --tenant itest-workers
assert_contains "$ITEST_OUT" "$t1_id itest-workers worker" "tokens list row"
assert_contains "$ITEST_OUT" "worker=$victim" "tokens list worker column"
assert_exit 0 sandbox tokens list --tenant itest-workers --json
python3 -c 'import json,sys; sys.exit(0 if any(t.get("id") == sys.argv[2] and t.get("worker_name") == sys.argv[3]
    for t in json.loads(sys.argv[1])["tokens"]) else 1)' "$ITEST_OUT" "$t1_id" "$victim" \
  || fail "tokens list --json has no worker_name $victim for $t1_id"
assert_exit 0 sandbox tokens create --tenant itest-workers --role worker --worker "$victim-cli" --json
printf '%s\n' "$(itest_json "$ITEST_OUT" secret)" >>"$ITEST_TMP/secrets.txt"
assert_eq "$victim-cli" "$(itest_json "$ITEST_OUT" token.worker_name)" "tokens create --worker"
assert_exit 2 sandbox tokens create --tenant itest-workers --role member --worker "$victim-cli"
itest_http POST /v1/tokens "$ITEST_ADMIN_TOKEN" '{"tenant":"itest-workers","role":"member","worker":"w1"}'
assert_http 400 invalid_argument "worker on a member token"
itest_http POST /v1/tokens "$ITEST_ADMIN_TOKEN" '{"tenant":"itest-workers","role":"worker","worker":"no spaces"}'
assert_http 400 invalid_argument "a malformed worker name"

# ---- an unbound token binds at its first registration
t4=$(itest_token itest-workers worker itest-wid-fresh)
t4_id=$(token_id "$t4")
assert_eq "" "$(psql_q "SELECT coalesce(worker_name, '') FROM api_tokens WHERE id = '$t4_id'")" "unbound before use"
itest_http POST /v1/workers/register "$t4" "$(register_body "$victim-fresh")"
assert_http 200 "" "an unbound token registers a new name"
fwid=$(itest_json "$HTTP_BODY" worker.id)
assert_exit 0 sandbox workers drain "$victim-fresh"
assert_eq "$victim-fresh" "$(psql_q "SELECT worker_name FROM api_tokens WHERE id = '$t4_id'")" "bound at first registration"
itest_http POST /v1/workers/register "$t4" "$(register_body "$victim-other")"
assert_http 403 forbidden "then it cannot register another name"
# a token from before bindings (its worker registered, the token unbound)
# binds at its worker's next request; another unbound token still cannot
psql_q "UPDATE api_tokens SET worker_name = NULL WHERE id = '$t4_id'" >/dev/null
itest_http POST "/v1/workers/$fwid/heartbeat" "$t3" '{"inventory":[]}'
assert_http 403 forbidden "an unbound token that did not register the worker"
itest_http POST "/v1/workers/$fwid/heartbeat" "$t4" '{"inventory":[]}'
assert_http 200 "" "the old unbound token of the worker"
assert_eq "$victim-fresh" "$(psql_q "SELECT worker_name FROM api_tokens WHERE id = '$t4_id'")" "bound on first use"

# the shared worker's token (made unbound by run.sh) was bound when it registered
shared=${ITEST_WORKER_NAME:-itest-worker}
assert_eq "$shared" "$(psql_q "SELECT t.worker_name FROM workers w JOIN api_tokens t ON t.id = w.token_id WHERE w.name = '$shared'")" \
  "the shared worker's token bound to its name"
swid=$(psql_q "SELECT id FROM workers WHERE name = '$shared'")

# ---- an empty-inventory heartbeat with the wrong token marks nothing lost
tenant=$(itest_tenant itest-wid)
assert_exit 0 sandbox tenants create "$tenant"
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 --wait --timeout 300
read -r a _ <<<"$ITEST_OUT"
itest_track "$a"
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 --wait --timeout 300
read -r b _ <<<"$ITEST_OUT"
itest_track "$b"
for s in "$a" "$b"; do
  assert_eq "$swid" "$(psql_q "SELECT worker_id FROM sandboxes WHERE id = '$s'")" "$s on the shared worker"
done
sleep $((2 * hb + 6)) # past the grace in which a phase change is trusted over an inventory
itest_http POST "/v1/workers/$swid/heartbeat" "$t2" '{"inventory":[]}'
assert_http 403 forbidden "empty heartbeat for the shared worker with another token"
sleep $((hb + 1))
for s in "$a" "$b"; do
  assert_eq running "$(psql_q "SELECT phase FROM sandboxes WHERE id = '$s'")" "$s after the forged heartbeat"
done

# ---- the worker checks labels: runtime_ref pointing elsewhere is refused
ca=$(docker ps -q --no-trunc --filter "label=dev.sandbox.id=$a")
cb=$(docker ps -q --no-trunc --filter "label=dev.sandbox.id=$b")
assert_match "$cb" '^[0-9a-f]{64}$' "container of $b"
plain=itest-wid-plain-$suffix
docker run -d --name "$plain" --label itest=wid "$ITEST_IMAGE" sh -c 'echo plain-secret >/marker; exec sleep 600' >/dev/null
itest_on_exit docker rm -f "$plain"
cp=$(docker inspect -f '{{.Id}}' "$plain")
assert_exit 0 sandbox exec "$b" -- sh -c 'echo b-secret >/tmp/marker'
set_ref() { psql_q "UPDATE sandboxes SET runtime_ref = '$2' WHERE id = '$1'" >/dev/null; }
for target in "$cp" "$cb"; do
  set_ref "$a" "$target"
  rc=0
  out=$(sandbox exec "$a" -- sh -c 'cat /marker /tmp/marker 2>/dev/null; true' 2>&1) || rc=$?
  [ "$rc" != 0 ] || fail "exec in $a with runtime_ref ${target:0:12} succeeded: [$out]"
  assert_not_contains "$out" "secret" "exec with runtime_ref pointing at another container"
  assert_contains "$out" "not_found" "the refusal is not_found"
done
# deletes: $a pointing at $b's container, $b pointing at the plain one
set_ref "$a" "$cb"
set_ref "$b" "$cp"
for s in "$a" "$b"; do
  rc=0
  out=$(sandbox delete "$s" --wait --timeout 60 2>&1) || rc=$?
  [ "$rc" != 0 ] || fail "delete of $s with another container's runtime_ref succeeded: [$out]"
  assert_contains "$out" "not_found" "the delete's refusal is not_found"
done
assert_eq true "$(docker inspect -f '{{.State.Running}}' "$cb")" "$b's container after $a's refused delete"
assert_eq true "$(docker inspect -f '{{.State.Running}}' "$cp")" "the plain container after $b's refused delete"
grep -q "refused an assignment for sandbox $a" "$ITEST_WORKER_LOG" || fail "the worker does not log the refusal"
# their own refs again: the controller's retry deletes them (30 s after a failed delete)
set_ref "$a" "$ca"
set_ref "$b" "$cb"
gone() { [ -z "$(docker ps -aq --filter "label=dev.sandbox.id=$a")$(docker ps -aq --filter "label=dev.sandbox.id=$b")" ]; }
itest_wait_until 120 "both sandboxes deleted by the retry once their refs are their own" gone
assert_eq true "$(docker inspect -f '{{.State.Running}}' "$cp")" "the plain container at the end"
# a revoked worker token is refused at once, remembered rights or not
itest_http GET "/v1/workers/$wid/poll?wait=0" "$t1"
assert_http 200 "" "poll with the bound token before its revocation"
assert_exit 0 sandbox tokens revoke "$t1_id"
itest_http GET "/v1/workers/$wid/poll?wait=0" "$t1"
assert_http 401 unauthorized "poll with the bound token after its revocation"
echo "worker identity: one name per worker token (403, logged once, metric, event), label checks before exec and delete"
