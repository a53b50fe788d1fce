#!/usr/bin/env bash
# Template builds the server drives (docs/templates.md): POST
# /v1/templates/NAME/builds with a build sandbox's create request, a list of
# exec requests and the version's config makes the build sandbox and
# answers at once; the controller runs the steps one after another as
# operations, snapshots the sandbox as the template's next version and
# deletes it, with no client left waiting. A retry with the same
# Idempotency-Key answers with the same build (another request under it is
# 409); a cancel ends a build under way and its sandbox; a step that exits non-zero
# fails the build naming the step, runs no further step, makes no version
# and still deletes its sandbox; bad requests are refused before anything
# is made; another tenant sees none of it; a build whose token is revoked
# stops there and fails. A sandbox from the version has
# the files the steps wrote and the config's ENV and WORKDIR. `sandbox
# templates build --server` runs a Dockerfile (its COPY and ADD uploaded as
# build files) that way and prints each RUN's output; a failing RUN names
# its line.
# Traffic goes only to the test's controller.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

ta=$(itest_tenant itest-tbda)
a=$(itest_token "$ta" member)
tb=$(itest_tenant itest-tbdb)
b=$(itest_token "$tb" member)
export SANDBOX_TOKEN=$a
itest_track_tenant "$ta"
itest_track_tenant "$tb"
tag=$RANDOM$RANDOM
sbx_req="{\"image\":\"$ITEST_IMAGE\",\"cpu_millis\":100,\"memory_mib\":64}"

# json_len JSON PATH: the length of the array at PATH
json_len() {
  python3 -c '
import json, sys
cur = json.loads(sys.argv[1])
for part in sys.argv[2].split("."):
    cur = cur[part]
print(len(cur))' "$1" "$2"
}
# build_get NAME ID: the build's JSON into BUILD
build_get() {
  itest_http GET "/v1/templates/$1/builds/$2" "$a"
  [ "$HTTP_STATUS" = 200 ] || fail "GET build $2: HTTP $HTTP_STATUS ${HTTP_BODY:0:300}"
  BUILD=$HTTP_BODY
}
# build_over NAME ID: true once the build is ready or failed and its
# sandbox's delete was asked (cleaned)
build_over() {
  local st
  build_get "$1" "$2"
  st=$(itest_json "$BUILD" build.state)
  [ "$st" = ready ] || [ "$st" = failed ] || return 1
  [ "$(itest_json "$BUILD" build.cleaned)" = true ]
}

# --- bad requests: nothing is made
itest_http POST "/v1/templates/web-$tag/builds" "$a" '{"steps":"echo hi"}'
assert_http 400 invalid_argument "steps not an array"
itest_http POST "/v1/templates/web-$tag/builds" "$a" '{"steps":[{"argv":["true"]},{"argv":[]}]}'
assert_http 400 invalid_argument "an empty argv"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "steps[1]" "the message names the bad step"
itest_http POST "/v1/templates/web-$tag/builds" "$a" '{"steps":[],"extra":1}'
assert_http 400 invalid_argument "an unknown field"
itest_http POST "/v1/templates/-bad/builds" "$a" '{"steps":[]}'
assert_http 400 invalid_argument "a bad template name"
itest_http POST "/v1/templates/web-$tag/builds" "$a" "{\"steps\":[],\"sandbox\":{\"tenant\":\"$tb\"}}"
assert_http 403 forbidden "a build sandbox in another tenant"
itest_http POST "/v1/templates/web-$tag/builds" "$a" '{"steps":[],"config":{"nope":1}}'
assert_http 400 invalid_argument "an unknown config field"
itest_http GET "/v1/templates/web-$tag/builds" "$a"
assert_http 200 "" "the template's builds"
assert_eq 0 "$(json_len "$HTTP_BODY" builds)" "no build was made by a refused request"

# --- a build: two steps, then the version
key="tbd-$tag"
body=$(python3 -c '
import json, sys
tag, req = sys.argv[1], json.loads(sys.argv[2])
print(json.dumps({
  "sandbox": req,
  "steps": [
    {"argv": ["sh", "-c", "mkdir -p /app && echo built-%s > /app/note" % tag]},
    {"argv": ["sh", "-c", "echo \"$GREETING\" > greeting && id -u > uid"], "env": {"GREETING": "hi-" + tag},
     "cwd": "/app"},
  ],
  "config": {"env": {"APP": "app-" + tag}, "workdir": "/app"},
}))' "$tag" "$sbx_req")
out=$(curl -s -w '\n%{http_code}' -X POST -H "Authorization: Bearer $a" -H "Idempotency-Key: $key" \
  -H 'Content-Type: application/json' --data-binary "$body" "$SANDBOX_URL/v1/templates/web-$tag/builds")
assert_eq 202 "${out##*$'\n'}" "the build is accepted"
first=${out%$'\n'*}
bid=$(itest_json "$first" build.id)
assert_match "$bid" '^bld_[a-z2-7]{26}$' "the build's id"
assert_eq 2 "$(itest_json "$first" build.steps_total)" "its steps"
bsbx=$(itest_json "$first" build.sandbox_id)
itest_track "$bsbx"
out=$(curl -s -w '\n%{http_code}' -X POST -H "Authorization: Bearer $a" -H "Idempotency-Key: $key" \
  -H 'Content-Type: application/json' --data-binary "$body" "$SANDBOX_URL/v1/templates/web-$tag/builds")
assert_eq 202 "${out##*$'\n'}" "the retry is answered"
assert_eq "$bid" "$(itest_json "${out%$'\n'*}" build.id)" "the retry with the same key answers with the same build"
# the same key with another build request is a conflict, not that build
out=$(curl -s -w '\n%{http_code}' -X POST -H "Authorization: Bearer $a" -H "Idempotency-Key: $key" \
  -H 'Content-Type: application/json' --data-binary '{"steps":[{"argv":["true"]}]}' \
  "$SANDBOX_URL/v1/templates/web-$tag/builds")
assert_eq 409 "${out##*$'\n'}" "the key reused for another build request"
assert_contains "${out%$'\n'*}" "was used for another build request" "its message"
# another tenant reaches none of it
itest_http GET "/v1/templates/web-$tag/builds/$bid" "$b"
assert_http 404 not_found "another tenant's build"
itest_http GET "/v1/templates/web-$tag/builds" "$b"
assert_eq 0 "$(json_len "$HTTP_BODY" builds)" "another tenant lists none"

itest_wait_until 180 "the build finishes and its sandbox goes" build_over "web-$tag" "$bid"
assert_eq ready "$(itest_json "$BUILD" build.state)" "the build's state [$BUILD]"
assert_eq 1 "$(itest_json "$BUILD" build.version)" "the template's first version"
snp=$(itest_json "$BUILD" build.snapshot_id)
assert_match "$snp" '^snp_' "the version's snapshot"
assert_eq 2 "$(json_len "$BUILD" build.steps)" "both steps ran"
assert_eq 0 "$(itest_json "$BUILD" build.steps.1.exit_code)" "the second step's exit code"
step_op=$(itest_json "$BUILD" build.steps.0.operation)
itest_http GET "/v1/operations/$step_op" "$a"
assert_http 200 "" "a step is an operation of the tenant's"
assert_eq "$bsbx" "$(itest_json "$HTTP_BODY" operation.sandbox_id)" "run in the build sandbox"
itest_wait_until 60 "the build sandbox is deleted" bash -c \
  "[ \"\$(SANDBOX_TOKEN=$a '$SANDBOX_CLI' get $bsbx --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"sandbox\"][\"phase\"])')\" = deleted ]"

# a sandbox from the version: the steps' files, the config's ENV and WORKDIR
assert_exit 0 sandbox create --template "web-$tag" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r s1 _ <<<"$ITEST_OUT"
itest_track "$s1"
assert_exit 0 sandbox exec "$s1" -- sh -c 'cat /app/note greeting uid; echo "$APP"; pwd'
assert_eq "built-$tag
hi-$tag
0
app-$tag
/app" "$ITEST_OUT" "the files the steps wrote, the version's ENV and WORKDIR"

# --- a failing step: the build fails there, no version, its sandbox goes
body=$(python3 -c '
import json, sys
print(json.dumps({"sandbox": json.loads(sys.argv[1]), "steps": [
  {"argv": ["sh", "-c", "echo one > /tmp/one"]},
  {"argv": ["sh", "-c", "echo failing >&2; exit 3"]},
  {"argv": ["sh", "-c", "echo never > /tmp/never"]}]}))' "$sbx_req")
itest_http POST "/v1/templates/web-$tag/builds" "$a" "$body"
assert_http 202 "" "a build whose second step fails"
fid=$(itest_json "$HTTP_BODY" build.id)
itest_track "$(itest_json "$HTTP_BODY" build.sandbox_id)"
itest_wait_until 180 "the failing build ends" build_over "web-$tag" "$fid"
assert_eq failed "$(itest_json "$BUILD" build.state)" "the failing build's state"
assert_eq build_failed "$(itest_json "$BUILD" build.error.code)" "its error code"
assert_contains "$(itest_json "$BUILD" build.error.message)" "step 2 of 3" "the message names the step"
assert_contains "$(itest_json "$BUILD" build.error.message)" "exited with 3" "and its exit code"
assert_eq 2 "$(json_len "$BUILD" build.steps)" "no step ran after the failing one"
itest_http GET "/v1/templates/web-$tag" "$a"
assert_eq 1 "$(json_len "$HTTP_BODY" template.versions)" "no version was made"
itest_http GET "/v1/templates/web-$tag/builds" "$a"
assert_eq 2 "$(json_len "$HTTP_BODY" builds)" "the template lists both builds"
assert_eq "$fid" "$(itest_json "$HTTP_BODY" builds.0.id)" "newest first"
# --- a controller that made a step's operation and died before noting it
# (the row put back as it was): the next pass makes the same operation
# again (its idempotency key replays it), not a second one, and the step
# runs once
sql() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }
body=$(python3 -c '
import json, sys
print(json.dumps({"sandbox": json.loads(sys.argv[1]), "steps": [
  {"argv": ["sh", "-c", "sleep 5; echo a >> /once.log"]},
  {"argv": ["sh", "-c", "echo b >> /once.log"]}]}))' "$sbx_req")
itest_http POST "/v1/templates/once-$tag/builds" "$a" "$body"
assert_http 202 "" "a build of two steps"
oid=$(itest_json "$HTTP_BODY" build.id)
osbx=$(itest_json "$HTTP_BODY" build.sandbox_id)
itest_track "$osbx"
# first_step_runs ID: build ID waits on the operation of its first step
first_step_runs() { [ "$(sql "SELECT step FROM template_builds WHERE id = '$1' AND operation_id IS NOT NULL")" = 1 ]; }
itest_wait_until 120 "the first step runs" first_step_runs "$oid"
made=$(sql "SELECT operation_id FROM template_builds WHERE id = '$oid'")
assert_eq 1 "$(sql "UPDATE template_builds SET step = 0, operation_id = NULL WHERE id = '$oid' AND step = 1 AND operation_id = '$made' RETURNING 1")" "the note taken back"
itest_wait_until 180 "the build ends" build_over "once-$tag" "$oid"
assert_eq ready "$(itest_json "$BUILD" build.state)" "the build after a lost note"
assert_eq "$made" "$(itest_json "$BUILD" build.steps.0.operation)" "the first step is the operation made before"
assert_eq 2 "$(sql "SELECT count(*) FROM operations WHERE sandbox_id = '$osbx' AND kind = 'exec'")" "one operation per step"
assert_exit 0 sandbox create --template "once-$tag" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r s3 _ <<<"$ITEST_OUT"
itest_track "$s3"
assert_exit 0 sandbox exec "$s3" -- cat /once.log
assert_eq "a
b" "$ITEST_OUT" "each step ran once"

# --- the build acts as the token that asked: once it is revoked, the build
# makes nothing more (the step under way ends; no further step runs) and
# fails, and its sandbox goes
c=$(itest_token "$ta" member)
# sleep_then_never S: a build body whose first step sleeps S seconds and
# whose second must never run
sleep_then_never() {
  python3 -c '
import json, sys
print(json.dumps({"sandbox": json.loads(sys.argv[1]), "steps": [
  {"argv": ["sh", "-c", "sleep " + sys.argv[2]]}, {"argv": ["sh", "-c", "echo never"]}]}))' "$sbx_req" "$1"
}
body=$(sleep_then_never 4)
itest_http POST "/v1/templates/revoked-$tag/builds" "$c" "$body"
assert_http 202 "" "a build by a token about to be revoked"
rid=$(itest_json "$HTTP_BODY" build.id)
itest_track "$(itest_json "$HTTP_BODY" build.sandbox_id)"
itest_wait_until 120 "the first step runs" first_step_runs "$rid"
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tokens revoke "$(sql "SELECT created_by FROM template_builds WHERE id = '$rid'")"
itest_wait_until 120 "the build of the revoked token ends" build_over "revoked-$tag" "$rid"
assert_eq failed "$(itest_json "$BUILD" build.state)" "the build after its token was revoked"
assert_eq unauthorized "$(itest_json "$BUILD" build.error.code)" "its error code"
assert_eq 1 "$(json_len "$BUILD" build.steps)" "no step ran after the revocation"

# --- cancel (DELETE .../builds/ID, sandbox templates cancel): the step
# under way ends with the build sandbox, which goes; no further step runs
# and no version is made; a second cancel answers as it is; another tenant
# cannot; an ended build is a conflict
body=$(sleep_then_never 60)
itest_http POST "/v1/templates/cancel-$tag/builds" "$a" "$body"
assert_http 202 "" "a build to cancel"
xid=$(itest_json "$HTTP_BODY" build.id)
xsbx=$(itest_json "$HTTP_BODY" build.sandbox_id)
itest_track "$xsbx"
itest_wait_until 120 "the step to cancel runs" first_step_runs "$xid"
itest_http DELETE "/v1/templates/cancel-$tag/builds/$xid" "$b"
assert_http 404 not_found "another tenant's cancel"
assert_exit 0 sandbox templates cancel "cancel-$tag" "$xid"
assert_eq "$xid cancelled" "$ITEST_OUT" "templates cancel prints the build"
itest_http DELETE "/v1/templates/cancel-$tag/builds/$xid" "$a"
assert_http 200 "" "a second cancel answers as it is"
assert_eq cancelled "$(itest_json "$HTTP_BODY" build.state)" "the cancelled build's state"
assert_eq cancelled "$(itest_json "$HTTP_BODY" build.error.code)" "its error code"
xgone() { [ "$(sql "SELECT phase FROM sandboxes WHERE id = '$xsbx'")" = deleted ]; }
itest_wait_until 60 "the cancelled build's sandbox deleted" xgone
assert_eq 0 "$(json_len "$HTTP_BODY" build.steps)" "no step finished in the cancelled build"
itest_http GET "/v1/templates/cancel-$tag" "$a"
assert_http 404 not_found "the cancelled build made no version"
itest_http DELETE "/v1/templates/web-$tag/builds/$bid" "$a"
assert_http 409 conflict "cancelling a build that ended"
assert_exit 3 sandbox templates cancel "web-$tag" "$bid"
assert_exit 2 sandbox templates cancel "web-$tag"

# --- the CLI: sandbox templates build --server runs a Dockerfile's RUN and
# WORKDIR as the server's build and follows it
ctx="$ITEST_TMP/tbd-ctx-$tag"
mkdir -p "$ctx"
cat >"$ctx/Dockerfile" <<EOF
FROM $ITEST_IMAGE
ENV MSG="srv $tag"
WORKDIR /srv
RUN echo "\$MSG" > /srv/msg && echo ran-the-run
CMD ["sh"]
EOF
assert_exit 0 sandbox templates build "srv-$tag" -f "$ctx/Dockerfile" "$ctx" --server --cpu-millis 100 \
  --memory-mib 64 --timeout 300
assert_match "$(tail -n 1 <<<"$ITEST_OUT")" "^srv-$tag 1 snp_[a-z2-7]{26}\$" "build --server prints NAME VERSION SNAPSHOT"
assert_eq ran-the-run "$(head -n 1 <<<"$ITEST_OUT")" "the RUN's output is printed"
assert_contains "$ITEST_ERR" "#3 4: RUN" "each step's header names its line"
assert_exit 0 sandbox templates builds "srv-$tag"
assert_match "$ITEST_OUT" "^bld_[a-z2-7]{26} ready 2/2 v1 " "builds lists the server's build"
assert_exit 0 sandbox create --template "srv-$tag" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r s2 _ <<<"$ITEST_OUT"
itest_track "$s2"
assert_exit 0 sandbox exec "$s2" -- sh -c 'cat msg; pwd'
assert_eq "srv $tag
/srv" "$ITEST_OUT" "the server's build of the Dockerfile: its RUN's file, ENV and WORKDIR"
# a RUN's output comes as it is written, not once the RUN has ended
printf 'FROM %s\nRUN echo early-%s && sleep 5 && echo late-%s\n' "$ITEST_IMAGE" "$tag" "$tag" >"$ctx/Dockerfile.live"
live_out="$ITEST_TMP/tbd-live-$tag.out"
sandbox templates build "live-$tag" -f "$ctx/Dockerfile.live" "$ctx" --server --cpu-millis 100 --memory-mib 64 \
  --timeout 300 >"$live_out" 2>&1 &
live_pid=$!
itest_wait_until 120 "the RUN's first line while it runs" grep -qx "early-$tag" "$live_out"
! grep -qx "late-$tag" "$live_out" || fail "the RUN's first line came only with its last: $(cat "$live_out")"
wait "$live_pid" || fail "the live build failed: $(cat "$live_out")"
grep -qx "late-$tag" "$live_out" || fail "the RUN's last line is missing: $(cat "$live_out")"
assert_contains "$(cat "$live_out")" "live-$tag 1 snp_" "the live build's version"
# a RUN that fails: exit 1, naming the Dockerfile's line
printf 'FROM %s\nRUN true\nRUN exit 7\n' "$ITEST_IMAGE" >"$ctx/Dockerfile.bad"
assert_exit 1 sandbox templates build "srv-$tag" -f "$ctx/Dockerfile.bad" "$ctx" --server --cpu-millis 100 \
  --memory-mib 64 --timeout 300
assert_contains "$ITEST_ERR" "Dockerfile.bad:3: RUN: step 2 of 2" "a failing RUN names its line"
assert_contains "$ITEST_ERR" "exited with 7" "and its exit code"
# COPY and ADD with --server: the sources go up as build files and the
# server copies them in as the client would (a file, a directory's
# contents, a pattern, relative to WORKDIR)
mkdir -p "$ctx/tree/sub"
echo "one $tag" >"$ctx/one.txt"
echo "deep $tag" >"$ctx/tree/sub/deep.txt"
echo "m1" >"$ctx/m1.md"
echo "m2" >"$ctx/m2.md"
printf 'FROM %s\nWORKDIR /w\nCOPY one.txt /etc/one.txt\nCOPY tree ./t/\nADD *.md docs/\nRUN cat /etc/one.txt t/sub/deep.txt docs/m1.md docs/m2.md > all\n' \
  "$ITEST_IMAGE" >"$ctx/Dockerfile.copy"
assert_exit 0 sandbox templates build "cp-$tag" -f "$ctx/Dockerfile.copy" "$ctx" --server --cpu-millis 100 \
  --memory-mib 64 --timeout 300
assert_exit 0 sandbox create --template "cp-$tag" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r s3 _ <<<"$ITEST_OUT"
itest_track "$s3"
assert_exit 0 sandbox exec "$s3" -- cat /w/all
assert_eq "one $tag
deep $tag
m1
m2" "$ITEST_OUT" "the server copied the Dockerfile's COPY and ADD sources"
# a COPY over the build file bound is refused before anything is made
head -c 700000 /dev/urandom >"$ctx/big.bin"
printf 'FROM %s\nCOPY big.bin /big\n' "$ITEST_IMAGE" >"$ctx/Dockerfile.big"
assert_exit 2 sandbox templates build "srv-$tag" -f "$ctx/Dockerfile.big" "$ctx" --server
assert_contains "$ITEST_ERR" "Dockerfile.big:2: COPY" "a COPY too big for --server names its line"
assert_exit 0 sandbox templates builds "srv-$tag" --json
assert_eq 2 "$(json_len "$ITEST_OUT" builds)" "the refused COPY made no build"
# the build files API: named by their sha256, checked; a copy step of files
# never uploaded, or of another tenant's, is refused naming it
data=$(printf 'not a tar' | base64 -w0)
itest_http PUT "/v1/build-files/$(printf x | sha256sum | cut -d' ' -f1)" "$a" "{\"data_b64\":\"$data\"}"
assert_http 400 invalid_argument "a build file whose bytes are not its name"
good=$(printf 'not a tar' | sha256sum | cut -d' ' -f1)
itest_http PUT "/v1/build-files/$good" "$a" '{"data_b64":"!!"}'
assert_http 400 invalid_argument "a build file that is not base64"
itest_http PUT "/v1/build-files/$good" "$a" "{\"data_b64\":\"$data\"}"
assert_http 200 "" "a build file"
assert_eq 9 "$(itest_json "$HTTP_BODY" build_file.size_bytes)" "its size"
itest_http POST "/v1/templates/web-$tag/builds" "$b" \
  "{\"steps\":[{\"copy\":{\"files\":\"$good\",\"src\":\"a\",\"dest\":\"/a\"}}]}"
assert_http 400 invalid_argument "another tenant's build file"
assert_contains "$HTTP_BODY" "were not uploaded" "its message"
itest_http POST "/v1/templates/web-$tag/builds" "$a" \
  "{\"steps\":[{\"copy\":{\"files\":\"$good\",\"src\":\"a\",\"dest\":\"/a\",\"owner\":\"x\"}}]}"
assert_http 400 invalid_argument "an unknown copy field"
echo "a build the server drove made version 1; a failing step failed its build; both build sandboxes went;"
echo "templates build --server ran a Dockerfile there"
