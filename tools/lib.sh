# Shared by tools/run.sh, tools/test.sh and tests/integration/lib.sh:
# installs missing Debian packages (waiting for a busy dpkg lock), starts
# dockerd when no daemon answers, registers gVisor with it, builds the base
# image sandbox/busybox:latest, configures and builds with meson.
# shellcheck shell=bash

# Everything Sandbox needs to build, run and test on Debian 12 (runsc: the
# gVisor runtime the worker offers as isolation class gvisor when dockerd
# has it registered; for the microvm class (worker/vmm): qemu-system-x86,
# qemu-utils for overlays, linux-image-amd64 as the guest kernel, xz-utils
# to unpack it, e2fsprogs for mkfs.ext4 -d root disks; gnuplot-nox draws
# tests/bench/scale.sh's chart; dnsmasq-base answers names in the egress
# filter's tests, which build their own internet in a network namespace).
SBX_PACKAGES=(
  build-essential meson ninja-build pkg-config
  libpq-dev libevent-dev libssl-dev libjson-c-dev libcurl4-openssl-dev libsodium-dev check openssl
  postgresql-15 docker.io busybox-static curl runsc
  libnats-dev nats-server gnuplot-nox
  qemu-system-x86 qemu-utils linux-image-amd64 e2fsprogs xz-utils dnsmasq-base
)

sbx_say() { printf '==> %s\n' "$*" >&2; }
sbx_die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# Runs a command as root: directly when we are root, else through sudo.
sbx_as_root() {
  if [ "$(id -u)" -eq 0 ]; then
    "$@"
  elif command -v sudo >/dev/null 2>&1; then
    sudo "$@"
  else
    sbx_die "need root for: $*  (run this script as root or install sudo)"
  fi
}

# How long apt-get waits for a dpkg or apt lock another process holds (on
# a fresh machine, often unattended-upgrades) before giving up, seconds.
SBX_APT_LOCK_TIMEOUT=${SBX_APT_LOCK_TIMEOUT:-300}
# Pause between two tries of an apt-get that found the lists lock taken.
SBX_APT_RETRY_SLEEP=${SBX_APT_RETRY_SLEEP:-5}

# Names the processes holding apt or dpkg busy ("" when none).
sbx_apt_busy() {
  command -v pgrep >/dev/null 2>&1 || return 0
  pgrep -a -x 'apt|apt-get|aptitude|dpkg|unattended-upgr|packagekitd' 2>/dev/null | head -n 3 | tr '\n' ';' || true
}

# apt-get ARGS... as root, non-interactive, waiting (bounded, with a clear
# message) while another apt or dpkg holds a lock: dpkg's lock through
# DPkg::Lock::Timeout, the lists lock of `apt-get update` (which that option
# does not cover) by trying again until SBX_APT_LOCK_TIMEOUT has passed.
sbx_apt_get() {
  local start=$SECONDS busy errf rc
  busy=$(sbx_apt_busy)
  if [ -n "$busy" ]; then
    sbx_say "apt is busy (${busy%;}); apt-get waits up to ${SBX_APT_LOCK_TIMEOUT}s for its lock"
  fi
  errf=$(mktemp "${TMPDIR:-/tmp}/sbx-apt.XXXXXX")
  while :; do
    rc=0
    sbx_as_root env DEBIAN_FRONTEND=noninteractive \
      apt-get -o DPkg::Lock::Timeout="$SBX_APT_LOCK_TIMEOUT" "$@" 2> >(tee "$errf" >&2) || rc=$?
    wait $! 2>/dev/null || true # the tee of the process substitution
    if [ "$rc" -eq 0 ]; then
      rm -f "$errf"
      return 0
    fi
    if ! grep -qE 'Could not get lock|Unable to lock|Unable to acquire the dpkg frontend lock' "$errf" \
      || [ $((SECONDS - start)) -ge "$SBX_APT_LOCK_TIMEOUT" ]; then
      rm -f "$errf"
      return "$rc"
    fi
    sbx_say "apt-get $1: another apt or dpkg holds its lock ($(sbx_apt_busy | sed 's/;$//')); trying again in ${SBX_APT_RETRY_SLEEP}s (gives up after ${SBX_APT_LOCK_TIMEOUT}s)"
    sleep "$SBX_APT_RETRY_SLEEP"
  done
}

# Installs the packages of SBX_PACKAGES that dpkg does not list as installed;
# runs apt-get update only when something is missing.
sbx_install_packages() {
  local missing=() p status
  for p in "${SBX_PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    if [ "$status" != "install ok installed" ]; then
      missing+=("$p")
    fi
  done
  if [ "${#missing[@]}" -eq 0 ]; then
    return 0
  fi
  command -v apt-get >/dev/null 2>&1 || sbx_die "missing packages (${missing[*]}) and no apt-get: this script is for Debian 12"
  sbx_say "installing missing packages: ${missing[*]}"
  sbx_apt_get update -q || sbx_die "apt-get update failed"
  sbx_apt_get install -y -q --no-install-recommends "${missing[@]}" \
    || sbx_die "apt-get install ${missing[*]} failed"
}

# True when we are root or may use sudo.
sbx_can_root() {
  [ "$(id -u)" -eq 0 ] || command -v sudo >/dev/null 2>&1
}

# docker ARGS...: as ourselves when the socket lets us, else through sudo
# (never sudo when root).
sbx_docker() {
  if [ -z "${SBX_DOCKER_SUDO:-}" ]; then
    if [ "$(id -u)" -eq 0 ] || docker info >/dev/null 2>&1 || ! command -v sudo >/dev/null 2>&1; then
      SBX_DOCKER_SUDO=no
    else
      SBX_DOCKER_SUDO=yes
    fi
  fi
  if [ "$SBX_DOCKER_SUDO" = yes ]; then
    sudo docker "$@"
  else
    docker "$@"
  fi
}

# True when a Docker daemon answers on the default socket.
sbx_docker_answers() {
  if [ "$(id -u)" -eq 0 ]; then
    docker info >/dev/null 2>&1
  elif docker info >/dev/null 2>&1; then
    return 0
  else
    command -v sudo >/dev/null 2>&1 && sudo -n docker info >/dev/null 2>&1
  fi
}

# The gVisor runtime the worker looks for (worker_gvisor_runtime "runsc"),
# as dockerd must know it: Debian's runsc needs --network=none.
SBX_RUNSC=/usr/bin/runsc
SBX_RUNSC_ENTRY='{"path":"/usr/bin/runsc","runtimeArgs":["--network=none"]}'
SBX_RUNSC_DAEMON_JSON="{\"runtimes\":{\"runsc\":$SBX_RUNSC_ENTRY}}"
# One line, for when this script cannot register gVisor itself.
SBX_GVISOR_HOWTO="merge $SBX_RUNSC_DAEMON_JSON into /etc/docker/daemon.json, then \`kill -HUP \$(pidof dockerd)\` (as root), or run tools/run.sh as root"

# sbx_daemon_json_merge FILE: adds the runsc runtime to dockerd's config
# FILE, keeping every other key. Prints one word and returns:
#   created (0)  FILE was absent and now holds only the runtime
#   merged (0)   added; the old FILE is kept as FILE.sandbox-bak
#   present (0)  FILE already has this very runsc entry; not touched
#   conflict (3) FILE has another runsc entry; not touched
#   invalid (4)  FILE is not a JSON object (or its runtimes is not); not touched
# A reason follows the word on conflict and invalid. Writes through root
# when the folder is not ours to write.
sbx_daemon_json_merge() {
  local file=$1 dir runner=()
  dir=$(dirname "$file")
  if [ ! -w "$dir" ] && [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "invalid cannot write $dir (not root, no sudo)"; return 4; }
    runner=(sudo)
  fi
  "${runner[@]}" python3 - "$file" "$SBX_RUNSC_ENTRY" <<'PYEOF'
import json, os, shutil, sys, tempfile
path, entry = sys.argv[1], json.loads(sys.argv[2])

def write(doc):
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".daemon.json.", dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.chmod(tmp, 0o644)
    os.rename(tmp, path)

if not os.path.exists(path):
    write({"runtimes": {"runsc": entry}})
    print("created")
    sys.exit(0)
try:
    with open(path, encoding="utf-8") as f:
        text = f.read()
    doc = json.loads(text) if text.strip() else {}
except (OSError, ValueError) as e:
    print("invalid %s is not valid JSON (%s)" % (path, e))
    sys.exit(4)
if not isinstance(doc, dict):
    print("invalid %s is not a JSON object" % path)
    sys.exit(4)
runtimes = doc.get("runtimes", {})
if not isinstance(runtimes, dict):
    print("invalid %s: \"runtimes\" is not an object" % path)
    sys.exit(4)
old = runtimes.get("runsc")
if old is not None:
    if old == entry:
        print("present")
        sys.exit(0)
    print("conflict %s already has a runsc runtime %s (not %s)" % (path, json.dumps(old), json.dumps(entry)))
    sys.exit(3)
shutil.copy2(path, path + ".sandbox-bak")
runtimes["runsc"] = entry
doc["runtimes"] = runtimes
write(doc)
print("merged")
PYEOF
}

# sbx_gvisor_register FILE PID: registers runsc in dockerd's config FILE
# (sbx_daemon_json_merge) and makes dockerd PID reload it (SIGHUP: runtimes
# are reloadable). Returns 0 when done (or nothing was needed), 1 with one
# line on stderr saying why not and how to do it by hand.
sbx_gvisor_register() {
  local file=$1 pid=$2 out rc=0 word
  out=$(sbx_daemon_json_merge "$file") || rc=$?
  word=${out%% *}
  case "$word" in
    created) sbx_say "gVisor: registered runsc in $file (a new file)" ;;
    merged) sbx_say "gVisor: registered runsc in $file (the old one is kept as $file.sandbox-bak)" ;;
    present) ;;
    conflict | invalid)
      printf 'gVisor: not registered: %s; fix it, then %s\n' "${out#* }" "$SBX_GVISOR_HOWTO" >&2
      return 1 ;;
    *)
      printf 'gVisor: not registered: merging into %s failed (%s); %s\n' "$file" "${out:-exit $rc}" "$SBX_GVISOR_HOWTO" >&2
      return 1 ;;
  esac
  if [ -z "$pid" ] || ! sbx_signal "$pid" HUP; then
    # shellcheck disable=SC2016 # the command is for the reader to run
    printf 'gVisor: %s has runsc, but dockerd%s could not be told to reload it: run `kill -HUP $(pidof dockerd)` as root\n' \
      "$file" "${pid:+ (pid $pid)}" >&2
    return 1
  fi
  return 0
}

# sbx_signal PID SIG: kill -SIG PID, through sudo when it is not ours.
sbx_signal() {
  kill -"$2" "$1" 2>/dev/null && return 0
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo kill -"$2" "$1" 2>/dev/null
}

# The pid of the running dockerd ("" when none is found).
sbx_dockerd_pid() {
  local pid
  pid=$(pidof dockerd 2>/dev/null | awk '{ print $1 }')
  if [ -z "$pid" ] && [ -r /var/run/docker.pid ]; then
    pid=$(cat /var/run/docker.pid 2>/dev/null)
  fi
  printf '%s\n' "$pid"
}

# The config file dockerd PID reads: its --config-file, else /etc/docker/daemon.json.
sbx_dockerd_config_file() {
  local pid=$1 args a prev=
  args=$(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null || sudo -n cat "/proc/$pid/cmdline" 2>/dev/null | tr '\0' '\n') || true
  while IFS= read -r a; do
    case "$a" in
      --config-file=*) printf '%s\n' "${a#--config-file=}"; return 0 ;;
    esac
    if [ "$prev" = --config-file ]; then printf '%s\n' "$a"; return 0; fi
    prev=$a
  done <<<"$args"
  printf '%s\n' /etc/docker/daemon.json
}

# True when the answering dockerd lists a runtime named runsc.
sbx_docker_has_runsc() {
  case "$(sbx_docker info --format '{{json .Runtimes}}' 2>/dev/null)" in
    *'"runsc"'*) return 0 ;;
  esac
  return 1
}

# Makes the running dockerd offer gVisor (runtime runsc) when runsc is
# installed: registers it in the daemon's config file and reloads it. When
# it cannot (no root, a config it must not touch, a dockerd it cannot
# signal), says in one line how to do it. Never fails the caller.
sbx_ensure_gvisor() {
  local pid file i
  if sbx_docker_has_runsc; then
    return 0
  fi
  if [ ! -x "$SBX_RUNSC" ]; then
    printf 'gVisor: off: %s is missing (apt-get install runsc), then %s\n' "$SBX_RUNSC" "$SBX_GVISOR_HOWTO" >&2
    return 0
  fi
  if ! sbx_can_root; then
    printf 'gVisor: off: dockerd has no runsc runtime and registering it needs root (no sudo here): %s\n' "$SBX_GVISOR_HOWTO" >&2
    return 0
  fi
  pid=$(sbx_dockerd_pid)
  if [ -z "$pid" ]; then
    printf 'gVisor: off: dockerd has no runsc runtime and its pid is unknown (no pidof dockerd, no /var/run/docker.pid): %s\n' "$SBX_GVISOR_HOWTO" >&2
    return 0
  fi
  file=$(sbx_dockerd_config_file "$pid")
  sbx_say "gVisor: dockerd (pid $pid) has no runsc runtime; registering it in $file"
  sbx_gvisor_register "$file" "$pid" || return 0
  for i in $(seq 1 20); do
    if sbx_docker_has_runsc; then
      sbx_say "gVisor: dockerd offers runsc (the worker will offer isolation class gvisor)"
      return 0
    fi
    sleep 0.5
  done
  printf 'gVisor: off: dockerd (pid %s) reloaded %s but lists no runsc runtime (see its log): %s\n' "$pid" "$file" "$SBX_GVISOR_HOWTO" >&2
  return 0
}

# Starts dockerd in the background (it keeps running after this script) when
# no daemon answers; waits up to 60 s for it. $1: log file.
sbx_ensure_dockerd() {
  local log=$1 i
  if sbx_docker_answers; then
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 || sbx_die "dockerd not found (apt-get install docker.io)"
  sbx_can_root || sbx_die "no Docker daemon answers and starting one needs root: run this script as root or install sudo"
  # Register gVisor (Debian's runsc needs --network=none) so the worker can
  # offer the gvisor class: in a config of our own, a copy of the host's
  # /etc/docker/daemon.json when there is one (--config-file replaces it).
  local args=() cfg out rc
  if [ -x "$SBX_RUNSC" ]; then
    cfg="${TMPDIR:-/tmp}/sandbox-dockerd.$(id -un).json"
    rm -f "$cfg" "$cfg.sandbox-bak"
    if [ -e /etc/docker/daemon.json ]; then
      sbx_as_root cat /etc/docker/daemon.json >"$cfg" || sbx_die "cannot read /etc/docker/daemon.json"
    fi
    rc=0
    out=$(sbx_daemon_json_merge "$cfg") || rc=$?
    rm -f "$cfg.sandbox-bak"
    if [ "$rc" -eq 0 ]; then
      args=(--config-file "$cfg")
    else
      # dockerd reads /etc/docker/daemon.json itself; a conflicting runsc
      # there is registered as it is
      printf 'gVisor: not registered: %s; %s\n' "${out#* }" "$SBX_GVISOR_HOWTO" >&2
      rm -f "$cfg"
    fi
  fi
  sbx_say "no Docker daemon answers; starting dockerd ${args[*]} (log: $log)"
  if [ "$(id -u)" -eq 0 ]; then
    setsid dockerd "${args[@]}" >>"$log" 2>&1 </dev/null &
  else
    # shellcheck disable=SC2024 # the log is ours, dockerd runs as root
    sudo -b setsid dockerd "${args[@]}" >>"$log" 2>&1 </dev/null
  fi
  for i in $(seq 1 60); do
    if sbx_docker_answers; then
      sbx_say "dockerd is up after ${i}s"
      return 0
    fi
    sleep 1
  done
  tail -n 20 "$log" >&2 || true
  sbx_die "dockerd did not answer within 60 s (log: $log)"
}

# The version of sbx_base_image's recipe, kept as the image's label
# dev.sandbox.image-recipe: an image of another version is rebuilt.
SBX_IMAGE_RECIPE=1
SBX_BASE_IMAGE=sandbox/busybox:latest

# sbx_base_image [NAME]: makes NAME (default sandbox/busybox:latest, the
# controller's default_image) from Debian's static busybox with `docker
# import`, no registry needed: every applet linked in /bin, /tmp (1777),
# /etc/passwd and /etc/group (root, nobody), /root, mount points /proc /sys
# /dev, CMD /bin/sh. Kept when an image of this recipe exists (seconds to
# build otherwise). Returns non-zero with a message on failure.
sbx_base_image() {
  local name=${1:-$SBX_BASE_IMAGE} have root applet rc=0
  have=$(sbx_docker image inspect --format '{{ index .Config.Labels "dev.sandbox.image-recipe" }}' "$name" 2>/dev/null || true)
  if [ "$have" = "$SBX_IMAGE_RECIPE" ]; then
    return 0
  fi
  if [ ! -x /bin/busybox ]; then
    sbx_say "cannot build $name: /bin/busybox is missing (apt-get install busybox-static)"
    return 1
  fi
  if ldd /bin/busybox >/dev/null 2>&1; then
    sbx_say "cannot build $name: /bin/busybox is not statically linked (apt-get install busybox-static)"
    return 1
  fi
  if [ -n "$have" ] || sbx_docker image inspect "$name" >/dev/null 2>&1; then
    sbx_say "rebuilding $name (its recipe is ${have:-unlabelled}, this one is $SBX_IMAGE_RECIPE)"
  fi
  root=$(mktemp -d "${TMPDIR:-/tmp}/sbx-image.XXXXXX")
  mkdir -p "$root/bin" "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/root" "$root/tmp"
  chmod 755 "$root" "$root/bin" "$root/etc" "$root/proc" "$root/sys" "$root/dev"
  chmod 700 "$root/root"
  chmod 1777 "$root/tmp"
  cp /bin/busybox "$root/bin/busybox"
  chmod 755 "$root/bin/busybox"
  for applet in $(/bin/busybox --list); do
    # the list names busybox itself: linking it would replace the binary
    # with a link to itself
    case "$applet" in busybox | */*) continue ;; esac
    ln -s busybox "$root/bin/$applet"
  done
  mkdir -p "$root/usr/bin"
  chmod 755 "$root/usr" "$root/usr/bin"
  ln -s ../../bin/busybox "$root/usr/bin/env" # for #!/usr/bin/env scripts
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  chmod 644 "$root/etc/passwd" "$root/etc/group"
  tar -C "$root" --numeric-owner --owner=0 --group=0 -c . \
    | sbx_docker import \
      --change 'CMD ["/bin/sh"]' \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change "LABEL dev.sandbox.image-recipe=$SBX_IMAGE_RECIPE" \
      --message "sandbox base image (tools/lib.sh sbx_base_image, recipe $SBX_IMAGE_RECIPE) from Debian's busybox-static" \
      - "$name" >/dev/null || rc=$?
  rm -rf "$root"
  if [ "$rc" -ne 0 ]; then
    sbx_say "docker import of $name failed"
    return 1
  fi
  sbx_say "built $name from /bin/busybox (recipe $SBX_IMAGE_RECIPE)"
}

# meson setup DIR [options] unless DIR is already configured, then compile.
sbx_build() {
  local dir=$1
  shift
  if [ ! -f "$dir/meson-private/coredata.dat" ]; then
    sbx_say "meson setup $dir $*"
    meson setup "$dir" "$@" || sbx_die "meson setup $dir failed"
  fi
  sbx_say "meson compile -C $dir"
  meson compile -C "$dir" || sbx_die "build failed (meson compile -C $dir)"
}
