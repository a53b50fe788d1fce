#!/usr/bin/env bash
# The live counters (migration 0014) that quota checks and placement's
# spread read instead of counting rows always equal a recount:
# 1. in a private database, after a mixed sequence of direct SQL changes
#    (every phase, both desired states, a worker change, a resize, a row
#    deleted, two tenants), before and after sandbox_usage_fold; a change
#    made behind the trigger's back is found and corrected by
#    sandbox_usage_check (what the retention pass runs);
# 2. through the real controller and worker: a tenant with max_sandboxes 2
#    fills it, is refused a third, deletes one and may create again, and its
#    counters equal the recount of its sandboxes.
# itest-timeout: 200
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

# ---- 1. SQL sequence in a private database
itest_private_db itest_counters
itest_on_exit itest_drop_private_db
assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
q() { "$ITEST_PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$url" -c "$1"; }
# Keys whose counters differ from the recount (empty when they agree).
differ() {
  q "SELECT tenant_id || '/' || worker_id FROM (
       (SELECT * FROM sandbox_usage_now WHERE live <> 0 OR live_cpu_millis <> 0 OR live_memory_mib <> 0 OR placed <> 0
        EXCEPT SELECT * FROM sandbox_usage_recount)
       UNION ALL
       (SELECT * FROM sandbox_usage_recount EXCEPT SELECT * FROM sandbox_usage_now)) d"
}
q "INSERT INTO tenants (id, name) VALUES ('tnt_a', 'ca'), ('tnt_b', 'cb')"
q "INSERT INTO workers (id, name, isolation, runtime, cpu_millis, memory_mib, slots, state)
   VALUES ('wrk_1', 'c1', '{container}', 'runc', 1000000, 1000000, 100, 'ready'),
          ('wrk_2', 'c2', '{container}', 'runc', 1000000, 1000000, 100, 'ready')"
q "INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, isolation, cpu_millis, memory_mib, ttl_seconds)
   SELECT 'sbx_' || i, CASE WHEN i % 3 = 0 THEN 'tnt_b' ELSE 'tnt_a' END, '{}', 'running', 'pending', 'container',
          100 * i, 64 * i, 600 FROM generate_series(1, 12) i"
assert_eq "" "$(differ)" "after the inserts"
assert_eq "8|4800|3072" "$(q "SELECT live, live_cpu_millis, live_memory_mib FROM sandbox_usage_now
  WHERE tenant_id = 'tnt_a' AND worker_id = ''")" "tenant a live after the inserts"
q "UPDATE sandboxes SET phase = 'scheduled', worker_id = CASE WHEN id < 'sbx_5' THEN 'wrk_1' ELSE 'wrk_2' END"
q "UPDATE sandboxes SET phase = 'provisioning' WHERE id IN ('sbx_1', 'sbx_2', 'sbx_3', 'sbx_4', 'sbx_6')"
q "UPDATE sandboxes SET phase = 'running' WHERE phase = 'provisioning'"
assert_eq "" "$(differ)" "placed and running"
q "SELECT sandbox_usage_fold()" >/dev/null
assert_eq "" "$(differ)" "after a fold"
assert_eq 0 "$(q "SELECT count(*) FROM sandbox_usage_log")" "the log after a fold"
# a lease expiry: back to pending without a worker; another placed elsewhere
q "UPDATE sandboxes SET phase = 'pending', worker_id = NULL WHERE id = 'sbx_7'"
q "UPDATE sandboxes SET worker_id = 'wrk_1' WHERE id = 'sbx_8'"
# delete requested, deleting, deleted; failed; lost; failed while deleting
q "UPDATE sandboxes SET desired_state = 'deleted' WHERE id IN ('sbx_1', 'sbx_2')"
q "UPDATE sandboxes SET phase = 'deleting' WHERE id = 'sbx_1'"
q "UPDATE sandboxes SET phase = 'deleted' WHERE id = 'sbx_1'"
q "UPDATE sandboxes SET phase = 'failed' WHERE id IN ('sbx_3', 'sbx_2')"
q "UPDATE sandboxes SET phase = 'lost' WHERE id = 'sbx_4'"
# a resize, a tenant move, a row removed (retention), a row that never lived
q "UPDATE sandboxes SET cpu_millis = 5000, memory_mib = 7 WHERE id = 'sbx_6'"
q "UPDATE sandboxes SET tenant_id = 'tnt_b' WHERE id = 'sbx_10'"
q "DELETE FROM sandboxes WHERE id IN ('sbx_1', 'sbx_11')"
q "INSERT INTO sandboxes (id, tenant_id, spec, desired_state, phase, isolation, cpu_millis, memory_mib, ttl_seconds)
   VALUES ('sbx_x', 'tnt_a', '{}', 'deleted', 'deleted', 'container', 1, 1, 1)"
assert_eq "" "$(differ)" "after the mixed sequence"
q "SELECT sandbox_usage_fold()" >/dev/null
assert_eq "" "$(differ)" "after the mixed sequence and a fold"
assert_eq 0 "$(q "SELECT sandbox_usage_check()")" "nothing to correct"
# behind the trigger's back: the check finds it and corrects it
q "ALTER TABLE sandboxes DISABLE TRIGGER sandboxes_usage_update"
q "UPDATE sandboxes SET phase = 'failed' WHERE id = 'sbx_6'"
q "ALTER TABLE sandboxes ENABLE TRIGGER sandboxes_usage_update"
[ -n "$(differ)" ] || fail "a change behind the trigger's back left the counters equal"
assert_eq 2 "$(q "SELECT sandbox_usage_check()")" "keys corrected (the live and the placed one)"
assert_eq "" "$(differ)" "after the check"
assert_eq 0 "$(q "SELECT sandbox_usage_check()")" "a second check"

# ---- 2. through the controller and a worker
itest_as_admin
tenant=$(itest_tenant counters)
assert_exit 0 sandbox tenants create "$tenant"
assert_exit 0 sandbox tenants update "$tenant" --policy '{"max_sandboxes":2}'
SANDBOX_TOKEN=$(itest_token "$tenant" member)
export SANDBOX_TOKEN
ids=()
for i in 1 2; do
  assert_exit 0 sandbox create --image "$ITEST_IMAGE" --wait --timeout 120
  id=${ITEST_OUT%% *}
  itest_track "$id"
  ids+=("$id")
done
assert_exit 1 sandbox create --image "$ITEST_IMAGE"
assert_contains "$ITEST_ERR" "max_sandboxes = 2: 2 sandboxes live" "third create refused"
assert_exit 0 sandbox delete "${ids[0]}" --wait --timeout 120
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --wait --timeout 120
itest_track "${ITEST_OUT%% *}"
tid=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT id FROM tenants WHERE name = '$tenant'")
tq() { "$ITEST_PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 "$DATABASE_URL" -c "$1"; }
now=$(tq "SELECT worker_id || ':' || live || ':' || placed FROM sandbox_usage_now WHERE tenant_id = '$tid'
  AND (live <> 0 OR placed <> 0) ORDER BY worker_id")
recount=$(tq "SELECT worker_id || ':' || live || ':' || placed FROM sandbox_usage_recount WHERE tenant_id = '$tid'
  ORDER BY worker_id")
assert_eq "$recount" "$now" "the tenant's counters against a recount"
assert_match "$now" '^:2:0' "two live sandboxes counted"
echo "live counters equal a recount after SQL and API sequences; a wrong one is corrected by the check"
