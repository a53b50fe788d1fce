#!/usr/bin/env bash
# Volumes (docs/volumes.md): `sandbox volumes create data --size-mib 32`;
# a sandbox mounts it read-write (-v data:/data) and writes a file; the next
# sandbox mounts it read-only and reads it, beside a second read-only one;
# a third, read-write again, reads it too: the volume outlived two
# sandboxes. Read-write is exclusive (409), a mounted volume cannot be
# deleted (409), writing past its size fails (ENOSPC), a read-only mount
# refuses writes; another tenant reaches it by neither name nor id; the
# tenant's max_volumes refuses one too many (429); a microvm sandbox with a
# volume on workers without microvm is refused (isolation_unavailable; a
# VM's volume disk is test_microvm_driver's); on gvisor the file is there
# too. Once deleted, its worker removes its bytes, and no mount of the
# test's sandboxes is left on the host. Traffic goes only to the test's
# controller.
# itest-timeout: 240
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

ta=$(itest_tenant itest-vola)
a=$(itest_token "$ta" member)
tb=$(itest_tenant itest-volb)
b=$(itest_token "$tb" member)
export SANDBOX_TOKEN=$a
itest_track_tenant "$ta"
itest_track_tenant "$tb"
tag=$RANDOM$RANDOM
small=(--image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 64)

# --- bad requests: nothing is made
itest_http POST /v1/volumes "$a" '{"name":"vol_x","size_mib":32}'
assert_http 400 invalid_argument "a name in an id's shape"
itest_http POST /v1/volumes "$a" '{"name":"ok","size_mib":4}'
assert_http 400 invalid_argument "a size below 8 MiB"
itest_http POST /v1/volumes "$a" '{"name":"ok","size_mib":32,"extra":1}'
assert_http 400 invalid_argument "an unknown field"
assert_exit 2 sandbox volumes create ok
assert_contains "$ITEST_ERR" "--size-mib" "the CLI asks for the size"
assert_exit 2 sandbox create -v data:/proc/x
assert_contains "$ITEST_ERR" "/proc" "a mount under /proc is refused by the CLI"
itest_http POST /v1/sandboxes "$a" '{"volumes":[{"volume":"data","path":"/sys"}],"cpu_millis":100,"memory_mib":64}'
assert_http 400 invalid_argument "a mount at /sys"
itest_http POST /v1/sandboxes "$a" '{"volumes":[{"volume":"nosuch","path":"/data"}],"cpu_millis":100,"memory_mib":64}'
assert_http 404 not_found "a volume that does not exist"

# --- the volume: a row, placed by its first sandbox
assert_exit 0 sandbox volumes create data --size-mib 32 --json
vol=$(itest_json "$ITEST_OUT" volume.id)
assert_match "$vol" '^vol_[a-z2-7]{26}$' "the volume's id"
assert_eq unplaced "$(itest_json "$ITEST_OUT" volume.state)" "a new volume's state"
assert_eq 32 "$(itest_json "$ITEST_OUT" volume.size_mib)" "its size"
itest_http POST /v1/volumes "$a" '{"name":"data","size_mib":32}'
assert_http 409 conflict "a second volume named data"

# another tenant: not by name, not by id
itest_http GET "/v1/volumes/$vol" "$b"
assert_http 404 not_found "another tenant's volume by id"
itest_http DELETE "/v1/volumes/data" "$b"
assert_http 404 not_found "deleting another tenant's volume"
itest_http POST /v1/sandboxes "$b" "{\"volumes\":[{\"volume\":\"$vol\",\"path\":\"/data\"}],\"cpu_millis\":100,\"memory_mib\":64}"
assert_http 404 not_found "a create mounting another tenant's volume by id"
itest_http GET /v1/volumes "$b"
assert_not_contains "$HTTP_BODY" "$vol" "the other tenant's list"

# --- the first sandbox writes, read-write
assert_exit 0 sandbox create --name "vol-a-$tag" "${small[@]}" -v data:/data --wait --timeout 120
read -r sa _ <<<"$ITEST_OUT"
itest_track "$sa"
assert_exit 0 sandbox exec "$sa" -- sh -c "echo written-by-a-$tag > /data/note.txt && sync"
assert_exit 0 sandbox volumes get data --json
assert_eq ready "$(itest_json "$ITEST_OUT" volume.state)" "the volume once mounted"
worker=$(sandbox get "$sa" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["sandbox"]["worker"])')
assert_eq "$worker" "$(itest_json "$ITEST_OUT" volume.worker)" "the volume lives on its first sandbox's worker"
assert_eq "$sa" "$(itest_json "$ITEST_OUT" volume.mounted_by.0.sandbox)" "who mounts it"
assert_exit 0 sandbox volumes list
assert_contains "$ITEST_OUT" "$sa" "the list's MOUNTED column"
img=$(find "$ITEST_TMP" -name "$vol.img" -print -quit 2>/dev/null)
[ -n "$img" ] || fail "no image $vol.img on the worker"
grep -q " $ITEST_TMP/.*/mnt/$sa/$vol.rw " /proc/self/mounts || fail "the worker's mount of $vol for $sa is not there"

# read-write is one sandbox's; a mounted volume is not deleted
itest_http POST /v1/sandboxes "$a" '{"volumes":[{"volume":"data","path":"/data","read_only":true}],"cpu_millis":100,"memory_mib":64}'
assert_http 409 conflict "a read-only mount while a sandbox writes"
assert_contains "$HTTP_BODY" "$sa" "the refusal names the writer"
assert_exit 3 sandbox volumes delete data
assert_contains "$ITEST_ERR" "conflict" "deleting a mounted volume"

# its size is enforced: 32 MiB hold no 40 MiB file
assert_exit 1 sandbox exec "$sa" -- dd if=/dev/zero of=/data/big bs=1M count=40
assert_contains "$ITEST_ERR$ITEST_OUT" "No space left" "writing past the size"
assert_exit 0 sandbox exec "$sa" -- rm -f /data/big

assert_exit 0 sandbox delete "$sa" --wait --timeout 120
! grep -q "/mnt/$sa/" /proc/self/mounts || fail "the mount of deleted sandbox $sa is still there"

# --- two read-only sandboxes read it at once; neither can write
ro=()
for i in 1 2; do
  assert_exit 0 sandbox create "${small[@]}" -v data:/data:ro --wait --timeout 120
  read -r s _ <<<"$ITEST_OUT"
  itest_track "$s"
  ro+=("$s")
done
for s in "${ro[@]}"; do
  assert_exit 0 sandbox exec "$s" -- cat /data/note.txt
  assert_eq "written-by-a-$tag" "$ITEST_OUT" "a read-only sandbox reads the first one's file"
  assert_exit 0 sandbox get "$s" --json
  assert_eq "$worker" "$(itest_json "$ITEST_OUT" sandbox.worker)" "a sandbox with the volume goes where it lives"
done
assert_exit 1 sandbox exec "${ro[0]}" -- touch /data/other.txt
assert_contains "$ITEST_ERR$ITEST_OUT" "Read-only" "a read-only mount refuses a write"
itest_http POST /v1/sandboxes "$a" '{"volumes":[{"volume":"data","path":"/data"}],"cpu_millis":100,"memory_mib":64}'
assert_http 409 conflict "a read-write mount while others read"
assert_exit 0 sandbox delete "${ro[@]}" --wait --timeout 120

# --- a third sandbox, read-write: the file outlived two sandboxes
assert_exit 0 sandbox create "${small[@]}" -v "$vol:/srv/data" --wait --timeout 120
read -r sc _ <<<"$ITEST_OUT"
itest_track "$sc"
assert_exit 0 sandbox exec "$sc" -- cat /srv/data/note.txt
assert_eq "written-by-a-$tag" "$ITEST_OUT" "the third sandbox reads the first one's file (by volume id)"
assert_exit 0 sandbox exec "$sc" -- sh -c "echo and-c >> /srv/data/note.txt"
assert_exit 0 sandbox delete "$sc" --wait --timeout 120

# --- gvisor: the same volume, the same file
itest_require_gvisor
assert_exit 0 sandbox create "${small[@]}" --isolation gvisor -v data:/data --wait --timeout 120
read -r sg _ <<<"$ITEST_OUT"
itest_track "$sg"
assert_exit 0 sandbox exec "$sg" -- cat /data/note.txt
assert_eq "written-by-a-$tag
and-c" "$ITEST_OUT" "a gvisor sandbox reads what the container sandboxes wrote"
assert_exit 0 sandbox get "$sg" --json
assert_eq gvisor "$(itest_json "$ITEST_OUT" sandbox.isolation)" "it runs as gvisor"
assert_exit 0 sandbox delete "$sg" --wait --timeout 120

# --- moved as tar: download from data, upload into a new volume, read there
tarf="$ITEST_TMP/vol-$tag.tar"
assert_exit 0 sandbox volumes download data -o "$tarf"
tar -tf "$tarf" | grep -qx './note.txt' || fail "the download holds no ./note.txt: $(tar -tf "$tarf" | head -5)"
assert_exit 0 sandbox volumes create moved --size-mib 16
assert_exit 0 sandbox volumes upload moved "$tarf"
assert_exit 0 sandbox create "${small[@]}" -v moved:/m:ro --wait --timeout 120
read -r sm _ <<<"$ITEST_OUT"
itest_track "$sm"
assert_exit 0 sandbox exec "$sm" -- cat /m/note.txt
assert_eq "written-by-a-$tag
and-c" "$ITEST_OUT" "the uploaded volume holds the downloaded file"
assert_exit 0 sandbox delete "$sm" --wait --timeout 120
assert_exit 0 sandbox volumes delete moved
rm -f "$tarf"
assert_exit 0 sandbox list --json
assert_not_contains "$ITEST_OUT" "volume-helper" "the helper sandboxes are gone"

# --- microvm where no worker offers it: refused, never run without the volume
assert_exit 1 sandbox create "${small[@]}" --isolation microvm -v data:/data --wait --timeout 120
assert_contains "$ITEST_ERR$ITEST_OUT" "isolation_unavailable" "a microvm sandbox with a volume"

# --- a retried create under one Idempotency-Key makes one volume
key="vk-$tag"
idem() { curl -s -o /dev/null -w '%{http_code}' -X POST -H "Authorization: Bearer $a" -H "Idempotency-Key: $key" \
  -H 'Content-Type: application/json' --data-binary "$1" "$SANDBOX_URL/v1/volumes"; }
assert_eq 201 "$(idem '{"name":"keyed","size_mib":8}')" "the first keyed create"
assert_eq 201 "$(idem '{"name":"keyed","size_mib":8}')" "the same keyed create again answers with the volume"
assert_eq 409 "$(idem '{"name":"keyed","size_mib":16}')" "the key with another size"
assert_exit 0 sandbox volumes list --json
[ "$(grep -o '"name": *"keyed"' <<<"$ITEST_OUT" | wc -l)" = 1 ] || fail "the keyed create made more than one volume"
assert_exit 0 sandbox volumes delete keyed

# --- the quota: max_volumes 2 allows one more, then 429
SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN assert_exit 0 sandbox tenants update "$ta" --policy '{"max_volumes":2}'
assert_exit 0 sandbox volumes create second --size-mib 8
itest_http POST /v1/volumes "$a" '{"name":"third","size_mib":8}'
assert_http 429 quota_exceeded "a third volume over max_volumes 2"
assert_contains "$HTTP_BODY" "max_volumes = 2" "the refusal names the rule"
assert_exit 0 sandbox volumes delete second

# --- delete: gone from the API at once, and from the worker after
assert_exit 0 sandbox volumes delete data --json
assert_eq deleted "$(itest_json "$ITEST_OUT" volume.state)" "the deleted volume's state"
itest_http POST /v1/sandboxes "$a" '{"volumes":[{"volume":"data","path":"/data"}],"cpu_millis":100,"memory_mib":64}'
assert_http 404 not_found "a create mounting a deleted volume"
itest_wait_until 40 "the image of deleted volume $vol removed by its worker" bash -c "[ ! -e '$img' ]"
! grep -q "/mnt/sbx_[a-z2-7]*/$vol\." /proc/self/mounts || fail "a mount of $vol is left on the host"

assert_exit 0 sandbox events --json
assert_contains "$ITEST_OUT" '"volume.created"' "the volume.created event"
assert_contains "$ITEST_OUT" '"volume.deleted"' "the volume.deleted event"
