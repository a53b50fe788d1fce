#!/usr/bin/env bash
# Live exec output: `sandbox exec` prints output while the command runs (on
# its own streams); GET /v1/operations/{id}/output follows from a byte
# offset, and a follower that moves to a second controller on the same
# database continues from its offset without loss or duplicates; another
# tenant cannot read it; output past exec_output_keep_bytes is dropped
# oldest first and the follower is told where it resumes; only the worker
# holding the lease may write it.
# itest-timeout: 300
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-live
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --network none --wait --timeout 300
read -r sbx _ <<<"$ITEST_OUT"
itest_track "$sbx"

# ---- the CLI prints "first" long before the command ends
out="$ITEST_TMP/live.out"
: >"$out"
t0=$(date +%s%N)
sandbox exec "$sbx" -- sh -c 'echo first; sleep 5; echo second' >"$out" 2>"$ITEST_TMP/live.err" &
cli=$!
seen=
for _ in $(seq 1 30); do
  if grep -q first "$out"; then seen=$(( ($(date +%s%N) - t0) / 1000000 )); break; fi
  sleep 0.1
done
[ -n "$seen" ] || fail "no 'first' within 3 s of sandbox exec starting (got [$(cat "$out")])"
itest_log "'first' read after ${seen} ms"
if grep -q second "$out"; then fail "'second' came with 'first': output was not live"; fi
wait "$cli" || fail "sandbox exec of the live command exited $?"
assert_eq "$(printf 'first\nsecond')" "$(cat "$out")" "live stdout, once each"
assert_eq "" "$(cat "$ITEST_TMP/live.err")" "stderr of the live command"

# ---- streams stay apart, exit code at the end
rc=0
sandbox exec "$sbx" -- sh -c 'echo out1; echo err1 >&2; sleep 1; echo out2; exit 4' \
  >"$ITEST_TMP/s.out" 2>"$ITEST_TMP/s.err" || rc=$?
assert_eq 4 "$rc" "exit code after live output"
assert_eq "$(printf 'out1\nout2')" "$(cat "$ITEST_TMP/s.out")" "live stdout"
assert_eq "err1" "$(cat "$ITEST_TMP/s.err")" "live stderr"

# ---- the API: follow on one controller, then on a second one
itest_own_controller second 1024
itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" \
  '{"argv":["sh","-c","for i in 1 2 3 4 5 6; do echo line$i; sleep 0.5; done; printf \"a\\000b\\377\" >&2"]}'
assert_http 202 "" "exec for the follow"
op=$(itest_json "$HTTP_BODY" operation.id)
follow() { # follow URL OFFSET -> FOLLOW (JSON answer)
  FOLLOW=$(curl -s --max-time 40 -H "Authorization: Bearer $SANDBOX_TOKEN" "$1/v1/operations/$op/output?offset=$2&wait=20")
}
take() { # appends the stdout text of FOLLOW to got.txt, its stderr base64 to bin.txt
  python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
with open(sys.argv[2], "a") as out, open(sys.argv[3], "a") as b:
    for c in doc["chunks"]:
        if c["stream"] == "stdout":
            out.write(c["data"])
        else:
            b.write(c.get("data_b64", ""))
' "$FOLLOW" "$ITEST_TMP/got.txt" "$ITEST_TMP/bin.txt"
}
: >"$ITEST_TMP/got.txt"
: >"$ITEST_TMP/bin.txt"
offset=0
follow "$SANDBOX_URL" 0
take
offset=$(itest_json "$FOLLOW" next_offset)
[ "$offset" -gt 0 ] || fail "the first follow read nothing: [$FOLLOW]"
assert_eq false "$(itest_json "$FOLLOW" done)" "done after the first read"
itest_log "read $offset bytes from the first controller; following on the second"
for _ in $(seq 1 30); do
  follow "$CTL_URL" "$offset"
  take
  offset=$(itest_json "$FOLLOW" next_offset)
  [ "$(itest_json "$FOLLOW" done)" = true ] && break
done
assert_eq true "$(itest_json "$FOLLOW" done)" "the follow on the second controller reached the end"
printf 'line1\nline2\nline3\nline4\nline5\nline6\n' >"$ITEST_TMP/want.txt"
cmp "$ITEST_TMP/want.txt" "$ITEST_TMP/got.txt" ||
  fail "stdout over two controllers: expected [$(cat "$ITEST_TMP/want.txt")], got [$(cat "$ITEST_TMP/got.txt")]"
assert_eq "YQBi/w==" "$(cat "$ITEST_TMP/bin.txt")" "binary stderr chunk as data_b64"
assert_eq "$offset" "$(itest_json "$FOLLOW" end_offset)" "next_offset at the end"
# reading again from 0 gives the same bytes (offsets are stable)
follow "$CTL_URL" 0
assert_eq "$offset" "$(itest_json "$FOLLOW" next_offset)" "a full re-read"
assert_eq 0 "$(itest_json "$FOLLOW" skipped_bytes)" "nothing skipped"

# ---- sandbox exec following through a controller that is killed and comes back
ctl2() { # a controller on CTL_PORT (the second one's), for the restart
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$CTL_PORT" \
    --route-listen "127.0.0.1:$(itest_free_port)" >>"$CTL_LOG" 2>&1 </dev/null &
  CTL_PID=$!
  itest_track_pid "$CTL_PID"
  itest_wait_healthz "$CTL_URL" "$CTL_PID" "controller again" "$CTL_LOG" || fail "the controller did not start again"
}
: >"$ITEST_TMP/r.out"
SANDBOX_URL=$CTL_URL "$SANDBOX_CLI" exec "$sbx" -- sh -c 'for i in 1 2 3 4 5 6 7 8; do echo r$i; sleep 0.5; done' \
  >"$ITEST_TMP/r.out" 2>"$ITEST_TMP/r.err" &
cli=$!
itest_wait_until 15 "r2 through the second controller" grep -q r2 "$ITEST_TMP/r.out"
kill -9 "$CTL_PID"
wait "$CTL_PID" 2>/dev/null || true
sleep 1
ctl2
rc=0
wait "$cli" || rc=$?
assert_eq 0 "$rc" "exit code of an exec followed across a controller restart"
printf 'r1\nr2\nr3\nr4\nr5\nr6\nr7\nr8\n' >"$ITEST_TMP/r.want"
cmp "$ITEST_TMP/r.want" "$ITEST_TMP/r.out" ||
  fail "output across the restart: expected r1..r8 once each, got [$(cat "$ITEST_TMP/r.out")]"
assert_contains "$(cat "$ITEST_TMP/r.err")" "reconnected" "the CLI says it reconnected"

# ---- scoping and bad input
other=$(itest_token "$(itest_tenant itest-live-other)" member)
itest_http GET "/v1/operations/$op/output" "$other"
assert_http 404 not_found "another tenant's exec output"
itest_http GET "/v1/operations/$op/output?offset=-1" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "a negative offset"
itest_http GET "/v1/operations/$op/output?offset=x" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "an offset that is not a number"
itest_http GET "/v1/operations/op_doesnotexist0000000000000/output" "$SANDBOX_TOKEN"
assert_http 404 not_found "output of no operation"

# ---- only the lease holder writes: another worker gets 409 stale_lease
wtok=$(itest_token itest-live-w worker)
itest_http POST /v1/workers/register "$wtok" \
  '{"name":"live-scripted","runtime":"docker","isolation":["container"],"labels":{},"capacity":{"cpu_millis":1000,"memory_mib":512,"slots":1},"version":"test"}'
assert_http 200 "" "register a scripted worker"
wid=$(itest_json "$HTTP_BODY" worker.id)
# it never runs anything: drained at once, so no test after this one (in
# whatever order) gets its creates placed on it while it looks fresh
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN sandbox workers drain live-scripted >/dev/null
itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" '{"argv":["sleep","3"]}'
op2=$(itest_json "$HTTP_BODY" operation.id)
sleep 1
itest_http POST "/v1/workers/$wid/output" "$wtok" \
  "{\"operation_id\":\"$op2\",\"attempt\":1,\"chunks\":[{\"stream\":\"stdout\",\"offset\":0,\"data_b64\":\"aGk=\"}]}"
assert_http 409 stale_lease "output from a worker without the lease"
itest_http POST "/v1/workers/$wid/output" "$wtok" '{"operation_id":"op_x","attempt":1,"chunks":"no"}'
assert_http 400 invalid_argument "a malformed output body"
itest_http POST "/v1/workers/$wid/output" "$SANDBOX_TOKEN" '{}'
assert_http 403 "*" "a member token on the worker output endpoint"
assert_exit 0 sandbox wait "$op2"
op=$op2
follow "$SANDBOX_URL" 0
assert_eq 0 "$(itest_json "$FOLLOW" end_offset)" "the refused chunk was not stored"

# ---- past exec_output_keep_bytes (16 MiB) the oldest output goes
itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" \
  '{"argv":["sh","-c","head -c 18874368 /dev/zero"],"timeout_seconds":120}'
op3=$(itest_json "$HTTP_BODY" operation.id)
assert_exit 0 sandbox wait "$op3" --timeout 150
curl -s --max-time 40 -o "$ITEST_TMP/big.json" -H "Authorization: Bearer $SANDBOX_TOKEN" \
  "$SANDBOX_URL/v1/operations/$op3/output?offset=0"
read -r end skipped first <<<"$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print(d["end_offset"], d["skipped_bytes"], d["chunks"][0]["offset"])' "$ITEST_TMP/big.json")"
assert_eq 18874368 "$end" "end of 18 MiB of output"
[ "$skipped" -ge 2097152 ] || fail "expected at least 2 MiB skipped past the 16 MiB bound, got $skipped"
[ "$skipped" -le 2162688 ] || fail "expected at most 2 MiB + one chunk skipped, got $skipped"
assert_eq "$skipped" "$first" "the follow resumes at the oldest kept chunk"

echo "exec output is live, followable across controllers, scoped, bounded and fenced"
assert_exit 0 sandbox delete "$sbx" --wait
