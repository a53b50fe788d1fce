#!/usr/bin/env bash
# Snapshots (docs/snapshots.md): `sandbox snapshot SBX --name N` saves a
# running sandbox's files as a snapshot operation on its worker; `sandbox
# create --from N` starts sandboxes with those files (a fork into 3: each
# sees the parent's file and they diverge after); list, get and delete by id
# or name; the tenant's max_snapshots refuses one too many (429); another
# tenant reaches none of it, not by name, id or image name; a microvm-only
# or bad request (memory of a container) is refused with a clear error; a deleted snapshot's image
# stays while a sandbox runs from it and is gone from Docker once the last
# one is deleted (the worker's heartbeat). On gvisor too: a gvisor
# sandbox's file survives into a gvisor sandbox made from its snapshot.
# Traffic goes only to the test's controller.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

ta=$(itest_tenant itest-snpa)
a=$(itest_token "$ta" member)
tb=$(itest_tenant itest-snpb)
b=$(itest_token "$tb" member)
export SANDBOX_TOKEN=$a
itest_track_tenant "$ta"
itest_track_tenant "$tb"
tag=$RANDOM$RANDOM

# --- the parent: a file in its writable layer
assert_exit 0 sandbox create --name "snp-parent-$tag" --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64 \
  --wait --timeout 120
read -r parent _ <<<"$ITEST_OUT"
itest_track "$parent"
assert_exit 0 sandbox exec "$parent" -- sh -c "mkdir -p /work && echo parent-$tag > /work/note.txt"

# --- bad requests first: nothing is made
itest_http POST "/v1/sandboxes/$parent/snapshots" "$a" '{"name":"snp_x"}'
assert_http 400 invalid_argument "a name in an id's shape"
itest_http POST "/v1/sandboxes/$parent/snapshots" "$a" '{"name":"ok","extra":1}'
assert_http 400 invalid_argument "an unknown field"
itest_http POST "/v1/sandboxes/$parent/snapshots" "$b" '{"name":"steal"}'
assert_http 404 not_found "another tenant's sandbox"
itest_http POST "/v1/sandboxes/$parent/snapshots" "$a" '{"name":"mem","memory":"yes"}'
assert_http 400 invalid_argument "memory that is not a boolean"
assert_exit 3 sandbox snapshot "$parent" --name mem --memory
assert_contains "$ITEST_ERR" "invalid_argument: memory: sandbox $parent runs as container" "a container's memory"
itest_http POST "/v1/sandboxes" "$a" "{\"image\":\"sandbox-snapshot:latest\",\"cpu_millis\":100,\"memory_mib\":64}"
assert_http 422 policy_denied "an image in the snapshot repository"

# --- the snapshot: an operation on the parent's worker, then ready
assert_exit 0 sandbox snapshot "$parent" --name base --wait --timeout 120 --json
snp=$(itest_json "$ITEST_OUT" snapshot.id)
assert_match "$snp" '^snp_[a-z2-7]{26}$' "the snapshot's id"
assert_eq ready "$(itest_json "$ITEST_OUT" snapshot.state)" "the snapshot's state after --wait"
assert_eq base "$(itest_json "$ITEST_OUT" snapshot.name)" "its name"
assert_eq false "$(itest_json "$ITEST_OUT" snapshot.memory)" "a container's snapshot keeps no memory"
assert_eq "$parent" "$(itest_json "$ITEST_OUT" snapshot.sandbox_id)" "its sandbox"
assert_eq "$ITEST_IMAGE" "$(itest_json "$ITEST_OUT" snapshot.image)" "its image"
size=$(itest_json "$ITEST_OUT" snapshot.size_bytes)
[ "$size" -gt 0 ] || fail "size_bytes of a snapshot holding a new file is $size"
worker=$(sandbox get "$parent" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandbox"]["worker"])')
assert_eq "$worker" "$(itest_json "$ITEST_OUT" snapshot.worker)" "the snapshot is on the parent's worker"
docker image inspect "sandbox-snapshot:$snp" >/dev/null 2>&1 || fail "Docker has no image sandbox-snapshot:$snp"
labels=$(docker image inspect -f '{{json .Config.Labels}}' "sandbox-snapshot:$snp")
assert_contains "$labels" "\"dev.sandbox.snapshot\":\"$snp\"" "the image's snapshot label"
assert_contains "$labels" "\"dev.sandbox.managed\":\"snapshot\"" "the image is marked a snapshot"
assert_contains "$labels" "\"dev.sandbox.id\":\"\"" "the image does not carry the parent's sandbox label"
# a hostile create from it needs a microvm on the snapshot's worker: none here
assert_exit 1 sandbox create --from base --hostile --cpu-millis 100 --memory-mib 64 --wait --timeout 60
assert_contains "$ITEST_ERR" "isolation_unavailable" "a hostile create from the snapshot where no worker offers microvm"

# the name is taken now; the sandbox list of images does not show snapshots
itest_http POST "/v1/sandboxes/$parent/snapshots" "$a" '{"name":"base"}'
assert_http 409 conflict "a second snapshot named base"
assert_exit 0 sandbox images -q
assert_not_contains "$ITEST_OUT" "sandbox-snapshot" "sandbox images lists no snapshot"

# list, get by id and by name
assert_exit 0 sandbox snapshots list --json
assert_contains "$ITEST_OUT" "$snp" "the list shows the snapshot"
assert_exit 0 sandbox snapshots get base --json
assert_eq "$snp" "$(itest_json "$ITEST_OUT" snapshot.id)" "get by name"
itest_http GET "/v1/snapshots/$snp" "$a"
assert_http 200 "" "get by id"

# --- another tenant: not by name, not by id, not by image
itest_http GET "/v1/snapshots/$snp" "$b"
assert_http 404 not_found "another tenant's snapshot by id"
itest_http GET "/v1/snapshots" "$b"
assert_http 200 "" "the other tenant's list"
assert_not_contains "$HTTP_BODY" "$snp" "the other tenant's list"
itest_http DELETE "/v1/snapshots/$snp" "$b"
assert_http 404 not_found "deleting another tenant's snapshot"
itest_http POST "/v1/sandboxes" "$b" "{\"from\":\"$snp\",\"cpu_millis\":100,\"memory_mib\":64}"
assert_http 404 not_found "a create from another tenant's snapshot id"
itest_http POST "/v1/sandboxes" "$b" '{"from":"base","cpu_millis":100,"memory_mib":64}'
assert_http 404 not_found "a create from another tenant's snapshot name"
itest_http POST "/v1/sandboxes" "$b" "{\"image\":\"sandbox-snapshot:$snp\",\"cpu_millis\":100,\"memory_mib\":64}"
assert_http 422 policy_denied "a create naming the snapshot's image"
itest_http POST "/v1/sandboxes" "$a" '{"from":"base","image":"other/image:1","cpu_millis":100,"memory_mib":64}'
assert_http 400 invalid_argument "from with another image"

# --- fork into 3: each has the parent's file, then they diverge
forks=()
for i in 1 2 3; do
  assert_exit 0 sandbox create --from base --cpu-millis 100 --memory-mib 64 --wait --timeout 120
  read -r f _ <<<"$ITEST_OUT"
  itest_track "$f"
  forks+=("$f")
done
for i in 0 1 2; do
  f=${forks[$i]}
  assert_exit 0 sandbox exec "$f" -- cat /work/note.txt
  assert_eq "parent-$tag" "$ITEST_OUT" "fork $i reads the parent's file"
  assert_exit 0 sandbox get "$f" --json
  assert_eq "$snp" "$(itest_json "$ITEST_OUT" sandbox.from)" "fork $i's from"
  assert_eq "$ITEST_IMAGE" "$(itest_json "$ITEST_OUT" sandbox.image)" "fork $i's image"
  assert_eq "$worker" "$(itest_json "$ITEST_OUT" sandbox.worker)" "fork $i is on the snapshot's worker"
  assert_exit 0 sandbox exec "$f" -- sh -c "echo fork-$i > /work/own.txt"
done
for i in 0 1 2; do
  assert_exit 0 sandbox exec "${forks[$i]}" -- cat /work/own.txt
  assert_eq "fork-$i" "$ITEST_OUT" "fork $i keeps its own file"
done
assert_exit 1 sandbox exec "$parent" -- cat /work/own.txt
# the fork's placement says why it went where it did
assert_exit 0 sandbox get "${forks[0]}" --json
assert_contains "$ITEST_OUT" "runs as" "the fork's placement reasons"

# --- the quota: max_snapshots 2 allows one more, then 429
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$ta" --policy '{"max_snapshots":2}'
itest_http POST "/v1/sandboxes/${forks[0]}/snapshots" "$a" '{"name":"second"}'
assert_http 202 "" "a second snapshot within max_snapshots 2"
op2=$(itest_json "$HTTP_BODY" operation.id)
assert_exit 0 sandbox wait "$op2" --timeout 120
itest_http POST "/v1/sandboxes/${forks[1]}/snapshots" "$a" '{"name":"third"}'
assert_http 429 quota_exceeded "a third snapshot over max_snapshots 2"
assert_contains "$HTTP_BODY" "max_snapshots = 2" "the refusal names the rule"
assert_exit 0 sandbox snapshots get second --json
snp2=$(itest_json "$ITEST_OUT" snapshot.id)
assert_exit 0 sandbox snapshots delete second
itest_http POST "/v1/sandboxes/${forks[1]}/snapshots" "$a" '{"name":"third"}'
assert_http 202 "" "a snapshot once one was deleted"
assert_exit 0 sandbox wait "$(itest_json "$HTTP_BODY" operation.id)" --timeout 120
assert_exit 0 sandbox snapshots delete third

# --- delete: gone from the API at once; the image stays while forks run
assert_exit 0 sandbox snapshots delete base --json
assert_eq deleted "$(itest_json "$ITEST_OUT" snapshot.state)" "the deleted snapshot's state"
assert_exit 0 sandbox snapshots list --json
assert_not_contains "$ITEST_OUT" "$snp" "the list after the delete"
itest_http POST "/v1/sandboxes" "$a" '{"from":"base","cpu_millis":100,"memory_mib":64}'
assert_http 404 not_found "a create from a deleted snapshot"
itest_http POST "/v1/sandboxes" "$a" "{\"from\":\"$snp\",\"cpu_millis\":100,\"memory_mib\":64}"
assert_http 409 conflict "a create from a deleted snapshot's id"
assert_exit 0 sandbox exec "${forks[0]}" -- cat /work/note.txt
assert_eq "parent-$tag" "$ITEST_OUT" "a fork runs on after its snapshot is deleted"
# the second snapshot had no sandbox: its image goes with a heartbeat
itest_wait_until 40 "image of the deleted snapshot $snp2 removed" \
  bash -c "! docker image inspect sandbox-snapshot:$snp2 >/dev/null 2>&1"
docker image inspect "sandbox-snapshot:$snp" >/dev/null 2>&1 \
  || fail "the image of $snp went while sandboxes still run from it"
assert_exit 0 sandbox delete "${forks[@]}" --wait --timeout 120
itest_wait_until 40 "image of the deleted snapshot $snp removed once its sandboxes are gone" \
  bash -c "! docker image inspect sandbox-snapshot:$snp >/dev/null 2>&1"

# --- the events of a snapshot's life
assert_exit 0 sandbox events --sandbox "$parent" --json
assert_contains "$ITEST_OUT" '"snapshot.ready"' "the snapshot.ready event"
assert_contains "$ITEST_OUT" '"snapshot.deleted"' "the snapshot.deleted event"

# --- gvisor: a gvisor sandbox's file survives into one made from its snapshot
itest_require_gvisor
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --isolation gvisor --cpu-millis 100 --memory-mib 64 \
  --wait --timeout 120
read -r gp _ <<<"$ITEST_OUT"
itest_track "$gp"
assert_exit 0 sandbox exec "$gp" -- sh -c "echo gvisor-$tag > /root/g.txt"
assert_exit 0 sandbox snapshot "$gp" --name gbase --wait --timeout 120 --json
gsnp=$(itest_json "$ITEST_OUT" snapshot.id)
assert_eq gvisor "$(itest_json "$ITEST_OUT" snapshot.isolation)" "the gvisor snapshot's class"
assert_exit 0 sandbox create --from gbase --isolation gvisor --cpu-millis 100 --memory-mib 64 --wait --timeout 120
read -r gf _ <<<"$ITEST_OUT"
itest_track "$gf"
assert_exit 0 sandbox exec "$gf" -- cat /root/g.txt
assert_eq "gvisor-$tag" "$ITEST_OUT" "the gvisor fork reads the gvisor parent's file"
assert_exit 0 sandbox get "$gf" --json
assert_eq gvisor "$(itest_json "$ITEST_OUT" sandbox.isolation)" "the gvisor fork runs as gvisor"
assert_exit 0 sandbox delete "$gf" --wait --timeout 120
assert_exit 0 sandbox snapshots delete "$gsnp"
itest_wait_until 40 "image of the gvisor snapshot removed" \
  bash -c "! docker image inspect sandbox-snapshot:$gsnp >/dev/null 2>&1"
