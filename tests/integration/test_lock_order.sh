#!/usr/bin/env bash
# Lock order: a scripted worker's heartbeats (each extending every lease it
# holds) race its delete reports (each releasing capacity on the same
# worker row) and new creates of the tenant (each placed in its request's
# transaction, holding the tenant row) from many threads at once. Every transaction takes its row
# locks in one order (docs/architecture.md "Concurrency"), so PostgreSQL
# detects no deadlock and no request answers 503.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_lockorder
ctl_pid=
stop_ctl() { if [ -n "$ctl_pid" ]; then kill -TERM "$ctl_pid" 2>/dev/null || true; wait "$ctl_pid" 2>/dev/null || true; fi; ctl_pid=; }
trap 'rc=$?; stop_ctl; itest_drop_private_db; itest_end $rc' EXIT
sql() { "$ITEST_PGBIN/psql" -X -q -At "$url" -c "$1"; }

port=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$port"
log="$ITEST_TMP/lockorder-controller.log"
itest_watch_log "$log"
SANDBOX_HTTP_THREADS=8 SANDBOX_RATE_REQUESTS_PER_SECOND=0 SANDBOX_RATE_OPERATIONS_PER_SECOND=0 "$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port" \
  --lease-seconds 30 --heartbeat-seconds 1 --worker-timeout-seconds 60 --reconcile-interval-ms 200 \
  >>"$log" 2>&1 </dev/null &
ctl_pid=$!
itest_wait_healthz "$SANDBOX_URL" "$ctl_pid" controller "$log" || fail "controller did not start"
admin=$("$SANDBOXD" token create --database-url "$url" --tenant lockorder --role admin)
wtok=$("$SANDBOXD" token create --database-url "$url" --tenant lockorder-w --role worker)

out=$(python3 "$(dirname "$0")/lock_order.py" "$SANDBOX_URL" "$admin" "$wtok" lockorder 6 32) \
  || fail "a request failed under concurrent heartbeats and reports: $out"
itest_log "$out"
assert_eq 0 "$(sql "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")" \
  "deadlocks PostgreSQL detected"
assert_eq 192 "$(sql "SELECT count(*) FROM sandboxes WHERE phase = 'deleted'")" "sandboxes deleted"
# what is still allocated is exactly the sandboxes created while racing
assert_eq "$(sql "SELECT coalesce(sum(cpu_millis), 0) || ' ' || coalesce(sum(memory_mib), 0) || ' ' || count(*) FROM sandboxes WHERE allocated")" \
  "$(sql "SELECT alloc_cpu_millis || ' ' || alloc_memory_mib || ' ' || alloc_slots FROM workers")" \
  "capacity released (the worker's counters against the sandboxes still allocated)"
assert_eq "$(sql "SELECT count(*) FROM sandboxes WHERE phase <> 'deleted'")" \
  "$(sql "SELECT count(*) FROM sandboxes WHERE allocated")" "sandboxes created while racing, each placed"
assert_not_contains "$(cat "$log")" "deadlock detected" "controller log"
echo "heartbeats, delete reports and creates race without a deadlock"
