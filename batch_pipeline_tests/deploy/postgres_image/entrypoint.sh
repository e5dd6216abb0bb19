#!/bin/sh
# The official image's first start, reduced to what the compose file needs: a cluster owned by
# POSTGRES_USER (password auth over TCP), the POSTGRES_DB database, then postgres itself.
set -e
if [ "${1#-}" != "$1" ]; then
  set -- postgres "$@"
fi
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s' "$POSTGRES_PASSWORD" > /tmp/password
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile=/tmp/password --auth-local=trust \
    --auth-host=scram-sha-256 >/dev/null
  rm /tmp/password
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
  database="${POSTGRES_DB:-$POSTGRES_USER}"
  if [ "$database" != postgres ]; then
    createdb -U "$POSTGRES_USER" "$database"
  fi
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
fi
exec "$@"
