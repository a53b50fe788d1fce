# Shared helpers of the integration tests: the environment run.sh sets up once
# (PostgreSQL, dockerd, controller, worker) and the assertions tests use.
# shellcheck shell=bash

# tools/lib.sh: the base image builder (sbx_base_image) run.sh uses too
# shellcheck source=tools/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/../../tools/lib.sh"
# The image the tests run: the server's default_image, built from Debian's
# busybox-static by sbx_base_image (no registry needed).
ITEST_IMAGE=${ITEST_IMAGE:-$SBX_BASE_IMAGE}
ITEST_PGUSER=postgres
# The tests start python3 many times (itest_json). A version manager's shim
# first in PATH (pyenv's is a shell script) costs about 0.3 s a start, ten
# times Debian's: enough to let a 2-4 s lease expire between two steps of a
# test. Use Debian's python3 (meson's dependency, so always installed).
if [ -x /usr/bin/python3 ]; then
  python3() { /usr/bin/python3 "$@"; }
fi
# Controllers a test starts itself serve routes on a port of their own
# (the default 127.0.0.1:8081 would clash); flags still win.
export SANDBOX_ROUTE_LISTEN=${SANDBOX_ROUTE_LISTEN:-127.0.0.1:0}

# ---------------------------------------------------------------- messages

itest_log() { printf '[itest %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# Fails the current test (or the set-up) with a message naming the caller.
fail() {
  local where="${BASH_SOURCE[1]##*/}:${BASH_LINENO[0]}"
  if [ "${FUNCNAME[1]:-}" = assert_eq ] || [ "${FUNCNAME[1]:-}" = assert_contains ] \
    || [ "${FUNCNAME[1]:-}" = assert_exit ] || [ "${FUNCNAME[1]:-}" = assert_match ] \
    || [ "${FUNCNAME[1]:-}" = assert_not_contains ] || [ "${FUNCNAME[1]:-}" = itest_wait_until ]; then
    where="${BASH_SOURCE[2]##*/}:${BASH_LINENO[1]}"
  fi
  printf 'FAIL at %s: %s\n' "$where" "$*" >&2
  # also on disk: a failure inside $(...) or under an EXIT trap that loses
  # the status still fails the test (run.sh and itest_end read it)
  if [ -n "${ITEST_FAIL_MARKER:-}" ]; then
    printf 'FAIL at %s: %s\n' "$where" "$*" >>"$ITEST_FAIL_MARKER" || true
  fi
  exit 1
}

# ---------------------------------------------------------------- assertions

# assert_eq EXPECTED ACTUAL [WHAT]
assert_eq() {
  if [ "$1" != "$2" ]; then
    fail "${3:-value}: expected [$1], got [$2]"
  fi
}

# assert_contains HAYSTACK NEEDLE [WHAT]
assert_contains() {
  case "$1" in
    *"$2"*) ;;
    *) fail "${3:-text}: expected it to contain [$2], got [$1]" ;;
  esac
}

# assert_not_contains HAYSTACK NEEDLE [WHAT]
assert_not_contains() {
  case "$1" in
    *"$2"*) fail "${3:-text}: expected it NOT to contain [$2], got [$1]" ;;
    *) ;;
  esac
}

# assert_match STRING ERE [WHAT]
assert_match() {
  if ! [[ $1 =~ $2 ]]; then
    fail "${3:-value}: expected to match /$2/, got [$1]"
  fi
}

# assert_exit CODE CMD...: runs CMD, keeps its stdout in ITEST_OUT and its
# stderr in ITEST_ERR (also echoed to our stderr), checks the exit code.
assert_exit() {
  local want=$1 got=0 errf
  shift
  errf=$(mktemp "${ITEST_TMP:-/tmp}/err.XXXXXX")
  ITEST_OUT=$("$@" 2>"$errf") || got=$?
  ITEST_ERR=$(cat "$errf")
  rm -f "$errf"
  if [ -n "$ITEST_ERR" ]; then
    printf '  (stderr of %s: %s)\n' "$1" "$ITEST_ERR" >&2
  fi
  if [ "$got" != "$want" ]; then
    fail "exit code of [$*]: expected $want, got $got; stdout=[$ITEST_OUT] stderr=[$ITEST_ERR]"
  fi
}

# itest_wait_until SECONDS WHAT CMD...: retries CMD every 0.5 s until it succeeds.
itest_wait_until() {
  local secs=$1 what=$2 deadline
  shift 2
  deadline=$(($(date +%s) + secs))
  until "$@" >/dev/null 2>&1; do
    if [ "$(date +%s)" -ge "$deadline" ]; then
      fail "timed out after ${secs}s waiting for $what"
    fi
    sleep 0.5
  done
}

# ---------------------------------------------------------------- JSON and HTTP

# itest_json JSON PATH [PATH...]: prints the value at the first dotted PATH
# that exists (a.b.0.c); strings raw, true/false/null as in JSON, objects and
# arrays as JSON. Exit 1 when no path exists or JSON is invalid.
itest_json() {
  local json=$1
  shift
  if [ -n "${ITEST_HELPER:-}" ]; then
    "$ITEST_HELPER" json "$json" "$@"
    return
  fi
  python3 -c '
import json, sys
try:
    doc = json.loads(sys.argv[1])
except ValueError as e:
    sys.stderr.write("itest_json: invalid JSON: %s: %r\n" % (e, sys.argv[1][:300]))
    sys.exit(1)
for path in sys.argv[2:]:
    cur, ok = doc, True
    for part in path.split(".") if path else []:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            ok = False
            break
    if ok:
        if isinstance(cur, str):
            print(cur)
        else:
            print(json.dumps(cur))
        sys.exit(0)
sys.exit(1)
' "$json" "$@"
}

# itest_http METHOD PATH TOKEN [BODY]: calls the controller at SANDBOX_URL;
# BODY is a JSON string or @FILE. Sets HTTP_STATUS and HTTP_BODY. An empty
# TOKEN sends no Authorization header.
itest_http() {
  local method=$1 path=$2 token=$3 body=${4-} out args
  out=$(mktemp "${ITEST_TMP:-/tmp}/http.XXXXXX")
  args=(-s -o "$out" -w '%{http_code}' -X "$method" --max-time 60 -H 'Expect:')
  if [ -n "$token" ]; then
    args+=(-H "Authorization: Bearer $token")
  fi
  if [ -n "$body" ]; then
    args+=(-H 'Content-Type: application/json' --data-binary "$body")
  fi
  HTTP_STATUS=$(curl "${args[@]}" "$SANDBOX_URL$path") || HTTP_STATUS=${HTTP_STATUS:-000}
  HTTP_BODY=$(cat "$out")
  rm -f "$out"
}

# assert_http STATUS ERROR_CODE WHAT: checks the last itest_http answer; an
# ERROR_CODE other than "" also pins {"error":{"code":ERROR_CODE,"message":…}}.
assert_http() {
  local want=$1 code=$2 what=$3 got_code msg
  if [ "$HTTP_STATUS" != "$want" ]; then
    fail "$what: expected HTTP $want, got $HTTP_STATUS; body=[${HTTP_BODY:0:400}]"
  fi
  if [ -n "$code" ]; then
    got_code=$(itest_json "$HTTP_BODY" error.code) || fail "$what: no error.code in body [${HTTP_BODY:0:400}]"
    msg=$(itest_json "$HTTP_BODY" error.message) || fail "$what: no error.message in body [${HTTP_BODY:0:400}]"
    if [ "$code" != "*" ] && [ "$got_code" != "$code" ]; then
      fail "$what: expected error code $code, got $got_code (message: $msg)"
    fi
    if [ -z "$msg" ]; then
      fail "$what: empty error.message"
    fi
  fi
}

# ---------------------------------------------------------------- ports, processes

itest_free_port() {
  if [ -n "${ITEST_HELPER:-}" ]; then
    "$ITEST_HELPER" free-port
    return
  fi
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# itest_stop_pid PID NAME [SECONDS]: SIGTERM, wait, SIGKILL. Returns the
# process's exit status when it is our child (else 0), 124 if it had to be killed.
itest_stop_pid() {
  local pid=$1 name=$2 secs=${3:-30} i rc=0
  if ! kill -0 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || rc=$?
    return "$rc"
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < secs * 10; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    itest_log "$name (pid $pid) did not exit within ${secs}s of SIGTERM; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 124
  fi
  wait "$pid" 2>/dev/null || rc=$?
  return "$rc"
}

# itest_leftovers TRACE_FILE [KEEP_PID...]: the live processes (zombies
# aside) whose environment carries ITEST_TRACE_FILE=TRACE_FILE: started by
# that test, directly or through others, and running still; not a KEEP_PID
# or a child of one (a shared daemon the test restarted on purpose). One
# line each: PID ARGS. (A process that cleared its environment is not seen.)
itest_leftovers() {
  local trace=$1 f pid st ppid
  shift
  for f in $(env -u ITEST_TRACE_FILE grep -lzxF "ITEST_TRACE_FILE=$trace" /proc/[0-9]*/environ 2>/dev/null); do
    pid=${f#/proc/}
    pid=${pid%/environ}
    [ "$pid" != "$$" ] && [ "$pid" != "${BASHPID:-}" ] || continue
    st=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$pid/status" 2>/dev/null) || continue
    [ -n "$st" ] && [ "$st" != Z ] || continue
    ppid=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$pid/status" 2>/dev/null)
    case " $* " in *" $pid "* | *" $ppid "*) continue ;; esac
    # (a token among the arguments is not printed)
    printf '%s %s\n' "$pid" "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed 's/sbt_[A-Za-z0-9_-]*/sbt_…/g' | cut -c1-160)"
  done
}

# itest_make_pki DIR: test certificates in DIR: ca.pem/ca.key (a CA),
# server.pem/server.key (signed by it, for 127.0.0.1 and localhost) and
# other.pem/other.key (another CA, which must not be trusted for it).
itest_make_pki() {
  local d=$1 n
  mkdir -p "$d"
  for n in ca other; do
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=itest $n" -keyout "$d/$n.key" \
      -out "$d/$n.pem" -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
      >/dev/null 2>&1
  done
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" -keyout "$d/server.key" -out "$d/server.csr" \
    >/dev/null 2>&1
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$d/server.ext"
  openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -days 2 \
    -extfile "$d/server.ext" -out "$d/server.pem" >/dev/null 2>&1
  chmod 600 "$d"/*.key
  [ -s "$d/server.pem" ] && [ -s "$d/other.pem" ] || fail "openssl could not make the test certificates in $d"
}

# itest_npm_install DIR WHAT: npm packages for a test (WHAT names them in
# messages) in DIR, with `npm ci` from its lock file (`npm install` without
# one), when node_modules is missing or older than package.json or the lock
# (npm writes node_modules/.package-lock.json on every install). Returns 1
# with ITEST_NPM_ERROR set to the reason: no node or npm, node older than
# 18, an unreachable registry, or npm's failure (its log's tail is shown).
# shellcheck disable=SC2034 # ITEST_NPM_ERROR is read by the caller
itest_npm_install() {
  local dir=$1 what=$2 stamp log cmd
  ITEST_NPM_ERROR=
  if ! command -v node >/dev/null 2>&1; then
    ITEST_NPM_ERROR="node is not installed: apt-get install nodejs npm (tools/test.sh installs them when node is missing)"
    return 1
  fi
  if ! command -v npm >/dev/null 2>&1; then
    ITEST_NPM_ERROR="npm is not installed next to $(command -v node) ($(node --version)): install npm"
    return 1
  fi
  if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 18 ]; then
    ITEST_NPM_ERROR="node $(node --version) is too old: $what needs Node.js 18 or later"
    return 1
  fi
  stamp="$dir/node_modules/.package-lock.json"
  if [ -f "$stamp" ] && ! [ "$dir/package.json" -nt "$stamp" ] &&
    ! { [ -f "$dir/package-lock.json" ] && [ "$dir/package-lock.json" -nt "$stamp" ]; }; then
    return 0
  fi
  log="$ITEST_TMP/npm-$(basename "$dir")-$$.log"
  if [ -f "$dir/package-lock.json" ]; then cmd=(npm ci); else cmd=(npm install); fi
  itest_log "installing $what: ${cmd[*]} in $dir (log: $log)"
  if ! (cd "$dir" && timeout 180 "${cmd[@]}" --no-audit --no-fund >"$log" 2>&1); then
    itest_log_tail "$log" 0 30
    if grep -Eq 'ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNREFUSED|ECONNRESET|network' "$log"; then
      ITEST_NPM_ERROR="${cmd[*]} in $dir failed: the npm registry ($(npm config get registry)) is unreachable"
    else
      ITEST_NPM_ERROR="${cmd[*]} in $dir failed (log above, $log)"
    fi
    return 1
  fi
}

# Prints the tail of a log file, from byte offset $2 on when given.
itest_log_tail() {
  local file=$1 from=${2:-0} lines=${3:-60}
  if [ -f "$file" ]; then
    printf -- '----- %s (last %s lines) -----\n' "$file" "$lines" >&2
    tail -c +"$((from + 1))" "$file" | tail -n "$lines" >&2
    printf -- '----- end of %s -----\n' "$file" >&2
  fi
}

itest_file_size() { stat -c %s "$1" 2>/dev/null || echo 0; }

# Runs a command as the PostgreSQL system user when we are root.
itest_as_pg() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u "$ITEST_PGUSER" -- "$@"
  else
    "$@"
  fi
}

# ---------------------------------------------------------------- environment (run.sh)

# itest_init BUILD: makes the run's temporary folder and exports the paths.
itest_init() {
  ITEST_BUILD=$(cd "$1" && pwd)
  export ITEST_BUILD ITEST_IMAGE
  export SANDBOXD="$ITEST_BUILD/tools/sandboxd"
  export SANDBOX_CLI="$ITEST_BUILD/tools/sandbox"
  ITEST_TMP=$(mktemp -d /tmp/sbx-itest.XXXXXX)
  # the postgres user must reach the cluster and embedded data dirs below it
  chmod 755 "$ITEST_TMP"
  export ITEST_TMP
  ITEST_PIDS=()
  ITEST_DOCKERD_STARTED=0
  ITEST_PG_DATA=
  itest_build_helper
}

# itest_build_helper: compiles tests/integration/itest_helper.c once per run
# (no sanitizers: it starts in a millisecond) and exports ITEST_HELPER; the
# JSON and port helpers below use it, and python3 without it.
itest_build_helper() {
  local src out
  src="$(dirname "${BASH_SOURCE[0]}")/itest_helper.c"
  out="$ITEST_TMP/itest-helper"
  # shellcheck disable=SC2046 # pkg-config's flags are words
  if cc -O2 -std=c17 -D_GNU_SOURCE -o "$out" "$src" $(pkg-config --cflags --libs json-c) -lm 2>"$out.log"; then
    export ITEST_HELPER="$out"
  else
    itest_log "itest-helper did not compile (the tests use python3 instead): $(head -c 300 "$out.log")"
  fi
}

# The gVisor runtime as the tests expect dockerd to know it.
ITEST_RUNSC=/usr/bin/runsc
ITEST_DAEMON_JSON='{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":["--network=none"]}}}'

# Starts dockerd (pid file and log in ITEST_TMP) when `docker info` fails;
# when runsc is installed, with a daemon.json of our own registering it as
# runtime "runsc" (gVisor without networking). A dockerd that already runs
# is never touched.
itest_ensure_docker() {
  local i args
  if docker info >/dev/null 2>&1; then
    return 0
  fi
  command -v dockerd >/dev/null 2>&1 || { itest_log "dockerd is not installed (apt-get install docker.io)"; return 1; }
  [ "$(id -u)" -eq 0 ] || { itest_log "no Docker daemon answers and only root can start one"; return 1; }
  args=(--pidfile "$ITEST_TMP/dockerd.pid")
  if [ -x "$ITEST_RUNSC" ]; then
    printf '%s\n' "$ITEST_DAEMON_JSON" >"$ITEST_TMP/daemon.json"
    args+=(--config-file "$ITEST_TMP/daemon.json")
  else
    itest_log "$ITEST_RUNSC is missing (apt-get install runsc): dockerd starts without gVisor"
  fi
  itest_log "no Docker daemon answers; starting dockerd ${args[*]} (log: $ITEST_TMP/dockerd.log)"
  setsid dockerd "${args[@]}" >"$ITEST_TMP/dockerd.log" 2>&1 </dev/null &
  ITEST_DOCKERD_PID=$!
  ITEST_DOCKERD_STARTED=1
  itest_await "$ITEST_DOCKERD_PID" "$ITEST_TMP/dockerd.log" 30 "dockerd exited before answering" \
    "dockerd did not answer within 60 s" itest_docker_answers || return 1
  itest_log "dockerd is up"
}

# For a test that needs gVisor: fails, saying how to fix it, unless the
# running dockerd has a runtime named runsc.
itest_require_gvisor() {
  local runtimes
  runtimes=$(docker info --format '{{json .Runtimes}}' 2>/dev/null || true)
  case "$runtimes" in
    *'"runsc"'*) return 0 ;;
  esac
  [ -x "$ITEST_RUNSC" ] || fail "gVisor is not installed: apt-get install runsc (tools/test.sh installs it)"
  fail "the running dockerd has no runtime named runsc (it has: ${runtimes:-nothing}); this test does not" \
    "restart a dockerd it did not start. Fix: add $ITEST_DAEMON_JSON to /etc/docker/daemon.json and restart" \
    "dockerd, or stop dockerd so tests/integration/run.sh starts its own with runsc registered"
}

# Builds ITEST_IMAGE from Debian's static busybox with `docker import`
# (tools/lib.sh sbx_base_image; no registry needed). Kept when current.
itest_busybox_image() {
  sbx_base_image "$ITEST_IMAGE" || { itest_log "cannot build $ITEST_IMAGE (see above)"; return 1; }
}

# Starts the run's PostgreSQL cluster (itest_pg_cluster in ITEST_TMP/pg,
# ITEST_PG_DATA: stopped by itest_cleanup).
itest_start_postgres() {
  ITEST_PG_DATA="$ITEST_TMP/pg/data"
  itest_pg_cluster "$ITEST_TMP/pg"
}

# itest_pg_cluster DIR: starts a private PostgreSQL cluster in DIR (as the
# postgres user when root; DIR's parent must let it in) on a free 127.0.0.1
# port with trust auth; creates database sandbox and exports DATABASE_URL.
# Its caller stops it: itest_as_pg "$ITEST_PGBIN/pg_ctl" stop -D DIR/data.
itest_pg_cluster() {
  local bin port dir=$1
  bin=$(find /usr/lib/postgresql -maxdepth 3 -path '*/bin/initdb' 2>/dev/null | sort -V | tail -n 1)
  [ -n "$bin" ] || { itest_log "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; apt-get install postgresql-15)"; return 1; }
  ITEST_PGBIN=$(dirname "$bin")
  export ITEST_PGBIN
  if [ "$(id -u)" -eq 0 ] && ! id "$ITEST_PGUSER" >/dev/null 2>&1; then
    itest_log "running as root but system user $ITEST_PGUSER does not exist (initdb refuses root)"
    return 1
  fi
  mkdir -p "$dir/run"
  if [ "$(id -u)" -eq 0 ]; then
    chown -R "$ITEST_PGUSER:" "$dir"
  fi
  itest_as_pg "$ITEST_PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust --no-locale -E UTF8 \
    >"$dir/initdb.log" 2>&1 || { itest_log_tail "$dir/initdb.log" 0 20; itest_log "initdb failed"; return 1; }
  port=$(itest_free_port)
  cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/run'
max_connections = 300
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  itest_as_pg "$ITEST_PGBIN/pg_ctl" start -D "$dir/data" -l "$dir/postgres.log" -w -t 60 >/dev/null \
    || { itest_log_tail "$dir/postgres.log" 0 20; itest_log "pg_ctl start failed"; return 1; }
  "$ITEST_PGBIN/psql" -X -q -h 127.0.0.1 -p "$port" -U postgres -d postgres -c 'CREATE DATABASE sandbox' \
    || { itest_log "CREATE DATABASE sandbox failed"; return 1; }
  export DATABASE_URL="postgresql://postgres@127.0.0.1:$port/sandbox"
  itest_log "PostgreSQL $(basename "$(dirname "$ITEST_PGBIN")") on 127.0.0.1:$port ($dir)"
}

# itest_token TENANT ROLE [NAME]: a new token, secret on stdout (also kept
# in $ITEST_TMP/secrets.txt: run.sh checks that no daemon log holds it).
itest_token() {
  local args=(token create --database-url "$DATABASE_URL" --tenant "$1" --role "$2") tok
  if [ -n "${3:-}" ]; then
    args+=(--name "$3")
  fi
  # a one-shot admin command, called by almost every test: as for sandbox()
  # below, without LeakSanitizer's check at exit (the daemons keep it)
  if [ -n "${ASAN_OPTIONS:-}" ]; then
    tok=$(ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" "$SANDBOXD" "${args[@]}") || return
  else
    tok=$("$SANDBOXD" "${args[@]}") || return
  fi
  if [ -n "${ITEST_TMP:-}" ]; then printf '%s\n' "$tok" >>"$ITEST_TMP/secrets.txt"; fi
  printf '%s\n' "$tok"
}

# itest_await PID LOG LINES DIED TIMEOUT CMD...: runs CMD every 0.5 s for up to
# 60 s and returns 0 once it succeeds; otherwise shows the last LINES lines of
# LOG, logs DIED (PID exited first) or TIMEOUT (time ran out) and returns 1.
itest_await() {
  local pid=$1 log=$2 lines=$3 died=$4 timeout=$5 i
  shift 5
  for ((i = 0; i < 120; i++)); do
    if "$@"; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      itest_log_tail "$log" 0 "$lines"
      itest_log "$died"
      return 1
    fi
    sleep 0.5
  done
  itest_log_tail "$log" 0 "$lines"
  itest_log "$timeout"
  return 1
}

itest_docker_answers() { docker info >/dev/null 2>&1; }

# itest_wait_healthz URL PID NAME LOG: waits up to 60 s for GET URL/healthz = 200.
itest_wait_healthz() {
  local url=$1 pid=$2 name=$3 log=$4 i code rc
  for ((i = 0; i < 120; i++)); do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$url/healthz" || true)
    if [ "$code" = 200 ]; then
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      rc=0
      wait "$pid" 2>/dev/null || rc=$?
      itest_log_tail "$log" 0 40
      itest_log "$name exited (status $rc) before GET /healthz answered 200"
      return 1
    fi
    sleep 0.5
  done
  itest_log_tail "$log" 0 40
  itest_log "$name: GET $url/healthz did not answer 200 within 60 s (last: $code)"
  return 1
}

# itest_start_controller [TAG]: runs `sandboxd migrate` on DATABASE_URL,
# starts a controller on a free port, exports SANDBOX_URL, SANDBOX_ROUTE_URL,
# ITEST_CONTROLLER_LOG (controller$TAG.log), ITEST_CONTROLLER_PID and
# ITEST_ADMIN_TOKEN (tenant itest-admin).
itest_start_controller() {
  local port rport tag=${1:-}
  [ -x "$SANDBOXD" ] || { itest_log "$SANDBOXD is not built"; return 1; }
  "$SANDBOXD" migrate --database-url "$DATABASE_URL" >"$ITEST_TMP/migrate$tag.log" 2>&1 \
    || { itest_log_tail "$ITEST_TMP/migrate$tag.log" 0 20; itest_log "sandboxd migrate failed"; return 1; }
  port=$(itest_free_port)
  rport=$(itest_free_port)
  export ITEST_CONTROLLER_LOG="$ITEST_TMP/controller$tag.log"
  export SANDBOX_URL="http://127.0.0.1:$port"
  export SANDBOX_ROUTE_URL="http://127.0.0.1:$rport"
  "$SANDBOXD" controller --database-url "$DATABASE_URL" --listen "127.0.0.1:$port" --route-listen "127.0.0.1:$rport" \
    >>"$ITEST_CONTROLLER_LOG" 2>&1 </dev/null &
  export ITEST_CONTROLLER_PID=$!
  ITEST_PIDS+=("$ITEST_CONTROLLER_PID")
  itest_wait_healthz "$SANDBOX_URL" "$ITEST_CONTROLLER_PID" controller "$ITEST_CONTROLLER_LOG" || return 1
  ITEST_ADMIN_TOKEN=$(itest_token itest-admin admin itest-admin) || { itest_log "sandboxd token create failed"; return 1; }
  export ITEST_ADMIN_TOKEN
  itest_log "controller on $SANDBOX_URL (pid $ITEST_CONTROLLER_PID, log $ITEST_CONTROLLER_LOG)"
}

# True when GET /v1/workers lists worker $1 as ready.
itest_worker_ready() {
  local body
  body=$(curl -s --max-time 5 -H "Authorization: Bearer $ITEST_ADMIN_TOKEN" "$SANDBOX_URL/v1/workers") || return 1
  if [ -n "${ITEST_HELPER:-}" ]; then
    [ "$("$ITEST_HELPER" json-find "$body" workers name "$1" state 2>/dev/null)" = ready ]
    return
  fi
  python3 -c '
import json, sys
doc = json.loads(sys.argv[1])
ok = any(w.get("name") == sys.argv[2] and w.get("state") == "ready" for w in doc.get("workers", []))
sys.exit(0 if ok else 1)
' "$body" "$1" 2>/dev/null
}

# itest_start_worker [TAG [ENV=VALUE...]]: starts worker itest-worker$TAG
# (log worker$TAG.log, settings ENV) against SANDBOX_URL with generous
# advertised capacity (so the tests' 4 GiB sandboxes fit on any host); waits
# until it is registered ready. Exports ITEST_WORKER_NAME, ITEST_WORKER_LOG,
# ITEST_WORKER_PID and ITEST_WORKER_TOKEN.
itest_start_worker() {
  local port i tag=${1:-}
  shift $(($# > 0 ? 1 : 0))
  export ITEST_WORKER_NAME="itest-worker$tag"
  export ITEST_WORKER_LOG="$ITEST_TMP/worker$tag.log"
  ITEST_WORKER_TOKEN=$(itest_token itest-workers worker "$ITEST_WORKER_NAME") \
    || { itest_log "sandboxd token create --role worker failed"; return 1; }
  export ITEST_WORKER_TOKEN
  port=$(itest_free_port)
  env SANDBOX_WORKER_TOKEN="$ITEST_WORKER_TOKEN" SANDBOX_WORKER_CPU_MILLIS=64000 SANDBOX_WORKER_MEMORY_MIB=262144 \
    SANDBOX_WORKER_VOLUME_DIR="$ITEST_TMP/volumes$tag" "$@" \
    "$SANDBOXD" worker --controller-url "$SANDBOX_URL" --listen "127.0.0.1:$port" \
    --worker-name "$ITEST_WORKER_NAME" --docker-socket /var/run/docker.sock \
    >>"$ITEST_WORKER_LOG" 2>&1 </dev/null &
  export ITEST_WORKER_PID=$!
  ITEST_PIDS+=("$ITEST_WORKER_PID")
  itest_await "$ITEST_WORKER_PID" "$ITEST_WORKER_LOG" 40 "worker exited before registering" \
    "worker $ITEST_WORKER_NAME not listed ready by GET /v1/workers within 60 s" \
    itest_worker_ready "$ITEST_WORKER_NAME" || return 1
  itest_log "worker $ITEST_WORKER_NAME ready (pid $ITEST_WORKER_PID, log $ITEST_WORKER_LOG)"
}

# Removes the containers of every sandbox the run's databases know:
# every database of the run's shared environments: ITEST_DBS (run.sh), else
# DATABASE_URL.
itest_remove_run_containers() {
  local id cid url
  local -A want=()
  local -a gone=()
  for url in "${ITEST_DBS[@]:-${DATABASE_URL:-}}"; do
    [ -n "$url" ] || continue
    for id in $("$ITEST_PGBIN/psql" -X -q -At "$url" -c 'SELECT id FROM sandboxes' 2>/dev/null || true); do
      want[$id]=1
    done
  done
  # one listing of the labelled containers, not one per sandbox of the run
  # (hundreds: a docker ps each took half a minute)
  while read -r cid id; do
    [ -n "$id" ] && [ -n "${want[$id]:-}" ] || continue
    itest_log "removing leftover container $cid of $id"
    gone+=("$cid")
  done < <(docker ps -a --filter label=dev.sandbox.id --format '{{.ID}} {{.Label "dev.sandbox.id"}}' 2>/dev/null || true)
  if [ "${#gone[@]}" -gt 0 ]; then
    docker rm -f "${gone[@]}" >/dev/null 2>&1 || true
  fi
  # and the snapshot images of the run's snapshots (a test that stopped
  # before deleting them, or whose worker stopped before removing them)
  want=()
  gone=()
  for url in "${ITEST_DBS[@]:-${DATABASE_URL:-}}"; do
    [ -n "$url" ] || continue
    for id in $("$ITEST_PGBIN/psql" -X -q -At "$url" -c 'SELECT id FROM snapshots' 2>/dev/null || true); do
      want[$id]=1
    done
  done
  while read -r cid id; do
    [ -n "$id" ] && [ -n "${want[$id]:-}" ] || continue
    itest_log "removing leftover snapshot image $cid of $id"
    gone+=("sandbox-snapshot:$id")
  done < <(docker images --filter label=dev.sandbox.managed=snapshot --format '{{.ID}} {{.Tag}}' 2>/dev/null || true)
  if [ "${#gone[@]}" -gt 0 ]; then
    docker rmi -f "${gone[@]}" >/dev/null 2>&1 || true
  fi
}

# Stops everything the run started (worker, controller, PostgreSQL, dockerd
# when we started it) and removes the run's containers.
# Unmounts what the run's workers left mounted of their volumes (a test
# that stopped before deleting its sandboxes): every mount under ITEST_TMP,
# deepest first; the loop devices go with them (auto-clear).
itest_unmount_volumes() {
  local m
  [ -n "${ITEST_TMP:-}" ] || return 0
  while read -r m; do
    itest_log "unmounting leftover volume mount $m"
    umount -l "$m" 2>/dev/null || true
  done < <(awk -v t="$ITEST_TMP/" 'index($2, t) == 1 { print $2 }' /proc/self/mounts | sort -r)
}

itest_cleanup() {
  local i
  for ((i = ${#ITEST_PIDS[@]} - 1; i >= 0; i--)); do
    itest_stop_pid "${ITEST_PIDS[$i]}" "process" 30 || true
  done
  ITEST_PIDS=()
  if docker info >/dev/null 2>&1; then
    itest_remove_run_containers
  fi
  itest_unmount_volumes
  if [ -n "${ITEST_PG_DATA:-}" ]; then
    itest_as_pg "$ITEST_PGBIN/pg_ctl" stop -D "$ITEST_PG_DATA" -m fast -w -t 60 >/dev/null 2>&1 || true
    ITEST_PG_DATA=
  fi
  if [ "${ITEST_DOCKERD_STARTED:-0}" = 1 ]; then
    itest_log "stopping the dockerd this run started"
    itest_stop_pid "$ITEST_DOCKERD_PID" dockerd 30 || true
    ITEST_DOCKERD_STARTED=0
  fi
}

# ---------------------------------------------------------------- per test

# Call at the top of a test: sandboxes passed to itest_track are deleted
# (and their containers removed) when the test exits, however it exits;
# files passed to itest_watch_log have their tails printed on failure;
# commands passed to itest_on_exit run first (use it instead of replacing
# the EXIT trap, which would lose the test's exit status).
itest_begin() {
  ITEST_TRACKED=()
  ITEST_WATCHED=()
  ITEST_TEST_PIDS=()
  ITEST_ON_EXIT=()
  trap 'itest_end $?' EXIT
  trap 'exit 143' TERM INT
  : "${SANDBOX_URL:?run this test through tests/integration/run.sh}"
  # every command the test runs goes to its trace file (run.sh shows its
  # tail when the test fails)
  if [ -n "${ITEST_TRACE_FILE:-}" ]; then
    exec {ITEST_TRACE_FD}>>"$ITEST_TRACE_FILE"
    BASH_XTRACEFD=$ITEST_TRACE_FD
    set -x
  fi
}

itest_track() { ITEST_TRACKED+=("$1"); }
itest_on_exit() { ITEST_ON_EXIT+=("$*"); }
# itest_track_tenant TENANT: when the test ends, every sandbox TENANT still
# has is deleted with the tracked ones (what a client under test made and
# left behind when a check stopped it midway).
itest_track_tenant() { itest_on_exit itest_track_tenant_now "$1"; }
itest_track_tenant_now() {
  local json id
  json=$(SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN "$SANDBOX_CLI" list --tenant "$1" --json 2>/dev/null) || return 0
  for id in $(python3 -c 'import json,sys; print(" ".join(s["id"] for s in json.loads(sys.argv[1]).get("sandboxes", [])))' "$json"); do
    itest_track "$id"
  done
}
itest_track_pid() { ITEST_TEST_PIDS+=("$1"); }
# A counter that survives only if the sandbox's processes do: itest_counter_start
# SBX starts a loop in SBX that writes 1, 2, ... to /tmp/count once a second
# (by rename, so a reader never sees the file half-written); itest_counter SBX
# prints its value and fails when it cannot be read.
itest_counter_start() {
  "$SANDBOX_CLI" exec "$1" -- sh -c '(i=0; while :; do i=$((i+1)); echo $i >/tmp/count.new; mv /tmp/count.new /tmp/count; sleep 1; done) >/dev/null 2>&1 </dev/null &'
}
itest_counter() {
  local n
  n=$("$SANDBOX_CLI" exec "$1" -- cat /tmp/count) && [ -n "$n" ] && printf '%s\n' "$n"
}
# itest_descendants PID: the pids of PID's children, theirs, and so on.
itest_descendants() {
  local k
  for k in $(pgrep -P "$1" 2>/dev/null); do
    echo "$k"
    itest_descendants "$k"
  done
}
itest_watch_log() { ITEST_WATCHED+=("$1"); }

itest_end() {
  local rc=$1 id cids f p
  { set +x; } 2>/dev/null
  trap - EXIT
  set +e
  if [ "$rc" -eq 0 ] && [ -n "${ITEST_FAIL_MARKER:-}" ] && [ -s "$ITEST_FAIL_MARKER" ]; then
    rc=1
  fi
  for p in "${ITEST_ON_EXIT[@]}"; do
    eval "$p"
  done
  for p in "${ITEST_TEST_PIDS[@]}"; do
    # $! of `cmd &` can be a subshell that forked cmd rather than exec'ing
    # it (bash does so while a trap is set): its descendants are stopped
    # too, or they would outlive the test
    f=$(itest_descendants "$p")
    itest_stop_pid "$p" "test process" 30
    for id in $f; do
      itest_stop_pid "$id" "a test process's child" 10
    done
  done
  for id in "${ITEST_TRACKED[@]}"; do
    SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN timeout 60 "$SANDBOX_CLI" delete "$id" --wait --timeout 50 >/dev/null 2>&1
    cids=$(docker ps -aq --filter "label=dev.sandbox.id=$id" 2>/dev/null)
    if [ -n "$cids" ]; then
      # shellcheck disable=SC2086
      docker rm -f $cids >/dev/null 2>&1
    fi
  done
  if [ "$rc" -ne 0 ]; then
    for f in "${ITEST_WATCHED[@]}"; do
      itest_log_tail "$f" 0 60
    done
  fi
  exit "$rc"
}

# A tenant name of its own for each test run.
itest_tenant() { printf '%s-%04x%04x\n' "$1" "$RANDOM" "$RANDOM"; }

# itest_nginx DIR HTTP_BLOCK: Debian's nginx as root with everything in DIR
# (config, pid, logs, temp files) and HTTP_BLOCK (server blocks, includes)
# inside its http block; checked with nginx -t, started in the foreground,
# its pid tracked (stopped at the test's end). The caller waits for it.
itest_nginx() {
  local d=$1
  command -v nginx >/dev/null 2>&1 || fail "nginx is not installed (apt-get install nginx-light; tools/test.sh does)"
  mkdir -p "$d/tmp"
  cat >"$d/nginx.conf" <<CONF
user root;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/error.log;
events { worker_connections 256; }
http {
    access_log $d/access.log;
    client_body_temp_path $d/tmp/body;
    proxy_temp_path $d/tmp/proxy;
    fastcgi_temp_path $d/tmp/fastcgi;
    uwsgi_temp_path $d/tmp/uwsgi;
    scgi_temp_path $d/tmp/scgi;
$2
}
CONF
  nginx -t -p "$d" -c "$d/nginx.conf" >"$d/t.out" 2>&1 || fail "nginx -t: $(cat "$d/t.out")"
  nginx -p "$d" -c "$d/nginx.conf" -g 'daemon off;' >"$d/nginx.out" 2>&1 </dev/null &
  itest_track_pid "$!"
}

# itest_as_member PREFIX: sets tenant to a new tenant name PREFIX-xxxxxxxx and
# exports a member token of it as SANDBOX_TOKEN.
itest_as_member() {
  tenant=$(itest_tenant "$1")
  SANDBOX_TOKEN=$(itest_token "$tenant" member)
  export SANDBOX_TOKEN
}

# itest_as_admin [TENANT]...: exports the admin token as SANDBOX_TOKEN and
# creates each TENANT (asserting that it worked).
itest_as_admin() {
  local t
  export SANDBOX_TOKEN=$ITEST_ADMIN_TOKEN
  for t in "$@"; do
    assert_exit 0 sandbox tenants create "$t"
  done
}

# itest_delete_tracked: deletes every sandbox the test tracks and waits for it,
# for an on-exit step that must run before their workers go away.
itest_delete_tracked() {
  local id
  for id in "${ITEST_TRACKED[@]}"; do
    "$SANDBOX_CLI" delete "$id" --wait --timeout 50 >/dev/null 2>&1
  done
}

# itest_private_db PREFIX: creates an empty database PREFIX_nnnn on the test's
# PostgreSQL and sets db (its name), base (the server URL) and url (its URL);
# itest_drop_private_db drops it again.
itest_private_db() {
  db="$1_$RANDOM$RANDOM"
  base=${DATABASE_URL%/*}
  url="$base/$db"
  "$ITEST_PGBIN/psql" -X -q -At "$base/postgres" -c "CREATE DATABASE $db" >/dev/null
}
itest_drop_private_db() {
  "$ITEST_PGBIN/psql" -X -q -At "$base/postgres" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true
}

# The sandbox CLI with the current SANDBOX_URL/SANDBOX_TOKEN. In the
# sanitized build (tools/test.sh exports ASAN_OPTIONS), the calls through
# this helper, most of a run's thousands of one-shot CLI processes, skip
# LeakSanitizer's check at exit (about 50 ms of CPU each, half of what such
# a call costs, on a run the CPU bounds); ASan and UBSan stay on. The calls
# of "$SANDBOX_CLI" itself (follows, copies, shells, the CLI-specific tests),
# the daemons, sandbox-mcp and the unit tests of the client keep it.
sandbox() {
  if [ -n "${ASAN_OPTIONS:-}" ]; then
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" "$SANDBOX_CLI" "$@"
  else
    "$SANDBOX_CLI" "$@"
  fi
}

# itest_emfile_backoff PID PORT LOG WHAT: lowers the running daemon PID's
# open files limit to 16 while 20 sockets connect to PORT for 3 s, then
# restores 256; asserts that accept() failing was logged ("WHAT: accept
# failed") once to six times and that at most 20 "too many open files"
# lines were written in all.
itest_emfile_backoff() {
  local pid=$1 port=$2 log=$3 what=$4 log0 n ours
  log0=$(itest_file_size "$log")
  prlimit --pid "$pid" --nofile=16:256
  python3 - "$port" <<'PY'
import socket, sys, time
port = int(sys.argv[1])
socks = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(20)]
time.sleep(3)
for s in socks:
    s.close()
PY
  prlimit --pid "$pid" --nofile=256:256
  sleep 1
  n=$(tail -c +"$((log0 + 1))" "$log" | grep -ci 'too many open files' || true)
  ours=$(tail -c +"$((log0 + 1))" "$log" | grep -c "$what: accept failed" || true)
  itest_log "EMFILE for 3 s: $ours '$what: accept failed' lines, $n 'too many open files' lines in all"
  [ "$ours" -ge 1 ] || fail "$what: accept() failing with EMFILE was not logged"
  [ "$ours" -le 6 ] || fail "$ours '$what: accept failed' lines in 3 s (at most one a second)"
  [ "$n" -le 20 ] || fail "$n 'too many open files' lines in 3 s"
}

# itest_own_controller TAG NOFILE ENV...: a controller of the test's own on
# the run's database (two HTTP threads, `ulimit -n NOFILE`, settings as
# ENV=VALUE), stopped with the test; sets CTL_PORT, CTL_RPORT (its route
# listener), CTL_URL, CTL_LOG and CTL_PID.
itest_own_controller() {
  local tag=$1 nofile=$2
  shift 2
  CTL_PORT=$(itest_free_port)
  CTL_RPORT=$(itest_free_port)
  CTL_LOG="$ITEST_TMP/ctl-$(basename "$0" .sh)-$tag.log"
  (
    ulimit -n "$nofile"
    exec env SANDBOX_HTTP_THREADS=2 "$@" "$SANDBOXD" controller --database-url "$DATABASE_URL" \
      --listen "127.0.0.1:$CTL_PORT" --route-listen "127.0.0.1:$CTL_RPORT"
  ) >>"$CTL_LOG" 2>&1 </dev/null &
  CTL_PID=$!
  itest_track_pid "$CTL_PID"
  itest_watch_log "$CTL_LOG"
  CTL_URL="http://127.0.0.1:$CTL_PORT"
  itest_wait_healthz "$CTL_URL" "$CTL_PID" "controller $tag" "$CTL_LOG" || fail "controller $tag did not start"
}
