#!/usr/bin/env bash
# TLS between machines (issue 15, "what must hold" 6): a controller serving
# its API and its route listener over TLS with certificates of a CA this
# test makes, a worker and the CLI verifying it against that CA, and the
# worker's forwarder serving TLS that the controller verifies. Shows: a
# create -> exec works through https; a client without the CA, or with
# another CA, fails verification with a clear error and exit 3 (a worker
# with the wrong CA never registers); plain HTTP to a TLS port gets no
# answer; libevent's own errors (a body over 8 MiB) still come back as JSON
# over TLS; a route and a logs stream work over TLS on both hops; the
# controller refuses (502, a log line) a forwarder whose certificate its CA
# did not sign; a half-configured or mismatched certificate and key stop
# the controller at start with a line naming the file. Loopback only.
# itest-standalone
# itest-cost: 25
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

pki="$ITEST_TMP/tls-$$"
mkdir -p "$pki"
# ---- a CA, a certificate for 127.0.0.1/localhost signed by it, another CA
mkca() { # NAME: NAME.key, NAME.pem (a self-signed CA)
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=itest $1" -keyout "$pki/$1.key" \
    -out "$pki/$1.pem" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    >/dev/null 2>&1
}
mkca ca
mkca other
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$pki/server.key" -out "$pki/server.csr" \
  >/dev/null 2>&1
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$pki/server.ext"
openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca.key" -CAcreateserial -days 2 \
  -extfile "$pki/server.ext" -out "$pki/server.pem" >/dev/null 2>&1
# the same name and address, signed by the other CA: a forwarder the
# controller must refuse
openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$pki/rogue.key" -out "$pki/rogue.csr" \
  >/dev/null 2>&1
openssl x509 -req -in "$pki/rogue.csr" -CA "$pki/other.pem" -CAkey "$pki/other.key" -CAcreateserial -days 2 \
  -extfile "$pki/server.ext" -out "$pki/rogue.pem" >/dev/null 2>&1
[ -s "$pki/server.pem" ] && [ -s "$pki/rogue.pem" ] || fail "openssl could not make the test certificates"
chmod 600 "$pki"/*.key

db="itest_tls_$$"
"$ITEST_PGBIN/psql" -X -q "$DATABASE_URL" -c "CREATE DATABASE $db"
dburl="${DATABASE_URL%/*}/$db"
assert_exit 0 "$SANDBOXD" migrate --database-url "$dburl"

clog="$ITEST_TMP/tls-controller-$$.log"
wlog="$ITEST_TMP/tls-worker-$$.log"
badlog="$ITEST_TMP/tls-badworker-$$.log"
itest_watch_log "$clog"
itest_watch_log "$wlog"
port=$(itest_free_port)
rport=$(itest_free_port)

# ---- bad settings stop the controller at start, naming what is wrong
assert_exit 1 timeout 30 "$SANDBOXD" controller --database-url "$dburl" --listen "127.0.0.1:$port" \
  --route-listen "127.0.0.1:$rport" --api-tls-cert "$pki/server.pem"
assert_contains "$ITEST_ERR" "api_tls_cert and api_tls_key go together" "a certificate without its key"
assert_exit 1 timeout 30 "$SANDBOXD" controller --database-url "$dburl" --listen "127.0.0.1:$port" \
  --route-listen "127.0.0.1:$rport" --api-tls-cert "$pki/server.pem" --api-tls-key "$pki/other.key"
assert_contains "$ITEST_ERR" "does not match the certificate" "a key of another certificate"
assert_exit 1 timeout 30 "$SANDBOXD" controller --database-url "$dburl" --listen "127.0.0.1:$port" \
  --route-listen "127.0.0.1:$rport" --route-tls-cert "$pki/missing.pem" --route-tls-key "$pki/server.key"
assert_contains "$ITEST_ERR" "route_tls_cert $pki/missing.pem: cannot load the certificate" "a missing file"

# ---- the controller with TLS on both listeners
"$SANDBOXD" controller --database-url "$dburl" --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" \
  --api-tls-cert "$pki/server.pem" --api-tls-key "$pki/server.key" \
  --route-tls-cert "$pki/server.pem" --route-tls-key "$pki/server.key" --controller-worker-ca "$pki/ca.pem" \
  >>"$clog" 2>&1 </dev/null &
cpid=$!
itest_track_pid "$cpid"
export SANDBOX_URL="https://127.0.0.1:$port"
# the curl tool of lib.sh's helpers verifies against the test's CA
export CURL_CA_BUNDLE="$pki/ca.pem"
itest_wait_healthz "$SANDBOX_URL" "$cpid" controller "$clog" || fail "the TLS controller did not come up"

# plain HTTP to the TLS ports: no HTTP answer (the handshake fails)
rc=0
out=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$port/healthz") || rc=$?
[ "$rc" -ne 0 ] || fail "plain HTTP to the TLS API port answered (status $out)"
assert_eq 000 "$out" "no HTTP status from the TLS API port over plain HTTP"
rc=0
out=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$rport/r/x/") || rc=$?
[ "$rc" -ne 0 ] || fail "plain HTTP to the TLS route port answered (status $out)"
# curl without the CA refuses the controller
rc=0
env -u CURL_CA_BUNDLE curl -s -o /dev/null --max-time 5 "$SANDBOX_URL/healthz" || rc=$?
assert_eq 60 "$rc" "curl without the CA: certificate verification failed (exit 60)"

ITEST_ADMIN_TOKEN=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-tls --role admin)
export ITEST_ADMIN_TOKEN SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
wtoken=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-tls --role worker)
badtoken=$("$SANDBOXD" token create --database-url "$dburl" --tenant itest-tls --role worker)

# ---- the CLI: without the CA, with another CA, with the CA
unset SANDBOX_CA_FILE
assert_exit 3 "$SANDBOX_CLI" workers list
assert_contains "$ITEST_ERR" "certificate" "the CLI without the CA says why"
assert_exit 3 "$SANDBOX_CLI" --ca-file "$pki/other.pem" workers list
assert_contains "$ITEST_ERR" "certificate" "the CLI with another CA says why"
assert_exit 3 env SANDBOX_CA_FILE="$pki/other.pem" "$SANDBOX_CLI" workers list
assert_exit 3 "$SANDBOX_CLI" --ca-file "$pki/nonexistent.pem" workers list
assert_exit 0 "$SANDBOX_CLI" --ca-file "$pki/ca.pem" workers list
export SANDBOX_CA_FILE="$pki/ca.pem"
assert_exit 0 "$SANDBOX_CLI" workers list

# a body over 8 MiB over TLS: libevent's 413, rewritten into the JSON shape
head -c $((9 * 1024 * 1024)) /dev/zero >"$pki/big.json"
body=$(curl -s --max-time 20 -X POST -H "Authorization: Bearer $ITEST_ADMIN_TOKEN" \
  -H 'Content-Type: application/json' --data-binary @"$pki/big.json" -w '\n%{http_code}' \
  "$SANDBOX_URL/v1/sandboxes" || true)
assert_eq 413 "${body##*$'\n'}" "a body over 8 MiB over TLS"
assert_eq payload_too_large "$(itest_json "${body%$'\n'*}" error.code)" "the 413 over TLS is JSON"

# ---- a worker with another CA never registers; one with the CA does
SANDBOX_WORKER_TOKEN="$badtoken" "$SANDBOXD" worker --controller-url "$SANDBOX_URL" \
  --worker-controller-ca "$pki/other.pem" --worker-name itest-tls-bad >>"$badlog" 2>&1 </dev/null &
bpid=$!
itest_track_pid "$bpid"
itest_wait_until 30 "the worker with another CA to log a certificate failure" grep -q certificate "$badlog"
itest_worker_ready itest-tls-bad && fail "a worker that cannot verify the controller registered"
itest_stop_pid "$bpid" worker 30 || true

wname=itest-tls-worker
registrations() { cat "$wlog" 2>/dev/null | grep -c 'registered with' || true; }
registered_again() { [ "$(registrations)" -gt "$1" ]; }
start_worker() { # CERT KEY: the forwarder's TLS certificate
  local n0
  n0=$(registrations)
  SANDBOX_WORKER_TOKEN="$wtoken" SANDBOX_WORKER_CPU_MILLIS=64000 SANDBOX_WORKER_MEMORY_MIB=262144 \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-controller-ca "$pki/ca.pem" \
    --worker-route-tls-cert "$1" --worker-route-tls-key "$2" --worker-name "$wname" >>"$wlog" 2>&1 </dev/null &
  wpid=$!
  itest_track_pid "$wpid"
  itest_wait_until 60 "worker $wname registered over TLS" registered_again "$n0"
  itest_wait_until 60 "worker $wname ready over TLS" itest_worker_ready "$wname"
}
start_worker "$pki/server.pem" "$pki/server.key"
grep -q 'route listener on .*TLS' "$wlog" || fail "the worker's forwarder does not say it serves TLS"

# ---- create -> exec through https
assert_exit 0 timeout 120 "$SANDBOX_CLI" create --tenant itest-tls --image "$ITEST_IMAGE" --wait --timeout 100
read -r sbx _ <<<"$ITEST_OUT"
assert_match "$sbx" '^sbx_' "sandbox id"
itest_track "$sbx"
assert_exit 0 timeout 60 "$SANDBOX_CLI" exec "$sbx" -- echo hello over tls
assert_eq "hello over tls" "$ITEST_OUT" "exec output through https"

# ---- a route over TLS
assert_exit 0 timeout 60 "$SANDBOX_CLI" exec "$sbx" -- sh -c \
  'mkdir -p /tmp/www && echo hello-from-tls-route >/tmp/www/index.html && httpd -p 8080 -h /tmp/www'
itest_http POST "/v1/sandboxes/$sbx/routes" "$ITEST_ADMIN_TOKEN" '{"port":8080,"auth":"public"}'
assert_http 202 "" "share port 8080"
url=$(itest_json "$HTTP_BODY" route.url)
assert_match "$url" "^https://127\.0\.0\.1:$rport/r/" "the route's address is https"
route_ok() { [ "$(curl -s --max-time 5 --cacert "$pki/ca.pem" "$url")" = hello-from-tls-route ]; }
itest_wait_until 30 "the route to answer over TLS" route_ok
rc=0
env -u CURL_CA_BUNDLE curl -s -o /dev/null --max-time 5 "$url" || rc=$?
assert_eq 60 "$rc" "the route without the CA: certificate verification failed"
# the logs stream takes the controller -> forwarder hop too
assert_exit 0 timeout 60 "$SANDBOX_CLI" exec "$sbx" -- sh -c 'echo logs-over-tls >/proc/1/fd/1'
assert_exit 0 timeout 30 "$SANDBOX_CLI" logs "$sbx"
assert_contains "$ITEST_OUT" logs-over-tls "sandbox logs through the TLS forwarder"
# a shell (an upgraded connection through both TLS hops), and stdin over the
# inline limit streamed on the same path without a terminal
out=$(printf 'echo shell-over-$((6*7))\n' | timeout 60 "$SANDBOX_CLI" shell "$sbx") ||
  fail "sandbox shell over https exited $?: $out"
assert_contains "$out" "shell-over-42" "sandbox shell through https and the TLS forwarder"
head -c 1500000 /dev/urandom >"$ITEST_TMP/tls-stdin.bin"
want=$(sha256sum <"$ITEST_TMP/tls-stdin.bin" | cut -d' ' -f1)
got=$(timeout 60 "$SANDBOX_CLI" exec -i "$sbx" -- sh -c 'sha256sum | cut -d" " -f1' <"$ITEST_TMP/tls-stdin.bin") ||
  fail "a streamed exec -i over https exited $?"
assert_eq "$want" "$got" "1.5 MB of stdin streamed through https and the TLS forwarder"

# ---- a forwarder whose certificate the controller's CA did not sign
rc=0
itest_stop_pid "$wpid" worker 30 || rc=$?
assert_eq 0 "$rc" "worker exit status after SIGTERM"
start_worker "$pki/rogue.pem" "$pki/rogue.key"
status=$(curl -s -o "$pki/rogue.out" -w '%{http_code}' --max-time 10 --cacert "$pki/ca.pem" "$url" || true)
assert_eq 502 "$status" "a route to a forwarder the controller cannot verify"
assert_contains "$(cat "$pki/rogue.out")" bad_gateway "the 502 is the JSON error shape"
assert_not_contains "$(cat "$pki/rogue.out")" hello-from-tls-route "nothing of the app came through"
itest_wait_until 10 "the controller to log the refused forwarder" \
  grep -q "TLS to the worker's forwarder failed: certificate verify failed" "$clog"
# the restarted worker gets the next operations at once: the stopped
# process's parked long-poll, a TLS connection, is seen to close (a TLS
# record in the socket must not hide the close)
for i in 1 2 3; do
  t0=$(date +%s%N)
  assert_exit 0 timeout 45 "$SANDBOX_CLI" exec "$sbx" -- echo "after restart $i"
  ms=$((($(date +%s%N) - t0) / 1000000))
  assert_eq "after restart $i" "$ITEST_OUT" "exec $i after the worker restart"
  [ "$ms" -lt 10000 ] || fail "exec $i after the worker restart took $ms ms (a lease expiry, not a prompt answer)"
done

assert_exit 0 timeout 60 "$SANDBOX_CLI" delete "$sbx" --wait --timeout 50
itest_log "TLS: API, route listener, worker and CLI verified against the test's CA"
