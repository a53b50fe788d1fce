#!/usr/bin/env bash
# Backup and restore of a controller's database (issue 28 item 9):
# `sandboxd backup FILE` while a controller serves (mode 600, nothing at FILE
# when it fails); `sandboxd restore FILE` refused while a controller is
# connected (exit 3), refused for a file that is not a backup (exit 2), all
# or nothing for a backup cut short (exit 1, the database as it was, nothing
# left aside); then done: what came after the backup is gone, what was before
# it (tenants, tokens, a named sandbox) is back, on the same database and on a
# new empty one, and the controller serves it again. And `sandbox version`
# counts the workers' versions and names a skew.
# itest-timeout: 180
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_backup
db_a=$db url_a=$url
itest_private_db itest_backup_new
db_b=$db url_b=$url
trap 'rc=$?; for d in "$db_a" "$db_b"; do db=$d itest_drop_private_db; done; itest_end $rc' EXIT
psql_a() { "$ITEST_PGBIN/psql" -X -q -At "$url_a" -c "$1"; }

admin=$("$SANDBOXD" token create --database-url "$url_a" --tenant bk-admin --role admin --name bk) ||
  fail "token create on the private database"
start_ctl() { # start_ctl URL: a controller of the test's own on that database
  CTL_PORT=$(itest_free_port)
  CTL_LOG="$ITEST_TMP/ctl-backup-$CTL_PORT.log"
  "$SANDBOXD" controller --database-url "$1" --listen "127.0.0.1:$CTL_PORT" --route-listen 127.0.0.1:0 \
    >>"$CTL_LOG" 2>&1 </dev/null &
  CTL_PID=$!
  itest_track_pid "$CTL_PID"
  itest_watch_log "$CTL_LOG"
  itest_wait_healthz "http://127.0.0.1:$CTL_PORT" "$CTL_PID" "controller" "$CTL_LOG" || fail "controller did not start"
  export SANDBOX_URL="http://127.0.0.1:$CTL_PORT" SANDBOX_TOKEN=$admin
}
start_ctl "$url_a"
assert_exit 0 sandbox tenants create bk-one
member=$(SANDBOX_TOKEN=$admin sandbox tokens create --tenant bk-one --role member) || fail "member token"
# no worker: the sandbox stays pending, a record like any other
out=$(SANDBOX_TOKEN=$member sandbox create --name keep-me --image "$ITEST_IMAGE") || fail "create: $out"
sbx=${out%% *}

# ---- version skew (this controller's own database): a worker of another
# version is counted and named a skew by `sandbox version`
wtok=$("$SANDBOXD" token create --database-url "$url_a" --tenant bk-admin --role worker --worker old-one) ||
  fail "worker token"
itest_http POST /v1/workers/register "$wtok" \
  '{"name":"old-one","runtime":"docker","isolation":["container"],"capacity":{"cpu_millis":1000,"memory_mib":512,"slots":1},"version":"0.0.1-old"}'
assert_http 200 "" "register a worker of another version"
assert_exit 0 sandbox version
assert_contains "$ITEST_OUT" "workers: 1 at 0.0.1-old" "sandbox version counts the workers' versions"
assert_contains "$ITEST_OUT" "skew:" "and says there is a skew"
assert_exit 0 sandbox version --json
assert_eq 0.0.1-old "$(itest_json "$ITEST_OUT" server.workers.0.version)" "GET /v1/version: workers"

# ---- backup while the controller serves
assert_exit 0 "$SANDBOXD" backup "$ITEST_TMP/a.dump" --database-url "$url_a"
assert_contains "$ITEST_OUT" "backed up to $ITEST_TMP/a.dump" "backup"
assert_eq 600 "$(stat -c %a "$ITEST_TMP/a.dump")" "mode of the backup"
[ ! -e "$ITEST_TMP/a.dump.partial" ] || fail "a .partial file is left after the backup"
# a backup that cannot be made leaves nothing at FILE
assert_exit 1 "$SANDBOXD" backup "$ITEST_TMP/none.dump" --database-url "${url_a}_nosuchdb"
[ ! -e "$ITEST_TMP/none.dump" ] && [ ! -e "$ITEST_TMP/none.dump.partial" ] || fail "a failed backup left a file"
assert_exit 2 "$SANDBOXD" backup --database-url "$url_a"
# "-": the backup on stdout, for a pipe
"$SANDBOXD" backup - --database-url "$url_a" >"$ITEST_TMP/stdout.dump" || fail "backup to stdout"
"$ITEST_PGBIN/pg_restore" --list "$ITEST_TMP/stdout.dump" >"$ITEST_TMP/stdout.list" &&
  grep -q ' TABLE public sandboxes ' "$ITEST_TMP/stdout.list" ||
  fail "the backup on stdout is not a pg_restore archive with the sandboxes table"

# ---- after the backup: a tenant more, the member's sandbox deleted
assert_exit 0 sandbox tenants create bk-after
assert_exit 0 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" rm keep-me

# ---- refused while a controller is connected; the database is untouched
assert_exit 3 "$SANDBOXD" restore "$ITEST_TMP/a.dump" --database-url "$url_a"
assert_contains "$ITEST_ERR" "stop every controller" "a restore with a controller connected"
assert_exit 0 sandbox tenants get bk-after
itest_stop_pid "$CTL_PID" controller 30

# ---- not a backup; a backup cut short: the database as it was, nothing aside
head -c 20000 /dev/urandom >"$ITEST_TMP/noise.dump"
assert_exit 2 "$SANDBOXD" restore "$ITEST_TMP/noise.dump" --database-url "$url_a"
assert_contains "$ITEST_ERR" "is not a sandboxd backup" "restore of a file that is not a backup"
assert_exit 2 "$SANDBOXD" restore "$ITEST_TMP/no-such.dump" --database-url "$url_a"
size=$(stat -c %s "$ITEST_TMP/a.dump")
head -c $((size * 2 / 3)) "$ITEST_TMP/a.dump" >"$ITEST_TMP/cut.dump"
rc=0
"$SANDBOXD" restore "$ITEST_TMP/cut.dump" --database-url "$url_a" >"$ITEST_TMP/cut.out" 2>&1 || rc=$?
[ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "restore of a backup cut short: exit $rc ($(cat "$ITEST_TMP/cut.out"))"
assert_eq 1 "$(psql_a "SELECT count(*) FROM tenants WHERE name = 'bk-after'")" \
  "after a failed restore the database is as it was"
assert_eq 0 "$(psql_a "SELECT count(*) FROM pg_namespace WHERE nspname = 'sandbox_pre_restore'")" \
  "nothing is left aside after a failed restore"

# ---- the restore: before the backup, not after
assert_exit 0 "$SANDBOXD" restore "$ITEST_TMP/a.dump" --database-url "$url_a"
assert_contains "$ITEST_OUT" "restored $ITEST_TMP/a.dump; 0 migration(s) applied after it" "restore"
assert_eq 0 "$(psql_a "SELECT count(*) FROM pg_namespace WHERE nspname = 'sandbox_pre_restore'")" \
  "the old tables are dropped after the restore"
start_ctl "$url_a"
assert_exit 3 sandbox tenants get bk-after
assert_contains "$ITEST_ERR" "not_found" "a tenant made after the backup"
assert_exit 0 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" get keep-me --json
assert_eq "$sbx" "$(itest_json "$ITEST_OUT" sandbox.id)" "the member's token and its named sandbox, as backed up"
itest_stop_pid "$CTL_PID" controller 30

# ---- onto a new, empty database (another server's)
assert_exit 0 "$SANDBOXD" restore "$ITEST_TMP/a.dump" --database-url "$url_b"
start_ctl "$url_b"
assert_exit 0 sandbox tenants get bk-one
assert_exit 0 env SANDBOX_TOKEN="$member" "$SANDBOX_CLI" get keep-me
itest_stop_pid "$CTL_PID" controller 30
echo "backup while serving; restore refused while connected, all or nothing, then back to the backup's state"
