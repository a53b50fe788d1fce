# Shared by tools/run.sh and tools/test.sh: installs missing Debian packages,
# starts dockerd when no daemon answers, configures and builds with meson.
# shellcheck shell=bash

# Everything Sandbox needs to build, run and test on Debian 12 (runsc: the
# gVisor runtime the worker offers as isolation class gvisor when dockerd
# has it registered).
SBX_PACKAGES=(
  build-essential meson ninja-build pkg-config
  libpq-dev libevent-dev libjson-c-dev libcurl4-openssl-dev libsodium-dev check
  postgresql-15 docker.io busybox-static curl runsc
  libnats-dev nats-server
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
  sbx_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q \
    || sbx_die "apt-get update failed"
  sbx_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" \
    || sbx_die "apt-get install ${missing[*]} failed"
}

# True when a Docker daemon answers on the default socket.
sbx_docker_answers() {
  if [ "$(id -u)" -eq 0 ]; then
    docker info >/dev/null 2>&1
  else
    docker info >/dev/null 2>&1 || sudo -n docker info >/dev/null 2>&1
  fi
}

# Starts dockerd in the background (it keeps running after this script) when
# no daemon answers; waits up to 60 s for it. $1: log file.
sbx_ensure_dockerd() {
  local log=$1 i
  if sbx_docker_answers; then
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 || sbx_die "dockerd not found (apt-get install docker.io)"
  # Register gVisor (Debian's runsc needs --network=none) so the worker can
  # offer the gvisor class; only when the host has no daemon.json of its own,
  # which --config-file would replace.
  local args=() cfg
  if [ -x /usr/bin/runsc ] && [ ! -e /etc/docker/daemon.json ]; then
    cfg="${TMPDIR:-/tmp}/sandbox-dockerd.$(id -un).json"
    printf '%s\n' '{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none"]}}}' >"$cfg"
    args=(--config-file "$cfg")
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
