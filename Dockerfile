FROM python:3.11-slim
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
USER 10001
EXPOSE 8000 5353/udp 5353/tcp
# The web process, as docker-compose.yml runs it (which also says why each flag); uvicorn reads
# the number of worker processes from WEB_CONCURRENCY.
ENV WEB_CONCURRENCY=2
CMD ["uvicorn", "trafficmgr.asgi:application", "--host", "0.0.0.0", "--port", "8000", \
     "--lifespan", "off", "--no-access-log", "--ws-per-message-deflate", "false", \
     "--ws-max-size", "65536", "--timeout-graceful-shutdown", "10"]
