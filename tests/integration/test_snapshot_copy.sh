#!/usr/bin/env bash
# A snapshot made on worker A starts a sandbox on worker B (docs/snapshots.md
# "Copies"): `sandbox snapshots copy SNAP --worker B --wait` is an operation
# leased to B, which reads the snapshot's bytes through the controller from
# A's forwarder (docker save there, docker load here, never a registry) and
# keeps them relabelled as its own. A create --from SNAP that may run only on
# B then starts there with the parent's file. A create from a second
# snapshot that only B may take makes the controller copy it there by
# itself (one copy operation, however long the create waits), then starts
# there. B's worker token cannot read a
# snapshot it has no copy operation for (403), another tenant cannot copy one
# (404), a copy to the maker or twice is refused (409), and deleting the
# snapshot removes both images. The two workers share one Docker daemon, as
# workers on one host do: each keeps its own tag.
# itest-standalone
# itest-cost: 60
# itest-timeout: 300
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_snpcopy
assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
sql() { "$ITEST_PGBIN/psql" -X -q -At "$url" -c "$1"; }
clog="$ITEST_TMP/snpcopy-controller-$$.log"
itest_watch_log "$clog"
port=$(itest_free_port)
export SANDBOX_URL="http://127.0.0.1:$port"
"$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port" --heartbeat-seconds 1 \
  --reconcile-interval-ms 300 >>"$clog" 2>&1 </dev/null &
ctl_pid=$!
itest_track_pid "$ctl_pid"
itest_wait_healthz "$SANDBOX_URL" "$ctl_pid" controller "$clog" || fail "controller did not start"
tenant=itest-snpcopy
admin=$("$SANDBOXD" token create --database-url "$url" --tenant "$tenant" --role admin)
export SANDBOX_TOKEN=$admin
assert_exit 0 sandbox tenants create other-snpcopy
other=$("$SANDBOXD" token create --database-url "$url" --tenant other-snpcopy --role member)

cleanup() {
  itest_delete_tracked
  local id
  for id in $(sql "SELECT id FROM snapshots" 2>/dev/null || true); do
    docker images --filter "label=dev.sandbox.snapshot=$id" -q 2>/dev/null | sort -u | xargs -r docker rmi -f >/dev/null 2>&1 || true
  done
  itest_drop_private_db
}
itest_on_exit cleanup

declare -A wtok wpid
start_worker() {
  local site=$1 name="snpcopy-$1" wport
  wtok[$site]=$("$SANDBOXD" token create --database-url "$url" --tenant "$tenant" --role worker --name "$name")
  wport=$(itest_free_port)
  itest_watch_log "$ITEST_TMP/snpcopy-worker-$site-$$.log"
  SANDBOX_WORKER_TOKEN="${wtok[$site]}" SANDBOX_WORKER_LABELS="site=$site" SANDBOX_WORKER_OPEN_NETWORK='' \
    SANDBOX_WORKER_GVISOR_RUNTIME='' SANDBOX_WORKER_CPU_MILLIS=8000 SANDBOX_WORKER_MEMORY_MIB=8192 \
    SANDBOX_WORKER_VOLUME_DIR="$ITEST_TMP/snpcopy-volumes-$site" \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --listen "127.0.0.1:$wport" \
    --worker-name "$name" --docker-socket /var/run/docker.sock >>"$ITEST_TMP/snpcopy-worker-$site-$$.log" 2>&1 </dev/null &
  wpid[$site]=$!
  itest_track_pid "${wpid[$site]}"
}
is_ready() { [ "$(sql "SELECT state FROM workers WHERE name = 'snpcopy-$1'")" = ready ]; }
start_worker a
start_worker b
for s in a b; do itest_wait_until 60 "worker snpcopy-$s ready" is_ready "$s"; done
tag=$RANDOM$RANDOM

# --- the parent on A, its snapshot there
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 --selector site=a \
  --wait --timeout 120
read -r parent _ <<<"$ITEST_OUT"
itest_track "$parent"
assert_exit 0 sandbox exec "$parent" -- sh -c "mkdir -p /work && echo made-on-a-$tag > /work/note.txt"
assert_exit 0 sandbox snapshot "$parent" --name base --wait --timeout 120 --json
snp=$(itest_json "$ITEST_OUT" snapshot.id)
assert_eq snpcopy-a "$(itest_json "$ITEST_OUT" snapshot.worker)" "the snapshot is on A"

# --- what must be refused
widb=$(sql "SELECT id FROM workers WHERE name = 'snpcopy-b'")
itest_http GET "/v1/workers/$widb/snapshots/$snp/export" "${wtok[b]}"
assert_http 403 forbidden "B's token reading a snapshot it has no copy operation for"
itest_http GET "/v1/workers/$widb/snapshots/$snp/export" "$admin"
[ "$HTTP_STATUS" = 403 ] || fail "an admin token reading a worker endpoint: HTTP $HTTP_STATUS"
itest_http POST "/v1/snapshots/$snp/copies" "$other" '{"worker":"snpcopy-b"}'
assert_http 404 not_found "another tenant copying the snapshot"
itest_http POST "/v1/snapshots/$snp/copies" "$admin" '{"worker":"snpcopy-a"}'
assert_http 409 conflict "a copy to the worker that made it"
itest_http POST "/v1/snapshots/$snp/copies" "$admin" '{"worker":"nosuch"}'
assert_http 404 not_found "a copy to no worker"
itest_http POST "/v1/snapshots/$snp/copies" "$admin" '{"worker":"snpcopy-b","x":1}'
assert_http 400 invalid_argument "a copy request with an unknown field"

# --- the copy: through the controller, into B's Docker, relabelled as B's
assert_exit 0 sandbox snapshots copy base --worker snpcopy-b --wait --timeout 180
assert_exit 0 sandbox snapshots get base --json
assert_eq snpcopy-b "$(itest_json "$ITEST_OUT" snapshot.copies.0.worker)" "the copy's worker"
assert_eq ready "$(itest_json "$ITEST_OUT" snapshot.copies.0.state)" "the copy is ready"
copies=$(docker images --filter "label=dev.sandbox.snapshot=$snp" --format '{{.Repository}}:{{.Tag}}' | sort -u)
assert_contains "$copies" "sandbox-snapshot:$snp-copy-" "B keeps its copy under a tag of its own"
assert_contains "$copies" "sandbox-snapshot:$snp" "A keeps its own"
blabel=$(docker image inspect -f '{{index .Config.Labels "dev.sandbox.worker"}}' "$(grep -- '-copy-' <<<"$copies" | head -1)")
assert_eq snpcopy-b "$blabel" "the copy is labelled B's"
itest_http POST "/v1/snapshots/$snp/copies" "$admin" '{"worker":"snpcopy-b"}'
assert_http 409 conflict "a second copy to B"
assert_exit 0 sandbox events --json
assert_contains "$ITEST_OUT" '"snapshot.copied"' "the snapshot.copied event"

# --- a create on B now runs there: the parent's file
assert_exit 0 sandbox create --from base --cpu-millis 100 --memory-mib 64 --selector site=b --wait --timeout 120
read -r s _ <<<"$ITEST_OUT"
itest_track "$s"
assert_exit 0 sandbox get "$s" --json
assert_eq snpcopy-b "$(itest_json "$ITEST_OUT" sandbox.worker)" "the sandbox from the copy runs on B"
assert_exit 0 sandbox exec "$s" -- cat /work/note.txt
assert_eq "made-on-a-$tag" "$ITEST_OUT" "a sandbox on B reads the file made on A"

# --- a create from a snapshot that only B may take, with no copy asked for:
# the controller copies it to B by itself and the create waits for that
assert_exit 0 sandbox exec "$parent" -- sh -c "echo second-$tag > /work/two.txt"
assert_exit 0 sandbox snapshot "$parent" --name second --wait --timeout 120 --json
snp2=$(itest_json "$ITEST_OUT" snapshot.id)
itest_http POST /v1/sandboxes "$admin" '{"from":"second","cpu_millis":100,"memory_mib":64,"selector":{"site":"b"}}'
assert_http 202 "" "a create from the second snapshot that only B may take"
auto=$(itest_json "$HTTP_BODY" sandbox.id)
auto_op=$(itest_json "$HTTP_BODY" operation.id)
itest_track "$auto"
assert_exit 0 sandbox wait "$auto_op" --timeout 180
assert_exit 0 sandbox get "$auto" --json
assert_eq snpcopy-b "$(itest_json "$ITEST_OUT" sandbox.worker)" "the create from the copied snapshot runs on B"
assert_exit 0 sandbox exec "$auto" -- cat /work/two.txt
assert_eq "second-$tag" "$ITEST_OUT" "it reads the file of the second snapshot"
assert_eq 1 "$(sql "SELECT count(*) FROM operations WHERE kind = 'snapshot_copy' AND request->>'snapshot_id' = '$snp2'")" \
  "copy operations of the second snapshot (one, made by the controller)"
assert_eq "" "$(sql "SELECT coalesce(created_by, '') FROM operations WHERE kind = 'snapshot_copy' AND request->>'snapshot_id' = '$snp2'")" \
  "the automatic copy is no token's"
assert_contains "$(sql "SELECT placement::text FROM operations WHERE kind = 'snapshot_copy' AND request->>'snapshot_id' = '$snp2'")" \
  "a create from snapshot $snp2 (operation $auto_op) that no worker holding it may take goes here" \
  "the automatic copy's placement names the create it is for"
assert_exit 0 sandbox snapshots get second --json
assert_eq ready "$(itest_json "$ITEST_OUT" snapshot.copies.0.state)" "the automatic copy is ready"

# --- deleted: both images go once their sandboxes do
assert_exit 0 sandbox delete "$auto" "$s" "$parent" --wait --timeout 120
assert_exit 0 sandbox snapshots delete base second
for id in "$snp" "$snp2"; do
  itest_wait_until 60 "both images of $id removed" \
    bash -c "[ -z \"\$(docker images --filter label=dev.sandbox.snapshot=$id -q)\" ]"
done
