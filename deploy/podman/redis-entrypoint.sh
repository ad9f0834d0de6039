#!/bin/sh
# As the official image: redis-server on every address, protected mode off, as redis.
set -eu
if [ "$1" = redis-server ]; then
  shift
  exec setpriv --reuid=redis --regid=redis --init-groups redis-server --bind '* -::*' --protected-mode no "$@"
fi
exec "$@"
