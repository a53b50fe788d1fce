#!/usr/bin/env bash
# The API listener under a flood from anonymous clients (issue 15, finding
# 2): idle connections used to take every file descriptor, slowloris heads
# lived past 120 s, and 8 MiB bodies were buffered before the token was
# checked (RSS 55 MB -> 1.7 GB). Now: connection caps per listener and per
# address with the oldest idle evicted, a head deadline (408), an idle
# deadline, large bodies refused (401) before they are read, one body budget
# (503 + Retry-After), a minimum body rate, accept() back-off. The test runs
# controllers of its own (small caps and deadlines) on the run's database;
# clients are on loopback only (127.0.0.1 .. 127.0.0.9).
# itest-any-env
# itest-timeout: 300
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
tenant=$(itest_tenant itest-apiflood)
itest_as_admin "$tenant"
member=$(itest_token "$tenant" member)
drive="$(dirname "$0")/api_flood.py"

# field OUT KEY N: the Nth word after KEY on the line starting with KEY.
field() { printf '%s\n' "$1" | awk -v k="$2" -v n="$3" '$1 == k { print $(n + 1); exit }'; }
# probe OUT SRC: the /healthz status from SRC, asserted 200 within 2 s.
probe_ok() {
  local line st secs
  line=$(printf '%s\n' "$1" | awk -v s="$2" '$1 == "probe" && $2 == s { print; exit }')
  read -r _ _ st secs <<<"$line"
  assert_eq 200 "$st" "$3: /healthz from $2"
  python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 2 else 1)' "$secs" || fail "$3: /healthz from $2 took ${secs}s"
}

# ---- caps: idle sockets make room, one address cannot hold the listener
itest_own_controller caps 20000 SANDBOX_API_MAX_CONNECTIONS=48 SANDBOX_API_MAX_CONNECTIONS_PER_ADDRESS=12
out=$(python3 "$drive" idle "$CTL_PORT" - 127.0.0.2:200 127.0.0.3:10 127.0.0.4:10 127.0.0.5:10 127.0.0.6:10 \
  127.0.0.7:10 127.0.0.8:10)
itest_log "caps 48 / 12 per address: $(printf '%s' "$out" | tr '\n' ';')"
probe_ok "$out" 127.0.0.1 "200 idle sockets from 127.0.0.2 and 60 from six more"
probe_ok "$out" 127.0.0.2 "the flooding address itself (its oldest idle one evicted)"
probe_ok "$out" 127.0.0.5 "an address under its cap while the listener is full"
n=$(printf '%s\n' "$out" | awk '$1 == "open" && $2 == "127.0.0.2" { print $3 }')
[ "$n" -le 12 ] || fail "127.0.0.2 holds $n idle connections over a per-address cap of 12"
total=$(printf '%s\n' "$out" | awk '$1 == "open" { t += $3 } END { print t }')
[ "$total" -le 48 ] || fail "the idle sockets hold $total connections over a listener cap of 48"
metrics=$(curl -s --max-time 5 "$CTL_URL/metrics")
assert_contains "$metrics" 'sandbox_api_connections_shed_total{action="evicted",cap="address"}' "address evictions counted"
assert_contains "$metrics" 'sandbox_api_connections_shed_total{action="evicted",cap="listener"}' "listener evictions counted"
lines=$(grep -c 'API listener: api_max_connections' "$CTL_LOG" || true)
[ "$lines" -le 6 ] || fail "$lines eviction lines in the log (at most one a second)"
# a body promised on any method and never sent (a GET or DELETE with
# Content-Length: 1): framed and timed like a POST's, evictable once stalled,
# so 48 of them from four addresses cannot make everyone's /healthz a 503
out=$(python3 "$drive" stalled "$CTL_PORT" - 127.0.0.2:12 127.0.0.3:12 127.0.0.4:12 127.0.0.5:12)
itest_log "stalled bodies: $(printf '%s' "$out" | tr '\n' ';')"
probe_ok "$out" 127.0.0.1 "48 connections stalled on a GET's or DELETE's body"
probe_ok "$out" 127.0.0.3 "an address whose 12 connections are stalled bodies"
read -r _ closed opened last <<<"$(printf '%s\n' "$out" | grep '^stalled ')"
assert_eq "$opened" "$closed" "stalled bodies closed within 15 s (the last after ${last}s)"
itest_stop_pid "$CTL_PID" "controller caps" 30 || fail "controller caps did not stop cleanly"

# ---- deadlines: a slow head gets 408, silent and idle connections close
itest_own_controller deadlines 20000 SANDBOX_API_HEAD_TIMEOUT_SECONDS=2 SANDBOX_API_IDLE_TIMEOUT_SECONDS=3 \
  SANDBOX_API_BODY_BUDGET_MIB=2 SANDBOX_API_BODY_MIN_BYTES_PER_SECOND=100000
out=$(python3 "$drive" slowloris "$CTL_PORT")
itest_log "slowloris: $out"
assert_eq 408 "$(field "$out" slowloris 1)" "a head sent a byte every 0.5 s"
assert_contains "$out" '"code":"request_timeout"' "the 408 has the JSON error shape"
secs=$(field "$out" slowloris 2)
python3 -c 'import sys; sys.exit(0 if 2 <= float(sys.argv[1]) < 5 else 1)' "$secs" \
  || fail "the slow head was answered after ${secs}s (head timeout 2 s, checked every second)"
out=$(python3 "$drive" silent "$CTL_PORT")
itest_log "silent: $(printf '%s' "$out" | tr '\n' ';')"
assert_eq closed "$(field "$out" silent 1)" "a connection that never sends a byte"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 5 else 1)' "$(field "$out" silent 2)" \
  || fail "a silent connection lived $(field "$out" silent 2)s (head timeout 2 s)"
assert_eq "200 closed" "$(field "$out" keepalive 1) $(field "$out" keepalive 2)" "a kept-alive connection, idle"
python3 -c 'import sys; sys.exit(0 if 3 <= float(sys.argv[1]) < 6 else 1)' "$(field "$out" keepalive 3)" \
  || fail "an idle kept-alive connection lived $(field "$out" keepalive 3)s (idle timeout 3 s)"

# ---- bodies: large ones need a token first; one budget; a minimum rate
pid=$CTL_PID
out=$(python3 "$drive" bigbodies "$CTL_PORT" "sbx_notatoken_x" "$pid" 150)
itest_log "large bodies with a bad token: $out"
assert_eq 150 "$(field "$out" bigbodies 1)" \
  "150 bodies of 8 MiB with a bad token each got 401 before their body (the others: $(field "$out" bigbodies 6))"
growth=$(field "$out" bigbodies 4)
[ "$growth" -lt 64 ] || fail "150 unauthenticated 8 MiB bodies grew the controller's RSS by $growth MiB"
out=$(python3 "$drive" budget "$CTL_PORT" "$member")
itest_log "budget: $(printf '%s' "$out" | tr '\n' ';')"
assert_eq 413 "$(field "$out" toolarge 1)" "a member's 2 MiB body (max_body_bytes 1 MiB), before it is sent"
assert_eq "503 1" "$(field "$out" budget 1) $(field "$out" budget 2)" \
  "a third 900 KiB body under a 2 MiB budget: 503 with Retry-After: 1"
assert_eq 2 "$(field "$out" slowbody 1)" "both slow bodies were cut off"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) < 12 else 1)' "$(field "$out" slowbody 2)" \
  || fail "the slow bodies lasted $(field "$out" slowbody 2)s (5 s grace, 100000 B/s minimum)"
metrics=$(curl -s --max-time 5 "$CTL_URL/metrics")
assert_contains "$metrics" 'sandbox_api_requests_refused_total{reason="auth"} 150' "refusals counted"
assert_contains "$metrics" 'sandbox_api_requests_refused_total{reason="budget"}' "budget refusals counted"
assert_contains "$metrics" 'sandbox_api_connections_closed_total{reason="slow_body"}' "slow bodies counted"

# ---- heads we judge ourselves; keep-alive and pipelining unharmed
out=$(python3 "$drive" smuggle "$CTL_PORT")
itest_log "smuggle: $(printf '%s' "$out" | tr '\n' ';')"
assert_eq 400 "$(field "$out" twocl 1)" "two Content-Length headers"
assert_eq 404 "$(field "$out" internal 1)" "the internal refusal path sent by a client"
assert_not_contains "$out" forged "a forged refusal text is never echoed"
assert_eq "400 closed" "$(field "$out" headbody 1) $(field "$out" headbody 2)" "a HEAD with a body"
assert_eq "200 200 200" "$(field "$out" pipelined 1) $(field "$out" pipelined 2) $(field "$out" pipelined 3)" \
  "two pipelined requests and a third on the same connection"
SANDBOX_URL=$CTL_URL assert_exit 0 sandbox --token "$member" list
itest_stop_pid "$CTL_PID" "controller deadlines" 30 || fail "controller deadlines did not stop cleanly"

# ---- accept() failing: EMFILE pauses the listener, logged at most once a second
itest_own_controller nofile 256
assert_contains "$(cat "$CTL_LOG")" "API listener: serving at most 42 connections" "the cap fits RLIMIT_NOFILE"
itest_emfile_backoff "$CTL_PID" "$CTL_PORT" "$CTL_LOG" "API listener"
assert_eq 200 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$CTL_URL/healthz")" "/healthz afterwards"
itest_stop_pid "$CTL_PID" "controller nofile" 30 || fail "controller nofile did not stop cleanly"
echo "API listener flood: caps with eviction, head and idle deadlines, token before large bodies, body budget, minimum rate, accept backoff"
