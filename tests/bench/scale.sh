#!/usr/bin/env bash
# Benchmark (issue 18): how far one controller goes on this machine. A
# private PostgreSQL (pg_stat_statements preloaded) measured first with
# `pgbench -N` as the yardstick; one `sandboxd controller`; 50 hollow
# workers of sandbox-sim (the real worker API, nothing runs); client loads
# create → exec → delete at several concurrencies (ops/s, p50/p99,
# transactions, statements and PostgreSQL CPU per operation); two
# controllers on the one database; 0 / 1,000 / 10,000 live sandboxes (idle
# CPU of controller and PostgreSQL, statements/s, WAL bytes/s, controller
# RSS, GET and list latency); warm pool claims at a fixed rate on the
# hollow workers (sandbox-sim claim: hits, misses, create → running
# latency, the pool's refills); and, when a dockerd answers, the
# controller's share of a real create / exec / delete next to Docker alone
# (tests/bench/lifecycle.sh, its own `sandboxd all`). Prints markdown tables
# and draws scale.png (gnuplot). Only the docker section uses Docker.
# usage: tests/bench/scale.sh [--quick] [--only SECTION,...] [--out DIR]
#   sections: docker, pgbench, load, two, warm, live (default all); --quick: a
#   smoke run (short windows, 0 and 1,000 live; 4 to 5 minutes on a loaded
#   machine, docker's 20 pairs included); the full run takes about 12
#   minutes (11 m 25 s measured, with a dockerd; 5 of them are the two
#   settles and populating 10,000 live).
# Environment: BUILD (default build), WORKERS (50), CONCURRENCY ("8 32 64"),
# LIVE ("0 1000 10000"; quick "0 1000"), SECONDS_LOAD (30; quick 8),
# SECONDS_PGBENCH (20; quick 8), SECONDS_IDLE (10; quick 5), WARM_RATES
# (claims/s, "20 100"), SECONDS_WARM (20; quick 8), POOL_SIZE (256, the
# most a pool may hold), POOL_REFILL (the controller's
# pool_refill_per_second, 200), LIFECYCLE_N (lifecycle.sh's pairs, 20), SIM
# (another sandbox-sim build, e.g. an ASan one), SETTLE (seconds to wait
# after populating before the idle window, so that the heartbeats' check of
# recently changed sandboxes has nothing left to look at: the steady state;
# 150; quick 0), PG_VIA (socket, as `sandboxd all` reaches its own
# PostgreSQL, or tcp: 127.0.0.1; pgbench goes the same way), BENCH_KEEP.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${BUILD:-build}
SBXD="$BUILD/tools/sandboxd"
CLI="$BUILD/tools/sandbox"
SIM=${SIM:-$BUILD/tools/sandbox-sim}
quick='' only=docker,pgbench,load,two,warm,live out=''
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --only) only=${2:?--only needs a list}; shift ;;
    --out) out=${2:?--out needs a directory}; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -n 's/^# \{0,1\}//p'; exit 0 ;;
    *) echo "scale: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
for x in "$SBXD" "$CLI" "$SIM"; do
  [ -x "$x" ] || { echo "scale: build first ($x missing: meson setup $BUILD && meson compile -C $BUILD)" >&2; exit 2; }
done
WORKERS=${WORKERS:-50}
PG_VIA=${PG_VIA:-socket}
CONCURRENCY=${CONCURRENCY:-8 32 64}
if [ -n "$quick" ]; then
  LIVE=${LIVE:-0 1000}; SECONDS_LOAD=${SECONDS_LOAD:-8}; SECONDS_PGBENCH=${SECONDS_PGBENCH:-8}; SECONDS_IDLE=${SECONDS_IDLE:-5}
  SETTLE=${SETTLE:-0}
else
  LIVE=${LIVE:-0 1000 10000}; SECONDS_LOAD=${SECONDS_LOAD:-30}; SECONDS_PGBENCH=${SECONDS_PGBENCH:-20}; SECONDS_IDLE=${SECONDS_IDLE:-10}
  SETTLE=${SETTLE:-150}
fi
WARM_RATES=${WARM_RATES:-20 100}
POOL_SIZE=${POOL_SIZE:-256}
POOL_REFILL=${POOL_REFILL:-200}
LIFECYCLE_N=${LIFECYCLE_N:-20}
if [ -n "$quick" ]; then SECONDS_WARM=${SECONDS_WARM:-8}; else SECONDS_WARM=${SECONDS_WARM:-20}; fi
LOADAVG=$(cut -d' ' -f1-3 /proc/loadavg)
want() { case ",$only," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
for s in ${only//,/ }; do
  case "$s" in docker|pgbench|load|two|warm|live) ;; *) echo "scale: unknown section $s (see --help)" >&2; exit 2 ;; esac
done
command -v gnuplot >/dev/null 2>&1 || echo "scale: gnuplot missing (apt-get install gnuplot-nox): no chart" >&2

TMP=$(mktemp -d /tmp/sbx-scale.XXXXXX)
chmod 711 "$TMP"
OUT=${out:-$TMP}
mkdir -p "$OUT"
PIDS=()
PGBIN=$(dirname "$(find /usr/lib/postgresql -maxdepth 3 -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n 1)")
[ -x "$PGBIN/pgbench" ] || { echo "scale: PostgreSQL with pgbench is needed (apt-get install postgresql-15)" >&2; exit 2; }
PGUSER_OS=postgres
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u "$PGUSER_OS" -- "$@"; else "$@"; fi; }

cleanup() {
  local i
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    kill -TERM "${PIDS[$i]}" 2>/dev/null || true
    wait "${PIDS[$i]}" 2>/dev/null || true
  done
  [ -z "${PGDATA_DIR:-}" ] || as_pg "$PGBIN/pg_ctl" stop -D "$PGDATA_DIR" -m fast >/dev/null 2>&1 || true
  if [ -n "${BENCH_KEEP:-}" ]; then echo "scale: kept $TMP" >&2; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
die() { echo "scale: $*" >&2; for f in "$TMP"/*.log; do [ -s "$f" ] && { echo "--- $f" >&2; tail -n 8 "$f" >&2; }; done; exit 1; }
say() { printf '[scale %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
calc() { python3 -c "import sys; print(eval(sys.argv[1]))" "$1"; }
jget() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d = d.get(k, {}) if isinstance(d, dict) else {}
print(d if d != {} else 0)' "$1" "$2"; }

# The tables (scale.md) and the chart (scale.png) of the sections that ran.
report() {
  {
    echo "#### Machine"
    echo
    echo "$(nproc) cores ($(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)), $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo) memory, shared with other work (figures are noisy: load average $LOADAVG when the run began); $([ -z "$CTL_SECTIONS" ] || echo "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on the same machine (fsync off, reached over $([ "$PG_VIA" = tcp ] && echo 127.0.0.1 || echo "its unix socket")); $WORKERS hollow workers (sandbox-sim, latency create=50 exec=5 delete=20 ms); ")$(date -u +%Y-%m-%d)$([ -n "$quick" ] && echo ", --quick run")."
    echo
    if want docker; then
      echo "#### The controller's share next to Docker alone (tests/bench/lifecycle.sh $LIFECYCLE_N, alternating pairs)"
      echo
      if [ -n "$DOCKER_NOTE" ]; then
        echo "$DOCKER_NOTE"
      else
        echo "| step | sandbox p50 ms | Docker p50 ms | controller's share ms | ratio | target |"
        echo "|---|---|---|---|---|---|"
        for r in "${DOCKER_ROWS[@]}"; do
          IFS='|' read -r what sp dp diff ratio target <<<"$r"
          echo "| $what | $sp | $dp | $diff | $ratio | ≤ $target |"
        done
        echo
        echo "(\`sandbox\` CLI through \`sandboxd all\` with its embedded PostgreSQL, against the \`docker\` CLI; p50 of $LIFECYCLE_N runs each; lifecycle.sh's own table is lifecycle.txt next to scale.md.)"
      fi
      echo
    fi
    if want pgbench; then
      echo "#### Yardstick: pgbench -N on the same cluster"
      echo
      echo "| pgbench -N -c 8, ${SECONDS_PGBENCH} s | tps | PostgreSQL CPU per transaction (ms) |"
      echo "|---|---|---|"
      echo "| scale 10 | $PGB_TPS | $PGB_CPU_MS |"
      echo
    fi
    if want load; then
      echo "#### One controller: create → exec → delete loops (${SECONDS_LOAD} s each)"
      echo
      echo "| clients | ops/s | create p50 / p99 ms | exec p50 / p99 ms | delete p50 / p99 ms | create accepted→succeeded p50 / p99 ms | accepted→worker receives p50 / p99 ms | transactions / op | round trips / op | statements / op | PostgreSQL CPU ms / op | controller CPU ms / op | errors |"
      echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
      for r in "${LOAD_ROWS[@]}"; do
        IFS='|' read -r c ops c50 c99 e50 e99 d50 d99 a50 a99 w50 w99 tx rt st pc kc er <<<"$r"
        echo "| $c | $ops | $c50 / $c99 | $e50 / $e99 | $d50 / $d99 | $a50 / $a99 | $w50 / $w99 | $tx | $rt | $st | $pc | $kc | $er |"
      done
      [ "$PGB_TPS" = 0 ] || echo "
  pgbench -N did $PGB_TPS transactions/s on the same cluster."
      echo
    fi
    if want two; then
      IFS='|' read -r c one two pct <<<"$TWO_ROW"
      echo "#### Two controllers on one database ($c clients, ${SECONDS_LOAD} s)"
      echo
      echo "| one controller ops/s | two controllers ops/s | change |"
      echo "|---|---|---|"
      echo "| $one | $two | $pct % |"
      echo
    fi
    if want warm; then
      echo "#### Warm pool claims (a shared pool of $POOL_SIZE on the hollow workers, pool_refill_per_second $POOL_REFILL, ${SECONDS_WARM} s at each rate)"
      echo
      echo "$WARM_FILL"
      echo
      echo "| target claims/s | achieved claims/s | hits | misses | hit (create → running) p50 / p99 / max ms | miss → succeeded p50 ms | pool ready before / min / after | refills (per s) | errors |"
      echo "|---|---|---|---|---|---|---|---|---|"
      for r in "${WARM_ROWS[@]}"; do
        IFS='|' read -r rate got hits misses h50 h99 hmax m50 rb rmin ra refills rps errs <<<"$r"
        echo "| $rate | $got | $hits | $misses | $h50 / $h99 / $hmax | $m50 | $rb / $rmin / $ra | $refills ($rps) | $errs |"
      done
      echo
      echo "Latency is from when each claim was due (an open loop: one create every 1/rate s) to its 202; a hit's 202 has the sandbox running. Target (issue 18): p50 ≤ 15 ms, p99 ≤ 50 ms at 100 claims/s."
      echo
    fi
    if want live; then
      echo "#### Live sandboxes (idle ${SECONDS_IDLE} s; then GET/list one at a time; then 8 clients' creates/s)"
      echo
      echo "| live | controller CPU ms/s | PostgreSQL CPU ms/s | transactions/s | statements/s | WAL KiB/s | controller RSS MiB | GET p50 / p99 ms | list (100) p50 / p99 ms | creates/s, 8 clients |"
      echo "|---|---|---|---|---|---|---|---|---|---|"
      for r in "${LIVE_ROWS[@]}"; do
        IFS='|' read -r n kc pc tx st wl rss g50 g99 l50 l99 cr <<<"$r"
        [ "$n" != 0 ] || { g50=–; g99=–; }
        echo "| $n | $kc | $pc | $tx | $st | $wl | $rss | $g50 / $g99 | $l50 / $l99 | $cr |"
      done
      echo
    fi
  } | tee "$OUT/scale.md"

  if command -v gnuplot >/dev/null 2>&1 && [ -s "$TMP/chart.dat" ]; then
    gnuplot <<EOF || echo "scale: gnuplot failed" >&2
set terminal png size 900,500
set output '$OUT/scale.png'
set title 'One controller, $WORKERS hollow workers: create -> exec -> delete loops'
set xlabel 'clients in flight'
set ylabel 'operations/s'
set y2label 'create latency (ms)'
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set key top left
set grid
plot '$TMP/chart.dat' using 1:2 with linespoints lw 2 title 'ops/s', \
     '' using 1:3 axes x1y2 with linespoints title 'create p50 ms', \
     '' using 1:4 axes x1y2 with linespoints title 'create p99 ms'
EOF
    [ -s "$OUT/scale.png" ] && echo "chart: $OUT/scale.png" >&2
  fi
  [ -n "$out" ] || { [ -n "${BENCH_KEEP:-}" ] || echo "scale: pass --out DIR to keep scale.md and scale.png" >&2; }
}

# ---- the controller's share next to Docker alone -----------------------------
# First, before this script's PostgreSQL and hollow workers exist, so that
# they add nothing to the machine's load. tests/bench/lifecycle.sh starts
# its own `sandboxd all` (embedded PostgreSQL, the machine's dockerd), runs
# create --wait / exec / delete --wait and docker run -d / exec / rm -f in
# alternating pairs, and stops what it started. No dockerd: said, skipped.
DOCKER_ROWS=() DOCKER_NOTE=
if want docker; then
  if docker info >/dev/null 2>&1; then
    say "docker: tests/bench/lifecycle.sh $LIFECYCLE_N (sandbox next to docker, alternating pairs)"
    BUILD=$BUILD tests/bench/lifecycle.sh "$LIFECYCLE_N" >"$TMP/lifecycle.txt" 2>"$TMP/lifecycle.err" \
      || { cat "$TMP/lifecycle.txt" "$TMP/lifecycle.err" >&2; die "tests/bench/lifecycle.sh failed"; }
    [ "$OUT" = "$TMP" ] || cp "$TMP/lifecycle.txt" "$OUT/lifecycle.txt"
    # the p50 column of a row of lifecycle.sh's table (label, min, p50, p95, max)
    lc_p50() { awk -v k="$1" 'index($0, k) == 1 {print $(NF - 2)}' "$TMP/lifecycle.txt"; }
    while IFS='|' read -r what ours theirs target; do
      sp=$(lc_p50 "$ours"); dp=$(lc_p50 "$theirs")
      [ -n "$sp" ] && [ -n "$dp" ] || die "lifecycle.sh printed no row $ours or $theirs"
      DOCKER_ROWS+=("$what|$sp|$dp|$((sp - dp))|$(calc "'%.2f' % ($sp / max($dp, 1))")|$target")
    done <<'ROWS'
create --wait / docker run -d|sandbox create --wait|docker run -d (CLI)|1.03
exec true / docker exec true|sandbox exec -- true|docker exec true (CLI)|1.05
delete --wait / docker rm -f|sandbox delete --wait|docker rm -f (CLI)|1.05
ROWS
  else
    DOCKER_NOTE="Skipped: no dockerd answers here (\`docker info\` failed), so this run has no Docker figures."
    say "docker: skipped, no dockerd answers (docker info failed)"
  fi
fi
# The other sections need this script's PostgreSQL (pgbench) and its
# controller with the hollow workers (load, two, warm, live).
CTL_SECTIONS=
for s in load two warm live; do want "$s" && CTL_SECTIONS+=" $s"; done
if [ -z "$CTL_SECTIONS" ] && ! want pgbench; then
  report
  exit 0
fi

# ---- the private PostgreSQL ------------------------------------------------
mkdir -p "$TMP/pg/run"
[ "$(id -u)" -ne 0 ] || chown -R "$PGUSER_OS:" "$TMP/pg"
as_pg "$PGBIN/initdb" -D "$TMP/pg/data" -U postgres --auth=trust --no-locale -E UTF8 >"$TMP/initdb.log" 2>&1 \
  || die "initdb failed"
PGPORT=$(freeport)
cat >>"$TMP/pg/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $PGPORT
unix_socket_directories = '$TMP/pg/run'
max_connections = 300
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
pg_stat_statements.track_planning = on
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
PGDATA_DIR="$TMP/pg/data"
as_pg "$PGBIN/pg_ctl" start -D "$PGDATA_DIR" -l "$TMP/pg/postgres.log" -w -t 60 >/dev/null || die "pg_ctl start failed"
# Clients reach PostgreSQL as `sandboxd all` reaches its own cluster: over
# the unix socket (PG_VIA=tcp: over 127.0.0.1, as a remote database would
# be, with the TCP stack's cost on both sides; pgbench goes the same way).
case "$PG_VIA" in
  socket) PGHOST_B="$TMP/pg/run" ;;
  tcp) PGHOST_B=127.0.0.1 ;;
  *) die "PG_VIA must be socket or tcp, not $PG_VIA" ;;
esac
PSQL=("$PGBIN/psql" -X -q -At -h "$PGHOST_B" -p "$PGPORT" -U postgres)
"${PSQL[@]}" -d postgres -c 'CREATE DATABASE sandbox' -c 'CREATE DATABASE pgbench' >/dev/null || die "CREATE DATABASE failed"
"${PSQL[@]}" -d sandbox -c 'CREATE EXTENSION pg_stat_statements' >/dev/null || die "CREATE EXTENSION pg_stat_statements failed"
DATABASE_URL="host=$PGHOST_B port=$PGPORT user=postgres dbname=sandbox"
q() { "${PSQL[@]}" -d sandbox -c "$1"; }

# PostgreSQL CPU: the user + system ticks of the backends of one database
# (pg_stat_activity), snapshot to a file; between two snapshots a backend
# that is new counts whole, one that exited is lost (the connections of
# pgbench and of the controller live through a measurement).
pg_cpu_snap() { # DB FILE
  local p
  "${PSQL[@]}" -d postgres -c "SELECT pid FROM pg_stat_activity WHERE datname = '$1'" | while read -r p; do
    echo "$p $(pid_ticks "$p")"
  done >"$2"
}
pg_cpu_ms() { # FILE0 FILE1: milliseconds of CPU between the two snapshots
  python3 - "$1" "$2" "$HZ" <<'PY'
import sys
a = dict(l.split() for l in open(sys.argv[1]) if l.strip())
b = dict(l.split() for l in open(sys.argv[2]) if l.strip())
print(sum(max(int(v) - int(a.get(p, 0)), 0) for p, v in b.items()) * 1000 / int(sys.argv[3]))
PY
}
pid_ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
HZ=$(getconf CLK_TCK)
xacts() { q "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = 'sandbox'"; }
stmts() { q "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'sandbox'"; }
wal() { q "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn"; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

# ---- pgbench: the yardstick ------------------------------------------------
PGB_TPS=0 PGB_CPU_MS=0
if want pgbench; then
  say "pgbench -i, then pgbench -N -T $SECONDS_PGBENCH -c 8"
  "$PGBIN/pgbench" -i -q -s 10 -h "$PGHOST_B" -p "$PGPORT" -U postgres pgbench >"$TMP/pgbench-init.log" 2>&1 || die "pgbench -i failed"
  "$PGBIN/pgbench" -N -T "$SECONDS_PGBENCH" -c 8 -j 2 -h "$PGHOST_B" -p "$PGPORT" -U postgres pgbench >"$TMP/pgbench.log" 2>&1 &
  pgb=$!
  # CPU per transaction from inside the run: pgbench's backends exit with
  # it, and their ticks with them.
  sleep 1
  pgx() { "${PSQL[@]}" -d postgres -c "SELECT xact_commit FROM pg_stat_database WHERE datname = 'pgbench'"; }
  pg_cpu_snap pgbench "$TMP/cpu0"; n0=$(pgx)
  sleep $((SECONDS_PGBENCH - 2))
  pg_cpu_snap pgbench "$TMP/cpu1"; n1=$(pgx)
  wait "$pgb" || die "pgbench -N failed"
  PGB_TPS=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$TMP/pgbench.log" | tail -n 1)
  PGB_TPS=$(calc "round($PGB_TPS)")
  PGB_CPU_MS=$(calc "round($(pg_cpu_ms "$TMP/cpu0" "$TMP/cpu1") / max($n1 - $n0, 1), 3)")
fi

# ---- the controller and the hollow workers ---------------------------------
"$SBXD" migrate --database-url "$DATABASE_URL" >"$TMP/migrate.log" 2>&1 || die "sandboxd migrate failed"
CTL_ENV=(SANDBOX_RATE_REQUESTS_PER_SECOND=0 SANDBOX_RATE_OPERATIONS_PER_SECOND=0
         SANDBOX_API_MAX_CONNECTIONS_PER_ADDRESS=0 SANDBOX_LOG_LEVEL=warn
         SANDBOX_POOL_REFILL_PER_SECOND="$POOL_REFILL")
start_controller() { # TAG: sets CTL_PID_<TAG> and CTL_URL_<TAG>
  local port rport
  port=$(freeport); rport=$(freeport)
  env "${CTL_ENV[@]}" "$SBXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$port" \
    --route-listen "127.0.0.1:$rport" >"$TMP/controller-$1.log" 2>&1 </dev/null &
  PIDS+=($!)
  eval "CTL_PID_$1=$!"
  for _ in $(seq 100); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && { eval "CTL_URL_$1=http://127.0.0.1:$port"; return 0; }
    sleep 0.2
  done
  die "controller $1 did not answer /healthz"
}
start_controller 1
URL1=$CTL_URL_1
ADMIN=$("$SBXD" token create --database-url "$DATABASE_URL" --tenant bench-admin --role admin 2>/dev/null) || die "token create failed"
MEMBER=$("$SBXD" token create --database-url "$DATABASE_URL" --tenant bench --role member 2>/dev/null) || die "token create failed"
printf '%s\n' "$MEMBER" >"$TMP/member.token"
say "minting $WORKERS worker tokens (sandbox tokens create --role worker --worker NAME)"
SANDBOX_URL=$URL1 SANDBOX_TOKEN=$ADMIN "$CLI" tenants create bench-workers >/dev/null || die "sandbox tenants create failed"
: >"$TMP/workers.tokens"
for i in $(seq 0 $((WORKERS - 1))); do
  SANDBOX_URL=$URL1 SANDBOX_TOKEN=$ADMIN "$CLI" tokens create --tenant bench-workers --role worker --worker "scale-$i" \
    >>"$TMP/workers.tokens" 2>/dev/null || die "sandbox tokens create --role worker failed"
done
"$SIM" workers --controller "$URL1" --token-file "$TMP/workers.tokens" --count "$WORKERS" --name-prefix scale- \
  --capacity-cpus 1000 --capacity-memory-mib 10000000 --capacity-sandboxes 100000 --quiet \
  --received-log "$TMP/received.log" \
  >"$TMP/sim-workers.out" 2>"$TMP/sim-workers.log" &
SIM_PID=$!
PIDS+=("$SIM_PID")
for _ in $(seq 150); do
  # (|| true: before the first registration grep finds nothing, and pipefail)
  n=$(curl -s -H "Authorization: Bearer $ADMIN" "$URL1/v1/workers" | grep -o '"state":"ready"' | wc -l || true)
  [ "$n" -ge "$WORKERS" ] && break
  sleep 0.2
done
[ "$n" -ge "$WORKERS" ] || die "only $n of $WORKERS hollow workers are ready"
say "$WORKERS hollow workers ready on $URL1"

# run_load URL CLIENTS SECONDS OUTFILE: one sandbox-sim load --json
run_load() {
  "$SIM" load --controller "$1" --token-file "$TMP/member.token" --clients "$2" --duration "$3" --json \
    >"$4" 2>"$4.err" || { cat "$4.err" >&2; die "sandbox-sim load failed ($2 clients)"; }
}

# The controller's requests to PostgreSQL so far (its /metrics counter).
round_trips() { curl -sf "$1/metrics" | awk '/^sandbox_db_round_trips_total / {print $2; f=1} END {if (!f) print 0}'; }
# accepted → worker receives: the hollow workers' --received-log lines
# (KIND MS, one per assignment) from line $1 to $2, as "p50|p99" in ms
# (nearest rank, all kinds together).
received_lines() { wc -l <"$TMP/received.log" 2>/dev/null || echo 0; }
received_p() {
  python3 - "$TMP/received.log" "$1" "$2" <<'PY'
import sys
lines = open(sys.argv[1]).read().splitlines()[int(sys.argv[2]):int(sys.argv[3])]
v = sorted(float(l.split()[1]) for l in lines if len(l.split()) == 2)
def p(q):
    return round(v[max(int(q * len(v) + 0.999999) - 1, 0)], 1) if v else 0
print(f"{p(0.5)}|{p(0.99)}")
PY
}

# ---- throughput against concurrency ----------------------------------------
LOAD_ROWS=()
if want load; then
  for c in $CONCURRENCY; do
    say "load: $c clients for $SECONDS_LOAD s"
    q "SELECT pg_stat_statements_reset()" >/dev/null
    x0=$(xacts); s0=$(stmts); pg_cpu_snap sandbox "$TMP/cpu0"; k0=$(pid_ticks "$CTL_PID_1")
    r0=$(received_lines); t0=$(round_trips "$URL1")
    run_load "$URL1" "$c" "$SECONDS_LOAD" "$TMP/load-$c.json"
    x1=$(xacts); s1=$(stmts); pg_cpu_snap sandbox "$TMP/cpu1"; k1=$(pid_ticks "$CTL_PID_1")
    recv=$(received_p "$r0" "$(received_lines)"); t1=$(round_trips "$URL1")
    pgms=$(pg_cpu_ms "$TMP/cpu0" "$TMP/cpu1")
    f="$TMP/load-$c.json"
    ops=$(jget "$f" ops)
    # where the statements go: calls per operation, top level or nested,
    # mean execution and planning time per call, execution time per operation
    q "SELECT round(calls::numeric / greatest($ops, 1), 2) || ' | ' || CASE WHEN toplevel THEN 'top' ELSE 'nested' END \
      || ' | ' || round(mean_exec_time::numeric, 3) || ' | ' || round(total_plan_time::numeric / greatest(calls, 1), 3) \
      || ' | ' || round(total_exec_time::numeric / greatest($ops, 1), 3) || ' | ' || left(regexp_replace(query, '\s+', ' ', 'g'), 110) \
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'sandbox' \
      ORDER BY calls DESC LIMIT 60" >"$OUT/statements-$c.txt" 2>/dev/null || true
    LOAD_ROWS+=("$c|$(jget "$f" ops_per_s)|$(jget "$f" kinds.create.latency.p50_ms)|$(jget "$f" kinds.create.latency.p99_ms)|$(jget "$f" kinds.exec.latency.p50_ms)|$(jget "$f" kinds.exec.latency.p99_ms)|$(jget "$f" kinds.delete.latency.p50_ms)|$(jget "$f" kinds.delete.latency.p99_ms)|$(jget "$f" kinds.create.accepted_to_succeeded.p50_ms)|$(jget "$f" kinds.create.accepted_to_succeeded.p99_ms)|$recv|$(calc "round(($x1 - $x0) / max($ops, 1), 1)")|$(calc "round(($t1 - $t0) / max($ops, 1), 1)")|$(calc "round(($s1 - $s0) / max($ops, 1), 1)")|$(calc "round($pgms / max($ops, 1), 2)")|$(calc "round(($k1 - $k0) * 1000 / $HZ / max($ops, 1), 2)")|$(jget "$f" errors)")
    printf '%s\n' "$c $(jget "$f" ops_per_s) $(jget "$f" kinds.create.latency.p50_ms) $(jget "$f" kinds.create.latency.p99_ms)" >>"$TMP/chart.dat"
  done
fi

# ---- two controllers on one database ---------------------------------------
TWO_ROW=
if want two; then
  c2=32
  say "one controller, $c2 clients, $SECONDS_LOAD s"
  run_load "$URL1" "$c2" "$SECONDS_LOAD" "$TMP/one.json"
  start_controller 2
  URL2=$CTL_URL_2
  say "two controllers ($URL1, $URL2), $((c2 / 2)) clients each, $SECONDS_LOAD s"
  run_load "$URL1" $((c2 / 2)) "$SECONDS_LOAD" "$TMP/two-a.json" &
  la=$!
  run_load "$URL2" $((c2 / 2)) "$SECONDS_LOAD" "$TMP/two-b.json"
  wait "$la" || die "the load against controller 1 failed"
  one=$(jget "$TMP/one.json" ops_per_s)
  two=$(calc "round($(jget "$TMP/two-a.json" ops_per_s) + $(jget "$TMP/two-b.json" ops_per_s), 1)")
  TWO_ROW="$c2|$one|$two|$(calc "round(($two - $one) * 100 / max($one, 0.1))")"
  kill -TERM "$CTL_PID_2" 2>/dev/null || true
  wait "$CTL_PID_2" 2>/dev/null || true
fi

# ---- warm pool claims ---------------------------------------------------------
# A shared pool (admin, no tenant) of POOL_SIZE on the hollow workers with
# the spec of `sandbox-sim claim --pool`'s creates (they carry no selector:
# a create with one never matches a pool, and only hollow workers exist
# here). It fills from empty (the refill figure), then the member token
# claims at each of WARM_RATES for SECONDS_WARM, each rate from a full pool.
WARM_ROWS=() WARM_FILL=
if want warm; then
  POOL=scale-warm
  pool_ready() {
    SANDBOX_URL=$URL1 SANDBOX_TOKEN=$ADMIN "$CLI" pools get "$POOL" --json >"$TMP/pool.json" 2>/dev/null \
      && jget "$TMP/pool.json" pool.ready
  }
  wait_full() { # SECONDS: true once the pool holds POOL_SIZE ready members
    local i
    for i in $(seq $(($1 * 5))); do
      [ "$(pool_ready || echo 0)" -ge "$POOL_SIZE" ] && return 0
      sleep 0.2
    done
    return 1
  }
  say "warm: a pool of $POOL_SIZE (pool_refill_per_second $POOL_REFILL)"
  SANDBOX_URL=$URL1 SANDBOX_TOKEN=$ADMIN "$CLI" pools create "$POOL" --size "$POOL_SIZE" --image sandbox/busybox:latest \
    --cpu-millis 100 --memory-mib 64 --network none >/dev/null || die "sandbox pools create failed"
  t0=$(date +%s%N)
  wait_full 180 || die "pool $POOL did not fill within 180 s (ready $(pool_ready) of $POOL_SIZE)"
  fill_ms=$((($(date +%s%N) - t0) / 1000000))
  WARM_FILL="The pool filled from empty in $(calc "round($fill_ms / 1000, 1)") s: $(calc "round($POOL_SIZE * 1000 / max($fill_ms, 1), 1)") members/s made ready (the refill pass asks for them every 100 ms while the pool is short, at most pool_refill_per_second; placed like any create; 50 ms each on a hollow worker)."
  for rate in $WARM_RATES; do
    wait_full 120 || die "pool $POOL did not refill within 120 s (ready $(pool_ready) of $POOL_SIZE)"
    say "warm: claims at $rate/s for $SECONDS_WARM s"
    f="$TMP/warm-$rate.json"
    q "SELECT pg_stat_statements_reset()" >/dev/null
    "$SIM" claim --controller "$URL1" --token-file "$TMP/member.token" --pool "$POOL" --rate "$rate" \
      --duration "$SECONDS_WARM" --ids "$OUT/warm-$rate.ids" --json >"$f" 2>"$f.err" \
      || { cat "$f.err" >&2; [ -s "$f" ] || die "sandbox-sim claim failed ($rate/s)"; }
    # where the database's time went during the claims: total, mean and
    # slowest call of the busiest statements
    q "SELECT round(total_exec_time::numeric) || ' ms | ' || calls || ' calls | mean ' \
      || round(mean_exec_time::numeric, 3) || ' | max ' || round(max_exec_time::numeric, 1) || ' | ' \
      || left(regexp_replace(query, '\s+', ' ', 'g'), 110) \
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'sandbox' \
      ORDER BY total_exec_time DESC LIMIT 30" >"$OUT/statements-warm-$rate.txt" 2>/dev/null || true
    errs=$(($(jget "$f" errors) + $(jget "$f" rate_limited) + $(jget "$f" not_sent) + $(jget "$f" duplicates)))
    WARM_ROWS+=("$rate|$(jget "$f" claims_per_s)|$(jget "$f" hits)|$(jget "$f" misses)|$(jget "$f" hit.p50_ms)|$(jget "$f" hit.p99_ms)|$(jget "$f" hit.max_ms)|$(jget "$f" miss_succeeded.p50_ms)|$(jget "$f" pool.ready_before)|$(jget "$f" pool.ready_min)|$(jget "$f" pool.ready_after)|$(jget "$f" pool.refills)|$(jget "$f" pool.refills_per_s)|$errs")
  done
  # Deleting the pool deletes its unclaimed members; the live section
  # counts every live sandbox, so it waits for them to go.
  SANDBOX_URL=$URL1 SANDBOX_TOKEN=$ADMIN "$CLI" pools delete "$POOL" >/dev/null || die "sandbox pools delete failed"
  for _ in $(seq 300); do
    [ "$(q "SELECT count(*) FROM sandboxes WHERE tenant_id = '_pools' AND phase NOT IN ('deleted', 'failed', 'lost')")" = 0 ] \
      && break
    sleep 0.2
  done
fi

# ---- 0 / 1,000 / 10,000 live -----------------------------------------------
LIVE_ROWS=()
if want live; then
  have=$(q "SELECT count(*) FROM sandboxes WHERE phase NOT IN ('deleted', 'failed', 'lost')")
  for n in $LIVE; do
    if [ "$n" -gt "$have" ]; then
      say "populate: $((n - have)) more live sandboxes (to $n)"
      "$SIM" populate --controller "$URL1" --token-file "$TMP/member.token" --count $((n - have)) --clients 32 --json \
        >"$TMP/populate-$n.json" 2>"$TMP/populate-$n.err" || { cat "$TMP/populate-$n.err" >&2; die "populate failed"; }
      have=$n
    fi
    sleep 2 # let the last reports and beats settle
    if [ "$n" -gt 0 ] && [ "$SETTLE" -gt 0 ]; then
      say "settle $SETTLE s at $n live (past the heartbeats' window of recent changes)"
      sleep "$SETTLE"
    fi
    # the steady state, not the populate's aftermath: what autovacuum would
    # do about the rows it just wrote, done now
    q "VACUUM ANALYZE sandboxes" >/dev/null; q "VACUUM ANALYZE operations" >/dev/null; q "VACUUM ANALYZE events" >/dev/null
    say "idle $SECONDS_IDLE s at $n live"
    q "SELECT pg_stat_statements_reset()" >/dev/null
    x0=$(xacts); s0=$(stmts); w0=$(wal); pg_cpu_snap sandbox "$TMP/cpu0"; k0=$(pid_ticks "$CTL_PID_1")
    sleep "$SECONDS_IDLE"
    x1=$(xacts); s1=$(stmts); w1=$(wal); pg_cpu_snap sandbox "$TMP/cpu1"; k1=$(pid_ticks "$CTL_PID_1")
    # what the idle window cost, by statement: calls per second, mean and
    # total execution time per second (ms), rows written to WAL per call
    q "SELECT round(calls::numeric / $SECONDS_IDLE, 1) || ' | ' || CASE WHEN toplevel THEN 'top' ELSE 'nested' END \
      || ' | ' || round(mean_exec_time::numeric, 3) || ' | ' || round(total_exec_time::numeric / $SECONDS_IDLE, 2) \
      || ' | ' || round(wal_bytes::numeric / greatest(calls, 1)) || ' | ' || left(regexp_replace(query, '\s+', ' ', 'g'), 110) \
      FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = 'sandbox' \
      ORDER BY total_exec_time DESC LIMIT 30" >"$OUT/statements-live-$n.txt" 2>/dev/null || true
    pgms=$(pg_cpu_ms "$TMP/cpu0" "$TMP/cpu1")
    rss=$(rss_kib "$CTL_PID_1")
    "$SIM" probe --controller "$URL1" --token-file "$TMP/member.token" --get 200 --list 50 --json \
      >"$TMP/probe-$n.json" 2>"$TMP/probe-$n.err" || { cat "$TMP/probe-$n.err" >&2; die "probe failed"; }
    run_load "$URL1" 8 "$SECONDS_IDLE" "$TMP/live-load-$n.json"
    LIVE_ROWS+=("$n|$(calc "round(($k1 - $k0) * 1000 / $HZ / $SECONDS_IDLE, 1)")|$(calc "round($pgms / $SECONDS_IDLE, 1)")|$(calc "round(($x1 - $x0) / $SECONDS_IDLE)")|$(calc "round(($s1 - $s0) / $SECONDS_IDLE)")|$(calc "round(($w1 - $w0) / 1024 / $SECONDS_IDLE, 1)")|$(calc "round($rss / 1024, 1)")|$(jget "$TMP/probe-$n.json" get.p50_ms)|$(jget "$TMP/probe-$n.json" get.p99_ms)|$(jget "$TMP/probe-$n.json" list.p50_ms)|$(jget "$TMP/probe-$n.json" list.p99_ms)|$(jget "$TMP/live-load-$n.json" kinds.create.ops_per_s)")
  done
fi

report
