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
export E2B_API_URL="$SANDBOX_URL/e2b" E2B_SANDBOX_URL="$SANDBOX_URL/e2b/envd" E2B_API_KEY="$SANDBOX_TOKEN"
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

# ---- the SDK
out="$ITEST_TMP/e2b-check-$$.out"
# envd (commands, files) comes with the worker's side of it; the control
# API is checked on its own until then
if ! (cd "$dir" && E2B_CHECK_PARTS=control timeout 240 node e2b_check.mjs) >"$out" 2>&1; then
  cat "$out"
  fail "tests/e2b/e2b_check.mjs failed (output above)"
fi
cat "$out"
assert_contains "$(cat "$out")" "e2b-check: all ok" "the E2B SDK's run"
e2b_ms=$(sed -n 's/.*timing create_ms=\([0-9]*\).*/\1/p' "$out")

# ---- the same through the CLI: create until it runs
t0=$(date +%s%N)
assert_exit 0 sandbox create --wait --timeout 120
read -r cli_sbx _ <<<"$ITEST_OUT"
itest_track "$cli_sbx"
cli_ms=$((($(date +%s%N) - t0) / 1000000))
itest_log "create until running: E2B SDK ${e2b_ms} ms, sandbox CLI ${cli_ms} ms (e2b $sdk_version)"
echo "the official E2B SDK $sdk_version drives Sandbox's control API; create: E2B ${e2b_ms} ms, CLI ${cli_ms} ms"
