#!/usr/bin/env bash
# The egress filter (tools/sandbox-egress, docs/network.md) against the
# unfiltered open path, side by side in one run on the real kernel: two
# "sandboxes" (network namespaces), one whose TCP and DNS the host's
# iptables redirect to sandbox-egress (as a worker's filtered bridge
# does), one routed straight out (open, no filter), and an "internet"
# namespace with dnsmasq and an HTTPS server (python3). Rows: a TLS
# connection's setup (connect + handshake, median of N) and an HTTPS
# download's throughput (median of 5 of MIB MiB), with the filtered/open
# ratio; and the same through the filter when a secret is bound to the host
# (the filter ends the sandbox's TLS with a certificate of the sandbox's
# CA, adds the header and opens its own TLS to the host: two handshakes).
# The client and server are Python in every column, so the ratios are what
# the filter adds. Every address is the bench's own.
# Usage: tests/bench/egress.sh [N] [MIB]   (as root; env BUILD)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
n=${1:-50}
mib=${2:-64}
build=${BUILD:-$root/build}
egress="$build/tools/sandbox-egress"
net_py="$root/tests/integration/egress_net.py"
[ "$(id -u)" -eq 0 ] || { echo "needs root (network namespaces, iptables)" >&2; exit 2; }
[ -x "$egress" ] || { echo "no $egress (meson compile -C $build)" >&2; exit 2; }
command -v dnsmasq >/dev/null || { echo "dnsmasq is missing (apt-get install dnsmasq-base)" >&2; exit 2; }
tag=$$
dir=$(mktemp -d /tmp/sbx-egbench.XXXXXX)
fns="sbxebf$tag" ons="sbxebo$tag" ins="sbxebi$tag"
pids=() rules=()
done_() {
  local p r
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  for r in "${rules[@]}"; do
    # shellcheck disable=SC2086 # a rule's words
    iptables -w 5 $r 2>/dev/null || true
  done
  for p in "$fns" "$ons" "$ins"; do ip link del "$p" 2>/dev/null || true; ip netns del "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap done_ EXIT
rule() { local t=$1 c=$2; shift 2; iptables -w 5 -t "$t" -I "$c" 1 "$@"; rules+=("-t $t -D $c $*"); }
o3=$((tag % 250 + 1))
veth() { # NS HOSTADDR NSADDR/LEN
  ip netns add "$1"
  ip link add "$1" type veth peer name eth0 netns "$1"
  ip addr add "$2" dev "$1"
  ip link set "$1" up
  ip netns exec "$1" ip addr add "$3" dev eth0
  ip netns exec "$1" ip link set eth0 up
  ip netns exec "$1" ip link set lo up
  ip netns exec "$1" ip route add default via "${2%/*}"
}
veth "$fns" "10.214.$o3.1/30" "10.214.$o3.2/30"
veth "$ons" "10.215.$o3.1/30" "10.215.$o3.2/30"
veth "$ins" 203.0.113.1/24 203.0.113.2/24
tport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("",0)); print(s.getsockname()[1])')
dport=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("",0)); print(s.getsockname()[1])')
rule nat PREROUTING -i "$fns" -p tcp -j REDIRECT --to-ports "$tport"
rule nat PREROUTING -i "$fns" -p udp --dport 53 -j REDIRECT --to-ports "$dport"
rule filter FORWARD -i "$fns" -j DROP
# the open sandbox is routed both ways (Docker's FORWARD policy may be DROP)
rule filter FORWARD -o "$ons" -j ACCEPT
rule filter FORWARD -i "$ons" -j ACCEPT
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=api.egress.test" -addext "subjectAltName=DNS:api.egress.test" \
  -keyout "$dir/server.key" -out "$dir/server.crt" >/dev/null 2>&1
ip netns exec "$ins" dnsmasq --keep-in-foreground --no-resolv --no-hosts --bind-interfaces --listen-address=203.0.113.2 \
  --port=53 --address=/api.egress.test/203.0.113.2 --pid-file="$dir/dnsmasq.pid" --user=root >"$dir/dnsmasq.log" 2>&1 &
pids+=($!)
ip netns exec "$ins" python3 "$net_py" serve "$dir" >"$dir/serve.log" 2>&1 &
pids+=($!)
"$egress" --tcp "10.214.$o3.1:$tport" --dns "10.214.$o3.1:$dport" --upstream 203.0.113.2:53 --control "$dir/ctl.sock" \
  --upstream-ca "$dir/server.crt" >"$dir/egress.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -e "$dir/serving" ] && [ -S "$dir/ctl.sock" ] && break; sleep 0.2; done
python3 "$net_py" control "$dir/ctl.sock" \
  '{"op":"set","addr":"10.214.'"$o3"'.2","sandbox":"bench","rules":{"allow":["api.egress.test"]}}' >/dev/null
ip netns exec "$fns" python3 "$net_py" dns api.egress.test 203.0.113.2 >/dev/null # the filter learns the address
run() { ip netns exec "$1" python3 "$net_py" bench api.egress.test 203.0.113.2 "${3:-$dir/server.crt}" "$n" "$mib"; }
open_=$(run "$ons")
filt=$(run "$fns")
# a secret bound to the host: the sandbox trusts its own CA
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 -subj "/CN=bench CA" \
  -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign" \
  -keyout "$dir/sbxca.key" -out "$dir/sbxca.crt" >/dev/null 2>&1
python3 - "$o3" "$dir" >"$dir/set.json" <<'PY'
import json, sys
o3, d = sys.argv[1:]
print(json.dumps({"op": "set", "addr": "10.214.%s.2" % o3, "sandbox": "bench", "rules": {"allow": ["api.egress.test"]},
                  "ca": {"cert": open(d + "/sbxca.crt").read(), "key": open(d + "/sbxca.key").read()},
                  "secrets": [{"header": "Authorization", "value": "Bearer bench", "hosts": ["api.egress.test"]}]}))
PY
python3 "$net_py" control "$dir/ctl.sock" "$(cat "$dir/set.json")" >/dev/null
sec=$(run "$fns" "" "$dir/sbxca.crt")
python3 - "$open_" "$filt" "$sec" "$n" "$mib" <<'PY'
import json, sys
o, f, s = (json.loads(a) for a in sys.argv[1:4])
print("egress filter vs open (the same client and server; medians; ratios to open)")
print("%-32s %9s %9s %9s %7s %7s" % ("row", "open", "filtered", "+secret", "ratio", "ratio"))
print("%-32s %9.2f %9.2f %9.2f %7.2f %7.2f" % ("TLS setup, ms (of %s)" % sys.argv[4], o["setup_ms"], f["setup_ms"],
      s["setup_ms"], f["setup_ms"] / o["setup_ms"], s["setup_ms"] / o["setup_ms"]))
print("%-32s %9.1f %9.1f %9.1f %7.2f %7.2f" % ("HTTPS download %s MiB, MiB/s" % sys.argv[5], o["mibps"], f["mibps"],
      s["mibps"], f["mibps"] / o["mibps"], s["mibps"] / o["mibps"]))
PY
