#!/usr/bin/env bash
# Fair shares on a controller (issue 27): what one tenant holds open at once
# is capped per tenant (tenant_max_shells 8, tenant_max_transfers 16,
# tenant_max_log_streams 32, tenant_max_worker_connections 64; a tenant's
# policy max_* tightens them), so its idle shells cannot take every
# controller-wide transfer slot and another tenant's cp and shell still run;
# a route of a tenant at its share of worker connections gets 503; a revoked
# token's open shell and log follow end; an idle shell is closed after
# shell_idle_timeout_seconds with a line saying so. Traffic goes only to the
# test's controllers and worker on loopback.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
ta=$(itest_tenant itest-fair-a)
tb=$(itest_tenant itest-fair-b)
itest_as_admin "$ta" "$tb"
a_tok=$(itest_token "$ta" member)
b_tok=$(itest_token "$tb" member)

# Its own controller on the run's database: the counts it reads
# (sandbox_tenant_streams) are this test's alone, whatever runs beside it.
itest_own_controller fair 4096
export SANDBOX_URL=$CTL_URL
export SANDBOX_TOKEN=$a_tok
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --wait --timeout 120
read -r sa _ <<<"$ITEST_OUT"
itest_track "$sa"
SANDBOX_TOKEN=$b_tok assert_exit 0 sandbox create --image "$ITEST_IMAGE" --wait --timeout 120
read -r sb _ <<<"$ITEST_OUT"
itest_track "$sb"

# bg NAME CMD...: CMD in the background, its output in $ITEST_TMP/fair-NAME.out,
# its pid in pids[NAME], stopped with the test.
declare -A pids
bg() {
  local name=$1
  shift
  "$@" </dev/null >"$ITEST_TMP/fair-$name.out" 2>&1 &
  itest_track_pid "$!"
  pids[$name]=$!
}
# sleeps N TAG: how many `sleep N` run in sandbox sa (a shell's command each).
sleeps() {
  SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" exec "$sa" -- sh -c "ps | grep -c '[s]leep $1'" 2>/dev/null || true
}
held() { # held KIND: the test's controller's sandbox_tenant_streams{kind="KIND"}
  curl -s --max-time 5 "$SANDBOX_URL/metrics" |
    sed -n "s/^sandbox_tenant_streams{kind=\"$1\"} \([0-9]*\).*/\1/p"
}
# for itest_wait_until, which runs its command again each time
sleeps_are() { test "$(sleeps "$1")" = "$2"; }
held_is() { test "$(held "$1")" = "$2"; }

# ---- the idle bound, on a controller of the test's own (its shell starts
# now and is checked at the end, so its wait overlaps the rest)
itest_own_controller idle 4096 SANDBOX_SHELL_IDLE_TIMEOUT_SECONDS=10
SANDBOX_URL=$CTL_URL bg idle "$SANDBOX_CLI" shell "$sa" -- sleep 171
idle_t0=$(date +%s)

# ---- shells: tenant A gets 8 (tenant_max_shells), the 9th is 429; the
# shells took 8 of A's 16 transfers, not the controller's 64
for i in 1 2 3 4 5 6 7 8; do
  bg "shell$i" "$SANDBOX_CLI" shell "$sa" -- sleep 173
done
itest_wait_until 30 "A's eight shells running" sleeps_are 173 8
assert_exit 1 sandbox shell "$sa" -- true
assert_contains "$ITEST_ERR" "quota_exceeded" "A's ninth shell"
assert_contains "$ITEST_ERR" "8 shells" "A's ninth shell"
assert_contains "$ITEST_ERR" "tenant_max_shells" "A's ninth shell"
# what the test's controller holds (the idle shell is on the other one)
assert_eq 8 "$(held shells)" "shells held on the test's controller"
assert_eq 8 "$(held transfers)" "transfers held on the test's controller"
# A's own transfers still fit its share; B's shell and cp are untouched
assert_exit 0 sandbox cp "$sa:/etc/hostname" "$ITEST_TMP/fair-a-hostname"
SANDBOX_TOKEN=$b_tok assert_exit 0 sandbox shell "$sb" -- echo "b's shell runs"
assert_contains "$ITEST_OUT" "b's shell runs" "B's shell while A holds its share"
SANDBOX_TOKEN=$b_tok assert_exit 0 sandbox cp "$sb:/etc/hostname" "$ITEST_TMP/fair-b-hostname"
# a policy tightens the setting: A at max_transfers 8 holds 8 (its shells)
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$ta" --policy '{"max_transfers":8}'
assert_exit 1 sandbox cp "$sa:/etc/hostname" "$ITEST_TMP/fair-a-hostname2"
assert_contains "$ITEST_ERR" "max_transfers" "A's cp at its policy's max_transfers"
for i in 1 2 3 4 5 6 7 8; do
  kill "${pids[shell$i]}"
done
itest_wait_until 30 "A's shells gone" sleeps_are 173 0
itest_wait_until 10 "A's shells released" held_is shells 0

# ---- log streams and worker connections under a policy: two follows hold
# A's share of connections to workers, so its route answers 503, and a
# third follow is 429; one follow gone, the route answers again
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$ta" \
  --policy '{"max_log_streams":3,"max_worker_connections":2}'
assert_exit 0 sandbox exec "$sa" -- sh -c 'mkdir -p /tmp/www && echo up >/tmp/www/index.html && httpd -p 8080 -h /tmp/www'
assert_exit 0 sandbox share "$sa" --port 8080 --auth public --wait --timeout 60
url=$(head -n 1 <<<"$ITEST_OUT")
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url")" "A's route before its follows"
bg follow1 "$SANDBOX_CLI" logs "$sa" --follow
bg follow2 "$SANDBOX_CLI" logs "$sa" --follow
itest_wait_until 15 "A's two follows open" held_is log_streams 2
# A's two follows hold its share of connections to workers (2)
assert_eq 503 "$(curl -s -o "$ITEST_TMP/fair-route.out" -w '%{http_code}' --max-time 10 "$url")" \
  "A's route at its share of worker connections"
assert_contains "$(cat "$ITEST_TMP/fair-route.out")" "share of connections to workers" "the route's 503"
assert_exit 1 sandbox logs "$sa" --follow
assert_contains "$ITEST_ERR" "quota_exceeded" "A's third follow"
assert_contains "$ITEST_ERR" "max_worker_connections" "A's third follow"
kill "${pids[follow2]}"
itest_wait_until 10 "one follow closed" held_is log_streams 1
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$url")" "A's route under its share again"

# ---- a revoked token: its open shell and its follow end within a sweep
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$ta" --policy '{}'
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tokens create --tenant "$ta" --role member --name revoked
r_tok=$ITEST_OUT
rid=$(printf '%s' "$ITEST_ERR" | sed -n 's/.*token id: \(tok_[a-z2-7]*\).*/\1/p')
SANDBOX_TOKEN=$r_tok bg rshell "$SANDBOX_CLI" shell "$sa" -- sleep 179
SANDBOX_TOKEN=$r_tok bg rfollow "$SANDBOX_CLI" logs "$sa" --follow
itest_wait_until 30 "the shell of the token to revoke" sleeps_are 179 1
itest_wait_until 10 "its follow" held_is log_streams 2
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tokens revoke "$rid"
t0=$(date +%s)
gone() { ! kill -0 "${pids[rshell]}" 2>/dev/null && ! kill -0 "${pids[rfollow]}" 2>/dev/null; }
itest_wait_until 15 "the revoked token's shell and follow to end" gone
itest_log "the revoked token's shell and follow ended $(($(date +%s) - t0)) s after the revocation"
assert_contains "$(cat "$ITEST_TMP/fair-rshell.out")" "token was revoked" "the revoked shell's last line"
itest_wait_until 30 "the revoked shell's command gone" sleeps_are 179 0

# ---- the idle shell: closed after 10 s without a byte, saying so
itest_wait_until 30 "the idle shell to end" bash -c "! kill -0 ${pids[idle]} 2>/dev/null"
idle_secs=$(($(date +%s) - idle_t0))
assert_contains "$(cat "$ITEST_TMP/fair-idle.out")" "no bytes either way for 10 s" "the idle shell's last line"
itest_log "the idle shell ended within ${idle_secs} s of its start (bound 10 s, swept every 5 s)"
echo "fair shares: 8 shells a tenant, transfers and worker connections per tenant, routes at the share 503, revoked tokens' streams end, idle shells close"
