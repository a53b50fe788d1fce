#!/usr/bin/env bash
# Migrations: `sandboxd migrate --status` lists applied and pending ones (and
# a schema newer than the binary), `--dry-run` applies the pending ones and
# rolls back; `sandboxd migrate` applies the schema once, is a no-op the second
# time, and refuses (as does the controller) a database whose recorded
# migration checksum no longer matches the landed file.
# itest-timeout: 120
# itest-parallel
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
itest_begin

itest_private_db itest_migrate
trap 'rc=$?; itest_drop_private_db; itest_end $rc' EXIT

n_files=$(find "$(dirname "$0")/../../migrations" -name '[0-9][0-9][0-9][0-9]_*.sql' | wc -l)
last=$(find "$(dirname "$0")/../../migrations" -name '[0-9][0-9][0-9][0-9]_*.sql' -printf '%f\n' | sort | tail -n 1)
# --status and --dry-run on an empty database: all pending; the dry run applies them and keeps nothing
assert_exit 1 "$SANDBOXD" migrate --database-url "$url" --status
assert_contains "$ITEST_OUT" "0001_initial.sql                   pending" "status of an empty database"
assert_contains "$ITEST_OUT" "schema: $n_files pending of $n_files" "status: how many are pending"
assert_exit 1 "$SANDBOXD" migrate --database-url "$url" --dry-run
assert_contains "$ITEST_OUT" "dry run: the $n_files pending migrations apply cleanly (rolled back: nothing changed)" \
  "a dry run"
assert_eq 0 "$("$ITEST_PGBIN/psql" -X -q -At "$url" -c "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")" \
  "a dry run leaves no table behind"
assert_exit 2 "$SANDBOXD" migrate --database-url "$url" --status --dry-run
assert_exit 2 "$SANDBOXD" controller --status
assert_exit 0 "$SANDBOXD" migrate --help
assert_contains "$ITEST_OUT" "--dry-run" "migrate --help names --dry-run"
assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
assert_contains "$ITEST_OUT" "applied $n_files migration(s)" "first migrate"
tables=$("$ITEST_PGBIN/psql" -X -q -At "$url" -c \
  "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'")
assert_eq "api_tokens,build_files,cluster,event_publisher,events,exec_output,exec_output_usage,network_log,operations,pools,routes,sandbox_usage,sandbox_usage_log,sandboxes,schema_migrations,secrets,snapshot_copies,snapshots,template_builds,tenants,volumes,workers" "$tables" "tables after migrate"

assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
assert_contains "$ITEST_OUT" "applied 0 migration(s)" "second migrate"
assert_exit 0 "$SANDBOXD" migrate --database-url "$url" --status
assert_contains "$ITEST_OUT" "schema: current ($n_files migrations, the newest $last)" "status once current"
assert_contains "$ITEST_OUT" "0001_initial.sql                   applied 20" "status says when each was applied"
# the newest one's record taken back by hand, its change left in place: it is
# pending, and a dry run says it would fail and why (and changes nothing)
sum=$("$ITEST_PGBIN/psql" -X -q -At "$url" -c "SELECT checksum FROM schema_migrations WHERE name = '$last'")
"$ITEST_PGBIN/psql" -X -q -At "$url" -c "DELETE FROM schema_migrations WHERE name = '$last'" >/dev/null
assert_exit 1 "$SANDBOXD" migrate --database-url "$url" --status
assert_contains "$ITEST_OUT" "schema: 1 pending of $n_files" "one pending"
assert_exit 2 "$SANDBOXD" migrate --database-url "$url" --dry-run
assert_contains "$ITEST_OUT" "dry run: $last fails: ERROR:" "a dry run that fails names the migration and the error"
assert_exit 1 "$SANDBOXD" migrate --database-url "$url" --status
assert_contains "$ITEST_OUT" "schema: 1 pending of $n_files" "still pending after the failed dry run"
"$ITEST_PGBIN/psql" -X -q -At "$url" -c "INSERT INTO schema_migrations (version, name, checksum) VALUES ('${last%%_*}', '$last', '$sum')" >/dev/null
assert_exit 0 "$SANDBOXD" migrate --database-url "$url" --status
# a schema newer than this sandboxd: a recorded migration it does not know
"$ITEST_PGBIN/psql" -X -q -At "$url" -c "INSERT INTO schema_migrations (version, name, checksum) VALUES ('9999', '9999_future.sql', 'x')" >/dev/null
assert_exit 1 "$SANDBOXD" migrate --database-url "$url" --status
assert_contains "$ITEST_OUT" "9999_future.sql" "status names a migration this sandboxd does not know"
assert_contains "$ITEST_OUT" "the schema is newer" "and says what it means"
"$ITEST_PGBIN/psql" -X -q -At "$url" -c "DELETE FROM schema_migrations WHERE version = '9999'" >/dev/null

# Pretend the landed 0001 file was edited after it was applied.
"$ITEST_PGBIN/psql" -X -q -At "$url" -c "UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE version = '0001'"
assert_exit 1 "$SANDBOXD" migrate --database-url "$url"
assert_contains "$ITEST_ERR" "0001_initial.sql was changed after it was applied" "migrate refusal"

port=$(itest_free_port)
assert_exit 1 timeout 30 "$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port"
assert_contains "$ITEST_ERR" "was changed after it was applied" "controller refusal"
echo "migrate applies once, then refuses a changed migration"
