#!/usr/bin/env bash
# Migrations: `sandboxd migrate` applies the schema once, is a no-op the second
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
assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
assert_contains "$ITEST_OUT" "applied $n_files migration(s)" "first migrate"
tables=$("$ITEST_PGBIN/psql" -X -q -At "$url" -c \
  "SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'")
assert_eq "api_tokens,cluster,event_publisher,events,exec_output,exec_output_usage,operations,pools,routes,sandbox_usage,sandbox_usage_log,sandboxes,schema_migrations,tenants,workers" "$tables" "tables after migrate"

assert_exit 0 "$SANDBOXD" migrate --database-url "$url"
assert_contains "$ITEST_OUT" "applied 0 migration(s)" "second migrate"

# Pretend the landed 0001 file was edited after it was applied.
"$ITEST_PGBIN/psql" -X -q -At "$url" -c "UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE version = '0001'"
assert_exit 1 "$SANDBOXD" migrate --database-url "$url"
assert_contains "$ITEST_ERR" "0001_initial.sql was changed after it was applied" "migrate refusal"

port=$(itest_free_port)
assert_exit 1 timeout 30 "$SANDBOXD" controller --database-url "$url" --listen "127.0.0.1:$port"
assert_contains "$ITEST_ERR" "was changed after it was applied" "controller refusal"
echo "migrate applies once, then refuses a changed migration"
