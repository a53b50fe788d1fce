#!/usr/bin/env bash
# Rate limits (issue 15, "What must hold" 2): a controller of its own with
# small limits (5 requests a second per token, bursts of 10; 1 operation a
# second per tenant, bursts of 2). Tenant A's token floods requests: some get
# 429 rate_limited with Retry-After and the JSON error shape, while tenant
# B's requests at the same time all succeed. A's creates past its operation
# rate get 429 (the CLI exits 3 naming rate_limited) while B's create is
# accepted; after Retry-After A's create is accepted again. A worker token
# flooding its endpoints never gets 429, and the metric counts both kinds. A
# client back inside the Retry-After it was given gets its 429 only when that
# ends; one that waits as told is answered at once.
# Traffic goes only to the test's controller on 127.0.0.1 (no worker: the
# creates stay pending and go with the private database).
# itest-timeout: 180
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_rate
cpid=
rate_teardown() {
  [ -z "$cpid" ] || itest_stop_pid "$cpid" "rate-limit controller" 30
  itest_drop_private_db
}
itest_on_exit rate_teardown
"$SANDBOXD" migrate --database-url "$url" >/dev/null
clog="$ITEST_TMP/rate-controller-$$.log"
itest_watch_log "$clog"
cport=$(itest_free_port)
rport=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$cport"
SANDBOX_RATE_REQUESTS_PER_SECOND=5 SANDBOX_RATE_REQUESTS_BURST=10 \
  SANDBOX_RATE_OPERATIONS_PER_SECOND=1 SANDBOX_RATE_OPERATIONS_BURST=2 \
  "$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$cport" --route-listen "127.0.0.1:$rport" \
  >>"$clog" 2>&1 </dev/null &
cpid=$!
itest_wait_healthz "$SANDBOX_URL" "$cpid" controller "$clog" || fail "the controller did not come up"
mktok() { # TENANT ROLE [NAME]
  local t
  t=$("$SANDBOXD" token create --database-url "$url" --tenant "$1" --role "$2" ${3:+--name "$3"})
  printf '%s\n' "$t" >>"$ITEST_TMP/secrets.txt"
  printf '%s\n' "$t"
}
admin=$(mktok itest-rate-admin admin)
export ITEST_ADMIN_TOKEN=$admin
for t in itest-rate-a itest-rate-b; do
  itest_http POST /v1/tenants "$admin" "{\"name\":\"$t\"}"
  assert_http 201 "" "create tenant $t"
done
tok_a1=$(mktok itest-rate-a member)   # floods requests
tok_a2=$(mktok itest-rate-a member)   # starts operations
tok_b=$(mktok itest-rate-b member)
wname="rate-worker-$$"
tok_w=$(mktok itest-rate-workers worker "$wname")

# ---- 1. A floods requests (8 at a time), B and a worker token work meanwhile
flood="$ITEST_TMP/rate-flood-$$.py"
cat >"$flood" <<'PY'
import http.client, json, sys, threading, time
port, tok_a, tok_b, tok_w, wname = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
def call(method, path, tok, body=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    h = {"Authorization": "Bearer " + tok}
    if body is not None:
        h["Content-Type"] = "application/json"
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    out = (r.status, r.getheader("Retry-After"), r.read().decode())
    c.close()
    return out
res = {"a": [], "b": [], "w": []}
lock = threading.Lock()
def flood_a():
    for _ in range(15):
        s = call("GET", "/v1/sandboxes", tok_a)
        with lock:
            res["a"].append(s)
def steady_b():
    for _ in range(8):
        s = call("GET", "/v1/sandboxes", tok_b)
        with lock:
            res["b"].append(s)
reg = json.dumps({"name": wname, "runtime": "docker", "isolation": ["container"], "labels": {},
                  "capacity": {"cpu_millis": 1000, "memory_mib": 512, "slots": 1}, "version": "itest"})
def worker():
    for _ in range(5):
        s = call("POST", "/v1/workers/register", tok_w, reg)
        with lock:
            res["w"].append(s)
ts = [threading.Thread(target=flood_a) for _ in range(8)]
ts += [threading.Thread(target=steady_b)]
ts += [threading.Thread(target=worker) for _ in range(4)]
t0 = time.monotonic()
for t in ts: t.start()
for t in ts: t.join()
elapsed = time.monotonic() - t0
def count(k, st): return sum(1 for s in res[k] if s[0] == st)
limited = [s for s in res["a"] if s[0] == 429]
out = {
    "a_total": len(res["a"]), "a_429": len(limited), "a_200": count("a", 200), "elapsed": elapsed,
    # what 5 a second with bursts of 10 allows in that time (and one refill in flight)
    "a_allowed": int(10 + 5 * elapsed) + 1,
    "a_retry_after": limited[0][1] if limited else None, "a_body": limited[0][2] if limited else "",
    "a_other": sorted({s[0] for s in res["a"]} - {200, 429}),
    "b_total": len(res["b"]), "b_200": count("b", 200), "b_statuses": sorted({s[0] for s in res["b"]}),
    "w_total": len(res["w"]), "w_429": count("w", 429), "w_statuses": sorted({s[0] for s in res["w"]}),
}
print(json.dumps(out))
PY
py=/usr/bin/python3
[ -x "$py" ] || py=$(command -v python3)
r=$("$py" "$flood" "$cport" "$tok_a1" "$tok_b" "$tok_w" "$wname")
itest_log "flood: $r"
assert_eq 120 "$(itest_json "$r" a_total)" "A's requests sent"
# Refused 429s to clients back inside their Retry-After are held (section
# 1b), so the flood lasts some seconds; what passes is what the rate allows.
[ "$(itest_json "$r" a_429)" -ge 40 ] || fail "A's flood: expected many of 120 requests refused with 429, got $r"
[ "$(itest_json "$r" a_200)" -ge 10 ] || fail "A's flood: expected its burst (10) answered, got $r"
[ "$(itest_json "$r" a_200)" -le "$(itest_json "$r" a_allowed)" ] ||
  fail "A's flood: more requests answered 200 than its rate allows, got $r"
assert_eq "[]" "$(itest_json "$r" a_other)" "A's statuses other than 200 and 429"
ra=$(itest_json "$r" a_retry_after)
assert_match "$ra" '^[1-9][0-9]*$' "Retry-After of a 429"
body=$(itest_json "$r" a_body)
assert_eq rate_limited "$(itest_json "$body" error.code)" "the 429's error code"
assert_contains "$(itest_json "$body" error.message)" "rate_requests_per_second" "the 429's message"
assert_eq 8 "$(itest_json "$r" b_200)" "B's requests answered 200 during A's flood (statuses $(itest_json "$r" b_statuses))"
assert_eq 20 "$(itest_json "$r" w_total)" "the worker token's registrations sent"
assert_eq 0 "$(itest_json "$r" w_429)" "the worker token's 429s (statuses $(itest_json "$r" w_statuses))"
# probes are never limited
for _ in $(seq 1 20); do
  code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$SANDBOX_URL/healthz")
  assert_eq 200 "$code" "/healthz during the limits"
done

# ---- 1b. a client that ignores Retry-After gets its next 429 only when it ends
tok_a3=$(mktok itest-rate-a member)
hold="$ITEST_TMP/rate-hold-$$.py"
cat >"$hold" <<'PY'
import http.client, json, socket, sys, time
port, tok = int(sys.argv[1]), sys.argv[2]
def call():
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    t = time.monotonic()
    c.request("GET", "/v1/sandboxes", headers={"Authorization": "Bearer " + tok})
    r = c.getresponse()
    body = r.read().decode()
    out = {"status": r.status, "retry_after": r.getheader("Retry-After"), "ms": round((time.monotonic() - t) * 1000),
           "code": json.loads(body).get("error", {}).get("code") if r.status != 200 else None}
    c.close()
    return out
res = {"burst": [call()["status"] for _ in range(10)]}
res["first"] = call()          # refused at once, told to come back in 1 s
res["refilled"] = 0            # (unless a busy host's slow calls let the
while res["first"]["status"] == 200 and res["refilled"] < 40:  # bucket refill)
    res["refilled"] += 1
    res["first"] = call()
res["again"] = call()          # back at once: held until that second ends
time.sleep(int(res["again"]["retry_after"] or 1))
res["waited"] = call()         # back when told: answered, not held
# used up again, then clients that hang up while their 429 is held
while call()["status"] == 200:
    pass
for _ in range(20):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n\r\n".encode())
    s.close()
time.sleep(1.5)
c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
c.request("GET", "/healthz")
res["healthz_after_hangups"] = c.getresponse().status
print(json.dumps(res))
PY
h=$("$py" "$hold" "$cport" "$tok_a3")
itest_log "hold: $h"
assert_eq "[200, 200, 200, 200, 200, 200, 200, 200, 200, 200]" "$(itest_json "$h" burst)" "the burst of 10"
assert_eq 429 "$(itest_json "$h" first.status)" "the first request past the burst (and its refills: $(itest_json "$h" refilled))"
[ "$(itest_json "$h" first.ms)" -lt 500 ] || fail "the first 429 was held: $h"
assert_eq 429 "$(itest_json "$h" again.status)" "a request at once after a 429"
assert_eq rate_limited "$(itest_json "$h" again.code)" "a held 429's error code"
assert_match "$(itest_json "$h" again.retry_after)" '^[1-9][0-9]*$' "a held 429's Retry-After"
[ "$(itest_json "$h" again.ms)" -ge 500 ] || fail "a request back inside its Retry-After was answered at once: $h"
[ "$(itest_json "$h" again.ms)" -le 1500 ] || fail "a held 429 was held past its Retry-After: $h"
assert_eq 200 "$(itest_json "$h" waited.status)" "a request after waiting as told"
[ "$(itest_json "$h" waited.ms)" -lt 500 ] || fail "a request after waiting as told was held: $h"
assert_eq 200 "$(itest_json "$h" healthz_after_hangups)" "/healthz after 20 clients hung up on held 429s"
kill -0 "$cpid" || fail "the controller died after clients hung up on held 429s"

# ---- 2. operations: A's creates beyond its rate get 429, B's create is accepted
sleep 2 # A2's and B's request buckets are full anyway; A's operation bucket too
create='{"image":"busybox:latest","cpu_millis":100,"memory_mib":32}'
# at_once N NAME CMD...: N copies of CMD started together (one after
# another, a busy host spaces them past the refill of one a second, and
# every one gets a token): ITEST_TMP/NAME-I.out, .err and .rc.
at_once() {
  local n=$1 name=$2 i pids=()
  shift 2
  for ((i = 1; i <= n; i++)); do
    (
      rc=0
      "$@" >"$ITEST_TMP/$name-$i.out" 2>"$ITEST_TMP/$name-$i.err" || rc=$?
      echo "$rc" >"$ITEST_TMP/$name-$i.rc"
    ) &
    pids+=("$!")
  done
  wait "${pids[@]}" || true
}
# answer_of NAME I: HTTP_STATUS and HTTP_BODY of at_once's copy I of a curl
# run with -w '\n%{http_code}' (so that assert_http reads them)
answer_of() {
  HTTP_STATUS=$(tail -n 1 "$ITEST_TMP/$1-$2.out")
  HTTP_BODY=$(sed '$d' "$ITEST_TMP/$1-$2.out")
}
n202=0 n429=0
t0=$(date +%s%N)
at_once 6 rate-create curl -s --max-time 60 -w '\n%{http_code}' -H 'Expect:' -H "Authorization: Bearer $tok_a2" \
  -H 'Content-Type: application/json' --data-binary "$create" "$SANDBOX_URL/v1/sandboxes"
refills=$((($(date +%s%N) - t0 + 999999999) / 1000000000))
for i in 1 2 3 4 5 6; do
  answer_of rate-create "$i"
  case "$HTTP_STATUS" in
    202) n202=$((n202 + 1)) ;;
    429)
      n429=$((n429 + 1))
      assert_http 429 rate_limited "A's create past its operation rate"
      assert_contains "$(itest_json "$HTTP_BODY" error.message)" "rate_operations_per_second" "the operation 429's message"
      ;;
    *) fail "A's create: expected 202 or 429, got $HTTP_STATUS: $HTTP_BODY" ;;
  esac
done
# one more token a second (rate 1): six creates at once end well within a
# second on an idle host, later on a busy one
[ "$n202" -ge 2 ] && [ "$n202" -le $((2 + refills)) ] ||
  fail "A's creates accepted: expected the burst of 2 (and at most $refills refilled in their ${refills}s), got $n202"
[ "$n429" -ge 1 ] || fail "A's creates refused: expected at least 1 of 6, got $n429 (they took ${refills}s)"
# the CLI names it and exits 3 (an API error: retry later); a create that
# a refill let through exits 0. Eight at once: on a busy host (a sanitized
# CLI starts slowly) four could arrive a refill apart each
at_once 8 rate-cli env SANDBOX_TOKEN="$tok_a2" "$SANDBOX_CLI" create --image busybox:latest --cpu-millis 100 \
  --memory-mib 32
refused=
for i in 1 2 3 4 5 6 7 8; do
  case $(cat "$ITEST_TMP/rate-cli-$i.rc") in
    0) ;;
    3) refused=$i ;;
    *) fail "a CLI create past A's operation rate exited $(cat "$ITEST_TMP/rate-cli-$i.rc"): $(cat "$ITEST_TMP/rate-cli-$i.err")" ;;
  esac
done
[ -n "$refused" ] || fail "none of 8 CLI creates at once past A's operation rate exited 3"
assert_contains "$(cat "$ITEST_TMP/rate-cli-$refused.err")" "rate_limited" "the CLI's refusal"
# another tenant is not held back by A
itest_http POST /v1/sandboxes "$tok_b" "$create"
assert_http 202 "" "B's create while A is over its operation rate"
# an exec is an operation too (counted before the sandbox is looked at; 404
# for this made-up sandbox when a refill let it through)
at_once 4 rate-exec curl -s --max-time 60 -w '\n%{http_code}' -H "Authorization: Bearer $tok_a2" \
  -H 'Content-Type: application/json' --data-binary '{"argv":["true"]}' \
  "$SANDBOX_URL/v1/sandboxes/sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa/exec"
n429=0
for i in 1 2 3 4; do
  answer_of rate-exec "$i"
  case $HTTP_STATUS in
    404) ;;
    *) n429=$((n429 + 1)); assert_http 429 rate_limited "A's exec past its operation rate" ;;
  esac
done
[ "$n429" -ge 1 ] || fail "none of 4 execs at once past A's operation rate was refused (429)"
# after Retry-After, A is accepted again
at_once 4 rate-ra curl -s -o /dev/null -D - --max-time 60 -X POST -H "Authorization: Bearer $tok_a2" \
  -H 'Content-Type: application/json' --data-binary "$create" "$SANDBOX_URL/v1/sandboxes"
ra=$(cat "$ITEST_TMP"/rate-ra-[1-4].out | tr -d '\r' | sed -n 's/^[Rr]etry-[Aa]fter: *//p' | sort -n | tail -n 1)
assert_match "$ra" '^[1-9][0-9]*$' "Retry-After of an operation 429"
sleep "$ra"
itest_http POST /v1/sandboxes "$tok_a2" "$create"
assert_http 202 "" "A's create after Retry-After"

# ---- 3. the metric counts both kinds
m=$(curl -s --max-time 5 "$SANDBOX_URL/metrics")
assert_match "$(grep '^sandbox_rate_limited_total{kind="request"}' <<<"$m")" ' [1-9][0-9]*$' "request 429s counted"
assert_match "$(grep '^sandbox_rate_limited_total{kind="operation"}' <<<"$m")" ' [1-9][0-9]*$' "operation 429s counted"
# the controller stops cleanly with 429s held (under ASan too)
"$py" - "$cport" "$tok_a3" <<'PY' &
import socket, sys, time
port, tok = int(sys.argv[1]), sys.argv[2]
ss = []
for _ in range(60):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {tok}\r\n\r\n".encode())
    ss.append(s)
time.sleep(5)
PY
held_pid=$!
sleep 0.5
rc=0
itest_stop_pid "$cpid" "rate-limit controller" 30 || rc=$?
cpid=
assert_eq 0 "$rc" "the controller's exit status, stopped with 429s held"
wait "$held_pid" || true

echo "a token's request flood and a tenant's operation flood get 429 with Retry-After; other tenants, workers and probes are not held back"
