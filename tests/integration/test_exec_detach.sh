#!/usr/bin/env bash
# Detached commands: `sandbox exec --detach` returns the operation id at once;
# `sandbox output OP [--follow] [--json]` shows its output (and, once it
# ended, exits with its code); `sandbox cancel OP` kills the command's
# process tree in the container (and under gVisor) and the operation ends
# cancelled; cancel is refused for other kinds, finished execs and other
# tenants; exec_timeout_max_seconds bounds timeouts; a tenant's stored live
# output is bounded over all its execs (another tenant's untouched); one
# tenant's long commands hold at most its share of a worker's executors
# (another tenant's exec answers at once), tightened by its policy.
# itest-timeout: 300
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-detach
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --network none --wait --timeout 300
read -r sbx cop <<<"$ITEST_OUT"
itest_track "$sbx"

# ---- --detach answers at once with the operation id
t0=$(date +%s)
assert_exit 0 sandbox exec --detach --timeout 3600 "$sbx" -- sh -c 'echo begin; sleep 1; echo more >&2; sleep 300 & sleep 301'
op=$ITEST_OUT
assert_match "$op" '^op_[a-z0-9]+$' "what exec --detach prints"
[ $(($(date +%s) - t0)) -le 5 ] || fail "exec --detach took over 5 s"

# ---- output while it runs: what is there so far, exit 0
itest_wait_until 20 "the detached command's output" sh -c "\"$SANDBOX_CLI\" output $op 2>&1 | grep -q more"
assert_exit 0 sandbox output "$op"
assert_eq "begin" "$ITEST_OUT" "sandbox output stdout of a running command"
assert_eq "more" "$ITEST_ERR" "sandbox output stderr of a running command"
assert_exit 0 sandbox output "$op" --json
assert_eq false "$(itest_json "$ITEST_OUT" done)" "done while running"
assert_eq "begin" "$(itest_json "$ITEST_OUT" chunks.0.data | tr -d '\n')" "first chunk"

# ---- a follower, then cancel: the process tree dies, the operation ends cancelled
sandbox output "$op" --follow >"$ITEST_TMP/follow.out" 2>"$ITEST_TMP/follow.err" &
follower=$!
sleep 1
assert_exit 0 sandbox exec "$sbx" -- ps
assert_contains "$ITEST_OUT" "sleep 301" "ps before the cancel"
t0=$(date +%s)
assert_exit 0 sandbox cancel "$op"
assert_eq "$op running" "$ITEST_OUT" "sandbox cancel of a running exec"
rc=0
wait "$follower" || rc=$?
took=$(($(date +%s) - t0))
assert_eq 1 "$rc" "exit code of a follow of a cancelled exec"
[ "$took" -le 20 ] || fail "the cancel took ${took}s to end the command"
itest_log "cancel ended the command after ${took}s"
assert_eq "begin" "$(cat "$ITEST_TMP/follow.out")" "followed stdout"
assert_contains "$(cat "$ITEST_TMP/follow.err")" "more" "followed stderr"
assert_contains "$(cat "$ITEST_TMP/follow.err")" "cancelled" "the follow says it was cancelled"
assert_exit 0 sandbox operation "$op" --json
assert_eq cancelled "$(itest_json "$ITEST_OUT" operation.state)" "state after cancel"
assert_eq cancelled "$(itest_json "$ITEST_OUT" operation.error.code operation.error_code)" "error code after cancel"
assert_exit 0 sandbox exec "$sbx" -- ps
assert_not_contains "$ITEST_OUT" "sleep 30" "ps after the cancel: the whole tree is gone"
# what it wrote stays readable
assert_exit 1 sandbox output "$op"
assert_eq "begin" "$ITEST_OUT" "output of the cancelled exec"

# ---- refusals
assert_exit 3 sandbox cancel "$op"
assert_contains "$ITEST_ERR" "conflict" "cancel of a cancelled exec"
assert_contains "$ITEST_ERR" "already cancelled" "cancel of a cancelled exec"
assert_exit 3 sandbox cancel "$cop"
assert_contains "$ITEST_ERR" "only exec operations can be cancelled" "cancel of a create"
other=$(itest_token "$(itest_tenant itest-detach-other)" member)
itest_http POST "/v1/operations/$op/cancel" "$other"
assert_http 404 not_found "cancel of another tenant's exec"

# ---- a finished detached command: output --follow exits with its code
assert_exit 0 sandbox exec --detach "$sbx" -- sh -c 'echo done-here; exit 5'
op5=$ITEST_OUT
assert_exit 5 sandbox output "$op5" --follow
assert_eq "done-here" "$ITEST_OUT" "output of a finished detached command"

sql() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }
bt=$(itest_tenant itest-detach-b)
btok=$(itest_token "$bt" member)
assert_exit 0 env SANDBOX_TOKEN="$btok" "$SANDBOX_CLI" create --image "$ITEST_IMAGE" --network none --wait --timeout 300
read -r bsbx _ <<<"$ITEST_OUT"
itest_track "$bsbx"

# ---- a tenant's stored live output is bounded over all its execs (issue 27):
# tenant B writes 1.5 MB; tenant A, with exec_output_tenant_keep_bytes 1 MiB,
# runs three chatty detached execs of 800 kB: A keeps at most 1 MiB (its
# finished execs' output went first, its last exec's is whole), B's 1.5 MB
# is untouched
kept() { # kept TENANT: the bytes of live output its operations keep
  sql "SELECT coalesce(sum(length(e.data)), 0) FROM exec_output e JOIN operations o ON o.id = e.operation_id
       JOIN tenants t ON t.id = o.tenant_id WHERE t.name = '$1'"
}
t_out=$(date +%s)
assert_exit 0 env SANDBOX_TOKEN="$btok" "$SANDBOX_CLI" exec --detach "$bsbx" -- head -c 1500000 /dev/zero
assert_exit 0 sandbox --token "$btok" wait "$ITEST_OUT" --timeout 60
itest_http PUT "/v1/tenants/$tenant/policy" "$ITEST_ADMIN_TOKEN" '{"exec_output_tenant_keep_bytes":1048576}'
policy_status=$HTTP_STATUS
chatty=()
for _ in 1 2 3; do
  assert_exit 0 sandbox exec --detach "$sbx" -- head -c 800000 /dev/zero
  chatty+=("$ITEST_OUT")
  assert_exit 0 sandbox wait "$ITEST_OUT" --timeout 60
done
a_kept=$(kept "$tenant")
b_kept=$(kept "$bt")
itest_log "live output kept: tenant A $a_kept bytes (bound 1048576), tenant B $b_kept bytes"
[ "$a_kept" -le 1048576 ] || fail "tenant A keeps $a_kept bytes of live output, over its 1048576 bound"
assert_eq 1500000 "$b_kept" "tenant B's live output, untouched by A's bound"
assert_eq 200 "$policy_status" "the policy with exec_output_tenant_keep_bytes"
assert_eq "0 800000 800000" "$(sql "SELECT min(byte_offset) || ' ' || max(byte_offset + length(data)) || ' ' ||
  sum(length(data)) FROM exec_output WHERE operation_id = '${chatty[2]}'")" "A's last exec keeps its whole output"
assert_eq 0 "$(sql "SELECT count(*) FROM exec_output WHERE operation_id = '${chatty[0]}'")" \
  "A's first exec's output went first"
assert_eq "$a_kept" "$(sql "SELECT bytes FROM exec_output_usage u JOIN tenants t ON t.id = u.tenant_id
                           WHERE t.name = '$tenant'")" "A's output counter"
itest_http GET /metrics ""
assert_contains "$HTTP_BODY" 'sandbox_exec_output_tenant_dropped_bytes_total{from="finished"}' "the metric"
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$tenant" --policy '{}'
itest_log "output bound: $(($(date +%s) - t_out)) s"

# ---- one tenant's long commands leave executors for another's (issue 27):
# tenant A starts as many detached sleeps as the run's worker has executors
# (worker_executors 8, the default: lib.sh itest_start_worker); the claim
# hands the worker only A's share (worker_tenant_executors_percent 75: 6),
# so tenant B's exec answers at once instead of when A's sleeps end
aops=()
cancel_aops() { for o in "${aops[@]}"; do "$SANDBOX_CLI" cancel "$o" >/dev/null 2>&1 || true; done; }
itest_on_exit cancel_aops
t_fair=$(date +%s)
for _ in 1 2 3 4 5 6 7 8; do
  assert_exit 0 sandbox exec --detach --timeout 300 "$sbx" -- sleep 120
  aops+=("$ITEST_OUT")
done
in_ops=$(printf "'%s'," "${aops[@]}")
in_ops=${in_ops%,}
a_running() { sql "SELECT count(*) FROM operations WHERE id IN ($in_ops) AND state = 'running'"; }
a_holds_its_share() { [ "$(a_running)" -ge 6 ]; }
itest_wait_until 30 "tenant A's sleeps running" a_holds_its_share
sleep 1 # what the worker would take beyond the share, it takes now
t0=$(date +%s%N)
assert_exit 0 timeout 20 env SANDBOX_TOKEN="$btok" "$SANDBOX_CLI" exec "$bsbx" -- echo hi
took=$((($(date +%s%N) - t0) / 1000000))
assert_eq hi "$ITEST_OUT" "tenant B's exec while A's sleeps hold the executors"
itest_log "tenant B's exec answered in $took ms while A ran $(a_running) sleeps"
[ "$took" -le 5000 ] || fail "tenant B's exec took $took ms behind tenant A's sleeps"
assert_eq "6 2" "$(sql "SELECT count(*) FILTER (WHERE state = 'running') || ' ' || count(*) FILTER (WHERE state =
  'leased') FROM operations WHERE id IN ($in_ops)")" "A's sleeps: its share running, the rest leased"
# one of A's ends: one that waited starts at once (the report wakes the
# worker's held-back poll; not at the poll's 30 s end)
assert_exit 0 sandbox cancel "${aops[0]}"
started() { [ "$(sql "SELECT count(*) FROM operations WHERE id IN ($in_ops) AND state = 'leased'")" = 1 ]; }
itest_wait_until 15 "one of A's waiting sleeps started after one ended" started
cancel_aops
# a tenant policy tightens the share: B at 2 runs no third; B's delete of
# its sandbox still runs at once (a delete is never held back: it is what
# ends the long commands)
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$bt" --policy '{"max_executors_per_worker":2}'
bops=()
for _ in 1 2 3; do
  assert_exit 0 env SANDBOX_TOKEN="$btok" "$SANDBOX_CLI" exec --detach --timeout 300 "$bsbx" -- sleep 120
  bops+=("$ITEST_OUT")
done
in_ops=$(printf "'%s'," "${bops[@]}")
in_ops=${in_ops%,}
two_running() { [ "$(a_running)" = 2 ]; }
itest_wait_until 20 "two of B's sleeps running" two_running
sleep 1
assert_eq "2 1" "$(sql "SELECT count(*) FILTER (WHERE state = 'running') || ' ' || count(*) FILTER (WHERE state =
  'leased') FROM operations WHERE id IN ($in_ops)")" "B's sleeps under max_executors_per_worker 2"
assert_exit 0 env SANDBOX_TOKEN="$btok" "$SANDBOX_CLI" delete "$bsbx" --wait --timeout 30
itest_log "executor shares: $(($(date +%s) - t_fair)) s"

# ---- the timeout ceiling (exec_timeout_max_seconds), on a controller of our own
itest_own_controller lowcap 1024 SANDBOX_EXEC_TIMEOUT_MAX_SECONDS=100
SANDBOX_URL=$CTL_URL itest_http POST "/v1/sandboxes/$sbx/exec" "$SANDBOX_TOKEN" '{"argv":["true"],"timeout_seconds":200}'
assert_http 422 policy_denied "timeout over exec_timeout_max_seconds"
assert_contains "$(itest_json "$HTTP_BODY" error.message)" "exec_timeout_max_seconds" "the ceiling named"

# ---- gVisor: the cancel kills inside the sandbox
itest_require_gvisor
assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --isolation gvisor --network none --wait --timeout 300
read -r gsbx _ <<<"$ITEST_OUT"
itest_track "$gsbx"
assert_exit 0 sandbox exec --detach "$gsbx" -- sh -c 'sleep 310 & sleep 311'
gop=$ITEST_OUT
itest_wait_until 20 "the gvisor command running" sh -c "\"$SANDBOX_CLI\" exec $gsbx -- ps | grep -q 'sleep 311'"
assert_exit 0 sandbox cancel "$gop"
rc=0
sandbox wait "$gop" --timeout 30 >/dev/null 2>&1 || rc=$?
assert_eq 1 "$rc" "sandbox wait of the cancelled gvisor exec"
assert_exit 0 sandbox operation "$gop" --json
assert_eq cancelled "$(itest_json "$ITEST_OUT" operation.state)" "gvisor exec state after cancel"
assert_exit 0 sandbox exec "$gsbx" -- ps
assert_not_contains "$ITEST_OUT" "sleep 31" "ps in the gvisor sandbox after the cancel"
assert_exit 0 sandbox delete "$gsbx" --wait

echo "detached commands start at once, are followed, and cancel kills their process tree"
assert_exit 0 sandbox delete "$sbx" --wait
