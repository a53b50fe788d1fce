#!/usr/bin/env bash
# The gvisor class, advertised truthfully and really used: the worker's probe
# passed and it says so (GET /v1/workers: class gvisor, its networks, the
# probe line); a sandbox created with "isolation":"gvisor" runs under runsc
# (HostConfig.Runtime, a kernel other than the host's), hardened and with a
# read-only root as asked; an exec timeout returns at once as timed_out AND
# kills the command's process tree inside the sandbox; a network the class
# cannot provide is refused with isolation_unavailable, never downgraded.
# Needs dockerd with runsc registered (run.sh does that for a dockerd it
# starts; see itest_require_gvisor).
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin
itest_require_gvisor

itest_as_member itest-gv
worker=${ITEST_WORKER_NAME:-itest-worker}
runsc_args=$(docker info --format '{{json .Runtimes.runsc.Args}}' 2>/dev/null || true)

# ---- the worker offers gvisor, with the probe's word for it
itest_http GET /v1/workers "$ITEST_ADMIN_TOKEN"
assert_http 200 "" "GET /v1/workers"
w=$(python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
print(json.dumps(next(w for w in doc["workers"] if w["name"] == sys.argv[2])))
' "$HTTP_BODY" "$worker") || fail "worker $worker not listed: $HTTP_BODY"
assert_contains "$(itest_json "$w" isolation)" '"gvisor"' "classes worker $worker offers"
assert_match "$(itest_json "$w" probes.gvisor)" '^ok: runsc ran a probe container' "probe result of gvisor"
case "$runsc_args" in
  *--network=none*) assert_eq '["none"]' "$(itest_json "$w" networks.gvisor)" "networks of gvisor (runsc --network=none)" ;;
  *) assert_contains "$(itest_json "$w" networks.gvisor)" '"none"' "networks of gvisor" ;;
esac
assert_eq '["none", "restricted", "open"]' "$(itest_json "$w" networks.container)" "networks of container"
assert_contains "$(cat "$ITEST_WORKER_LOG")" "isolation gvisor: ok: runsc ran a probe container" "worker log"
# the probe left no container behind and is never a sandbox (this worker's
# probe: a worker killed mid-probe elsewhere on the host, as the fault
# tests do, may have left one of its own)
assert_eq "" "$(docker ps -aq --filter label=dev.sandbox.managed=probe --filter "label=dev.sandbox.worker=$worker")" \
  "probe containers of $worker left"

# ---- a gVisor sandbox through the API
itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" \
  "{\"image\":\"$ITEST_IMAGE\",\"isolation\":\"gvisor\",\"memory_mib\":128,\"hardened\":true,\"read_only_root\":true}"
assert_http 202 "" "create with isolation gvisor"
sbx=$(itest_json "$HTTP_BODY" sandbox.id)
op=$(itest_json "$HTTP_BODY" operation.id)
itest_track "$sbx"
assert_exit 0 sandbox wait "$op" --timeout 120
assert_exit 0 sandbox get "$sbx" --json
assert_eq "gvisor" "$(itest_json "$ITEST_OUT" sandbox.isolation isolation)" "isolation the sandbox was placed on"

cid=$(docker ps -q --no-trunc --filter "label=dev.sandbox.id=$sbx")
assert_match "$cid" '^[0-9a-f]{64}$' "the container of $sbx"
assert_eq "runsc" "$(docker inspect -f '{{.HostConfig.Runtime}}' "$cid")" "HostConfig.Runtime"
assert_eq "none true" "$(docker inspect -f '{{.HostConfig.NetworkMode}} {{.HostConfig.ReadonlyRootfs}}' "$cid")" \
  "NetworkMode and ReadonlyRootfs"

# its ports cannot be shared (the network stack is inside gVisor): refused
# at share time, not a route that never answers
itest_http POST "/v1/sandboxes/$sbx/routes" "$ITEST_ADMIN_TOKEN" '{"port":8080,"auth":"public"}'
assert_http 409 conflict "share a port of a gVisor sandbox"
assert_contains "$HTTP_BODY" "gVisor" "the refusal says why"

assert_exit 0 sandbox exec "$sbx" -- uname -r
inside=$ITEST_OUT
[ "$inside" != "$(uname -r)" ] || fail "uname -r inside ($inside) is the host's: not gVisor"
assert_exit 0 sandbox exec "$sbx" -- cat /proc/version
[ "$ITEST_OUT" != "$(cat /proc/version)" ] || fail "/proc/version inside is the host's: not gVisor"
assert_exit 0 sandbox exec "$sbx" -- cat /proc/self/status
assert_contains "$ITEST_OUT" "CapEff:	0000000000000000" "CapEff of a hardened gVisor sandbox"
rc=0
sandbox exec "$sbx" -- sh -c 'echo x >/written' >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "writing to / worked with a read-only root under gVisor"
assert_exit 0 sandbox exec "$sbx" -- sh -c 'echo in-tmp >/tmp/f && cat /tmp/f'
assert_eq "in-tmp" "$ITEST_OUT" "/tmp under gVisor"

# ---- an exec timeout kills the command inside the sandbox, tree and all
t0=$(date +%s)
assert_exit 137 sandbox exec "$sbx" --timeout 2 --json -- sh -c 'sleep 101 & sleep 102'
took=$(($(date +%s) - t0))
[ "$took" -le 12 ] || fail "exec --timeout 2 under gVisor took ${took}s"
assert_eq "true" "$(itest_json "$ITEST_OUT" operation.result.timed_out result.timed_out timed_out)" "timed_out"
# shellcheck disable=SC2016 # expanded by the sandbox's shell
list_cmds='for f in /proc/[0-9]*/cmdline; do tr "\0" " " <"$f"; echo; done'
assert_exit 0 sandbox exec "$sbx" -- sh -c "$list_cmds"
assert_contains "$ITEST_OUT" "sleep infinity" "processes inside (the sandbox's own)"
assert_not_contains "$ITEST_OUT" "sleep 101" "processes left by the timed-out exec"
assert_not_contains "$ITEST_OUT" "sleep 102" "processes left by the timed-out exec"
# and no runsc exec process of it is left on the host
assert_eq "" "$(pgrep -f "runsc-exec.* $cid\$" || true)" "runsc-exec processes of $cid on the host"

# ---- a network gVisor cannot provide here is refused, never downgraded
case "$runsc_args" in
  *--network=none*)
    itest_http POST /v1/sandboxes "$SANDBOX_TOKEN" \
      "{\"image\":\"$ITEST_IMAGE\",\"isolation\":\"gvisor\",\"network\":\"restricted\",\"memory_mib\":64}"
    if [ "$HTTP_STATUS" = 202 ]; then
      id=$(itest_json "$HTTP_BODY" sandbox.id)
      itest_track "$id"
      rc=0
      sandbox wait "$(itest_json "$HTTP_BODY" operation.id)" --timeout 60 --json >"$ITEST_TMP/gv-net.json" 2>&1 || rc=$?
      assert_eq 1 "$rc" "sandbox wait of gvisor + restricted"
      assert_contains "$(cat "$ITEST_TMP/gv-net.json")" "isolation_unavailable" "gvisor + restricted"
      assert_eq "" "$(docker ps -aq --filter "label=dev.sandbox.id=$id")" "containers of the refused sandbox"
    else
      assert_http 422 "isolation_unavailable" "gvisor + restricted"
    fi
    ;;
esac

echo "gvisor is probed, advertised, used, and its exec timeout kills inside the sandbox"
