#!/usr/bin/env bash
# MicroVMs behind the egress filter (docs/network.md): a worker with
# worker_runtime = docker,external (sandbox-vmm, capability nic) and
# worker_egress_upstream set (the dnsmasq of the test's own internet,
# egress_internet.sh, 198.51.102.0/24) offers microvm network open and
# filtered; `sandbox create --isolation microvm --network open --allow
# api.egress.test` boots a VM with a NIC on a tap of its own (a /30 of
# worker_nic_subnet) whose DNS and TCP the host sends to the filter: the
# guest resolves and reaches its allowed name, and nothing else (a name no
# rule allows is NXDOMAIN and never reaches the upstream, a denied Host, the
# allowed Host on another address, a raw IP, the host's own address, UDP
# past DNS, another VM's address forged as its source); the network log
# has its queries and connections; `sandbox network` changes its rules live;
# a microvm with network open and no rules reaches any name but never the
# host; delete takes the tap and the filter's record away. Slow under TCG:
# two VMs, each a cold boot (a NIC takes no template).
# itest-standalone
# itest-cost: 240
# itest-timeout: 480
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=egress_internet.sh
. "$(dirname "$0")/egress_internet.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, iptables, taps)"
command -v qemu-system-x86_64 >/dev/null || fail "qemu-system-x86 is not installed (tools/lib.sh installs it)"
vmm="$ITEST_BUILD/tools/sandbox-vmm"
[ -x "$vmm" ] || fail "no $vmm"
[ -w /dev/net/tun ] || fail "no /dev/net/tun: a microVM's NIC needs a tap"
tag=$$
work="$ITEST_TMP/egress-microvm.$tag"
egress_internet "sbxemi$tag" 198.51.102 "$work"
api=$EGI_API
other=$EGI_OTHER

# ---- a controller of its own: no other test's sandbox lands on this worker
egress_controller "itest_egm_$tag" itest-egm
dburl=$EGC_DBURL

# ---- a worker with the filter and sandbox-vmm; its NICs from a /28 of
# the test's own (four /30s)
wname="itest-egm-$tag"
fnet="sbx-filtered-m$tag"
subnet="10.213.$((tag % 250)).0/28"
vstate=$(mktemp -d /tmp/sbx-egm-state.XXXXXX)
chmod 711 "$vstate"
wlog="$ITEST_TMP/worker-$wname.log"
itest_watch_log "$wlog"
wpid=
finish() {
  local f
  SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" workers drain "$wname" >/dev/null 2>&1
  [ -z "$wpid" ] || itest_stop_pid "$wpid" worker 30
  if [ "${rc:-0}" -ne 0 ]; then
    for f in "$vstate"/vms/*/console.log; do itest_log_tail "$f" 0 25; done
  fi
  for f in "$vstate"/vms/*/qemu.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  sleep 0.5
  rm -rf "$vstate"
  egress_filter_cleanup "$fnet"
  true
}
itest_on_exit finish
wtoken=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-egm --role worker)
SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=4000 SANDBOX_WORKER_MEMORY_MIB=4096 \
  SANDBOX_WORKER_GVISOR_RUNTIME='' SANDBOX_WORKER_OPEN_NETWORK='' SANDBOX_WORKER_RESTRICTED_NETWORK='' \
  SANDBOX_WORKER_EGRESS_UPSTREAM="$api:53" SANDBOX_WORKER_FILTERED_NETWORK="$fnet" \
  SANDBOX_WORKER_NIC_SUBNET="$subnet" \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" --docker-socket /var/run/docker.sock \
  --worker-runtime docker,external \
  --worker-driver-command "[\"$vmm\",\"--state\",\"$vstate\",\"--image\",\"$ITEST_IMAGE\"]" \
  >>"$wlog" 2>&1 </dev/null &
wpid=$!
itest_track_pid "$wpid"
worker_nets() { # CLASS: the networks the worker offers for it
  itest_http GET /v1/workers "$ITEST_ADMIN_TOKEN"
  python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
w = next((w for w in doc["workers"] if w["name"] == sys.argv[2]), {})
print(" ".join(w.get("networks", {}).get(sys.argv[3], [])))
' "$HTTP_BODY" "$wname" "$1"
}
microvm_open() { itest_worker_ready "$wname" && [[ " $(worker_nets microvm) " == *" open "* ]]; }
itest_wait_until 240 "worker $wname ready with microvm network open" microvm_open
assert_eq "none restricted open filtered" "$(worker_nets microvm)" "microvm's networks: open and filtered through the filter"

# ---- a microVM with rules boots with its NIC and reaches its allowed name only
t0=$(date +%s)
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --isolation microvm --memory-mib 256 --network open \
  --allow api.egress.test --deny denied.egress.test --wait --timeout 240 --json
echo "the microVM with a NIC booted in $(( $(date +%s) - t0 )) s"
sbx=$(itest_json "$ITEST_OUT" sandbox.id)
itest_track "$sbx"
assert_eq "$wname" "$(itest_json "$ITEST_OUT" sandbox.worker)" "placed on the worker that filters"
rules_dir="/run/sandbox-egress-br-$(docker network inspect -f '{{.Id}}' "$fnet" | cut -c1-12).rules"
vmfile="$rules_dir/$sbx.vm.json"
[ -f "$vmfile" ] || fail "no NIC record $vmfile"
tap=$(itest_json "$(cat "$vmfile")" tap)
guest=$(itest_json "$(cat "$vmfile")" guest)
host=$(itest_json "$(cat "$vmfile")" host)
ip -4 addr show dev "$tap" | grep -q "inet $host/30" || fail "tap $tap has not $host/30: $(ip addr show dev "$tap" 2>&1)"
assert_eq 1 "$(cat "/proc/sys/net/ipv6/conf/$tap/disable_ipv6")" "no IPv6 on the tap"
assert_eq 1 "$(cat "/proc/sys/net/ipv4/conf/$tap/rp_filter")" "strict reverse-path filtering on the tap"
vx() { SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" exec "$sbx" -- "$@" 2>&1 || true; }
assert_contains "$(vx cat /etc/resolv.conf)" "nameserver $host" "the guest's resolver is its gateway"
nsl() { vx nslookup -type=a "$1"; }
get() { # HOST ADDR [PORT]: the answer, or nothing
  vx sh -c "printf 'GET / HTTP/1.1\r\nHost: $1\r\nConnection: close\r\n\r\n' | nc -w 5 $2 ${3:-80}"
}
assert_contains "$(nsl api.egress.test)" "Address: $api" "the allowed name resolved through the filter"
assert_contains "$(get api.egress.test "$api")" "hello api.egress.test" "the allowed name reached through the filter"
assert_contains "$(nsl other.egress.test)" "NXDOMAIN" "a name no rule allows is NXDOMAIN"
assert_contains "$(nsl denied.egress.test)" "NXDOMAIN" "a denied name is NXDOMAIN"
assert_not_contains "$(vx nslookup -type=a other.egress.test "$api")" "Address: $other" "DNS straight at the upstream"
assert_not_contains "$(get denied.egress.test "$other")" "hello" "a denied Host"
assert_not_contains "$(get api.egress.test "$other")" "hello" "the allowed Host on another address"
assert_not_contains "$(get "$api" "$api")" "hello" "a raw IP"
hport=$(itest_free_port)
python3 -m http.server --bind "$host" "$hport" >/dev/null 2>&1 &
hpid=$!
itest_track_pid "$hpid"
itest_wait_until 10 "a listener on the tap's $host:$hport" bash -c "exec 3<>/dev/tcp/$host/$hport"
assert_not_contains "$(get "$host" "$host" "$hport")" "200" "the host's own address (the tap's)"
# (busybox's tftp: a datagram to any port; its nc has no UDP)
vx /.sbx/busybox timeout 3 /.sbx/busybox tftp -g -r quic -l /tmp/quic "$api" 443 >/dev/null
sleep 1
assert_eq "" "$(cat "$work/udp.log" 2>/dev/null)" "UDP past DNS (QUIC) never leaves"
if grep -q "query\[A\] other.egress.test\|denied.egress.test" "$work/dnsmasq.log"; then
  fail "a name the rules refuse reached the upstream: $(grep -m2 'other.egress\|denied.egress' "$work/dnsmasq.log")"
fi
grep -q "query\[A\] api.egress.test" "$work/dnsmasq.log" || fail "the allowed name never reached the upstream"

# ---- the network log has the VM's queries and connections
has_log() {
  local out
  out=$(SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" network "$sbx" --log --limit 1000 2>&1) || return 1
  for p in "$@"; do grep -qE "$p" <<<"$out" || return 1; done
}
itest_wait_until 30 "the network log of $sbx" has_log "dns +allowed api\.egress\.test" \
  "tcp +allowed api\.egress\.test:80 $api" "dns +refused other\.egress\.test" "tcp +refused denied\.egress\.test:80" \
  "udp +refused -:443 $api no udp rule for port 443"

# ---- a live change reaches the VM's NIC at the filter
assert_exit 0 sandbox network "$sbx" --allow other.egress.test --deny api.egress.test --udp 443 --wait --timeout 30
assert_contains "$(nsl other.egress.test)" "Address: $other" "the newly allowed name resolves"
assert_contains "$(vx /.sbx/busybox sh -c "B=/.sbx/busybox; \$B timeout 4 \$B tftp -g -r quic -l /tmp/q $other 443;
  \$B cat /tmp/q")" "udp quic from" "UDP to the newly allowed name's address on the port --udp lists"
assert_contains "$(get other.egress.test "$other")" "hello other.egress.test" "the newly allowed name is reached"
assert_not_contains "$(get api.egress.test "$api")" "hello" "the newly denied name is refused"
assert_contains "$(cat "$rules_dir/$sbx.json")" '"other.egress.test"' "the worker keeps the VM's new rules"

# ---- network open without rules: every name, never the host's neighbourhood
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --isolation microvm --memory-mib 256 --network open \
  --wait --timeout 240 --json
osbx=$(itest_json "$ITEST_OUT" sandbox.id)
itest_track "$osbx"
ox() { SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" exec "$osbx" -- "$@" 2>&1 || true; }
assert_contains "$(ox nslookup -type=a other.egress.test)" "Address: $other" "an open microVM resolves any name"
assert_contains "$(ox sh -c "printf 'GET / HTTP/1.1\r\nHost: other.egress.test\r\nConnection: close\r\n\r\n' | nc -w 5 $other 80")" \
  "hello other.egress.test" "an open microVM reaches a name by the filter"
ohost=$(itest_json "$(cat "$rules_dir/$osbx.vm.json")" host)
assert_not_contains "$(ox sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $ohost $hport")" "200" \
  "an open microVM does not reach the host"
# its guest cannot reach the other VM's tap either
assert_not_contains "$(ox sh -c "printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 $host $hport")" "200" \
  "an open microVM does not reach another VM's tap"

# a guest that takes the other VM's address as its own (whose rules allow
# every name) sends nothing out as that VM: the host drops what a tap sends
# from an address it was not given, so its query of a name only the other
# may ask about never reaches the upstream (the last use of this VM); the
# other asking the same kind of name shows the way there is open to it
oguest=$(itest_json "$(cat "$rules_dir/$osbx.vm.json")" guest)
ox nslookup -type=a sbxleak-control.egress.test >/dev/null
itest_wait_until 10 "the open VM's own query at the upstream" \
  grep -q "query\[A\] sbxleak-control.egress.test" "$work/dnsmasq.log"
vx /.sbx/busybox sh -c "B=/.sbx/busybox; \$B ip addr flush dev eth0; \$B ip addr add $oguest/32 dev eth0;
  \$B ip route add $host dev eth0; \$B ip route add default via $host; \$B ip -4 addr show dev eth0;
  \$B nslookup -type=a sbxleak.egress.test $host" >"$work/forged.out"
assert_contains "$(cat "$work/forged.out")" "inet $oguest/32" "the guest took the other VM's address"
sleep 2
if grep -q "sbxleak.egress.test" "$work/dnsmasq.log"; then
  fail "a query from another VM's address reached the upstream: $(cat "$work/forged.out")"
fi

# ---- delete: the tap and the filter's record go
otap=$(itest_json "$(cat "$rules_dir/$osbx.vm.json")" tap)
assert_exit 0 sandbox delete "$sbx" "$osbx" --wait --timeout 120
gone() { ! ip link show "$tap" >/dev/null 2>&1 && ! ip link show "$otap" >/dev/null 2>&1; }
itest_wait_until 20 "the taps $tap and $otap gone with their VMs" gone
[ ! -e "$vmfile" ] || fail "the deleted VM's NIC record $vmfile is left"
fpid=$(pgrep -P "$wpid" -f sandbox-egress || true)
sock=$(tr '\0' '\n' <"/proc/$fpid/cmdline" | sed -n '/^--control$/{n;p}')
out=$(python3 "$(dirname "$0")/egress_net.py" control "$sock" '{"op":"stats"}')
assert_eq "[]" "$(itest_json "$out" sandboxes)" "the filter forgot the deleted VMs"
echo "a microVM reaches its allowed names through its worker's egress filter, and nothing else"
