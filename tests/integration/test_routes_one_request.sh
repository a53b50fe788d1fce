#!/usr/bin/env bash
# The route proxy sends one request per upstream connection (issue 15,
# finding 7): what a client sends after its request's body on the same
# connection, pipelined or kept alive, never reaches the app, so a second
# request's spoofed X-Forwarded-For (whose head the proxy never cleaned)
# cannot get through, even to an app that ignores "Connection: close" and
# reads on. The app is a shell script in the sandbox that answers up to two
# requests per connection with the head it received.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-r1)
itest_as_admin "$tenant"
member=$(itest_token "$tenant" member)
rport=${SANDBOX_ROUTE_URL##*:}

setup=$(cat <<'EOF2'
set -e
cat >/tmp/two.sh <<'EOT'
#!/bin/sh
n=0
while [ $n -lt 2 ]; do
  head=
  while IFS= read -t 5 -r line; do
    line=$(printf %s "$line" | tr -d '\r')
    [ -z "$line" ] && break
    head="$head$line
"
  done
  [ -z "$head" ] && exit 0
  len=$(printf %s "$head" | wc -c)
  printf 'HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s' "$len" "$head"
  n=$((n + 1))
done
EOT
chmod +x /tmp/two.sh
nc -ll -p 9002 -e /tmp/two.sh >/dev/null 2>&1 </dev/null &
EOF2
)
assert_exit 0 sandbox --token "$member" create --image "$ITEST_IMAGE" --cpu-millis 500 --memory-mib 128 --wait \
  --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 sandbox --token "$member" exec "$sbx" -- sh -c "$setup"
itest_http POST "/v1/sandboxes/$sbx/routes" "$member" '{"port":9002,"auth":"public"}'
assert_http 202 "" "share port 9002"
name=$(itest_json "$HTTP_BODY" route.name)

# two MODE FIRST: sends FIRST then a GET with a spoofed X-Forwarded-For on one
# connection (pipelined: at once; keepalive: after the first answer) and
# prints all that came back until the connection closed.
two() {
  python3 - "$rport" "$name" "$1" "$2" <<'PY'
import socket, sys, time
port, name, mode, first = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
first = first.replace("NAME", name).replace("\\r\\n", "\r\n").encode()
second = (f"GET /r/{name}/second HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: 6.6.6.6\r\n"
          "X-Forwarded-Host: evil.example\r\n\r\n").encode()
s = socket.create_connection(("127.0.0.1", port), timeout=20)
out = b""
if mode == "pipelined":
    s.sendall(first + second)
else:
    s.sendall(first)
    while b"\r\n\r\n" not in out:
        out += s.recv(65536)
    head, _, body = out.partition(b"\r\n\r\n")
    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
    while len(body) < n:
        body += s.recv(65536)
        out = head + b"\r\n\r\n" + body
    time.sleep(0.5)
    try:
        s.sendall(second)
    except OSError:
        pass
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
except (socket.timeout, ConnectionResetError):
    out += b"<<no close>>"
print(out.decode("latin-1"))
PY
}

plain="GET /r/NAME/first HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
with_body="POST /r/NAME/first HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 3\r\n\r\nabc"
chunked="POST /r/NAME/first HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
for mode in pipelined keepalive; do
  for first in "$plain" "$with_body" "$chunked"; do
    what="$mode, first ${first%% *} $(case "$first" in *chunked*) echo chunked ;; *Length*) echo with a body ;; esac)"
    out=$(two "$mode" "$first")
    assert_contains "$out" "/first HTTP/1.1" "$what: the first request reached the app"
    assert_contains "$out" "X-Forwarded-For: 127.0.0.1" "$what: the app saw the controller's X-Forwarded-For"
    assert_not_contains "$out" "6.6.6.6" "$what: the second request's spoofed X-Forwarded-For"
    assert_not_contains "$out" "evil.example" "$what: the second request's spoofed X-Forwarded-Host"
    assert_not_contains "$out" "/second" "$what: the second request never reached the app"
  done
done
code=$(curl -s -o /dev/null -w "%{http_code}" --max-time 10 "$SANDBOX_ROUTE_URL/r/$name/x" || true)
assert_eq 200 "$code" "a plain request through the route afterwards"
echo "one request per upstream connection: nothing after the first request's body reaches the app"
