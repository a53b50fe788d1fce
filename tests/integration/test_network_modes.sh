#!/usr/bin/env bash
# Network modes are real (docs/worker.md): none has only loopback;
# restricted has an interface on the worker's internal network but reaches
# neither the host (docker0 gateway, the host's own address, its own
# network's gateway) nor another restricted sandbox; open reaches no host
# service either (not through its network's gateway: the worker's egress rules). Each on the Docker network the
# worker created with the documented options.
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-net
restricted_net=sandbox-restricted
open_net=sandbox-open

# A TCP service on every host address that greets each connection.
port=$(itest_free_port)
python3 -c '
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen(64)
while True:
    c, _ = s.accept()
    try:
        c.sendall(b"hello-from-host\n")
    finally:
        c.close()
' "$port" </dev/null >/dev/null 2>&1 &
itest_track_pid $!
itest_wait_until 10 "the host listener on port $port" bash -c "exec 3<>/dev/tcp/127.0.0.1/$port"

create() { # NETWORK: prints the sandbox id
  local id
  assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --memory-mib 64 --network "$1" --wait \
    --timeout 120
  read -r id _ <<<"$ITEST_OUT"
  assert_match "$id" '^sbx_' "sandbox id ($1)"
  echo "$id"
}
container_of() { docker ps -q --no-trunc --filter "label=dev.sandbox.id=$1"; }
# reach SANDBOX ADDRESS PORT: exit status of a 3 s TCP connect from inside
reach() {
  local rc=0
  sandbox exec "$1" -- sh -c "echo | nc -w 3 $2 $3" >"$ITEST_TMP/reach.out" 2>&1 || rc=$?
  return "$rc"
}

# ---- none: loopback only
none=$(create none)
itest_track "$none"
assert_exit 0 sandbox exec "$none" -- ls /sys/class/net
assert_eq "lo" "$(printf '%s\n' "$ITEST_OUT" | tr -s ' \n' ' ' | sed 's/ $//')" "interfaces with network none"
assert_eq "none" "$(docker inspect -f '{{.HostConfig.NetworkMode}}' "$(container_of "$none")")" "NetworkMode of none"

# ---- the networks the worker made
assert_eq "true bridge" "$(docker network inspect -f '{{.Internal}} {{.Driver}}' "$restricted_net")" "$restricted_net"
assert_eq "false true" "$(docker network inspect -f \
  '{{index .Options "com.docker.network.bridge.enable_icc"}} {{index .Options "com.docker.network.bridge.inhibit_ipv4"}}' \
  "$restricted_net")" "$restricted_net options (enable_icc, inhibit_ipv4)"
assert_eq "false bridge false" "$(docker network inspect -f \
  '{{.Internal}} {{.Driver}} {{index .Options "com.docker.network.bridge.enable_icc"}}' "$open_net")" "$open_net"
assert_eq "network" "$(docker network inspect -f '{{index .Labels "dev.sandbox.managed"}}' "$restricted_net")" \
  "label of $restricted_net"

# ---- restricted: an interface, but no host and no neighbour
r1=$(create restricted)
itest_track "$r1"
r2=$(create restricted)
itest_track "$r2"
assert_eq "$restricted_net" "$(docker inspect -f '{{.HostConfig.NetworkMode}}' "$(container_of "$r1")")" \
  "NetworkMode of restricted"
assert_exit 0 sandbox exec "$r1" -- ls /sys/class/net
assert_contains "$ITEST_OUT" "eth0" "interfaces with network restricted"

docker0_gw=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' bridge)
# a dockerd started while docker0 already had its address records no
# gateway for the default bridge: take the bridge's own address then
[ -n "$docker0_gw" ] || docker0_gw=$(ip -4 -o addr show docker0 2>/dev/null | awk '{ sub("/.*", "", $4); print $4; exit }')
restricted_gw=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$restricted_net")
host_ip=$(ip -4 -o addr show scope global | awk '$2 != "docker0" && $2 !~ /^br-/ && $2 !~ /^veth/ { sub("/.*", "", $4); print $4; exit }')
assert_match "$docker0_gw" '^[0-9.]+$' "docker0 gateway address"
assert_match "$host_ip" '^[0-9.]+$' "the host's primary address"
# the listener answers on those addresses from the host itself
assert_eq "hello-from-host" "$(timeout 5 bash -c "exec 3<>/dev/tcp/$host_ip/$port; head -n 1 <&3")" \
  "host listener on $host_ip"
for addr in "$docker0_gw" "$host_ip" ${restricted_gw:+"$restricted_gw"}; do
  if reach "$r1" "$addr" "$port"; then
    fail "a restricted sandbox reached the host at $addr:$port: $(cat "$ITEST_TMP/reach.out")"
  fi
  assert_not_contains "$(cat "$ITEST_TMP/reach.out")" "hello-from-host" "restricted -> $addr"
done

# a second restricted sandbox serves on port 7777 (reachable from itself) ...
r2_ip=$(docker inspect -f "{{(index .NetworkSettings.Networks \"$restricted_net\").IPAddress}}" "$(container_of "$r2")")
assert_match "$r2_ip" '^[0-9.]+$' "address of the second restricted sandbox"
assert_exit 0 sandbox exec "$r2" -- sh -c 'nc -ll -p 7777 -e echo hello-from-r2 </dev/null >/dev/null 2>&1 &'
itest_wait_until 10 "the listener inside $r2" reach "$r2" "$r2_ip" 7777
assert_contains "$(cat "$ITEST_TMP/reach.out")" "hello-from-r2" "the second sandbox reaching itself"
# ... which the first cannot reach
if reach "$r1" "$r2_ip" 7777; then
  fail "one restricted sandbox reached another at $r2_ip:7777: $(cat "$ITEST_TMP/reach.out")"
fi
assert_not_contains "$(cat "$ITEST_TMP/reach.out")" "hello-from-r2" "restricted -> restricted"

# ---- open: the internet, not the host (test_open_egress covers the ranges):
# neither its network's gateway, docker0's nor the host's own address
open=$(create open)
itest_track "$open"
assert_eq "$open_net" "$(docker inspect -f '{{.HostConfig.NetworkMode}}' "$(container_of "$open")")" "NetworkMode of open"
open_gw=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$open_net")
assert_match "$open_gw" '^[0-9.]+$' "gateway of $open_net"
for addr in "$open_gw" "$docker0_gw" "$host_ip"; do
  if reach "$open" "$addr" "$port"; then
    fail "an open sandbox reached the host at $addr:$port: $(cat "$ITEST_TMP/reach.out")"
  fi
  assert_not_contains "$(cat "$ITEST_TMP/reach.out")" "hello-from-host" "open -> $addr"
done

echo "none has loopback only; restricted reaches neither host nor neighbour; open does not reach the host"
