#!/usr/bin/env bash
# Image sources (issue 15, finding 4): an image reference cannot make dockerd
# on the worker host reach where the tenant cannot. By default a registry on
# loopback, link-local or private addresses, an IP literal or localhost is
# refused with policy_denied naming the rule before anything is pulled (a
# listener on 127.0.0.1 gets no request); a registry listed in
# image_registries is pulled from, and its answer (a secret here) never comes
# back in the operation's error; a worker without the setting refuses the
# pull itself; a tenant policy only narrows the server's list.
# Traffic goes only to the test's own listener on 127.0.0.1.
# itest-any-env
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

secret="SBX-REGISTRY-SECRET-$RANDOM$RANDOM"
port=$(itest_free_port)
reqlog="$ITEST_TMP/imgsrc-requests-$$.log"
ready="$ITEST_TMP/imgsrc-ready-$$"
: >"$reqlog"
# A listener standing for a host-loopback service: every request it reads is
# logged and answered with the secret.
server="$ITEST_TMP/imgsrc-server-$$.py"
cat >"$server" <<'PY'
import http.server, sys
port, secret, log, ready = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3], sys.argv[4]
class H(http.server.BaseHTTPRequestHandler):
    def answer(self):
        with open(log, "a") as f:
            f.write("%s %s\n" % (self.command, self.path))
        self.send_response(418)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(secret)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(secret)
    do_GET = do_HEAD = do_POST = do_PUT = answer
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
s.timeout = 1
open(ready, "w").close()
s.serve_forever()
PY
# a simple command of the binary itself (not lib.sh's python3 function), so
# $! is the server and stopping it leaves nothing behind
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
"$py" "$server" "$port" "$secret" "$reqlog" "$ready" </dev/null >/dev/null 2>&1 &
spid=$!
itest_track_pid "$spid"
itest_wait_until 20 "the test's listener" test -e "$ready"

# ---- 1. the shared controller, image_registries empty: the address rule
itest_as_member itest-imgsrc
for ref in "127.0.0.1:$port/x:1" "127.1:$port/x:1" "0x7f.0.0.1:$port/x:1" "localhost:$port/x" \
  "10.0.0.1/x" "169.254.169.254/x" "100.64.0.1:$port/x" "192.168.1.1:$port/x"; do
  itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"$ref\",\"cpu_millis\":100,\"memory_mib\":32}"
  assert_http 422 policy_denied "create with image $ref"
  assert_contains "$(itest_json "$HTTP_BODY" error.message)" "image_registries lists the allowed ones" "$ref refusal"
done
assert_eq "registry 127.0.0.1:$port is a loopback address; image_registries lists the allowed ones" \
  "$(itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"127.0.0.1:$port/x:1\"}"; itest_json "$HTTP_BODY" error.message)" \
  "the rule named for a loopback registry"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" '{"image":"169.254.169.254/latest/meta-data:1"}'
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "is a link-local address" "metadata address refusal"
# IPv6 literals: refused (the reference grammar takes no brackets: 400)
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"[::1]:$port/x\"}"
assert_match "$HTTP_STATUS" '^(400|422)$' "create with image [::1]:$port/x"
# the CLI: one line naming the rule, exit 1 (policy_denied)
assert_exit 1 sandbox create --image "127.0.0.1:$port/x:1"
assert_contains "$ITEST_ERR" "registry 127.0.0.1:$port is a loopback address" "CLI refusal"
# a tenant policy cannot open what the server's rule refuses
itest_http PUT "/v1/tenants/$tenant/policy" "$ITEST_ADMIN_TOKEN" \
  "{\"registries\":[\"127.0.0.1:$port\"]}"
assert_http 422 policy_denied "a tenant policy listing a loopback registry"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "only narrow" "policy refusal"
sleep 1
assert_eq 0 "$(wc -l <"$reqlog")" "requests the listener got while every pull was refused"

# ---- 2. a controller listing the listener, a worker that lists it and one that does not
itest_private_db itest_imgsrc
pids2=()
# stops this part's controller and workers before its database goes
imgsrc_teardown() {
  local i
  for ((i = ${#pids2[@]} - 1; i >= 0; i--)); do itest_stop_pid "${pids2[$i]}" "imgsrc process" 30; done
  itest_drop_private_db
}
itest_on_exit imgsrc_teardown
"$SANDBOXD" migrate --database-url "$url" >/dev/null
clog="$ITEST_TMP/imgsrc-controller-$$.log"
itest_watch_log "$clog"
cport=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$cport"
"$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$cport" \
  --image-registries "127.0.0.1:$port, docker.io" >>"$clog" 2>&1 </dev/null &
cpid=$!
pids2+=("$cpid")
itest_wait_healthz "$SANDBOX_URL" "$cpid" controller "$clog" || fail "the controller did not come up"
admin=$("$SANDBOXD" token create --database-url "$url" --tenant itest-imgsrc-admin --role admin)
export ITEST_ADMIN_TOKEN=$admin SANDBOX_TOKEN=$admin
start_worker() { # NAME LABEL [IMAGE_REGISTRIES]
  local wlog="$ITEST_TMP/imgsrc-$1-$$.log" tok
  itest_watch_log "$wlog"
  tok=$("$SANDBOXD" token create --database-url "$url" --tenant itest-imgsrc-workers --role worker)
  SANDBOX_WORKER_TOKEN="$tok" SANDBOX_WORKER_CPU_MILLIS=64000 SANDBOX_WORKER_MEMORY_MIB=262144 \
    SANDBOX_IMAGE_REGISTRIES="${3:-}" SANDBOX_WORKER_LABELS="reg=$2" SANDBOX_WORKER_GVISOR_RUNTIME= \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --worker-name "$1" >>"$wlog" 2>&1 </dev/null &
  pids2+=($!)
}
start_worker "imgsrc-listed-$$" listed "127.0.0.1:$port"
start_worker "imgsrc-default-$$" default
itest_wait_until 60 "worker imgsrc-listed ready" itest_worker_ready "imgsrc-listed-$$"
itest_wait_until 60 "worker imgsrc-default ready" itest_worker_ready "imgsrc-default-$$"
t2=itest-imgsrc-t
assert_exit 0 sandbox tenants create "$t2"
member2=$("$SANDBOXD" token create --database-url "$url" --tenant "$t2" --role member)
export SANDBOX_TOKEN=$member2

# a worker whose own setting does not list it refuses the pull itself
assert_exit 1 timeout 90 "$SANDBOX_CLI" create --image "127.0.0.1:$port/x:1" --selector reg=default \
  --cpu-millis 100 --memory-mib 32 --wait --timeout 80
assert_contains "$ITEST_ERR" "this worker does not pull from there" "the worker's own check"
assert_contains "$ITEST_ERR" "policy_denied" "the worker's refusal code"
assert_eq 0 "$(wc -l <"$reqlog")" "requests the listener got after the worker refused"

# listed on both: the pull happens (the listener is asked) and fails without the secret
assert_exit 1 timeout 150 "$SANDBOX_CLI" create --image "127.0.0.1:$port/x:1" --selector reg=listed \
  --cpu-millis 100 --memory-mib 32 --wait --timeout 140
read -r sbx op <<<"$ITEST_OUT"
assert_contains "$ITEST_ERR" "cannot pull image 127.0.0.1:$port/x:1" "the pull's error"
assert_not_contains "$ITEST_ERR" "$secret" "the pull's error"
[ "$(wc -l <"$reqlog")" -gt 0 ] || fail "the listed registry was never asked: no pull happened"
itest_http GET "/v1/operations/$op" "$SANDBOX_TOKEN"
assert_not_contains "$HTTP_BODY" "$secret" "the operation as the API shows it"
itest_http GET "/v1/sandboxes/$sbx" "$SANDBOX_TOKEN"
assert_not_contains "$HTTP_BODY" "$secret" "the sandbox as the API shows it"
itest_http GET "/v1/events?tenant=$t2" "$SANDBOX_TOKEN"
assert_not_contains "$HTTP_BODY" "$secret" "the tenant's events"

# a tenant policy narrows the server's list: docker.io only
SANDBOX_TOKEN=$admin assert_exit 0 sandbox tenants update "$t2" --policy '{"registries":["docker.io"]}'
n_before=$(wc -l <"$reqlog")
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"image\":\"127.0.0.1:$port/x:1\",\"cpu_millis\":100}"
assert_http 422 policy_denied "a registry outside the tenant's registries"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" \
  "registry 127.0.0.1:$port of image 127.0.0.1:$port/x:1 is not in the tenant policy registries" "narrowed"
# and cannot widen it
SANDBOX_TOKEN=$admin assert_exit 1 sandbox tenants update "$t2" --policy '{"registries":["ghcr.io"]}'
assert_contains "$ITEST_ERR" "registry ghcr.io is not in the server's image_registries" "widening refused"
# a registry the server does not list is refused even though it is a public name
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" '{"image":"ghcr.io/x/y:1"}'
assert_http 422 policy_denied "a registry outside the server's list"
sleep 1
assert_eq "$n_before" "$(wc -l <"$reqlog")" "requests the listener got after the refusals"
echo "image pulls reach only the registries the server and the tenant allow; pull errors carry no registry bytes"
