#!/usr/bin/env bash
# The embedded default offers microvm: `sandboxd all` with no runtime flag,
# on a machine with QEMU, a kernel and sandbox-vmm beside sandboxd (as root),
# says so on its first screen, its worker offers container and microvm, and
# `sandbox create --hostile` lands in a VM; `sandbox get` shows
# `microvm (tcg)` or `microvm (kvm)`; delete leaves no VM. With
# worker_runtime set by hand it runs no driver and says why microvm is not
# offered. No child of sandboxd all shares a socket with it, and after its
# kill -9 the ports are free at once and a restart finds the VM; stopped
# (SIGTERM) for 60 s and started again, the VM and a container sandbox run
# on with their files and a process that kept counting (issue 29). Traffic
# goes only to this test's own sandboxd on loopback.
# itest-standalone
# itest-cost: 150
# itest-waits: a minute of it is sandboxd all kept stopped
# itest-timeout: 480
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (QEMU drops to an unprivileged user)"
command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86 is not installed (tools/lib.sh installs it)"
dir="$ITEST_TMP/microvm-all-$$"
port=$(itest_free_port)
rport=$(itest_free_port)
log="$ITEST_TMP/microvm-all-$$.log"
url="http://127.0.0.1:$port"
itest_watch_log "$log"
cleanup_vms() {
  local f
  for f in "$dir"/vmm/vms/*/qemu.pid; do
    [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
  true
}
itest_on_exit cleanup_vms

start_all() {
  env -u SANDBOX_DATABASE_URL -u DATABASE_URL -u SANDBOX_WORKER_RUNTIME -u SANDBOX_WORKER_DRIVER_COMMAND \
    SANDBOX_WORKER_CPU_MILLIS=8000 SANDBOX_WORKER_MEMORY_MIB=16384 \
    "$SANDBOXD" all --data-dir "$dir" --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" \
    --controller-url "$url" "$@" >>"$log" 2>&1 </dev/null &
  all_pid=$!
  itest_track_pid "$all_pid"
  itest_wait_healthz "$url" "$all_pid" "sandboxd all" "$log" || fail "sandboxd all did not come up"
  itest_wait_until 30 "$dir/admin.token" test -s "$dir/admin.token"
  export SANDBOX_URL=$url SANDBOX_TOKEN
  SANDBOX_TOKEN=$(tr -d '[:space:]' <"$dir/admin.token")
  ITEST_ADMIN_TOKEN=$SANDBOX_TOKEN
}
worker_doc() {
  itest_http GET /v1/workers "$SANDBOX_TOKEN"
  python3 -c 'import json, sys; ws = json.loads(sys.argv[1])["workers"]; print(json.dumps(ws[0] if ws else {}))' "$HTTP_BODY"
}
offers_microvm() { itest_json "$(worker_doc)" isolation | grep -q '"microvm"'; }

# ---- no flag: the first screen says the driver runs, the worker offers microvm
start_all
itest_wait_until 30 "the microVM line" grep -q '^microVM: ' "$log"
assert_contains "$(grep '^microVM: ' "$log")" "sandbox-vmm" "the first screen's microVM line"
itest_wait_until 200 "the embedded worker offering microvm" offers_microvm
w=$(worker_doc)
assert_contains "$(itest_json "$w" isolation)" '"container"' "classes of the embedded worker"
assert_eq "docker,external" "$(itest_json "$w" runtime)" "the embedded worker's runtime"
accel=$(grep -o 'accel \(kvm\|tcg\)' <<<"$(itest_json "$w" probes.microvm)" | head -n1 | cut -d' ' -f2)
assert_match "$accel" '^(kvm|tcg)$' "the accelerator in the probe"
# the driver reports the project's version (meson.build's), as sandboxd does
want=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$(dirname "$0")/../../meson.build" | head -n 1)
assert_eq "sandboxd $want" "$("$SANDBOXD" --version)" "sandboxd --version"
assert_eq "sandbox-vmm $want" "$("$ITEST_BUILD/tools/sandbox-vmm" --version)" "sandbox-vmm --version"
assert_contains "$(itest_json "$w" probes.microvm)" "sandbox-vmm $want" "the worker's microvm probe"

assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --wait --timeout 200
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 sandbox get "$sbx"
assert_contains "$ITEST_OUT" "microvm ($accel)" "sandbox get shows the VM's class"
assert_exit 0 sandbox exec "$sbx" -- cat /proc/1/cmdline
assert_eq "/init" "$(tr -d '\0' <<<"$ITEST_OUT")" "PID 1 in the hostile sandbox is the guest agent"
[ -n "$(ls "$dir/vmm/vms" 2>/dev/null)" ] || fail "no VM under the data dir's vmm/"

# ---- descriptors: no child of sandboxd all (sandbox-vmm, QEMU, the
# embedded PostgreSQL, helpers) holds a socket sandboxd holds: the API and
# route listeners above all (docs/security.md "Descriptors")
pgpid=$(head -n 1 "$dir/postgres/postmaster.pid")
assert_exit 0 python3 "$(dirname "$0")/fd_shared.py" "$all_pid" "$pgpid"
assert_contains "$ITEST_OUT" "qemu-system" "the descendants looked at"
assert_contains "$ITEST_OUT" "sandbox-vmm" "the descendants looked at"
assert_contains "$ITEST_OUT" "postgres" "the descendants looked at"
# kill -9: its ports are free at once (no survivor holds them), and a
# restart on the same data dir serves again and finds the running VM
regs=$(grep -c 'level=info component=worker msg="registered with' "$log" || true)
kill -KILL "$all_pid"
wait "$all_pid" 2>/dev/null || true
port_free() {
  python3 -c 'import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))' "$1"
}
port_free "$port" || fail "the API port $port is still held after kill -9 of sandboxd: $(ss -ltnpH "sport = :$port")"
port_free "$rport" || fail "the route port $rport is still held after kill -9 of sandboxd: $(ss -ltnpH "sport = :$rport")"
start_all
# the restarted worker's own registration (the controller's record says
# microvm from the killed one's until then)
registered_again() { [ "$(grep -c 'level=info component=worker msg="registered with' "$log" || true)" -gt "$regs" ]; }
itest_wait_until 200 "the restarted worker registered" registered_again
itest_wait_until 30 "the restarted worker offering microvm" offers_microvm
assert_exit 0 sandbox exec "$sbx" -- echo alive
assert_eq "alive" "$ITEST_OUT" "the VM after sandboxd's kill -9 and restart"

# ---- stopped (SIGTERM) for 60 s and started again: the VM and a container
# sandbox are running with their files and a process that kept counting
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --wait --timeout 120
read -r csbx _ <<<"$ITEST_OUT"
itest_track "$csbx"
count() { itest_counter "$1"; }
declare -A before
for s in "$sbx" "$csbx"; do
  assert_exit 0 sandbox exec "$s" -- sh -c "echo kept >/tmp/kept"
  assert_exit 0 itest_counter_start "$s"
  itest_wait_until 20 "the counter in $s" count "$s"
  before[$s]=$(count "$s") || fail "cannot read the counter in $s"
done
itest_stop_pid "$all_pid" "sandboxd all" 60 || fail "sandboxd all did not stop on SIGTERM"
t0=$(date +%s)
sleep 60
start_all
# (its row keeps the classes it offered: back means registered again, ready)
back() { [ "$(itest_json "$(worker_doc)" state)" = ready ] && offers_microvm; }
itest_wait_until 200 "the worker back and offering microvm after 60 s away" back
itest_log "sandboxd all was stopped for $(($(date +%s) - t0)) s"
for s in "$sbx" "$csbx"; do
  assert_exit 0 sandbox get "$s" --json
  assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "the phase of $s after 60 s away"
  assert_exit 0 sandbox exec "$s" -- cat /tmp/kept
  assert_eq kept "$ITEST_OUT" "the file in $s after 60 s away"
  now=$(count "$s") || fail "cannot read the counter in $s after the restart"
  [ "$now" -ge $((before[$s] + 55)) ] || fail "the counter in $s went from ${before[$s]} to $now over 60 s away"
  itest_log "$s counted ${before[$s]} -> $now"
done
assert_exit 0 sandbox delete "$csbx" --wait --timeout 60
assert_exit 0 sandbox delete "$sbx" --wait --timeout 60
no_vm() { [ -z "$(ls "$dir/vmm/vms")" ]; }
itest_wait_until 30 "no VM after delete" no_vm
itest_stop_pid "$all_pid" "sandboxd all" 60

# ---- worker_runtime set by hand: no driver, one line saying so
start_all --worker-runtime docker
itest_wait_until 30 "the second microVM line" grep -q '^microVM: not offered: worker_runtime = docker' "$log"
w=$(worker_doc)
assert_not_contains "$(itest_json "$w" isolation)" '"microvm"' "classes with worker_runtime = docker"
assert_exit 1 sandbox create --image "$ITEST_IMAGE" --hostile --wait --timeout 60
assert_contains "$ITEST_ERR" "isolation_unavailable" "hostile create without microvm"
itest_stop_pid "$all_pid" "sandboxd all" 60
true
