#!/usr/bin/env bash
# `sandboxd all` with no database URL: starts its embedded PostgreSQL (as the
# postgres user when root), writes a bootstrap admin token, serves the
# lifecycle, stops PostgreSQL on SIGTERM (exit 0) and reuses the data on restart;
# `sandboxd backup` of its database while it runs, `sandboxd restore` refused
# while it runs and done while it is stopped;
# its first screen says whether gVisor is offered and how to turn it on; a
# port another process holds is a start failure naming the listener's flag.
# itest-standalone
# itest-cost: 60
# itest-timeout: 420
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

dir="$ITEST_TMP/all-data-$$"
port=$(itest_free_port)
log="$ITEST_TMP/all-$$.log"
url="http://127.0.0.1:$port"
itest_watch_log "$log"
itest_watch_log "$dir/postgres.log"

# start_all [FLAGS...]
start_all() {
  env -u SANDBOX_DATABASE_URL -u DATABASE_URL SANDBOX_WORKER_CPU_MILLIS=64000 SANDBOX_WORKER_MEMORY_MIB=262144 \
    "$SANDBOXD" all --data-dir "$dir" --listen "127.0.0.1:$port" --controller-url "$url" "$@" >>"$log" 2>&1 </dev/null &
  all_pid=$!
  itest_track_pid "$all_pid"
  itest_wait_healthz "$url" "$all_pid" "sandboxd all" "$log" || fail "sandboxd all did not come up"
}

# stop_all: SIGTERM must end it with status 0 within 30 s and stop PostgreSQL
stop_all() {
  local rc=0 pmpid
  pmpid=$(head -n 1 "$dir/postgres/postmaster.pid" 2>/dev/null || true)
  itest_stop_pid "$all_pid" "sandboxd all" 30 || rc=$?
  assert_eq 0 "$rc" "exit status of sandboxd all after SIGTERM"
  [ ! -e "$dir/postgres/postmaster.pid" ] || fail "postmaster.pid still there after sandboxd all exited"
  rc=0
  itest_as_pg "$ITEST_PGBIN/pg_ctl" status -D "$dir/postgres" >/dev/null 2>&1 || rc=$?
  assert_eq 3 "$rc" "pg_ctl status of the embedded cluster after exit (3 = not running)"
  # pg_ctl -w returns once postmaster.pid is gone; the process itself may
  # need a moment more to be reaped
  if [ -n "$pmpid" ]; then
    itest_wait_until 10 "postmaster $pmpid to exit after sandboxd all exited" postmaster_gone "$pmpid"
  fi
}

# true when pid $1 is gone or a zombie
postmaster_gone() {
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null || true)
  [ -z "$state" ] || [ "$state" = Z ]
}

start_all
[ -f "$dir/postgres/PG_VERSION" ] || fail "no embedded cluster in $dir/postgres"
if [ "$(id -u)" -eq 0 ]; then
  pmpid=$(head -n 1 "$dir/postgres/postmaster.pid")
  assert_eq postgres "$(stat -c %U "/proc/$pmpid")" "user of the embedded postmaster"
fi
itest_wait_until 30 "$dir/admin.token" test -s "$dir/admin.token"
assert_eq 600 "$(stat -c %a "$dir/admin.token")" "mode of admin.token"
token=$(tr -d '[:space:]' <"$dir/admin.token")
assert_match "$token" '^sbt_[a-z2-7]{26}_[A-Za-z0-9_-]{43}$' "admin.token content"
# the output is a file here, not a terminal: the secret stays out of it
assert_not_contains "$(cat "$log")" "${token#sbt_*_}" "sandboxd all output to a file (the bootstrap token is not printed)"
assert_contains "$(cat "$log")" "admin token: created in $dir/admin.token" "sandboxd all output names the token file"

# the first screen says what became of gVisor (this dockerd has runsc registered
# exactly when `docker info` lists it); the worker prints it once its probes
# ran, the microVM probe's boot under TCG among them, which a busy host (a
# standalone test beside this one unpacking Debian packages) slows past a minute
case "$(docker info --format '{{json .Runtimes}}' 2>/dev/null)" in
  *'"runsc"'*) itest_wait_until 180 "the gVisor line" grep -q '^gVisor: offered' "$log" ;;
  *) itest_wait_until 180 "the gVisor line" grep -q '^gVisor: not offered' "$log" ;;
esac

export SANDBOX_URL=$url SANDBOX_TOKEN=$token
tenant=$(itest_tenant itest-all)
assert_exit 0 sandbox tenants create "$tenant"
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"
assert_exit 0 sandbox exec "$sbx" -- echo embedded
assert_eq embedded "$ITEST_OUT" "exec through sandboxd all"
assert_exit 0 sandbox delete "$sbx" --wait
assert_eq "" "$(docker ps -a --filter "label=dev.sandbox.id=$sbx" -q)" "containers left after delete"

# backup of the embedded database while sandboxd all runs: written, and the
# cluster left running for it; a restore is refused while it runs
assert_exit 0 env -u SANDBOX_DATABASE_URL -u DATABASE_URL "$SANDBOXD" backup "$ITEST_TMP/emb.dump" --data-dir "$dir"
assert_contains "$ITEST_OUT" "backed up to $ITEST_TMP/emb.dump" "backup of the embedded database"
assert_eq 600 "$(stat -c %a "$ITEST_TMP/emb.dump")" "mode of the backup file"
assert_exit 0 sandbox tenants create "$tenant-after"
assert_exit 3 env -u SANDBOX_DATABASE_URL -u DATABASE_URL "$SANDBOXD" restore "$ITEST_TMP/emb.dump" --data-dir "$dir"
assert_contains "$ITEST_ERR" "stop every controller" "a restore while sandboxd all runs"
assert_exit 0 sandbox tenants get "$tenant-after"

stop_all
# restored while stopped: the cluster started for it and stopped again; what
# came after the backup (a tenant) is gone on the next start
assert_exit 0 env -u SANDBOX_DATABASE_URL -u DATABASE_URL "$SANDBOXD" restore "$ITEST_TMP/emb.dump" --data-dir "$dir"
assert_contains "$ITEST_OUT" "restored $ITEST_TMP/emb.dump" "restore of the embedded database"
rc=0
itest_as_pg "$ITEST_PGBIN/pg_ctl" status -D "$dir/postgres" >/dev/null 2>&1 || rc=$?
assert_eq 3 "$rc" "pg_ctl status after a restore that started the cluster (3 = not running)"

# again: the same cluster and data (the old token and sandbox are still known);
# this time the worker looks for a gVisor runtime dockerd does not have, and
# the first screen says so and how to register it
log_off=$(itest_file_size "$log")
start_all --worker-gvisor-runtime sbx-no-such-runtime
itest_wait_until 180 "the gVisor line of the second start" \
  grep -q '^gVisor: not offered: dockerd has no runtime named sbx-no-such-runtime' "$log"
hint=$(tail -c +"$((log_off + 1))" "$log" | grep '^gVisor:')
assert_eq 1 "$(printf '%s\n' "$hint" | wc -l)" "one gVisor line"
assert_contains "$hint" '/etc/docker/daemon.json' "the gVisor hint names daemon.json"
assert_contains "$hint" '"sbx-no-such-runtime":{"path":"/usr/bin/runsc"' "the gVisor hint's snippet"
assert_contains "$hint" 'kill -HUP' "the gVisor hint says how to reload dockerd"
assert_contains "$hint" 'tools/run.sh' "the gVisor hint names tools/run.sh"
assert_exit 3 sandbox tenants get "$tenant-after"
assert_contains "$ITEST_ERR" "not_found" "a tenant made after the backup, after the restore"
assert_exit 0 sandbox tenants get "$tenant"
assert_exit 0 sandbox get "$sbx" --json
assert_eq deleted "$(itest_json "$ITEST_OUT" sandbox.phase phase)" "phase of the sandbox after restart"

# killed without a chance to clean up: sandboxd all and then its postmaster
# die by SIGKILL, leaving a stale postmaster.pid; the next start recovers
pmpid=$(head -n 1 "$dir/postgres/postmaster.pid")
kill -KILL "$all_pid"
wait "$all_pid" 2>/dev/null || true
kill -KILL "$pmpid"
itest_wait_until 15 "the killed postmaster to be gone" postmaster_gone "$pmpid"
[ -e "$dir/postgres/postmaster.pid" ] || fail "expected a stale postmaster.pid after SIGKILL"
start_all
assert_exit 0 sandbox get "$sbx" --json
assert_eq deleted "$(itest_json "$ITEST_OUT" sandbox.phase phase)" "phase of the sandbox after a SIGKILL restart"
stop_all

# a port another process holds: the start fails at once, naming the listener
# and its flag (the route listener here; the API listener below)
holder_out="$ITEST_TMP/holder-$$.port"
# not the python3 function of lib.sh: $! must be python itself
"$(command -v /usr/bin/python3 || command -v python3)" -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(8)
open(sys.argv[1], "w").write("%d\n" % s.getsockname()[1])
time.sleep(600)
' "$holder_out" &
holder_pid=$!
itest_track_pid "$holder_pid"
itest_wait_until 10 "the port holder" test -s "$holder_out"
held=$(cat "$holder_out")
assert_exit 1 timeout 120 env -u SANDBOX_DATABASE_URL -u DATABASE_URL "$SANDBOXD" all --data-dir "$dir" \
  --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$held"
assert_contains "$ITEST_ERR" "cannot listen on 127.0.0.1:$held for the route listener (--route-listen): Address already in use" \
  "route listener clash"
[ ! -e "$dir/postgres/postmaster.pid" ] || fail "the embedded PostgreSQL still runs after the failed start"
assert_exit 1 timeout 60 "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$held" \
  --route-listen 127.0.0.1:0
assert_contains "$ITEST_ERR" "cannot listen on 127.0.0.1:$held for the API listener (--listen): Address already in use" \
  "API listener clash"
