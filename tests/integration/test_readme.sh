#!/usr/bin/env bash
# The README's walkthrough runs verbatim: every ```sh block of "Five minutes
# with the CLI" is run, in order, in one bash session, from a folder laid out
# like the repository after `tools/run.sh` (build/ and .sandbox/), against a
# fresh `sandboxd all` with its embedded PostgreSQL and the default image;
# any command whose output or exit status differs from what the README
# shows fails the test (ids, secrets and times masked; the README's ports
# 8080/8081 become the test's own).
# itest-standalone
# itest-after-shared: `sandboxd all` as the README runs it has the open network
# itest-timeout: 420
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

here=$(cd "$(dirname "$0")" && pwd)
readme="$here/../../README.md"
[ -f "$readme" ] || fail "no README.md at $readme"

work="$ITEST_TMP/readme-$$"
mkdir -p "$work"
ln -s "$ITEST_BUILD" "$work/build"
port=$(itest_free_port)
rport=$(itest_free_port)
wname="readme-$$"
log="$ITEST_TMP/readme-all-$$.log"
itest_watch_log "$log"
itest_watch_log "$work/.sandbox/postgres.log"

# whatever the walkthrough leaves behind goes with the test
itest_on_exit "ids=\$(docker ps -aq --filter label=dev.sandbox.worker=$wname 2>/dev/null); [ -z \"\$ids\" ] || docker rm -f \$ids >/dev/null 2>&1"

# as tools/run.sh starts it (its default data dir, from the repository's root)
(cd "$work" && exec env -u SANDBOX_DATABASE_URL -u DATABASE_URL -u SANDBOX_ROUTE_LISTEN \
  "$SANDBOXD" all --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" --worker-name "$wname" \
  >>"$log" 2>&1 </dev/null) &
all_pid=$!
itest_track_pid "$all_pid"
itest_wait_healthz "http://127.0.0.1:$port" "$all_pid" "sandboxd all" "$log" || fail "sandboxd all did not come up"
itest_wait_until 30 "the bootstrap admin token" test -s "$work/.sandbox/admin.token"
ITEST_ADMIN_TOKEN=$(tr -d '[:space:]' <"$work/.sandbox/admin.token")
printf '%s\n' "$ITEST_ADMIN_TOKEN" >>"$ITEST_TMP/secrets.txt"
export SANDBOX_URL="http://127.0.0.1:$port"
itest_wait_until 60 "the embedded worker to be ready" itest_worker_ready "$wname"
unset SANDBOX_URL SANDBOX_TOKEN

rc=0
(cd "$work" && env -i PATH="$PATH" HOME="$work" TERM=dumb LANG=C.UTF-8 \
  python3 "$here/readme_walkthrough.py" "$readme" "Five minutes with the CLI" "$work" \
  "127.0.0.1:8080=127.0.0.1:$port" "127.0.0.1:8081=127.0.0.1:$rport") || rc=$?
[ "$rc" -eq 0 ] || fail "the README walkthrough did not run as shown (see the steps above)"

itest_stop_pid "$all_pid" "sandboxd all" 30 || fail "sandboxd all did not stop cleanly after SIGTERM"
