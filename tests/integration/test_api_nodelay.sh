#!/usr/bin/env bash
# An answer past one TCP segment on a kept-alive API connection goes out at
# once (TCP_NODELAY on every accepted connection): without it the last
# segment waits for the client's delayed ACK, about 40 ms a request (a new
# connection, whose first ACKs are not delayed, is the yardstick).
# itest-timeout: 120
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

# A tenant list of more than 16.5 KiB: enough tenants of long names.
prefix=$(itest_tenant nodelay)
python3 - "$SANDBOX_URL" "$ITEST_ADMIN_TOKEN" "$prefix" <<'PY'
import http.client, json, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
i = 0
while i < 160:
    conn.request("POST", "/v1/tenants", body=json.dumps({"name": "%s-%s-%03d" % (sys.argv[3], "x" * 30, i)}),
                 headers={"Authorization": "Bearer " + sys.argv[2], "Content-Type": "application/json"})
    r = conn.getresponse()
    r.read()
    if r.status == 429:  # the token's request rate: as told
        time.sleep(int(r.getheader("Retry-After", "1")))
        continue
    if r.status not in (201, 409):
        sys.exit("POST /v1/tenants answered %d" % r.status)
    i += 1
PY
sleep 1 # the token's request rate refills
out=$(python3 "$(dirname "$0")/keepalive_answer.py" "$SANDBOX_URL" "$ITEST_ADMIN_TOKEN" /v1/tenants)
itest_log "$(echo "$out" | tr '\n' ' ')"
bytes=$(echo "$out" | sed -n 's/^bytes //p')
p50=$(echo "$out" | sed -n 's/^p50_ms //p')
fresh=$(echo "$out" | sed -n 's/^fresh_p50_ms //p')
[ "$bytes" -gt 16900 ] || fail "the tenant list is only $bytes bytes"
# Against the same answer on new connections, timed in turn with it: on a
# busy host both slow down alike, while a delayed ACK adds its 40 ms to the
# kept-alive one only.
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) - float(sys.argv[2]) < 20 else 1)' "$p50" "$fresh" \
  || fail "a $bytes-byte answer on a kept-alive connection took $p50 ms, on a new one $fresh ms (p50s of 21; delayed ACK?)"
echo "a $bytes-byte answer on a kept-alive connection: p50 $p50 ms (on a new connection: $fresh ms)"
