#!/usr/bin/env bash
# sandbox-mcp through the official MCP TypeScript SDK and raw JSON-RPC
# (tests/mcp/client.mjs) with a member token of a tenant of its own: tool
# schemas and annotations, the full lifecycle with structured results,
# public routes (share with its URL and one-time access token, list,
# unshare, gone with the sandbox), volumes (sandbox_volume_create, mounted
# read-write then read-only through sandbox_create, sandbox_volumes,
# sandbox_volume_delete: conflict while mounted, then deleted), isError for policy_denied / not_found /
# unauthenticated / invalid_argument, progress and cancellation, parse
# errors and unknown methods, version negotiation, exit on stdin EOF, the
# flag / environment / config file sources. Installs the
# SDK with npm in tests/mcp when node_modules is missing or stale.
# itest-timeout: 240
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

mcp_dir=$(cd "$(dirname "$0")/../mcp" && pwd)
mcp_bin="$(dirname "$SANDBOX_CLI")/sandbox-mcp"
[ -x "$mcp_bin" ] || fail "$mcp_bin does not exist or is not executable: build it (ninja -C $(dirname "$(dirname "$SANDBOX_CLI")"))"

# ---- Node.js and the SDK

itest_npm_install "$mcp_dir" "the MCP SDK" || fail "$ITEST_NPM_ERROR"
[ -f "$mcp_dir/node_modules/@modelcontextprotocol/sdk/package.json" ] \
  || fail "$mcp_dir/node_modules has no @modelcontextprotocol/sdk after npm"

# ---- a tenant and a member token of our own

tenant=$(itest_tenant itest-mcp)
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
assert_exit 0 sandbox tenants create "$tenant"
assert_exit 0 sandbox tokens create --tenant "$tenant" --role member --name mcp
member=$ITEST_OUT

# An admin's sandbox_create in a tenant that does not exist is not_found,
# as on the API and the CLI (raw JSON-RPC; stdin stays open until it answered).
mcp_out=$({ printf '%s\n' \
    '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"itest","version":"1"}}}' \
    '{"jsonrpc":"2.0","method":"notifications/initialized"}' \
    "{\"jsonrpc\":\"2.0\",\"id\":2,\"method\":\"tools/call\",\"params\":{\"name\":\"sandbox_create\",\"arguments\":{\"tenant\":\"no-such-$tenant\"}}}"
  for _ in $(seq 100); do sleep 0.1; [ -s "$ITEST_TMP/mcp-admin.out" ] && grep -q '"id":2' "$ITEST_TMP/mcp-admin.out" && break; done
} | SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN timeout 30 "$mcp_bin" 2>/dev/null | tee "$ITEST_TMP/mcp-admin.out") || true
id2=$(printf '%s\n' "$mcp_out" | grep '"id":2' || true)
assert_contains "$id2" '"isError":true' "MCP sandbox_create in a missing tenant is an error"
assert_contains "$id2" 'not_found' "MCP sandbox_create in a missing tenant is not_found"
n=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT count(*) FROM tenants WHERE name = 'no-such-$tenant'")
assert_eq 0 "$n" "no tenant made through MCP"

# A NUL byte inside a line is a parse error (-32700) for that line only: the
# next message is answered (a reader measuring lines with strlen joined it to
# the broken one and never answered it).
nul_out=$(printf '%s\n%s\0%s\n%s\n' '{"jsonrpc":"2.0","id":1,"method":"ping"}' '{"jsonrpc":"2.0","id":2,' \
  '"method":"ping"}' '{"jsonrpc":"2.0","id":3,"method":"ping"}' \
  | SANDBOX_TOKEN=$member timeout 30 "$mcp_bin" 2>/dev/null) || true
assert_contains "$nul_out" '"id":1,"result":{}' "MCP ping before the NUL line"
assert_contains "$nul_out" '"code":-32700' "MCP parse error for a line with a NUL byte"
assert_contains "$nul_out" 'NUL byte' "the parse error names the NUL byte"
assert_contains "$nul_out" '"id":3,"result":{}' "MCP ping after the NUL line is answered"

# Whatever client.mjs leaves behind (it deletes its sandboxes itself, also
# when a check fails) is deleted when the test exits.
itest_track_tenant "$tenant"

# ---- the client

client_log="$ITEST_TMP/mcp-client.log"
rc=0
SANDBOX_MCP=$mcp_bin SANDBOX_URL=$SANDBOX_URL SANDBOX_TOKEN=$member MCP_TEST_IMAGE=$ITEST_IMAGE \
  timeout 200 node "$mcp_dir/client.mjs" 2>&1 | tee "$client_log" || rc=$?
if [ "$rc" -ne 0 ]; then
  why=$(grep -m 1 '^FAIL' "$client_log" || true)
  [ "$rc" -ne 124 ] || why="client.mjs did not finish within 200 s (last line: $(tail -n 1 "$client_log"))"
  fail "tests/mcp/client.mjs exited $rc: ${why:-no FAIL line, see the output above}"
fi
assert_contains "$(tail -n 1 "$client_log")" "checks passed" "last line of client.mjs"

# it cleaned up after itself: nothing of the tenant is left running
assert_exit 0 sandbox list --tenant "$tenant" --json
assert_eq 0 "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["sandboxes"]))' "$ITEST_OUT")" \
  "live sandboxes of $tenant after client.mjs"
SANDBOX_TOKEN=$member assert_exit 0 sandbox volumes list --json
assert_eq 0 "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["volumes"]))' "$ITEST_OUT")" \
  "volumes of $tenant after client.mjs"
echo "sandbox-mcp answers the MCP SDK and raw JSON-RPC as its contract says"
