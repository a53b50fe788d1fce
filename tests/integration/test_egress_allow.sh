#!/usr/bin/env bash
# A tenant's egress_allow (docs/worker.md "Network modes", docs/api.md tenant
# policy): an open sandbox of a tenant whose policy lists a private CIDR
# reaches a listener there (in a network namespace the test makes, behind a
# veth it owns), while a sandbox of a tenant without it does not, a second
# private target outside the list stays blocked, and the worker host's own
# address stays blocked even inside a listed CIDR. The worker's allow rules
# carry the sandbox id (comment sbx-allow:ID) and are gone after a delete and
# after the container disappears behind the worker's back, and survive
# another worker's start on the same Docker host (restored from the label). A bad CIDR is 400
# invalid_argument naming the entry. Egress rules by domain (policy and
# create) are checked, kept canonical and refused placement where no worker
# filters them. Every target is on this machine.
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

open_net=sandbox-open
tag=$$
ns="sbxea$tag"
veth_h="sbxeah$tag"
veth_n="sbxean$tag"
o3=$((tag % 250 + 1))
host_end="10.79.$o3.1"  # the worker host's own address (veth host end)
target="10.79.$o3.2"    # in the namespace: listed
other="100.64.79.$o3"   # in the namespace too: not listed
allowed_cidr="10.79.$o3.0/30"

cleanup_net() {
  ip link del "$veth_h" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
}
itest_on_exit cleanup_net

ip netns add "$ns" || fail "cannot create the network namespace $ns (the test needs CAP_NET_ADMIN)"
ip link add "$veth_h" type veth peer name "$veth_n" || fail "cannot create the veth pair $veth_h"
ip link set "$veth_n" netns "$ns"
ip addr add "$host_end/30" dev "$veth_h"
ip link set "$veth_h" up
ip netns exec "$ns" ip addr add "$target/30" dev "$veth_n"
ip netns exec "$ns" ip link set "$veth_n" up
ip netns exec "$ns" ip link set lo up
ip netns exec "$ns" ip route add default via "$host_end"
ip netns exec "$ns" ip addr add "$other/32" dev lo
ip route add "$other/32" via "$target" dev "$veth_h"

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
"$py" -c "$listener" "$port" </dev/null >/dev/null 2>&1 &
itest_track_pid $!
ip netns exec "$ns" "$py" -c "$listener" "$port" </dev/null >/dev/null 2>&1 &
itest_track_pid $!
itest_wait_until 10 "the host listener on $host_end:$port" bash -c "exec 3<>/dev/tcp/$host_end/$port"
itest_wait_until 10 "the namespace listener on $target:$port" bash -c "exec 3<>/dev/tcp/$target/$port"
itest_wait_until 10 "the namespace listener on $other:$port" bash -c "exec 3<>/dev/tcp/$other/$port"
targets=("$target" "$other" "$host_end")

# shellcheck disable=SC2016 # expanded inside the container
probe_script='for a in "$@"; do if echo | nc -w 2 "$a" '"$port"' 2>/dev/null | grep -q hello-egress; then echo "$a ok"; else echo "$a no"; fi; done'

# ---- the targets are live: a plain container reaches all three
plain=$(docker run --rm --network bridge "$ITEST_IMAGE" sh -c "$probe_script" sh "${targets[@]}" 2>&1) \
  || fail "docker run on the default bridge failed: $plain"
for a in "${targets[@]}"; do
  assert_contains "$plain" "$a ok" "a plain container reaching $a:$port (the target must be live)"
done

# ---- the policy: a bad CIDR is refused naming the entry; a good one is stored canonical
itest_as_member itest-eallow
allowing=$tenant
allowing_token=$SANDBOX_TOKEN
itest_as_member itest-eplain
plain_tenant=$tenant
plain_token=$SANDBOX_TOKEN
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
assert_exit 3 sandbox tenants update "$allowing" --policy '{"egress_allow":["10.79.0.0/24","10.79.0.0/33"]}'
assert_contains "$ITEST_ERR" "egress_allow[1] (10.79.0.0/33)" "a bad CIDR named in the error"
out=$(SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" tenants update "$allowing" --json \
  --policy '{"egress_allow":["'"$target"'/30"]}' 2>&1 || true)
assert_contains "$out" "$allowed_cidr" "the stored egress_allow, canonical"

br=$(docker network inspect -f '{{index .Options "com.docker.network.bridge.name"}}' "$open_net")
[ -n "$br" ] && [ "$br" != "<no value>" ] || br="br-$(docker network inspect -f '{{.Id}}' "$open_net" | cut -c1-12)"
chain="SBX-EGRESS-$br"
rules_of() { iptables -w 5 -S "$chain" | grep -F -- "sbx-allow:$1" || true; }
no_rules_of() { [ -z "$(rules_of "$1")" ]; }

open_sandbox() { # TOKEN TENANT: prints the new open sandbox's id
  SANDBOX_TOKEN=$1 "$SANDBOX_CLI" create --tenant "$2" --image "$ITEST_IMAGE" --memory-mib 64 --network open --wait \
    --timeout 120 | awk '{ print $1; exit }'
}

# ---- the allowing tenant's open sandbox reaches the listed target only
sa=$(open_sandbox "$allowing_token" "$allowing")
assert_match "$sa" '^sbx_' "open sandbox id of $allowing"
itest_track "$sa"
export SANDBOX_TOKEN=$allowing_token
assert_exit 0 sandbox exec "$sa" -- sh -c "$probe_script" sh "${targets[@]}"
assert_contains "$ITEST_OUT" "$target ok" "an open sandbox of $allowing reaching $target (in egress_allow)"
assert_contains "$ITEST_OUT" "$other no" "an open sandbox of $allowing must not reach $other (not in egress_allow)"
assert_contains "$ITEST_OUT" "$host_end no" "an open sandbox must not reach the worker host's $host_end, listed or not"
assert_contains "$(rules_of "$sa")" "-d $allowed_cidr" "the allow rule of $sa in $chain"
assert_contains "$(rules_of "$sa")" "-j RETURN" "the allow rule of $sa returns to Docker's rules"

# ---- a tenant without egress_allow stays blocked
sp=$(open_sandbox "$plain_token" "$plain_tenant")
assert_match "$sp" '^sbx_' "open sandbox id of $plain_tenant"
itest_track "$sp"
export SANDBOX_TOKEN=$plain_token
assert_exit 0 sandbox exec "$sp" -- sh -c "$probe_script" sh "${targets[@]}"
for a in "${targets[@]}"; do
  assert_contains "$ITEST_OUT" "$a no" "an open sandbox of $plain_tenant must not reach $a"
done
assert_eq "" "$(rules_of "$sp")" "no allow rule for $sp"

# ---- egress rules by domain (docs/network.md): the tenant's policy and a
# request within it; a bad entry is named; a request may only narrow; the
# rules are kept canonical on the sandbox; no worker here runs an egress
# filter, so such a sandbox is refused (isolation_unavailable), never run
# with plain open egress
fields() { # JSON PATH...: each path's value, space-separated
  local j=$1 p out=
  shift
  for p; do out+="$(itest_json "$j" "$p" "tenant.$p") "; done
  echo "${out% }"
}
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
assert_exit 3 sandbox tenants update "$plain_tenant" --policy '{"egress":{"allow":["ok.test","10.1.2.3"]}}'
assert_contains "$ITEST_ERR" "policy.egress.allow[1] (10.1.2.3)" "an address in the domain rules, named"
assert_exit 0 sandbox tenants update "$plain_tenant" --json \
  --policy '{"egress":{"allow":["*.Pkg.Test.","api.test"],"deny":["evil.pkg.test"]}}'
assert_eq "*.pkg.test api.test evil.pkg.test deny" \
  "$(fields "$ITEST_OUT" policy.egress.allow.0 policy.egress.allow.1 policy.egress.deny.0 policy.egress.default)" "the tenant's egress rules, canonical"
export SANDBOX_TOKEN=$plain_token
assert_exit 2 sandbox create --image "$ITEST_IMAGE" --network restricted --allow api.test
assert_contains "$ITEST_ERR" "apply to --network open" "domain rules without open egress (CLI)"
assert_exit 2 sandbox create --image "$ITEST_IMAGE" --network open --allow 'bad..name'
assert_exit 2 sandbox create --image "$ITEST_IMAGE" --network open --allow api.test --egress-default maybe
itest_http POST /v1/sandboxes "$plain_token" \
  '{"image":"'"$ITEST_IMAGE"'","network":"none","egress":{"allow":["api.test"]}}'
assert_eq 400 "$HTTP_STATUS" "domain rules on network none"
assert_contains "$HTTP_BODY" "egress rules apply to network open" "why"
assert_exit 1 sandbox create --image "$ITEST_IMAGE" --network open --allow other.test
assert_contains "$ITEST_ERR" "policy_denied" "a domain the tenant does not allow"
assert_contains "$ITEST_ERR" "egress.allow[0] (other.test)" "the entry named"
assert_exit 1 sandbox create --image "$ITEST_IMAGE" --network open --allow api.test --egress-default allow
assert_contains "$ITEST_ERR" "egress.default allow" "default allow beyond a tenant that lists domains"
assert_exit 1 sandbox create --image "$ITEST_IMAGE" --network open --allow a.pkg.test --deny b.pkg.test --wait \
  --timeout 60 --json
rsb=$(itest_json "$ITEST_OUT" sandbox.id)
itest_track "$rsb"
assert_eq isolation_unavailable "$(itest_json "$ITEST_OUT" operation.error.code)" "no worker filters egress by domain"
assert_contains "$(itest_json "$ITEST_OUT" operation.error.message)" "egress filter" "the refusal says why"
assert_exit 0 sandbox get "$rsb" --json
assert_eq "a.pkg.test b.pkg.test evil.pkg.test deny" \
  "$(fields "$ITEST_OUT" sandbox.egress.allow.0 sandbox.egress.deny.0 sandbox.egress.deny.1 sandbox.egress.default)" "the request's rules with the tenant's denies"
# a create without rules gets the tenant's
itest_http POST /v1/sandboxes "$plain_token" '{"image":"'"$ITEST_IMAGE"'","network":"open","memory_mib":64}'
assert_eq 202 "$HTTP_STATUS" "an open create of a tenant with egress rules"
rsb2=$(itest_json "$HTTP_BODY" sandbox.id)
itest_track "$rsb2"
assert_eq "*.pkg.test api.test" "$(fields "$HTTP_BODY" sandbox.egress.allow.0 sandbox.egress.allow.1)" "the tenant's rules"
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
assert_exit 0 sandbox tenants update "$plain_tenant" --policy '{"egress":null}'

# ---- the rules go with the sandbox
export SANDBOX_TOKEN=$allowing_token
assert_exit 0 sandbox delete "$sa" --wait
itest_wait_until 30 "the allow rules of $sa to be gone" no_rules_of "$sa"

# ---- and with a container that disappears behind the worker's back
sb=$(open_sandbox "$allowing_token" "$allowing")
assert_match "$sb" '^sbx_' "second open sandbox id of $allowing"
itest_track "$sb"
assert_contains "$(rules_of "$sb")" "-d $allowed_cidr" "the allow rule of $sb"

# ---- a worker starting on this Docker host flushes the chains and restores
# the rules of running sandboxes from their label
wname="itest-eallow-$tag"
wlog="$ITEST_TMP/worker-$wname.log"
itest_watch_log "$wlog"
wpid=
finish() {
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
ready() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$(health_port)/readyz")" = 200 ]; }
itest_wait_until 60 "$wname's /readyz to answer 200" ready
assert_contains "$(rules_of "$sb")" "-d $allowed_cidr" "the allow rule of $sb after another worker's start"
export SANDBOX_TOKEN=$allowing_token
assert_exit 0 sandbox exec "$sb" -- sh -c "$probe_script" sh "$target"
assert_contains "$ITEST_OUT" "$target ok" "$sb reaching $target after another worker's start"
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" workers drain "$wname" >/dev/null 2>&1
itest_stop_pid "$wpid" worker 30
wpid=

docker rm -f "sbx-$sb" >/dev/null
itest_wait_until 60 "the worker's inventory to drop the rules of $sb (container gone)" no_rules_of "$sb"

echo "egress_allow opens the listed CIDR to the tenant's open sandboxes only, never the host; the rules carry the sandbox id and go with it"
