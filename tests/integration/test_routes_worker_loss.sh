#!/usr/bin/env bash
# Public routes and worker loss (issue 6): a route to a sandbox on a worker
# that dies stops answering 200 at once (the controller cannot reach the
# worker: 502), and once the controller declares the worker lost the
# sandbox is lost and its route removed in the same transaction: 404, and
# `sandbox routes --all` shows it removed.
# itest-waits: most of it is the controller's worker timeout
# itest-timeout: 180
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-rl)
itest_as_admin "$tenant"
shared=${ITEST_WORKER_NAME:-itest-worker}
doomed="itest-doomed-$RANDOM$RANDOM"

finish() {
  itest_delete_tracked
  "$SANDBOX_CLI" workers drain "$doomed" >/dev/null 2>&1
}
itest_on_exit finish

tok=$(itest_token itest-workers worker "$doomed")
port=$(itest_free_port)
SANDBOX_WORKER_TOKEN="$tok" SANDBOX_WORKER_LABELS="role=doomed" SANDBOX_WORKER_GVISOR_RUNTIME= \
  "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --listen "127.0.0.1:$port" --worker-name "$doomed" \
  --docker-socket /var/run/docker.sock >>"$ITEST_TMP/worker-$doomed.log" 2>&1 </dev/null &
wpid=$!
itest_track_pid "$wpid"
itest_watch_log "$ITEST_TMP/worker-$doomed.log"
itest_wait_until 60 "worker $doomed ready" itest_worker_ready "$doomed"

assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --selector role=doomed --wait --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
on=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT w.name FROM sandboxes s JOIN workers w ON w.id = s.worker_id WHERE s.id = '$sbx'")
assert_eq "$doomed" "$on" "the sandbox runs on the worker that will die"
assert_exit 0 sandbox exec "$sbx" -- sh -c 'mkdir -p /tmp/w && echo alive >/tmp/w/index.html && httpd -p 8080 -h /tmp/w'
assert_exit 0 sandbox share "$sbx" --port 8080 --auth public --json
url=$(itest_json "$ITEST_OUT" route.url)
rid=$(itest_json "$ITEST_OUT" route.id)
assert_eq alive "$(curl -s --max-time 10 "$url")" "the route before the worker dies"

kill -9 "$wpid"
wait "$wpid" 2>/dev/null || true
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 20 "$url" || true)
assert_eq 502 "$code" "the route while its worker is dead but not yet declared lost"
route_gone() { [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url")" = 404 ]; }
itest_wait_until 90 "the route of a sandbox on a lost worker to answer 404" route_gone
assert_exit 0 sandbox get "$sbx" --json
assert_eq lost "$(itest_json "$ITEST_OUT" sandbox.phase)" "the sandbox is lost with its worker"
assert_exit 0 sandbox routes "$sbx" --all --json
python3 - "$ITEST_OUT" "$rid" <<'EOF' || fail "the route is not listed removed: $ITEST_OUT"
import json, sys
doc = json.loads(sys.argv[1])
r = [x for x in doc["routes"] if x["id"] == sys.argv[2]]
sys.exit(0 if r and r[0]["state"] == "removed" else 1)
EOF
# the container the dead worker left is removed by the test's cleanup
docker rm -f "sbx-$sbx" >/dev/null 2>&1 || true
