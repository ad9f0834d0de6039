#!/usr/bin/env bash
# Install vLLM Router (the vllm-router wheel: a Rust binary shipped on PyPI) into its own
# virtualenv, var/vllm-router-venv, and print the binary's path. Used by the gateway's peer
# benchmarks (bench/gateway_*.py --vllm-router) and tests/gateway/test_vllm_router_peer.py.
# Separate from .venv: the wheel brings its own Python dependencies, which the project does not
# need. Installing the wheel is setup; nothing is downloaded when the router runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION="${VLLM_ROUTER_VERSION:-0.1.17}"
PYTHON="${PYTHON:-python3}"
VENV=var/vllm-router-venv  # under var/: ignored by git, removed by make clean
BINARY="$VENV/bin/vllm-router"
if [ ! -x "$BINARY" ]; then
  test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "vllm-router==$VERSION"
fi
test -x "$BINARY"
"$VENV/bin/python" -m pip show vllm-router 2>/dev/null | sed -n 's/^Version: /vllm-router /p' >&2
echo "$(pwd)/$BINARY"
