#!/bin/sh
# As the official image: initialise an empty data directory (UTF-8) with POSTGRES_USER/PASSWORD/DB,
# password authentication from anywhere, then run the server as postgres.
set -eu
: "${POSTGRES_USER:=postgres}" "${POSTGRES_DB:=$POSTGRES_USER}"
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
chown -R postgres:postgres "$PGDATA" /var/run/postgresql
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
  chown postgres "$pwfile"
  su postgres -s /bin/sh -c "initdb -D '$PGDATA' -U '$POSTGRES_USER' --pwfile='$pwfile' -A scram-sha-256 -E UTF8 --locale=C.UTF-8" >/dev/null
  rm -f "$pwfile"
  echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
  su postgres -s /bin/sh -c "pg_ctl -D '$PGDATA' -o '-c listen_addresses=' -w start" >/dev/null
  if [ "$POSTGRES_DB" != postgres ]; then
    su postgres -s /bin/sh -c "PGPASSWORD='$POSTGRES_PASSWORD' createdb -h /var/run/postgresql -U '$POSTGRES_USER' '$POSTGRES_DB'"
  fi
  su postgres -s /bin/sh -c "pg_ctl -D '$PGDATA' -m fast -w stop" >/dev/null
fi
if [ "$1" = postgres ]; then
  shift
  exec su postgres -s /bin/sh -c 'exec postgres -D "$PGDATA" -c listen_addresses="*" "$@"' -- postgres "$@"
fi
exec "$@"
