#!/usr/bin/env bash
# Public routes and a worker's absence (issues 6 and 29): a route to a
# sandbox on a worker that dies stops answering 200 at once (the controller
# cannot reach the worker: 502); once the controller marks the worker
# unreachable (worker_timeout_seconds) it answers 503 saying so, and the
# route stays active; the worker started again under its name finds the
# sandbox's container again and the route answers 200. (Past the grace,
# worker_lost_after_seconds, the sandbox is lost and its route removed:
# test_worker_outage.)
# itest-waits: most of it is the controller's worker timeout
# itest-timeout: 180
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-rl)
itest_as_admin "$tenant"
doomed="itest-doomed-$RANDOM$RANDOM"

finish() {
  itest_delete_tracked
  "$SANDBOX_CLI" workers drain "$doomed" >/dev/null 2>&1
}
itest_on_exit finish

tok=$(itest_token itest-workers worker "$doomed")
port=$(itest_free_port)
start_doomed() {
  SANDBOX_WORKER_TOKEN="$tok" SANDBOX_WORKER_LABELS="role=doomed" SANDBOX_WORKER_GVISOR_RUNTIME='' \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --listen "127.0.0.1:$port" --worker-name "$doomed" \
    --docker-socket /var/run/docker.sock >>"$ITEST_TMP/worker-$doomed.log" 2>&1 </dev/null &
  wpid=$!
  itest_track_pid "$wpid"
  itest_wait_until 60 "worker $doomed ready" itest_worker_ready "$doomed"
}
itest_watch_log "$ITEST_TMP/worker-$doomed.log"
start_doomed

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
assert_eq 502 "$code" "the route while its worker is dead but not yet marked unreachable"
route_away() { [ "$(curl -s -o "$ITEST_TMP/rl-body" -w '%{http_code}' --max-time 10 "$url")" = 503 ]; }
itest_wait_until 90 "the route of a sandbox on an unreachable worker to answer 503" route_away
assert_contains "$(cat "$ITEST_TMP/rl-body")" "unreachable" "the 503 says why"
assert_exit 0 sandbox get "$sbx" --json
assert_eq running "$(itest_json "$ITEST_OUT" sandbox.phase)" "the sandbox of an unreachable worker"
assert_eq "$doomed" "$(itest_json "$ITEST_OUT" sandbox.unreachable.worker)" "sandbox.unreachable.worker"
assert_exit 0 sandbox routes "$sbx" --json
python3 - "$ITEST_OUT" "$rid" <<'EOF' || fail "the route is not listed active: $ITEST_OUT"
import json, sys
doc = json.loads(sys.argv[1])
r = [x for x in doc["routes"] if x["id"] == sys.argv[2]]
sys.exit(0 if r and r[0]["state"] == "active" else 1)
EOF
# back under its name: the same container, and the route answers again
start_doomed
route_back() { [ "$(curl -s --max-time 10 "$url")" = alive ]; }
itest_wait_until 30 "the route answering again once its worker is back" route_back
echo "a route answers 502, then 503 while its worker is unreachable, and 200 once the worker is back"
