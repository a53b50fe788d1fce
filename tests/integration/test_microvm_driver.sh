#!/usr/bin/env bash
# The microvm class for real: the controller, a worker with
# worker_runtime = docker,external and the reference driver sandbox-vmm
# (tools/sandbox-vmm.c over worker/vmm: QEMU microvm guests, KVM or TCG), and
# the CLI. The worker's probe offers microvm (the accelerator in its text);
# `sandbox create --hostile` lands in a VM (a QEMU process, no container);
# `uname -r` is the guest kernel; output over the bound is truncated; an exec
# timeout kills the tree; stdin; the console log stays bounded while the
# guest floods its serial port; cp up and down; a guest that replaced its
# tar answers a download with a hostile archive (a setuid file, then a
# member beside the copy): the worker cuts it, the CLI exits 3, nothing lands
# beside the copy and no setuid bit; a PTY shell; a route to a
# guest port; the guest sees none of the host's files, processes or network;
# the worker and its driver killed -9 mid-run and kept away for 60 s: the
# sandbox is unreachable meanwhile, and on restart the VM is found again
# with its file and a process that kept counting; a pause freezes the VM
# (memory kept) and its resume goes on with that process; TTL expiry removes the VM; a VM the controller no longer wants is removed on
# restart; a volume is a VM's disk, written there and read by a container
# and a read-only VM after it; a paused VM's snapshot starts a microvm with
# its file; a snapshot with its memory forks into 2 VMs that go on counting
# from where it was, and starts a VM on a second worker (copied there by
# the controller, the VM resumed with its counter going on); a template built in a container starts a microvm with its
# files, ENV and WORKDIR; delete leaves no QEMU process or VM file. Slow under TCG: one VM
# serves most checks. Traffic goes only to the test's controller on loopback.
# itest-standalone
# itest-cost: 240
# itest-timeout: 600
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (QEMU drops to an unprivileged user)"
command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86 is not installed (tools/lib.sh installs it)"
vmm="$ITEST_BUILD/tools/sandbox-vmm"
[ -x "$vmm" ] || fail "no $vmm"

db="itest_vmmdrv_$$"
"$ITEST_PGBIN/psql" -X -q "$DATABASE_URL" -c "CREATE DATABASE $db"
dburl="${DATABASE_URL%/*}/$db"
assert_exit 0 "$SANDBOXD" migrate --database-url "$dburl"

work=$(mktemp -d "$ITEST_TMP/vmmdrv.XXXXXX")
# the driver's state: QEMU's unprivileged user must reach its VM directory
vstate=$(mktemp -d /tmp/sbx-vmmdrv-state.XXXXXX)
chmod 711 "$vstate"
# worker B's (its own driver, for snapshot copies between workers)
vstate2=$(mktemp -d /tmp/sbx-vmmdrv-state.XXXXXX)
chmod 711 "$vstate2"
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
ITEST_ADMIN_TOKEN=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-vmmdrv --role admin)
export ITEST_ADMIN_TOKEN SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
wtoken=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-vmmdrv --role worker)
wname=itest-vmmdrv-worker

# on exit: every QEMU of this state dir, by its pid file, then the state
# (after a failure, each VM's console first: what its guest said)
cleanup_vms() {
  local f
  if [ "${rc:-0}" -ne 0 ]; then # itest_end's
    for f in "$vstate"/vms/*/console.log "$vstate2"/vms/*/console.log; do
      [ -f "$f" ] && itest_log_tail "$f" 0 25
    done
  fi
  for f in "$vstate"/vms/*/qemu.pid "$vstate2"/vms/*/qemu.pid; do
    [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
  sleep 0.5
  rm -rf "$vstate" "$vstate2"
  true
}
itest_on_exit cleanup_vms

start_worker() {
  SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=8000 SANDBOX_WORKER_MEMORY_MIB=16384 \
    SANDBOX_WORKER_VOLUME_DIR="$work/volumes" "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" \
    --worker-runtime docker,external \
    --worker-driver-command "[\"$vmm\",\"--state\",\"$vstate\",\"--image\",\"$ITEST_IMAGE\"]" \
    >>"$wlog" 2>&1 </dev/null &
  wpid=$!
  itest_track_pid "$wpid"
  itest_wait_until 240 "worker $wname ready with microvm" worker_has_microvm
}
worker_doc() {
  itest_http GET /v1/workers "$ITEST_ADMIN_TOKEN"
  python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
print(json.dumps(next((w for w in doc["workers"] if w["name"] == sys.argv[2]), {})))
' "$HTTP_BODY" "${1:-$wname}"
}
worker_has_microvm() { itest_worker_ready "$wname" && itest_json "$(worker_doc)" isolation | grep -q '"microvm"'; }
qemu_pids() { pgrep -f -- "$vstate/vms/" || true; }
# a live process (a zombie the host's init has yet to reap is gone)
alive() { [ -e "/proc/$1" ] && [ "$(ps -o stat= -p "$1" | cut -c1)" != Z ]; }
# started PID: when the process PID started (its /proc stat's field 22), to
# tell it from a later process given the same PID (pid_max is 32768 here,
# and a whole run makes more processes than that)
started() { awk '{print $22}' "/proc/$1/stat" 2>/dev/null || true; }
# alive_same PID START: PID is alive and is the process that started at START
alive_same() { alive "$1" && [ "$(started "$1")" = "$2" ]; }
driver_pid() { pgrep -f -- "^$vmm --state $vstate" | head -n1 || true; }

# ---- the worker offers microvm, probed, with its accelerator
t0=$(date +%s%N)
start_worker
itest_log "worker ready with microvm after $((($(date +%s%N) - t0) / 1000000)) ms (includes the first template)"
w=$(worker_doc)
assert_contains "$(itest_json "$w" isolation)" '"container"' "classes of the worker"
probe=$(itest_json "$w" probes.microvm)
assert_match "$probe" '^ok: sandbox-vmm 0\.1\.0 ran a probe sandbox: qemu microvm, kernel .*, accel (kvm|tcg)' "probe result of microvm"
assert_contains "$probe" "open only through the worker's egress filter" "the probe says how open is offered"
accel=$(grep -o 'accel \(kvm\|tcg\)' <<<"$probe" | head -n1 | cut -d' ' -f2)
assert_eq '["none","restricted"]' "$(itest_json "$w" networks.microvm | tr -d ' ')" \
  "networks of microvm (this worker runs no egress filter: no open)"
assert_eq "" "$(ls "$vstate/vms")" "VMs left after the probe"
assert_eq "" "$(ls "$vstate/sandboxes")" "records left after the probe"

# ---- --hostile lands in a VM
t0=$(date +%s%N)
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --network none --wait --timeout 200
create_ms=$((($(date +%s%N) - t0) / 1000000))
read -r hsb _ <<<"$ITEST_OUT"
itest_track "$hsb"
assert_exit 0 sandbox get "$hsb" --json
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of the hostile sandbox"
assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "phase of the hostile sandbox"
assert_eq "$accel" "$(itest_json "$ITEST_OUT" sandbox.accelerator)" "accelerator of the hostile sandbox"
assert_exit 0 sandbox get "$hsb"
assert_contains "$ITEST_OUT" "microvm ($accel)" "sandbox get shows the class with its accelerator"
ref=$("$ITEST_PGBIN/psql" -X -q -At "$dburl" -c "SELECT runtime_ref FROM sandboxes WHERE id = '$hsb'")
assert_match "$ref" '^x:v[0-9a-f]{16}$' "runtime_ref of the hostile sandbox"
vm=${ref#x:}
[ -d "$vstate/vms/$vm" ] || fail "no VM directory for $vm"
qpid=$(cat "$vstate/vms/$vm/qemu.pid")
qstart=$(started "$qpid")
assert_contains "$(tr '\0' ' ' <"/proc/$qpid/cmdline")" "-M microvm" "the sandbox's QEMU"
assert_eq "" "$(docker ps -aq --filter "label=dev.sandbox.id=$hsb")" "Docker containers of the hostile sandbox"
grep -q "\"sandbox_id\":\"$hsb\"" "$vstate/sandboxes/$vm.json" || fail "no sandbox record with the labels"

# ---- a tenant whose policy requires microvm for all its work: a plain
# create (no trust flag) runs in a VM too
assert_exit 0 sandbox tenants create itest-vmonly
assert_exit 0 sandbox tenants update itest-vmonly --policy '{"isolation_trusted":"microvm"}'
assert_exit 0 sandbox create --tenant itest-vmonly --image "$ITEST_IMAGE" --network none --wait --timeout 200
read -r psb _ <<<"$ITEST_OUT"
itest_track "$psb"
assert_exit 0 sandbox get "$psb" --json
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of a trusted create in a microvm-only tenant"
assert_exit 0 sandbox delete "$psb" --wait --timeout 120

# ---- the official E2B SDK on a microVM (docs/e2b.md): a command, its exit
# code, stdin to a running process, a file written and read
e2b_dir="$(dirname "$0")/../e2b"
itest_npm_install "$e2b_dir" "the E2B SDK (e2b)" || fail "$ITEST_NPM_ERROR"
e2b_out="$work/e2b.out"
if ! (cd "$e2b_dir" && E2B_API_URL="$SANDBOX_URL/e2b" E2B_SANDBOX_URL="$SANDBOX_URL/e2b/envd" \
  E2B_API_KEY="$SANDBOX_TOKEN" E2B_CHECK_PARTS=microvm timeout 300 node e2b_check.mjs) >"$e2b_out" 2>&1; then
  cat "$e2b_out"
  fail "the E2B SDK on a microVM failed (output above)"
fi
assert_contains "$(cat "$e2b_out")" "e2b-check: microvm ok" "the E2B SDK on a microVM"

# ---- a sandbox with the shortest TTL: checked at the end (its VM gone)
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --network none --ttl 10 --wait --timeout 200
read -r tsb _ <<<"$ITEST_OUT"
itest_track "$tsb"
tref=$("$ITEST_PGBIN/psql" -X -q -At "$dburl" -c "SELECT runtime_ref FROM sandboxes WHERE id = '$tsb'")
tpid=$(cat "$vstate/vms/${tref#x:}/qemu.pid")
tstart=$(started "$tpid")

# ---- exec: the guest kernel, stdout/stderr/exit code, the bound, timeout, stdin
t0=$(date +%s%N)
assert_exit 0 sandbox exec "$hsb" -- true
exec_ms=$((($(date +%s%N) - t0) / 1000000))
guest_kernel=$(ls /boot/vmlinuz-* | sort -V | tail -n1)
guest_kernel=${guest_kernel#/boot/vmlinuz-}
assert_exit 0 sandbox exec "$hsb" -- uname -r
assert_eq "$guest_kernel" "$ITEST_OUT" "uname -r in the VM"
assert_exit 0 sandbox exec "$hsb" -- cat /proc/1/cmdline
assert_eq "/init" "$(tr -d '\0' <<<"$ITEST_OUT")" "PID 1 of the guest is the agent"
assert_exit 3 sandbox exec "$hsb" -- sh -c 'echo out; echo err >&2; exit 3'
assert_eq out "$ITEST_OUT" "stdout"
assert_contains "$ITEST_ERR" err "stderr"
assert_exit 0 sandbox exec "$hsb" --max-output 1000 --json -- sh -c 'head -c 5000 /dev/zero | tr "\0" a'
assert_eq true "$(itest_json "$ITEST_OUT" operation.result.stdout_truncated result.stdout_truncated)" "stdout_truncated"
assert_eq 5000 "$(itest_json "$ITEST_OUT" operation.result.stdout_bytes result.stdout_bytes)" "stdout_bytes"
kept=$(itest_json "$ITEST_OUT" operation.result.stdout result.stdout)
assert_eq 1000 "${#kept}" "bytes of stdout kept"
assert_exit 137 sandbox exec --timeout 2 --json "$hsb" -- sh -c 'sleep 300 & sleep 300'
assert_eq true "$(itest_json "$ITEST_OUT" operation.result.timed_out result.timed_out timed_out)" "timed_out"
assert_exit 0 sandbox exec "$hsb" -- sh -c 'ps -o comm | grep -c "^sleep" || true'
assert_eq 0 "$ITEST_OUT" "sleeps left in the guest after the timeout (the tree was killed)"
# three execs at once in one VM run side by side (the driver interleaves them)
t0=$(date +%s%N)
pids=()
for _ in 1 2 3; do
  sandbox exec "$hsb" -- sleep 3 >/dev/null 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || fail "a parallel exec failed"; done
par_ms=$((($(date +%s%N) - t0) / 1000000))
[ "$par_ms" -lt 8000 ] || fail "three 3 s execs in one VM took $par_ms ms: serialised"
out=$(head -c 3000 /dev/zero | tr '\0' x | sandbox exec --stdin "$hsb" -- wc -c) || fail "exec --stdin exited $?"
assert_eq 3000 "$(echo $out)" "stdin bytes into the VM"
assert_exit 127 sandbox exec "$hsb" -- /no/such/program

# ---- the console: a guest writing 3 MB to its serial port as fast as it
# can does not grow console.log past SBX_VMM_CONSOLE_MAX (1 MiB) for more
# than a trim interval (2 s); what is kept says what was dropped
con="$vstate/vms/$vm/console.log"
peak=0
sandbox exec --timeout 120 "$hsb" -- sh -c 'head -c 3000000 /dev/zero | tr "\0" x >/dev/ttyS0' >/dev/null 2>&1 &
spid=$!
itest_track_pid "$spid"
while kill -0 "$spid" 2>/dev/null; do
  sz=$(stat -c %s "$con")
  [ "$sz" -le "$peak" ] || peak=$sz
  sleep 0.2
done
wait "$spid" || fail "the serial writer exited $?"
sleep 2.5
final=$(stat -c %s "$con")
itest_log "console.log while the guest wrote 3 MB to ttyS0: peak $peak bytes, $final after it"
[ "$final" -le 1048576 ] || fail "console.log is $final bytes after the guest wrote 3 MB (bound 1 MiB)"
[ "$peak" -le 2097152 ] || fail "console.log reached $peak bytes while the guest wrote 3 MB"
grep -q "earlier console output dropped" "$con" || fail "console.log does not say output was dropped"

# ---- files up and down
head -c 200000 /dev/urandom >"$work/up.bin"
assert_exit 0 sandbox cp "$work/up.bin" "$hsb:/tmp/up.bin"
assert_exit 0 sandbox exec "$hsb" -- md5sum /tmp/up.bin
assert_eq "$(md5sum <"$work/up.bin" | cut -d' ' -f1)" "$(cut -d' ' -f1 <<<"$ITEST_OUT")" "the uploaded file in the VM"
assert_exit 0 sandbox cp "$hsb:/tmp/up.bin" "$work/down.bin"
cmp -s "$work/up.bin" "$work/down.bin" || fail "the downloaded file differs"
assert_exit 3 sandbox cp "$hsb:/no/such" "$work/nothing"
assert_contains "$ITEST_ERR" "not_found" "cp of a missing path"

# ---- the guest is root and makes its own archives: it replaces the tar
# sandbox-vmm runs in it (/.sbx/busybox tar -c) with one answering a hostile
# tar; the worker cuts the download, the CLI writes nothing beside the copy
t_guest=$(date +%s%N)
python3 - "$work/evil.tar" <<'PY'
import io, sys, tarfile
with tarfile.open(sys.argv[1], "w", format=tarfile.PAX_FORMAT) as t:
    d = tarfile.TarInfo("top"); d.type = tarfile.DIRTYPE; d.mode = 0o755; t.addfile(d)
    f = tarfile.TarInfo("top/suid"); f.size = 3; f.mode = 0o4755; f.uid = 1234; t.addfile(f, io.BytesIO(b"hi\n"))
    b = tarfile.TarInfo("beside.txt"); b.size = 3; t.addfile(b, io.BytesIO(b"no\n"))
PY
assert_exit 0 sandbox cp "$work/evil.tar" "$hsb:/tmp/evil.tar"
# /.sbx is read-only to the guest, but the guest is root: a copy of it with
# a tar of its own, mounted over it
# shellcheck disable=SC2016 # $1, $2 and $@ are the guest's shell's
assert_exit 0 sandbox exec "$hsb" -- sh -c 'mkdir -p /tmp/top /tmp/sbx/real && cp -a /.sbx/. /tmp/sbx/ &&
  cp /.sbx/busybox /tmp/sbx/real/busybox &&
  printf "#!/bin/sh\nif [ \"\$1 \$2\" = \"tar -c\" ]; then exec cat /tmp/evil.tar; fi\nexec /.sbx/real/busybox \"\$@\"\n" \
    >/tmp/sbx/busybox && chmod 755 /tmp/sbx/busybox && mount --bind /tmp/sbx /.sbx'
mkdir -p "$work/guestdl"
assert_exit 3 sandbox cp "$hsb:/tmp/top" "$work/guestdl"
assert_contains "$ITEST_ERR" "member beside.txt is not the copied path's own name or below it" "the cut's reason"
assert_eq "" "$(find "$work/guestdl" -mindepth 1 -maxdepth 1 ! -name top -printf '%f ')" \
  "what the guest's archive put beside the copy"
[ ! -e "$work/guestdl/top/suid" ] || assert_eq 755 "$(stat -c %a "$work/guestdl/top/suid")" "the guest's setuid file"
assert_exit 0 sandbox exec "$hsb" -- sh -c 'umount /.sbx && rm -rf /tmp/sbx /tmp/evil.tar /tmp/top'
itest_log "a guest's own tar: $((($(date +%s%N) - t_guest) / 1000000)) ms"

# ---- a PTY session
python3 "$(dirname "$0")/shell_client.py" "$SANDBOX_CLI" "$hsb" >"$work/pty.out" 2>&1 ||
  fail "the terminal session in the VM: $(cat "$work/pty.out")"

# ---- a route to a guest port (busybox httpd on the guest's loopback)
hp=8080
assert_exit 0 sandbox exec "$hsb" -- sh -c 'echo hello-from-the-vm >/tmp/index.html'
assert_exit 0 sandbox exec --detach --timeout 300 "$hsb" -- httpd -f -p "127.0.0.1:$hp" -h /tmp
itest_http POST "/v1/sandboxes/$hsb/routes" "$SANDBOX_TOKEN" "{\"port\":$hp,\"auth\":\"public\"}"
assert_http 202 "" "share port $hp of the VM"
rurl=$(itest_json "$HTTP_BODY" route.url)
route_serves() { [ "$(curl -s --max-time 5 "${rurl}index.html")" = "hello-from-the-vm" ]; }
itest_wait_until 60 "the route to the VM" route_serves

# ---- the guest sees nothing of the host
marker="/tmp/sbx-vmmdrv-host-marker.$$"
echo secret >"$marker"
assert_exit 0 sandbox exec "$hsb" -- sh -c "ls $marker 2>&1; ls /work 2>&1; true"
assert_contains "$ITEST_OUT" "No such file" "the host's files are not in the guest"
rm -f "$marker"
assert_exit 0 sandbox exec "$hsb" -- sh -c 'ps -o comm'
assert_not_contains "$ITEST_OUT" "sandboxd" "the host's processes are not in the guest"
assert_not_contains "$ITEST_OUT" "qemu" "the host's processes are not in the guest"
assert_exit 0 sandbox exec "$hsb" -- ls /sys/class/net
assert_eq "lo" "$(echo $ITEST_OUT)" "the guest's only network interface"

# ---- the worker and its driver killed -9 mid-run and kept away for 60 s
# while the controller runs (issue 29): the sandbox is unreachable, not
# lost, meanwhile; back, the VM is found again with its file and a process
# that kept counting
count() { itest_counter "$hsb"; }
assert_exit 0 sandbox exec "$hsb" -- sh -c "echo kept >/tmp/kept"
assert_exit 0 itest_counter_start "$hsb"
itest_wait_until 20 "the counter in the VM" count
before=$(count) || fail "cannot read the counter in the VM"
p0=$(driver_pid)
[ -n "$p0" ] || fail "no driver process"
kill -9 "$wpid" "$p0"
t0=$(date +%s)
wait "$wpid" 2>/dev/null || true
alive_same "$qpid" "$qstart" || fail "the VM died with its driver"
away() { itest_json "$(sandbox get "$hsb" --json)" sandbox.unreachable.worker >/dev/null 2>&1; }
itest_wait_until 60 "the VM's sandbox shown unreachable (worker_timeout_seconds)" away
assert_exit 3 sandbox exec "$hsb" -- true
assert_contains "$ITEST_ERR" "is unreachable" "an exec while the worker is away"
left=$((60 - ($(date +%s) - t0)))
[ "$left" -le 0 ] || sleep "$left"
start_worker
itest_log "the worker and its driver were away for $(($(date +%s) - t0)) s"
assert_exit 0 sandbox exec "$hsb" -- echo after-kill
assert_eq after-kill "$ITEST_OUT" "exec in the VM after the worker's and driver's restart"
assert_exit 0 sandbox get "$hsb" --json
assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "phase after the restart"
assert_eq "$qpid" "$(cat "$vstate/vms/$vm/qemu.pid")" "the same QEMU after the restart"
assert_exit 0 sandbox exec "$hsb" -- cat /tmp/kept
assert_eq kept "$ITEST_OUT" "the VM's file after 60 s away"
now=$(count) || fail "cannot read the counter in the VM after the restart"
[ "$now" -ge $((before + 55)) ] || fail "the VM's counter went from $before to $now over 60 s away"

# ---- pause and resume (docs/pause.md): the VM's QEMU frozen, its memory
# kept: the counter process goes on where it was, its file is there
assert_exit 0 sandbox pause "$hsb" --wait --timeout 60 --json
assert_eq true "$(itest_json "$ITEST_OUT" operation.result.memory)" "a microvm pause keeps the memory"
assert_eq T "$(awk '{print $3}' "/proc/$qpid/stat")" "the paused VM's QEMU is stopped"
assert_exit 3 sandbox exec "$hsb" -- true
assert_contains "$ITEST_ERR" "paused" "an exec in the paused VM"
sleep 5 # paused: nothing runs in the VM
assert_exit 0 sandbox resume "$hsb" --wait --timeout 60
assert_eq running "$(itest_json "$(sandbox get "$hsb" --json)" sandbox.phase)" "the VM after the resume"
assert_eq "$qpid" "$(cat "$vstate/vms/$vm/qemu.pid")" "the same QEMU after the resume"
assert_exit 0 sandbox exec "$hsb" -- cat /tmp/kept
assert_eq kept "$ITEST_OUT" "the VM's file after the pause"
p1=$(count) || fail "cannot read the counter after the resume"
counting_on() { local n; n=$(count) && [ "$n" -gt "$p1" ]; }
itest_wait_until 20 "the counter counting on after the resume" counting_on
[ "$p1" -ge "$now" ] && [ "$p1" -le $((now + 30)) ] || fail "the counter went from $now to $p1 over the pause (it was frozen, not restarted)"

# ---- a VM the controller no longer wants: deleted while its worker and
# driver are dead (kill -9), removed once the worker is back
t0=$(date +%s%N)
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --network restricted --wait --timeout 200
warm_ms=$((($(date +%s%N) - t0) / 1000000))
read -r lsb _ <<<"$ITEST_OUT"
itest_track "$lsb"
assert_exit 0 sandbox get "$lsb" --json
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of the restricted sandbox"
lref=$("$ITEST_PGBIN/psql" -X -q -At "$dburl" -c "SELECT runtime_ref FROM sandboxes WHERE id = '$lsb'")
lpid=$(cat "$vstate/vms/${lref#x:}/qemu.pid")
lstart=$(started "$lpid")
kill -9 "$wpid" "$(driver_pid)"
wait "$wpid" 2>/dev/null || true
assert_exit 0 sandbox delete "$lsb"
start_worker
lgone() { ! alive_same "$lpid" "$lstart" && [ ! -e "$vstate/vms/${lref#x:}" ]; }
itest_wait_until 120 "the unwanted VM removed after the restart" lgone

# ---- TTL expiry removed its VM
ttl_gone() {
  [ "$(itest_json "$(sandbox get "$tsb" --json)" sandbox.phase)" = deleted ] && ! alive_same "$tpid" "$tstart" &&
    [ ! -e "$vstate/vms/${tref#x:}" ]
}
itest_wait_until 120 "the TTL sandbox's VM removed" ttl_gone

# ---- volumes (docs/volumes.md): a VM gets a volume as a disk, mounted at
# its path; what it wrote is read by a container after it, and by a
# container and a VM at once read-only; the claims go with the sandboxes
assert_exit 0 sandbox volumes create vmdata --size-mib 16
t0=$(date +%s%N)
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --network none -v vmdata:/data --wait --timeout 200
vol_ms=$((($(date +%s%N) - t0) / 1000000))
read -r vsb _ <<<"$ITEST_OUT"
itest_track "$vsb"
assert_exit 0 sandbox get "$vsb" --json
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of the sandbox with a volume"
vpid=$(cat "$vstate/vms/$("$ITEST_PGBIN/psql" -X -q -At "$dburl" -c "SELECT substr(runtime_ref, 3) FROM sandboxes WHERE id = '$vsb'")/qemu.pid")
assert_contains "$(tr '\0' ' ' <"/proc/$vpid/cmdline")" "serial=sbxvol0" "the VM's QEMU has the volume's disk"
assert_exit 0 sandbox exec "$vsb" -- sh -c 'grep " /data " /proc/mounts; echo from-the-vm > /data/f; sync'
assert_match "$ITEST_OUT" '^/dev/vd[b-z] /data ext4 rw' "the volume is an ext4 disk at /data in the guest"
[ -f "$work/volumes/mnt/$vsb/"*.rw ] || fail "no read-write claim of the VM's volume on the worker"
assert_exit 0 sandbox delete "$vsb" --wait --timeout 60
[ ! -e "$work/volumes/mnt/$vsb" ] || fail "the VM's volume claim outlived it"
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --isolation container -v vmdata:/data:ro --wait --timeout 120
read -r csb _ <<<"$ITEST_OUT"
itest_track "$csb"
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --network none -v vmdata:/data:ro --wait --timeout 200
read -r rsb _ <<<"$ITEST_OUT"
itest_track "$rsb"
assert_exit 0 sandbox exec "$csb" -- cat /data/f
assert_eq from-the-vm "$ITEST_OUT" "a container reads what the VM wrote"
assert_exit 0 sandbox exec "$rsb" -- cat /data/f
assert_eq from-the-vm "$ITEST_OUT" "a read-only VM reads it beside the container"
assert_exit 0 sandbox exec "$rsb" -- sh -c 'echo x > /data/g && echo wrote || echo refused'
assert_eq refused "$ITEST_OUT" "a write to a read-only disk"
assert_contains "$ITEST_ERR" "Read-only file system" "why the write to a read-only disk failed"
assert_exit 0 sandbox delete "$csb" "$rsb" --wait --timeout 60
assert_eq "" "$(ls "$work/volumes/mnt")" "volume mounts and claims left after the sandboxes"
assert_exit 0 sandbox volumes delete vmdata

# ---- snapshots (docs/snapshots.md): a VM's disk, taken while it is paused
# (the guest syncs, the VM frozen again after); a create from it is a
# microvm without asking and starts with the file; the two diverge; its
# bytes go once deleted
assert_exit 0 sandbox exec "$hsb" -- sh -c 'echo snapped > /snap.txt'
assert_exit 0 sandbox pause "$hsb" --wait --timeout 60
t0=$(date +%s%N)
assert_exit 0 sandbox snapshot "$hsb" --name vmsnap --wait --timeout 120 --json
snap_ms=$((($(date +%s%N) - t0) / 1000000))
assert_eq microvm "$(itest_json "$ITEST_OUT" snapshot.isolation)" "class of the VM's snapshot"
assert_eq T "$(awk '{print $3}' "/proc/$qpid/stat")" "the paused VM is frozen again after its snapshot"
assert_exit 0 sandbox resume "$hsb" --wait --timeout 60
assert_exit 0 sandbox exec "$hsb" -- sh -c 'echo after > /snap.txt'
assert_exit 0 sandbox create --from vmsnap --wait --timeout 200
read -r fsb _ <<<"$ITEST_OUT"
itest_track "$fsb"
assert_exit 0 sandbox get "$fsb" --json
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of a sandbox from a VM's snapshot"
assert_exit 0 sandbox exec "$fsb" -- cat /snap.txt
assert_eq snapped "$ITEST_OUT" "the file as the snapshot took it"
assert_exit 0 sandbox exec "$hsb" -- cat /snap.txt
assert_eq after "$ITEST_OUT" "the source went on without the copy"
assert_exit 3 sandbox snapshots copy vmsnap --worker "$wname"
assert_contains "$ITEST_ERR" "was made on worker $wname" "a copy to the worker that made it"
[ -f "$vstate/snapshots/$(itest_json "$(sandbox snapshots get vmsnap --json)" snapshot.id)/disk.qcow2" ] ||
  fail "no disk of the snapshot in the driver's state"
assert_exit 0 sandbox delete "$fsb" --wait --timeout 60
assert_exit 0 sandbox snapshots delete vmsnap
snaps_gone() { [ -z "$(ls "$vstate/snapshots")" ]; }
itest_wait_until 60 "the VM snapshot's bytes removed" snaps_gone

# ---- a snapshot with the VM's memory (snapshot --memory, and fork on
# microvm): the source goes on; fork into 2 resumes the saved machine
# twice, each with the counter process going on from where the snapshot
# took it (not started again), the file, and the host's clock; they
# diverge; the snapshot's bytes (its RAM among them) go with it
assert_exit 0 sandbox exec "$hsb" -- sh -c 'echo in-memory > /mem.txt; sync'
c0=$(count) || fail "cannot read the counter before the memory snapshot"
t0=$(date +%s%N)
assert_exit 0 sandbox snapshot "$hsb" --name vmmem --memory --wait --timeout 180 --json
memsnap_ms=$((($(date +%s%N) - t0) / 1000000))
assert_eq true "$(itest_json "$ITEST_OUT" snapshot.memory)" "the snapshot says it kept the memory"
memsnp=$(itest_json "$ITEST_OUT" snapshot.id)
[ -s "$vstate/snapshots/$memsnp/state.mig" ] || fail "no saved state in the memory snapshot"
assert_eq 600 "$(stat -c %a "$vstate/snapshots/$memsnp/state.mig")" "mode of the saved RAM"
assert_eq "$qpid" "$(cat "$vstate/vms/$vm/qemu.pid")" "the same QEMU after its memory snapshot"
c1=$(count) || fail "cannot read the counter in the source after its memory snapshot"
src_on() { local n; n=$(count) && [ "$n" -gt "$c1" ]; }
itest_wait_until 20 "the source's counter going on after its memory snapshot" src_on
t0=$(date +%s%N)
assert_exit 0 sandbox fork "$hsb" --count 2 --wait --timeout 300 --json
fork_ms=$((($(date +%s%N) - t0) / 1000000))
fj=$ITEST_OUT
for i in 0 1; do
  assert_eq true "$(itest_json "$fj" "sandboxes.$i.operation.result.memory")" "fork $i resumed the memory"
done
assert_eq true "$(itest_json "$fj" snapshot.memory)" "fork on microvm snapshots the memory"
f1=$(itest_json "$fj" sandboxes.0.sandbox.id)
f2=$(itest_json "$fj" sandboxes.1.sandbox.id)
itest_track "$f1"
itest_track "$f2"
for f in "$f1" "$f2"; do
  n=$(itest_counter "$f") || fail "cannot read the counter in fork $f"
  [ "$n" -ge "$c0" ] && [ "$n" -le $((c0 + 60)) ] || fail "fork $f's counter is $n; the snapshot took it near $c0 (a restart counts from 1)"
  fon() { local m; m=$(itest_counter "$f") && [ "$m" -gt "$n" ]; }
  itest_wait_until 20 "the counter going on in fork $f" fon
  assert_exit 0 sandbox exec "$f" -- cat /mem.txt
  assert_eq in-memory "$ITEST_OUT" "fork $f's file"
  assert_exit 0 sandbox exec "$f" -- date +%s
  skew=$(( ITEST_OUT - $(date +%s) ))
  [ "${skew#-}" -le 5 ] || fail "fork $f's clock is ${skew} s off the host's (a restored VM sets it from its host)"
done
assert_exit 0 sandbox exec "$f1" -- sh -c 'echo one > /mem.txt'
assert_exit 0 sandbox exec "$f2" -- cat /mem.txt
assert_eq in-memory "$ITEST_OUT" "the forks diverge"
# a create from a memory snapshot that is not that machine boots, and says so
assert_exit 0 sandbox create --from vmmem --memory-mib 320 --wait --timeout 200 --json
assert_eq false "$(itest_json "$ITEST_OUT" operation.result.memory)" "a create of another size boots"
cold=$(itest_json "$ITEST_OUT" sandbox.id)
itest_track "$cold"
assert_exit 0 sandbox exec "$cold" -- cat /mem.txt
assert_eq in-memory "$ITEST_OUT" "the booted sandbox's file from the memory snapshot"
n=$(itest_counter "$cold") || fail "no counter file in the booted sandbox (its disk has it)"
sleep 2.5
assert_eq "$n" "$(itest_counter "$cold")" "no counter runs in the sandbox that booted"
assert_exit 0 sandbox delete "$f1" "$f2" "$cold" --wait --timeout 60

# ---- a snapshot made on one worker starts a sandbox on another
# (docs/snapshots.md "Copies"): worker B runs the driver alone, with a state
# of its own and label site=b. A create from the memory snapshot that only
# B may take makes the controller copy it there (the driver's tar of disk
# and RAM, through the controller's data path), and the VM resumes on B:
# the counter goes on from where the snapshot took it, the file is there
wname2=itest-vmmdrv-b
wlog2="$work/worker-b.log"
itest_watch_log "$wlog2"
wtoken2=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-vmmdrv --role worker)
SANDBOX_WORKER_TOKEN="$wtoken2" SANDBOX_WORKER_LABELS=site=b SANDBOX_WORKER_CPU_MILLIS=8000 \
  SANDBOX_WORKER_MEMORY_MIB=16384 "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname2" \
  --worker-runtime external --worker-driver-command "[\"$vmm\",\"--state\",\"$vstate2\",\"--image\",\"$ITEST_IMAGE\"]" \
  >>"$wlog2" 2>&1 </dev/null &
w2pid=$!
itest_track_pid "$w2pid"
b_has_microvm() { itest_worker_ready "$wname2" && itest_json "$(worker_doc "$wname2")" isolation | grep -q '"microvm"'; }
itest_wait_until 240 "worker $wname2 ready with microvm" b_has_microvm
t0=$(date +%s%N)
itest_http POST /v1/sandboxes "$ITEST_ADMIN_TOKEN" '{"from":"vmmem","selector":{"site":"b"}}'
assert_http 202 "" "a create from the memory snapshot that only worker B may take"
bsb=$(itest_json "$HTTP_BODY" sandbox.id)
bop=$(itest_json "$HTTP_BODY" operation.id)
itest_track "$bsb"
assert_exit 0 sandbox wait "$bop" --timeout 300 --json
copy_ms=$((($(date +%s%N) - t0) / 1000000))
assert_eq true "$(itest_json "$ITEST_OUT" operation.result.memory)" "the VM on B resumed the copied memory"
assert_exit 0 sandbox get "$bsb" --json
assert_eq "$wname2" "$(itest_json "$ITEST_OUT" sandbox.worker)" "the sandbox from the copy runs on B"
assert_exit 0 sandbox snapshots get vmmem --json
assert_eq "$wname2" "$(itest_json "$ITEST_OUT" snapshot.copies.0.worker)" "the copy's worker"
assert_eq ready "$(itest_json "$ITEST_OUT" snapshot.copies.0.state)" "the copy is ready"
assert_eq "" "$("$ITEST_PGBIN/psql" -X -q -At "$dburl" -c \
  "SELECT coalesce(created_by, '') FROM operations WHERE kind = 'snapshot_copy' AND request->>'snapshot_id' = '$memsnp'")" \
  "the copy was the controller's own (placement's)"
cmp -s "$vstate/snapshots/$memsnp/state.mig" "$vstate2/snapshots/$memsnp/state.mig" ||
  fail "B's saved RAM differs from A's"
assert_eq 600 "$(stat -c %a "$vstate2/snapshots/$memsnp/disk.qcow2")" "mode of B's copy of the disk"
n=$(itest_counter "$bsb") || fail "cannot read the counter on B"
[ "$n" -ge "$c0" ] && [ "$n" -le $((c0 + 120)) ] || fail "B's counter is $n; the snapshot took it near $c0"
bon() { local m; m=$(itest_counter "$bsb") && [ "$m" -gt "$n" ]; }
itest_wait_until 20 "the counter going on in the VM on B" bon
assert_exit 0 sandbox exec "$bsb" -- cat /mem.txt
assert_eq in-memory "$ITEST_OUT" "the file in the VM on B"
assert_exit 3 sandbox snapshots copy vmmem --worker "$wname2"
assert_contains "$ITEST_ERR" "holds a copy of" "a second copy to B"
assert_exit 0 sandbox delete "$bsb" --wait --timeout 60
assert_exit 0 sandbox snapshots delete vmmem
itest_wait_until 60 "the memory snapshot's bytes removed" snaps_gone
itest_wait_until 60 "B's copy of the memory snapshot removed" bash -c "[ -z \"\$(ls '$vstate2/snapshots')\" ]"
kill -TERM "$w2pid"
itest_wait_until 30 "worker B stopped" bash -c "! kill -0 $w2pid 2>/dev/null"

# ---- a template built from a Dockerfile (by a container build sandbox)
# starts a microvm with its files, its ENV and its WORKDIR
ctx="$work/tpl"
mkdir -p "$ctx"
printf '%s\n' "FROM $ITEST_IMAGE" "ENV GREETING=from-the-template" "WORKDIR /app" \
  "RUN echo built-in-a-container > /app/built.txt" >"$ctx/Dockerfile"
assert_exit 0 sandbox templates build vmtpl -f "$ctx/Dockerfile" "$ctx" --isolation container
t0=$(date +%s%N)
assert_exit 0 sandbox create --template vmtpl --hostile --network none --wait --timeout 200
tpl_ms=$((($(date +%s%N) - t0) / 1000000))
read -r tsb2 _ <<<"$ITEST_OUT"
itest_track "$tsb2"
assert_exit 0 sandbox get "$tsb2" --json
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of a hostile sandbox from a template"
assert_exit 0 sandbox exec "$tsb2" -- sh -c 'echo "$GREETING $(pwd) $(cat built.txt)"'
assert_eq "from-the-template /app built-in-a-container" "$ITEST_OUT" "the template's ENV, WORKDIR and files in the VM"
tref=$("$ITEST_PGBIN/psql" -X -q -At "$dburl" -c "SELECT runtime_ref FROM sandboxes WHERE id = '$tsb2'")
assert_match "$tref" '^x:v[0-9a-f]{16}$' "the template's sandbox is a VM of the driver"
assert_exit 0 sandbox delete "$tsb2" --wait --timeout 60
assert_exit 0 sandbox templates delete vmtpl

# ---- delete: no QEMU process, no VM file
assert_exit 0 sandbox delete "$hsb" --wait --timeout 60
gone() { [ -z "$(ls "$vstate/vms")" ] && [ -z "$(qemu_pids)" ]; }
itest_wait_until 30 "no VM after delete" gone
assert_eq "" "$(ls "$vstate/sandboxes")" "sandbox records after delete"
alive_same "$qpid" "$qstart" && fail "QEMU $qpid outlived its sandbox"
itest_log "TCG/KVM ($accel) figures: create --hostile --wait ${create_ms} ms (first of its size: makes its template), ${warm_ms} ms (from the template), ${vol_ms} ms with a volume (a cold boot), snapshot of a paused VM ${snap_ms} ms, with its memory ${memsnap_ms} ms, fork into 2 from memory ${fork_ms} ms, a create on worker B from it (copied there first) ${copy_ms} ms, from a template ${tpl_ms} ms, exec true ${exec_ms} ms (through CLI, controller, worker, driver)"
true
