#!/usr/bin/env bash
# Install Hugging Face transformers (with its "serving" extra: `transformers serve`, an
# OpenAI-compatible server) and a CPU build of PyTorch into their own virtualenv,
# var/transformers-venv, and print the venv's path. Used by the interoperability tests
# (tests/gateway/test_interop_transformers.py), which build a tiny model offline and serve it;
# nothing is downloaded when the server runs. Separate from .venv: PyTorch and transformers'
# dependencies are large and the project itself does not need them.
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION="${TRANSFORMERS_VERSION:-5.24.0}"
# A CPU build: a plain or newer torch would bring the multi-GB CUDA build.
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
VENV=var/transformers-venv  # under var/: ignored by git, removed by make clean
STAMP="$VENV/.installed-transformers-$VERSION-torch-$TORCH_VERSION"
if [ ! -f "$STAMP" ]; then
  test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
    "torch==$TORCH_VERSION" "transformers[serving]==$VERSION"
  "$VENV/bin/transformers" serve --help >/dev/null
  rm -f "$VENV"/.installed-transformers-*
  touch "$STAMP"
fi
"$VENV/bin/python" -c 'import torch, transformers; print("transformers", transformers.__version__, "torch", torch.__version__)' >&2
echo "$(pwd)/$VENV"
