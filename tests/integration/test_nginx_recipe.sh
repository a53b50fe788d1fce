#!/usr/bin/env bash
# docs/custom-domains.md's nginx block, as written (Debian's nginx-light;
# only its ports, upstreams and certificate paths are the test's), in front
# of the shared controller: a 20 MB sandbox cp both ways, sandbox shell,
# exec -i with 600 KiB of stdin and logs -f all pass through it; a proxy
# that refuses on its own (a 1 KiB client_max_body_size, a server block of
# the test's) is reported by the CLI with its status and its own words.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

command -v nginx >/dev/null 2>&1 || fail "nginx is not installed (apt-get install nginx-light; tools/test.sh does)"
tenant=$(itest_tenant itest-nginx)
SANDBOX_TOKEN=$(itest_token "$tenant" member)
export SANDBOX_TOKEN
d="$ITEST_TMP/nginx-$$"
mkdir -p "$d/tmp"
port=$(itest_free_port)
small=$(itest_free_port)
plain=$(itest_free_port)
ctl=${SANDBOX_URL#http://}

# A certificate for the test's https address (the recipe's are Let's Encrypt's)
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=api.example.com \
  -addext "subjectAltName=IP:127.0.0.1,DNS:api.example.com" \
  -keyout "$d/key.pem" -out "$d/cert.pem" 2>"$d/openssl.err" || fail "openssl: $(cat "$d/openssl.err")"

# The recipe: the first nginx block of the document, its addresses swapped
python3 - "$(dirname "$0")/../../docs/custom-domains.md" "$d" "$port" "$plain" "$ctl" >"$d/sandbox.conf" <<'PY'
import re, sys
doc, d, port, plain, ctl = sys.argv[1:]
text = open(doc).read()
block = re.search(r"```nginx\n(.*?)```", text, re.S).group(1)
swaps = [
    ("listen 443 ssl;", "listen 127.0.0.1:%s ssl;" % port),
    ("listen 80;", "listen 127.0.0.1:%s;" % plain),
    ("proxy_pass http://127.0.0.1:8080;", "proxy_pass http://%s;" % ctl),
    ("proxy_pass http://127.0.0.1:8081;", "proxy_pass http://127.0.0.1:9;"),
]
for old, new in swaps:
    if old not in block:
        sys.exit("the recipe no longer has %r" % old)
    block = block.replace(old, new)
block = re.sub(r"ssl_certificate\s+\S+;", "ssl_certificate %s/cert.pem;" % d, block)
block = re.sub(r"ssl_certificate_key\s+\S+;", "ssl_certificate_key %s/key.pem;" % d, block)
print(block)
PY
# the test's own server: nginx's default body limit, to see how a client says it
itest_nginx "$d" "    include $d/sandbox.conf;
    server {
        listen 127.0.0.1:$small;
        client_max_body_size 1k;
        location / { proxy_pass http://$ctl; proxy_http_version 1.1; }
    }"
up() { curl -s --cacert "$d/cert.pem" "https://127.0.0.1:$port/healthz" | grep -q ok; }
itest_wait_until 20 "nginx on $port" up

# px CMD...: CMD with the CLI pointed at nginx (the cleanup at the end
# still goes straight to the controller)
px() { SANDBOX_URL="https://127.0.0.1:$port" SANDBOX_CA_FILE="$d/cert.pem" "$@"; }
px assert_exit 0 sandbox create --image "$ITEST_IMAGE" --memory-mib 256 --wait --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"

# 20 MB up and back
head -c $((20 * 1024 * 1024)) /dev/urandom >"$d/big.bin"
px assert_exit 0 sandbox cp "$d/big.bin" "$sbx:/tmp/big.bin"
px assert_exit 0 sandbox cp "$sbx:/tmp/big.bin" "$d/back.bin"
cmp -s "$d/big.bin" "$d/back.bin" || fail "the 20 MB file came back different through nginx"

# exec -i past the inline limit: an upgraded connection
head -c $((600 * 1024)) /dev/zero >"$d/stdin.bin"
px assert_exit 0 sandbox exec -i "$sbx" -- wc -c <"$d/stdin.bin"
assert_eq 614400 "$(tr -d ' ' <<<"$ITEST_OUT")" "bytes exec -i sent through nginx"

# an interactive shell
px python3 "$(dirname "$0")/shell_client.py" "$SANDBOX_CLI" "$sbx" >"$d/pty.out" 2>&1 ||
  fail "sandbox shell through nginx: $(cat "$d/pty.out")"

# logs -f: a line the main process writes comes while it follows
px sandbox logs "$sbx" -f >"$d/logs.out" 2>"$d/logs.err" </dev/null &
lpid=$!
itest_track_pid "$lpid"
sleep 1
px assert_exit 0 sandbox exec "$sbx" -- sh -c 'echo through-the-proxy >/proc/1/fd/1'
logged() { grep -q through-the-proxy "$d/logs.out"; }
itest_wait_until 20 "the line in logs -f through nginx" logged
kill "$lpid" 2>/dev/null || true
wait "$lpid" 2>/dev/null || true

# a proxy's own refusal, in its words
head -c 20000 /dev/urandom >"$d/mid.bin"
assert_exit 3 env SANDBOX_URL="http://127.0.0.1:$small" "$SANDBOX_CLI" cp "$d/mid.bin" "$sbx:/tmp/mid.bin"
assert_contains "$ITEST_ERR" "HTTP 413 without the API's error body, so likely from a proxy in front of the controller: 413 Request Entity Too Large" \
  "what the CLI says of nginx's 413"
assert_not_contains "$ITEST_ERR" "HTTP 413: HTTP 413" "the status said once"

px assert_exit 0 sandbox delete "$sbx" --wait
echo "cp, exec -i, shell and logs -f pass through the documented nginx block"
