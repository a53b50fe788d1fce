#!/usr/bin/env bash
# Tenants as an operator keeps them: `tenants get` says what a tenant uses
# now (live sandboxes, cpu, memory, pools, active tokens) and /metrics has it
# per tenant (sandbox_tenant_usage); `tenants delete` is refused while the
# tenant owns a sandbox not deleted yet (naming it and what to do), for a
# member and for the caller's own tenant; once it owns nothing it deletes:
# the tenant's tokens stop at once, it leaves every list and lookup, its
# event is recorded, and its name can be created again as a new tenant.
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

tenant=$(itest_tenant itest-tnt)
itest_as_admin "$tenant"
member=$(itest_token "$tenant" member)
assert_exit 0 sandbox tenants get "$tenant" --json
old_id=$(itest_json "$ITEST_OUT" tenant.id)
assert_eq 0 "$(itest_json "$ITEST_OUT" tenant.usage.live_sandboxes)" "a new tenant uses nothing"
assert_eq 1 "$(itest_json "$ITEST_OUT" tenant.usage.active_tokens)" "its one member token"

# ---- what it uses: one running sandbox of 250 mCPU, 128 MiB
out=$(SANDBOX_TOKEN=$member sandbox create --image "$ITEST_IMAGE" --cpu-millis 250 --memory-mib 128 --wait --timeout 120) ||
  fail "create: $out"
sbx=${out%% *}
assert_exit 0 sandbox tenants get "$tenant" --json
assert_eq 1 "$(itest_json "$ITEST_OUT" tenant.usage.live_sandboxes)" "usage: live sandboxes"
assert_eq 250 "$(itest_json "$ITEST_OUT" tenant.usage.live_cpu_millis)" "usage: cpu"
assert_eq 128 "$(itest_json "$ITEST_OUT" tenant.usage.live_memory_mib)" "usage: memory"
assert_exit 0 sandbox tenants get "$tenant"
assert_contains "$ITEST_OUT" "usage: 1 live sandboxes, 250 mCPU, 128 MiB" "tenants get prints the usage"
# a member sees its own tenant's usage, not another's
assert_exit 0 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" tenants get "$tenant" --json
assert_eq 1 "$(itest_json "$ITEST_OUT" tenant.usage.live_sandboxes)" "a member's own usage"
assert_exit 3 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" tenants get itest-admin
metrics=$(curl -sf --max-time 30 "$SANDBOX_URL/metrics") || fail "GET /metrics failed"
assert_contains "$metrics" "sandbox_tenant_usage{tenant=\"$tenant\",resource=\"sandboxes\"} 1" "the tenant's sandboxes in /metrics"
assert_contains "$metrics" "sandbox_tenant_usage{tenant=\"$tenant\",resource=\"memory_bytes\"} 134217728" \
  "the tenant's memory in /metrics"

# ---- refused while it owns a live sandbox; refused to a member; refused for one's own tenant
assert_exit 3 sandbox tenants delete "$tenant"
assert_contains "$ITEST_ERR" "conflict" "deleting a tenant with a live sandbox"
assert_contains "$ITEST_ERR" "owns 1 sandbox not deleted yet" "the refusal says what it owns"
assert_contains "$ITEST_ERR" "sandbox rm" "and what to do"
assert_exit 0 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" exec "$sbx" -- true
assert_exit 3 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" tenants delete "$tenant"
assert_contains "$ITEST_ERR" "forbidden" "a member deleting its tenant"
assert_exit 3 sandbox tenants delete itest-admin
assert_contains "$ITEST_ERR" "its own tenant" "an admin deleting its own tenant"
assert_exit 3 sandbox tenants delete "itest-tnt-nosuch"
assert_contains "$ITEST_ERR" "not_found" "deleting a tenant that does not exist"

# ---- owning nothing, it deletes
assert_exit 0 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" delete "$sbx" --wait --timeout 120
assert_exit 0 sandbox tenants delete "$tenant"
assert_contains "$ITEST_OUT" "deleted tenant $tenant" "tenants delete"
assert_exit 3 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" list
assert_contains "$ITEST_ERR" "unauthorized" "the deleted tenant's token is refused at once"
assert_exit 3 sandbox tenants get "$tenant"
assert_contains "$ITEST_ERR" "not_found" "a deleted tenant is not found"
assert_exit 0 sandbox tenants list
assert_not_contains "$ITEST_OUT" "$tenant" "a deleted tenant is not listed"
assert_exit 0 sandbox events --json --kind tenant.deleted
assert_contains "$ITEST_OUT" "\"data\":{\"name\":\"$tenant\"}" "the tenant.deleted event names it"
assert_exit 3 sandbox tenants delete "$tenant"
assert_contains "$ITEST_ERR" "not_found" "deleting it twice"
# the name is free: a new tenant, a new id, nothing of the old one's
assert_exit 0 sandbox tenants create "$tenant" --json
new_id=$(itest_json "$ITEST_OUT" tenant.id)
[ -n "$new_id" ] && [ "$new_id" != "$old_id" ] || fail "the name made again is a new tenant ($old_id / $new_id)"
assert_exit 0 sandbox tenants get "$tenant" --json
assert_eq 0 "$(itest_json "$ITEST_OUT" tenant.usage.active_tokens)" "the old tenant's tokens are not the new one's"
assert_exit 0 sandbox tenants delete "$tenant"
echo "tenants get shows the usage; delete is refused while owning, then revokes, hides and frees the name"
