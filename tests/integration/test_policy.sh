#!/usr/bin/env bash
# Tenant policy: per-sandbox limits, image allowlist and network modes are
# refused with 422 policy_denied naming the rule; a policy can only tighten the
# server's ceilings; quotas hold under 20 concurrent creates (429
# quota_exceeded, never exceeded); the exec output ceiling applies.
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

tenant=$(itest_tenant itest-pol)
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
assert_exit 0 sandbox tenants create "$tenant"
assert_exit 0 sandbox tenants update "$tenant" --json --policy \
  '{"max_cpu_millis":500,"max_sandboxes":3,"images":["sandbox/*"],"network_modes":["none","restricted"],"exec_output_max_bytes":1000}'
assert_eq 3 "$(itest_json "$ITEST_OUT" tenant.policy.max_sandboxes)" "stored policy"
assert_exit 1 sandbox tenants update "$tenant" --policy '{"max_cpu_millis":20000}'
assert_contains "$ITEST_ERR" "can only tighten" "loosening the server ceiling"
assert_exit 3 sandbox tenants update "$tenant" --policy '{"max_gpus":1}'
assert_contains "$ITEST_ERR" "unknown field" "unknown policy field"
member=$("$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant "$tenant" --role member)
export SANDBOX_TOKEN=$member

assert_exit 1 sandbox create --image "$ITEST_IMAGE" --cpu-millis 1000
assert_contains "$ITEST_ERR" "tenant policy max_cpu_millis = 500" "cpu over the tenant limit"
assert_exit 1 sandbox create --image other/image:1 --cpu-millis 100
assert_contains "$ITEST_ERR" "images allowlist" "image not allowed"
assert_exit 1 sandbox create --image "$ITEST_IMAGE" --cpu-millis 100 --network open
assert_contains "$ITEST_ERR" "network_modes" "network mode not allowed"

# The server's default image (no --image) is judged by the allowlist too.
other=$(itest_tenant itest-pol-img)
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN sandbox tenants create "$other" >/dev/null
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN sandbox tenants update "$other" --policy '{"images":["registry.local/*"]}' >/dev/null
assert_exit 1 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" create --tenant "$other" --cpu-millis 100
assert_contains "$ITEST_ERR" "image sandbox/busybox:latest is not in the tenant policy images allowlist" \
  "the default image under an allowlist without it"
assert_contains "$ITEST_ERR" "(allowed: registry.local/*)" "the refusal names what the allowlist holds"

# What exists: sandbox images lists the workers' images the tenant may use.
assert_exit 0 sandbox images
assert_contains "$ITEST_OUT" "$ITEST_IMAGE" "the member's images (policy sandbox/*)"
assert_contains "$ITEST_OUT" "container" "the isolation classes of the image's workers"
assert_eq "$ITEST_IMAGE" "$(sandbox images -q | grep -Fx "$ITEST_IMAGE")" "images -q: names only"
assert_exit 0 sandbox images --json
assert_eq "sandbox/*" "$(itest_json "$ITEST_OUT" allowed.0)" "the policy's patterns in the answer"
# its size and creation time, as the worker's Docker has them
got=$(python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
img = [i for i in doc["images"] if i["name"] == sys.argv[2]][0]
print("ok" if isinstance(img.get("size"), int) and img["size"] > 1000 and str(img.get("created", "")).startswith("20") else img)
' "$ITEST_OUT" "$ITEST_IMAGE")
want_size=$(docker image inspect -f '{{.Size}}' "$ITEST_IMAGE")
assert_eq ok "$got" "an image's size and created"
assert_contains "$ITEST_OUT" "\"size\": $want_size" "the size is Docker's"
assert_exit 0 sandbox images
assert_contains "$ITEST_OUT" "SIZE" "images prints a SIZE column"
assert_exit 3 sandbox images --tenant "$other"
assert_contains "$ITEST_ERR" "forbidden" "a member listing another tenant's images"
assert_exit 2 sandbox images extra
# the tenant allowed only registry.local/*: nothing listed, and it says why
assert_exit 0 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" images --tenant "$other"
assert_not_contains "$ITEST_OUT" "$ITEST_IMAGE" "images of a tenant allowed only registry.local/*"
assert_contains "$ITEST_ERR" "that tenant $other's policy does not allow (images: registry.local/*)" \
  "what the workers have that the policy refuses"
# an admin without --tenant sees every image
assert_exit 0 env SANDBOX_TOKEN="$ITEST_ADMIN_TOKEN" "$SANDBOX_CLI" images -q
assert_contains "$ITEST_OUT" "$ITEST_IMAGE" "the admin's images"
wtok=$("$SANDBOXD" token create --database-url "$DATABASE_URL" --tenant "$tenant" --role worker --worker itest-pol-nobody)
itest_http GET /v1/images "$wtok"
assert_http 403 "" "a worker token listing images"

# Quota under a race: 20 creates at once, max_sandboxes 3.
body="{\"image\":\"$ITEST_IMAGE\",\"cpu_millis\":100,\"memory_mib\":32}"
dir="$ITEST_TMP/policy-race"
mkdir -p "$dir"
for i in $(seq 20); do
  curl -s -o "$dir/$i.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $member" \
    -H 'Content-Type: application/json' --data-binary "$body" "$SANDBOX_URL/v1/sandboxes" >"$dir/$i.code" &
done
wait
accepted=$(grep -l 202 "$dir"/*.code | wc -l)
refused=$(grep -l 429 "$dir"/*.code | wc -l)
for f in "$dir"/*.json; do
  id=$(itest_json "$(cat "$f")" sandbox.id 2>/dev/null) && itest_track "$id"
done
assert_eq 3 "$accepted" "creates accepted under max_sandboxes = 3"
assert_eq 17 "$refused" "creates refused with 429"
assert_contains "$(cat "$(grep -l 429 "$dir"/*.code | head -n 1 | sed 's/code$/json/')")" "quota_exceeded" "429 body"
live=$("$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c \
  "SELECT count(*) FROM sandboxes s JOIN tenants t ON t.id = s.tenant_id WHERE t.name = '$tenant' AND s.phase <> 'deleted'")
assert_eq 3 "$live" "sandboxes of the tenant"

# Exec output ceiling of the tenant.
id=$(itest_json "$(cat "$(grep -l 202 "$dir"/*.code | head -n 1 | sed 's/code$/json/')")" sandbox.id)
op=$(itest_json "$(cat "$(grep -l 202 "$dir"/*.code | head -n 1 | sed 's/code$/json/')")" operation.id)
assert_exit 0 sandbox wait "$op" --timeout 120
assert_exit 1 sandbox exec "$id" --max-output 5000 -- true
assert_contains "$ITEST_ERR" "exec_output_max_bytes = 1000" "exec output over the tenant ceiling"
assert_exit 0 sandbox exec "$id" --json -- head -c 3000 /dev/zero
assert_eq 1000 "$(python3 -c 'import json,sys; print(len(json.loads(sys.argv[1])["operation"]["result"]["stdout"]))' "$ITEST_OUT")" \
  "output kept under the tenant ceiling by default"
echo "policy limits, allowlists, quotas and output ceilings hold"
