#!/usr/bin/env bash
# The microVM library (worker/vmm) through its program sbx-vmmctl, on the real
# QEMU, the /boot kernel and the project's test image from the local Docker:
# KVM is detected for real (TCG otherwise); a VM boots as an unprivileged user
# with the guest's own kernel and our agent as PID 1; exec output, stderr,
# exit codes, the output bound, stdin, a timeout that kills the whole tree;
# a driver killed mid-exec leaves nothing running in the guest; files up and
# down with checksums; a PTY; a dial to a guest port; a PTY and a dial at
# once on one connection; the guest
# sees none of the host's files, processes or network (no NIC: only lo);
# destroy leaves no QEMU process, file or cgroup; a VM restored from a booted
# template (fast start) runs, with its own disk and its own random stream
# (the host reseeds each guest's RNG). Each sbx-vmmctl call is a
# new process that re-attaches by id: a restarted driver finds its VMs.
# Usage: tests/microvm/test_microvm_vmm.sh BUILD_DIR   (as root; ~1-2 min under TCG)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
ctl="$build/worker/vmm/sbx-vmmctl"
# tests/integration/lib.sh (and through it tools/lib.sh): the dockerd
# starter and pid stopper the integration runner uses
# shellcheck source=tests/integration/lib.sh
. "$root/tests/integration/lib.sh"
image=${SBX_VMM_TEST_IMAGE:-$SBX_BASE_IMAGE}

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { # check DESC ACTUAL EXPECTED
  if [ "$2" = "$3" ]; then ok "$1"; else bad "$1: got [$2], want [$3]"; fi
}
check_has() { # check_has DESC HAYSTACK NEEDLE
  case "$2" in *"$3"*) ok "$1" ;; *) bad "$1: [$3] not in [$2]" ;; esac
}

[ "$(id -u)" -eq 0 ] || { echo "needs root (QEMU drops to an unprivileged user)"; echo "0 passed, 1 failed"; exit 1; }
[ -x "$ctl" ] || { echo "no $ctl (meson compile -C $build)"; echo "0 passed, 1 failed"; exit 1; }

state=$(mktemp -d /tmp/sbx-vmmtest.XXXXXX)
work=$(mktemp -d /tmp/sbx-vmmwork.XXXXXX)
vm=t$$
# The image comes from the local Docker. On a fresh machine no daemon runs
# once the integration runner has stopped the one it started: start one
# here (pid file and log in $work) and stop it, by pid, at the end.
ITEST_TMP=$work
ITEST_DOCKERD_STARTED=0
cleanup() {
  for v in "$vm" "$vm-a" "$vm-b"; do "$ctl" --state "$state" destroy "$v" >/dev/null 2>&1 || true; done
  if [ "$ITEST_DOCKERD_STARTED" -eq 1 ]; then
    itest_log "stopping the dockerd this test started"
    itest_stop_pid "$ITEST_DOCKERD_PID" dockerd 30 || true
  fi
  rm -rf "$state" "$work"
}
trap cleanup EXIT
itest_ensure_docker || { echo "no Docker daemon answers and none could be started (see above)"; echo "0 passed, 1 failed"; exit 1; }
sbx_base_image "$image" >/dev/null || { echo "cannot build $image (see above)"; echo "0 passed, 1 failed"; exit 1; }
c() { "$ctl" --state "$state" "$@"; }

# ---- KVM or TCG, said with its reason
probe=$(c probe)
accel=${probe%%$'\n'*}
case "$accel" in kvm | tcg) ok "probe: $accel ($(printf '%s\n' "$probe" | sed -n 2p))" ;; *) bad "probe said [$probe]" ;; esac
if [ "$accel" = tcg ]; then check_has "probe says why not kvm" "$probe" "tcg:"; fi

# ---- boot
t0=$(date +%s.%N)
out=$(c boot "$vm" --image "$image" --memory 256 --cpus 1 --disk $((512 << 20))) || { bad "boot: $out"; echo "$passed passed, $failed failed"; exit 1; }
t1=$(date +%s.%N)
echo "$out" | sed 's/^/  /'
boot_kernel=$(ls /boot/vmlinuz-* | sort -V | tail -n1); boot_kernel=${boot_kernel#/boot/vmlinuz-}
check "guest kernel (HELLO) is the /boot kernel" "$(echo "$out" | sed -n 's/^guest_kernel //p')" "$boot_kernel"
check "uname -r in the guest" "$(c exec "$vm" -- uname -r)" "$boot_kernel"
check "PID 1 is our agent" "$(c exec "$vm" -- cat /proc/1/cmdline | tr '\0' ' ')" "/init "
pid=$(cat "$state/vms/$vm/qemu.pid")
check "QEMU runs unprivileged" "$(ps -o user= -p "$pid")" "$(getent passwd sandbox-vmm >/dev/null && echo sandbox-vmm || echo nobody)"
cmdline=$(tr '\0' ' ' <"/proc/$pid/cmdline")
check_has "QEMU has no NIC" "$cmdline" "-nic none"
case "$cmdline" in *-netdev*) bad "QEMU has a netdev" ;; *) ok "QEMU has no netdev" ;; esac
check_has "QEMU's seccomp sandbox" "$cmdline" "-sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
check_has "QEMU -nodefaults" "$cmdline" "-nodefaults"
check_has "QEMU is a microvm" "$cmdline" "-M microvm"
cg=$(echo "$out" | sed -n 's/^cgroup //p')
case "$cg" in "cgroup v"*) ok "QEMU in a cgroup: $cg" ;; none:*) ok "no cgroup on this host, said: $cg" ;; *) bad "cgroup note [$cg]" ;; esac
if [ -d /sys/fs/cgroup/memory ] && [ "${cg#cgroup v1}" != "$cg" ]; then
  d=$(find /sys/fs/cgroup/memory -maxdepth 4 -type d -name "sbx-vmm-$vm" 2>/dev/null | head -n1 || true)
  if [ -n "$d" ] && grep -qx "$pid" "$d/cgroup.procs"; then ok "QEMU's pid is in its memory cgroup $d"; else bad "QEMU's pid not in its memory cgroup"; fi
fi

# ---- exec: output, stderr, exit code, bound, stdin, missing binary
check "exec stdout" "$(c exec "$vm" -- echo hello from the guest)" "hello from the guest"
set +e
err=$(c exec "$vm" -- sh -c 'echo to-out; echo to-err >&2; exit 7' 2>&1 >/dev/null); rc=$?
set -e
check "exec exit code" "$rc" 7
check "exec stderr" "$err" "to-err"
set +e
n=$(c exec "$vm" --max 1000 -- sh -c 'i=0; while [ $i -lt 100 ]; do echo 0123456789012345678901234567890123456789012345678; i=$((i+1)); done' 2>"$work/trunc.err" | wc -c)
set -e
check "output over the bound is cut to it" "$n" 1000
check_has "and said truncated" "$(cat "$work/trunc.err")" "output truncated (stdout 5000 bytes"
head -c 300000 /dev/urandom >"$work/in.bin"
check "stdin (300 KB) reaches the command" "$(c exec "$vm" --stdin -- md5sum <"$work/in.bin" | cut -d' ' -f1)" "$(md5sum <"$work/in.bin" | cut -d' ' -f1)"
set +e
msg=$(c exec "$vm" -- /no/such/binary 2>&1); rc=$?
set -e
check "a missing binary fails with exit 1" "$rc" 1
check_has "and says why" "$msg" "No such file or directory"

# ---- timeout kills the whole tree (also what left the process group)
s=$(date +%s)
set +e
c exec "$vm" --timeout 3000 -- sh -c 'sleep 300 & setsid sleep 301 & sleep 302'; rc=$?
set -e
e=$(( $(date +%s) - s ))
check "timeout exit 124" "$rc" 124
[ "$e" -lt 20 ] && ok "timeout returned in ${e}s" || bad "timeout took ${e}s"
check "no sleep left in the guest" "$(c exec "$vm" -- sh -c 'ps | grep -c "[s]leep 30"' || true)" 0

# ---- a driver killed mid-exec: the guest kills what it had started
# (one host connection per VM at a time: QEMU's socket serves one client, so
# nothing can look while it runs)
"$ctl" --state "$state" exec "$vm" -- sleep 303 &
killme=$!
sleep 3
kill -9 "$killme"
wait "$killme" 2>/dev/null || true
check "kill -9 of the driver mid-exec: its command is gone" "$(c exec "$vm" -- sh -c 'ps | grep -c "[s]leep 303"' || true)" 0

# ---- files up and down
mkdir -p "$work/up/tree/sub"
head -c 3000000 /dev/urandom >"$work/up/tree/big.bin"
echo small >"$work/up/tree/sub/small.txt"
(cd "$work/up" && tar -c tree) | c put "$vm" /root
check "upload checksum in the guest" "$(c exec "$vm" -- md5sum /root/tree/big.bin | cut -d' ' -f1)" "$(md5sum <"$work/up/tree/big.bin" | cut -d' ' -f1)"
c get "$vm" /root/tree >"$work/down.tar"
mkdir -p "$work/down" && tar -x -C "$work/down" -f "$work/down.tar"
check "download checksum" "$(md5sum <"$work/down/tree/big.bin" | cut -d' ' -f1)" "$(md5sum <"$work/up/tree/big.bin" | cut -d' ' -f1)"
check "download keeps the tree" "$(cat "$work/down/tree/sub/small.txt")" small
set +e
msg=$(c get "$vm" /no/such/path 2>&1 >/dev/null); rc=$?
set -e
check "download of a missing path fails" "$rc" 1
check_has "and says why" "$msg" "No such file or directory"

# ---- a PTY
set +e
pty=$(printf 'tty; stty size; exit 3\n' | c shell "$vm" --rows 30 --cols 100 -- sh); rc=$?
set -e
check_has "PTY: a terminal" "$pty" "/dev/pts/"
check_has "PTY: its size" "$pty" "30 100"
check "PTY: the exit code" "$rc" 3

# ---- dial a guest port
c exec "$vm" -- sh -c 'mkdir -p /tmp/www && echo guest-page >/tmp/www/index.html && httpd -p 127.0.0.1:8080 -h /tmp/www'
resp=$(printf 'GET /index.html HTTP/1.0\r\n\r\n' | c dial "$vm" 8080)
check_has "dial: HTTP answer from the guest" "$resp" "200 OK"
check_has "dial: the page" "$resp" "guest-page"
check "two sessions at once on one connection (PTY + dial)" "$(c mux "$vm" 8080)" "mux ok: pty and dial on one connection"
set +e
msg=$(c dial "$vm" 9 </dev/null 2>&1); rc=$?
set -e
check "dial to a closed port fails" "$rc" 1
check_has "and says nothing listens" "$msg" "nothing listens on port 9"

# ---- the guest sees nothing of the host
marker="/tmp/sbx-vmm-host-marker.$$"
echo host-secret >"$marker"
set +e
c exec "$vm" -- cat "$marker" >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -ne 0 ] && ok "the guest cannot read a host file ($marker)" || bad "the guest read $marker"
rm -f "$marker"
check "guest network: only lo" "$(c exec "$vm" -- ls /sys/class/net | tr '\n' ' ')" "lo "
check "guest has no route" "$(c exec "$vm" -- cat /proc/net/route | wc -l)" 1
procs=$(c exec "$vm" -- ps -o comm)
case "$procs" in *dockerd* | *postgres* | *qemu*) bad "the guest sees host processes" ;; *) ok "the guest sees no host process" ;; esac
check_has "the guest's root is its own disk" "$(c exec "$vm" -- cat /proc/mounts)" "/dev/vda / ext4"

# ---- a restarted driver finds the VM; bad input
check "list finds the running VM" "$(c list | grep "^$vm " | cut -d' ' -f3)" running
set +e
msg=$(c boot "$vm" --image "$image" 2>&1); rc=$?
set -e
check "booting an existing id fails" "$rc" 1
check_has "and says it exists" "$msg" "exists"
set +e
msg=$(c destroy ../etc 2>&1); rc=$?
set -e
check "destroy of a bad id fails" "$rc" 1
check_has "and says so" "$msg" "bad VM id"

# ---- destroy leaves nothing
c destroy "$vm"
sleep 0.2
# dead at once; a zombie until the host's init (not its parent: sbx-vmmctl boot exited) reaps it
st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || echo gone)
case "$st" in gone | Z | X) ok "no QEMU process after destroy ($st)" ;; *) bad "QEMU $pid still there (state $st)" ;; esac
[ -e "$state/vms/$vm" ] && bad "files left in $state/vms/$vm" || ok "no VM files after destroy"
# (find fails when a cgroup of another process goes while it walks: the
# count is what it saw, never the end of the script under pipefail)
left=$(find /sys/fs/cgroup -maxdepth 5 -type d -name "sbx-vmm-$vm" 2>/dev/null | wc -l || true)
check "no cgroup left" "$left" 0
check "list is empty" "$(c list)" ""

# ---- fast start: restored from a booted template, each with its own randomness
out=$(c boot "$vm-a" --image "$image" --memory 256 --cpus 1 --disk $((512 << 20)) --template) || bad "restore a: $out"
restore_a=$(echo "$out" | sed -n 's/^restore_s //p')
check "restored VM answers" "$(c exec "$vm-a" -- uname -r)" "$boot_kernel"
rand_a=$(c exec "$vm-a" -- sh -c 'head -c 32 /dev/urandom | md5sum')
c exec "$vm-a" -- sh -c 'echo only-in-a >/root/mark'
c destroy "$vm-a"
out=$(c boot "$vm-b" --image "$image" --memory 256 --cpus 1 --disk $((512 << 20)) --template) || bad "restore b: $out"
restore_b=$(echo "$out" | sed -n 's/^restore_s //p')
rand_b=$(c exec "$vm-b" -- sh -c 'head -c 32 /dev/urandom | md5sum')
[ -n "$rand_a" ] && [ "$rand_a" != "$rand_b" ] && ok "two restores of one template draw different random bytes" \
  || bad "restored VMs share their random stream ($rand_a / $rand_b)"
set +e
c exec "$vm-b" -- cat /root/mark >/dev/null 2>&1; rc=$?
set -e
[ "$rc" -ne 0 ] && ok "a restored VM's disk is its own (no file of the previous one)" || bad "restore b sees a's file"
awk "BEGIN{exit !($restore_b < 10)}" && ok "restore took ${restore_b}s (the first: ${restore_a}s, after the template was made)" || bad "restore took ${restore_b}s"
c destroy "$vm-b"
check "no VM left after the restores" "$(c list)" ""
echo "boot (incl. image) took $(awk "BEGIN{printf \"%.1f\", $t1 - $t0}") s under $accel"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
