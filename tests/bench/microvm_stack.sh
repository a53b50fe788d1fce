#!/usr/bin/env bash
# The microvm class through the whole stack: `sandboxd all` (embedded
# PostgreSQL, controller, worker with the sandbox-vmm driver it turns on by
# itself) and the CLI on loopback. Rows: `sandbox create --hostile --wait`
# (create -> running, from a warm template), `sandbox exec -- true` (a new
# CLI process, the API, the worker, the driver, the guest agent), `sandbox
# pause --wait` and `sandbox resume --wait` (QEMU stopped and continued, its
# memory kept: docs/pause.md), `sandbox snapshot --memory --wait` and a
# `sandbox create --from` it (the VM resumed from its saved memory:
# docs/snapshots.md), `sandbox delete --wait` (QEMU killed, files
# removed). Median of N (5), in ms; the first create (a cold boot, which
# makes the template of its size) is shown on its own, and resume is set
# against both ways of starting: the template restore and the cold boot.
# Usage: tests/bench/microvm_stack.sh [N]   (as root; env BUILD, IMAGE)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=tools/lib.sh
. "$root/tools/lib.sh"
n=${1:-5}
build=${BUILD:-$root/build}
image=${IMAGE:-$SBX_BASE_IMAGE}
[ -x "$build/tools/sandbox-vmm" ] || { echo "no $build/tools/sandbox-vmm (meson compile -C $build)" >&2; exit 2; }
sbx_base_image "$image" >/dev/null || exit 2
dir=$(mktemp -d /tmp/sbx-vmmstack.XXXXXX)
chmod 711 "$dir"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
rport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
env -u SANDBOX_WORKER_RUNTIME -u SANDBOX_DATABASE_URL "$build/tools/sandboxd" all --data-dir "$dir/data" \
  --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" >"$dir/all.log" 2>&1 </dev/null &
pid=$!
done_() {
  kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  for f in "$dir"/data/vmm/vms/*/qemu.pid; do [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null; done
  rm -rf "$dir"
}
trap done_ EXIT
export SANDBOX_URL="http://127.0.0.1:$port"
for _ in $(seq 120); do [ -s "$dir/data/admin.token" ] && break; sleep 0.5; done
SANDBOX_TOKEN=$(tr -d '[:space:]' <"$dir/data/admin.token")
export SANDBOX_TOKEN
cli="$build/tools/sandbox"
for _ in $(seq 240); do
  "$cli" workers list --json 2>/dev/null | grep -q '"microvm"' && break
  sleep 1
done
"$cli" workers list --json | grep -q '"microvm"' || { echo "microvm is not offered:"; grep -i microvm "$dir/all.log"; exit 1; }
accel=$("$cli" workers list --json | grep -o 'accel \(kvm\|tcg\)' | head -n1 | cut -d' ' -f2)
ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

create=() exec_true=() delete=() pause=() resume=() msnap=() mfrom=()
first=0
for i in $(seq 0 "$n"); do
  a=$(ms); id=$("$cli" create --image "$image" --hostile --wait --timeout 200 | awk '{print $1}'); b=$(ms)
  if [ "$i" -eq 0 ]; then first=$((b - a)); else create+=($((b - a))); fi
  for _ in 1 2; do
    a=$(ms); "$cli" exec "$id" -- true; b=$(ms)
    exec_true+=($((b - a)))
  done
  a=$(ms); "$cli" pause "$id" --wait --timeout 120 >/dev/null; b=$(ms)
  pause+=($((b - a)))
  a=$(ms); "$cli" resume "$id" --wait --timeout 120 >/dev/null; b=$(ms)
  resume+=($((b - a)))
  "$cli" exec "$id" -- true || { echo "exec after resume failed" >&2; exit 1; }
  a=$(ms); snp=$("$cli" snapshot "$id" --memory --wait --timeout 180 | awk '{print $1}'); b=$(ms)
  msnap+=($((b - a)))
  a=$(ms); out=$("$cli" create --from "$snp" --wait --timeout 200 --json); b=$(ms)
  mfrom+=($((b - a)))
  fid=$(printf '%s' "$out" | python3 -c 'import json,sys; d=json.load(sys.stdin)
if not d["operation"].get("result", {}).get("memory"): sys.exit("the create from the memory snapshot booted")
print(d["sandbox"]["id"])') || exit 1
  "$cli" exec "$fid" -- true || { echo "exec in the sandbox from memory failed" >&2; exit 1; }
  "$cli" delete "$fid" --wait --timeout 60 >/dev/null
  "$cli" snapshots delete "$snp" >/dev/null
  a=$(ms); "$cli" delete "$id" --wait --timeout 60 >/dev/null; b=$(ms)
  delete+=($((b - a)))
done
printf '| microvm (%s), through sandboxd all and the CLI | median of %s, ms |\n| --- | --- |\n' "$accel" "$n"
printf '| first create (makes the template) | %s |\n' "$first"
printf '| create --hostile --wait (template restore) | %s |\n' "$(median "${create[@]}")"
printf '| exec true | %s |\n' "$(median "${exec_true[@]}")"
printf '| pause --wait | %s |\n' "$(median "${pause[@]}")"
printf '| resume --wait | %s |\n' "$(median "${resume[@]}")"
printf '| delete --wait | %s |\n' "$(median "${delete[@]}")"
printf '| snapshot --memory --wait | %s |\n' "$(median "${msnap[@]}")"
printf '| create --from it --wait (resumes its memory) | %s |\n' "$(median "${mfrom[@]}")"
c=$(median "${create[@]}") r=$(median "${resume[@]}") m=$(median "${mfrom[@]}")
awk -v r="$r" -v c="$c" -v f="$first" -v m="$m" 'BEGIN { printf "| resume / template restore | %.2fx |\n| resume / cold boot (first create) | %.2fx |\n| create from memory / template restore | %.2fx |\n| create from memory / cold boot | %.2fx |\n", r / c, r / f, m / c, m / f }' 
