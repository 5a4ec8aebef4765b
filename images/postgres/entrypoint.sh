#!/bin/sh
# Initialises the cluster on first start (password auth for the network, from
# POSTGRES_PASSWORD), then runs postgres in the foreground.
set -eu
: "${POSTGRES_USER:=affido}" "${POSTGRES_DB:=affido}"
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  if [ -z "${POSTGRES_PASSWORD:-}" ]; then
    echo "affido-postgres: POSTGRES_PASSWORD is required on first start" >&2
    exit 1
  fi
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 -E UTF8 >/dev/null
  rm -f "$pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  postgres -D "$PGDATA" -c listen_addresses='' &
  pid=$!
  until pg_isready -q -h /var/run/postgresql; do sleep 0.1; done
  if [ "$POSTGRES_DB" != postgres ]; then
    createdb -h /var/run/postgresql -U "$POSTGRES_USER" "$POSTGRES_DB"
  fi
  kill "$pid"; wait "$pid" || true
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/var/run/postgresql
