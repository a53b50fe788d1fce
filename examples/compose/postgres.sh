#!/bin/sh
# The compose deployment's PostgreSQL 15 (docker-compose.yml): a cluster
# in the pgdata volume, made at its first start with a role and database
# "sandbox" (password POSTGRES_PASSWORD, scram-sha-256 over the network).
set -eu
PGDATA=/var/lib/postgresql/data
BIN=/usr/lib/postgresql/15/bin
as_pg() { setpriv --reuid=postgres --regid=postgres --init-groups "$@"; }
mkdir -p "$PGDATA" /run/postgresql
chown postgres:postgres "$PGDATA" /run/postgresql
chmod 700 "$PGDATA"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  : "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
  as_pg "$BIN/initdb" -D "$PGDATA" -U postgres -E UTF8 --auth-local=peer --auth-host=scram-sha-256 >/dev/null
  echo "listen_addresses = '*'" >>"$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  as_pg "$BIN/pg_ctl" -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  printf '%s\n' "CREATE ROLE sandbox LOGIN PASSWORD :'pw';" "CREATE DATABASE sandbox OWNER sandbox;" |
    as_pg psql -X -q -v ON_ERROR_STOP=1 -v pw="$POSTGRES_PASSWORD" -d postgres
  as_pg "$BIN/pg_ctl" -D "$PGDATA" -m fast -w stop >/dev/null
  echo "postgres.sh: made the cluster, role and database sandbox"
fi
exec setpriv --reuid=postgres --regid=postgres --init-groups "$BIN/postgres" -D "$PGDATA"
