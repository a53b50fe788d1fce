#!/bin/sh
# The compose deployment's controller (docker-compose.yml): migrates the
# database once it answers, makes the bootstrap tokens once (an admin's and
# the worker's, in the secrets volume, mode 600), then runs the controller.
set -eu
: "${SANDBOX_DATABASE_URL:?}"
i=0
until sandboxd migrate --database-url "$SANDBOX_DATABASE_URL" >/tmp/migrate.log 2>&1; do
  i=$((i + 1))
  if [ "$i" -ge 90 ]; then
    cat /tmp/migrate.log >&2
    echo "controller.sh: the database did not answer in 90 s" >&2
    exit 1
  fi
  sleep 1
done
umask 077
token() { # FILE ROLE NAME [--worker NAME]: made once
  if [ ! -s "/secrets/$1" ]; then
    f=$1 role=$2 name=$3
    shift 3
    sandboxd token create --database-url "$SANDBOX_DATABASE_URL" --tenant default --role "$role" --name "$name" "$@" \
      >"/secrets/$f.tmp"
    mv "/secrets/$f.tmp" "/secrets/$f"
    echo "controller.sh: made the $role token /secrets/$f"
  fi
}
token admin.token admin compose-admin
token worker.token worker compose-worker --worker "${SANDBOX_COMPOSE_WORKER_NAME:-compose-worker}"
exec sandboxd controller
