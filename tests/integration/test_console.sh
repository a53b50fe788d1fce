#!/usr/bin/env bash
# The web console (controller/console/, docs/console.md) in Debian's
# headless Chromium, driven by puppeteer-core (tests/console/console.mjs):
# an admin signs in with a token; a sandbox created through the CLI appears
# in the live list within 2 s; its page shows its placement and a line its
# main process writes, live; its container killed behind its back shows
# failed with the reason; extend, delete and a token's revocation work from
# the console, each confirmed; a member of another tenant neither lists nor
# opens it; the token is in no URL, no cookie, no request log; no request
# leaves for another origin; the console's files come with a strict
# Content-Security-Policy; behind nginx under a path prefix it finds the API
# beside it; a screenshot of each view is taken.
# itest-timeout: 300
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

console_dir=$(cd "$(dirname "$0")/../console" && pwd)
chromium=$(command -v chromium || true)
[ -n "$chromium" ] || fail "chromium is not installed (tools/test.sh installs Debian's chromium)"
itest_npm_install "$console_dir" "puppeteer-core" || fail "$ITEST_NPM_ERROR"

# ---- the files, without a browser: no token needed, a strict policy
assert_exit 0 curl -sS -D "$ITEST_TMP/console.head" -o "$ITEST_TMP/console.html" "$SANDBOX_URL/console/"
head=$(tr -d '\r' <"$ITEST_TMP/console.head")
assert_contains "$head" "HTTP/1.1 200" "GET /console/"
assert_contains "$head" "Content-Security-Policy: default-src 'none'; script-src 'self'" "the console's CSP"
assert_contains "$head" "X-Frame-Options: DENY" "the console is not framed"
assert_contains "$(cat "$ITEST_TMP/console.html")" '<script type="module" src="app.js">' "index.html loads app.js"
code=$(curl -sS -o /dev/null -w '%{http_code} %{redirect_url}' "$SANDBOX_URL/console")
assert_eq "308 $SANDBOX_URL/console/" "$code" "/console redirects to /console/"
assert_eq 404 "$(curl -sS -o /dev/null -w '%{http_code}' "$SANDBOX_URL/console/nope.js")" "an unknown console file"
assert_eq 404 "$(curl -sS -o /dev/null -w '%{http_code}' "$SANDBOX_URL/console/..%2f..%2fetc%2fpasswd")" \
  "a path out of the console"
assert_eq 405 "$(curl -sS -o /dev/null -w '%{http_code}' -X POST "$SANDBOX_URL/console/app.js")" "POST to the console"
assert_contains "$(curl -sS -D - -o /dev/null "$SANDBOX_URL/console/app.js" | tr -d '\r')" \
  "Content-Type: text/javascript" "app.js is JavaScript"

# ---- nginx in front, under a path prefix (docs/console.md): the console
# finds the API beside it
nd="$ITEST_TMP/console-nginx-$$"
nport=$(itest_free_port)
itest_nginx "$nd" "    server {
        listen 127.0.0.1:$nport;
        location /ops/sandbox/ {
            proxy_pass ${SANDBOX_URL}/;
            proxy_http_version 1.1;
            proxy_buffering off;
            proxy_read_timeout 300s;
        }
    }"
prefixed="http://127.0.0.1:$nport/ops/sandbox"
nginx_up() { curl -sf "$prefixed/healthz" >/dev/null; }
itest_wait_until 20 "nginx on $nport" nginx_up
code=$(curl -sS -o /dev/null -w '%{http_code} %{redirect_url}' "$prefixed/console")
assert_eq "308 $prefixed/console/" "$code" "/console redirects to console/ under the prefix"

# ---- two tenants: a member of each
ta=$(itest_tenant itest-console-a)
tb=$(itest_tenant itest-console-b)
member_a=$(itest_token "$ta" member)
member_b=$(itest_token "$tb" member)
shots="${ITEST_CONSOLE_SHOTS:-$ITEST_TMP/console-shots}"
mkdir -p "$shots"

CONSOLE_URL="$SANDBOX_URL" ADMIN_TOKEN="$ITEST_ADMIN_TOKEN" MEMBER_A="$member_a" MEMBER_B="$member_b" TENANT_A="$ta" \
  SECRETS_FILE="$ITEST_TMP/secrets.txt" PREFIXED_URL="$prefixed" \
  CHROMIUM="$chromium" SANDBOX_CLI="$SANDBOX_CLI" ITEST_IMAGE="$ITEST_IMAGE" SHOTS="$shots" TAG="$$" \
  node "$console_dir/console.mjs" >"$ITEST_TMP/console.out" 2>&1 || {
  cat "$ITEST_TMP/console.out"
  fail "the console test failed (above)"
}
cat "$ITEST_TMP/console.out"
sbx=$(sed -n 's/^sandbox: //p' "$ITEST_TMP/console.out")
[ -n "$sbx" ] && itest_track "$sbx"
for v in overview sandboxes sandbox events tenants tokens; do
  [ -s "$shots/console-$v.png" ] || fail "no screenshot of the $v view in $shots"
done

# ---- the tokens are in no request log
for t in "$ITEST_ADMIN_TOKEN" "$member_a" "$member_b"; do
  if grep -rqF "$t" "$ITEST_TMP"/controller*.log 2>/dev/null; then fail "a token the console used is in a controller log"; fi
done
grep -q 'path=/console/app.js' "$ITEST_TMP"/controller*.log || fail "the console's requests are not in the request log"
echo "the console shows sandboxes live to whoever may see them, with its token nowhere but a header"
