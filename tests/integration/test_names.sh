#!/usr/bin/env bash
# Sandbox names (issue 28 item 8): `create --name N` and then N wherever an
# id goes — get, exec, cp N:/path both ways, logs, extend, routes, rm — in
# the CLI, the API's paths and sandbox-mcp alike; list shows the name. A
# name is unique in its tenant while its sandbox is not deleted (a second
# create, and two at the same moment, get one sandbox and one 409 naming
# it), free again once deleted; another tenant's member cannot reach a
# sandbox by its name (404, as for its id), and uses the same name for its
# own; a bad name is a usage error in the CLI and 400 from the API.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-names
other=$(itest_tenant itest-names-b)
other_token=$(itest_token "$other" member)
name="web-$RANDOM.a_1"

out=$(sandbox create --name "$name" --image "$ITEST_IMAGE" --wait --timeout 120) || fail "create --name: $out"
sbx=${out%% *}
itest_track "$sbx"
assert_exit 0 sandbox get "$name" --json
assert_eq "$sbx" "$(itest_json "$ITEST_OUT" sandbox.id)" "get NAME is the named sandbox"
assert_eq "$name" "$(itest_json "$ITEST_OUT" sandbox.name)" "the sandbox shows its name"
assert_exit 0 sandbox list
assert_match "$ITEST_OUT" "$sbx +$name +$tenant" "list has a NAME column"

# exec, cp both ways, logs, extend, routes: by name
assert_exit 0 sandbox exec "$name" -- sh -c 'echo named >/tmp/by-name.txt; echo ok'
assert_contains "$ITEST_OUT" "ok" "exec NAME"
printf 'from the host\n' >"$ITEST_TMP/in.txt"
assert_exit 0 sandbox cp "$ITEST_TMP/in.txt" "$name:/tmp/in.txt"
assert_exit 0 sandbox cp "$name:/tmp/by-name.txt" "$ITEST_TMP/out.txt"
assert_eq "named" "$(cat "$ITEST_TMP/out.txt")" "cp NAME:/path out"
assert_exit 0 sandbox exec "$name" -- cat /tmp/in.txt
assert_contains "$ITEST_OUT" "from the host" "cp into NAME:/path"
assert_exit 0 sandbox logs "$name"
assert_exit 0 sandbox extend "$name" --ttl 600
assert_exit 0 sandbox routes "$name"
assert_exit 0 sandbox events --sandbox "$name" --json
assert_contains "$ITEST_OUT" "\"sandbox_id\":\"$sbx\"" "events --sandbox NAME"
others=$(printf '%s\n' "$ITEST_OUT" | grep -c '"sandbox_id"' | tr -d ' ')
assert_eq "$others" "$(printf '%s\n' "$ITEST_OUT" | grep -c "\"sandbox_id\":\"$sbx\"" | tr -d ' ')" \
  "events --sandbox NAME: only that sandbox's events"
# a local file whose name has a colon stays local: "x:y" is not NAME:/path
printf 'local\n' >"$ITEST_TMP/x:y"
assert_exit 0 sandbox cp "$ITEST_TMP/x:y" "$name:/tmp/xy"
# the API's paths take it too, and sandbox-mcp through them
itest_http GET "/v1/sandboxes/$name" "$SANDBOX_TOKEN"
assert_http 200 "" "GET /v1/sandboxes/NAME"
assert_eq "$sbx" "$(itest_json "$HTTP_BODY" sandbox.id)" "the API resolves the name"

# ---- unique while not deleted; one of two creates at the same moment
assert_exit 3 sandbox create --name "$name" --image "$ITEST_IMAGE"
assert_contains "$ITEST_ERR" "conflict" "a second create with the name"
assert_contains "$ITEST_ERR" "$sbx" "the refusal names the sandbox that has it"
race="race-$RANDOM"
for i in 1 2 3; do
  curl -s -o "$ITEST_TMP/race$i.json" -w '%{http_code}\n' -X POST -H 'Expect:' -H "Authorization: Bearer $SANDBOX_TOKEN" \
    -H 'Content-Type: application/json' --data-binary "{\"name\":\"$race\",\"image\":\"$ITEST_IMAGE\"}" \
    --max-time 60 "$SANDBOX_URL/v1/sandboxes" >"$ITEST_TMP/race$i.code" &
done
wait
codes=$(cat "$ITEST_TMP"/race?.code | sort | tr '\n' ' ')
assert_eq "202 409 409 " "$codes" "three creates of one name at once: one sandbox"
for i in 1 2 3; do
  id=$(itest_json "$(cat "$ITEST_TMP/race$i.json")" sandbox.id 2>/dev/null) && itest_track "$id"
done

# ---- another tenant: not found by name (as by id), and the name is its own to use
assert_exit 3 env SANDBOX_TOKEN="$other_token" "$SANDBOX_CLI" exec "$name" -- true
assert_contains "$ITEST_ERR" "not_found" "another tenant's member naming it"
assert_exit 3 env SANDBOX_TOKEN="$other_token" "$SANDBOX_CLI" cp "$name:/tmp/by-name.txt" "$ITEST_TMP/stolen.txt"
[ ! -e "$ITEST_TMP/stolen.txt" ] || fail "another tenant copied a file out by the sandbox's name"
out=$(SANDBOX_TOKEN=$other_token sandbox create --name "$name" --image "$ITEST_IMAGE") || fail "the other tenant's create --name: $out"
theirs=${out%% *}
itest_track "$theirs"
assert_exit 0 env SANDBOX_TOKEN="$other_token" "$SANDBOX_CLI" get "$name" --json
assert_eq "$theirs" "$(itest_json "$ITEST_OUT" sandbox.id)" "each tenant's name is its own"
assert_exit 0 sandbox get "$name" --json
assert_eq "$sbx" "$(itest_json "$ITEST_OUT" sandbox.id)" "and the first tenant's still its own"
# an admin naming a name two tenants use: 409, use the id
assert_exit 3 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" get "$name"
assert_contains "$ITEST_ERR" "several tenants" "an admin naming an ambiguous name"

# ---- bad names
assert_exit 2 sandbox create --name "bad/name" --image "$ITEST_IMAGE"
assert_exit 2 sandbox create --name "sbx_abc" --image "$ITEST_IMAGE"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" '{"name":"-lead","image":"x"}'
assert_http 400 invalid_argument "a name starting with -"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" "{\"name\":\"$(printf 'n%.0s' {1..64})\",\"image\":\"x\"}"
assert_http 400 invalid_argument "a 64-character name"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" '{"name":7,"image":"x"}'
assert_http 400 invalid_argument "a name that is not a string"

# ---- rm NAME frees it
assert_exit 0 sandbox rm "$name" --wait --timeout 120
assert_exit 3 sandbox get "$name"
assert_contains "$ITEST_ERR" "not_found" "get of a deleted sandbox's name"
out=$(sandbox create --name "$name" --image "$ITEST_IMAGE") || fail "the name made free by rm: $out"
itest_track "${out%% *}"
[ "${out%% *}" != "$sbx" ] || fail "the name's new sandbox has the old id"
echo "names work wherever an id does, unique in a tenant while not deleted, invisible to other tenants"

