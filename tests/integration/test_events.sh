#!/usr/bin/env bash
# The events API and `sandbox events`: a sandbox's whole life in order,
# tenant scope, filters, the cursor (paging misses nothing and repeats
# nothing), long-polls that wake within 100 ms of an event on this
# controller and on a second one (LISTEN path), `events --follow` live and
# across a controller restart, 400 on bad parameters, no secrets in events.
# itest-timeout: 180
# itest-any-env
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
here=$(dirname "$0")
sql() { "$ITEST_PGBIN/psql" -X -q -At "$DATABASE_URL" -c "$1"; }

ta=$(itest_tenant itest-eva)
tb=$(itest_tenant itest-evb)
assert_exit 0 sandbox tenants create "$ta"
assert_exit 0 sandbox tenants create "$tb"
a=$(itest_token "$ta" member)
b=$(itest_token "$tb" member)
w=$(itest_token itest-workers worker itest-events-w)

# A follower of tenant A started before anything happens.
follow_out="$ITEST_TMP/events-follow.out"
"$SANDBOX_CLI" --token "$a" events --follow --json >"$follow_out" 2>"$ITEST_TMP/events-follow.err" &
follow_pid=$!
itest_track_pid "$follow_pid"

# ---- a whole life: create (with a secret env) -> exec -> share -> unshare -> delete
create_secret="create-secret-$RANDOM$RANDOM"
exec_secret="exec-secret-$RANDOM$RANDOM"
assert_exit 0 sandbox --token "$a" create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 \
  --env "TOKEN=$create_secret" --json --wait --timeout 120
sbx=$(itest_json "$ITEST_OUT" sandbox.id)
cop=$(itest_json "$ITEST_OUT" operation.id)
itest_track "$sbx"
assert_exit 0 sandbox --token "$a" exec "$sbx" --env "PW=$exec_secret" --json -- echo hello
eop=$(itest_json "$ITEST_OUT" operation.id)
assert_exit 0 sandbox --token "$a" share "$sbx" --port 8080 --wait --json
route=$(itest_json "$ITEST_OUT" route.id)
route_name=$(itest_json "$ITEST_OUT" route.name)
access_token=$(itest_json "$ITEST_OUT" access_token)
assert_exit 0 sandbox --token "$a" unshare "$sbx" "$route" --wait
assert_exit 0 sandbox --token "$a" delete "$sbx" --wait --timeout 120 --json
dop=$(itest_json "$ITEST_OUT" operation.id)

itest_http GET "/v1/events?sandbox=$sbx&limit=1000" "$a"
assert_http 200 "" "A reads its sandbox's events"
life=$HTTP_BODY
check_life() {
  python3 - "$1" "$sbx" "$cop" "$eop" "$dop" <<'EOF'
import json, sys
doc, sbx, cop, eop, dop = json.loads(sys.argv[1]), *sys.argv[2:]
ev = doc["events"]
ids = [e["id"] for e in ev]
assert ids == sorted(set(ids)) and len(ids) == len(set(ids)), "ids not strictly increasing: %s" % ids
assert doc["next_after"] == ids[-1], "next_after %s, last id %s" % (doc["next_after"], ids[-1])
assert all(e["sandbox_id"] == sbx for e in ev), "an event of another sandbox"
kinds = [e["kind"] for e in ev]
want = ["sandbox.pending", "operation.pending", "operation.admitted", "operation.leased", "sandbox.scheduled",
        "operation.running", "sandbox.provisioning", "operation.succeeded", "sandbox.running",
        "route.shared", "route.removed", "sandbox.deleting", "sandbox.deleted"]
it = iter(kinds)
missing = [k for k in want if not any(k == x for x in it)]
assert not missing, "life out of order or incomplete: missing %s in %s" % (missing, kinds)
def states(op):
    return [e["data"].get("to") for e in ev if e["operation_id"] == op and e["kind"].startswith("operation.")]
for op, what in ((cop, "create"), (eop, "exec"), (dop, "delete")):
    s = states(op)
    assert s[0] == "pending" and s[-1] == "succeeded" and "running" in s, "%s states %s" % (what, s)
done = [e for e in ev if e["operation_id"] == eop and e["kind"] == "operation.succeeded"]
assert done and done[0]["data"].get("exit_code") == 0, "exec succeeded event without exit_code 0: %s" % done
for e in ev:
    for k in ("id", "ts", "tenant", "kind", "sandbox_id", "operation_id", "data"):
        assert k in e, "event without %s: %s" % (k, e)
print("%d events: %s" % (len(ev), " ".join(kinds)))
EOF
}
check_life "$life" || fail "the sandbox's life in events"

# ---- no secrets in any event (the env values, the route's token and address)
itest_http GET "/v1/events?limit=1000&sandbox=$sbx" "$ITEST_ADMIN_TOKEN"
for s in "$create_secret" "$exec_secret" "$access_token" "$route_name"; do
  assert_not_contains "$HTTP_BODY" "$s" "events of the sandbox"
  assert_eq 0 "$(sql "SELECT count(*) FROM events WHERE data::text LIKE '%$s%'")" "events rows holding a secret"
done

# ---- tenant scope
assert_exit 0 sandbox tenants update "$tb" --policy '{"max_sandboxes":7}'
itest_http GET "/v1/events?sandbox=$sbx" "$b"
assert_http 200 "" "B reads A's sandbox events"
assert_eq '[]' "$(itest_json "$HTTP_BODY" events)" "B sees none of A's sandbox"
itest_http GET "/v1/events?limit=1000" "$b"
assert_not_contains "$HTTP_BODY" "$sbx" "B's events"
assert_not_contains "$HTTP_BODY" "\"tenant\":\"$ta\"" "B's events"
assert_contains "$HTTP_BODY" "\"tenant\":\"$tb\"" "B's own tenant.policy event"
itest_http GET "/v1/events?kind=tenant.policy&limit=1000" "$a"
assert_not_contains "$HTTP_BODY" "$tb" "A's events"
itest_http GET "/v1/events?sandbox=$sbx&limit=1000" "$ITEST_ADMIN_TOKEN"
assert_eq "$(itest_json "$life" events)" "$(itest_json "$HTTP_BODY" events)" "the admin sees A's sandbox as A does"
itest_http GET "/v1/events?kind=tenant.policy&tail=1000" "$ITEST_ADMIN_TOKEN"
assert_contains "$HTTP_BODY" "\"tenant\":\"$tb\"" "the admin sees B's events"
itest_http GET "/v1/events?kind=worker.registered&tail=5" "$ITEST_ADMIN_TOKEN"
assert_contains "$HTTP_BODY" '"kind":"worker.registered"' "the admin sees system events"
assert_contains "$HTTP_BODY" '"tenant":null' "system events have no tenant"
itest_http GET "/v1/events" "$w"
assert_http 403 forbidden "a worker token reads events"
itest_http GET "/v1/events" ""
assert_http 401 "*" "no token"

# ---- filters
itest_http GET "/v1/events?operation=$eop" "$a"
python3 -c '
import json, sys
ev = json.loads(sys.argv[1])["events"]
assert ev and all(e["operation_id"] == sys.argv[2] for e in ev), ev
assert [e["data"]["to"] for e in ev][0] == "pending", ev
' "$HTTP_BODY" "$eop" || fail "operation filter"
for k in 'operation.*' 'operation.' 'sandbox.running'; do
  itest_http GET "/v1/events?sandbox=$sbx&kind=$k" "$a"
  assert_http 200 "" "kind=$k"
  python3 -c '
import json, sys
ev, k = json.loads(sys.argv[1])["events"], sys.argv[2]
ok = (lambda x: x.startswith(k.rstrip("*"))) if k.endswith((".", ".*")) else (lambda x: x == k)
assert ev and all(ok(e["kind"]) for e in ev), (k, [e["kind"] for e in ev])
' "$HTTP_BODY" "$k" || fail "kind filter $k"
done
itest_http GET "/v1/events?sandbox=$sbx&tail=2" "$a"
ids() { python3 -c 'import json,sys; print(" ".join(str(e["id"]) for e in json.loads(sys.argv[1])["events"]))' "$1"; }
assert_eq "$(ids "$life" | awk '{print $(NF-1), $NF}')" "$(ids "$HTTP_BODY")" "tail=2: the newest two, oldest first"

# ---- cursor: limit=2 pages against one read
python3 "$here/events_client.py" page "$SANDBOX_URL" "$a" || fail "paging tenant A's events"

# ---- bad parameters
for q in 'after=-1' 'after=abc' 'after=1.5' 'limit=0' 'limit=1001' 'tail=0' 'tail=5&after=3' 'tail=5&limit=3' \
  "sandbox=$(printf 'x%.0s' $(seq 1 80))" 'sandbox=not%20an%20id' 'operation=sbx_x' "kind=$(printf 'k%.0s' $(seq 1 70))" \
  'kind=a%20b' 'kind=*' 'wait=x' 'bogus=1' 'after=1&after=2'; do
  itest_http GET "/v1/events?$q" "$a"
  assert_http 400 invalid_argument "GET /v1/events?$q"
done
assert_exit 2 sandbox --token "$a" events --after 3 --tail 2
# --count N: exactly N events, then exit 0 (with --follow too: it waits for them)
assert_exit 0 sandbox --token "$a" events --sandbox "$sbx" --count 2
assert_eq 2 "$(printf '%s\n' "$ITEST_OUT" | wc -l)" "events --count 2 printed two lines"
assert_exit 0 timeout 20 "$SANDBOX_CLI" --token "$a" events --follow --after 0 --sandbox "$sbx" --kind sandbox.running --count 1
assert_contains "$ITEST_OUT" "sandbox.running" "events --follow --count 1 ends after its event"
assert_exit 2 sandbox --token "$a" events --count 0
assert_exit 2 sandbox --token "$a" events --timeout 3
assert_exit 3 sandbox --token "$a" events --sandbox notanid
assert_contains "$ITEST_ERR" "not_found: no sandbox named notanid" "events --sandbox with a name no sandbox has"
itest_http GET "/v1/events?sandbox=notanid" "$a"
assert_http 404 not_found "GET /v1/events?sandbox=NAME of no sandbox"

# ---- an empty long-poll: [] after its wait, cursor unchanged
newest=$(sql "SELECT max(id) FROM events")
t0=$(date +%s%N)
itest_http GET "/v1/events?after=$newest&wait=2&kind=no.such.kind" "$a"
ms=$((($(date +%s%N) - t0) / 1000000))
assert_http 200 "" "empty long-poll"
assert_eq '[]' "$(itest_json "$HTTP_BODY" events)" "empty long-poll events"
assert_eq "$newest" "$(itest_json "$HTTP_BODY" next_after)" "empty long-poll next_after"
[ "$ms" -ge 1900 ] || fail "the empty long-poll answered after $ms ms, before its wait of 2 s"

# ---- the live follower saw the whole life, once each
itest_wait_until 20 "the follower to print sandbox.deleted" grep -q "\"kind\":\"sandbox.deleted\",\"sandbox_id\":\"$sbx\"" "$follow_out"
kill "$follow_pid" 2>/dev/null || true
python3 - "$follow_out" "$life" <<'EOF' || fail "the follower's output"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ids = [e["id"] for e in lines]
assert ids == sorted(set(ids)), "follower ids not strictly increasing: %s" % ids
life = [e["id"] for e in json.loads(sys.argv[2])["events"]]
missing = [i for i in life if i not in ids]
assert not missing, "the follower missed %s" % missing
print("the follower printed %d events, the sandbox's %d among them" % (len(ids), len(life)))
EOF

# ---- a second controller on the same database
port2=$(itest_free_port)
url2="http://127.0.0.1:$port2"
log2="$ITEST_TMP/events-controller2.log"
itest_watch_log "$log2"
start_ctl2() {
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$port2" >>"$log2" 2>&1 </dev/null &
  ctl2=$!
  itest_track_pid "$ctl2"
  itest_wait_healthz "$url2" "$ctl2" "second controller" "$log2" || fail "the second controller did not start"
}
start_ctl2

# ---- wake latency: on the controller that writes the event, then on the other
echo "wake latency, reader and writer on the same controller:"
python3 "$here/events_client.py" latency "$SANDBOX_URL" "$SANDBOX_URL" "$a" "$ITEST_ADMIN_TOKEN" "$ta" 5 \
  || fail "parked long-polls woke later than 100 ms after the event (median, same controller)"
echo "wake latency, reader on a second controller (LISTEN path):"
python3 "$here/events_client.py" latency "$url2" "$SANDBOX_URL" "$a" "$ITEST_ADMIN_TOKEN" "$ta" 5 \
  || fail "parked long-polls woke later than 100 ms after the event (median, second controller)"

# ---- --follow across a restart of the controller it talks to
start_id=$(sql "SELECT max(id) FROM events")
f2_out="$ITEST_TMP/events-follow2.out"
f2_err="$ITEST_TMP/events-follow2.err"
"$SANDBOX_CLI" --url "$url2" --token "$a" events --follow --json --after "$start_id" --kind tenant.policy \
  >"$f2_out" 2>"$f2_err" &
f2=$!
itest_track_pid "$f2"
policy() { assert_exit 0 sandbox tenants update "$ta" --policy "{\"max_sandboxes\":$1}"; }
policy 11
policy 12
lines_ge() { [ "$(wc -l <"$1")" -ge "$2" ]; }
itest_wait_until 10 "the follower to print two events" lines_ge "$f2_out" 2
itest_stop_pid "$ctl2" "second controller" 30 || fail "the second controller did not stop cleanly"
policy 13
policy 14
sleep 1.5
start_ctl2
policy 15
itest_wait_until 30 "the follower to print five events" lines_ge "$f2_out" 5
kill "$f2" 2>/dev/null || true
assert_contains "$(cat "$f2_err")" "retrying from event" "the follower's note on the lost connection"
want=$(sql "SELECT string_agg(id::text, ' ' ORDER BY id) FROM events WHERE id > $start_id AND kind = 'tenant.policy' AND tenant_id = (SELECT id FROM tenants WHERE name = '$ta')")
got=$(python3 -c 'import json,sys; print(" ".join(str(json.loads(l)["id"]) for l in open(sys.argv[1]) if l.strip()))' "$f2_out")
assert_eq "$want" "$got" "events the follower printed across the restart"
echo "follow across a restart: $(cat "$f2_err" | tr '\n' ' ')"
echo "events: lifecycle, scope, filters, cursor, long-poll wake-ups and follow behave"
