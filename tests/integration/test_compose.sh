#!/usr/bin/env bash
# The compose deployment (examples/compose/, docs/server-setup.md#compose):
# builds its image from Debian packages with examples/compose/build.sh (no
# registry), brings PostgreSQL, NATS, a controller and a worker up with
# Debian's docker-compose under a project name of its own with the API on a
# private port, reads the bootstrap admin token the controller made, and
# through that API creates a sandbox, runs a command in it and deletes it;
# the worker runs the sandbox on the host's Docker. Then the same with a
# --hostile sandbox once the worker offers microvm: its reference driver
# runs QEMU (TCG here) with the image's Debian kernel inside the worker's
# container. `docker-compose down -v`
# then leaves no container, network or volume of the project behind. (The
# image holds the binaries of the build under test: run it with the plain
# build; tools/test.sh leaves it out of the sanitized run.)
# itest-standalone
# itest-cost: 540
# itest-timeout: 900
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

[ "$(id -u)" -eq 0 ] || fail "needs root (the image build's debootstrap, Docker's socket)"
command -v docker-compose >/dev/null || fail "docker-compose is not installed (tools/test.sh installs Debian's docker-compose)"
root=$(cd "$(dirname "$0")/../.." && pwd)
compose_dir="$root/examples/compose"
project="sbxcompose$$"
tag="itest-$$"
port=$(itest_free_port)
export SANDBOX_IMAGE_TAG=$tag SANDBOX_PORT=$port SANDBOX_BIND=127.0.0.1 COMPOSE_PROJECT_NAME=$project
export POSTGRES_PASSWORD="pw-$RANDOM$RANDOM"
export SANDBOX_WORKER_NAME="compose-$$"
DOCKER_DATA_ROOT=$(docker info -f '{{.DockerRootDir}}')
export DOCKER_DATA_ROOT
dc() { docker-compose -f "$compose_dir/docker-compose.yml" "$@"; }
down() {
  dc down -v --remove-orphans >"$ITEST_TMP/compose-down-$$.log" 2>&1 || true
  docker image rm "sandbox/compose:$tag" >/dev/null 2>&1 || true
}
itest_on_exit down

# ---- the image, from Debian packages
t0=$(date +%s)
bash "$compose_dir/build.sh" "$ITEST_BUILD" >"$ITEST_TMP/compose-build-$$.log" 2>&1 ||
  { tail -n 30 "$ITEST_TMP/compose-build-$$.log"; fail "examples/compose/build.sh failed"; }
echo "the image built in $(($(date +%s) - t0)) s"
docker image inspect "sandbox/compose:$tag" >/dev/null || fail "no sandbox/compose:$tag after build.sh"

# ---- up
t0=$(date +%s)
dc up -d >"$ITEST_TMP/compose-up-$$.log" 2>&1 || { cat "$ITEST_TMP/compose-up-$$.log"; fail "docker-compose up failed"; }
url="http://127.0.0.1:$port"
logs() { dc logs --no-color --tail 40 2>&1 | tail -n 80; }
healthy() { curl -sf "$url/healthz" >/dev/null; }
itest_wait_until 180 "the compose controller's /healthz on $url" healthy || { logs; fail "no controller"; }
token=""
have_token() { token=$(dc exec -T controller cat /secrets/admin.token 2>/dev/null) && [ -n "$token" ]; }
itest_wait_until 60 "the bootstrap admin token" have_token || { logs; fail "no admin token"; }
printf '%s\n' "$token" >>"$ITEST_TMP/secrets.txt"
export SANDBOX_URL=$url SANDBOX_TOKEN=$token
worker_ready() {
  itest_http GET /v1/workers "$token" && [[ "$HTTP_BODY" == *"\"name\":\"$SANDBOX_WORKER_NAME\""*'"state":"ready"'* ]]
}
itest_wait_until 120 "the compose worker ready" worker_ready || { logs; fail "the worker did not register"; }
echo "up in $(($(date +%s) - t0)) s"
[ "$(dc ps --services | sort | paste -sd' ')" = "controller nats postgres worker" ] ||
  fail "the services: $(dc ps --services | paste -sd' ')"

# ---- create, exec, delete through its API
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --memory-mib 64 --wait --timeout 180 --json
sbx=$(itest_json "$ITEST_OUT" sandbox.id)
assert_eq "$SANDBOX_WORKER_NAME" "$(itest_json "$ITEST_OUT" sandbox.worker)" "placed on the compose worker"
# shellcheck disable=SC2016 # the sandbox's shell does the arithmetic
assert_exit 0 sandbox exec "$sbx" -- sh -c 'echo compose-$((6 * 7))'
assert_eq "compose-42" "$ITEST_OUT" "a command in the sandbox"
[ -n "$(docker ps -q --filter "label=dev.sandbox.id=$sbx")" ] || fail "no container of $sbx on the host's Docker"
assert_exit 0 sandbox delete "$sbx" --wait --timeout 120
gone() { [ -z "$(docker ps -aq --filter "label=dev.sandbox.id=$sbx")" ]; }
itest_wait_until 30 "the sandbox's container removed" gone

# ---- a microVM: the worker's driver boots a VM for its probe (QEMU under
# TCG here), then the worker offers microvm; a --hostile sandbox runs in a VM
# with the image's Debian kernel, and its delete leaves no VM
t0=$(date +%s)
offers_microvm() {
  itest_http GET /v1/workers "$token" && python3 -c '
import json, sys
w = next((w for w in json.loads(sys.argv[1])["workers"] if w["name"] == sys.argv[2]), {})
sys.exit(0 if "microvm" in w.get("isolation", []) else 1)
' "$HTTP_BODY" "$SANDBOX_WORKER_NAME"
}
itest_wait_until 300 "the compose worker offering microvm" offers_microvm || { logs; fail "no microvm"; }
echo "microvm offered $(($(date +%s) - t0)) s after the container sandbox"
assert_exit 0 sandbox create --image "$ITEST_IMAGE" --hostile --network none --wait --timeout 300 --json
vsb=$(itest_json "$ITEST_OUT" sandbox.id)
assert_eq microvm "$(itest_json "$ITEST_OUT" sandbox.isolation)" "class of the hostile sandbox"
release=$(docker run --rm --entrypoint ls "sandbox/compose:$tag" /lib/modules | head -n 1)
[ -n "$release" ] || fail "no kernel modules in sandbox/compose:$tag"
assert_exit 0 sandbox exec "$vsb" -- uname -r
assert_eq "$release" "$ITEST_OUT" "the VM runs the image's Debian kernel"
[ -n "$(dc exec -T worker ls /var/lib/sandbox/vmm/vms)" ] || fail "no VM in the worker's vmm volume"
assert_exit 0 sandbox delete "$vsb" --wait --timeout 120
no_vm() { [ -z "$(dc exec -T worker ls /var/lib/sandbox/vmm/vms)" ]; }
itest_wait_until 30 "the VM removed" no_vm

# ---- down: nothing of the project left
dc down -v --remove-orphans >"$ITEST_TMP/compose-down-$$.log" 2>&1 || { cat "$ITEST_TMP/compose-down-$$.log"; fail "down failed"; }
left=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
[ -z "$left" ] || fail "containers left after down: $left"
left=$(docker network ls -q --filter "label=com.docker.compose.project=$project")
[ -z "$left" ] || fail "networks left after down: $left"
left=$(docker volume ls -q --filter "label=com.docker.compose.project=$project")
[ -z "$left" ] || fail "volumes left after down: $left"
echo "the compose deployment serves the API from images built here, and goes without a trace"
