#!/bin/sh
# Initialises the cluster on first start (password auth, from
# POSTGRES_PASSWORD), then runs postgres in the foreground on its unix
# socket alone: no TCP port, so nothing on a network (the host's bridge
# address included) reaches it. The manager shares the socket's directory
# (a volume). PGPASSFILE lets `docker exec <oltp> psql` in.
set -eu
: "${POSTGRES_USER:=affido}" "${POSTGRES_DB:=affido}"
if [ -z "${POSTGRES_PASSWORD:-}" ]; then
  echo "affido-postgres: POSTGRES_PASSWORD is required" >&2
  exit 1
fi
(umask 077 && printf '*:*:*:%s:%s\n' "$POSTGRES_USER" "$POSTGRES_PASSWORD" > "$PGPASSFILE")
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" --auth-local=scram-sha-256 --auth-host=reject -E UTF8 >/dev/null
  rm -f "$pwfile"
  # The setup server listens on a socket of its own: nothing else (the
  # manager waiting for the database) reaches it, only to see it shut down.
  setup=$(mktemp -d)
  postgres -D "$PGDATA" -c listen_addresses='' -c unix_socket_directories="$setup" &
  pid=$!
  until pg_isready -q -h "$setup"; do sleep 0.1; done
  if [ "$POSTGRES_DB" != postgres ]; then
    createdb -h "$setup" -U "$POSTGRES_USER" "$POSTGRES_DB"
  fi
  kill "$pid"; wait "$pid" || true
  rm -rf "$setup"
fi
# With agent storage on Postgres (AFFIDO_AGENT_STORAGE=postgres) every open
# agent holds a connection: room for them, 40 slots only superusers (the
# manager's registry pool) may take, so agents can never crowd the registry
# out, and 10 s to authenticate, so a connection that stalls there holds
# its slot briefly.
exec postgres -D "$PGDATA" -c listen_addresses='' -c unix_socket_directories=/var/run/postgresql \
  -c max_connections=500 -c superuser_reserved_connections=40 -c authentication_timeout=10s
