#!/usr/bin/env bash
# The TypeScript SDK (client/typescript, @sandbox/client) against the real
# controller: npm ci and tsc build it, `npm pack` makes a tarball with the
# compiled entries and their type declarations, the browser entry imports no
# Node module, then client/typescript/test/integration.mjs runs every method
# (sandboxes, exec with streamed output, detached exec followed and
# cancelled, files with a 50 MiB round trip, directory upload/download as tar,
# logs, routes, extend, events with the cursor, operations, AbortSignal,
# snapshots, a volume written through one sandbox's mount and read through
# the next one's read-only mount, admin calls), provokes each error class it can for real (and checks the
# mapping of every code of docs/api.md's table), makes a create whose answer
# is lost and checks its retry made one sandbox, and talks to a second
# controller of this test's own serving TLS with a private CA and small rate
# limits (RateLimited, Retry-After). Last, examples/sdk/typescript runs.
# Installs the SDK's build tools with npm when node_modules is missing or stale.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

root=$(cd "$(dirname "$0")/../.." && pwd)
sdk_dir="$root/client/typescript"
example_dir="$root/examples/sdk/typescript"

# ---- Node.js, npm, the build

itest_npm_install "$sdk_dir" "the SDK's build tools (typescript)" || fail "$ITEST_NPM_ERROR"
[ -x "$sdk_dir/node_modules/.bin/tsc" ] || fail "$sdk_dir/node_modules has no typescript (tsc) after npm"

rm -rf "$sdk_dir/dist"
assert_exit 0 bash -c "cd '$sdk_dir' && ./node_modules/.bin/tsc -p tsconfig.json"
for f in index.js index.d.ts errors.js node/index.js node/index.d.ts node/tar.js; do
  [ -s "$sdk_dir/dist/$f" ] || fail "tsc made no dist/$f"
done
# the browser entry and everything it imports use web APIs only
if grep -l -E "from ['\"](node:|fs|https?|path|os|stream|crypto)['\"]|require\(" "$sdk_dir"/dist/*.js; then
  fail "a file of the browser entry (dist/*.js above) imports a Node module"
fi
assert_eq 0 "$(node -p "Object.keys(require('$sdk_dir/package.json').dependencies || {}).length")" \
  "runtime dependencies of @sandbox/client"

# npm pack: the tarball carries the compiled entries, their declarations, the README
pack_dir="$ITEST_TMP/sdk-ts-pack"
mkdir -p "$pack_dir"
assert_exit 0 bash -c "cd '$sdk_dir' && npm pack --ignore-scripts --pack-destination '$pack_dir' 2>/dev/null"
tgz=$(ls "$pack_dir"/sandbox-client-*.tgz 2>/dev/null | head -n 1)
[ -n "$tgz" ] || fail "npm pack made no sandbox-client-*.tgz in $pack_dir"
listing=$(tar -tzf "$tgz")
for f in package/package.json package/README.md package/dist/index.js package/dist/index.d.ts \
  package/dist/node/index.js package/dist/node/index.d.ts; do
  assert_contains "$listing" "$f" "npm pack's tarball"
done
assert_not_contains "$listing" "package/src/" "npm pack's tarball (sources stay out)"
assert_not_contains "$listing" "node_modules" "npm pack's tarball"

# the packed tarball installs and imports like a published package (no registry: no dependencies)
consumer="$ITEST_TMP/sdk-ts-consumer"
mkdir -p "$consumer"
printf '{"name":"consumer","private":true,"type":"module"}\n' >"$consumer/package.json"
assert_exit 0 bash -c "cd '$consumer' && npm install --offline --no-audit --no-fund '$tgz' >/dev/null 2>&1"
assert_exit 0 bash -c "cd '$consumer' && node -e \"import('@sandbox/client').then(m => { if (typeof m.Client !== 'function' || typeof m.NotFound !== 'function' || typeof m.packDir !== 'function') process.exit(1) })\""
assert_exit 0 bash -c "cd '$consumer' && node -e \"import('@sandbox/client/browser').then(m => { if (typeof m.Client !== 'function' || 'packDir' in m) process.exit(1) })\""

# ---- a controller of our own: TLS with a CA this test makes, small rate limits

pki="$ITEST_TMP/sdk-ts-pki"
itest_make_pki "$pki"

tport=$(itest_free_port)
trport=$(itest_free_port)
tlog="$ITEST_TMP/sdk-ts-tls-controller.log"
itest_watch_log "$tlog"
# (1 request a second per token, bursts of 25: the rate check empties one
# token's bucket; the TLS checks stay inside the burst)
SANDBOX_HTTP_THREADS=2 SANDBOX_RATE_REQUESTS_PER_SECOND=1 SANDBOX_RATE_REQUESTS_BURST=25 \
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$tport" \
  --route-listen "127.0.0.1:$trport" --api-tls-cert "$pki/server.pem" --api-tls-key "$pki/server.key" \
  >>"$tlog" 2>&1 </dev/null &
tpid=$!
itest_track_pid "$tpid"
CURL_CA_BUNDLE="$pki/ca.pem" itest_wait_healthz "https://127.0.0.1:$tport" "$tpid" "TLS controller" "$tlog" \
  || fail "the TLS controller did not come up"

# ---- the test program

tenant=$(itest_tenant itest-sdk-ts)
ids_file="$ITEST_TMP/sdk-ts-ids-$$"
: >"$ids_file"
sdk_leftovers() { # what the program made and may have left (it deletes its own as it goes)
  local id
  for id in $(sort -u "$ids_file"); do itest_track "$id"; done
}
itest_on_exit sdk_leftovers
itest_track_tenant "$tenant"

prog_tmp="$ITEST_TMP/sdk-ts-work"
mkdir -p "$prog_tmp"
log="$ITEST_TMP/sdk-ts-client.log"
rc=0
env -u SANDBOX_TOKEN -u SANDBOX_CA_FILE -u SANDBOX_CONTEXT ADMIN_TOKEN="$ITEST_ADMIN_TOKEN" IMAGE="$ITEST_IMAGE" \
  TLS_URL="https://127.0.0.1:$tport" CA_FILE="$pki/ca.pem" OTHER_CA_FILE="$pki/other.pem" \
  API_MD="$root/docs/api.md" TEST_TMP="$prog_tmp" IDS_FILE="$ids_file" TENANT="$tenant" \
  timeout 200 node "$sdk_dir/test/integration.mjs" >"$log" 2>&1 || rc=$?
cat "$log" >&2
if [ "$rc" -ne 0 ]; then
  why=$(grep -m 1 '^FAIL' "$log" || true)
  [ "$rc" -ne 124 ] || why="integration.mjs did not finish within 200 s (last line: $(tail -n 1 "$log"))"
  fail "client/typescript/test/integration.mjs exited $rc: ${why:-no FAIL line, see the output above}"
fi
assert_contains "$(tail -n 1 "$log")" "checks passed" "last line of integration.mjs"

# ---- the example: examples/sdk/typescript/run-tests.mjs against the built SDK

ex_log="$ITEST_TMP/sdk-ts-example.log"
rc=0
(cd "$example_dir" && timeout 120 npm ci --offline --no-audit --no-fund >"$ex_log" 2>&1) || rc=$?
[ "$rc" -eq 0 ] || { cat "$ex_log" >&2; fail "npm ci in $example_dir (the SDK, a local file: dependency) failed"; }
ex_tenant=$(itest_tenant itest-sdk-ex)
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 "$SANDBOX_CLI" tenants create "$ex_tenant"
ex_token=$(itest_token "$ex_tenant" member)
example_leftovers() {
  local json id
  json=$(SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" list --tenant "$ex_tenant" --json 2>/dev/null) || return 0
  for id in $(python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.loads(sys.argv[1]).get("sandboxes", [])))' "$json"); do
    itest_track "$id"
  done
}
itest_on_exit example_leftovers
rc=0
(cd "$prog_tmp" && env -u SANDBOX_CA_FILE -u SANDBOX_CONTEXT SANDBOX_TOKEN="$ex_token" SANDBOX_IMAGE="$ITEST_IMAGE" \
  timeout 120 node "$example_dir/run-tests.mjs" >"$ex_log" 2>&1) || rc=$?
cat "$ex_log" >&2
assert_eq 0 "$rc" "exit code of examples/sdk/typescript/run-tests.mjs"
assert_contains "$(cat "$ex_log")" "ok 3 - the greeting names the user" "the example streamed the test suite's output"
assert_contains "$(cat "$prog_tmp/report.txt")" "3 passed, 0 failed" "the report the example fetched"
assert_contains "$(cat "$ex_log")" "deleted sbx_" "the example deleted its sandbox"
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 "$SANDBOX_CLI" list --tenant "$ex_tenant" --json
assert_eq 0 "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["sandboxes"]))' "$ITEST_OUT")" \
  "live sandboxes of the example's tenant afterwards"
echo "@sandbox/client builds, packs, and works against the controller (plain and TLS)"
