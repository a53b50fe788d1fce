# Shared start-up of the benchmarks: a private `sandboxd all` on a free port
# with its own data directory, stopped and removed on exit; and `stats`.
# Source it from a bench script after `set -euo pipefail`:
#   . "$(dirname "$0")/lib.sh"      (it changes to the repository root)
#   bench_start [EXTRA SANDBOXD FLAGS...]
# Settings from the environment: BUILD (default build), IMAGE (default
# sandbox/busybox:latest, built by tools/lib.sh sbx_base_image), PYTHON (default /usr/bin/python3), BENCH_KEEP
# (non-empty: keep the temporary directory, for a look at the logs).
# Afterwards: SANDBOX_URL and SANDBOX_TOKEN (exported), BENCH_PID (the
# sandboxd process), BENCH_TMP (a temporary directory, removed on exit).

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
BUILD=${BUILD:-build}
IMAGE=${IMAGE:-sandbox/busybox:latest}
# shellcheck source=tools/lib.sh
. tools/lib.sh
SBXD="$BUILD/tools/sandboxd"
CLI="$BUILD/tools/sandbox"
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
[ -x "$SBXD" ] && [ -x "$CLI" ] || { echo "bench: build first (meson setup $BUILD && meson compile -C $BUILD)" >&2; exit 2; }
if [ "$IMAGE" = "$SBX_BASE_IMAGE" ]; then
  sbx_base_image "$IMAGE" || { echo "bench: cannot build image $IMAGE" >&2; exit 2; }
fi
docker image inspect "$IMAGE" >/dev/null 2>&1 || { echo "bench: image $IMAGE missing" >&2; exit 2; }

BENCH_TMP=$(mktemp -d /tmp/sbx-bench.XXXXXX)
chmod 711 "$BENCH_TMP"
BENCH_PID=
bench_hooks=()

# Runs CMD (a string for eval) on exit, before sandboxd stops; the latest
# registered runs first. Failures of a hook are ignored.
bench_on_exit() { bench_hooks+=("$1"); }

bench_cleanup() {
  local i
  for ((i = ${#bench_hooks[@]} - 1; i >= 0; i--)); do
    eval "${bench_hooks[$i]}" >/dev/null 2>&1 || true
  done
  if [ -n "$BENCH_PID" ]; then
    kill -TERM "$BENCH_PID" 2>/dev/null || true
    wait "$BENCH_PID" 2>/dev/null || true
  fi
  if [ -n "${BENCH_KEEP:-}" ]; then
    echo "bench: kept $BENCH_TMP" >&2
  else
    rm -rf "$BENCH_TMP"
  fi
}
trap bench_cleanup EXIT
# So that an interrupted run still cleans up (bash runs the EXIT trap on exit).
trap 'exit 130' INT
trap 'exit 143' TERM

bench_freeport() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

bench_fail() {
  echo "bench: $*" >&2
  if [ -s "$BENCH_TMP/err.log" ]; then
    echo "bench: the last lines of sandboxd's stderr:" >&2
    tail -n 20 "$BENCH_TMP/err.log" >&2
  fi
  exit 1
}

# Starts `sandboxd all` with the default flags, then EXTRA flags (a flag given
# again overrides the default, e.g. --route-listen), and waits for /healthz
# and the admin token (20 s), then a ready worker (120 s: the embedded worker
# probes its isolation classes, gVisor and microVM, before it registers,
# 20-30 s on a busy machine).
bench_start() {
  local port i
  port=$(bench_freeport)
  "$SBXD" all --data-dir "$BENCH_TMP/data" --listen "127.0.0.1:$port" --route-listen 127.0.0.1:0 --log-level warn \
    "$@" >"$BENCH_TMP/out.log" 2>"$BENCH_TMP/err.log" &
  BENCH_PID=$!
  export SANDBOX_URL="http://127.0.0.1:$port" SANDBOX_TOKEN=
  for i in $(seq 100); do
    kill -0 "$BENCH_PID" 2>/dev/null || bench_fail "sandboxd all exited during start-up"
    curl -sf "$SANDBOX_URL/healthz" >/dev/null 2>&1 && [ -s "$BENCH_TMP/data/admin.token" ] && break
    [ "$i" -lt 100 ] || bench_fail "sandboxd all did not answer /healthz with an admin token within 20 s"
    sleep 0.2
  done
  SANDBOX_TOKEN=$(cat "$BENCH_TMP/data/admin.token")
  for i in $(seq 600); do
    kill -0 "$BENCH_PID" 2>/dev/null || bench_fail "sandboxd all exited while its worker started"
    if curl -sf -H "Authorization: Bearer $SANDBOX_TOKEN" "$SANDBOX_URL/v1/workers" | grep -q '"ready"'; then
      # the benchmarks' tenant (a create never makes one)
      "$CLI" tenants create bench >/dev/null || bench_fail "sandbox tenants create bench failed"
      return 0
    fi
    sleep 0.2
  done
  bench_fail "the embedded worker was not ready within 120 s"
}

# Prints min, p50, p95 and max of its arguments, each with STATS_FMT
# (default %6d: whole numbers in a 6-wide column), separated by spaces.
stats() {
  printf '%s\n' "$@" | sort -g | awk -v f="${STATS_FMT:-%6d}" \
    '{a[NR]=$1} END {p50=a[int((NR+1)/2)]; p95=a[int(NR*0.95+0.999)]; printf f " " f " " f " " f, a[1], p50, p95, a[NR]}'
}
