#!/usr/bin/env bash
# Heartbeats send inventory changes (docs/worker.md "Inventory"):
# 1. the protocol, against a controller of our own on a private database
#    holding a worker with 600 running sandboxes (tests/bench/live_rows.sql):
#    a full inventory is acknowledged with its generation; a delta from that
#    generation is applied (a sandbox it says is gone fails as removed once
#    past the inventory grace; an unknown container it adds is listed for
#    removal) and acknowledged; a delta from another generation changes
#    nothing and asks for a full one (inventory_resync); malformed deltas are
#    400; the same inventory again writes no new copy of it (the workers
#    row's TOAST table gets no insert);
# 2. the real worker: between its full inventories its beats are deltas (the
#    generation the controller holds goes up by one a beat), and a container
#    removed behind its back still fails its sandbox (removed).
# itest-timeout: 200
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

here=$(cd "$(dirname "$0")" && pwd)
shared_db=$DATABASE_URL
itest_private_db itest_invdelta
itest_on_exit itest_drop_private_db
assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
q() { "$ITEST_PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$url" "$@"; }
tenant=$(itest_tenant invdelta)
DATABASE_URL=$url
itest_token "$tenant" member >/dev/null
wtok=$(itest_token "$tenant" worker live-w0)
q -v live=600 -v workers=1 -v tenant="$tenant" -f "$here/../bench/live_rows.sql" >/dev/null
q -c "UPDATE workers SET last_heartbeat = now() + interval '1 hour'"
itest_own_controller invdelta 1024
DATABASE_URL=$shared_db

hb() { # hb BODY: POST heartbeat; sets HTTP_STATUS and HTTP_BODY
  HTTP_BODY=$(curl -s --max-time 20 -o - -w '\n%{http_code}' -X POST -H "Authorization: Bearer $wtok" \
    -H 'Content-Type: application/json' --data-binary "$1" "$CTL_URL/v1/workers/$wid/heartbeat")
  HTTP_STATUS=${HTTP_BODY##*$'\n'}
  HTTP_BODY=${HTTP_BODY%$'\n'*}
}
reg=$(curl -s --max-time 20 -X POST -H "Authorization: Bearer $wtok" -H 'Content-Type: application/json' \
  -d '{"name":"live-w0","runtime":"docker","isolation":["container"],
       "capacity":{"cpu_millis":100000000,"memory_mib":1000000000,"slots":100000},"version":"t"}' \
  "$CTL_URL/v1/workers/register")
wid=$(itest_json "$reg" worker.id)
inv=$(q -c "SELECT jsonb_agg(jsonb_build_object('sandbox_id', id, 'ref', runtime_ref, 'state', 'running') ORDER BY id)
  FROM sandboxes WHERE worker_id = '$wid' AND phase = 'running'")
gone_id=$(q -c "SELECT min(id) FROM sandboxes WHERE worker_id = '$wid' AND phase = 'running'")

hb "{\"inventory\":$inv,\"inventory_generation\":7}"
assert_eq 200 "$HTTP_STATUS" "full heartbeat"
assert_eq 7 "$(itest_json "$HTTP_BODY" inventory_generation)" "full inventory acknowledged"
assert_eq "7|600" "$(q -c "SELECT inventory_generation, jsonb_array_length(inventory) FROM workers WHERE id = '$wid'")" \
  "stored after the full one"

# The same inventory three more times: no new copy of it is written.
toast() {
  sleep 1.5 # backends flush their table statistics at most once a second
  q -c "SELECT coalesce(n_tup_ins, 0) FROM pg_stat_all_tables
        WHERE relid = (SELECT reltoastrelid FROM pg_class WHERE relname = 'workers')"
}
t0=$(toast)
for g in 8 9 10; do
  hb "{\"inventory\":$inv,\"inventory_generation\":$g}"
  assert_eq 200 "$HTTP_STATUS" "unchanged full heartbeat"
done
assert_eq "$t0" "$(toast)" "TOAST inserts for an unchanged inventory"
assert_eq 10 "$(q -c "SELECT inventory_generation FROM workers WHERE id = '$wid'")" "generation kept up"

hb "{\"inventory_delta\":{\"base\":10,\"generation\":11,\"upsert\":[{\"sandbox_id\":\"sbx_zzzzzzzzzzzzzzzzzzzzzzzzzz\",\"ref\":\"c-unknown\",\"state\":\"running\"}],\"gone\":[\"$gone_id\"]}}"
assert_eq 200 "$HTTP_STATUS" "delta heartbeat"
assert_eq 11 "$(itest_json "$HTTP_BODY" inventory_generation)" "delta acknowledged"
assert_contains "$HTTP_BODY" '"sandbox_id":"sbx_zzzzzzzzzzzzzzzzzzzzzzzzzz","ref":"c-unknown"' "unknown container to remove"
assert_eq "failed|removed" "$(q -c "SELECT phase, failure->>'reason' FROM sandboxes WHERE id = '$gone_id'")" \
  "the sandbox its delta says is gone"
assert_eq "600|0" "$(q -c "SELECT jsonb_array_length(inventory), count(*) FILTER (WHERE e->>'sandbox_id' = '$gone_id')
  FROM workers, jsonb_array_elements(inventory) e WHERE id = '$wid' GROUP BY inventory")" "delta applied to the stored inventory"

hb '{"inventory_delta":{"base":10,"generation":12,"upsert":[],"gone":[]}}'
assert_eq 200 "$HTTP_STATUS" "stale delta"
assert_eq true "$(itest_json "$HTTP_BODY" inventory_resync)" "stale delta asks for a full inventory"
assert_eq 11 "$(q -c "SELECT inventory_generation FROM workers WHERE id = '$wid'")" "stale delta changed nothing"
# an empty delta from the held generation (the usual idle beat) is applied
# without the stored inventory being read or written; the orphan pass still
# runs on the stored one (the unknown container is still to be removed)
hb '{"inventory_delta":{"base":11,"generation":12,"upsert":[],"gone":[]}}'
assert_eq 200 "$HTTP_STATUS" "empty delta"
assert_eq 12 "$(itest_json "$HTTP_BODY" inventory_generation)" "empty delta acknowledged"
assert_contains "$HTTP_BODY" '"sandbox_id":"sbx_zzzzzzzzzzzzzzzzzzzzzzzzzz","ref":"c-unknown"' \
  "the stored inventory's unknown container, listed again after an empty delta"
assert_eq 600 "$(q -c "SELECT jsonb_array_length(inventory) FROM workers WHERE id = '$wid'")" "empty delta kept the inventory"
hb '{"inventory_delta":{"base":12,"generation":13,"upsert":[],"gone":[]}}'
assert_eq 13 "$(itest_json "$HTTP_BODY" inventory_generation)" "a second empty delta acknowledged"
hb '{"inventory_delta":{"base":11,"generation":12,"upsert":[],"gone":[]}}'
assert_eq true "$(itest_json "$HTTP_BODY" inventory_resync)" "an empty delta from an old base asks for a full inventory"
assert_eq 13 "$(q -c "SELECT inventory_generation FROM workers WHERE id = '$wid'")" "and changed nothing"

for bad in '{"inventory_delta":{"base":0,"generation":1,"upsert":[],"gone":[]}}' \
  '{"inventory_delta":{"base":11,"generation":11,"upsert":[],"gone":[]}}' \
  '{"inventory_delta":{"base":11,"generation":12,"upsert":[{"ref":"x"}],"gone":[]}}' \
  '{"inventory_delta":{"base":11,"generation":12,"upsert":[],"gone":[7]}}' \
  '{"inventory_delta":{"base":11,"generation":12,"upsert":[]}}' \
  "{\"inventory\":[],\"inventory_delta\":{\"base\":11,\"generation\":12,\"upsert\":[],\"gone\":[]}}"; do
  hb "$bad"
  assert_eq 400 "$HTTP_STATUS" "malformed delta $bad"
  assert_contains "$HTTP_BODY" '"code":"invalid_argument"' "malformed delta's error"
done
assert_eq 13 "$(q -c "SELECT inventory_generation FROM workers WHERE id = '$wid'")" "malformed deltas changed nothing"

# ---- 2. the real worker (the run's shared one)
export SANDBOX_TOKEN
tenant2=$(itest_tenant invdelta-real)
SANDBOX_TOKEN=$(itest_token "$tenant2" member)
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --wait --timeout 120
sbx=${ITEST_OUT%% *}
itest_track "$sbx"
sq() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }
g0=$(sq "SELECT inventory_generation FROM workers WHERE name = '$ITEST_WORKER_NAME'")
sleep 11
g1=$(sq "SELECT inventory_generation FROM workers WHERE name = '$ITEST_WORKER_NAME'")
d=$((g1 - g0))
# Two beats in 11 s: +2 when both were deltas; a full one in between jumps to the wall clock.
if [ "$d" -lt 1 ] || { [ "$d" -gt 3 ] && [ "$(sq "SELECT inventory_generation FROM workers WHERE name = '$ITEST_WORKER_NAME'")" -lt 1000000000000 ]; }; then
  fail "the worker's generation went from $g0 to $g1 in 11 s"
fi
if [ "$d" -gt 3 ]; then
  sleep 11
  g2=$(sq "SELECT inventory_generation FROM workers WHERE name = '$ITEST_WORKER_NAME'")
  d=$((g2 - g1))
  [ "$d" -ge 1 ] && [ "$d" -le 3 ] || fail "the worker's generation went from $g1 to $g2 in 11 s: no deltas"
fi
cid=$(docker ps -q --filter "label=dev.sandbox.id=$sbx")
[ -n "$cid" ] || fail "no container for $sbx"
docker rm -f "$cid" >/dev/null
itest_wait_until 90 "sandbox $sbx failed (removed)" \
  bash -c "[ \"\$(\"$SANDBOX_CLI\" get $sbx --json | python3 -c 'import json,sys; s=json.load(sys.stdin)[\"sandbox\"]; print(s[\"phase\"], (s.get(\"failure\") or {}).get(\"reason\"))')\" = 'failed removed' ]"
echo "deltas are applied and acknowledged, stale ones refused, unchanged inventories not rewritten; the worker sends deltas"
