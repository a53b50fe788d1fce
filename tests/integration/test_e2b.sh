#!/usr/bin/env bash
# The official E2B SDK (npm e2b, pinned in tests/e2b/package.json) drives
# Sandbox unmodified, configured only by E2B_API_URL=URL/e2b,
# E2B_SANDBOX_URL=URL/e2b/envd and E2B_API_KEY=<a member token>:
# tests/e2b/e2b_check.mjs creates, reads, lists by metadata, sets timeouts,
# connects a second client and kills, and gets the SDK's own errors for a
# missing sandbox and a wrong key (docs/e2b.md). Before it: E2B's error
# shape, a worker token refused, envd of an unknown sandbox 502. Prints the
# time of a create through the E2B SDK next to the same through the CLI.
# itest-timeout: 300
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

root=$(cd "$(dirname "$0")/../.." && pwd)
dir="$root/tests/e2b"
itest_npm_install "$dir" "the E2B SDK (e2b)" || fail "$ITEST_NPM_ERROR"
sdk_version=$(node -p "require('$dir/node_modules/e2b/package.json').version")
assert_eq "$(node -p "require('$dir/package.json').dependencies.e2b")" "$sdk_version" "the installed e2b version"

itest_as_member e2b
itest_track_tenant "$tenant"
other_key=$(itest_token "$(itest_tenant e2b-other)" member)

# A controller of this test's own on the same database, with a route
# domain: the create answer's domain, which sandbox.getHost(port) puts
# after "{port}-{id}.", so that name reaches the port on its route listener.
c2port=$(itest_free_port)
c2rport=$(itest_free_port)
c2log="$ITEST_TMP/controller-e2b.log"
"$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$c2port" \
  --route-listen "127.0.0.1:$c2rport" --route-domain e2b.test >>"$c2log" 2>&1 </dev/null &
c2pid=$!
itest_track_pid "$c2pid"
itest_watch_log "$c2log"
itest_wait_healthz "http://127.0.0.1:$c2port" "$c2pid" "the E2B test's controller" "$c2log" ||
  fail "the E2B test's controller did not start"
# and a third with a tight request rate, for the SDK's RateLimitError
c3port=$(itest_free_port)
c3log="$ITEST_TMP/controller-e2b-limited.log"
"$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$c3port" --route-listen 127.0.0.1:0 \
  --rate-requests-per-second 1 --rate-requests-burst 2 >>"$c3log" 2>&1 </dev/null &
c3pid=$!
itest_track_pid "$c3pid"
itest_watch_log "$c3log"
itest_wait_healthz "http://127.0.0.1:$c3port" "$c3pid" "the E2B test's rate-limited controller" "$c3log" ||
  fail "the E2B test's rate-limited controller did not start"
export E2B_CHECK_LIMITED_URL="http://127.0.0.1:$c3port/e2b"
SANDBOX_URL="http://127.0.0.1:$c2port"
export E2B_API_URL="$SANDBOX_URL/e2b" E2B_SANDBOX_URL="$SANDBOX_URL/e2b/envd" E2B_API_KEY="$SANDBOX_TOKEN"
export E2B_CHECK_ROUTE="127.0.0.1:$c2rport" E2B_CHECK_OTHER_KEY="$other_key" E2B_CHECK_IMAGE="$ITEST_IMAGE"
unset E2B_DOMAIN E2B_DEBUG

# ---- the control API's own answers (curl), before the SDK
itest_http GET /e2b/v2/sandboxes ""
assert_eq 401 "$HTTP_STATUS" "a list without a key"
assert_eq 401 "$(itest_json "$HTTP_BODY" code)" "E2B's error body carries the status as code"
code=$(curl -s -o "$ITEST_TMP/e2b-list-$$" -w '%{http_code}' -H "X-API-Key: $SANDBOX_TOKEN" "$SANDBOX_URL/e2b/v2/sandboxes")
assert_eq 200 "$code" "a list with X-API-Key"
assert_eq "[]" "$(cat "$ITEST_TMP/e2b-list-$$")" "a new tenant's list"
wtok=$(itest_token "$tenant" worker)
code=$(curl -s -o "$ITEST_TMP/e2b-list-$$" -w '%{http_code}' -H "X-API-Key: $wtok" "$SANDBOX_URL/e2b/v2/sandboxes")
assert_eq 403 "$code" "a worker token on the E2B API"
code=$(curl -s -o "$ITEST_TMP/e2b-env-$$" -w '%{http_code}' -H "X-Access-Token: $SANDBOX_TOKEN" \
  -H "E2b-Sandbox-Id: sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa" "$SANDBOX_URL/e2b/envd/health")
assert_eq 502 "$code" "envd of a sandbox that does not exist (E2B's edge answers 502)"

# ---- trust boundaries: another tenant's key reaches nothing of this
# tenant's, by the control API or by envd; a worker token is no E2B key;
# sandbox.trust in the metadata never gets a weaker class than it needs
assert_exit 0 sandbox create --wait --timeout 120
read -r mine _ <<<"$ITEST_OUT"
itest_track "$mine"
e2b_call() { # METHOD PATH KEY [BODY]: sets code and body
  local args=(-s -o "$ITEST_TMP/e2b-call-$$" -w '%{http_code}' -X "$1" -H "X-API-Key: $3" -H "X-Access-Token: $3"
    -H "E2b-Sandbox-Id: $mine")
  [ -z "${4:-}" ] || args+=(-H 'Content-Type: application/json' --data "$4")
  code=$(curl "${args[@]}" "$SANDBOX_URL$2")
  body=$(cat "$ITEST_TMP/e2b-call-$$")
}
e2b_call GET "/e2b/sandboxes/$mine" "$SANDBOX_TOKEN"
assert_eq 200 "$code" "this tenant's sandbox through the E2B API"
e2b_call GET "/e2b/sandboxes/$mine" "$other_key"
assert_eq 404 "$code" "another tenant's sandbox through the E2B API"
assert_eq 404 "$(itest_json "$body" code)" "the 404's E2B body"
e2b_call DELETE "/e2b/sandboxes/$mine" "$other_key"
assert_eq 404 "$code" "another tenant's kill"
e2b_call POST /e2b/envd/process.Process/List "$SANDBOX_TOKEN" '{}'
assert_eq 200 "$code" "envd's List with this tenant's key"
assert_eq '{"processes":[]}' "$body" "envd's List of a new sandbox"
e2b_call POST /e2b/envd/process.Process/List "$other_key" '{}'
assert_eq 502 "$code" "envd of another tenant's sandbox (as if it did not exist)"
e2b_call GET /e2b/envd/files?path=/etc/hostname "$other_key"
assert_eq 502 "$code" "a file of another tenant's sandbox"
e2b_call POST /e2b/envd/process.Process/List "$wtok" '{}'
assert_eq 403 "$code" "envd with a worker token"
assert_eq permission_denied "$(itest_json "$body" code)" "envd's Connect error for a worker token"
e2b_call POST /e2b/v2/sandboxes "$SANDBOX_TOKEN" '{"templateID":"base","metadata":{"sandbox.trust":"hostile"}}'
assert_eq 422 "$code" "a hostile create where no worker offers microvm"
assert_contains "$body" "isolation_unavailable" "the refused hostile create"
# E2B's network rules: domains become egress rules by domain (here no worker
# filters, so the create is refused, never run unfiltered); addresses are
# the tenant policy's egress_allow, refused naming the entry
e2b_call POST /e2b/v2/sandboxes "$SANDBOX_TOKEN" \
  '{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["PyPI.org","*.pythonhosted.org"]}}'
assert_contains "$body" "isolation_unavailable" "a create with domain rules where no worker filters egress"
itest_http GET "/v1/sandboxes?limit=1" "$SANDBOX_TOKEN"
assert_eq "pypi.org *.pythonhosted.org deny" "$(itest_json "$HTTP_BODY" sandboxes.0.egress.allow.0) $(itest_json \
  "$HTTP_BODY" sandboxes.0.egress.allow.1) $(itest_json "$HTTP_BODY" sandboxes.0.egress.default)" \
  "E2B's allowOut and denyOut ALL_TRAFFIC as egress rules"
e2b_call POST /e2b/v2/sandboxes "$SANDBOX_TOKEN" '{"templateID":"base","network":{"allowOut":["10.0.0.1"]}}'
assert_eq 400 "$code" "an address in allowOut"
assert_contains "$body" "network.allowOut[0] (10.0.0.1)" "the entry named"

# template builds: bad requests refused, another tenant's build unseen
e2b_call POST /e2b/v3/templates "$SANDBOX_TOKEN" '{"name":"e2b-raw","cpuCount":1000000000000000}'
assert_eq 400 "$code" "a build with cpuCount out of range"
e2b_call POST /e2b/v3/templates "$SANDBOX_TOKEN" '{"name":"e2b-raw:v2"}'
assert_eq 400 "$code" "a build with a tag"
e2b_call POST /e2b/v3/templates "$SANDBOX_TOKEN" '{"name":"e2b-raw","cpuCount":1,"memoryMB":64}'
assert_eq 202 "$code" "a build requested"
raw_build=$(itest_json "$body" buildID)
e2b_call GET "/e2b/templates/e2b-raw/builds/$raw_build/status" "$other_key"
assert_eq 404 "$code" "another tenant's build status"
e2b_call POST "/e2b/v2/templates/e2b-raw/builds/$raw_build" "$other_key" '{"fromImage":"x","steps":[]}'
assert_eq 404 "$code" "another tenant starting the build"
e2b_call POST "/e2b/v2/templates/e2b-raw/builds/$raw_build" "$SANDBOX_TOKEN" '{"fromImage":"x","startCmd":"sh"}'
assert_eq 400 "$code" "a start command"
e2b_call POST "/e2b/v2/templates/e2b-raw/builds/$raw_build" "$SANDBOX_TOKEN" \
  '{"fromImage":"x","steps":[{"type":"RUN","args":["true"]},{"type":"HEALTHCHECK","args":["x"]}]}'
assert_eq 400 "$code" "an instruction not taken"
assert_contains "$(itest_json "$body" message)" "steps[1]" "the message names it"
e2b_call GET "/e2b/templates/e2b-raw/builds/$raw_build/status" "$SANDBOX_TOKEN"
assert_eq waiting "$(itest_json "$body" status)" "a refused trigger leaves the build waiting"
# COPY's files: a bad hash is refused; the upload link is this server's
# own path with the caller's key; an upload is the tenant's alone, bounded,
# and a COPY of files never uploaded is refused naming it
e2b_call GET "/e2b/templates/e2b-raw/files/abc" "$SANDBOX_TOKEN"
assert_eq 400 "$code" "COPY's upload link for a bad hash"
fh=$(printf 'raw-%s' "$$" | sha256sum | cut -d' ' -f1)
e2b_call GET "/e2b/templates/e2b-raw/files/$fh" "$SANDBOX_TOKEN"
assert_eq 201 "$code" "COPY's upload link"
assert_eq false "$(itest_json "$body" present)" "files not uploaded yet"
assert_eq "$SANDBOX_URL/e2b/templates/e2b-raw/files/$fh" "$(itest_json "$body" url)" "the link is this server's"
assert_eq "$SANDBOX_TOKEN" "$(itest_json "$body" headers.X-API-Key)" "with the caller's own key"
tar -C "$ITEST_TMP" -cf "$ITEST_TMP/raw-$$.tar" "$(basename "$ITEST_TMP/e2b-call-$$")"
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "X-API-Key: $SANDBOX_TOKEN" --data-binary "@$ITEST_TMP/raw-$$.tar" \
  "$SANDBOX_URL/e2b/templates/e2b-raw/files/$fh")
assert_eq 200 "$code" "the upload"
e2b_call GET "/e2b/templates/e2b-raw/files/$fh" "$SANDBOX_TOKEN"
assert_eq true "$(itest_json "$body" present)" "the uploaded files are present"
e2b_call GET "/e2b/templates/e2b-raw/files/$fh" "$other_key"
assert_eq false "$(itest_json "$body" present)" "another tenant does not see them"
head -c 600000 /dev/urandom >"$ITEST_TMP/big-$$.bin"
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT -H "X-API-Key: $SANDBOX_TOKEN" --data-binary "@$ITEST_TMP/big-$$.bin" \
  "$SANDBOX_URL/e2b/templates/e2b-raw/files/$fh")
assert_eq 413 "$code" "an upload over 512 KiB"
code=$(curl -s -o /dev/null -w '%{http_code}' -X PUT --data-binary "@$ITEST_TMP/raw-$$.tar" \
  "$SANDBOX_URL/e2b/templates/e2b-raw/files/$fh")
assert_eq 401 "$code" "an upload without a key"
nh=$(printf 'none-%s' "$$" | sha256sum | cut -d' ' -f1)
e2b_call POST "/e2b/v2/templates/e2b-raw/builds/$raw_build" "$SANDBOX_TOKEN" \
  "{\"fromImage\":\"x\",\"steps\":[{\"type\":\"COPY\",\"args\":[\"a\",\"/a\"],\"filesHash\":\"$nh\"}]}"
assert_eq 400 "$code" "a COPY of files never uploaded"
assert_contains "$(itest_json "$body" message)" "were not uploaded" "its message"

# ---- the SDK
out="$ITEST_TMP/e2b-check-$$.out"
if ! (cd "$dir" && E2B_CHECK_PARTS=${E2B_CHECK_PARTS:-all} timeout 240 node e2b_check.mjs) >"$out" 2>&1; then
  cat "$out"
  fail "tests/e2b/e2b_check.mjs failed (output above)"
fi
cat "$out"
assert_contains "$(cat "$out")" "e2b-check: all ok" "the E2B SDK's run"
# ---- what /v1 saw: each command an exec operation (reported by the worker
# when it ended, request via "e2b", created by the caller's token), each
# file write a files.uploaded event
e2b_execs() {
  itest_http GET "/v1/events?kind=sandbox.shell&limit=1000" "$SANDBOX_TOKEN"
  [ "$HTTP_STATUS" = 200 ] && python3 -c '
import json, sys
ev = [e for e in json.loads(sys.argv[1])["events"] if e["data"].get("via") == "e2b"]
sys.exit(0 if len(ev) >= 8 else 1)' "$HTTP_BODY"
}
itest_wait_until 30 "the E2B processes recorded as exec operations" e2b_execs
op=$(python3 -c '
import json, sys
ev = [e for e in json.loads(sys.argv[1])["events"] if e["data"].get("via") == "e2b"]
print(ev[0]["operation_id"])' "$HTTP_BODY")
itest_http GET "/v1/operations/$op" "$SANDBOX_TOKEN"
assert_eq 200 "$HTTP_STATUS" "GET the operation of an E2B process"
assert_eq exec "$(itest_json "$HTTP_BODY" operation.kind)" "the kind of an E2B process's operation"
assert_eq succeeded "$(itest_json "$HTTP_BODY" operation.state)" "the state of an E2B process's operation"
itest_http GET "/v1/events?kind=files.uploaded&limit=100" "$SANDBOX_TOKEN"
assert_contains "$HTTP_BODY" '"format":"e2b"' "the files.uploaded events of E2B writes"

e2b_ms=$(sed -n 's/.*timing .*total_ms=\([0-9]*\).*/\1/p' "$out")
[ -n "$e2b_ms" ] || fail "the E2B run printed no timing line"

# ---- the same through the CLI: create, then the first command
t0=$(date +%s%N)
assert_exit 0 sandbox create --wait --timeout 120
read -r cli_sbx _ <<<"$ITEST_OUT"
itest_track "$cli_sbx"
assert_exit 0 sandbox exec "$cli_sbx" -- sh -c 'echo out'
cli_ms=$((($(date +%s%N) - t0) / 1000000))
itest_log "create -> first command: E2B SDK ${e2b_ms} ms, sandbox CLI ${cli_ms} ms (e2b $sdk_version)"
echo "the official E2B SDK $sdk_version drives Sandbox; create -> first command: E2B ${e2b_ms} ms, CLI ${cli_ms} ms"
