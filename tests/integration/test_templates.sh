#!/usr/bin/env bash
# Templates (docs/templates.md): `sandbox templates build NAME -f Dockerfile
# CONTEXT` runs a Dockerfile with FROM, ARG, ENV, WORKDIR, COPY, RUN, USER (a RUN after it as that user),
# CMD and EXPOSE through the API (a build sandbox, execs, a file upload, a
# snapshot as the template's version 1); `sandbox create --template NAME`
# starts sandboxes with its files, its ENV and its WORKDIR; a rebuild makes
# version 2 and creates take it, while NAME:1 still names the first; a
# Dockerfile with an unsupported instruction is refused naming its line
# before anything is created, and a failing RUN fails the build naming its
# line and leaves no build sandbox; another tenant sees none of it.
# Traffic goes only to the test's controller.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

ta=$(itest_tenant itest-tpla)
a=$(itest_token "$ta" member)
b=$(itest_token "$(itest_tenant itest-tplb)" member)
export SANDBOX_TOKEN=$a
itest_track_tenant "$ta"
tag=$RANDOM$RANDOM
ctx="$ITEST_TMP/tpl-ctx-$tag"
mkdir -p "$ctx/src/lib"
printf 'echo setup-ran >> /app/setup.log\n' >"$ctx/src/setup.sh"
printf 'lib-%s\n' "$tag" >"$ctx/src/lib/data.txt"
cat >"$ctx/Dockerfile" <<EOF
# a comment, then an ARG with a default
ARG BASE=$ITEST_IMAGE
FROM \${BASE}
ARG FLAVOUR=plain
ENV APP_HOME=/app \\
    GREETING="hello $tag"
WORKDIR /app
COPY src/ ./
RUN sh ./setup.sh && \\
    echo "\$FLAVOUR" > /app/flavour
RUN pwd > /app/where
RUN echo said-v1-$tag
EXPOSE 8000
CMD ["sh", "-c", "echo run"]
EOF

# --- the build: version 1
assert_exit 0 sandbox templates build "web-$tag" -f "$ctx/Dockerfile" "$ctx" --build-arg FLAVOUR=spicy --json
assert_eq 1 "$(itest_json "$ITEST_OUT" snapshot.version)" "the first build's version"
assert_eq "web-$tag" "$(itest_json "$ITEST_OUT" snapshot.template)" "the version's template"
assert_eq ready "$(itest_json "$ITEST_OUT" snapshot.state)" "the version's state"
assert_eq /app "$(itest_json "$ITEST_OUT" snapshot.config.workdir)" "WORKDIR kept in the version's config"
assert_eq "hello $tag" "$(itest_json "$ITEST_OUT" snapshot.config.env.GREETING)" "ENV kept in the version's config"
assert_eq 8000 "$(itest_json "$ITEST_OUT" snapshot.config.expose.0)" "EXPOSE kept"
v1=$(itest_json "$ITEST_OUT" snapshot.id)
# no build sandbox is left behind
assert_exit 0 sandbox list --json
[ "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["sandboxes"]))' "$ITEST_OUT")" = 0 ] \
  || fail "a build sandbox was left: $ITEST_OUT"

# --- a sandbox from it: files, ENV and WORKDIR
assert_exit 0 sandbox create --template "web-$tag" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r s1 _ <<<"$ITEST_OUT"
itest_track "$s1"
assert_exit 0 sandbox exec "$s1" -- sh -c 'pwd; echo "$GREETING"; cat lib/data.txt setup.log flavour where'
assert_eq "/app
hello $tag
lib-$tag
setup-ran
spicy
/app" "$ITEST_OUT" "a sandbox from the template: workdir, env, copied and built files"
assert_exit 0 sandbox get "$s1" --json
assert_eq "$v1" "$(itest_json "$ITEST_OUT" sandbox.from)" "the sandbox's from is version 1"

# --- a rebuild makes version 2; creates take it, NAME:1 names the first
sed -i 's/^RUN pwd > \/app\/where$/RUN pwd > \/app\/where \&\& echo two > \/app\/version/' "$ctx/Dockerfile"
sed -i "s/said-v1-/said-v2-/" "$ctx/Dockerfile"
assert_exit 0 sandbox templates build "web-$tag" -f "$ctx/Dockerfile" "$ctx" --json
assert_eq 2 "$(itest_json "$ITEST_OUT" snapshot.version)" "the rebuild's version"
assert_exit 0 sandbox create --template "web-$tag" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r s2 _ <<<"$ITEST_OUT"
itest_track "$s2"
assert_exit 0 sandbox exec "$s2" -- cat /app/version /app/flavour
assert_eq "two
plain" "$ITEST_OUT" "the newest version (FLAVOUR back at its default)"
assert_exit 0 sandbox create --template "web-$tag:1" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r s3 _ <<<"$ITEST_OUT"
itest_track "$s3"
assert_exit 1 sandbox exec "$s3" -- cat /app/version
# --- the builds' logs: each RUN with what it printed, per version
assert_exit 0 sandbox templates logs "web-$tag" --version 1
assert_contains "$ITEST_OUT" "version 1" "the logs name the version"
assert_contains "$ITEST_OUT" "==> exec op_" "the logs list the build's execs"
assert_contains "$ITEST_OUT" "succeeded, exit 0" "each with its outcome"
assert_contains "$ITEST_OUT" "said-v1-$tag" "a RUN's output in version 1's logs"
assert_not_contains "$ITEST_OUT" "said-v2-$tag" "version 1's logs hold nothing of version 2"
assert_exit 0 sandbox templates logs "web-$tag"
assert_contains "$ITEST_OUT" "said-v2-$tag" "logs without --version: the newest version's"
assert_exit 0 sandbox templates logs "web-$tag" --json
assert_eq 2 "$(itest_json "$ITEST_OUT" version)" "logs --json: the version"
assert_exit 0 sandbox templates list --json
assert_eq 2 "$(python3 -c 'import json,sys; t=[x for x in json.loads(sys.argv[1])["templates"] if x["name"]==sys.argv[2]][0]; print(t["versions"])' "$ITEST_OUT" "web-$tag")" "two versions listed"

# --- another tenant: not listed, not usable
itest_http GET "/v1/templates" "$b"
assert_not_contains "$HTTP_BODY" "web-$tag" "another tenant's template list"
itest_http GET "/v1/templates/web-$tag" "$b"
assert_http 404 not_found "another tenant's template"
itest_http POST "/v1/sandboxes" "$b" "{\"template\":\"web-$tag\",\"cpu_millis\":100,\"memory_mib\":64}"
assert_http 404 not_found "a create from another tenant's template"

# --- refused before anything is made: an unsupported instruction, by line
printf 'FROM %s\nRUN true\nHEALTHCHECK CMD true\n' "$ITEST_IMAGE" >"$ctx/Dockerfile.bad"
assert_exit 2 sandbox templates build "bad-$tag" -f "$ctx/Dockerfile.bad" "$ctx"
assert_contains "$ITEST_ERR" ":3" "the refusal names line 3"
assert_contains "$ITEST_ERR" "HEALTHCHECK" "the refusal names the instruction"
# --- a failing RUN fails the build naming its line; nothing is left
printf 'FROM %s\nRUN echo building\nRUN exit 7\n' "$ITEST_IMAGE" >"$ctx/Dockerfile.fail"
assert_exit 1 sandbox templates build "fail-$tag" -f "$ctx/Dockerfile.fail" "$ctx"
assert_contains "$ITEST_ERR" ":3" "the failure names line 3"
itest_http GET "/v1/templates/fail-$tag" "$a"
assert_http 404 not_found "a failed build makes no version"

# --- RUN after USER runs as that user (an exec's user), and so do the
# sandboxes made from the template
printf 'FROM %s\nRUN id -u > /tmp/root-uid\nUSER nobody\nRUN id -u > /tmp/user-uid\n' "$ITEST_IMAGE" \
  >"$ctx/Dockerfile.user"
assert_exit 0 sandbox templates build "user-$tag" -f "$ctx/Dockerfile.user" "$ctx"
assert_exit 0 sandbox create --template "user-$tag" --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r su _ <<<"$ITEST_OUT"
itest_track "$su"
assert_exit 0 sandbox exec "$su" -- cat /tmp/root-uid /tmp/user-uid
assert_eq "0
65534" "$ITEST_OUT" "the RUN before USER ran as root, the one after as nobody"
itest_http POST "/v1/sandboxes/$su/exec" "$a" '{"argv":["id"],"user":"bad user"}'
assert_http 400 invalid_argument "an exec user with a space"
assert_exit 0 sandbox delete "$su" --wait --timeout 60
assert_exit 0 sandbox templates delete "user-$tag"

# --- delete: one version, then the rest
assert_exit 0 sandbox templates delete "web-$tag" --version 1
itest_http POST "/v1/sandboxes" "$a" "{\"template\":\"web-$tag:1\",\"cpu_millis\":100,\"memory_mib\":64}"
assert_http 404 not_found "a deleted version"
assert_exit 0 sandbox templates delete "web-$tag"
itest_http GET "/v1/templates/web-$tag" "$a"
assert_http 404 not_found "the deleted template"
assert_exit 0 sandbox list --json
for s in "$s1" "$s2" "$s3"; do
  assert_contains "$ITEST_OUT" "$s" "sandboxes from a deleted template run on"
done
