#!/usr/bin/env bash
# tools/lib.sh, the set-up tools/run.sh and tools/test.sh share, on temp
# files and fake commands only (never the machine's /etc/docker/daemon.json
# or its dockerd): registering runsc in a daemon.json (absent, other keys,
# the same runsc, a conflicting runsc, invalid JSON) and telling a dockerd
# pid to reload; apt-get waiting for a busy lock; no sudo when root; the
# base image (applets, /tmp, recipe label, cached, stale rebuilt).
# itest-timeout: 120
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

work="$ITEST_TMP/setup-$$"
mkdir -p "$work/bin"
# sudo must never run as root: a fake one on PATH records any call
printf '#!/bin/sh\necho "sudo $*" >>%s/sudo.calls\nexit 1\n' "$work" >"$work/bin/sudo"
chmod +x "$work/bin/sudo"
export PATH="$work/bin:$PATH"

# a stand-in for dockerd: records each SIGHUP it gets
hup_log="$work/hups"
: >"$hup_log"
bash -c 'trap "echo hup >>$1" HUP; touch "$1.ready"; while :; do sleep 0.1; done' _ "$hup_log" &
fake_pid=$!
itest_track_pid "$fake_pid"
itest_wait_until 10 "the fake dockerd to set its trap" test -e "$hup_log.ready"
hups() { wc -l <"$hup_log" | tr -d ' '; }
hups_at_least() { [ "$(hups)" -ge "$1" ]; }
wait_hups() { itest_wait_until 10 "$1 SIGHUP(s) to the fake dockerd" hups_at_least "$1"; }

# register FILE: runs sbx_gvisor_register FILE fake_pid; sets REG_RC, REG_ERR
register() {
  REG_RC=0
  sbx_gvisor_register "$1" "$fake_pid" 2>"$work/reg.err" || REG_RC=$?
  REG_ERR=$(cat "$work/reg.err")
}
json_eq() { python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1])) == json.loads(sys.argv[2]) else 1)' "$1" "$2"; }
entry='{"path":"/usr/bin/runsc","runtimeArgs":["--network=none"]}'

# ---- 1. absent file: created with just the runtime, dockerd told to reload
f="$work/absent/daemon.json"
register "$f"
assert_eq 0 "$REG_RC" "register into an absent file (stderr: $REG_ERR)"
json_eq "$f" "{\"runtimes\":{\"runsc\":$entry}}" || fail "created daemon.json: $(cat "$f")"
assert_eq 644 "$(stat -c %a "$f")" "mode of the created daemon.json"
[ ! -e "$f.sandbox-bak" ] || fail "a backup of a file that did not exist"
wait_hups 1

# ---- 2. a file with other keys: merged, every other key kept, old file backed up
f="$work/other/daemon.json"
mkdir -p "$(dirname "$f")"
orig='{"log-level":"warn","data-root":"/srv/docker","runtimes":{"crun":{"path":"/usr/bin/crun"}},"features":{"buildkit":true}}'
printf '%s\n' "$orig" >"$f"
register "$f"
assert_eq 0 "$REG_RC" "merge into a file with other keys (stderr: $REG_ERR)"
json_eq "$f" "{\"log-level\":\"warn\",\"data-root\":\"/srv/docker\",\"runtimes\":{\"crun\":{\"path\":\"/usr/bin/crun\"},\"runsc\":$entry},\"features\":{\"buildkit\":true}}" \
  || fail "merged daemon.json: $(cat "$f")"
assert_eq "$orig" "$(cat "$f.sandbox-bak")" "backup of the old daemon.json"
wait_hups 2

# ---- 3. the same runsc already there: file untouched, no backup, still reloaded
f="$work/same/daemon.json"
mkdir -p "$(dirname "$f")"
printf '{"runtimes": {"runsc": %s}, "debug": false}\n' "$entry" >"$f"
before=$(sha256sum <"$f")
register "$f"
assert_eq 0 "$REG_RC" "register when the same runsc is present (stderr: $REG_ERR)"
assert_eq "$before" "$(sha256sum <"$f")" "daemon.json with the same runsc"
[ ! -e "$f.sandbox-bak" ] || fail "a backup when nothing changed"
wait_hups 3

# ---- 4. a conflicting runsc: refused in one line, file untouched, no reload
f="$work/conflict/daemon.json"
mkdir -p "$(dirname "$f")"
printf '{"runtimes":{"runsc":{"path":"/opt/gvisor/runsc","runtimeArgs":["--platform=kvm"]}}}\n' >"$f"
before=$(sha256sum <"$f")
n=$(hups)
register "$f"
assert_eq 1 "$REG_RC" "register with a conflicting runsc"
assert_eq 1 "$(printf '%s\n' "$REG_ERR" | wc -l)" "one line for a conflicting runsc"
assert_contains "$REG_ERR" "already has a runsc runtime" "conflict message"
assert_contains "$REG_ERR" "/opt/gvisor/runsc" "conflict message names the existing entry"
assert_contains "$REG_ERR" "kill -HUP" "conflict message says how to reload"
assert_eq "$before" "$(sha256sum <"$f")" "daemon.json with a conflicting runsc"
[ ! -e "$f.sandbox-bak" ] || fail "a backup of a refused file"
sleep 0.3
assert_eq "$n" "$(hups)" "no SIGHUP after a refusal"

# ---- 5. invalid JSON, and JSON that is not an object: refused in one line
for bad in '{"log-level": "warn",' '[1, 2]' '{"runtimes": ["runsc"]}'; do
  f="$work/invalid-$RANDOM/daemon.json"
  mkdir -p "$(dirname "$f")"
  printf '%s\n' "$bad" >"$f"
  register "$f"
  assert_eq 1 "$REG_RC" "register into [$bad]"
  assert_eq 1 "$(printf '%s\n' "$REG_ERR" | wc -l)" "one line for [$bad]"
  assert_match "$REG_ERR" 'not valid JSON|not a JSON object|"runtimes" is not an object' "message for [$bad]"
  assert_eq "$bad" "$(cat "$f")" "daemon.json [$bad] untouched"
done
assert_eq "$n" "$(hups)" "no SIGHUP after invalid files"

# ---- 6. a dockerd that cannot be signalled: one line saying how
f="$work/nopid/daemon.json"
dead=$(bash -c 'echo $$')
REG_RC=0
sbx_gvisor_register "$f" "$dead" 2>"$work/reg.err" || REG_RC=$?
assert_eq 1 "$REG_RC" "register with a pid that is gone"
# shellcheck disable=SC2016 # a literal command in the message
assert_contains "$(cat "$work/reg.err")" 'kill -HUP $(pidof dockerd)' "message for a dockerd that cannot be signalled"
json_eq "$f" "{\"runtimes\":{\"runsc\":$entry}}" || fail "daemon.json for a gone pid: $(cat "$f")"

# ---- 7. the config file a dockerd reads: its --config-file, else /etc/docker/daemon.json
# not the python3 function of lib.sh: $! must be python itself
"$(command -v /usr/bin/python3 || command -v python3)" -c 'import time; time.sleep(60)' --config-file /srv/x/daemon.json &
cfg_pid=$!
itest_track_pid "$cfg_pid"
itest_wait_until 10 "python to start" grep -q config-file "/proc/$cfg_pid/cmdline"
assert_eq /srv/x/daemon.json "$(sbx_dockerd_config_file "$cfg_pid")" "config file of a dockerd with --config-file"
assert_eq /etc/docker/daemon.json "$(sbx_dockerd_config_file "$fake_pid")" "config file of a dockerd without it"

# ---- 8. the real dockerd has runsc: sbx_ensure_gvisor sees it and does nothing
if sbx_docker_has_runsc; then
  out=$(sbx_ensure_gvisor 2>&1)
  assert_eq "" "$out" "sbx_ensure_gvisor with runsc registered"
fi

# ---- 9. apt-get waits for the dpkg lock (bounded) and retries a busy lists lock
if [ "$(id -u)" -eq 0 ]; then
  calls="$work/apt.calls"
  cat >"$work/bin/apt-get" <<EOF
#!/bin/sh
echo "\$*" >>"$calls"
n=\$(wc -l <"$calls")
if [ -f "$work/apt.busy" ] && [ "\$n" -le "\$(cat "$work/apt.busy")" ]; then
  echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
if [ -f "$work/apt.broken" ]; then echo "E: Unable to locate package nope" >&2; exit 100; fi
exit 0
EOF
  chmod +x "$work/bin/apt-get"
  : >"$calls"
  sbx_apt_get install -y -q --no-install-recommends somepkg 2>/dev/null
  assert_contains "$(cat "$calls")" "-o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends somepkg" \
    "apt-get waits for the dpkg lock"
  # the lists lock is busy twice, then free: tried three times, with a message
  : >"$calls"
  echo 2 >"$work/apt.busy"
  rc=0
  SBX_APT_RETRY_SLEEP=0 sbx_apt_get update -q 2>"$work/apt.err" || rc=$?
  assert_eq 0 "$rc" "apt-get update after the lock is free"
  assert_eq 3 "$(wc -l <"$calls" | tr -d ' ')" "apt-get update tries"
  assert_contains "$(cat "$work/apt.err")" "another apt or dpkg holds its lock" "message while waiting"
  # busy for good: gives up once SBX_APT_LOCK_TIMEOUT has passed
  : >"$calls"
  echo 1000 >"$work/apt.busy"
  rc=0
  # shellcheck disable=SC2016 # $1 is the inner shell's
  SBX_APT_LOCK_TIMEOUT=2 SBX_APT_RETRY_SLEEP=1 timeout 30 bash -c '. "$1"; sbx_apt_get update -q' _ "$(dirname "$0")/../../tools/lib.sh" \
    2>/dev/null || rc=$?
  assert_eq 100 "$rc" "apt-get update when the lock stays busy"
  assert_match "$(wc -l <"$calls" | tr -d ' ')" '^[2-4]$' "tries within the bound"
  # any other failure is not retried
  rm -f "$work/apt.busy"
  : >"$calls"
  touch "$work/apt.broken"
  rc=0
  SBX_APT_RETRY_SLEEP=0 sbx_apt_get install -y nope 2>/dev/null || rc=$?
  assert_eq 100 "$rc" "apt-get install of a missing package"
  assert_eq 1 "$(wc -l <"$calls" | tr -d ' ')" "a failure other than the lock is not retried"
  rm -f "$work/bin/apt-get"
fi

# ---- 10. the base image: applets linked (busybox itself a file), /tmp, label, cached, stale rebuilt
img="sandbox-itest/base-$$:latest"
itest_on_exit "docker image rm -f '$img' >/dev/null 2>&1"
sbx_base_image "$img" 2>/dev/null || fail "sbx_base_image $img"
assert_eq "$SBX_IMAGE_RECIPE" "$(docker image inspect --format '{{ index .Config.Labels "dev.sandbox.image-recipe" }}' "$img")" \
  "recipe label"
assert_eq '["/bin/sh"]' "$(docker image inspect --format '{{json .Config.Cmd}}' "$img")" "CMD of the base image"
out=$(docker run --rm --network none "$img" sh -c \
  'test -f /bin/busybox && test ! -L /bin/busybox && stat -c "%a" /tmp && test -L /bin/ls && id -un && grep -c . /etc/passwd && grep -q "^nogroup:x:65534:" /etc/group && test -d /root && test -d /proc && echo ok')
assert_eq "$(printf '1777\nroot\n2\nok')" "$out" "inside the base image"
assert_eq nobody "$(docker run --rm --network none --user 65534 "$img" sh -c 'touch /tmp/x && id -un')" \
  "an unprivileged user writes /tmp"
id1=$(docker image inspect --format '{{.Id}}' "$img")
itest_on_exit "docker image rm -f '$id1' >/dev/null 2>&1"   # untagged once the stale image takes the name
sbx_base_image "$img" 2>"$work/img.err" || fail "sbx_base_image $img again"
assert_eq "$id1" "$(docker image inspect --format '{{.Id}}' "$img")" "the image is kept when current"
assert_eq "" "$(cat "$work/img.err")" "nothing said when the image is current"
# an image of an older recipe under the name: rebuilt
mkdir -p "$work/stale/bin"
cp /bin/busybox "$work/stale/bin/busybox"
stale_id=$(tar -C "$work/stale" -c . | docker import --change 'LABEL dev.sandbox.image-recipe=0' - "$img")
itest_on_exit "docker image rm -f '$stale_id' >/dev/null 2>&1"
sbx_base_image "$img" 2>"$work/img.err" || fail "sbx_base_image over a stale image"
assert_contains "$(cat "$work/img.err")" "rebuilding $img" "message for a stale image"
assert_eq "$SBX_IMAGE_RECIPE" "$(docker image inspect --format '{{ index .Config.Labels "dev.sandbox.image-recipe" }}' "$img")" \
  "recipe label after the rebuild"

# ---- 11. run.sh's banner points at the default image, never at Docker Hub's busybox
assert_not_contains "$(cat "$(dirname "$0")/../../tools/run.sh")" "--image busybox" "run.sh example"

[ "$(id -u)" -ne 0 ] || [ ! -e "$work/sudo.calls" ] || fail "sudo was called while running as root: $(cat "$work/sudo.calls")"
