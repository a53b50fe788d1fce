#!/usr/bin/env bash
# Pins the sandbox CLI's help, usage errors and exit codes; needs no server.
# Usage: SANDBOX_CLI=build/tools/sandbox tests/integration/test_cli_usage.sh
# itest-parallel
set -euo pipefail

CLI=${SANDBOX_CLI:-build/tools/sandbox}
if [[ ! -x $CLI ]]; then
    echo "test_cli_usage: $CLI is not an executable (set SANDBOX_CLI)" >&2
    exit 2
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# No config from the person running the tests, no token or URL from the env.
export HOME=$TMP/home XDG_CONFIG_HOME=$TMP/xdg
unset SANDBOX_URL SANDBOX_TOKEN SANDBOX_CONTEXT
mkdir -p "$HOME" "$XDG_CONFIG_HOME"
# A port nothing listens on: bind one, note it, close it.
DEAD_PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo 9)
DEAD_URL=http://127.0.0.1:$DEAD_PORT

passed=0
failed=0
OUT=$TMP/out
ERR=$TMP/err

# run_prog PROG ARGS...: runs PROG with a time limit, sets RC, OUT and ERR files.
run_prog() {
    set +e
    timeout 30 "$@" >"$OUT" 2>"$ERR"
    RC=$?
    set -e
}
# run ARGS...: the same for the CLI.
run() { run_prog "$CLI" "$@"; }

fail() {
    failed=$((failed + 1))
    echo "FAIL: $1" >&2
    echo "  stdout: $(head -c 400 "$OUT")" >&2
    echo "  stderr: $(head -c 400 "$ERR")" >&2
}

# expect NAME RC [stdout|stderr PATTERN]...: checks the last run.
expect() {
    local name=$1 want=$2
    shift 2
    if [[ $RC -ne $want ]]; then
        fail "$name: exit $RC, want $want"
        return
    fi
    while [[ $# -ge 2 ]]; do
        local file=$OUT
        [[ $1 == stderr ]] && file=$ERR
        if ! grep -qF -- "$2" "$file"; then
            fail "$name: $1 lacks '$2'"
            return
        fi
        shift 2
    done
    passed=$((passed + 1))
}

# --- help: exit 0, usage on stdout, mentions the command's flags
run --help
expect "sandbox --help" 0 stdout "usage: sandbox" stdout "create" stdout "exec" stdout "SANDBOX_TOKEN"
run help
expect "sandbox help" 0 stdout "usage: sandbox" stdout "delete"
run help exec
expect "sandbox help exec" 0 stdout "--max-output"
run --version
expect "sandbox --version" 0 stdout "sandbox "

run create --help
expect "create --help" 0 stdout "--image" stdout "--tenant" stdout "--cpu-millis" stdout "--memory-mib" \
    stdout "--ttl" stdout "--network" stdout "--untrusted-repo" stdout "--generated-code" stdout "--hostile" \
    stdout "--env" stdout "--label" stdout "--idempotency-key" stdout "--wait" stdout "--timeout" stdout "--json"
run pools --help
expect "pools --help" 0 stdout "sandbox pools list" stdout "create NAME --size N" stdout "--image" \
    stdout "--tenant" stdout "--isolation" stdout "--json" stdout "max_pool_size"
run pools create warm
expect "pools create without --size" 2 stderr "create needs --size N"
run pools create warm --size 0
expect "pools create --size 0" 2 stderr "--size"
run pools get
expect "pools get without NAME" 2 stderr "get needs a pool NAME"
run pools list --size 3
expect "pools list with a spec flag" 2 stderr "go with create"
run pools frob
expect "pools unknown subcommand" 2 stderr "unknown subcommand 'frob'"
run wait --help
expect "wait --help" 0 stdout "OPERATION_ID" stdout "--timeout" stdout "--json"
run exec --help
expect "exec --help" 0 stdout "SANDBOX" stdout "--timeout" stdout "--env" stdout "--cwd" stdout "--max-output" \
    stdout "--json" stdout "-- ARGV"
run get --help
expect "get --help" 0 stdout "SANDBOX" stdout "--json"
run list --help
expect "list --help" 0 stdout "--tenant" stdout "--all" stdout "--json"
run delete --help
expect "delete --help" 0 stdout "SANDBOX" stdout "--wait" stdout "--timeout" stdout "--idempotency-key" stdout "--json"
run operation --help
expect "operation --help" 0 stdout "OPERATION_ID" stdout "--json"
run op -h
expect "op -h" 0 stdout "OPERATION_ID"
# --help wins over other problems on the line, and needs no token
run exec --bogus --help
expect "exec --bogus --help" 0 stdout "usage: sandbox exec"

# --- unknown command or flag: exit 2, names the problem and the help
run
expect "no command" 2 stderr "usage: sandbox"
run frobnicate
expect "unknown command" 2 stderr "unknown command 'frobnicate'" stderr "sandbox --help"
run --bogus list
expect "unknown global flag" 2 stderr "unknown flag '--bogus'"
run create --image busybox --bogus
expect "unknown create flag" 2 stderr "unknown flag '--bogus'" stderr "see 'sandbox create --help'"
run list -x
expect "unknown short flag" 2 stderr "unknown flag '-x'" stderr "see 'sandbox list --help'"
run get --wait sbx_a
expect "flag of another command" 2 stderr "unknown flag '--wait'"
run create --image
expect "missing value" 2 stderr "--image needs a value"
run create --image --json
expect "flag as value" 2 stderr "--image needs a value"
# --image is optional (the server's default_image): without a token the
# next problem is the token, not the image
run create --url "$DEAD_URL"
expect "create without --image needs only a token" 2 stderr "no API token"
run create --help
expect "create --help names the default image" 0 stdout "[--image IMAGE]" stdout "default_image"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run create --json
expect "create without --image reaches the server" 3 stderr "$DEAD_URL"
run create --image a --image b
expect "flag twice" 2 stderr "--image given more than once"
run create --image busybox --json=yes
expect "bool flag with value" 2 stderr "--json takes no value"
run create --image busybox --network wide
expect "bad network" 2 stderr "--network" stderr "none, restricted, open"
run create --image busybox --timeout 5
expect "--timeout without --wait" 2 stderr "--timeout needs --wait"
run create --image busybox --idempotency-key "a b"
expect "idempotency key with a space" 2 stderr "--idempotency-key"
run delete sbx_a --idempotency-key "$(printf 'k%.0s' {1..129})"
expect "idempotency key too long" 2 stderr "--idempotency-key"
run get
expect "get without id" 2 stderr "missing SANDBOX" stderr "see 'sandbox get --help'"
run get sbx_a sbx_b
expect "get with two ids" 2 stderr "unexpected argument 'sbx_b'"
run wait
expect "wait without id" 2 stderr "missing OPERATION_ID"

# --- exec needs its command after --
run exec sbx_a
expect "exec without --" 2 stderr "missing the command" stderr "see 'sandbox exec --help'"
run exec sbx_a --
expect "exec with empty argv" 2 stderr "missing the command"
run exec sbx_a ls -l
expect "exec argv without --" 2 stderr "unexpected argument 'ls'" stderr "after '--'"
run exec -- ls
expect "exec without id" 2 stderr "missing SANDBOX"

# --- cp: one side in a sandbox, an absolute path there; create --upload's shape
run cp --help
expect "cp --help" 0 stdout "usage: sandbox cp LOCAL SANDBOX:/path" stdout "docker cp" stdout "Exit codes"
run help
expect "sandbox help lists cp" 0 stdout "cp "
run cp ./a ./b
expect "cp with no sandbox side" 2 stderr "neither side is in a sandbox"
run cp sbx_a:/x sbx_b:/y
expect "cp with two sandbox sides" 2 stderr "both sides are in a sandbox"
run cp ./a sbx_a:relative
expect "cp to a relative sandbox path" 2 stderr "must be absolute"
run cp ./a
expect "cp with one argument" 2 stderr "needs SOURCE and DESTINATION"
run create --upload nocolon
expect "create --upload without :/path" 2 stderr "--upload: LOCAL:/path"

# --- extend: a sandbox and --ttl from 1 to 30 days, checked before any token
run extend --help
expect "extend --help" 0 stdout "usage: sandbox extend SANDBOX --ttl SECONDS" stdout "from now" \
    stdout "--idempotency-key" stdout "--json" stdout "policy_denied" stdout "conflict"
run help
expect "sandbox help lists extend" 0 stdout "extend"
run extend sbx_a
expect "extend without --ttl" 2 stderr "--ttl SECONDS is required" stderr "see 'sandbox extend --help'"
run extend --ttl 60
expect "extend without id" 2 stderr "missing SANDBOX"
run extend sbx_a --ttl 0
expect "extend ttl 0" 2 stderr "--ttl" stderr "out of range (1 to 2592000)"
run extend sbx_a --ttl 2592001
expect "extend ttl over 30 days" 2 stderr "out of range"
run extend sbx_a --ttl 1h
expect "extend ttl with a unit" 2 stderr "'1h' is not a whole number"
run extend sbx_a sbx_b --ttl 60
expect "extend with two ids" 2 stderr "unexpected argument 'sbx_b'"
run extend sbx_a --ttl 60 --wait
expect "extend has no --wait" 2 stderr "unknown flag '--wait'"
run extend sbx_a --ttl 60 --url "$DEAD_URL"
expect "extend needs a token" 2 stderr "no API token"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run extend sbx_a --ttl 60
expect "unreachable extend" 3 stderr "$DEAD_URL/v1/sandboxes/sbx_a/extend"

# --- network and secrets (egress by domain): checked before any token
run network --help
expect "network --help" 0 stdout "usage: sandbox network SANDBOX" stdout "--allow DOMAIN" stdout "--udp PORT" stdout "--log" \
    stdout "--verdict" stdout "policy_denied"
run network sbx_a --wait
expect "network --wait without a change" 2 stderr "--wait applies to a change"
run network sbx_a --allow 10.0.0.1
expect "network --allow of an IP" 2 stderr "an IP address is not a domain"
run network sbx_a --allow x.test --log
expect "network --log with a change" 2 stderr "--log reads the log"
run network sbx_a --verdict maybe --log
expect "network --verdict bad" 2 stderr "not allowed or refused"
run network sbx_a --limit 5
expect "network --limit without --log" 2 stderr "--limit applies to --log"
run network sbx_a --udp 53
expect "network --udp 53 (the resolver's)" 2 stderr "not a port from 1 to 65535 other than 53"
run network sbx_a --udp 443x
expect "network --udp of a bad port" 2 stderr "'443x' is not a port"
run create --udp 443 --image busybox
expect "create --udp without open" 2 stderr "--udp and --egress-default apply to --network open"
run secrets --help
expect "secrets --help" 0 stdout "sandbox secrets create NAME" stdout "--header" stdout "--host" stdout "stdin"
run secrets
expect "secrets without a subcommand" 2 stderr "missing subcommand"
run secrets create k
expect "secrets create without --header" 2 stderr "--header NAME and at least one --host"
run secrets create k --header Authorization --host 10.0.0.1
expect "secrets create --host of an IP" 2 stderr "an IP address is not a domain"
run secrets list --header X
expect "secrets --header goes with create" 2 stderr "--header and --host go with create"
run create --secret k --image busybox
expect "create --secret without open" 2 stderr "--secret needs --network open"
run create --secret "a b" --network open --allow x.test
expect "create --secret of a bad name" 2 stderr "not a secret name"
run help
expect "sandbox help lists network and secrets" 0 stdout "network " stdout "secrets "

# --- snapshot, snapshots and create --from: checked before any token
run snapshot --help
expect "snapshot --help" 0 stdout "usage: sandbox snapshot SANDBOX" stdout "SNAPSHOT_ID OPERATION_ID" \
    stdout "--name" stdout "--idempotency-key" stdout "--wait" stdout "--timeout" stdout "--json" \
    stdout "quota_exceeded" stdout "create --from"
run snapshots --help
expect "snapshots --help" 0 stdout "sandbox snapshots list" stdout "get SNAPSHOT" stdout "delete SNAPSHOT..." \
    stdout "--sandbox" stdout "--json" stdout "not_found"
run help
expect "sandbox help lists snapshot and snapshots" 0 stdout "snapshot " stdout "snapshots "
run create --help
expect "create --help has --from" 0 stdout "--from SNAPSHOT"
run snapshot
expect "snapshot without a sandbox" 2 stderr "missing SANDBOX" stderr "see 'sandbox snapshot --help'"
run snapshot sbx_a --name snp_x
expect "snapshot name like an id" 2 stderr "--name" stderr "not a snapshot name"
run snapshot sbx_a --timeout 5
expect "snapshot --timeout without --wait" 2 stderr "--timeout needs --wait"
run snapshot sbx_a sbx_b
expect "snapshot of two sandboxes" 2 stderr "unexpected argument 'sbx_b'"
run snapshots
expect "snapshots without a subcommand" 2 stderr "missing subcommand"
run snapshots frob
expect "snapshots unknown subcommand" 2 stderr "unknown subcommand 'frob'"
run snapshots get
expect "snapshots get without SNAPSHOT" 2 stderr "get needs a SNAPSHOT"
run snapshots get a b
expect "snapshots get of two" 2 stderr "get takes one SNAPSHOT"
run snapshots delete "a b"
expect "snapshots delete of a bad name" 2 stderr "is not a snapshot id"
run snapshots get base --sandbox sbx_a
expect "snapshots --sandbox goes with list" 2 stderr "--sandbox goes with list"
run create --from "no such"
expect "create --from a bad name" 2 stderr "--from" stderr "not a snapshot id"
run snapshot sbx_a --url "$DEAD_URL"
expect "snapshot needs a token" 2 stderr "no API token"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run snapshot sbx_a --name base
expect "unreachable snapshot" 3 stderr "$DEAD_URL/v1/sandboxes/sbx_a/snapshots"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run snapshots list --sandbox sbx_a
expect "unreachable snapshots list" 3 stderr "$DEAD_URL/v1/snapshots?sandbox=sbx_a"

# --- pause, resume and fork: checked before any token
run pause --help
expect "pause --help" 0 stdout "usage: sandbox pause SANDBOX" stdout "--idempotency-key" stdout "--wait" \
    stdout "--timeout" stdout "--json" stdout "TTL clock stops" stdout "503" stdout "memory is not kept" \
    stdout "isolation_unavailable" stdout "Exit codes"
run resume --help
expect "resume --help" 0 stdout "usage: sandbox resume SANDBOX" stdout "--idempotency-key" stdout "--wait" \
    stdout "--json" stdout "what it had left" stdout "Exit codes"
run fork --help
expect "fork --help" 0 stdout "usage: sandbox fork SANDBOX" stdout "--count K" stdout "--name-prefix P" \
    stdout "--keep-snapshot" stdout "--wait" stdout "--timeout" stdout "--json" stdout "SANDBOX_ID OPERATION_ID" \
    stdout "Not one API call" stdout "Exit codes"
run help
expect "sandbox help lists pause, resume and fork" 0 stdout "pause " stdout "resume " stdout "fork "
run get --help
expect "get --help names the paused line" 0 stdout "paused: since"
run list --help
expect "list --help names the paused phase" 0 stdout "paused"
run pause
expect "pause without a sandbox" 2 stderr "missing SANDBOX" stderr "see 'sandbox pause --help'"
run resume sbx_a sbx_b
expect "resume of two sandboxes" 2 stderr "unexpected argument 'sbx_b'"
run pause sbx_a --timeout 5
expect "pause --timeout without --wait" 2 stderr "--timeout needs --wait"
run resume sbx_a --idempotency-key "a b"
expect "resume idempotency key with a space" 2 stderr "--idempotency-key"
run pause sbx_a --count 2
expect "pause has no --count" 2 stderr "unknown flag '--count'"
run fork
expect "fork without a sandbox" 2 stderr "missing SANDBOX" stderr "see 'sandbox fork --help'"
run fork sbx_a --count 0
expect "fork --count 0" 2 stderr "--count" stderr "out of range (1 to 32)"
run fork sbx_a --count 33
expect "fork --count 33" 2 stderr "out of range (1 to 32)"
run fork sbx_a --name-prefix sbx_x
expect "fork --name-prefix like an id" 2 stderr "--name-prefix" stderr "not a sandbox name"
run fork sbx_a --name-prefix "$(printf 'a%.0s' {1..61})" --count 10
expect "fork --name-prefix too long for P-10" 2 stderr "-10' is not a sandbox name"
run fork sbx_a --timeout 5
expect "fork --timeout without --wait" 2 stderr "--timeout needs --wait"
run fork sbx_a --url "$DEAD_URL"
expect "fork needs a token" 2 stderr "no API token"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run pause sbx_a
expect "unreachable pause" 3 stderr "$DEAD_URL/v1/sandboxes/sbx_a/pause"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run resume sbx_a --wait
expect "unreachable resume" 3 stderr "$DEAD_URL/v1/sandboxes/sbx_a/resume"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run fork sbx_a --count 2 --json
expect "unreachable fork: nothing made, nothing printed" 3 stderr "$DEAD_URL/v1/sandboxes/sbx_a"
if [[ -s $OUT ]]; then fail "fork --json printed something on error"; else passed=$((passed + 1)); fi

# --- templates and create --template, --auto-pause: checked before any token;
# a Dockerfile the build cannot run is refused (exit 2) before any call
run templates --help
expect "templates --help" 0 stdout "usage: sandbox templates build NAME -f DOCKERFILE [CONTEXT]" \
    stdout "--build-arg K=V" stdout "--network" stdout "--isolation" stdout "--untrusted-repo" \
    stdout "--cpu-millis" stdout "--memory-mib" stdout "--disk" stdout "--timeout" stdout "--keep-build-sandbox" \
    stdout "templates list [-q] [--json]" stdout "templates get NAME" stdout "templates delete NAME [--version N]" \
    stdout "NAME VERSION SNAPSHOT_ID" stdout "#N LINE: INSTRUCTION" stdout "HEALTHCHECK" stdout "Exit codes" \
    stdout "124" stdout "130"
run help
expect "sandbox help lists templates" 0 stdout "templates "
run create --help
expect "create --help names --template and --auto-pause" 0 stdout "--template NAME[:VERSION]" \
    stdout "--auto-pause" stdout "paused"
run templates
expect "templates without a subcommand" 2 stderr "missing subcommand: build, builds, cancel, list, get, logs or delete"
run templates frob
expect "templates unknown subcommand" 2 stderr "unknown subcommand 'frob'"
run templates cancel web bld_x
expect "templates cancel of a bad build id" 2 stderr "cancel needs a template NAME and a BUILD id"
run snapshot --help
expect "snapshot --help names --memory" 0 stdout "--memory"
run fork --help
expect "fork --help names --no-memory" 0 stdout "--no-memory"
run templates get
expect "templates get without NAME" 2 stderr "get needs one template NAME"
run templates delete a b
expect "templates delete of two" 2 stderr "delete needs one template NAME"
run templates get snp_x
expect "templates get of a snapshot id" 2 stderr "not a template name"
run templates list extra
expect "templates list with an argument" 2 stderr "list takes no argument"
run templates get web --version 2
expect "templates --version goes with delete" 2 stderr "--version goes with delete"
run templates delete web --version 0
expect "templates delete --version 0" 2 stderr "--version" stderr "out of range"
run templates get web -q
expect "templates -q goes with list" 2 stderr "-q goes with list"
run templates list -f Dockerfile
expect "templates list with a build flag" 2 stderr "go with build"
run templates list --server
expect "templates list with --server" 2 stderr "go with build"
run templates builds
expect "templates builds without NAME" 2 stderr "builds needs a template NAME"
run templates builds web not-an-id
expect "templates builds of a bad build id" 2 stderr "not a build id"
run templates build web -f /dev/null --server --keep-build-sandbox
expect "templates build --server --keep-build-sandbox" 2 stderr "--keep-build-sandbox goes with a build this command drives"
run templates build
expect "templates build without NAME" 2 stderr "build needs a template NAME"
run templates build 'no spaces' -f /dev/null
expect "templates build of a bad name" 2 stderr "not a template name"
run templates build web --network wide
expect "templates build --network" 2 stderr "--network: 'wide'"
run templates build web --build-arg =x
expect "templates build --build-arg without a key" 2 stderr "--build-arg" stderr "empty key"
run templates build web "$TMP/no-such-dir"
expect "templates build of a missing CONTEXT" 2 stderr "CONTEXT"
mkdir -p "$TMP/tpl"
run templates build web -f "$TMP/tpl/Dockerfile" "$TMP/tpl"
expect "templates build of a missing Dockerfile" 2 stderr "cannot read" stderr "Dockerfile"
printf 'FROM busybox\nRUN true\nHEALTHCHECK CMD true\n' >"$TMP/tpl/Dockerfile.bad"
run templates build bad -f "$TMP/tpl/Dockerfile.bad" "$TMP/tpl"
expect "templates build: an unsupported instruction, no token needed" 2 stderr "Dockerfile.bad:3:" \
    stderr "HEALTHCHECK"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run templates build bad -f "$TMP/tpl/Dockerfile.bad" "$TMP/tpl"
expect "templates build: refused before any call" 2 stderr "HEALTHCHECK"
if grep -qF "$DEAD_URL" "$ERR"; then fail "templates build called the API for a bad Dockerfile"; else passed=$((passed + 1)); fi
printf 'FROM busybox AS build\n' >"$TMP/tpl/Dockerfile.ms"
run templates build ms -f "$TMP/tpl/Dockerfile.ms" "$TMP/tpl"
expect "templates build: multi-stage" 2 stderr "Dockerfile.ms:1:" stderr "multi-stage"
printf 'FROM busybox\nRUN id\nUSER a/b\nRUN id\n' >"$TMP/tpl/Dockerfile.user"
run templates build u -f "$TMP/tpl/Dockerfile.user" "$TMP/tpl"
expect "templates build: a USER that is no user name" 2 stderr "Dockerfile.user:3:" stderr "USER 'a/b'"
run exec sbx_aaaaaaaaaaaaaaaaaaaaaaaaaa -t -u app -- sh
expect "exec -u with -t" 2 stderr "--user does not go with -t"
printf 'FROM busybox\nCOPY ../escape /x\n' >"$TMP/tpl/Dockerfile.esc"
run templates build e -f "$TMP/tpl/Dockerfile.esc" "$TMP/tpl"
expect "templates build: a source outside the context" 2 stderr "Dockerfile.esc:2:" stderr "leaves the build context"
printf 'FROM busybox\nCOPY missing.txt /x\n' >"$TMP/tpl/Dockerfile.miss"
run templates build m -f "$TMP/tpl/Dockerfile.miss" "$TMP/tpl"
expect "templates build: a source not in the context" 2 stderr "Dockerfile.miss:2: COPY missing.txt"
printf 'FROM busybox\nADD site.tar.gz /srv/\n' >"$TMP/tpl/Dockerfile.add"
run templates build a -f "$TMP/tpl/Dockerfile.add" "$TMP/tpl"
expect "templates build: ADD of an archive" 2 stderr "Dockerfile.add:2:" stderr "use COPY"
printf 'FROM busybox\nRUN true\n' >"$TMP/tpl/Dockerfile"
run templates build web "$TMP/tpl" --url "$DEAD_URL"
expect "templates build needs a token (CONTEXT/Dockerfile by default)" 2 stderr "no API token"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run templates build web "$TMP/tpl" --json
expect "unreachable templates build: nothing made, nothing printed" 3 stderr "$DEAD_URL/v1/templates/busybox"
if [[ -s $OUT ]]; then fail "templates build --json printed something on error"; else passed=$((passed + 1)); fi
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run templates list
expect "unreachable templates list" 3 stderr "$DEAD_URL/v1/templates"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run templates delete web --version 2
expect "unreachable templates delete" 3 stderr "$DEAD_URL/v1/templates/web?version=2"
run create --template 'web:x'
expect "create --template with a bad version" 2 stderr "--template" stderr "NAME:VERSION"
run create --template web --from base
expect "create --template and --from" 2 stderr "--template and --from exclude each other"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run create --template web:2 --auto-pause
expect "unreachable create --template" 3 stderr "$DEAD_URL/v1/sandboxes"

# --- numbers are checked strictly
run create --image busybox --cpu-millis abc
expect "non-numeric cpu" 2 stderr "--cpu-millis" stderr "'abc' is not a whole number"
run create --image busybox --cpu-millis 12x
expect "trailing junk" 2 stderr "'12x' is not a whole number"
run create --image busybox --memory-mib " 12"
expect "leading space" 2 stderr "not a whole number"
run create --image busybox --memory-mib -5
expect "negative memory" 2 stderr "--memory-mib" stderr "out of range"
run create --image busybox --ttl 99999999999999999999999
expect "overflowing ttl" 2 stderr "--ttl" stderr "out of range"
run create --image busybox --cpu-millis ""
expect "empty number" 2 stderr "--cpu-millis"
run exec sbx_a --timeout 0 -- true
expect "exec timeout 0" 2 stderr "--timeout" stderr "out of range"
run exec sbx_a --max-output 1.5 -- true
expect "fractional max-output" 2 stderr "--max-output" stderr "not a whole number"
run wait op_a --timeout 1e3
expect "wait timeout 1e3" 2 stderr "not a whole number"
run list --limit 0
expect "list limit 0" 2 stderr "--limit" stderr "out of range"

# --- K=V pairs need '=' and a valid key
run create --image busybox --env FOO
expect "env without =" 2 stderr "--env: 'FOO' is not KEY=VALUE"
run create --image busybox --label =v
expect "label with empty key" 2 stderr "empty key"
run exec sbx_a --env 1X=y -- true
expect "env key starting with digit" 2 stderr "key '1X' is not valid"

# --- missing token: exit 2 and says how to set it
run list --url "$DEAD_URL"
expect "missing token" 2 stderr "no API token" stderr "SANDBOX_TOKEN" stderr "--token"
run --url "$DEAD_URL" wait op_a
expect "missing token for wait" 2 stderr "no API token"
# an empty SANDBOX_TOKEN (its $(cat FILE) failed) says so
SANDBOX_TOKEN= run list --url "$DEAD_URL"
expect "empty SANDBOX_TOKEN" 2 stderr "SANDBOX_TOKEN is set but empty" stderr "admin.token"

# --- bad URL: usage error
run list --token sbt_x --url ftp://example.com
expect "non-http URL" 2 stderr "ftp://example.com"

# --- unreachable URL: exit 3, names the URL, never the token
run list --token sbt_SECRETVALUE --url "$DEAD_URL"
expect "unreachable list" 3 stderr "error: unreachable" stderr "$DEAD_URL"
if grep -q SECRETVALUE "$OUT" "$ERR"; then fail "token printed"; else passed=$((passed + 1)); fi
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run get sbx_a
expect "unreachable get via env" 3 stderr "$DEAD_URL/v1/sandboxes/sbx_a"
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run create --image busybox --json
expect "unreachable create --json" 3 stderr "$DEAD_URL"
if [[ -s $OUT ]]; then fail "--json printed something on error"; else passed=$((passed + 1)); fi
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run exec sbx_a -- true
expect "unreachable exec" 3 stderr "$DEAD_URL"

# --- waiting on an unreachable controller retries, then times out with 124
SANDBOX_TOKEN=sbt_x SANDBOX_URL=$DEAD_URL run wait op_a --timeout 1
expect "wait retries until timeout" 124 stderr "timed out after 1 s" stderr "$DEAD_URL"

# --- config file: url and token, XDG_CONFIG_HOME first
mkdir -p "$XDG_CONFIG_HOME/sandbox"
printf '# test\nurl = %s\ntoken = sbt_fromfile\n' "$DEAD_URL" >"$XDG_CONFIG_HOME/sandbox/config"
chmod 600 "$XDG_CONFIG_HOME/sandbox/config"
run list
expect "config file url and token" 3 stderr "$DEAD_URL"
printf 'this is not a setting\n' >"$XDG_CONFIG_HOME/sandbox/config"
run list
expect "malformed config" 2 stderr "config:1"
rm -f "$XDG_CONFIG_HOME/sandbox/config"

# --- contexts: [context NAME] sections, --context / SANDBOX_CONTEXT / 'context ='
# (two dead ports: which one a command reached says which context it used)
DEAD2=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
cat >"$XDG_CONFIG_HOME/sandbox/config" <<EOF
url = http://127.0.0.1:$DEAD2
token = sbt_top
context = one

[context one]
url = $DEAD_URL
token = sbt_one

[context two]
url = http://127.0.0.1:$DEAD2/two
EOF
chmod 600 "$XDG_CONFIG_HOME/sandbox/config"
run context
expect "context list" 0 stdout "* one" stdout "two" stdout "none"
if grep -q sbt_ "$OUT" "$ERR"; then fail "context list shows a token"; else passed=$((passed + 1)); fi
run list
expect "the file's 'context =' picks one" 3 stderr "$DEAD_URL/v1/sandboxes"
run --context two list
expect "a context without a token: no token (never another context's)" 2 stderr "no API token"
SANDBOX_CONTEXT=two SANDBOX_TOKEN=sbt_env run list
expect "SANDBOX_CONTEXT wins over SANDBOX_TOKEN (never mixed)" 2 stderr "no API token"
SANDBOX_URL=http://127.0.0.1:$DEAD2/env run list
expect "SANDBOX_URL without a named context: the file's context is left out" 3 stderr "$DEAD2/env/v1/sandboxes"
run --context two --token sbt_flag list
expect "--token still wins over a context" 3 stderr "$DEAD2/two/v1/sandboxes"
run context show --context two
expect "context show" 0 stdout "context: two" stdout "token: none" stdout "/two"
run --context nope list
expect "an unknown --context" 2 stderr "no context 'nope'" stderr "one, two"
run context use nope
expect "context use of an unknown context" 1 stderr "no context 'nope'"
run context use two
expect "context use" 0 stdout "context two"
if [[ "$(head -n 1 "$XDG_CONFIG_HOME/sandbox/config")" != "context = two" ]] || grep -q '^context = one' "$XDG_CONFIG_HOME/sandbox/config" ||
    ! grep -q '^token = sbt_one' "$XDG_CONFIG_HOME/sandbox/config" || [[ "$(stat -c %a "$XDG_CONFIG_HOME/sandbox/config")" != 600 ]]; then
    fail "context use keeps the file's other lines and mode"
else
    passed=$((passed + 1))
fi
run context show
expect "context use made it the default" 0 stdout "context: two"
printf '[context bad name]\nurl = http://x\n' >"$XDG_CONFIG_HOME/sandbox/config"
run list
expect "a malformed context section" 2 stderr "config:1" stderr "[context NAME]"
rm -f "$XDG_CONFIG_HOME/sandbox/config"

# --- completion: a script made from the command table, run in bash
run completion bash
expect "completion bash" 0 stdout "complete -F _sandbox_cli sandbox"
cp "$OUT" "$TMP/comp.bash"
comp() { # comp WORDS...: what bash would offer for the last word
    bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMPREPLY=(); _sandbox_cli; echo "${COMPREPLY[*]}"' \
        comp "$TMP/comp.bash" "$@"
}
check_comp() { # check_comp NAME WANT WORDS...
    local name=$1 want=$2 got
    shift 2
    got=$(comp "$@")
    if [[ " $got " == *" $want "* ]]; then passed=$((passed + 1)); else fail "completion: $name: [$want] not in [$got]"; fi
}
check_comp "a command" create sandbox cr
check_comp "an alias" rm sandbox r
check_comp "a command's flag" --env sandbox exec x --e
check_comp "a short flag" -w sandbox exec x -
check_comp "a subcommand" drain sandbox workers d
check_comp "completion's shells" zsh sandbox completion z
check_comp "help's commands" extend sandbox help ex
check_comp "snapshots' subcommands" delete sandbox snapshots de
check_comp "pause in the command list" pause sandbox pau
check_comp "fork's flags" --keep-snapshot sandbox fork x --keep
check_comp "help's commands include resume" resume sandbox help res
if [[ -z "$(comp sandbox create --tenant '')" ]]; then passed=$((passed + 1)); else fail "completion: nothing offered for a flag's value"; fi
run completion zsh
expect "completion zsh" 0 stdout "bashcompinit" stdout "complete -F _sandbox_cli sandbox"
run completion fish
expect "completion of another shell" 2 stderr "bash or zsh"

# --- sandboxd: each command's --help prints its usage and only its flags
SANDBOXD=${SANDBOXD:-$(dirname "$CLI")/sandboxd}
if [[ -x $SANDBOXD ]]; then
    # runs sandboxd instead of the CLI
    rund() { run_prog "$SANDBOXD" "$@"; }
    # lacks NAME PATTERN: the last stdout must not contain PATTERN
    lacks() {
        if grep -qF -- "$2" "$OUT"; then fail "$1: stdout has '$2'"; else passed=$((passed + 1)); fi
    }
    rund --help
    expect "sandboxd --help" 0 stdout "usage: sandboxd COMMAND" stdout "token create" stdout "--route-listen" \
        stdout "--docker-socket" stdout "sandboxd COMMAND --help"
    rund all --help
    expect "sandboxd all --help" 0 stdout "usage: sandboxd all" stdout "--data-dir" stdout "--listen" \
        stdout "--route-listen" stdout "--docker-socket" stdout "--default-image" stdout "--config FILE"
    lacks "sandboxd all --help" "usage: sandboxd COMMAND"
    rund controller --help
    expect "sandboxd controller --help" 0 stdout "usage: sandboxd controller" stdout "--database-url" \
        stdout "--route-listen" stdout "--default-image" stdout "--lease-seconds"
    lacks "sandboxd controller --help" "--docker-socket"
    lacks "sandboxd controller --help" "--data-dir"
    rund worker --help
    expect "sandboxd worker --help" 0 stdout "usage: sandboxd worker" stdout "--controller-url" \
        stdout "--docker-socket" stdout "--worker-health-listen" stdout "--worker-gvisor-runtime"
    lacks "sandboxd worker --help" "--route-listen "
    lacks "sandboxd worker --help" "--database-url"
    rund migrate --help
    expect "sandboxd migrate --help" 0 stdout "usage: sandboxd migrate" stdout "--database-url"
    lacks "sandboxd migrate --help" "--listen"
    rund token create --help
    expect "sandboxd token create --help" 0 stdout "usage: sandboxd token create" stdout "--tenant" \
        stdout "--role" stdout "--name" stdout "--database-url"
    lacks "sandboxd token create --help" "--docker-socket"
    rund help worker
    expect "sandboxd help worker" 0 stdout "usage: sandboxd worker"
    # help wins over a value that is not valid, and over a config file that is missing
    rund controller --lease-seconds 1 --config /nonexistent --help
    expect "sandboxd controller --help with bad flags" 0 stdout "usage: sandboxd controller"
    rund frobnicate --help
    expect "sandboxd unknown command --help" 2 stderr 'unknown command "frobnicate"'
    rund --default-image 'Not An Image'
    expect "sandboxd bad default image" 2 stderr "default_image" stderr "not an image reference"
    rund --default-image registry.local:5000/base:1 --print-config
    expect "sandboxd --print-config shows default_image" 0 stdout "registry.local:5000/base:1"
    SANDBOX_DEFAULT_IMAGE=team/img:2 rund --print-config
    expect "SANDBOX_DEFAULT_IMAGE" 0 stdout "team/img:2"
else
    fail "sandboxd not found at $SANDBOXD (set SANDBOXD)"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
