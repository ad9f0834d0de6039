#!/usr/bin/env bash
# Build trafficmgr:latest with the repository's Dockerfile (both stages, the compiled request path
# included) on the stand-in Python base (build-base-images.sh), and report its size. The image is
# kept while its inputs are unchanged (a label with the hash of the files the build context
# holds); REBUILD=1 builds it again.
set -euo pipefail
. "$(dirname "$0")/env.sh"
cd "$ROOT"
IMAGE="${IMAGE:-trafficmgr:latest}"
PYTHON_IMAGE="${PYTHON_IMAGE:-localhost/trafficmgr-base/python:3.11}"

# The context: the committed tree (HEAD, as a fresh clone has it; SOURCE=worktree takes the
# working tree with its uncommitted changes instead), less what .dockerignore leaves out.
# The inputs: what the Dockerfile's COPY lines name (the sources of each, not the destination).
if [ "${SOURCE:-HEAD}" = worktree ]; then
  dockerfile="$(cat Dockerfile)"
else
  dockerfile="$(git show HEAD:Dockerfile)"
fi
mapfile -t PATHS < <(echo "$dockerfile" \
  | awk '/^COPY / && !/--from/ {for (i = 2; i < NF; i++) print $i}' | sort -u)
PATHS+=(Dockerfile .dockerignore)
if [ "${SOURCE:-HEAD}" = worktree ]; then
  context="$ROOT"
  inputs="$(git ls-files -co --exclude-standard -- "${PATHS[@]}" | grep -v __pycache__ | sort \
    | xargs sha256sum)"
else
  context="$PODMAN_VAR/context"
  rm -rf "$context" && mkdir -p "$context"
  git archive --format=tar HEAD -- "${PATHS[@]}" | tar -x -C "$context"
  inputs="$(git rev-parse "${PATHS[@]/#/HEAD:}")"
fi
hash="$( (echo "$PYTHON_IMAGE"; podman image inspect --format '{{.Id}}' "$PYTHON_IMAGE"; echo "$inputs") \
  | sha256sum | cut -c1-16)"
if [ "${REBUILD:-0}" != 1 ] \
  && [ "$(podman image inspect --format '{{index .Labels "trafficmgr.inputs"}}' "$IMAGE" 2>/dev/null)" = "$hash" ]; then
  echo "kept $IMAGE"
else
  start=$(date +%s)
  podman build --network host "${BUILD_ULIMITS[@]}" --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE" \
    --label "trafficmgr.inputs=$hash" -t "$IMAGE" "$context" >"$PODMAN_VAR/build-image.log" 2>&1 \
    || { tail -60 "$PODMAN_VAR/build-image.log" >&2; exit 1; }
  echo "built $IMAGE in $(( $(date +%s) - start )) s"
fi
podman image inspect --format "$IMAGE: {{.Size}} bytes" "$IMAGE"
