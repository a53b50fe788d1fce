#!/usr/bin/env bash
# Egress rules by domain through the real worker (docs/network.md): a
# controller of the test's own (no other test's sandbox lands on its
# worker) and a worker with worker_egress_upstream set (the dnsmasq of the
# test's own internet, egress_internet.sh, 198.51.100.0/24) makes its
# filtered Docker network, starts sandbox-egress and offers network
# "filtered"; a `sandbox create --network open --allow api.egress.test` is
# placed there (no other worker offers it) and its container, on the
# filtered bridge, resolves api.egress.test and reaches it over HTTP and
# nothing else: a name no rule allows does not resolve (the upstream never
# hears of it), a denied Host, an allowed Host on another address and a raw
# IP are refused, the host's own address is not reached; UDP (--udp 443)
# reaches the allowed name's address and nothing else; the
# rules are the container's label; the worker reports each query and
# connection into the sandbox's network log and the tenant's metrics;
# `sandbox network` changes them live
# within the tenant's policy and the change outlives the worker's restart;
# a delete takes it out of the filter; the worker's stop stops the filter.
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
# shellcheck source-path=SCRIPTDIR source=egress_internet.sh
. "$(dirname "$0")/egress_internet.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (network namespaces, iptables)"
tag=$$
work="$ITEST_TMP/egress-worker.$tag"
egress_internet "sbxewi$tag" 198.51.100 "$work"
api=$EGI_API
other=$EGI_OTHER

# ---- a controller of its own: no other test's sandbox lands on its worker
openssl rand -hex 32 >"$work/secrets.key"
chmod 600 "$work/secrets.key"
egress_controller "itest_egw_$tag" itest-egw --secrets-key-file "$work/secrets.key"
dburl=$EGC_DBURL

# ---- a worker with the egress filter, on a filtered network of its own
wname="itest-egress-$tag"
fnet="sbx-filtered-$tag"
wlog="$ITEST_TMP/worker-$wname.log"
itest_watch_log "$wlog"
wpid=
finish() {
  SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" workers drain "$wname" >/dev/null 2>&1
  [ -z "$wpid" ] || itest_stop_pid "$wpid" worker 30
  egress_filter_cleanup "$fnet"
  true
}
itest_on_exit finish
wtoken=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-egw --role worker)
start_worker() { # the worker, filtered network only (its pid in wpid)
  SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=2000 SANDBOX_WORKER_MEMORY_MIB=1024 \
    SANDBOX_WORKER_GVISOR_RUNTIME='' SANDBOX_WORKER_OPEN_NETWORK='' SANDBOX_WORKER_RESTRICTED_NETWORK='' \
    SANDBOX_WORKER_EGRESS_UPSTREAM="$api:53" SANDBOX_WORKER_FILTERED_NETWORK="$fnet" \
    SANDBOX_WORKER_EGRESS_UPSTREAM_CA="$work/server.crt" \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$wname" --docker-socket /var/run/docker.sock \
    >>"$wlog" 2>&1 </dev/null &
  wpid=$!
  itest_track_pid "$wpid"
}
start_worker
itest_wait_until 60 "worker $wname ready" itest_worker_ready "$wname"
itest_http GET /v1/workers "$ITEST_ADMIN_TOKEN"
nets=$(python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
print(" ".join(next(w for w in doc["workers"] if w["name"] == sys.argv[2])["networks"]["container"]))
' "$HTTP_BODY" "$wname")
assert_eq "none filtered" "$nets" "the networks $wname offers (open and restricted are off here)"
fpid=$(pgrep -P "$wpid" -f sandbox-egress || true)
[ -n "$fpid" ] || fail "no sandbox-egress child of worker $wname: $(pgrep -af sandbox-egress)"

# ---- a sandbox with rules runs on it and reaches its allowed name only
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --memory-mib 64 --network open --allow api.egress.test \
  --deny denied.egress.test --udp 443 --wait --timeout 120 --json
sbx=$(itest_json "$ITEST_OUT" sandbox.id)
itest_track "$sbx"
assert_eq "$wname" "$(itest_json "$ITEST_OUT" sandbox.worker)" "placed on the worker that filters"
cid=$(docker ps -q --filter "label=dev.sandbox.id=$sbx")
[ -n "$cid" ] || fail "no container of $sbx"
assert_eq "$fnet" "$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$cid")" \
  "its container is on the filtered network only"
assert_contains "$(docker inspect -f '{{index .Config.Labels "dev.sandbox.egress"}}' "$cid")" '"api.egress.test"' \
  "its rules are its label"
# (busybox's own resolver: its static wget cannot look names up itself;
# nslookup exits 1 for the AAAA half, which Docker's resolver refuses on a
# network without IPv6)
nsl() { SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" exec "$sbx" -- nslookup -type=a "$1" 2>&1 || true; }
assert_contains "$(nsl api.egress.test)" "Address: $api" "the allowed name resolved through the filter"
# HTTP with busybox's nc (its static wget crashes looking up "http")
get() { # HOST ADDR [PORT]: the answer, or nothing
  SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" exec "$sbx" -- sh -c \
    "printf 'GET / HTTP/1.1\r\nHost: $1\r\nConnection: close\r\n\r\n' | nc -w 5 $2 ${3:-80}" 2>&1 || true
}
assert_contains "$(get api.egress.test "$api")" "hello api.egress.test" "the allowed name reached through the filter"
out=$(nsl other.egress.test)
assert_not_contains "$out" "$other" "a name no rule allows does not resolve"
assert_contains "$out" "NXDOMAIN" "a name no rule allows is NXDOMAIN"
assert_contains "$(nsl denied.egress.test)" "NXDOMAIN" "a denied name is NXDOMAIN"
assert_not_contains "$(get denied.egress.test "$other")" "hello" "a denied Host"
assert_not_contains "$(get api.egress.test "$other")" "hello" "the allowed Host on another address"
assert_not_contains "$(get "$api" "$api")" "hello" "a raw IP"
gw=$(docker network inspect -f '{{range .IPAM.Config}}{{.Gateway}}{{end}}' "$fnet")
hport=$(itest_free_port)
python3 -m http.server --bind "$gw" "$hport" >/dev/null 2>&1 &
hpid=$!
itest_track_pid "$hpid"
itest_wait_until 10 "a listener on the host's $gw:$hport" bash -c "exec 3<>/dev/tcp/$gw/$hport"
assert_not_contains "$(get "$gw" "$gw" "$hport")" "200" "the host's own address"
if grep -q "other.egress.test\|denied.egress.test" "$work/dnsmasq.log"; then
  fail "a name the rules refuse reached the upstream: $(grep -m2 'other.egress\|denied.egress' "$work/dnsmasq.log")"
fi
grep -q "query\[A\] api.egress.test" "$work/dnsmasq.log" || fail "the allowed name never reached the upstream"
# UDP (--udp 443) with busybox's tftp: a read request, answered by the
# test's internet with one block, from the address it was sent to
tftp_get() { # ADDR: what a TFTP read of "quic" from ADDR:443 brings
  SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" exec "$sbx" -- sh -c \
    "rm -f /tmp/q; timeout 4 tftp -g -r quic -l /tmp/q $1 443 2>/dev/null; cat /tmp/q 2>/dev/null" 2>&1 || true
}
assert_contains "$(nsl api.egress.test)" "Address: $api" "the allowed name resolved again (for UDP)"
assert_contains "$(tftp_get "$api")" "udp quic from" "UDP to the allowed name's address, on the port --udp lists"
assert_not_contains "$(tftp_get "$other")" "udp quic" "UDP to an address no allowed name has"
assert_not_contains "$(tftp_get "$gw")" "udp quic" "UDP to the host's own address"

# ---- the network log: the worker reports what its filter decided
has_log() { # PATTERN...: every pattern is in the sandbox's log
  local out
  out=$(SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" network "$sbx" --log --limit 1000 2>&1) || return 1
  for p in "$@"; do grep -qE "$p" <<<"$out" || return 1; done
}
itest_wait_until 30 "the network log of $sbx" has_log "dns +allowed api\.egress\.test" \
  "tcp +allowed api\.egress\.test:80 $api allow api\.egress\.test \(out [1-9][0-9]*, in [1-9][0-9]* bytes\)" \
  "dns +refused other\.egress\.test" "tcp +refused denied\.egress\.test:80" "tcp +refused .*:80 $api" \
  "udp +refused -:443 $other not an address the resolver gave"
assert_exit 0 sandbox network "$sbx" --log --verdict refused --json
assert_not_contains "$ITEST_OUT" '"allowed"' "--verdict refused reads refusals only"
assert_contains "$ITEST_OUT" '"refused"' "--verdict refused"
itest_http GET /metrics ""
assert_contains "$HTTP_BODY" 'sandbox_egress_total{tenant="itest-egw",kind="tcp",verdict="allowed"}' \
  "the tenant's allowed connections are counted"
assert_contains "$HTTP_BODY" 'sandbox_egress_total{tenant="itest-egw",kind="dns",verdict="refused"}' \
  "the tenant's refused queries are counted"
assert_contains "$HTTP_BODY" 'sandbox_egress_bytes_total{tenant="itest-egw",direction="in"}' "bytes by tenant"
assert_contains "$HTTP_BODY" 'sandbox_egress_total{tenant="itest-egw",kind="udp",verdict="refused"}' \
  "the tenant's refused UDP flows are counted"
# a worker token writes only into the logs of its own sandboxes; another
# tenant does not read this one's; a client token cannot write at all
wid=$(curl -s -H "Authorization: Bearer $ITEST_ADMIN_TOKEN" "$SANDBOX_URL/v1/workers" | python3 -c '
import json, sys
print(next(w["id"] for w in json.load(sys.stdin)["workers"] if w["name"] == sys.argv[1]))' "$wname")
forged=sbx_$(printf 'a%.0s' {1..26})
rec='{"records":[{"at_ms":1,"sandbox":"'"$forged"'","kind":"tcp","name":"x.test","verdict":"allowed","why":"forged"}]}'
itest_http POST "/v1/workers/$wid/network-log" "$wtoken" "$rec"
assert_eq 200 "$HTTP_STATUS" "a report naming a sandbox not on the worker is answered"
assert_eq 0 "$(itest_json "$HTTP_BODY" recorded)" "and nothing of it is kept"
itest_http POST "/v1/workers/$wid/network-log" "$ITEST_ADMIN_TOKEN" "$rec"
assert_eq 403 "$HTTP_STATUS" "a client token cannot write a network log"
for bad in '{"records":{}}' '{}' '[]' '"x"' '{"records":[],"extra":1}' '{"records":[],"dropped":-1}'; do
  itest_http POST "/v1/workers/$wid/network-log" "$wtoken" "$bad"
  assert_eq 400 "$HTTP_STATUS" "a malformed report ($bad)"
done
itest_http POST "/v1/workers/$wid/network-log" "$wtoken" \
  '{"records":[{"at_ms":1,"sandbox":"'"$sbx"'","kind":"tcp","name":"a\u0001b","verdict":"allowed","why":"x"},7]}'
assert_eq 200 "$HTTP_STATUS" "a report with malformed records"
assert_eq 2 "$(itest_json "$HTTP_BODY" skipped)" "malformed records (a control character, not an object) are skipped"
itest_http POST "/v1/workers/$wid/network-log" "$wtoken" \
  '{"records":[{"at_ms":1,"sandbox":"'"$sbx"'","kind":"tcp","name":"a.test","verdict":"allowed","why":"x\u0000y"}]}'
assert_eq 400 "$HTTP_STATUS" "a NUL in a report refuses it (the worker then drops the batch, never resends it)"
itest_http GET /healthz ""
assert_eq 200 "$HTTP_STATUS" "the controller took all of that"
other_token=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-egw-other --role member)
itest_http GET "/v1/sandboxes/$sbx/network/log" "$other_token"
assert_eq 404 "$HTTP_STATUS" "another tenant does not read the log"

# ---- a live change (sandbox network): within the tenant's rules, applied
# by the filter at once, kept over the worker's restart
assert_exit 0 sandbox network "$sbx"
assert_contains "$ITEST_OUT" "allow   api.egress.test" "sandbox network shows its rules"
assert_contains "$ITEST_OUT" "default deny" "sandbox network shows its default"
assert_exit 0 sandbox tenants update itest-egw --policy '{"egress":{"allow":["*.egress.test"]}}'
assert_exit 1 sandbox network "$sbx" --allow example.org
assert_contains "$ITEST_ERR" "policy_denied" "a domain the tenant does not allow"
assert_exit 2 sandbox network "$sbx" --allow 198.51.100.9
t0=$(date +%s%N)
assert_exit 0 sandbox network "$sbx" --allow other.egress.test --deny api.egress.test --wait --timeout 30
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
echo "the change applied ${ms} ms after it was asked (the request, the lease, the filter, the report)"
[ "$ms" -lt 5000 ] || fail "the change took ${ms} ms"
assert_contains "$(nsl other.egress.test)" "Address: $other" "the newly allowed name resolves at once"
assert_contains "$(get other.egress.test "$other")" "hello other.egress.test" "the newly allowed name is reached"
assert_contains "$(nsl api.egress.test)" "NXDOMAIN" "the newly denied name is NXDOMAIN"
assert_not_contains "$(get api.egress.test "$api")" "hello" "the newly denied name is refused"
# the UDP flow the change no longer allows ended, recorded with its bytes
itest_wait_until 30 "the ended UDP flow in the network log" has_log \
  "udp +allowed api\.egress\.test:443 $api allow api\.egress\.test \(out [1-9][0-9]*, in [1-9][0-9]* bytes\)"
assert_exit 0 sandbox get "$sbx" --json
assert_eq '["api.egress.test"]' "$(itest_json "$ITEST_OUT" sandbox.egress.deny)" "the sandbox holds its new rules"
itest_http GET "/v1/events?sandbox=$sbx&kind=sandbox.network" "$ITEST_ADMIN_TOKEN"
assert_contains "$HTTP_BODY" '"sandbox.network"' "the change's event"
rules_file="/run/sandbox-egress-br-$(docker network inspect -f '{{.Id}}' "$fnet" | cut -c1-12).rules/$sbx.json"
assert_contains "$(cat "$rules_file")" '"other.egress.test"' "the worker keeps the new rules (a label cannot change)"
old_fpid=$fpid
itest_stop_pid "$wpid" worker 30
start_worker
itest_wait_until 60 "worker $wname ready again" itest_worker_ready "$wname"
fpid=$(pgrep -P "$wpid" -f sandbox-egress || true)
[ -n "$fpid" ] && [ "$fpid" != "$old_fpid" ] || fail "no new sandbox-egress child of the restarted worker"
assert_contains "$(get other.egress.test "$other")" "hello other.egress.test" "the new rules after the worker's restart"
assert_not_contains "$(get api.egress.test "$api")" "hello" "the new denial after the worker's restart"
# E2B's PUT /sandboxes/{id}/network is the same live change: its allowOut
# and denyOut as a create maps them, 204 once the filter applies them
itest_http PUT "/e2b/sandboxes/$sbx/network" "$SANDBOX_TOKEN" '{"allowOut":["api.egress.test"],"denyOut":["0.0.0.0/0"]}'
assert_http 204 "" "E2B's network update"
assert_contains "$(get api.egress.test "$api")" "hello api.egress.test" "the name E2B's update allows"
assert_contains "$(nsl other.egress.test)" "NXDOMAIN" "a name E2B's update leaves out (denyOut 0.0.0.0/0)"
itest_http GET "/e2b/sandboxes/$sbx" "$SANDBOX_TOKEN"
assert_eq '{"allowOut":["api.egress.test"],"denyOut":["0.0.0.0/0"],"allowPublicTraffic":true}' \
  "$(python3 -c 'import json,sys; print(json.dumps(json.loads(sys.argv[1])["network"], separators=(",", ":")))' \
  "$HTTP_BODY")" "E2B's sandbox detail shows its network as E2B's update set it"
itest_http PUT "/e2b/sandboxes/$sbx/network" "$SANDBOX_TOKEN" '{"allowOut":["198.51.100.9"]}'
[ "$HTTP_STATUS" = 400 ] || fail "E2B's update with an address: HTTP $HTTP_STATUS [$HTTP_BODY]"
assert_contains "$HTTP_BODY" "allowOut[0]" "E2B's error names the entry"
itest_http PUT "/e2b/sandboxes/$sbx/network" "$SANDBOX_TOKEN" '{"allowOut":["example.org"]}'
[ "$HTTP_STATUS" = 422 ] || [ "$HTTP_STATUS" = 403 ] || fail "E2B's update beyond the tenant: HTTP $HTTP_STATUS [$HTTP_BODY]"
assert_exit 0 sandbox get "$sbx" --json
assert_eq '["api.egress.test"]' "$(itest_json "$ITEST_OUT" sandbox.egress.allow)" "the rules E2B's update left"

# ---- secrets at egress: the filter adds the tenant's header for its host;
# the sandbox (an image with curl) never holds it
secret="Bearer s3cret-worker-$tag-$RANDOM"
printf '%s\n' "$secret" >>"$ITEST_TMP/secrets.txt"
printf '%s\n' "$secret" | SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" secrets create api-token \
  --header Authorization --host api.egress.test >"$work/secret.out" 2>&1 || fail "secrets create: $(cat "$work/secret.out")"
assert_contains "$(cat "$work/secret.out")" "api-token	Authorization	api.egress.test	itest-egw" "the secret, listed"
assert_exit 0 sandbox secrets list --json
assert_not_contains "$ITEST_OUT" "s3cret" "a secret's value is never listed"
itest_http POST /v1/secrets "$SANDBOX_TOKEN" '{"name":"api-token","header":"Authorization","hosts":["x.test"],"value":"v"}'
assert_http 409 conflict "a second secret of that name"
itest_http POST /v1/secrets "$SANDBOX_TOKEN" '{"name":"bad","header":"Host","hosts":["x.test"],"value":"v"}'
assert_http 400 invalid_argument "a header the filter sets itself"
itest_http POST /v1/secrets "$SANDBOX_TOKEN" '{"name":"bad","header":"X-Key","hosts":["x.test"],"value":"a\r\nb"}'
assert_http 400 invalid_argument "a value with a line break (header injection)"
assert_exit 3 sandbox create --image "$ITEST_IMAGE" --network open --allow api.egress.test --secret nope
assert_contains "$ITEST_ERR" "no secret nope" "a create naming a secret the tenant lacks"
img="sandbox/itest-curl:$tag"
cimg="$work/curlimg"
mkdir -p "$cimg/bin" "$cimg/etc"
cp "$(command -v curl)" "$cimg/bin/curl"
for lib in $(ldd "$(command -v curl)" | awk '/=>/ { print $3 } /ld-linux/ { print $1 }'); do
  mkdir -p "$cimg$(dirname "$lib")"
  cp -L "$lib" "$cimg$lib"
done
cp "$(readlink -f "$(command -v busybox)")" "$cimg/bin/busybox"
for a in sh env cat grep ls sleep; do ln -s busybox "$cimg/bin/$a"; done
tar -C "$cimg" -c . | docker import - "$img" >/dev/null || fail "docker import of $img"
assert_exit 0 sandbox create --image "$img" --memory-mib 64 --network open --allow api.egress.test \
  --allow other.egress.test --secret api-token --cpu-millis 200 --wait --timeout 120 --json
ssbx=$(itest_json "$ITEST_OUT" sandbox.id)
itest_track "$ssbx"
assert_eq '["api-token"]' "$(itest_json "$ITEST_OUT" sandbox.secrets)" "the sandbox names its secret, no value"
sx() { SANDBOX_TOKEN=$SANDBOX_TOKEN "$SANDBOX_CLI" exec "$ssbx" -- "$@" 2>&1 || true; }
assert_eq "auth=$secret host=api.egress.test conn=close" \
  "$(sx curl -sS --max-time 10 -H 'Authorization: Bearer forged' https://api.egress.test/headers)" \
  "curl in the sandbox reached its host with the secret's header, verifying the sandbox's CA"
out=$(sx curl -sS --max-time 10 https://other.egress.test/headers)
assert_contains "$out" "certificate" "TLS to a host with no secret is the host's own (not in the sandbox's trust)"
assert_eq "auth=None host=other.egress.test conn=None" "$(sx curl -sSk --max-time 10 https://other.egress.test/headers)" \
  "and it passes untouched"
assert_not_contains "$(sx sh -c 'env; cat /proc/*/environ; grep -rl s3cret /etc /tmp /root /bin 2>/dev/null')" \
  "s3cret" "no trace of the secret in the sandbox's environment, /proc or files"
assert_not_contains "$(docker inspect "$(docker ps -q --filter "label=dev.sandbox.id=$ssbx")")" "s3cret" \
  "nor in its container's configuration"
assert_contains "$(sx cat /etc/ssl/certs/sandbox-egress-ca.pem)" "BEGIN CERTIFICATE" "its CA, in its trust store"
assert_not_contains "$(sx cat /etc/ssl/certs/ca-certificates.crt)" "PRIVATE KEY" "and never the CA's key"
tls_file="$(dirname "$rules_file")/$ssbx.tls.json"
[ "$(stat -c %a "$tls_file")" = 600 ] || fail "the worker's secrets file $tls_file is not mode 600"
assert_exit 0 sandbox delete "$ssbx" --wait --timeout 60
[ ! -e "$tls_file" ] || fail "the deleted sandbox's secrets file $tls_file is left"
assert_exit 0 sandbox secrets delete api-token
assert_eq "api-token deleted" "$ITEST_OUT" "a secret deleted"
docker rmi "$img" >/dev/null 2>&1 || true

# ---- a delete takes it out of the filter; the worker's stop stops the filter
assert_exit 0 sandbox delete "$sbx" --wait --timeout 60
sock=$(tr '\0' '\n' <"/proc/$fpid/cmdline" | sed -n '/^--control$/{n;p}')
out=$(python3 "$(dirname "$0")/egress_net.py" control "$sock" '{"op":"stats"}')
assert_eq "[]" "$(itest_json "$out" sandboxes)" "the filter forgot the deleted sandbox"
[ ! -e "$rules_file" ] || fail "the deleted sandbox's rules file $rules_file is left"
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" workers drain "$wname" >/dev/null 2>&1
itest_stop_pid "$wpid" worker 30
wpid=
filter_gone() { ! kill -0 "$fpid" 2>/dev/null && [ ! -e "$sock" ]; }
itest_wait_until 5 "sandbox-egress (pid $fpid) and its socket gone with its worker" filter_gone
echo "a filtered sandbox reaches its allowed name through its worker's egress filter, and nothing else"
