#!/usr/bin/env bash
# Benchmark: PostgreSQL work per operation (issue 18). A private PostgreSQL
# cluster with pg_stat_statements preloaded (track = all: statements inside
# triggers count too; track_planning: how many were planned), `sandboxd all
# --database-url` on it (controller + the real worker, the machine's
# dockerd), K sequential create --wait → exec → delete --wait through the
# CLI. Prints transactions, statements (top level and nested), plans and
# round trips per operation (3 operations per round), the busiest
# statements, and the time of a ≈ 16 KB answer on a kept-alive connection
# (TCP_NODELAY). Background work (heartbeats, reconcile ticks) counts: it is
# the cost of running the operations.
# usage: tests/bench/dbwork.sh [K]   (K default 20; BUILD, IMAGE, BENCH_KEEP as in lib.sh)
set -euo pipefail
. "$(dirname "$0")/lib.sh"
K=${1:-20}

pgbin=$(find /usr/lib/postgresql -maxdepth 3 -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n 1)
[ -n "$pgbin" ] || bench_fail "PostgreSQL is not installed (apt-get install postgresql-15)"
pgbin=$(dirname "$pgbin")
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
pgdir="$BENCH_TMP/pg"
mkdir -p "$pgdir/run"
[ "$(id -u)" -ne 0 ] || chown -R postgres: "$pgdir"
as_pg "$pgbin/initdb" -D "$pgdir/data" -U postgres --auth=trust --no-locale -E UTF8 >"$pgdir/initdb.log" 2>&1 \
  || bench_fail "initdb failed (see $pgdir/initdb.log)"
pgport=$(bench_freeport)
cat >>"$pgdir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $pgport
unix_socket_directories = '$pgdir/run'
fsync = off
synchronous_commit = off
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.track_planning = on
pg_stat_statements.max = 5000
CONF
as_pg "$pgbin/pg_ctl" start -D "$pgdir/data" -l "$pgdir/postgres.log" -w -t 60 >/dev/null \
  || bench_fail "pg_ctl start failed (see $pgdir/postgres.log)"
bench_on_exit "as_pg '$pgbin/pg_ctl' stop -D '$pgdir/data' -m fast"
url="postgresql://postgres@127.0.0.1:$pgport/sandbox"
"$pgbin/psql" -X -q -At "postgresql://postgres@127.0.0.1:$pgport/postgres" -c 'CREATE DATABASE sandbox'
sql() { "$pgbin/psql" -X -q -At "$url" -c "$1"; }
sql 'CREATE EXTENSION pg_stat_statements'
"$SBXD" migrate --database-url "$url" >"$BENCH_TMP/migrate.log" 2>&1 || bench_fail "sandboxd migrate failed"
# Like bench_start, with a longer wait: the worker probes its isolation
# classes (gVisor, microVM) before it registers, 20-30 s on a busy machine.
port=$(bench_freeport)
"$SBXD" all --data-dir "$BENCH_TMP/data" --listen "127.0.0.1:$port" --route-listen 127.0.0.1:0 --log-level warn \
  --database-url "$url" >"$BENCH_TMP/out.log" 2>"$BENCH_TMP/err.log" &
BENCH_PID=$!
export SANDBOX_URL="http://127.0.0.1:$port" SANDBOX_TOKEN=
for i in $(seq 600); do
  kill -0 "$BENCH_PID" 2>/dev/null || bench_fail "sandboxd all exited during start-up"
  if [ -s "$BENCH_TMP/data/admin.token" ]; then
    SANDBOX_TOKEN=$(cat "$BENCH_TMP/data/admin.token")
    curl -sf -H "Authorization: Bearer $SANDBOX_TOKEN" "$SANDBOX_URL/v1/workers" | grep -q '"ready"' && break
  fi
  [ "$i" -lt 600 ] || bench_fail "no ready worker within 120 s"
  sleep 0.2
done
"$CLI" tenants create bench >/dev/null || bench_fail "sandbox tenants create bench failed"

# One warm-up round (image, first connections), then the measured rounds.
round() {
  local out sbx
  out=$("$CLI" create --tenant bench --image "$IMAGE" --wait --timeout 120)
  sbx=${out%% *}
  "$CLI" exec "$sbx" -- true
  "$CLI" delete "$sbx" --wait --timeout 120 >/dev/null
}
round
snap() { sql "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'sandbox'"; }
stmts() {
  sql "SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0) || ' ' || coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0) \
    || ' ' || coalesce(sum(plans), 0) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'sandbox') \
    AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_stat_database%'"
}
# Idle first: what the controller and worker cost with nothing to do.
IDLE=${IDLE:-10}
sql 'SELECT pg_stat_statements_reset()' >/dev/null
i0=$(snap)
sleep "$IDLE"
i1=$(snap)
read -r itop inested iplans <<<"$(stmts)"
ixacts=$((i1 - i0 - 1))
snap() { sql "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'sandbox'"; }
sql 'SELECT pg_stat_statements_reset()' >/dev/null
x0=$(snap)
t0=$(date +%s%N)
for _ in $(seq "$K"); do round; done
t1=$(date +%s%N)
x1=$(snap)
ops=$((3 * K))
# The two snapshots' own transactions and the reset are left out.
read -r top nested plans <<<"$(stmts)"
xacts=$((x1 - x0 - 2))
per() { awk -v a="$1" -v b="$ops" 'BEGIN { printf "%.1f", a / b }'; }
printf '%-44s %10s %10s\n' "PostgreSQL work ($K rounds, $ops operations)" total "per op"
printf '%-44s %10s %10s\n' "transactions" "$xacts" "$(per "$xacts")"
printf '%-44s %10s %10s\n' "statements, top level (round trips)" "$top" "$(per "$top")"
printf '%-44s %10s %10s\n' "statements in functions and triggers" "$nested" "$(per "$nested")"
printf '%-44s %10s %10s\n' "statements planned" "$plans" "$(per "$plans")"
printf '%-44s %10s\n' "wall time per round (ms)" "$(( (t1 - t0) / 1000000 / K ))"
wall=$(( (t1 - t0) / 1000000 ))
idle() { awk -v a="$1" -v t="$IDLE" 'BEGIN { printf "%.1f", a / t }'; }
net() { awk -v a="$1" -v i="$2" -v t="$IDLE" -v w="$wall" -v n="$ops" 'BEGIN { printf "%.1f", (a - i / t * w / 1000) / n }'; }
printf '%-44s %10s %10s\n' "idle ($IDLE s, nothing to do)" "per s" "net per op"
printf '%-44s %10s %10s\n' "  transactions" "$(idle "$ixacts")" "$(net "$xacts" "$ixacts")"
printf '%-44s %10s %10s\n' "  statements, top level" "$(idle "$itop")" "$(net "$top" "$itop")"
printf '%-44s %10s %10s\n' "  statements in functions and triggers" "$(idle "$inested")" "$(net "$nested" "$inested")"
printf '%-44s %10s %10s\n' "  statements planned" "$(idle "$iplans")" "$(net "$plans" "$iplans")"
echo
echo "busiest statements (calls per op, plans per op, first 90 characters):"
sql "SELECT round(calls::numeric / $ops, 1) || ' | ' || round(plans::numeric / $ops, 1) || ' | ' || \
  left(regexp_replace(query, '\s+', ' ', 'g'), 90) FROM pg_stat_statements \
  WHERE dbid = (SELECT oid FROM pg_database WHERE datname = 'sandbox') AND toplevel \
  AND query NOT LIKE '%pg_stat_statements%' ORDER BY calls DESC LIMIT 12"
echo

# Answers around 16 KB on one kept-alive connection: the latest events,
# their size set by tail.
"$PY" - "$SANDBOX_URL" "$SANDBOX_TOKEN" <<'PY'
import http.client, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
hdr = {"Authorization": "Bearer " + sys.argv[2]}
print("%-44s %10s %10s" % ("kept-alive GET /v1/events?tail=N", "bytes", "p50 ms"))
for limit in (10, 40, 50, 60, 70, 80, 120):
    times, size = [], 0
    for _ in range(21):
        t = time.perf_counter()
        conn.request("GET", "/v1/events?tail=%d" % limit, headers=hdr)
        r = conn.getresponse()
        size = len(r.read())
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    print("%-44s %10d %10.1f" % ("  tail=%d" % limit, size, times[10]))
PY
