#!/usr/bin/env bash
# Trust classification through the real API and CLI: hostile work with only
# container/gvisor workers fails with isolation_unavailable naming microvm;
# untrusted work gets no open network unless its tenant allows it, and never
# with env; untrusted work runs hardened (no capabilities); a tenant can
# raise a class but not lower it; `sandbox get` explains the decision.
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-cls)
itest_as_admin "$tenant"
small=(--tenant "$tenant" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32)

# Hostile: microvm by default; nobody offers it → refused at once, never run.
assert_exit 1 sandbox create "${small[@]}" --hostile --wait --timeout 60
read -r sh oph <<<"$ITEST_OUT"
itest_track "$sh"
assert_contains "$ITEST_ERR" "isolation_unavailable" "hostile create"
assert_contains "$ITEST_ERR" "microvm" "the refusal names the class"
assert_exit 0 sandbox get "$sh"
assert_contains "$ITEST_OUT" "phase:          failed" "hostile sandbox phase"
assert_contains "$ITEST_OUT" "hostile: the request marks the code hostile" "classification shown"
assert_contains "$ITEST_OUT" "not microvm or stronger" "per-worker reason shown"
cids=$(docker ps -aq --filter "label=dev.sandbox.id=$sh")
assert_eq "" "$cids" "no container for the refused sandbox"

# --isolation microvm on trusted work: the same refusal.
assert_exit 1 sandbox create "${small[@]}" --isolation microvm --wait --timeout 60
read -r sm _ <<<"$ITEST_OUT"
itest_track "$sm"
assert_contains "$ITEST_ERR" "isolation_unavailable" "trusted work asking for microvm"

# Untrusted + open network: refused unless the tenant allows it.
assert_exit 1 sandbox create "${small[@]}" --generated-code --network open
assert_contains "$ITEST_ERR" "policy_denied" "untrusted open network"
assert_contains "$ITEST_ERR" "untrusted_open_network" "the refusal names the rule"
assert_exit 0 sandbox tenants update "$tenant" --policy '{"untrusted_open_network":true}'
assert_exit 1 sandbox create "${small[@]}" --generated-code --network open --env API_KEY=x
assert_contains "$ITEST_ERR" "untrusted_secrets_open_network" "untrusted open network with env"
assert_exit 0 sandbox create "${small[@]}" --generated-code --network open --wait --timeout 120
read -r so _ <<<"$ITEST_OUT"
itest_track "$so"
assert_exit 0 sandbox get "$so" --json
assert_eq untrusted "$(itest_json "$ITEST_OUT" sandbox.classification.trust)" "trust level"
assert_eq true "$(itest_json "$ITEST_OUT" sandbox.hardened)" "untrusted work is hardened"
# ...and hardened means no capabilities inside, where a trusted one has some.
assert_exit 0 sandbox exec "$so" -- grep CapEff /proc/self/status
assert_contains "$ITEST_OUT" "0000000000000000" "capabilities of untrusted work"
assert_exit 0 sandbox create "${small[@]}" --wait --timeout 120
read -r st _ <<<"$ITEST_OUT"
itest_track "$st"
assert_exit 0 sandbox exec "$st" -- grep CapEff /proc/self/status
assert_not_contains "$ITEST_OUT" "0000000000000000" "capabilities of trusted work"
assert_exit 0 sandbox get "$st"
assert_contains "$ITEST_OUT" "trusted: no trust flags set" "trusted classification shown"
assert_contains "$ITEST_OUT" "hardening:      standard" "trusted hardening shown"

# A tenant raises a class (untrusted → microvm: now refused) but cannot
# lower one below the server's.
assert_exit 0 sandbox tenants update "$tenant" --policy '{"isolation_untrusted":"microvm"}'
assert_exit 1 sandbox create "${small[@]}" --untrusted-repo --wait --timeout 60
read -r su _ <<<"$ITEST_OUT"
itest_track "$su"
assert_contains "$ITEST_ERR" "isolation_unavailable" "tenant rule raised the class"
assert_exit 0 sandbox get "$su"
assert_contains "$ITEST_OUT" "tenant rule isolation_untrusted" "the tenant rule is named"
assert_exit 1 sandbox tenants update "$tenant" --policy '{"isolation_hostile":"container"}'
assert_contains "$ITEST_ERR" "policy_denied" "lowering the hostile class"
assert_contains "$ITEST_ERR" "weaker than the server's microvm" "the refusal says why"
itest_http POST /v1/sandboxes "$ITEST_ADMIN_TOKEN" "{\"tenant\":\"$tenant\",\"image\":\"$ITEST_IMAGE\",\"isolation\":\"vm\"}"
assert_http 400 invalid_argument "an unknown class"
echo "classification refuses, hardens and explains as documented"
