#!/bin/sh
# The compose deployment's worker (docker-compose.yml): waits for the token
# the controller made for it, then runs the worker against the host's Docker.
set -eu
i=0
until [ -s /secrets/worker.token ]; do
  i=$((i + 1))
  if [ "$i" -ge 120 ]; then
    echo "worker.sh: no /secrets/worker.token after 120 s: is the controller up?" >&2
    exit 1
  fi
  sleep 1
done
SANDBOX_WORKER_TOKEN=$(cat /secrets/worker.token)
export SANDBOX_WORKER_TOKEN
exec sandboxd worker
