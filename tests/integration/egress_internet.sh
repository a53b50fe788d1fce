# The egress tests' own internet (sourced by test_egress_filter.sh and
# test_egress_worker.sh after lib.sh): a network namespace behind a veth
# whose host end is PREFIX.1/24, with dnsmasq on PREFIX.2:53 (query log
# $EGI_WORK/dnsmasq.log) answering api.egress.test with PREFIX.2 and
# other.egress.test and denied.egress.test with PREFIX.3, HTTPS (a
# certificate for those names, $EGI_WORK/server.crt) and HTTP servers on
# every address, and a UDP listener on 443 logging to $EGI_WORK/udp.log.
# Usage: egress_internet NAMESPACE PREFIX WORKDIR; sets EGI_API, EGI_OTHER.
# Everything goes at the test's end (itest_on_exit).
# shellcheck shell=bash

egress_internet() {
  EGI_NS=$1
  EGI_WORK=$3
  EGI_API=$2.2
  EGI_OTHER=$2.3
  local py=/usr/bin/python3 net_py
  net_py="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/egress_net.py"
  command -v dnsmasq >/dev/null || fail "dnsmasq is not installed (tools/lib.sh installs dnsmasq-base)"
  mkdir -p "$EGI_WORK"
  itest_on_exit 'ip link del "$EGI_NS" 2>/dev/null; ip netns del "$EGI_NS" 2>/dev/null; true'
  ip netns add "$EGI_NS" || fail "cannot create network namespace $EGI_NS (needs CAP_NET_ADMIN)"
  ip link add "$EGI_NS" type veth peer name inet0 netns "$EGI_NS"
  ip addr add "$2.1/24" dev "$EGI_NS"
  ip link set "$EGI_NS" up
  ip netns exec "$EGI_NS" ip addr add "$EGI_API/24" dev inet0
  ip netns exec "$EGI_NS" ip addr add "$EGI_OTHER/24" dev inet0
  ip netns exec "$EGI_NS" ip link set inet0 up
  ip netns exec "$EGI_NS" ip link set lo up
  ip netns exec "$EGI_NS" ip route add default via "$2.1"
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=api.egress.test" \
    -addext "subjectAltName=DNS:api.egress.test,DNS:other.egress.test,DNS:denied.egress.test" \
    -keyout "$EGI_WORK/server.key" -out "$EGI_WORK/server.crt" >/dev/null 2>&1 || fail "openssl req failed"
  ip netns exec "$EGI_NS" dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces \
    --listen-address="$EGI_API" --port=53 --log-queries --log-facility="$EGI_WORK/dnsmasq.log" \
    --address=/api.egress.test/"$EGI_API" --address=/other.egress.test/"$EGI_OTHER" \
    --address=/denied.egress.test/"$EGI_OTHER" --address=/mitm.egress.test/"$EGI_OTHER" --pid-file="$EGI_WORK/dnsmasq.pid" --user=root \
    </dev/null >"$EGI_WORK/dnsmasq.out" 2>&1 &
  itest_track_pid $!
  ip netns exec "$EGI_NS" "$py" "$net_py" serve "$EGI_WORK" </dev/null >"$EGI_WORK/serve.out" 2>&1 &
  itest_track_pid $!
  itest_watch_log "$EGI_WORK/serve.out"
  itest_wait_until 10 "the servers of the test's internet" test -e "$EGI_WORK/serving"
  itest_wait_until 10 "dnsmasq" grep -q started "$EGI_WORK/dnsmasq.log"
}

# A controller of the test's own, on a database of its own of the run's
# PostgreSQL (no other test's sandbox lands on the test's worker, which
# goes away). Usage: egress_controller NAME TENANT [CONTROLLER ARGS...];
# sets EGC_DBURL, SANDBOX_URL, ITEST_ADMIN_TOKEN and SANDBOX_TOKEN (an
# admin of TENANT).
egress_controller() {
  local name=$1 tenant=$2 clog port rport cpid
  shift 2
  "$ITEST_PGBIN/psql" -X -q "$DATABASE_URL" -c "CREATE DATABASE $name"
  EGC_DBURL="${DATABASE_URL%/*}/$name"
  assert_exit 0 "$SANDBOXD" migrate --database-url "$EGC_DBURL"
  clog="$ITEST_TMP/controller-$name.log"
  itest_watch_log "$clog"
  port=$(itest_free_port)
  rport=$(itest_free_port)
  "$SANDBOXD" controller --database-url "$EGC_DBURL" --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" \
    "$@" >>"$clog" 2>&1 </dev/null &
  cpid=$!
  itest_track_pid "$cpid"
  export SANDBOX_URL="http://127.0.0.1:$port"
  itest_wait_healthz "$SANDBOX_URL" "$cpid" controller "$clog" || fail "controller did not come up"
  ITEST_ADMIN_TOKEN=$("$SANDBOXD" token create --database-url "$EGC_DBURL" --tenant "$tenant" --role admin)
  export ITEST_ADMIN_TOKEN SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
}

# Takes away what a worker's egress filter left on the host for Docker
# network FNET (its chains and their jumps, the taps' jumps, its rules
# directory) and the network itself.
egress_filter_cleanup() {
  local fnet=$1 br t
  br=$(docker network inspect -f '{{.Id}}' "$fnet" 2>/dev/null | cut -c1-12)
  [ -n "$br" ] || return 0
  br="br-$br"
  for t in $(iptables -w 5 -S INPUT 2>/dev/null | sed -n "s/^-A INPUT -i \(sbv[0-9a-f]*+\) -j SBX-FIN-$br\$/\1/p"); do
    iptables -w 5 -t nat -D PREROUTING -i "$t" -j "SBX-FNAT-$br" 2>/dev/null
    iptables -w 5 -D INPUT -i "$t" -j "SBX-FIN-$br" 2>/dev/null
    iptables -w 5 -D FORWARD -i "$t" -j DROP 2>/dev/null
    iptables -w 5 -t raw -D PREROUTING -i "$t" -m rpfilter --invert -j DROP 2>/dev/null
  done
  iptables -w 5 -t nat -D PREROUTING -i "$br" -j "SBX-FNAT-$br" 2>/dev/null
  iptables -w 5 -D INPUT -i "$br" -j "SBX-FIN-$br" 2>/dev/null
  iptables -w 5 -D FORWARD -i "$br" -j DROP 2>/dev/null
  iptables -w 5 -t nat -F "SBX-FNAT-$br" 2>/dev/null && iptables -w 5 -t nat -X "SBX-FNAT-$br" 2>/dev/null
  iptables -w 5 -F "SBX-FIN-$br" 2>/dev/null && iptables -w 5 -X "SBX-FIN-$br" 2>/dev/null
  docker network rm "$fnet" >/dev/null 2>&1
  rm -rf "/run/sandbox-egress-$br.rules"
  true
}
