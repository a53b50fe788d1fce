#!/usr/bin/env bash
# Pause and resume (docs/pause.md): `sandbox pause SBX --wait` stops a
# running sandbox's processes and keeps it (phase paused, its container
# stopped, not removed; its TTL clock stopped; the result says memory was
# not kept); meanwhile exec and files are refused with 409, a second pause
# too, and its route answers 503 with Retry-After. `sandbox resume` runs it
# again: the same id and container, its files and route back, its counter
# process gone (memory not kept: the main process started again), its
# expiry the seconds it had left from now. A sandbox made with auto_pause
# is paused, not deleted, when its TTL passes. The same on gvisor. A paused
# sandbox is deleted as any other; another tenant can neither pause nor
# resume it; a malformed body is 400. Traffic goes only to the test's
# controller and route listener.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

ta=$(itest_tenant itest-pausa)
a=$(itest_token "$ta" member)
b=$(itest_token "$(itest_tenant itest-pausb)" member)
export SANDBOX_TOKEN=$a
itest_track_tenant "$ta"
tag=$RANDOM$RANDOM

field() { # field SANDBOX PATH: a field of the sandbox as the API shows it now
  local out
  out=$(sandbox get "$1" --json) || return 1
  itest_json "$out" "sandbox.$2"
}
state() { docker inspect -f '{{.State.Running}}' "$1" 2>/dev/null; }

assert_exit 0 sandbox create --name "pause-$tag" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 --ttl 600 \
  --wait --timeout 120
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"
assert_exit 0 sandbox exec "$sbx" -- sh -c "echo kept-$tag >/root/kept && mkdir -p /tmp/w && echo page-$tag >/tmp/w/index.html && httpd -p 8080 -h /tmp/w"
assert_exit 0 itest_counter_start "$sbx"
itest_wait_until 10 "the counter of $sbx" itest_counter "$sbx"
cid=$(docker ps -q --no-trunc --filter "label=dev.sandbox.id=$sbx")
[ -n "$cid" ] || fail "no running container for $sbx"
assert_exit 0 sandbox share "$sbx" --port 8080 --auth public --json
route=$(itest_json "$ITEST_OUT" route.url)
assert_eq "page-$tag" "$(curl -s --max-time 10 "$route")" "the route before the pause"

# --- refusals before anything moves
itest_http POST "/v1/sandboxes/$sbx/pause" "$b" '{}'
assert_http 404 not_found "another tenant's pause"
itest_http POST "/v1/sandboxes/$sbx/pause" "$a" '{"memory":true}'
assert_http 400 invalid_argument "a pause with a field"
itest_http POST "/v1/sandboxes/$sbx/resume" "$a" ''
assert_http 409 conflict "a resume of a running sandbox"

# --- the pause
assert_exit 0 sandbox pause "$sbx" --wait --timeout 60 --json
assert_eq pause "$(itest_json "$ITEST_OUT" operation.kind)" "the operation's kind"
assert_eq succeeded "$(itest_json "$ITEST_OUT" operation.state)" "the pause operation"
assert_eq false "$(itest_json "$ITEST_OUT" operation.result.memory)" "the pause says memory was not kept"
assert_eq paused "$(field "$sbx" phase)" "the phase after the pause"
assert_eq false "$(field "$sbx" paused.memory)" "sandbox.paused.memory"
left=$(field "$sbx" paused.ttl_seconds_left)
[ "$left" -gt 500 ] && [ "$left" -le 600 ] || fail "ttl_seconds_left after the pause: $left"
assert_eq null "$(field "$sbx" expires_at)" "expires_at while paused"
assert_eq false "$(state "$cid")" "the container is stopped"
docker inspect "$cid" >/dev/null 2>&1 || fail "the container was removed by the pause"

# --- while paused: refused, 503 on the route, a second pause 409
itest_http POST "/v1/sandboxes/$sbx/exec" "$a" '{"argv":["true"]}'
assert_http 409 conflict "an exec in a paused sandbox"
assert_contains "$HTTP_BODY" "resume it first" "the exec refusal says what to do"
itest_http GET "/v1/sandboxes/$sbx/files?path=/root/kept&format=raw" "$a"
assert_http 409 conflict "a file read of a paused sandbox"
itest_http POST "/v1/sandboxes/$sbx/pause" "$a" ''
assert_http 409 conflict "a second pause"
hdrs=$(curl -s -D - -o /dev/null --max-time 10 "$route")
assert_contains "$hdrs" " 503" "the route of a paused sandbox"
assert_contains "$hdrs" "Retry-After" "the route's 503 says when to retry"
itest_http POST "/v1/sandboxes/$sbx/resume" "$b" ''
assert_http 404 not_found "another tenant's resume"
sleep 3 # the TTL clock stands still meanwhile
assert_eq "$left" "$(field "$sbx" paused.ttl_seconds_left)" "ttl_seconds_left does not run while paused"
# a paused sandbox forks without a resume: its files are all there
assert_exit 0 sandbox fork "$sbx" --count 1 --wait --timeout 120
read -r pf _ <<<"$ITEST_OUT"
itest_track "$pf"
assert_exit 0 sandbox exec "$pf" -- cat /root/kept
assert_eq "kept-$tag" "$ITEST_OUT" "a fork of the paused sandbox has its file"
assert_eq paused "$(field "$sbx" phase)" "the paused sandbox stays paused through its fork"
assert_exit 0 sandbox delete "$pf" --wait --timeout 60

# --- the resume: same id, same container, files and route back
assert_exit 0 sandbox resume "$sbx" --wait --timeout 60
assert_eq running "$(field "$sbx" phase)" "the phase after the resume"
assert_eq true "$(state "$cid")" "the same container runs again"
assert_exit 0 sandbox exec "$sbx" -- cat /root/kept
assert_eq "kept-$tag" "$ITEST_OUT" "the file kept over the pause"
exp=$(field "$sbx" expires_at)
d=$(($(date -u -d "$exp" +%s) - $(date +%s)))
[ "$d" -gt $((left - 15)) ] && [ "$d" -le "$left" ] || fail "expires in ${d}s after the resume; it had ${left}s left"
# memory was not kept: the counter is gone (the file stays as it was)
c1=$(itest_counter "$sbx")
sleep 2
assert_eq "$c1" "$(itest_counter "$sbx")" "no counter runs after a resume without memory"
# the route answers again once something listens (httpd was a process too)
assert_exit 0 sandbox exec "$sbx" -- httpd -p 8080 -h /tmp/w
itest_wait_until 10 "the route after the resume" bash -c "curl -sf --max-time 5 '$route' | grep -q page-$tag"

# --- the events
assert_exit 0 sandbox events --sandbox "$sbx" --json
python3 - "$ITEST_OUT" <<'EOF' || fail "events of the pause and resume"
import json, sys
evs = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
kinds = [e["kind"] for e in evs]
p = kinds.index("sandbox.paused")
assert "sandbox.running" in kinds[p:], kinds
assert [e for e in evs if e["kind"] == "sandbox.paused"][0]["data"]["memory"] is False, evs
ops = {e["data"].get("kind") for e in evs if e["kind"] == "operation.succeeded"}
assert {"pause", "resume"} <= ops, ops
EOF

# --- a paused sandbox is deleted as any other
assert_exit 0 sandbox pause "$sbx" --wait --timeout 60
assert_exit 0 sandbox delete "$sbx" --wait --timeout 120
itest_wait_until 30 "the paused sandbox's container removed" bash -c "! docker inspect $cid >/dev/null 2>&1"

# --- auto_pause: its TTL pauses it instead of deleting it
itest_http POST "/v1/sandboxes" "$a" "{\"image\":\"$ITEST_IMAGE\",\"cpu_millis\":100,\"memory_mib\":64,\"ttl_seconds\":10,\"auto_pause\":true}"
assert_http 202 "" "a create with auto_pause"
ap=$(itest_json "$HTTP_BODY" sandbox.id)
itest_track "$ap"
assert_exit 0 sandbox wait "$(itest_json "$HTTP_BODY" operation.id)" --timeout 120
assert_eq true "$(field "$ap" auto_pause)" "the sandbox shows auto_pause"
assert_exit 0 sandbox exec "$ap" -- sh -c "echo auto-$tag >/root/a"
is_paused() { [ "$(field "$1" phase)" = paused ]; }
itest_wait_until 60 "the auto_pause sandbox paused by its TTL" is_paused "$ap"
assert_exit 0 sandbox events --sandbox "$ap" --json
python3 - "$ITEST_OUT" <<'EOF' || fail "sandbox.expired of the auto_pause sandbox"
import json, sys
evs = [json.loads(l) for l in sys.argv[1].splitlines() if l.strip()]
exp = [e for e in evs if e["kind"] == "sandbox.expired"]
assert exp and exp[0]["data"].get("action") == "pause", exp
assert not any(e["kind"] == "sandbox.deleting" for e in evs), [e["kind"] for e in evs]
EOF
assert_eq 0 "$(field "$ap" paused.ttl_seconds_left)" "no TTL was left"
assert_exit 0 sandbox resume "$ap" --wait --timeout 60
assert_exit 0 sandbox exec "$ap" -- cat /root/a
assert_eq "auto-$tag" "$ITEST_OUT" "the file kept over the TTL's pause"
exp=$(field "$ap" expires_at)
d=$(($(date -u -d "$exp" +%s) - $(date +%s)))
[ "$d" -ge 1 ] && [ "$d" -le 10 ] || fail "after the resume it expires in ${d}s (its whole TTL of 10 s)"
assert_exit 0 sandbox delete "$ap" --wait --timeout 120

# --- gvisor: the files survive a pause and resume
itest_require_gvisor
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --isolation gvisor --cpu-millis 100 --memory-mib 64 \
  --wait --timeout 120
read -r g _ <<<"$ITEST_OUT"
itest_track "$g"
assert_exit 0 sandbox exec "$g" -- sh -c "echo gvisor-$tag >/root/g"
assert_exit 0 sandbox pause "$g" --wait --timeout 60
assert_eq paused "$(field "$g" phase)" "the gvisor sandbox paused"
assert_exit 0 sandbox resume "$g" --wait --timeout 60
assert_exit 0 sandbox exec "$g" -- cat /root/g
assert_eq "gvisor-$tag" "$ITEST_OUT" "the gvisor sandbox's file kept over the pause"
assert_eq gvisor "$(field "$g" isolation)" "still gvisor"
