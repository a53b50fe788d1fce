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
