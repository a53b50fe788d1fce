#!/usr/bin/env bash
# A sandbox's phase tells what the runtime observed: a container killed
# (docker kill), whose main process exited, that the OOM killer ended, or that
# was removed becomes failed with the matching failure within one heartbeat;
# its event is in /v1/events, execs are refused with 409 naming the phase,
# the worker removes the dead container, and delete still ends deleted. A
# create from an image whose main process cannot start fails with
# sandbox_exited and a failure saying why.
# itest-timeout: 240
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

# The shared worker beats every heartbeat_seconds (default 5 s; run.sh sets
# no other): a failure must show within one beat, plus the polling here
# (a `sandbox get` and a JSON parse a try, over a second each on a busy
# host: 8.2 s was seen once against HB + 2), still short of a second beat.
HB=5
SLACK=4
itest_as_member itest-observed

json_get() { # json_get SBX PATH: a field of `sandbox get --json`
  local out
  out=$(sandbox get "$1" --json) || return 1
  itest_json "$out" "sandbox.$2" "$2"
}
phase_is() { [ "$(json_get "$1" phase)" = "$2" ]; }
container_of() { docker ps -aq --filter "label=dev.sandbox.id=$1"; }
no_container() { [ -z "$(container_of "$1")" ]; }

create() { # create [FLAGS...]: prints the sandbox id of a running sandbox
  local sbx
  assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --ttl 600 --wait --timeout 300 "$@"
  read -r sbx _ <<<"$ITEST_OUT"
  assert_match "$sbx" '^sbx_' "sandbox id"
  printf '%s\n' "$sbx"
}

# wait_failed SBX T0 MAX: waits until SBX is failed and checks it took at
# most MAX seconds since T0 (epoch seconds with decimals).
wait_failed() {
  local sbx=$1 t0=$2 max=$3 took
  itest_wait_until $((max + 20)) "sandbox $sbx failed" phase_is "$sbx" failed
  took=$(python3 -c "import time,sys; print('%.1f' % (time.time() - float(sys.argv[1])))" "$t0")
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)" "$took" "$max" \
    || fail "sandbox $sbx failed ${took}s after its container stopped; expected within ${max}s"
  itest_log "sandbox $sbx failed ${took}s after its container stopped"
}

# check_failed SBX REASON CODE: the failure in the JSON and the CLI line, the
# event, the exec refusal, the container removed by the worker.
check_failed() {
  local sbx=$1 reason=$2 code=$3 out f
  assert_exit 0 sandbox get "$sbx" --json
  out=$ITEST_OUT
  assert_eq "$reason" "$(itest_json "$out" sandbox.failure.reason)" "failure.reason of $sbx"
  if [ -n "$code" ]; then
    assert_eq "$code" "$(itest_json "$out" sandbox.failure.exit_code)" "failure.exit_code of $sbx"
  fi
  f=$(itest_json "$out" sandbox.failure.message)
  [ -n "$f" ] || fail "empty failure.message of $sbx"
  assert_match "$(itest_json "$out" sandbox.failure.at)" '^20[0-9][0-9]-' "failure.at of $sbx"
  assert_exit 0 sandbox get "$sbx"
  assert_contains "$ITEST_OUT" "failure:        $reason" "the failure line of sandbox get"
  # the event
  itest_http GET "/v1/events?sandbox=$sbx&kind=sandbox.failed" "$SANDBOX_TOKEN"
  assert_http 200 "" "events of $sbx"
  assert_eq "$reason" "$(itest_json "$HTTP_BODY" events.0.data.reason)" "sandbox.failed event reason of $sbx"
  if [ -n "$code" ]; then
    assert_eq "$code" "$(itest_json "$HTTP_BODY" events.0.data.exit_code)" "sandbox.failed event exit_code of $sbx"
  fi
  # an exec is refused at once, naming the phase and the reason
  itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" '{"argv":["true"]}'
  assert_http 409 conflict "exec on failed sandbox $sbx"
  assert_contains "$(itest_json "$HTTP_BODY" error.message)" "is failed ($reason" "exec refusal names phase and reason"
  assert_exit 3 sandbox exec "$sbx" -- true
  assert_contains "$ITEST_ERR" "failed" "the CLI's exec refusal"
  # the worker removes the dead container (orphan pass: the next beats)
  itest_wait_until $((3 * HB + 10)) "the container of failed $sbx removed" no_container "$sbx"
}

# ---- removed: created first, so the inventory grace (2 beats + 5 s after
# the sandbox last changed) has passed by the time it is removed.
sbx_rm=$(create)
itest_track "$sbx_rm"
t_rm_running=$(date +%s)

# ---- docker kill → exited 137
sbx=$(create)
itest_track "$sbx"
cid=$(container_of "$sbx")
[ -n "$cid" ] || fail "no container for $sbx"
docker kill "$cid" >/dev/null
t0=$(date +%s.%N) # stopped once docker kill returns (which may take a while on a busy host)
wait_failed "$sbx" "$t0" $((HB + SLACK))
check_failed "$sbx" exited 137
assert_contains "$(json_get "$sbx" failure.message)" "SIGKILL" "the message names the signal"
# delete of a failed sandbox still ends deleted
assert_exit 0 sandbox delete "$sbx" --wait --timeout 120
assert_eq deleted "$(json_get "$sbx" phase)" "phase after deleting a failed sandbox"

# ---- the main process exits: SIGTERM to `sleep infinity` (under docker-init,
# which then exits 128 + 15)
sbx=$(create)
itest_track "$sbx"
t0=$(date +%s.%N)
sandbox exec "$sbx" -- sh -c 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = sleep ] && kill -TERM "${p#/proc/}"; done; echo goodbye' \
  >/dev/null 2>&1 || true
wait_failed "$sbx" "$t0" $((HB + SLACK))
check_failed "$sbx" exited 143

# ---- OOM: the sleep is made the OOM killer's first choice, then a memory hog
# runs in a 16 MiB sandbox
# Docker records the OOM kill a moment after the exec's own end (cgroup v1
# hosts deliver the event later than v2 ones); the worker may remove the
# container once the failure is recorded, and check_failed below then says
# whether it had read the OOM kill
oom_seen() {
  case "$(docker inspect -f '{{.State.OOMKilled}}' "$cid" 2>/dev/null || echo removed-already)" in
    true | removed-already) return 0 ;;
  esac
  return 1
}
# oom_hog: a new 16 MiB sandbox ($sbx, its container $cid) whose main
# process the hog gets OOM-killed; 0 once Docker has recorded the OOM kill
oom_hog() {
  local init_pid sleep_pid i
  # (called as an if's condition, where set -e does not act: each step
  # says itself when it fails)
  sbx=$(create --memory-mib 16) && [ -n "$sbx" ] || fail "the 16 MiB sandbox did not start"
  itest_track "$sbx"
  cid=$(container_of "$sbx")
  [ -n "$cid" ] || fail "no container of $sbx"
  init_pid=$(docker inspect -f '{{.State.Pid}}' "$cid")
  sleep_pid=$(cat "/proc/$init_pid/task/$init_pid/children" | awk '{print $1}')
  [ -n "$sleep_pid" ] && [ "$(cat "/proc/$sleep_pid/comm")" = sleep ] || fail "no sleep under docker-init $init_pid"
  echo 1000 >"/proc/$sleep_pid/oom_score_adj"
  t0=$(date +%s.%N)
  sandbox exec "$sbx" -- dd if=/dev/zero of=/dev/null bs=64M count=1 >/dev/null 2>&1 || true
  for ((i = 0; i < 60; i++)); do
    oom_seen && return 0
    sleep 0.5
  done
  return 1
}
# On a busy cgroup v1 host Docker has once missed the OOM event of a
# container that exited at once (OOMKilled false, exit code 137: there is
# nothing the worker could read then); one more try before failing
if ! oom_hog; then
  echo "Docker did not record the OOM kill of $sbx's container within 30 s (OOMKilled false); once more"
  oom_hog || fail "timed out twice after 30s waiting for Docker's OOMKilled after the hog"
fi
wait_failed "$sbx" "$t0" $((HB + SLACK))
check_failed "$sbx" oom_killed 137
assert_contains "$(json_get "$sbx" failure.message)" "OOM" "the message says OOM"

# ---- removed outside Sandbox
wait_s=$((t_rm_running + 2 * HB + 6 - $(date +%s)))
if [ "$wait_s" -gt 0 ]; then sleep "$wait_s"; fi
phase_is "$sbx_rm" running || fail "sandbox $sbx_rm is not running before its removal"
docker rm -f "$(container_of "$sbx_rm")" >/dev/null
t0=$(date +%s.%N)
wait_failed "$sbx_rm" "$t0" $((HB + SLACK))
check_failed "$sbx_rm" removed ""

# ---- a broken image: /bin/busybox is a symlink to itself, so docker-init
# cannot exec `sleep`: the create fails with sandbox_exited.
broken="itest-observed-broken:$$"
root="$ITEST_TMP/broken-rootfs"
mkdir -p "$root/bin"
ln -sf busybox "$root/bin/busybox"
ln -sf busybox "$root/bin/sleep"
tar -C "$root" -c . | docker import - "$broken" >/dev/null
itest_on_exit "docker rmi -f $broken >/dev/null 2>&1"
assert_exit 1 sandbox create --tenant "$tenant" --image "$broken" --ttl 600 --wait --timeout 120
assert_contains "$ITEST_ERR" "sandbox_exited" "the create's error code"
assert_contains "$ITEST_ERR" "symbolic links" "the create's error says why"
sbx=$(sandbox list --tenant "$tenant" --json | python3 -c '
import json, sys
for s in json.load(sys.stdin)["sandboxes"]:
    if s["image"] == sys.argv[1]:
        print(s["id"])' "$broken")
assert_match "$sbx" '^sbx_' "the broken sandbox is listed"
itest_track "$sbx"
assert_eq failed "$(json_get "$sbx" phase)" "phase of the broken sandbox"
assert_exit 0 sandbox get "$sbx" --json
assert_eq exited "$(itest_json "$ITEST_OUT" sandbox.failure.reason)" "failure.reason of the broken sandbox"
assert_eq 1 "$(itest_json "$ITEST_OUT" sandbox.failure.exit_code)" "failure.exit_code of the broken sandbox"
assert_contains "$(itest_json "$ITEST_OUT" sandbox.failure.message)" "exec sleep failed" "failure names the output"
op=$(sandbox get "$sbx" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print([o["id"] for o in d.get("operations", []) if o["kind"] == "create"][0])')
itest_http GET "/v1/operations/$op" "$SANDBOX_TOKEN"
assert_eq sandbox_exited "$(itest_json "$HTTP_BODY" operation.error.code error.code)" "create operation error code"
assert_contains "$(itest_json "$HTTP_BODY" operation.error.message)" "exited with code 1" "create error names the code"
tail_text=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "SELECT output_tail FROM sandboxes WHERE id = '$sbx'")
assert_contains "$tail_text" "Too many levels of symbolic links" "the output tail kept on the sandbox"
assert_eq "" "$(container_of "$sbx")" "container of the failed create"

# ---- a hostile worker body is refused field by field, changing nothing
wtok=$(itest_token itest-observed-hostile worker itest-observed-hostile)
wid=wrk_aaaaaaaaaaaaaaaaaaaaaaaaaa
big=$(python3 -c 'print("x" * 9000)')
for entry in '"exit_code":"137"' '"exit_code":1e3' '"oom_killed":"yes"' '"finished_at":"2026-02-30T00:00:00Z"' \
  '"output_tail":"a\u0000b"' "\"output_tail\":\"$big\"" '"error":"two\nlines"' '"state":"EXITED"'; do
  itest_http POST "/v1/workers/$wid/heartbeat" "$wtok" \
    "{\"inventory\":[{\"sandbox_id\":\"sbx_x\",\"ref\":\"c0ffee\",\"state\":\"exited\",$entry}]}"
  assert_http 400 invalid_argument "heartbeat with ${entry:0:40}"
  assert_contains "$(itest_json "$HTTP_BODY" error.message)" "inventory[0]." "the refusal names the entry"
done
itest_http POST "/v1/workers/$wid/heartbeat" "$wtok" \
  '{"inventory":[{"sandbox_id":"sbx_x","ref":"c0ffee","state":"exited","exit_code":1,"oom_killed":false,"finished_at":"2026-01-01T00:00:00.123456789Z","output_tail":"ok\n"}]}'
assert_http 404 not_found "a well-formed heartbeat of an unknown worker"
curl -sf --max-time 5 "$SANDBOX_URL/healthz" >/dev/null || fail "the controller after hostile heartbeats"

echo "killed, exited, OOM-killed and removed containers fail their sandboxes within a heartbeat; a broken image fails its create"
