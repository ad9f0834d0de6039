#!/usr/bin/env bash
# Build, offline from any image registry, the base images the Dockerfile and docker-compose.yml
# name, from Debian bookworm's packages (docs/operations.md, "Podman without a registry"):
#   localhost/trafficmgr-base/debian:bookworm   debootstrap --variant=minbase, imported
#   localhost/trafficmgr-base/python:3.11       stands in for python:3.11-slim (build arg PYTHON_IMAGE)
#   localhost/trafficmgr-base/postgres:bookworm stands in for postgres:16 (deploy/podman/compose.podman.yml)
#   localhost/trafficmgr-base/redis:bookworm    stands in for redis:7 (the same override)
# An image whose inputs (its Containerfile, entrypoint, this script) are unchanged is kept:
# each carries a label with their hash. REBUILD=1 builds them all again.
# DEBIAN_MIRROR overrides the mirror read from /etc/apt/sources.list*.
set -euo pipefail
. "$(dirname "$0")/env.sh"
cd "$ROOT"

PREFIX=localhost/trafficmgr-base
HERE=deploy/podman
REBUILD="${REBUILD:-0}"
HOST_CA="${HOST_CA:-/etc/ssl/certs/ca-certificates.crt}"

mirror() {
  if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
  local found
  # deb822 files (URIs:) first, then one-line ones (deb URL SUITE ...); the archive, not security
  found="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {print $2}' \
    | grep -v -- '-security' | grep '/debian/\?$' | head -1 || true)"
  if [ -z "$found" ]; then
    found="$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
      | awk '$1 == "deb" && $3 ~ /^bookworm/ {print $2}' | grep -v -- '-security' | head -1 || true)"
  fi
  echo "${found:-http://deb.debian.org/debian}"
}

current() {  # NAME HASH: true when NAME exists with that inputs label
  [ "$REBUILD" = 1 ] && return 1
  [ "$(podman image inspect --format '{{index .Labels "trafficmgr.inputs"}}' "$1" 2>/dev/null)" = "$2" ]
}

build_debian() {
  local name="$PREFIX/debian:bookworm" hash rootfs
  hash="$(echo "debootstrap minbase bookworm $(mirror) v1" | sha256sum | cut -c1-16)"
  if current "$name" "$hash"; then echo "kept $name"; return; fi
  command -v debootstrap >/dev/null || { echo "debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
  rootfs="$(mktemp -d "$PODMAN_VAR/rootfs.XXXXXX")"
  trap 'rm -rf "$rootfs"' RETURN
  echo "debootstrap bookworm from $(mirror)"
  debootstrap --variant=minbase bookworm "$rootfs" "$(mirror)" >"$PODMAN_VAR/debootstrap.log"
  # The container's apt reads the same mirror; no caches or logs in the image.
  echo "deb $(mirror) bookworm main" >"$rootfs/etc/apt/sources.list"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*
  tar -C "$rootfs" -c . | podman import --change "LABEL trafficmgr.inputs=$hash" \
    --change 'CMD ["bash"]' - "$name" >/dev/null
  echo "built $name"
}

build_from() {  # NAME CONTAINERFILE [EXTRA INPUT...]
  local name="$1" file="$2" hash
  shift 2
  hash="$( (podman image inspect --format '{{.Id}}' "$PREFIX/debian:bookworm";
    cat "$file" "$@" "$HOST_CA") | sha256sum | cut -c1-16)"
  if current "$name" "$hash"; then echo "kept $name"; return; fi
  # The context: these files and the host's CA bundle (host-ca.crt), which pip in the Python
  # base trusts, as the host's does (a network may reach package indexes through a proxy
  # that signs with its own authority).
  local context log="$PODMAN_VAR/build-$(basename "$file").log"
  context="$(mktemp -d "$PODMAN_VAR/context.XXXXXX")"
  cp "$HERE"/* "$context/"
  cp "$HOST_CA" "$context/host-ca.crt"
  # host network: the package mirror is reached as the host reaches it
  podman build --network host "${BUILD_ULIMITS[@]}" --label "trafficmgr.inputs=$hash" \
    --build-arg "BASE=$PREFIX/debian:bookworm" -t "$name" -f "$context/$(basename "$file")" \
    "$context" >"$log" 2>&1 || { rm -rf "$context"; tail -40 "$log" >&2; exit 1; }
  rm -rf "$context"
  echo "built $name"
}

start=$(date +%s)
build_debian
build_from "$PREFIX/python:3.11" "$HERE/python.Containerfile"
build_from "$PREFIX/postgres:bookworm" "$HERE/postgres.Containerfile" "$HERE/postgres-entrypoint.sh"
build_from "$PREFIX/redis:bookworm" "$HERE/redis.Containerfile" "$HERE/redis-entrypoint.sh"
echo "base images ready in $(( $(date +%s) - start )) s"
