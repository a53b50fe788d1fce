#!/usr/bin/env bash
# The hardening profile of docs/worker.md, seen from inside and through
# docker inspect: a normal sandbox keeps exactly the documented capabilities,
# a hardened one none; no-new-privileges and Docker's seccomp filter are on;
# a read-only root refuses writes but /tmp (a bounded tmpfs) takes them; the
# pids, memory and swap limits, Init and no privileges are set on the
# container.
# itest-timeout: 150
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_as_member itest-hard

create() { # MEMORY_MIB [FLAGS...]: prints the sandbox id
  local id mem=$1
  shift
  assert_exit 0 sandbox create --tenant "$tenant" --image "$ITEST_IMAGE" --memory-mib "$mem" --network none \
    "$@" --wait --timeout 120
  read -r id _ <<<"$ITEST_OUT"
  assert_match "$id" '^sbx_' "sandbox id ($*)"
  echo "$id"
}
status_field() { # SANDBOX FIELD: the value of FIELD in /proc/self/status inside
  sandbox exec "$1" -- cat /proc/self/status | awk -v f="$2:" '$1 == f { print $2 }'
}
inspect() { # SANDBOX FORMAT
  docker inspect -f "$2" "$(docker ps -q --no-trunc --filter "label=dev.sandbox.id=$1")"
}

# CHOWN(0) DAC_OVERRIDE(1) FOWNER(3) KILL(5) SETGID(6) SETUID(7)
documented_caps=00000000000000eb

plain=$(create 256)
itest_track "$plain"
assert_eq "$documented_caps" "$(status_field "$plain" CapEff)" "CapEff of a normal sandbox"
assert_eq "$documented_caps" "$(status_field "$plain" CapBnd)" "CapBnd of a normal sandbox"
assert_eq "1" "$(status_field "$plain" NoNewPrivs)" "NoNewPrivs"
assert_eq "2" "$(status_field "$plain" Seccomp)" "Seccomp mode (2: Docker's default filter)"
assert_eq "1024" "$(inspect "$plain" '{{.HostConfig.PidsLimit}}')" "HostConfig.PidsLimit"
assert_eq "$((256 * 1024 * 1024))" "$(inspect "$plain" '{{.HostConfig.Memory}}')" "HostConfig.Memory"
assert_eq "$((256 * 1024 * 1024))" "$(inspect "$plain" '{{.HostConfig.MemorySwap}}')" "HostConfig.MemorySwap (no swap)"
assert_eq "[ALL]" "$(inspect "$plain" '{{.HostConfig.CapDrop}}')" "HostConfig.CapDrop"
assert_eq "[no-new-privileges]" "$(inspect "$plain" '{{.HostConfig.SecurityOpt}}')" "HostConfig.SecurityOpt"
assert_eq "false true false" "$(inspect "$plain" '{{.HostConfig.Privileged}} {{.HostConfig.Init}} {{.HostConfig.ReadonlyRootfs}}')" \
  "Privileged Init ReadonlyRootfs"
assert_eq "0" "$(inspect "$plain" '{{len .Mounts}}')" "mounts"
# a writable root by default
assert_exit 0 sandbox exec "$plain" -- sh -c 'echo x >/written && cat /written'

hardened=$(create 256 --hardened)
itest_track "$hardened"
assert_eq "0000000000000000" "$(status_field "$hardened" CapEff)" "CapEff of a hardened sandbox"
assert_eq "0000000000000000" "$(status_field "$hardened" CapBnd)" "CapBnd of a hardened sandbox"
assert_eq "[]" "$(inspect "$hardened" '{{.HostConfig.CapAdd}}')" "HostConfig.CapAdd of a hardened sandbox"
assert_eq "1" "$(status_field "$hardened" NoNewPrivs)" "NoNewPrivs (hardened)"
# root without DAC_OVERRIDE cannot write a file it does not own
assert_exit 0 sandbox exec "$hardened" -- sh -c 'echo x >/tmp/f && chown 65534 /tmp/f 2>/dev/null; true'
rc=0
sandbox exec "$hardened" -- sh -c 'chown 65534:65534 /tmp/f' >/dev/null 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "chown worked in a sandbox without CAP_CHOWN"

ro=$(create 256 --read-only-root)
itest_track "$ro"
assert_eq "true" "$(inspect "$ro" '{{.HostConfig.ReadonlyRootfs}}')" "HostConfig.ReadonlyRootfs"
assert_eq "rw,nosuid,nodev,mode=1777,size=64m" "$(inspect "$ro" '{{index .HostConfig.Tmpfs "/tmp"}}')" \
  "HostConfig.Tmpfs /tmp (min(64 MiB, memory/4))"
rc=0
sandbox exec "$ro" -- sh -c 'echo x >/written' >/dev/null 2>"$ITEST_TMP/ro.err" || rc=$?
[ "$rc" -ne 0 ] || fail "writing to / worked with a read-only root"
assert_contains "$(cat "$ITEST_TMP/ro.err")" "Read-only file system" "error writing to a read-only root"
assert_exit 0 sandbox exec "$ro" -- sh -c 'echo in-tmp >/tmp/f && cat /tmp/f'
assert_eq "in-tmp" "$ITEST_OUT" "writing to /tmp with a read-only root"
# the tmpfs is bounded: 64 MiB is 65536 1K-blocks
assert_exit 0 sandbox exec "$ro" -- df -k /tmp
assert_match "$(printf '%s\n' "$ITEST_OUT" | tail -n 1)" '^tmpfs +65536 ' "df of /tmp"
# a small sandbox gets a quarter of its memory
small=$(create 32 --read-only-root)
itest_track "$small"
assert_eq "rw,nosuid,nodev,mode=1777,size=8m" "$(inspect "$small" '{{index .HostConfig.Tmpfs "/tmp"}}')" \
  "HostConfig.Tmpfs /tmp of a 32 MiB sandbox"

echo "capabilities, no-new-privileges, seccomp, read-only root and limits are as documented"
