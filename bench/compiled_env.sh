#!/usr/bin/env bash
# Build the request path's hot modules with mypyc into var/compiled/src (a copy of the
# trafficmgr package with those modules as C extensions beside their sources) and print that
# directory. The decision core (routing engine pickers and estimator, the request path core)
# and the gateway's HTTP server and upstream client are pure, fully typed Python: mypyc
# compiles them as they are (the decision core runs about 2.4 times faster,
# bench/requestpath_core.py), with the same decisions and answers
# (tests/requestpath/test_compiled_build.py runs the engine's, the core's, the simulator's and
# the gateway's tests against this build).
#
# The development tree stays pure Python: nothing is compiled next to the sources (an extension
# module would shadow later edits of its .py), so this build is a separate copy, rebuilt here
# whenever a source file changed (a hash of every .py is kept beside it). Run the gateway from
# it with Python's safe path, so the checkout's sources do not come first:
#
#   PYTHONSAFEPATH=1 PYTHONPATH=$(bash bench/compiled_env.sh) .venv/bin/python -m trafficmgr.gateway ...
#
# The Dockerfile builds the same modules into the image. Needs a C compiler and mypy (the
# project's dev extra); MYPYC chooses the command, COMPILED_DIR the output directory.
set -euo pipefail
cd "$(dirname "$0")/.."
MYPYC="${MYPYC:-.venv/bin/mypyc}"
OUT="${COMPILED_DIR:-var/compiled}"
# The modules every proxied request runs through (the picker modules all together: an
# interpreted class may not subclass a compiled one), including the gateway's HTTP server, its
# request and response values (messages) and upstream client (asyncio protocols by their
# methods, not by subclassing asyncio.Protocol, for the same reason). Left interpreted: the gateway's proxy and app (their coroutines ran
# no fewer instructions compiled: the work they await is in asyncio and the compiled modules),
# the request path's values (types: a dataclass field annotated ``object`` does not import
# compiled), and the request reader both fronts share (requestpath/reading: body, SSE,
# client address), as the gateway's body and SSE parsing it replaced, which compiled ran more
# instructions, not fewer: the work is in msgspec.
MODULES=(
  trafficmgr/routing/ai_aware.py trafficmgr/routing/estimator.py trafficmgr/routing/pickbase.py
  trafficmgr/routing/picker.py trafficmgr/routing/prompt.py trafficmgr/routing/reported.py
  trafficmgr/routing/slowstart.py
  trafficmgr/requestpath/admission.py trafficmgr/requestpath/affinity.py
  trafficmgr/requestpath/budget.py trafficmgr/requestpath/core.py
  trafficmgr/requestpath/inflight.py trafficmgr/requestpath/learning.py
  trafficmgr/requestpath/outlier.py trafficmgr/requestpath/parse.py
  trafficmgr/requestpath/regionview.py trafficmgr/requestpath/placement.py
  trafficmgr/gateway/http.py trafficmgr/gateway/messages.py trafficmgr/gateway/upstream.py
)
if [ "${1:-}" = "--modules" ]; then
  printf '%s\n' "${MODULES[@]}"
  exit 0
fi
MYPYC_BIN=$(command -v "$MYPYC" || true)
if [ -z "$MYPYC_BIN" ]; then
  echo "mypyc not found ($MYPYC): make install brings it (mypy, the dev extra)" >&2
  exit 2
fi
MYPYC_BIN=$(realpath "$MYPYC_BIN")
HASH=$( (printf '%s\n' "${MODULES[@]}"; "$(dirname "$MYPYC_BIN")/mypy" --version 2>/dev/null || true; \
  find trafficmgr -name '*.py' -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16)
if [ -f "$OUT/source-hash" ] && [ "$(cat "$OUT/source-hash")" = "$HASH" ]; then
  echo "$(pwd)/$OUT/src"
  exit 0
fi
rm -rf "$OUT"
mkdir -p "$OUT/src"
cp -r trafficmgr "$OUT/src/"
find "$OUT/src" -name '__pycache__' -prune -exec rm -rf {} +
# mypyc builds with setuptools in the current directory: one without the project's files
(cd "$OUT/src" && "$MYPYC_BIN" "${MODULES[@]}" >"../build.log" 2>&1) || {
  tail -40 "$OUT/build.log" >&2
  echo "mypyc failed: $OUT/build.log" >&2
  exit 1
}
rm -rf "$OUT/src/build"
echo "$HASH" >"$OUT/source-hash"
echo "$(pwd)/$OUT/src"
