#!/usr/bin/env bash
# sandbox-sim against the run's real controller (issue 18, item 1): 20
# hollow workers register with 20 worker tokens (one per name, minted with
# sandbox tokens create --role worker --worker NAME), are listed ready,
# take the load's creates (selector sim=hollow: the run's real worker,
# which has no such label, takes none), and 8 clients looping create →
# exec → delete for 10 s see every operation succeed (429s of the tenant's
# operation rate are waited out, not errors) and a throughput above 0.
# Their --received-log has a line per assignment with its wait since the
# controller accepted it. populate and probe work on them. sandbox-sim claim against a warm pool
# only they can hold (isolation microvm, which they offer and the run's
# real worker does not): a few claims at a low rate hit, each a different
# sandbox claimed once (the pool's hits counter and its pool.claimed events
# agree with the claims), and each is deleted. Killing sandbox-sim makes the
# controller mark the workers unreachable. Usage errors exit 2 with one line.
# itest-waits: most of its minute is the controller's worker timeout
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
SIM="$(dirname "$SANDBOXD")/sandbox-sim"
[ -x "$SIM" ] || fail "$SIM is not built"
psql_q() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }
suffix=$(printf '%04x%04x' "$RANDOM" "$RANDOM")
prefix="itest-sim-$suffix-"
N=20

# ---- usage
assert_exit 0 "$SIM" --help
assert_contains "$ITEST_OUT" "workers" "sandbox-sim --help lists workers"
for sub in workers load populate probe claim; do
  assert_exit 0 "$SIM" "$sub" --help
  assert_contains "$ITEST_OUT" "usage: sandbox-sim $sub" "$sub --help"
done
assert_exit 2 "$SIM" nosuch
assert_exit 2 "$SIM" workers --controller "$SANDBOX_URL" --count 2 --token x
assert_contains "$ITEST_ERR" "--token serves one worker" "one token cannot serve 2 workers"
assert_exit 2 "$SIM" load --controller "$SANDBOX_URL" --token x --clients 0
assert_exit 2 "$SIM" load --controller "https://127.0.0.1:1" --token x
assert_exit 2 "$SIM" load --controller "$SANDBOX_URL" --token x --mix exec,create
assert_exit 2 "$SIM" claim --controller "$SANDBOX_URL" --token x --rate 0
assert_exit 2 "$SIM" claim --controller "$SANDBOX_URL" --token x --pool p --image busybox
assert_contains "$ITEST_ERR" "--pool takes the spec from the pool" "claim: --pool with --image"
assert_exit 2 "$SIM" claim --controller "$SANDBOX_URL" --token x --clients 4
assert_eq 1 "$(printf '%s\n' "$ITEST_ERR" | wc -l)" "a usage error is one line"

# ---- the tenant, its member token, one worker token per hollow worker
tenant=$(itest_tenant itest-sim)
assert_exit 0 sandbox tenants create "$tenant"
member=$(itest_token "$tenant" member itest-sim)
printf '%s\n' "$member" >"$ITEST_TMP/sim-member.token"
: >"$ITEST_TMP/sim-workers.tokens"
for i in $(seq 0 $((N - 1))); do
  assert_exit 0 sandbox tokens create --tenant itest-workers --role worker --worker "$prefix$i"
  printf '%s\n' "$ITEST_OUT" >>"$ITEST_TMP/sim-workers.tokens"
  printf '%s\n' "$ITEST_OUT" >>"$ITEST_TMP/secrets.txt"
done
# A token bound to another name is refused: the i-th line serves worker i.
head -n 2 "$ITEST_TMP/sim-workers.tokens" | tac >"$ITEST_TMP/sim-swapped.tokens"
assert_exit 1 "$SIM" workers --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-swapped.tokens" --count 2 \
  --name-prefix "$prefix" --duration 2
assert_contains "$ITEST_ERR" "acts for worker" "a token bound to another worker name is refused (403)"

# ---- 20 hollow workers
simlog="$ITEST_TMP/sim-workers.log"
"$SIM" workers --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-workers.tokens" --count "$N" \
  --name-prefix "$prefix" --heartbeat-ms 1000 --latency-ms create=20,exec=2,delete=10 --capacity-sandboxes 100 \
  --classes container,gvisor,microvm --received-log "$ITEST_TMP/sim-received.log" \
  >"$ITEST_TMP/sim-workers.out" 2>"$simlog" </dev/null &
sim_pid=$!
itest_track_pid "$sim_pid"
sim_ready() {
  sandbox workers list --json >"$ITEST_TMP/sim-list.json" 2>/dev/null || return 1
  python3 - "$ITEST_TMP/sim-list.json" "$prefix" "$N" <<'EOF'
import json, sys
ws = json.load(open(sys.argv[1]))["workers"]
ready = [w for w in ws if w["name"].startswith(sys.argv[2]) and w["state"] == "ready"]
sys.exit(0 if len(ready) == int(sys.argv[3]) else 1)
EOF
}
itest_await "$sim_pid" "$simlog" 20 "sandbox-sim workers exited" "the $N hollow workers are not all ready" sim_ready \
  || fail "hollow workers not ready"
assert_exit 0 sandbox workers list
assert_eq "$N" "$(printf '%s\n' "$ITEST_OUT" | grep -c "^${prefix}[0-9]* ready ")" "sandbox workers list shows the $N sim workers ready"

# ---- the load: every operation succeeds
assert_exit 0 "$SIM" load --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --clients 8 \
  --duration 10 --json
load=$ITEST_OUT
assert_eq 0 "$(itest_json "$load" errors)" "no operation of the load failed"
python3 -c 'import json,sys; d=json.loads(sys.argv[1]); sys.exit(0 if d["ops_per_s"] > 0 and d["kinds"]["create"]["ops"] > 0 and d["kinds"]["exec"]["ops"] > 0 and d["kinds"]["delete"]["ops"] > 0 else 1)' "$load" \
  || fail "throughput: $load"
# Each assignment the hollow workers took is logged with its wait since
# the controller accepted it (the assignment's created_at): every kind, at
# least one line per operation the load saw succeed, and plausible waits.
python3 - "$ITEST_TMP/sim-received.log" "$(itest_json "$load" ops)" <<'EOF' || fail "--received-log: $(head -c 300 "$ITEST_TMP/sim-received.log")"
import sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
kinds = {r[0] for r in rows}
ms = [float(r[1]) for r in rows]
print(len(rows), sorted(kinds), min(ms), max(ms))
sys.exit(0 if kinds >= {"create", "exec", "delete"} and len(rows) >= int(sys.argv[2]) and 0 <= min(ms) and max(ms) < 60000 else 1)
EOF
itest_log "load: $(itest_json "$load" ops_per_s) ops/s, $(itest_json "$load" ops) operations, $(itest_json "$load" rate_limited) rate-limited retries"
assert_eq 0 "$(psql_q "SELECT count(*) FROM sandboxes s JOIN workers w ON w.id = s.worker_id WHERE s.tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND w.name NOT LIKE '$prefix%'")" \
  "no create of the load went to a real worker"
assert_match "$(psql_q "SELECT count(*) FROM sandboxes WHERE tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND phase = 'deleted'")" '^[1-9][0-9]*$' \
  "the load's sandboxes were deleted"
assert_eq 0 "$(psql_q "SELECT count(*) FROM sandboxes WHERE tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND phase NOT IN ('deleted')")" \
  "every load sandbox ended deleted (none failed or left running)"

# the text form names ops/s and the percentiles (a load that completes no
# operation exits 1: 6 s, so a sanitized controller on a busy host gets one
# create and delete through)
assert_exit 0 "$SIM" load --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --clients 2 \
  --duration 6 --mix create,delete
assert_contains "$ITEST_OUT" "ops/s" "load prints the throughput"
assert_contains "$ITEST_OUT" "p50/p90/p99/max" "load prints the percentiles"

# ---- populate and probe
assert_exit 0 "$SIM" populate --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --count 6 \
  --clients 3 --json
assert_eq 6 "$(itest_json "$ITEST_OUT" created)" "populate made 6 sandboxes"
assert_eq 6 "$(psql_q "SELECT count(*) FROM sandboxes WHERE tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND phase = 'running'")" "6 running"
assert_exit 0 "$SIM" probe --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --get 20 --list 5 --json
assert_eq 20 "$(itest_json "$ITEST_OUT" get.n)" "probe timed 20 GETs"
assert_eq 5 "$(itest_json "$ITEST_OUT" list.n)" "probe timed 5 lists"
sleep 2
assert_eq 6 "$(psql_q "SELECT sum(jsonb_array_length(inventory)) FROM workers WHERE name LIKE '$prefix%'")" \
  "the hollow workers heartbeat their inventory (6 sandboxes)"
# as changes, like sandboxd worker: a whole inventory's generation is the
# wall clock in ms when sent, a delta's its base + 1; with beats every
# second, whole ones each beat would keep it within about a second of now
lag=$(psql_q "SELECT min(CASE WHEN inventory_generation > 0 THEN floor(extract(epoch FROM now()) * 1000) - inventory_generation END) FROM workers WHERE name LIKE '$prefix%'")
[ -n "$lag" ] || fail "the hollow workers send no inventory generations"
[ "$lag" -gt 2500 ] || fail "the hollow workers' inventory generations lag now by only $lag ms: whole inventories each beat, not changes"
[ "$lag" -lt 3600000 ] || fail "the hollow workers' inventory generations lag now by $lag ms: not a recent whole one's"
for id in $(psql_q "SELECT id FROM sandboxes WHERE tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND phase = 'running'"); do
  assert_exit 0 sandbox delete "$id" --wait --timeout 60
done

# ---- warm pool claims: a pool on the hollow workers only (microvm)
pool="itest-sim-$suffix"
assert_exit 0 sandbox pools create "$pool" --size 4 --isolation microvm --cpu-millis 100 --memory-mib 64 --network none
pool_field() { itest_json "$(sandbox pools get "$pool" --json)" "pool.$1"; }
pool_full() { [ "$(pool_field ready)" = 4 ]; }
itest_wait_until 60 "pool $pool ready=4" pool_full
pool_id=$(psql_q "SELECT id FROM pools WHERE name = '$pool'")
assert_exit 1 "$SIM" claim --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --pool "nosuch-$suffix" \
  --rate 1 --duration 1
assert_contains "$ITEST_ERR" "HTTP 404" "claim from a pool that does not exist"
# 8 claims at 4/s: the pool of 4 refills in between (a miss is allowed, not an error).
assert_exit 0 "$SIM" claim --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --pool "$pool" \
  --rate 4 --duration 2 --ids "$ITEST_TMP/claims.ids" --json
claim=$ITEST_OUT
itest_log "claim: $claim"
hits=$(itest_json "$claim" hits)
misses=$(itest_json "$claim" misses)
assert_eq 8 "$(itest_json "$claim" sent)" "8 claims sent"
assert_eq 8 "$((hits + misses))" "every claim answered, a hit or a miss"
[ "$hits" -gt 0 ] || fail "no claim hit the full pool: $claim"
assert_eq 0 "$(itest_json "$claim" errors)" "no claim failed"
assert_eq 0 "$(itest_json "$claim" duplicates)" "no sandbox handed to two claims (the tool's count)"
assert_eq 8 "$(itest_json "$claim" deleted)" "every claimed sandbox deleted"
assert_eq 8 "$(wc -l <"$ITEST_TMP/claims.ids")" "8 claimed ids written"
assert_eq 8 "$(cut -d' ' -f1 "$ITEST_TMP/claims.ids" | sort -u | wc -l)" "8 different sandboxes"
assert_eq "$hits" "$(grep -c ' hit ' "$ITEST_TMP/claims.ids")" "the ids file marks the hits"
assert_eq 8 "$(grep -cE '^sbx_[a-z0-9]+ (hit|miss) [0-9]+\.[0-9]{3} [0-9]+\.[0-9]{2}$' "$ITEST_TMP/claims.ids")" \
  "each ids line: ID hit|miss DUE_S MS"
# The controller's view: the pool counted exactly those hits and misses,
# each hit sandbox was claimed once (one pool.claimed event) from this pool
# into the claimer's tenant, and no member ever went to the real worker.
assert_eq "$hits" "$(pool_field hits)" "the pool's hits counter equals the claims that hit"
assert_eq "$misses" "$(pool_field misses)" "the pool's misses counter equals the claims that missed"
hit_ids=$(awk -v q="'" '$2 == "hit" {print q $1 q}' "$ITEST_TMP/claims.ids" | paste -sd, -)
assert_eq "$hits" "$(psql_q "SELECT count(*) FROM events WHERE kind = 'pool.claimed' AND sandbox_id IN ($hit_ids)")" \
  "one pool.claimed event per hit"
assert_eq 0 "$(psql_q "SELECT count(*) FROM (SELECT sandbox_id FROM events WHERE kind = 'pool.claimed'
                      GROUP BY sandbox_id HAVING count(*) > 1) x")" "no sandbox claimed twice, ever"
assert_eq "$hits" "$(psql_q "SELECT count(*) FROM sandboxes WHERE id IN ($hit_ids) AND pool_id = '$pool_id'
                            AND claimed_at IS NOT NULL AND tenant_id = (SELECT id FROM tenants WHERE name = '$tenant')")" \
  "each hit is a member of the pool, claimed into the claimer's tenant"
assert_eq 0 "$(psql_q "SELECT count(*) FROM sandboxes s JOIN workers w ON w.id = s.worker_id WHERE s.pool_id = '$pool_id'
                      AND w.name NOT LIKE '$prefix%'")" "no pool member on the real worker"
claims_deleted() {
  [ "$(psql_q "SELECT count(*) FROM sandboxes WHERE id IN ($hit_ids) AND phase = 'deleted'")" = "$hits" ]
}
itest_wait_until 30 "the claimed sandboxes deleted" claims_deleted
# the text form
assert_exit 0 "$SIM" claim --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --pool "$pool" \
  --rate 2 --duration 1
assert_contains "$ITEST_OUT" "claims/s" "claim prints the rate it got"
assert_contains "$ITEST_OUT" "hit: -> 202 (running)" "claim prints the hits' latency"
assert_contains "$ITEST_OUT" "pool $pool: size 4" "claim prints the pool's counters"
# (deleting a pool sets its members' pool_id to null: list them first)
left=$(psql_q "SELECT string_agg(quote_literal(id), ',') FROM sandboxes WHERE pool_id = '$pool_id' AND claimed_at IS NULL
               AND phase NOT IN ('deleted', 'failed', 'lost')")
[ -n "$left" ] || fail "the pool has no unclaimed member left to delete"
assert_exit 0 sandbox pools delete "$pool"
pool_gone() { [ "$(psql_q "SELECT count(*) FROM sandboxes WHERE id IN ($left) AND phase <> 'deleted'")" = 0 ]; }
itest_wait_until 30 "the pool's unclaimed members deleted" pool_gone

# ---- killing sandbox-sim: the controller marks its workers unreachable
# (lost only after worker_lost_after_seconds, minutes)
kill -TERM "$sim_pid"
wait "$sim_pid" || fail "sandbox-sim workers did not exit 0 on SIGTERM"
assert_contains "$(cat "$ITEST_TMP/sim-workers.out")" "$N registered of $N" "the summary line"
assert_contains "$(cat "$ITEST_TMP/sim-workers.out")" "failed=0" "no report given up"
sim_away() {
  [ "$(psql_q "SELECT count(*) FROM workers WHERE name LIKE '$prefix%' AND state = 'unreachable'")" = "$N" ]
}
for _ in $(seq 120); do sim_away && break; sleep 0.5; done
sim_away || fail "the controller did not mark the $N hollow workers unreachable within 60 s of the kill"
echo "sandbox-sim: $N hollow workers ready, 8 clients for 10 s with no error, populate and probe, $hits of 8 claims hit the warm pool, unreachable after the kill"
