#!/usr/bin/env bash
# Public routes, data path (issue 6): busybox httpd in a sandbox, shared and
# fetched through the controller's route listener by path and by host
# header; token routes (401/200) and another tenant's tokens; what the app
# sees (prefix stripped, X-Forwarded-* set, believed only from trusted
# proxies, the route token stripped); a WebSocket-style Upgrade tunnel;
# 50 MB up and down with the controller's peak RSS measured; slow clients
# that cannot hold up other requests; and the route gone (404) after
# unshare, after `sandbox delete --wait` at once, after its expiry and
# after the sandbox's TTL. Worker loss is in test_routes_worker_loss.sh.
# itest-timeout: 300
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
here=$(cd "$(dirname "$0")" && pwd)
tenant=$(itest_tenant itest-rd)
other=$(itest_tenant itest-rd-other)
itest_as_admin "$tenant" "$other"
member=$(itest_token "$tenant" member)
stranger=$(itest_token "$other" member)
rhost=127.0.0.1
rport=${SANDBOX_ROUTE_URL##*:}

# A second controller on the same database, with a route domain, trusted
# proxies, one HTTP thread (so a blocked event loop would show) and ASan's
# quarantine kept small (freed buffers must not count as growth).
c2port=$(itest_free_port)
c2rport=$(itest_free_port)
c2log="$ITEST_TMP/controller-routes.log"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=1" \
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$c2port" \
  --route-listen "127.0.0.1:$c2rport" --route-domain routes.test --trusted-proxies 127.0.0.1 --http-threads 1 \
  >>"$c2log" 2>&1 </dev/null &
c2pid=$!
itest_track_pid "$c2pid"
itest_watch_log "$c2log"
itest_wait_healthz "http://127.0.0.1:$c2port" "$c2pid" "second controller" "$c2log" || fail "second controller did not start"

# The sandbox: a static file, CGI scripts that show what the app receives
# and count an upload, 50 MB to download, httpd on 8080, an echo server
# that answers an Upgrade on 9000 and one that answers with the request
# head it received on 9001.
setup=$(cat <<'EOF'
set -e
mkdir -p /tmp/www/cgi-bin
echo hello-from-sandbox >/tmp/www/index.html
cat >/tmp/www/cgi-bin/env <<'EOT'
#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
echo "uri=$REQUEST_URI"
echo "xff=$HTTP_X_FORWARDED_FOR"
echo "xfh=$HTTP_X_FORWARDED_HOST"
echo "xfp=$HTTP_X_FORWARDED_PROTO"
echo "prefix=$HTTP_X_FORWARDED_PREFIX"
echo "keep=$HTTP_X_KEEP"
EOT
cat >/tmp/www/cgi-bin/upload <<'EOT'
#!/bin/sh
printf 'Content-Type: text/plain\r\n\r\n'
head -c "$CONTENT_LENGTH" | md5sum | cut -d' ' -f1
EOT
cat >/tmp/echo.sh <<'EOT'
#!/bin/sh
while read -r line; do
  line=$(printf %s "$line" | tr -d '\r')
  [ -z "$line" ] && break
done
printf 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n'
exec cat
EOT
cat >/tmp/dump.sh <<'EOT'
#!/bin/sh
head=
while read -r line; do
  line=$(printf %s "$line" | tr -d '\r')
  [ -z "$line" ] && break
  head="$head$line
"
done
printf 'HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n%s' "$head"
EOT
chmod +x /tmp/www/cgi-bin/env /tmp/www/cgi-bin/upload /tmp/echo.sh /tmp/dump.sh
dd if=/dev/urandom of=/tmp/www/big bs=1048576 count=50 2>/dev/null
md5sum /tmp/www/big | cut -d' ' -f1 >/tmp/big.md5
httpd -p 8080 -h /tmp/www
nc -ll -p 9000 -e /tmp/echo.sh >/dev/null 2>&1 </dev/null &
nc -ll -p 9001 -e /tmp/dump.sh >/dev/null 2>&1 </dev/null &
EOF
)
start_app() { # SANDBOX
  assert_exit 0 sandbox --token "$member" exec "$1" -- sh -c "$setup"
}

assert_exit 0 sandbox --token "$member" create --image "$ITEST_IMAGE" --cpu-millis 500 --memory-mib 256 --wait \
  --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
start_app "$sbx"
assert_exit 0 sandbox --token "$member" exec "$sbx" -- cat /tmp/big.md5
big_md5=$ITEST_OUT

share() { # SANDBOX PORT AUTH [TOKEN] → ROUTE_ID ROUTE_NAME ROUTE_URL ROUTE_SECRET
  itest_http POST "/v1/sandboxes/$1/routes" "${4:-$member}" "{\"port\":$2,\"auth\":\"$3\"}"
  assert_http 202 "" "share port $2 ($3)"
  ROUTE_ID=$(itest_json "$HTTP_BODY" route.id)
  ROUTE_NAME=$(itest_json "$HTTP_BODY" route.name)
  ROUTE_URL=$(itest_json "$HTTP_BODY" route.url)
  ROUTE_SECRET=$(itest_json "$HTTP_BODY" access_token 2>/dev/null || true)
}
get() { # URL [curl args...] → STATUS HEADERS BODY
  local out hdr
  out=$(mktemp "$ITEST_TMP/get.XXXXXX")
  hdr=$(mktemp "$ITEST_TMP/hdr.XXXXXX")
  STATUS=$(curl -s -o "$out" -D "$hdr" -w '%{http_code}' --max-time 30 "$@") || STATUS=${STATUS:-000}
  BODY=$(cat "$out")
  HEADERS=$(tr -d '\r' <"$hdr")
  rm -f "$out" "$hdr"
}

# ---- a public route, by path: the file, the prefix stripped, what the app sees
share "$sbx" 8080 public
assert_eq "$SANDBOX_ROUTE_URL/r/$ROUTE_NAME/" "$ROUTE_URL" "path-based URL on the route listener"
get "$ROUTE_URL"
assert_eq 200 "$STATUS" "GET the route's /"
assert_eq hello-from-sandbox "$BODY" "the file httpd serves in the sandbox"
get "${ROUTE_URL}index.html"
assert_eq hello-from-sandbox "$BODY" "the file by its name"
get "${ROUTE_URL%/}?a=b"
assert_eq 308 "$STATUS" "the route without its slash redirects"
assert_contains "$HEADERS" "Location: /r/$ROUTE_NAME/?a=b" "to the address with the slash, query kept"
get "${ROUTE_URL}cgi-bin/env?q=1" -H 'X-Forwarded-For: 6.6.6.6' -H 'X-Forwarded-Host: evil.example' \
  -H 'X-Keep: kept' -H 'X-Forwarded-Prefix: /evil'
assert_eq 200 "$STATUS" "CGI through the route"
assert_contains "$BODY" "uri=/cgi-bin/env?q=1" "the app sees its own path, the /r/{route} prefix stripped"
assert_contains "$BODY" "xff=127.0.0.1"$'\n' "X-Forwarded-For from an untrusted peer is replaced, not extended"
assert_contains "$BODY" "xfh=127.0.0.1:$rport"$'\n' "X-Forwarded-Host is the Host the controller saw"
assert_contains "$BODY" "xfp=http"$'\n' "X-Forwarded-Proto"
assert_contains "$BODY" "prefix=/r/$ROUTE_NAME"$'\n' "X-Forwarded-Prefix set by the controller"
assert_contains "$BODY" "keep=kept" "other headers pass"
public_name=$ROUTE_NAME
public_id=$ROUTE_ID

# ---- not routes, malformed requests
get "$SANDBOX_ROUTE_URL/"
assert_eq 404 "$STATUS" "the route listener's / is no route"
assert_contains "$BODY" '"code":"not_found"' "JSON error"
get "$SANDBOX_ROUTE_URL/r/aaaaaaaaaaaaaaaaaaaaaaaaaa/"
assert_eq 404 "$STATUS" "a well-formed name that is no route"
get "$SANDBOX_ROUTE_URL/v1/sandboxes" -H "Authorization: Bearer $ITEST_ADMIN_TOKEN"
assert_eq 404 "$STATUS" "the API is not served on the route listener"
raw() { python3 "$here/route_client.py" raw "$rhost" "$rport"; }
reply=$(printf 'GET /r/%s/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n' "$public_name" | raw)
assert_eq "HTTP/1.1 400 Bad Request" "$reply" "two Host headers"
reply=$(printf 'POST /r/%s/ HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n' \
  "$public_name" | raw)
assert_eq "HTTP/1.1 400 Bad Request" "$reply" "Content-Length with Transfer-Encoding"
reply=$(printf 'GET /r/%s/ HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n' "$public_name" | raw)
assert_eq "HTTP/1.1 400 Bad Request" "$reply" "two Content-Lengths"
reply=$( { printf 'GET /r/%s/ HTTP/1.1\r\nHost: a\r\n' "$public_name"; head -c 20000 /dev/zero | tr '\0' a; } | raw)
assert_eq "HTTP/1.1 431 Request Header Fields Too Large" "$reply" "a head over 16 KiB"
reply=$(printf 'GET http://evil.example/ HTTP/1.1\r\nHost: a\r\n\r\n' | raw)
assert_eq "HTTP/1.1 400 Bad Request" "$reply" "an absolute-form target"

# a head trickling in a byte a second is cut off after 15 s (in the
# background; checked at the end)
python3 "$here/route_client.py" trickle "$rhost" "$rport" "/r/$public_name/" >"$ITEST_TMP/trickle.out" &
trickle_pid=$!

# ---- by host header, on the controller with route_domain and trusted proxies
SANDBOX_URL_SAVE=$SANDBOX_URL
SANDBOX_URL="http://127.0.0.1:$c2port" itest_http GET "/v1/sandboxes/$sbx/routes" "$member"
assert_http 200 "" "list routes through the second controller"
SANDBOX_URL="http://127.0.0.1:$c2port" itest_http POST "/v1/sandboxes/$sbx/routes" "$member" \
  '{"port":8080,"auth":"public"}'
assert_http 202 "" "share through the second controller"
host_name=$(itest_json "$HTTP_BODY" route.name)
assert_eq "https://$host_name.routes.test/" "$(itest_json "$HTTP_BODY" route.url)" "host-based URL with route_domain"
SANDBOX_URL=$SANDBOX_URL_SAVE
get "http://127.0.0.1:$c2rport/" -H "Host: $host_name.routes.test"
assert_eq 200 "$STATUS" "GET by host header"
assert_eq hello-from-sandbox "$BODY" "the same file by host"
get "http://127.0.0.1:$c2rport/cgi-bin/env" -H "Host: $host_name.ROUTES.test:443"
assert_contains "$BODY" "uri=/cgi-bin/env" "by host, the path is the app's as sent"
assert_contains "$BODY" "prefix="$'\n' "no prefix by host"
get "http://127.0.0.1:$c2rport/cgi-bin/env" -H "Host: proxy.internal" -H "X-Forwarded-Host: $host_name.routes.test" \
  -H 'X-Forwarded-For: 6.6.6.6' -H 'X-Forwarded-Proto: https'
assert_eq 200 "$STATUS" "routed by X-Forwarded-Host from a trusted proxy"
assert_contains "$BODY" "xff=6.6.6.6, 127.0.0.1"$'\n' "a trusted proxy's X-Forwarded-For is extended"
assert_contains "$BODY" "xfp=https"$'\n' "a trusted proxy's X-Forwarded-Proto is kept"
get "$SANDBOX_ROUTE_URL/cgi-bin/env" -H "X-Forwarded-Host: $host_name.routes.test"
assert_eq 404 "$STATUS" "X-Forwarded-Host from an untrusted peer routes nothing"

# ---- token routes, and the other tenant
share "$sbx" 8080 token
tok_url=$ROUTE_URL
tok_secret=$ROUTE_SECRET
assert_match "$tok_secret" '^sbr_' "route access token"
get "$tok_url"
assert_eq 401 "$STATUS" "a token route without its token"
assert_contains "$BODY" '"code":"unauthorized"' "JSON error"
assert_contains "$HEADERS" 'WWW-Authenticate: Bearer realm="sandbox-route"' "401 names the scheme"
get "$tok_url" -H "Authorization: Bearer sbr_wrongwrongwrongwrongwrongwrongwrongwrongwro"
assert_eq 401 "$STATUS" "a wrong token"
get "$tok_url" -H "Authorization: Bearer $tok_secret"
assert_eq 200 "$STATUS" "the token as a bearer token"
assert_eq hello-from-sandbox "$BODY" "body with the token"
get "$tok_url" -H "X-Sandbox-Route-Token: $tok_secret"
assert_eq 200 "$STATUS" "the token in X-Sandbox-Route-Token"
get "$tok_url" -H "Authorization: Bearer $member"
assert_eq 401 "$STATUS" "the owner's API token is not the route's token"
get "$tok_url" -H "Authorization: Bearer $stranger"
assert_eq 401 "$STATUS" "tenant B's API token does not open tenant A's route"
assert_exit 0 sandbox --token "$stranger" create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --wait \
  --timeout 120
read -r sbx_b _ <<<"$ITEST_OUT"
itest_track "$sbx_b"
share "$sbx_b" 8080 token "$stranger"
get "$tok_url" -H "Authorization: Bearer $ROUTE_SECRET"
assert_eq 401 "$STATUS" "tenant B's route token does not open tenant A's route"
itest_http GET "/v1/sandboxes/$sbx/routes" "$stranger"
assert_http 404 not_found "tenant B cannot list tenant A's routes"

# ---- the request head the app receives (a token route to the head dumper)
share "$sbx" 9001 token
dump_url=$ROUTE_URL
get "${dump_url}some/path?x=1" -H "X-Sandbox-Route-Token: $ROUTE_SECRET" -H "Authorization: Basic YTpi" \
  -H 'Connection: keep-alive, X-Hop' -H 'X-Hop: secret-hop' -H 'Keep-Alive: timeout=5' -H 'X-Keep: kept'
assert_eq 200 "$STATUS" "the head dumper through a token route"
assert_contains "$BODY" "GET /some/path?x=1 HTTP/1.1" "request line with the prefix stripped"
assert_contains "$BODY" "Authorization: Basic YTpi" "the app's own Authorization passes"
assert_not_contains "$BODY" "$ROUTE_SECRET" "the route token never reaches the app"
assert_not_contains "$BODY" "X-Sandbox-Route-Token" "nor its header"
assert_contains "$BODY" "Connection: close" "one request per upstream connection"
assert_not_contains "$BODY" "keep-alive" "hop-by-hop Connection values are dropped"
assert_not_contains "$BODY" "secret-hop" "headers named by Connection are dropped"
assert_not_contains "$BODY" "Keep-Alive" "Keep-Alive is dropped"
assert_contains "$BODY" "X-Keep: kept" "end-to-end headers pass"
assert_contains "$BODY" "X-Forwarded-Prefix: /r/$ROUTE_NAME" "the prefix it was served under"
get "$dump_url" -H "Authorization: Bearer $ROUTE_SECRET"
assert_eq 200 "$STATUS" "the token as a bearer token"
assert_not_contains "$BODY" "$ROUTE_SECRET" "a bearer route token never reaches the app"
assert_not_contains "$BODY" "Authorization" "its Authorization header is dropped"

# ---- an Upgrade becomes a tunnel both ways
share "$sbx" 9000 public
out=$(python3 "$here/route_client.py" ws "$rhost" "$rport" "/r/$ROUTE_NAME/")
assert_eq "tunnel ok" "$out" "Upgrade tunnel through the route"

# ---- 50 MB down and up, the controller's peak RSS measured (second controller)
hwm() { awk '/^VmHWM/ {print $2}' "/proc/$c2pid/status"; }
get "http://127.0.0.1:$c2rport/" -H "Host: $host_name.routes.test"
before=$(hwm)
t0=$(date +%s%N)
dl_md5=$(curl -s --max-time 120 -H "Host: $host_name.routes.test" "http://127.0.0.1:$c2rport/big" | md5sum | cut -d' ' -f1)
t1=$(date +%s%N)
assert_eq "$big_md5" "$dl_md5" "50 MB download intact through the route"
head -c 52428800 /dev/urandom >"$ITEST_TMP/up.bin"
up_md5=$(md5sum "$ITEST_TMP/up.bin" | cut -d' ' -f1)
got=$(curl -s --max-time 120 -H "Host: $host_name.routes.test" -H 'Expect:' --data-binary @"$ITEST_TMP/up.bin" \
  "http://127.0.0.1:$c2rport/cgi-bin/upload")
t2=$(date +%s%N)
assert_eq "$up_md5" "$got" "50 MB upload intact through the route"
after=$(hwm)
growth=$(( (after - before) / 1024 ))
itest_log "50 MB down in $(( (t1 - t0) / 1000000 )) ms, up in $(( (t2 - t1) / 1000000 )) ms; controller peak RSS ${before} kB -> ${after} kB (+${growth} MiB)"
[ "$growth" -le 8 ] || fail "the controller's peak RSS grew by $growth MiB streaming 50 MB each way (limit 8)"
rm -f "$ITEST_TMP/up.bin"

# ---- slow clients do not hold up others (one HTTP thread)
worst=$(python3 "$here/route_client.py" slow 127.0.0.1 "$c2rport" "/r/$public_name/" "/r/$public_name/big")
itest_log "slowest of 10 requests next to a stalled head and an unread 50 MB download: $worst ms"
[ "$worst" -lt 2000 ] || fail "a request took $worst ms next to slow clients"

# ---- unshare: gone at once, and a download in progress is cut off
curl -s --max-time 120 --limit-rate 200k -o "$ITEST_TMP/slow.bin" "$SANDBOX_ROUTE_URL/r/$public_name/big" &
slow_pid=$!
sleep 2
itest_http DELETE "/v1/sandboxes/$sbx/routes/$public_id" "$member"
assert_http 202 "" "unshare"
t0=$(date +%s)
get "$SANDBOX_ROUTE_URL/r/$public_name/"
assert_eq 404 "$STATUS" "an unshared route answers 404 at once"
# the proxy closes the connection within its 2 s sweep (the client may
# still read what the kernel buffers hold: judge by the controller's log)
cut_off() { grep -q "route $public_id GET /big from .*: route removed" "$ITEST_CONTROLLER_LOG"; }
itest_wait_until 5 "the proxy to close the download of the unshared route" cut_off
secs=$(( $(date +%s) - t0 ))
kill "$slow_pid" 2>/dev/null || true
wait "$slow_pid" 2>/dev/null || true
itest_log "the proxy closed a download of the unshared route within ${secs} s of the unshare"
rm -f "$ITEST_TMP/slow.bin"

# ---- expiry: gone within a reconcile tick of its ttl
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":8080,"auth":"public","ttl_seconds":10}'
assert_http 202 "" "share for 10 s"
exp_url=$(itest_json "$HTTP_BODY" route.url)
get "$exp_url"
assert_eq 200 "$STATUS" "the route works before it expires"
sleep 11
get "$exp_url"
assert_eq 404 "$STATUS" "an expired route answers 404"

# ---- delete: gone in the same transaction
get "http://127.0.0.1:$c2rport/" -H "Host: $host_name.routes.test"
assert_eq 200 "$STATUS" "the host route before delete"
assert_exit 0 sandbox --token "$member" delete "$sbx" --wait --timeout 60
get "$tok_url" -H "Authorization: Bearer $tok_secret"
assert_eq 404 "$STATUS" "after sandbox delete --wait the route answers 404"
get "http://127.0.0.1:$c2rport/" -H "Host: $host_name.routes.test"
assert_eq 404 "$STATUS" "and so does its host route"
active=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT count(*) FROM routes WHERE sandbox_id = '$sbx' AND state = 'active'")
assert_eq 0 "$active" "no active route of the deleted sandbox"

# ---- the sandbox's TTL: its routes go with it
assert_exit 0 sandbox --token "$member" create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 --ttl 30 \
  --wait --timeout 120
read -r sbx_ttl _ <<<"$ITEST_OUT"
itest_track "$sbx_ttl"
assert_exit 0 sandbox --token "$member" exec "$sbx_ttl" -- sh -c 'mkdir -p /tmp/w && echo ttl >/tmp/w/index.html && httpd -p 8080 -h /tmp/w'
share "$sbx_ttl" 8080 public
get "$ROUTE_URL"
assert_eq ttl "$BODY" "the TTL sandbox's route works"
ttl_gone() { get "$ROUTE_URL"; [ "$STATUS" = 404 ]; }
itest_wait_until 60 "the route of a sandbox past its TTL to answer 404" ttl_gone
reason=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT state || ' ' || coalesce(removed_reason, '') FROM routes WHERE id = '$ROUTE_ID'")
assert_match "$reason" '^removed ' "the TTL sandbox's route is removed"

wait "$trickle_pid"
secs=$(cat "$ITEST_TMP/trickle.out")
itest_log "a head sent a byte a second was cut off after $secs s"
[ "$secs" -ge 14 ] && [ "$secs" -le 20 ] || fail "a trickling request head was cut off after $secs s (expected 15)"

# ---- the logs hold no route secret: no access token, and no route name
# (a public route's only secret); routes are logged by id
logs=$(cat "$ITEST_CONTROLLER_LOG" "$c2log" "$ITEST_WORKER_LOG")
for secret in "$tok_secret" "$public_name" "$host_name"; do
  assert_not_contains "$logs" "$secret" "controller and worker logs"
done
assert_contains "$(cat "$c2log")" "route rt_" "the proxy logs requests by route id"


# ---- the route listener's metrics on the second controller
curl -sf --max-time 30 "http://127.0.0.1:$c2port/metrics" -o "$ITEST_TMP/rd-metrics.txt" || fail "GET /metrics of the second controller"
python3 "$here/promparse.py" "$ITEST_TMP/rd-metrics.txt" >/dev/null || fail "/metrics is not valid Prometheus text"
rmetric() { awk -v k="$1" '$1 == k { print $2; found = 1; exit } END { if (!found) print 0 }' "$ITEST_TMP/rd-metrics.txt"; }
# forwarded requests, the deleted route's 404, 50 MB each way, nothing left open
python3 -c 'import sys; v = [float(x) for x in sys.argv[1:]]; sys.exit(0 if v[0] >= 5 and v[1] >= 1 and v[2] >= 50e6 and v[3] >= 50e6 and v[4] == 0 else 1)' \
  "$(rmetric 'sandbox_route_requests_total{answer="forwarded"}')" "$(rmetric 'sandbox_route_requests_total{answer="404"}')" \
  "$(rmetric 'sandbox_route_bytes_total{direction="in"}')" "$(rmetric 'sandbox_route_bytes_total{direction="out"}')" \
  "$(rmetric sandbox_route_connections)" \
  || fail "route metrics of the second controller: $(grep '^sandbox_route_[a-z_]* \|^sandbox_route_[a-z_]*{[a-z]*="[a-z0-9]*"}' "$ITEST_TMP/rd-metrics.txt" | tr '\n' ' ')"
