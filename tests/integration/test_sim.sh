#!/usr/bin/env bash
# sandbox-sim against the run's real controller (issue 18, item 1): 20
# hollow workers register with 20 worker tokens (one per name, minted with
# sandbox tokens create --role worker --worker NAME), are listed ready,
# take the load's creates (selector sim=hollow: the run's real worker,
# which has no such label, takes none), and 8 clients looping create →
# exec → delete for 10 s see every operation succeed (429s of the tenant's
# operation rate are waited out, not errors) and a throughput above 0.
# populate and probe work on them; killing sandbox-sim makes the controller
# mark the workers lost. Usage errors exit 2 with one line.
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
for sub in workers load populate probe; do
  assert_exit 0 "$SIM" "$sub" --help
  assert_contains "$ITEST_OUT" "usage: sandbox-sim $sub" "$sub --help"
done
assert_exit 2 "$SIM" nosuch
assert_exit 2 "$SIM" workers --controller "$SANDBOX_URL" --count 2 --token x
assert_contains "$ITEST_ERR" "--token serves one worker" "one token cannot serve 2 workers"
assert_exit 2 "$SIM" load --controller "$SANDBOX_URL" --token x --clients 0
assert_exit 2 "$SIM" load --controller "https://127.0.0.1:1" --token x
assert_exit 2 "$SIM" load --controller "$SANDBOX_URL" --token x --mix exec,create

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
itest_log "load: $(itest_json "$load" ops_per_s) ops/s, $(itest_json "$load" ops) operations, $(itest_json "$load" rate_limited) rate-limited retries"
assert_eq 0 "$(psql_q "SELECT count(*) FROM sandboxes s JOIN workers w ON w.id = s.worker_id WHERE s.tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND w.name NOT LIKE '$prefix%'")" \
  "no create of the load went to a real worker"
assert_match "$(psql_q "SELECT count(*) FROM sandboxes WHERE tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND phase = 'deleted'")" '^[1-9][0-9]*$' \
  "the load's sandboxes were deleted"
assert_eq 0 "$(psql_q "SELECT count(*) FROM sandboxes WHERE tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND phase NOT IN ('deleted')")" \
  "every load sandbox ended deleted (none failed or left running)"

# the text form names ops/s and the percentiles
assert_exit 0 "$SIM" load --controller "$SANDBOX_URL" --token-file "$ITEST_TMP/sim-member.token" --clients 2 \
  --duration 2 --mix create,delete
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
for id in $(psql_q "SELECT id FROM sandboxes WHERE tenant_id = (SELECT id FROM tenants WHERE name = '$tenant') AND phase = 'running'"); do
  assert_exit 0 sandbox delete "$id" --wait --timeout 60
done

# ---- killing sandbox-sim: the controller marks its workers lost
kill -TERM "$sim_pid"
wait "$sim_pid" || fail "sandbox-sim workers did not exit 0 on SIGTERM"
assert_contains "$(cat "$ITEST_TMP/sim-workers.out")" "$N registered of $N" "the summary line"
assert_contains "$(cat "$ITEST_TMP/sim-workers.out")" "failed=0" "no report given up"
sim_lost() {
  [ "$(psql_q "SELECT count(*) FROM workers WHERE name LIKE '$prefix%' AND state = 'lost'")" = "$N" ]
}
for _ in $(seq 120); do sim_lost && break; sleep 0.5; done
sim_lost || fail "the controller did not mark the $N hollow workers lost within 60 s of the kill"
echo "sandbox-sim: $N hollow workers ready, 8 clients for 10 s with no error, populate and probe, lost after the kill"
