#!/usr/bin/env bash
# The egress filter (tools/sandbox-egress, docs/network.md) on the real
# kernel's redirect: the test builds its own internet in a network
# namespace (dnsmasq answering names under egress.test, HTTPS and HTTP
# servers with a certificate for those names, a UDP listener that logs what
# reaches it) and a sandbox in another, whose TCP and DNS the host's
# iptables redirect to the filter as a worker's filtered bridge does. With
# rules allowing api.egress.test: that name is reached; a denied name, a
# raw IP, TLS without a name, an allowed name on another address, a denied
# SNI on an allowed address, a fronted HTTP Host, QUIC, DNS over TCP and a
# direct DNS server are refused; a burst of random names below a denied
# domain never reaches the upstream (dnsmasq's query log has none, and does
# have the allowed name); a live rule change works within a second; an
# address the tenant's egress_allow lists is reached without a name; the
# counters and verdict records account for each. Every address is the
# test's own (203.0.113.0/24 in its namespace, 10.213.x in the other).
# itest-standalone
# itest-cost: 20
# itest-timeout: 180
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=egress_internet.sh
. "$(dirname "$0")/egress_internet.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, iptables)"
command -v dnsmasq >/dev/null || fail "dnsmasq is not installed (tools/lib.sh installs dnsmasq-base)"
egress="$ITEST_BUILD/tools/sandbox-egress"
[ -x "$egress" ] || fail "no $egress"
net_py="$(cd "$(dirname "$0")" && pwd)/egress_net.py"
py=/usr/bin/python3

tag=$$
o3=$((tag % 250 + 1))
sns="sbxefs$tag"   # the sandbox
ins="sbxefi$tag"   # the internet
sh_if="sbxefs$tag" # the host end of its veth (the "bridge" the rules name)
sbx_host="10.213.$o3.1"
sbx_addr="10.213.$o3.2"
api=203.0.113.2   # api.egress.test, and the upstream DNS
other=203.0.113.3 # other.egress.test, denied.egress.test
work="$ITEST_TMP/egress-filter.$tag"
mkdir -p "$work"
tport=$(itest_free_port)
dport=$(itest_free_port)
# the first of 8 free UDP ports in a row (sandbox-egress --udp takes 8)
uport=$(python3 -c '
import random, socket
for _ in range(200):
    b = random.randint(20000, 29990)
    socks = []
    try:
        for p in range(b, b + 8):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.bind(("0.0.0.0", p))
    except OSError:
        continue
    finally:
        for s in socks:
            s.close()
    print(b)
    break
')
[ -n "$uport" ] || fail "no 8 free UDP ports in a row"
ctl="$work/control.sock"
rules=()

cleanup_net() {
  local r
  for r in "${rules[@]}"; do
    # shellcheck disable=SC2086 # a rule's words
    iptables -w 5 $r 2>/dev/null || true
  done
  ip link del "$sh_if" 2>/dev/null || true
  ip netns del "$sns" 2>/dev/null || true
}
itest_on_exit cleanup_net

# ---- the sandbox's namespace
ip netns add "$sns" || fail "cannot create network namespace $sns (needs CAP_NET_ADMIN)"
ip link add "$sh_if" type veth peer name sbx0 netns "$sns"
ip addr add "$sbx_host/30" dev "$sh_if"
ip link set "$sh_if" up
ip netns exec "$sns" ip addr add "$sbx_addr/30" dev sbx0
ip netns exec "$sns" ip link set sbx0 up
ip netns exec "$sns" ip link set lo up
ip netns exec "$sns" ip route add default via "$sbx_host"

# ---- what a worker's filtered bridge gets: TCP, DNS and other UDP (to a
# range of 8 ports) to the filter, nothing else into the host or forwarded
add_rule() { # TABLE CHAIN RULE...: inserted first; removed at the end
  local t=$1 c=$2
  shift 2
  iptables -w 5 -t "$t" -I "$c" 1 "$@" || fail "iptables -t $t -I $c $*"
  rules+=("-t $t -D $c $*")
}
add_rule nat PREROUTING -i "$sh_if" -p tcp -j REDIRECT --to-ports "$tport"
add_rule nat PREROUTING -i "$sh_if" -p udp -j DNAT --to-destination "$sbx_host:$uport-$((uport + 7))"
add_rule nat PREROUTING -i "$sh_if" -p udp --dport 53 -j REDIRECT --to-ports "$dport"
add_rule filter INPUT -i "$sh_if" -j DROP
add_rule filter INPUT -i "$sh_if" -p udp --dport "$uport:$((uport + 7))" -j ACCEPT
add_rule filter INPUT -i "$sh_if" -p udp --dport "$dport" -j ACCEPT
add_rule filter INPUT -i "$sh_if" -p tcp --dport "$tport" -j ACCEPT
add_rule filter FORWARD -i "$sh_if" -j DROP

# ---- the internet: names, HTTPS/HTTP servers, a UDP listener
egress_internet "$ins" 203.0.113 "$work"
"$egress" --tcp "$sbx_host:$tport" --dns "$sbx_host:$dport" --udp "$sbx_host:$uport" --upstream "$api:53" --control "$ctl" --name-timeout 2 \
  --upstream-ca "$work/server.crt" \
  </dev/null >"$work/egress.log" 2>&1 &
epid=$!
itest_track_pid "$epid"
itest_watch_log "$work/egress.log"
itest_wait_until 10 "sandbox-egress's control socket" test -S "$ctl"
[ "$(stat -c %a "$ctl")" = 600 ] || fail "the control socket is mode $(stat -c %a "$ctl"), not 600"

in_sbx() { ip netns exec "$sns" "$py" "$net_py" "$@"; }
control() { "$py" "$net_py" control "$ctl" "$1"; }
set_rules() {
  local out
  out=$(control '{"op":"set","addr":"'"$sbx_addr"'","sandbox":"sbx_test","tenant":"t1","rules":'"$1"'}')
  assert_eq true "$(itest_json "$out" ok)" "the filter took the rules ($out)"
}

# ---- before the sandbox is known: nothing answers it
out=$(in_sbx dns api.egress.test 198.51.100.53)
assert_contains "$out" "no answer" "DNS from an address the filter does not know"
assert_contains "$(in_sbx https api.egress.test "$api" "$work/server.crt")" "refused" \
  "TCP from an address the filter does not know"

set_rules '{"allow":["api.egress.test"],"deny":["denied.egress.test"]}'

# ---- an allowed name: its DNS through the upstream, its HTTPS reached
out=$(in_sbx dns api.egress.test 198.51.100.53)
assert_eq "rcode 0 $api" "$out" "api.egress.test resolved by the worker's resolver"
assert_eq "hello api.egress.test" "$(in_sbx https api.egress.test "$api" "$work/server.crt")" "allowed HTTPS"
assert_eq "hello api.egress.test" "$(in_sbx http api.egress.test "$api")" "allowed HTTP"
assert_eq $((8 << 20)) "$(in_sbx download api.egress.test "$api" "$work/server.crt")" "8 MiB through the filter"

# ---- refused
out=$(in_sbx dns denied.egress.test 198.51.100.53)
assert_eq "rcode 3 " "$out" "a denied name is NXDOMAIN"
out=$(in_sbx dns other.egress.test 198.51.100.53)
assert_eq "rcode 3 " "$out" "a name no rule allows is NXDOMAIN (default deny)"
assert_contains "$(in_sbx https denied.egress.test "$other" "$work/server.crt")" "refused" "a denied name"
assert_contains "$(in_sbx https "$api" "$api" "$work/server.crt")" "refused" "TLS without a name (a raw IP)"
assert_contains "$(in_sbx http "$api" "$api")" "refused" "HTTP to a raw IP"
assert_contains "$(in_sbx https api.egress.test "$other" "$work/server.crt")" "refused" \
  "an allowed name on an address that is not its"
assert_contains "$(in_sbx https denied.egress.test "$api" "$work/server.crt")" "refused" \
  "a denied SNI on an allowed address"
assert_contains "$(in_sbx http denied.egress.test "$api")" "refused" "a fronted Host (denied) on an allowed address"
assert_contains "$(in_sbx http api.egress.test "$other")" "refused" "an allowed Host on another address"
assert_contains "$(in_sbx dnstcp api.egress.test "$api")" "refused" "DNS over TCP"
assert_eq sent "$(in_sbx quic "$api")" "a QUIC datagram sent"
# a connection that names no host (a port that waits for the server to
# speak first) is reset after --name-timeout (2 s here)
out=$(in_sbx idle "$api" 22)
assert_match "$out" '^reset after [23]\.' "a connection that names nothing, reset after 2 s ($out)"
# a direct DNS server: the query is the filter's to answer, never the upstream's
assert_eq "rcode 3 " "$(in_sbx dns denied.egress.test "$api")" "DNS straight at the upstream's address"
# a burst of random names below a denied domain
assert_eq 100 "$(in_sbx burst denied.egress.test "$api" 100)" "100 random names below a denied domain, NXDOMAIN"
sleep 0.5
[ ! -e "$work/udp.log" ] || fail "QUIC reached the internet: $(cat "$work/udp.log")"
grep -q "query\[A\] api.egress.test" "$work/dnsmasq.log" || fail "the allowed name never reached the upstream"
if grep -q "denied.egress.test\|other.egress.test" "$work/dnsmasq.log"; then
  fail "a refused name reached the upstream: $(grep -m3 'denied.egress.test\|other.egress.test' "$work/dnsmasq.log")"
fi

# ---- a live rule change takes effect at once: a connection the new rules
# refuse is closed
in_sbx hold api.egress.test "$api" "$work/server.crt" 20 >"$work/hold.out" 2>&1 &
itest_track_pid $!
held() { [ "$(itest_json "$(control '{"op":"stats"}')" sandboxes.0.connections)" = 1 ]; }
itest_wait_until 10 "a connection held open through the filter" held
set_rules '{"allow":["other.egress.test"]}'
itest_wait_until 5 "the held connection ended by the rule change" grep -q "after" "$work/hold.out"
assert_eq 0 "$(itest_json "$(control '{"op":"stats"}')" sandboxes.0.connections)" "no connection left"
# The change is in force when its answer comes: the very next query and
# connection meet it (no cache to wait for). What is timed is the change's
# round trip alone (a python client's start included); the queries after it
# are processes of their own, whose start a loaded host can make slow.
assert_eq "rcode 3 " "$(in_sbx dns api.egress.test 198.51.100.53)" "api.egress.test before the change allows it"
t0=$(date +%s%N)
set_rules '{"allow":["api.egress.test","*.egress.test"],"deny":["denied.egress.test"]}'
ms=$((($(date +%s%N) - t0) / 1000000))
out=$(in_sbx dns api.egress.test 198.51.100.53)
body=$(in_sbx https api.egress.test "$api" "$work/server.crt")
assert_eq "rcode 0 $api" "$out" "api.egress.test resolved by the first query after the change"
assert_eq "hello api.egress.test" "$body" "api.egress.test reached by the first connection after the change"
assert_eq "hello other.egress.test" "$(in_sbx https other.egress.test "$other" "$work/server.crt")" \
  "other.egress.test still reached"
echo "the rule change answered in ${ms} ms, and the next query met it"
[ "$ms" -lt 1000 ] || fail "the rule change took ${ms} ms to answer (limit 1000)"
assert_contains "$(in_sbx https denied.egress.test "$other" "$work/server.crt")" "refused" "a deny still wins"

# ---- UDP (QUIC) goes out only to a port a rule lists, to an address the
# resolver gave for an allowed name; the answer comes from that address
assert_eq "no reply" "$(in_sbx udp "$api" 443 before 1)" "UDP with no udp rule"
[ ! -e "$work/udp.log" ] || fail "UDP with no udp rule reached the internet: $(cat "$work/udp.log")"
set_rules '{"allow":["api.egress.test"],"deny":["denied.egress.test"],"udp":[443]}'
assert_eq "rcode 0 $api" "$(in_sbx dns api.egress.test 198.51.100.53)" "api.egress.test resolved"
assert_eq "echo quic-hello from $api:443" "$(in_sbx udp "$api" 443 quic-hello 5)" \
  "UDP to an allowed name's address and port, answered from that address"
assert_eq "no reply" "$(in_sbx udp "$other" 443 other 1)" "UDP to an address no allowed name has"
assert_eq "no reply" "$(in_sbx udp "$api" 444 port 1)" "UDP to a port no rule lists"
assert_eq "no reply" "$(in_sbx udp "$sbx_host" 443 host 1)" "UDP to the host's own address"
assert_eq "${api%.*}.1 10" "$(cat "$work/udp.log")" \
  "only the allowed datagram reached the internet, from the host (the filter sends it itself)"
set_rules '{"allow":["api.egress.test"],"deny":["denied.egress.test"]}'
assert_eq 0 "$(itest_json "$(control '{"op":"stats"}')" sandboxes.0.udp_flows)" "a rule change without udp ends the flow"
assert_eq "no reply" "$(in_sbx udp "$api" 443 after 1)" "UDP after the rule change took udp away"

# ---- accounted for
stats=$(control '{"op":"stats"}')
n() { itest_json "$stats" "sandboxes.0.$1"; }
[ "$(n tcp_allowed)" -ge 3 ] || fail "tcp_allowed $(n tcp_allowed), want >= 3: $stats"
[ "$(n tcp_refused)" -ge 8 ] || fail "tcp_refused $(n tcp_refused), want >= 8: $stats"
[ "$(n udp_allowed)" -ge 1 ] || fail "udp_allowed $(n udp_allowed), want >= 1: $stats"
[ "$(n udp_refused)" -ge 5 ] || fail "udp_refused $(n udp_refused), want >= 5: $stats"
[ "$(n dns_refused)" -ge 103 ] || fail "dns_refused $(n dns_refused), want >= 103: $stats"
[ "$(n bytes_in)" -gt $((8 << 20)) ] || fail "bytes in $(n bytes_in), want over 8 MiB: $stats"
recs=$(control '{"op":"drain","max":4096}')
"$py" - "$recs" <<'EOF' || fail "the verdict records do not account for the connections (above)"
import json, sys
doc = json.loads(sys.argv[1])
recs = doc["records"]
def has(**kw):
    return any(all(r.get(k) == v for k, v in kw.items()) for r in recs)
want = [
    dict(kind="tcp", name="api.egress.test", port=443, verdict="allowed", sandbox="sbx_test", tenant="t1"),
    dict(kind="tcp", name="denied.egress.test", port=443, verdict="refused", why="deny denied.egress.test"),
    dict(kind="tcp", name="api.egress.test", addr="203.0.113.3", verdict="refused"),
    dict(kind="dns", name="api.egress.test", qtype=1, verdict="allowed"),
    dict(kind="dns", name="denied.egress.test", verdict="refused"),
    dict(kind="tcp", port=22, verdict="refused", why="no TLS ClientHello or HTTP request within 2 s"),
    dict(kind="udp", name="api.egress.test", addr="203.0.113.2", port=443, verdict="allowed",
         why="allow api.egress.test", bytes_out=10, bytes_in=15),
    dict(kind="udp", addr="203.0.113.2", port=443, verdict="refused", why="no udp rule for port 443"),
    dict(kind="udp", addr="203.0.113.3", port=443, verdict="refused",
         why="not an address the resolver gave for a name the rules allow"),
    dict(kind="udp", addr="203.0.113.2", port=444, verdict="refused", why="no udp rule for port 444"),
]
missing = [w for w in want if not has(**w)]
big = [r for r in recs if r["kind"] == "tcp" and r["verdict"] == "allowed" and r.get("bytes_in", 0) > 0]
if missing or not big:
    print("missing %s; allowed with bytes: %d; %d records" % (missing, len(big), len(recs)), file=sys.stderr)
    sys.exit(1)
EOF
# ---- secrets at egress: a header added for its host over HTTPS, with a
# certificate from the sandbox's own CA; other TLS untouched
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=sandbox egress CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
  -keyout "$work/sbxca.key" -out "$work/sbxca.crt" >/dev/null 2>&1 || fail "openssl req (the sandbox CA) failed"
secret="Bearer s3cret-$tag-$RANDOM"
set_secrets() { # HOSTS_JSON: the secret bound to those hosts
  "$py" - "$sbx_addr" "$work/sbxca.crt" "$work/sbxca.key" "$secret" "$1" <<'EOF' >"$work/set.json"
import json, sys
addr, crt, key, value, hosts = sys.argv[1:]
print(json.dumps({"op": "set", "addr": addr, "sandbox": "sbx_test", "tenant": "t1",
                  "rules": {"allow": ["api.egress.test", "other.egress.test", "mitm.egress.test"]},
                  "ca": {"cert": open(crt).read(), "key": open(key).read()},
                  "secrets": [{"header": "Authorization", "value": value, "hosts": json.loads(hosts)}]}))
EOF
  out=$(control "$(cat "$work/set.json")")
  assert_eq true "$(itest_json "$out" ok)" "the filter took the secret ($out)"
  assert_not_contains "$out" "s3cret" "the set's answer holds no secret"
}
set_secrets '["api.egress.test","mitm.egress.test"]'
out=$(in_sbx fetch api.egress.test "$api" "$work/sbxca.crt" /headers "Authorization: Bearer forged")
assert_eq "auth=$secret host=api.egress.test conn=close" "$out" \
  "the secret's header replaced the sandbox's, and the request ends the connection"
assert_eq "auth=None host=other.egress.test conn=keep-alive" \
  "$(in_sbx fetch other.egress.test "$other" "$work/server.crt" /headers)" "TLS to another host passes untouched"
assert_contains "$(in_sbx fetch api.egress.test "$api" "$work/server.crt" /headers)" "refused" \
  "a bound host answers with the sandbox CA's certificate, not the host's"
assert_contains "$(in_sbx fetch api.egress.test "$api" "$work/sbxca.crt" /headers "" other.egress.test)" \
  "refused" "a Host other than the TLS server name gets no secret"
assert_contains "$(in_sbx fetch mitm.egress.test "$other" "$work/sbxca.crt" /headers)" "refused" \
  "a host whose own certificate does not verify gets no secret"
assert_contains "$(control '{"op":"stats"}')" '"secrets":true' "the filter says it holds secrets"
recs=$(control '{"op":"drain","max":4096}')
assert_contains "$recs" "allow api.egress.test (+ Authorization)" "the record says a header was added"
assert_contains "$recs" "the request's Host other.egress.test is not its TLS server name api.egress.test" \
  "the record of the fronted Host"
assert_contains "$recs" "the certificate of mitm.egress.test does not verify" "the record of the bad certificate"
assert_not_contains "$recs" "s3cret" "the records hold no secret"
if grep -q "s3cret" "$work/egress.log"; then fail "the secret is in the filter's log"; fi
out=$(control '{"op":"set","addr":"'"$sbx_addr"'","sandbox":"sbx_test","tenant":"t1","rules":{"allow":["api.egress.test"]},"ca":{"cert":"x","key":"y"},"secrets":[]}')
assert_contains "$out" '"ok":false' "a CA that is not PEM is refused"
# the tenant's egress_allow: a listed address is reached as an address
out=$(control '{"op":"set","addr":"'"$sbx_addr"'","sandbox":"sbx_test","tenant":"t1","rules":{"allow":["api.egress.test"]},"cidrs":["'"$other"'/32"]}')
assert_eq true "$(itest_json "$out" ok)" "rules with egress_allow CIDRs ($out)"
assert_eq "hello $other" "$(in_sbx http "$other" "$other")" "a raw IP in egress_allow"
assert_contains "$(in_sbx http "$api" "$api")" "refused" "a raw IP outside egress_allow"
out=$(control '{"op":"drop","sandbox":"sbx_test"}')
assert_eq true "$(itest_json "$out" known)" "the sandbox dropped"
assert_contains "$(in_sbx https api.egress.test "$api" "$work/server.crt")" "refused" "nothing once dropped"
assert_contains "$(control '{"op":"set","addr":"x"}')" '"ok":false' "a bad control request is an error"
# it stops cleanly (under the sanitizers: no leak), its socket gone
kill -TERM "$epid"
erc=0
wait "$epid" || erc=$?
assert_eq 0 "$erc" "sandbox-egress's exit on SIGTERM"
[ ! -e "$ctl" ] || fail "the control socket is left behind"
echo "the egress filter reaches allowed names only, at their own addresses; refused names never reach the upstream"
