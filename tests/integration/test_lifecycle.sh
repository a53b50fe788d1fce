#!/usr/bin/env bash
# The seed lifecycle through the CLI: create (restricted network, untrusted,
# 2 CPUs, 4 GiB), wait, exec with exit code, the restricted network, Docker
# limits and labels, delete --wait, container gone, phase deleted. A create
# without an image gets the server's default_image (sandbox/busybox:latest).
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

SANDBOX_TOKEN=$(itest_token platform admin itest-lifecycle)
export SANDBOX_TOKEN

assert_exit 0 sandbox create --tenant platform --image "$ITEST_IMAGE" --cpu-millis 2000 --memory-mib 4096 \
  --ttl 3600 --network restricted --untrusted-repo --generated-code
assert_match "$ITEST_OUT" '^sbx_[A-Za-z0-9_-]+ op_[A-Za-z0-9_-]+$' "create output"
read -r sbx op <<<"$ITEST_OUT"
itest_track "$sbx"

assert_exit 0 sandbox wait "$op" --timeout 900

assert_exit 3 sandbox exec "$sbx" -- sh -c 'echo hello; exit 3'
assert_eq "hello" "$ITEST_OUT" "exec stdout"

# restricted: loopback and one interface on the worker's internal network
# (what it cannot reach: test_network_modes)
assert_exit 0 sandbox exec "$sbx" -- cat /proc/net/dev
ifaces=$(printf '%s\n' "$ITEST_OUT" | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' ')
assert_eq "eth0 lo " "$ifaces" "network interfaces in a restricted sandbox"

cid=$(docker ps -aq --filter "label=dev.sandbox.id=$sbx")
assert_match "$cid" '^[0-9a-f]{12}$' "exactly one container labelled dev.sandbox.id=$sbx"
assert_eq "true" "$(docker inspect -f '{{index .Config.Labels "dev.sandbox.managed"}}' "$cid")" "label dev.sandbox.managed"
assert_eq "$sbx" "$(docker inspect -f '{{index .Config.Labels "dev.sandbox.id"}}' "$cid")" "label dev.sandbox.id"
assert_eq "platform" "$(docker inspect -f '{{index .Config.Labels "dev.sandbox.tenant"}}' "$cid")" "label dev.sandbox.tenant"
assert_eq "$((4096 * 1024 * 1024))" "$(docker inspect -f '{{.HostConfig.Memory}}' "$cid")" "HostConfig.Memory"
assert_eq "2000000000" "$(docker inspect -f '{{.HostConfig.NanoCpus}}' "$cid")" "HostConfig.NanoCpus"
assert_eq "sandbox-restricted" "$(docker inspect -f '{{.HostConfig.NetworkMode}}' "$cid")" "HostConfig.NetworkMode"
assert_eq "true" "$(docker inspect -f '{{.State.Running}}' "$cid")" "container running"

assert_exit 0 sandbox get "$sbx" --json
assert_eq "running" "$(itest_json "$ITEST_OUT" sandbox.phase phase)" "phase before delete"

assert_exit 0 sandbox delete "$sbx" --wait
assert_eq "" "$(docker ps -a --filter "label=dev.sandbox.id=$sbx" -q)" "containers left after delete --wait"

assert_exit 0 sandbox get "$sbx" --json
assert_eq "deleted" "$(itest_json "$ITEST_OUT" sandbox.phase phase)" "phase after delete"
# each operation's history, oldest first, with a time for every step: the
# create's (in `sandbox get`) and the same through GET /v1/operations/{id}
hist() { python3 -c 'import json, sys
d = json.loads(sys.argv[1]); ops = d["operations"] if "operations" in d else [d["operation"]]
o = [x for x in ops if x["id"] == sys.argv[2]][0]
assert all(h["at"].endswith("Z") for h in o["history"]), o["history"]
print(" ".join(h["state"] for h in o["history"]))' "$1" "$2"; }
assert_eq "pending admitted leased running succeeded" "$(hist "$ITEST_OUT" "$op")" "the create's history in sandbox get"
assert_eq "pending admitted leased running succeeded" \
  "$(hist "$(curl -sf -H "Authorization: Bearer $SANDBOX_TOKEN" "$SANDBOX_URL/v1/operations/$op")" "$op")" \
  "the create's history in GET /v1/operations/{id}"

# ---- no image: the server's default_image, shown in the sandbox and run
assert_exit 0 sandbox create --tenant platform --cpu-millis 100 --memory-mib 32 --wait --timeout 300
read -r dsbx _ <<<"$ITEST_OUT"
assert_match "$dsbx" '^sbx_' "id of a sandbox created without --image"
itest_track "$dsbx"
assert_exit 0 sandbox get "$dsbx" --json
assert_eq "sandbox/busybox:latest" "$(itest_json "$ITEST_OUT" sandbox.image sandbox.spec.image)" "image of a create without one"
assert_eq "running" "$(itest_json "$ITEST_OUT" sandbox.phase)" "phase of a sandbox on the default image"
assert_exit 0 sandbox exec "$dsbx" -- sh -c 'echo default-image; test -d /tmp'
assert_eq "default-image" "$ITEST_OUT" "exec in a sandbox on the default image"
cid=$(docker ps -aq --filter "label=dev.sandbox.id=$dsbx")
assert_eq "sandbox/busybox:latest" "$(docker inspect -f '{{.Config.Image}}' "$cid")" "container image of the default"
# the API: "image" absent or null is the default; an explicit one is kept
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" '{"tenant":"platform","image":null,"cpu_millis":100,"memory_mib":32}'
assert_http 202 "" "create with image null"
nid=$(itest_json "$HTTP_BODY" sandbox.id)
itest_track "$nid"
assert_eq "sandbox/busybox:latest" "$(itest_json "$HTTP_BODY" sandbox.image sandbox.spec.image)" "image of a create with image null"
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" '{"tenant":"platform","image":"","cpu_millis":100}'
assert_http 400 invalid_argument "create with an empty image"
# rm of several ids: each deleted, each operation printed
assert_exit 0 sandbox rm "$dsbx" "$nid" --wait
assert_eq 2 "$(grep -c ' succeeded$' <<<"$ITEST_OUT")" "rm of two sandboxes with --wait"

# ---- docker's and kubectl's habits (issue 28 item 8): -e, -w/--workdir,
# -l, list -l/--phase/-q, rm -l
lbl="habit=h$$"
habit_sandbox() {
  assert_exit 0 sandbox create --tenant platform --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 \
    -l "$lbl" -e GREETING=hi --wait --timeout 300
  read -r hs _ <<<"$ITEST_OUT"
  itest_track "$hs"
}
habit_sandbox
h1=$hs
habit_sandbox
h2=$hs
one_line() { paste -sd' ' <<<"$1"; }
# shellcheck disable=SC2016 # the sandbox's shell expands them
assert_exit 0 sandbox exec "$h1" -e WHO=you -w /tmp -- sh -c 'echo "$GREETING $WHO $(pwd)"'
assert_eq "hi you /tmp" "$ITEST_OUT" "exec -e -w in a sandbox created with -e"
assert_exit 0 sandbox exec "$h1" --workdir /etc -- pwd
assert_eq /etc "$ITEST_OUT" "exec --workdir"
assert_exit 0 sandbox list -l "$lbl" -q
assert_eq "$h2 $h1" "$(one_line "$ITEST_OUT")" "list -l -q: the two, newest first, ids only"
assert_exit 0 sandbox list -l "$lbl" -l "other=x" -q
assert_eq "" "$ITEST_OUT" "list with two labels, one no sandbox has"
assert_exit 0 sandbox list -l "$lbl" --phase failed,lost -q
assert_eq "" "$ITEST_OUT" "list -l --phase failed,lost"
assert_exit 0 sandbox list -l "$lbl" --phase running
assert_contains "$ITEST_OUT" "$h1" "list --phase running"
assert_exit 2 sandbox list --phase 'running;x'
itest_http GET "/v1/sandboxes?phase=sleeping" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "list of a phase that does not exist"
itest_http GET "/v1/sandboxes?label=nokey" "$SANDBOX_TOKEN"
assert_http 400 invalid_argument "list with a label that is not K=V"
assert_exit 2 sandbox rm -l "$lbl" "$h1"
assert_exit 0 sandbox rm -l "$lbl" --wait
assert_eq 2 "$(grep -c ' succeeded$' <<<"$ITEST_OUT")" "rm -l of the two sandboxes with the label"
assert_exit 0 sandbox list -l "$lbl" --phase deleted -q
assert_eq "$h2 $h1" "$(one_line "$ITEST_OUT")" "list --phase deleted shows deleted ones without --all"
assert_exit 0 sandbox rm -l "$lbl"
assert_contains "$ITEST_ERR" "no sandbox has those labels" "rm -l when they are all deleted"

# Errors that name the next step (issue 28 item 5): an exec before the
# sandbox runs names its create operation and how to wait for it; after a
# delete it says the sandbox is deleted, not "deleted and being deleted".
assert_exit 0 sandbox create --tenant platform --image "$ITEST_IMAGE" --cpu-millis 100 --memory-mib 32 --ttl 60 \
  --selector nosuch=label
read -r psbx pop <<<"$ITEST_OUT"
itest_track "$psbx"
assert_exit 3 sandbox exec "$psbx" -- true
assert_contains "$ITEST_ERR" "is pending, not running yet; wait for its create operation $pop (sandbox wait $pop" \
  "exec on a pending sandbox"
assert_exit 0 sandbox delete "$psbx" --wait
assert_exit 3 sandbox exec "$dsbx" -- true
assert_contains "$ITEST_ERR" "sandbox $dsbx is deleted; exec needs a running sandbox: create a new one" \
  "exec on a deleted sandbox"

# sandbox version: the client's, then the controller's (GET /v1/version)
assert_exit 0 sandbox version
cv=$("$SANDBOX_CLI" --version | cut -d' ' -f2)
schema=$(basename "$(find "$(dirname "$0")/../../migrations" -name '0*.sql' | sort | tail -n 1)" | cut -c1-4)
assert_contains "$ITEST_OUT" "client: sandbox $cv" "the client's version"
assert_contains "$ITEST_OUT" "server: sandboxd $cv (api v1, schema $schema) at $SANDBOX_URL" "the controller's version"
assert_match "$ITEST_OUT" "workers: [0-9]+ at $cv" "the workers' version, the same as the controller's"
assert_not_contains "$ITEST_OUT" "skew" "no skew when all run one version"
assert_exit 0 sandbox version --json
assert_eq "$cv $cv" "$(itest_json "$ITEST_OUT" client.version) $(itest_json "$ITEST_OUT" server.version)" \
  "versions in version --json"
