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
CMD ["daphne", "-b", "0.0.0.0", "-p", "8000", "trafficmgr.asgi:application"]
