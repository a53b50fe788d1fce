#!/usr/bin/env bash
# `open` means the internet, not the host (docs/worker.md "Network modes"):
# an open sandbox reaches no address of the worker host (a service bound to
# 0.0.0.0 on the host's own address, its network's gateway, docker0's, and
# link-local, RFC 1918 and CGNAT addresses the test puts on the host) and
# nothing in those ranges behind the host (a network namespace the test
# makes, reached through a veth it owns), while a plain container on Docker's default bridge reaches
# every one of them — so the targets are live and the worker's rules are
# what blocks. A missing rule makes the worker's /readyz 503 naming it.
# Every target is on this machine; nothing is sent anywhere else.
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-egress
open_net=sandbox-open
tag=$$
ns="sbxeg$tag"
veth_h="sbxegh$tag"
veth_n="sbxegn$tag"
# a private /30 between the host and the namespace, unique to the run
o3=$((tag % 250 + 1))
ns_host_ip="10.78.$o3.1"
ns_ip="10.78.$o3.2"
# addresses of the host itself (on the test's veth): link-local, RFC 1918, CGNAT
host_ips=(169.254.77.1 10.77.0.1 100.64.77.1)
# addresses behind the host (in the namespace, so forwarded): the same ranges
fwd_ips=("$ns_ip" 169.254.78.1 100.64.78.1)

cleanup_net() {
  ip link del "$veth_h" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}
itest_on_exit cleanup_net

# ---- the targets, on interfaces the test owns. (A dummy interface would
# do for the host's addresses, but hosts without the dummy module exist;
# the veth's host end carries them instead.)
ip netns add "$ns" || fail "cannot create the network namespace $ns (the test needs CAP_NET_ADMIN)"
ip link add "$veth_h" type veth peer name "$veth_n" || fail "cannot create the veth pair $veth_h"
ip link set "$veth_n" netns "$ns" || fail "cannot move $veth_n into $ns"
ip addr add "$ns_host_ip/30" dev "$veth_h"
for a in "${host_ips[@]}"; do
  ip addr add "$a/32" dev "$veth_h" || fail "cannot put $a on $veth_h"
done
ip link set "$veth_h" up
ip netns exec "$ns" ip addr add "$ns_ip/30" dev "$veth_n"
ip netns exec "$ns" ip link set "$veth_n" up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" ip route add default via "$ns_host_ip"
for a in "${fwd_ips[@]:1}"; do
  ip netns exec "$ns" ip addr add "$a/32" dev lo || fail "cannot put $a in $ns"
  ip route add "$a/32" via "$ns_ip" dev "$veth_h" || fail "cannot route $a to $ns"
done

port=$(itest_free_port)
listener='
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    try:
        c.sendall(b"hello-egress\n")
    finally:
        c.close()
'
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
# one on every host address (the veth's included), one in the namespace
"$py" -c "$listener" "$port" </dev/null >/dev/null 2>&1 &
itest_track_pid $!
ip netns exec "$ns" "$py" -c "$listener" "$port" </dev/null >/dev/null 2>&1 &
itest_track_pid $!
itest_wait_until 10 "the host listener on port $port" bash -c "exec 3<>/dev/tcp/10.77.0.1/$port"
itest_wait_until 10 "the namespace listener on 169.254.78.1:$port" bash -c "exec 3<>/dev/tcp/169.254.78.1/$port"
itest_wait_until 10 "the namespace listener on $ns_ip:$port" bash -c "exec 3<>/dev/tcp/$ns_ip/$port"

host_ip=$(ip -4 -o addr show scope global | awk -v v="$veth_h" \
  '$2 != "docker0" && $2 !~ /^br-/ && $2 !~ /^veth/ && $2 != v { sub("/.*", "", $4); print $4; exit }')
docker0_gw=$(ip -4 -o addr show docker0 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
open_gw=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$open_net")
assert_match "$host_ip" '^[0-9.]+$' "the host's primary address"
assert_match "$open_gw" '^[0-9.]+$' "gateway of $open_net"
targets=("${host_ips[@]}" "${fwd_ips[@]}" "$host_ip" "$open_gw" ${docker0_gw:+"$docker0_gw"})

# probe ADDR...: one line "ADDR ok|no" per target, from inside a container
# shellcheck disable=SC2016 # expanded inside the container
probe_script='for a in "$@"; do if echo | nc -w 2 "$a" '"$port"' 2>/dev/null | grep -q hello-egress; then echo "$a ok"; else echo "$a no"; fi; done'

# ---- a plain container on Docker's default bridge reaches every target
plain=$(docker run --rm --network bridge "$ITEST_IMAGE" sh -c "$probe_script" sh "${targets[@]}" 2>&1) \
  || fail "docker run on the default bridge failed: $plain"
for a in "${targets[@]}"; do
  assert_contains "$plain" "$a ok" "a plain container reaching $a:$port (the target must be live)"
done

# ---- an open sandbox reaches none of them
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --memory-mib 64 --network open --wait \
  --timeout 120
read -r open _ <<<"$ITEST_OUT"
assert_match "$open" '^sbx_' "open sandbox id"
itest_track "$open"
assert_exit 0 sandbox exec "$open" -- sh -c "$probe_script" sh "${targets[@]}"
for a in "${targets[@]}"; do
  assert_contains "$ITEST_OUT" "$a no" "an open sandbox must not reach $a:$port"
done

# ---- the rules are the worker's: named after the open network's bridge
br=$(docker network inspect -f '{{index .Options "com.docker.network.bridge.name"}}' "$open_net")
[ -n "$br" ] && [ "$br" != "<no value>" ] || br="br-$(docker network inspect -f '{{.Id}}' "$open_net" | cut -c1-12)"
assert_exit 0 iptables -w 5 -C INPUT -i "$br" -j "SBX-HOST-$br"
assert_exit 0 iptables -w 5 -C "SBX-EGRESS-$br" -d 169.254.0.0/16 -j REJECT

# ---- a worker with a health endpoint: /readyz names a rule that is gone
wname="itest-egress-$tag"
wlog="$ITEST_TMP/worker-$wname.log"
itest_watch_log "$wlog"
wpid=
finish() {
  # put the rule back in case the test stopped between removing and restoring it
  iptables -w 5 -C "SBX-EGRESS-$br" -d 10.0.0.0/8 -j REJECT 2>/dev/null \
    || iptables -w 5 -I "SBX-EGRESS-$br" 2 -d 10.0.0.0/8 -j REJECT 2>/dev/null || true
  SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" workers drain "$wname" >/dev/null 2>&1
  [ -z "$wpid" ] || itest_stop_pid "$wpid" worker 30
}
itest_on_exit finish
wtoken=$(itest_token itest-workers worker "$wname")
SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=1000 SANDBOX_WORKER_MEMORY_MIB=1024 \
  SANDBOX_WORKER_GVISOR_RUNTIME='' \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" --docker-socket /var/run/docker.sock \
  --worker-health-listen 127.0.0.1:0 >>"$wlog" 2>&1 </dev/null &
wpid=$!
itest_track_pid "$wpid"
health_port() { sed -n 's/.*health checks on 127\.0\.0\.1:\([0-9][0-9]*\) .*/\1/p' "$wlog" | head -n 1; }
has_health_port() { [ -n "$(health_port)" ]; }
itest_wait_until 30 "the worker to log its health address" has_health_port
H="http://127.0.0.1:$(health_port)"
ready_is() { [ "$(curl -s -o "$ITEST_TMP/readyz.$tag" -w '%{http_code}' --max-time 5 "$H/readyz")" = "$1" ]; }
itest_wait_until 60 "$wname's /readyz to answer 200" ready_is 200

iptables -w 5 -D "SBX-EGRESS-$br" -d 10.0.0.0/8 -j REJECT
itest_wait_until 30 "$wname's /readyz to answer 503 once a rule is gone" ready_is 503
assert_contains "$(cat "$ITEST_TMP/readyz.$tag")" "SBX-EGRESS-$br -d 10.0.0.0/8 -j REJECT" "/readyz naming the missing rule"
iptables -w 5 -I "SBX-EGRESS-$br" 2 -d 10.0.0.0/8 -j REJECT
itest_wait_until 30 "$wname's /readyz to answer 200 again" ready_is 200

echo "an open sandbox reaches neither the host, link-local, private, CGNAT nor forwarded private targets that a plain container reaches; /readyz names a missing rule"
