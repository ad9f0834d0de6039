# The request path's hot modules compiled with mypyc (the list: pyproject.toml,
# [tool.trafficmgr.compiled]; the build: scripts/build_compiled.py), in a
# stage with a C compiler; the image gets them beside the same sources (docs/gateway.md,
# "Compiled request path").
# PYTHON_IMAGE: the base of both stages; where no registry is reachable, a stand-in built
# offline (scripts/podman/build-base-images.sh; docs/operations.md).
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE} AS compiled
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /build
COPY pyproject.toml README.md ./
COPY trafficmgr trafficmgr
COPY scripts/build_compiled.py scripts/build_compiled.py
# the dev extra: mypy, and the stubs its type check of the sources needs (as make install)
RUN pip install --no-cache-dir ".[dev]" \
    && python scripts/build_compiled.py --mypyc mypyc --out out

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY trafficmgr trafficmgr
COPY regions regions
COPY dashboard dashboard
COPY agents agents
COPY manage.py ./
COPY examples examples
RUN pip install --no-cache-dir . \
    && useradd --uid 10001 --create-home trafficmgr \
    && mkdir -p /app/var && chown trafficmgr /app/var
# the compiled modules beside both copies of the same sources: the installed package, and
# /app's, which comes first on the path of what runs from /app (manage.py, python -m)
COPY --from=compiled /build/out/src/ /usr/local/lib/python3.11/site-packages/
COPY --from=compiled /build/out/src/ /app/
USER 10001
EXPOSE 8000 5353/udp 5353/tcp
# The web process, as docker-compose.yml runs it (which also says why each flag); uvicorn reads
# the number of worker processes from WEB_CONCURRENCY.
ENV WEB_CONCURRENCY=2
CMD ["uvicorn", "trafficmgr.asgi:application", "--host", "0.0.0.0", "--port", "8000", \
     "--lifespan", "off", "--no-access-log", "--ws-per-message-deflate", "false", \
     "--ws-max-size", "65536", "--timeout-graceful-shutdown", "10"]
