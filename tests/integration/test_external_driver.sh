#!/usr/bin/env bash
# The external runtime driver protocol (docs/runtime-drivers.md) through the
# real controller, worker and CLI, with the test driver fixture
# tests/integration/drivers/fakedriver.py (class microvm, "sandboxes" as
# host directories): one worker with worker_runtime = docker,external offers
# container and microvm; --hostile lands on the driver, a plain create on
# Docker; exec (output, exit code, stdin, timeout), files up and down, the
# inventory reconciled (an orphan removed); hostile archives where a guest's
# answer arrives (files_get: members beside the copy, "..", through a symlink
# in the user's folder, a device, a setuid file, a sparse member, one that
# says 1 TiB, an endless stream) are cut by the worker or refused by the CLI,
# which exits non-zero and writes nothing outside the destination, no
# device and no setuid bit; a sparse upload is refused before the driver
# sees it; a driver killed -9 mid-exec fails that exec clearly and is
# restarted, the sandbox still listed and usable; a driver that hangs, or
# sends garbage or a line over 1 MiB, is killed and restarted; a terminal
# session (shell_open) and a route (dial) reach the sandbox; a cancelled exec's
# tree is killed; delete removes
# it; the run directory (0700) goes with its worker, also one killed -9; a
# driver whose probe fails (or that speaks another protocol) leaves
# microvm unoffered, and --hostile is refused with isolation_unavailable.
# Traffic goes only to the test's own controller on loopback.
# itest-standalone
# itest-cost: 175
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

db="itest_extdrv_$$"
"$ITEST_PGBIN/psql" -X -q "$DATABASE_URL" -c "CREATE DATABASE $db"
dburl="${DATABASE_URL%/*}/$db"
assert_exit 0 "$SANDBOXD" migrate --database-url "$dburl"

work=$(mktemp -d "$ITEST_TMP/extdrv.XXXXXX")
clog="$work/controller.log"
wlog="$work/worker.log"
itest_watch_log "$clog"
itest_watch_log "$wlog"
port=$(itest_free_port)
rport=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$port" SANDBOX_ROUTE_URL="http://127.0.0.1:$rport"
"$SANDBOXD" controller --database-url "$dburl" --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" \
  >>"$clog" 2>&1 </dev/null &
cpid=$!
itest_track_pid "$cpid"
itest_wait_healthz "$SANDBOX_URL" "$cpid" controller "$clog" || fail "controller did not come up"
ITEST_ADMIN_TOKEN=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-extdrv --role admin)
export ITEST_ADMIN_TOKEN SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
wtoken=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-extdrv --role worker)
wname=itest-extdrv-worker

driver="$(cd "$(dirname "$0")" && pwd)/drivers/fakedriver.py"
state="$work/state"
control="$work/control.json"
pidfile="$work/driver.pid"
echo '{}' >"$control"
# on exit: the fixture's driver and its sandboxes' host processes, by pid
cleanup_driver() {
  local f p
  p=$(cat "$pidfile" 2>/dev/null) && kill -KILL "$p" 2>/dev/null
  for f in "$state"/*/meta.json; do
    [ -f "$f" ] || continue
    p=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f") && kill -KILL -- "-$p" 2>/dev/null
  done
  for f in "$state"/*/exec.*; do
    [ -f "$f" ] && kill -KILL -- "-${f##*/exec.}" 2>/dev/null
  done
  true
}
itest_on_exit cleanup_driver

start_worker() { # start_worker [ENV=V...]: the worker with both backends
  env "$@" FAKEDRIVER_STATE="$state" FAKEDRIVER_CONTROL="$control" FAKEDRIVER_PIDFILE="$pidfile" \
    SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=64000 SANDBOX_WORKER_MEMORY_MIB=262144 \
    SANDBOX_FILES_MAX_BYTES=8388608 \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" \
    --worker-runtime docker,external --worker-driver-command "[\"/usr/bin/python3\",\"$driver\"]" \
    >>"$wlog" 2>&1 </dev/null &
  wpid=$!
  itest_track_pid "$wpid"
  itest_wait_until 90 "worker $wname ready" itest_worker_ready "$wname"
}
worker_doc() {
  itest_http GET /v1/workers "$ITEST_ADMIN_TOKEN"
  python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
print(json.dumps(next(w for w in doc["workers"] if w["name"] == sys.argv[2])))
' "$HTTP_BODY" "$wname"
}
driver_pid() { cat "$pidfile" 2>/dev/null || echo 0; }
new_driver() { [ "$(driver_pid)" != "$1" ] && kill -0 "$(driver_pid)" 2>/dev/null; }
set_mode() { echo "$1" >"$control"; }
# probe_says TEXT: the registration's microvm probe result contains TEXT
probe_says() { itest_json "$(worker_doc)" probes.microvm | grep -qF -- "$1"; }

# ---- bad settings stop the worker at once with one line
assert_exit 2 "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-runtime docker,firecracker
assert_contains "$ITEST_ERR" 'worker_runtime must be a comma-separated list of docker, external' "a bad backend list"
assert_exit 2 "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-driver-command "$driver"
assert_contains "$ITEST_ERR" 'worker_driver_command must be a JSON array' "a driver command that is not JSON"
SANDBOX_WORKER_TOKEN="$wtoken" assert_exit 1 "$SANDBOXD" worker --controller-url "$SANDBOX_URL" \
  --worker-runtime docker,external
assert_contains "$ITEST_ERR" 'worker_driver_command is empty' "external without a driver command"

# ---- one worker, two backends: container from Docker, microvm from the driver
start_worker
w=$(worker_doc)
assert_contains "$(itest_json "$w" isolation)" '"container"' "classes of the worker"
assert_contains "$(itest_json "$w" isolation)" '"microvm"' "classes of the worker"
assert_match "$(itest_json "$w" probes.microvm)" '^ok: fakedriver 1.0 ran a probe sandbox' "probe result of microvm"
assert_eq '["none"]' "$(itest_json "$w" networks.microvm)" "networks of microvm"
assert_eq "docker,external" "$(itest_json "$w" runtime)" "the worker's runtime"
assert_contains "$(cat "$wlog")" "isolation microvm: ok: fakedriver" "worker log"
# the probe left no sandbox behind
assert_eq "" "$(ls "$state")" "sandboxes left in the driver after the probe"

# ---- --hostile lands on the driver, a plain create on Docker
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --network none --wait --timeout 90
read -r hsb _ <<<"$ITEST_OUT"
itest_track "$hsb"
assert_exit 0 sandbox get "$hsb" --json
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of the hostile sandbox"
assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "phase of the hostile sandbox"
ref=$("$ITEST_PGBIN/psql" -X -q -At "$dburl" -c "SELECT runtime_ref FROM sandboxes WHERE id = '$hsb'")
assert_match "$ref" '^x:fk[0-9a-f]+$' "runtime_ref of the hostile sandbox"
ls "$state" | grep -q '^fk' || fail "no sandbox directory in the driver's state"
assert_eq "" "$(docker ps -aq --filter "label=dev.sandbox.id=$hsb")" "Docker containers of the hostile sandbox"

assert_exit 0 sandbox create --image "$ITEST_IMAGE" --network none --wait --timeout 90
read -r csb _ <<<"$ITEST_OUT"
itest_track "$csb"
assert_exit 0 sandbox get "$csb" --json
assert_eq container "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of the plain sandbox"
[ -n "$(docker ps -q --filter "label=dev.sandbox.id=$csb")" ] || fail "no Docker container for the plain sandbox"
assert_exit 0 sandbox exec "$csb" -- echo from-docker
assert_eq from-docker "$ITEST_OUT" "exec in the Docker sandbox"

# ---- exec through the driver: output, exit code, stdin, timeout
assert_exit 3 sandbox exec "$hsb" -- sh -c 'echo out; echo err >&2; exit 3'
assert_eq out "$ITEST_OUT" "stdout through the driver"
assert_contains "$ITEST_ERR" err "stderr through the driver"
out=$(printf 'x%.0s' $(seq 1 3000) | sandbox exec --stdin "$hsb" -- wc -c) || fail "exec --stdin exited $?"
assert_eq 3000 "$(echo $out)" "stdin bytes through the driver"
assert_exit 137 sandbox exec --timeout 2 --json "$hsb" -- sleep 30
assert_eq true "$(itest_json "$ITEST_OUT" operation.result.timed_out result.timed_out timed_out)" "timed_out"
assert_exit 0 sandbox exec "$hsb" --max-output 1000 --json -- sh -c 'head -c 5000 /dev/zero | tr "\0" a'
assert_eq true "$(itest_json "$ITEST_OUT" operation.result.stdout_truncated result.stdout_truncated)" "stdout_truncated"
assert_eq 5000 "$(itest_json "$ITEST_OUT" operation.result.stdout_bytes result.stdout_bytes)" "stdout_bytes"
kept=$(itest_json "$ITEST_OUT" operation.result.stdout result.stdout)
assert_eq 1000 "${#kept}" "bytes of stdout kept"
assert_exit 127 sandbox exec "$hsb" -- /no/such/program

# ---- files up and down
printf 'hello driver\n' >"$work/up.txt"
assert_exit 0 sandbox cp "$work/up.txt" "$hsb:/tmp/up.txt"
assert_exit 0 sandbox exec "$hsb" -- cat tmp/up.txt
assert_eq "hello driver" "$ITEST_OUT" "the uploaded file inside the sandbox"
assert_exit 0 sandbox cp "$hsb:/tmp/up.txt" "$work/down.txt"
assert_eq "hello driver" "$(cat "$work/down.txt")" "the downloaded file"
assert_exit 3 sandbox cp "$work/up.txt" "$hsb:/nope/up.txt"
assert_contains "$ITEST_ERR" "not_found" "cp into a missing directory"
assert_exit 3 sandbox cp "$hsb:/no/such" "$work/nothing"
assert_contains "$ITEST_ERR" "not_found" "cp of a missing path"

# ---- files out are data, not instructions: the driver stands where a
# guest's own answer to files_get arrives (its tar replaced). Each copy goes
# into an existing folder dl-KIND (so the copy is dl-KIND/top); nothing may
# appear beside it or outside, the CLI must not say "copied".
assert_exit 0 sandbox exec "$hsb" -- mkdir -p tmp/top
t_hostile=$(date +%s%N)
hostile_cp() { # hostile_cp KIND EXIT: sandbox cp of /tmp/top under FAKEDRIVER_FILES_GET=KIND
  local kind=$1 want=$2
  mkdir -p "$work/dl-$kind" "$work/outside-$kind"
  set_mode "{\"files_get\":\"$kind\"}"
  ITEST_OUT=$(timeout 30 "$SANDBOX_CLI" cp "$hsb:/tmp/top" "$work/dl-$kind" 2>"$work/cp.err") && rc=0 || rc=$?
  ITEST_ERR=$(cat "$work/cp.err")
  set_mode '{}'
  itest_log "hostile files_get $kind: exit $rc: $ITEST_ERR"
  assert_eq "$want" "$rc" "the CLI's exit status for a $kind archive ($ITEST_ERR)"
  [ "$want" = 0 ] || assert_not_contains "$ITEST_OUT" "copied" "the CLI's output for a $kind archive"
  assert_eq "" "$(ls -A "$work/outside-$kind")" "files outside the destination after a $kind archive"
  assert_eq "" "$(find "$work/dl-$kind" -mindepth 1 -maxdepth 1 ! -name top -printf '%f ')" \
    "files beside the copy after a $kind archive"
}
hostile_cp sibling 3
assert_contains "$ITEST_ERR" "member sibling.txt is not the copied path's own name or below it" "the cut's reason"
hostile_cp dotdot 3
assert_contains "$ITEST_ERR" "member top/../../escape.txt has a '.' or '..' component" "the cut's reason"
[ ! -e "$work/escape.txt" ] || fail "a .. member landed beside the destination's folder"
mkdir -p "$work/dl-symlink/top"
ln -s "$work/outside-symlink" "$work/dl-symlink/top/sub"
hostile_cp symlink 1
assert_contains "$ITEST_ERR" "refused member top/sub/evil.txt: it would go through the symlink sub" "the CLI's refusal"
hostile_cp device 3
assert_contains "$ITEST_ERR" "member top/null is a character device" "the cut's reason"
[ ! -e "$work/dl-device/top/null" ] || fail "a device node was made from a sandbox's archive"
hostile_cp setuid 0
assert_eq "755 $(id -u)" "$(stat -c '%a %u' "$work/dl-setuid/top/suid")" "a setuid file of uid 1234, copied out"
hostile_cp sparse 3
assert_contains "$ITEST_ERR" "member top/big is a sparse file (PAX 1.0" "the cut's reason"
hostile_cp huge 3
assert_contains "$ITEST_ERR" "the download is larger than the sandbox's filesystem holds" "the cut's reason"
hostile_cp endless 3
assert_contains "$ITEST_ERR" "the download is larger than the 8388608 bytes a transfer may carry" "the cut's reason"
assert_contains "$(cat "$wlog")" "cut after" "the worker logs the cut transfers"
# a sparse member uploaded is refused before the driver sees a byte of it
truncate -s 6G "$work/sparse.img"
tar -C "$work" --sparse --format=posix --sparse-version=1.0 -cf "$work/sparse.tar" sparse.img
code=$(curl -s -o "$work/sp.json" -w '%{http_code}' -X PUT -H "Authorization: Bearer $SANDBOX_TOKEN" \
  --data-binary @"$work/sparse.tar" "$SANDBOX_URL/v1/sandboxes/$hsb/files?path=/tmp/top")
assert_eq 400 "$code" "a sparse upload to the driver ($(cat "$work/sp.json"))"
assert_contains "$(cat "$work/sp.json")" "member sparse.img is a sparse file (PAX 1.0" "the sparse upload's refusal"
assert_eq "" "$(find "$state" -name 'sparse.img' -o -name 'GNUSparseFile*')" "what the sparse upload left in the driver"
rm -f "$work/sparse.img" "$work/sparse.tar"
itest_log "hostile archives: $((($(date +%s%N) - t_hostile) / 1000000)) ms"

# ---- the driver's inventory is reconciled: a sandbox of this worker the
# controller does not know is removed (an orphan, as a crash between create
# and its report would leave)
orphan=fkorphan1
mkdir -p "$state/$orphan/root"
setsid sleep 1000 </dev/null >/dev/null 2>&1 &
opid=$!
python3 - "$state" "$orphan" "$opid" <<'PY'
import glob, json, os, sys
state, ref, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
src = next(json.load(open(f)) for f in glob.glob(state + "/fk*/meta.json") if "/" + ref + "/" not in f)
m = dict(src, ref=ref, pid=pid, sandbox_id="sbx_orphanorphanorphanorphan22")
m["labels"] = dict(src["labels"], **{"dev.sandbox.id": m["sandbox_id"]})
json.dump(m, open(os.path.join(state, ref, "meta.json"), "w"))
PY
orphan_gone() { [ ! -e "$state/$orphan" ]; }
itest_wait_until 30 "the orphan removed by the heartbeat" orphan_gone
kill -0 "$opid" 2>/dev/null && fail "the orphan's process survived its removal"
assert_contains "$(cat "$wlog")" "removed orphan x:fkorphan1 of sandbox sbx_orphanorphanorphanorphan22" "worker log"
assert_exit 0 sandbox exec "$hsb" -- echo still-here
assert_eq still-here "$ITEST_OUT" "the sandbox the controller wants is kept"

# ---- a terminal session through the driver (shell_open: a PTY over a framed stream)
python3 "$(dirname "$0")/shell_client.py" "$SANDBOX_CLI" "$hsb" >"$work/pty.out" 2>&1 ||
  fail "the terminal session through the driver: $(cat "$work/pty.out")"

# ---- a route to a port in the sandbox (dial: a raw stream)
hp=$(itest_free_port)
assert_exit 0 sandbox exec --detach --timeout 120 "$hsb" -- python3 -m http.server "$hp" --bind 127.0.0.1 --directory tmp
hop=$ITEST_OUT
itest_http POST "/v1/sandboxes/$hsb/routes" "$SANDBOX_TOKEN" "{\"port\":$hp,\"auth\":\"public\"}"
assert_http 202 "" "share port $hp of the driver sandbox"
rurl=$(itest_json "$HTTP_BODY" route.url)
route_serves() { [ "$(curl -s --max-time 5 "${rurl}up.txt")" = "hello driver" ]; }
itest_wait_until 30 "the route to the driver sandbox" route_serves

# ---- cancel of a running exec: the driver kills its tree, the operation ends cancelled
assert_exit 0 sandbox cancel "$hop"
op_cancelled() { [ "$(itest_json "$(sandbox operation "$hop" --json)" operation.state)" = cancelled ]; }
itest_wait_until 20 "the server's exec cancelled" op_cancelled
assert_eq "" "$(ls "$state"/*/ | grep '^exec\.' || true)" "exec processes left after the cancel"
route_serves && fail "the route still serves after its server's exec was cancelled"

# ---- the driver killed -9 mid-exec: that exec fails clearly, the driver is
# restarted, the sandbox is still listed and usable
p0=$(driver_pid)
sandbox exec "$hsb" -- sleep 20 >"$work/mid.out" 2>"$work/mid.err" &
epid=$!
sleep 3
kill -9 "$p0"
rc=0
wait "$epid" || rc=$?
[ "$rc" -ne 0 ] || fail "the exec survived its driver's death"
assert_contains "$(cat "$work/mid.err")" "driver fakedriver restarted" "the failed exec's error"
itest_wait_until 30 "a new driver" new_driver "$p0"
assert_exit 0 sandbox exec "$hsb" -- echo after-restart
assert_eq after-restart "$ITEST_OUT" "exec after the driver's restart"
assert_exit 0 sandbox get "$hsb" --json
assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "phase after the driver's restart"
assert_contains "$(cat "$wlog")" "driver fakedriver (pid $p0) ended: it exited (signal 9)" "worker log of the crash"

# ---- a driver that hangs is killed after the method's deadline (inspect: 15 s)
p1=$(driver_pid)
set_mode '{"hang":"inspect"}'
t0=$(date +%s)
assert_exit 1 sandbox exec "$hsb" -- echo never
t=$(($(date +%s) - t0))
[ "$t" -ge 14 ] && [ "$t" -le 40 ] || fail "the hung call failed after ${t}s (deadline 15 s)"
assert_contains "$ITEST_ERR" "did not answer in time" "the hung call's error"
set_mode '{}'
itest_wait_until 30 "a new driver after the hang" new_driver "$p1"
assert_exit 0 sandbox exec "$hsb" -- echo after-hang

# ---- garbage and a line over 1 MiB are protocol errors: killed, restarted;
# so is a driver that exits on a request
for m in garbage huge crash_on; do
  p2=$(driver_pid)
  set_mode "{\"$m\":\"inspect\"}"
  assert_exit 1 sandbox exec "$hsb" -- echo never
  assert_contains "$ITEST_ERR" "restarted" "the $m call's error"
  set_mode '{}'
  itest_wait_until 30 "a new driver after $m" new_driver "$p2"
  assert_exit 0 sandbox exec "$hsb" -- echo "after-$m"
done
assert_contains "$(cat "$wlog")" "ended: it exited (exit status 3)" "worker log of the driver that exited"
assert_contains "$(cat "$wlog")" "sent a line that is not JSON" "worker log of the garbage line"
assert_contains "$(cat "$wlog")" "it sent a line over 1 MiB" "worker log of the huge line"

# ---- the worker killed -9: its driver goes with it, the sandbox stays; the
# restarted worker's new driver finds it again (its inventory is reconciled)
p3=$(driver_pid)
rundir3=$(cat "$pidfile.rundir")
[ -d "$rundir3" ] && [ "$(stat -c %a "$rundir3")" = 700 ] || fail "the driver's run directory $rundir3 is not 0700"
kill -9 "$wpid"
wait "$wpid" 2>/dev/null || true
driver_gone() { ! kill -0 "$p3" 2>/dev/null; }
itest_wait_until 10 "the driver gone with its worker" driver_gone
start_worker
itest_wait_until 30 "a new driver after the worker's restart" new_driver "$p3"
[ ! -e "$rundir3" ] || fail "the run directory $rundir3 of the worker killed -9 is still there"
assert_exit 0 sandbox exec "$hsb" -- echo after-worker-kill
assert_eq after-worker-kill "$ITEST_OUT" "exec after the worker's restart"
assert_exit 0 sandbox get "$hsb" --json
assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "phase after the worker's restart"

# ---- delete removes it from the driver
assert_exit 0 sandbox delete "$hsb" --wait --timeout 60
assert_eq "" "$(ls "$state")" "sandboxes left in the driver after delete"

# ---- a driver whose probe fails: no microvm, --hostile refused, never downgraded
itest_stop_pid "$wpid" worker 30 || true
start_worker FAKEDRIVER_PROBE_FAIL=1
itest_wait_until 60 "the failed probe registered" probe_says "not offered"
w=$(worker_doc)
assert_not_contains "$(itest_json "$w" isolation)" '"microvm"' "classes of the worker whose probe failed"
assert_match "$(itest_json "$w" probes.microvm)" '^not offered: probe failed: `true` in the probe sandbox exited 1' \
  "probe result of the failed probe"
assert_exit 1 sandbox create --image "$ITEST_IMAGE" --hostile --network none --wait --timeout 60
assert_contains "$ITEST_ERR" "isolation_unavailable" "hostile create without microvm"
assert_eq "" "$(ls "$state")" "sandboxes left in the driver after the failed probe"

# ---- a driver speaking another protocol: not used
itest_stop_pid "$wpid" worker 30 || true
start_worker FAKEDRIVER_PROTOCOL=2
itest_wait_until 60 "the protocol 2 driver registered" probe_says "protocol 2"
w=$(worker_doc)
assert_not_contains "$(itest_json "$w" isolation)" '"microvm"' "classes with a protocol 2 driver"
assert_contains "$(itest_json "$w" probes.microvm)" "speaks protocol 2, the worker 1" "probe result of protocol 2"
itest_stop_pid "$wpid" worker 30 || true
kill -0 "$(driver_pid)" 2>/dev/null && fail "the driver outlived its worker"
[ ! -e "$(cat "$pidfile.rundir")" ] || fail "the run directory of the stopped worker is still there"
true
