#!/usr/bin/env bash
# The Python SDK (client/python, import name sandbox_client) against real
# controllers: tests/integration/sdk_python_check.py drives every method of
# docs/sdk-python.md on the run's controller and worker (exec with exact
# bytes and stdin, streamed output arriving before the command ends, a
# detached exec followed and cancelled, a 50 MiB file both ways with equal
# sha256, a directory tree up and down, logs, routes, extend, events with
# the cursor, the context manager deleting, a create whose answer is lost
# retried into exactly one sandbox, a volume written through one sandbox's
# mount and read through the next one's read-only mount) and the error
# classes the API can be made to answer; on a second controller of its
# own (TLS with a CA this test makes, small request rates, a database of
# its own so its admin calls touch nothing shared): TLS verification, RateLimited with
# retry_after, tenants, tokens, pools, workers. Then the package is
# installed offline into a venv (pip --no-index --no-build-isolation) and
# the example examples/sdk/python/run_tests.py runs with it.
# Needs Debian's python3-venv and python3-wheel. Loopback only.
# itest-parallel
# itest-timeout: 240
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

repo=$(cd "$(dirname "$0")/../.." && pwd)
# the package is imported from the source tree: leave no __pycache__ there
export PYTHONDONTWRITEBYTECODE=1
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
work="$ITEST_TMP/sdkpy-$$"
mkdir -p "$work"

tenant=$(itest_tenant itest-sdkpy)
member=$(itest_token "$tenant" member)
qtenant=$(itest_tenant itest-sdkpy-q)
qmember=$(itest_token "$qtenant" member)

# ---- certificates: a CA, a server certificate it signed, another CA
pki="$work/pki"
itest_make_pki "$pki"

# ---- the TLS controller: a database of its own, 20 requests a second per token
itest_private_db itest_sdkpy
tls_pid=
sdk_teardown() {
  [ -z "$tls_pid" ] || itest_stop_pid "$tls_pid" "TLS controller" 30 || true
  itest_drop_private_db
}
itest_on_exit sdk_teardown
# what the check script could not delete (it stopped early)
itest_track_tenant "$tenant"
itest_track_tenant "$qtenant"
"$SANDBOXD" migrate --database-url "$url" >/dev/null
tls_log="$ITEST_TMP/sdkpy-controller-$$.log"
itest_watch_log "$tls_log"
tls_port=$(itest_free_port)
tls_rport=$(itest_free_port)
SANDBOX_RATE_REQUESTS_PER_SECOND=20 SANDBOX_RATE_REQUESTS_BURST=20 \
  "$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$tls_port" --route-listen "127.0.0.1:$tls_rport" \
  --api-tls-cert "$pki/server.pem" --api-tls-key "$pki/server.key" >>"$tls_log" 2>&1 </dev/null &
tls_pid=$!
tls_url="https://127.0.0.1:$tls_port"
CURL_CA_BUNDLE="$pki/ca.pem" itest_wait_healthz "$tls_url" "$tls_pid" "TLS controller" "$tls_log" ||
  fail "the TLS controller did not come up"
mktok() { # TENANT ROLE [WORKER NAME]: a token of the private database
  local t
  t=$("$SANDBOXD" token create --database-url "$url" --tenant "$1" --role "$2" ${3:+--worker "$3"})
  printf '%s\n' "$t" >>"$ITEST_TMP/secrets.txt"
  printf '%s\n' "$t"
}
tls_admin=$(mktok itest-sdkpy-admin admin)
tls_wname="sdkpy-worker-$$"
tls_worker=$(mktok itest-sdkpy-workers worker "$tls_wname")

# ---- every method against the real controllers
t0=$(date +%s)
rc=0
env SDK_ADMIN="$ITEST_ADMIN_TOKEN" SDK_MEMBER="$member" SDK_TENANT="$tenant" \
  SDK_QUOTA_MEMBER="$qmember" SDK_QUOTA_TENANT="$qtenant" ITEST_IMAGE="$ITEST_IMAGE" \
  SDK_TLS_URL="$tls_url" SDK_TLS_CA="$pki/ca.pem" SDK_OTHER_CA="$pki/other.pem" SDK_TLS_ADMIN="$tls_admin" \
  SDK_TLS_WORKER="$tls_worker" SDK_TLS_WORKER_NAME="$tls_wname" SDK_WORK="$work" SDK_REPO="$repo" \
  PYTHONPATH="$repo/client/python" \
  timeout 180 "$py" "$repo/tests/integration/sdk_python_check.py" >"$work/check.out" 2>&1 || rc=$?
cat "$work/check.out" >&2
assert_eq 0 "$rc" "exit code of sdk_python_check.py (its output is above)"
assert_contains "$(cat "$work/check.out")" "SDK-PYTHON-OK" "the check script ran to its end"
itest_log "sdk_python_check.py passed in $(($(date +%s) - t0)) s"

# ---- offline install into a venv (Debian: python3-venv; the venv sees
# python3-wheel through --system-site-packages, which setuptools needs to
# build the wheel). Nothing may come from an index or a local wheel folder.
"$py" -c 'import ensurepip, wheel' 2>/dev/null ||
  fail "$py lacks ensurepip or wheel: apt-get install python3-venv python3-wheel"
cp -r "$repo/client/python" "$work/src"
rm -rf "$work/src/build" "$work/src"/*.egg-info
"$py" -m venv --system-site-packages "$work/venv"
assert_exit 0 env -u PIP_FIND_LINKS PIP_CONFIG_FILE=/dev/null PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
  "$work/venv/bin/python" -m pip install --no-index --no-build-isolation --quiet "$work/src"
assert_exit 0 env -u PYTHONPATH "$work/venv/bin/python" -c '
import os, sys, sandbox_client
d = os.path.dirname(sandbox_client.__file__)
assert d.startswith(sys.prefix), d
assert os.path.exists(os.path.join(d, "py.typed")), "py.typed is not installed"
print(sandbox_client.__version__)'
itest_log "installed offline into a venv: sandbox_client $ITEST_OUT"

# ---- the example, with the installed package
assert_exit 0 env -u PYTHONPATH SANDBOX_URL="$SANDBOX_URL" SANDBOX_TOKEN="$member" XDG_CONFIG_HOME="$work/none" \
  timeout 120 "$work/venv/bin/python" "$repo/examples/sdk/python/run_tests.py"
assert_contains "$ITEST_OUT" "ok   div_by_zero" "the example streams the tests' output"
assert_contains "$ITEST_ERR" "report: 5 passed, 0 failed" "the example fetched the report"
assert_contains "$ITEST_ERR" "untrusted" "the example's sandbox is classified untrusted"
left=$(PYTHONPATH="$repo/client/python" "$py" -c '
import sys
from sandbox_client import Client
print(sum(1 for s in Client(sys.argv[1], sys.argv[2]).sandboxes.list(labels={"purpose": "run-tests"})))
' "$SANDBOX_URL" "$member")
assert_eq 0 "$left" "sandboxes the example left behind"
itest_log "Python SDK: every method, errors, retries, TLS, offline install and the example passed"
