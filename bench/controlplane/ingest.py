"""Heartbeats per second through the whole HTTP stack (ASGI server → ingest).

Each client thread owns a slice of the endpoints and sends their heartbeats (8 GPUs each,
agent-shaped, ~3 KB) with increasing seq, authenticated with the region's agent token. Every
request is validated, authorised, compared-and-set into the hot state and counted; the first
of each ten-second bucket per endpoint also yields a history row (written in the background
by the ASGI front, in the request by the Django views).

Run: .venv/bin/python -m bench.controlplane.ingest [--duration 10] [--concurrency 8]
     [--redis-url redis://127.0.0.1:6379/13] [--database-url postgres://...]
     [--server daphne|uvicorn] [--workers N] [--no-front] [--rate R] [--in-process N]

``--in-process N`` starts no server: it times N requests through the ASGI application in this
process (no sockets): with the front, through Django, and Django called synchronously.
"""

from __future__ import annotations

import itertools

from bench.controlplane.http_load import (
    agent_tokens,
    arguments,
    describe,
    heartbeat_template,
    load,
    prepare,
    report_in_process,
    serve,
    stop,
)
from bench.suite import free_port


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    env = prepare(args)
    from regions.fleet.services import fleet_snapshot

    endpoints = [(e.name, e.region) for e in fleet_snapshot().endpoints()]
    tokens = agent_tokens()
    bodies = {name: heartbeat_template(name) for name, _ in endpoints}
    seq = itertools.count(1)

    def make(worker: int, i: int) -> tuple[str, bytes, dict[str, str]]:
        share = endpoints[worker :: args.concurrency]
        name, region = share[i % len(share)]
        headers = {
            "Authorization": f"Bearer {tokens[region]}",
            "Content-Type": "application/json",
        }
        return "/api/v1/heartbeats/", bodies[name](next(seq)), headers

    if args.in_process:
        report_in_process("ingest", make, args.in_process)
        return
    port = free_port()
    server = serve(env, port, args)
    try:
        results = load(port, make, args.concurrency, args.duration, server, args.rate)
    finally:
        stop(server)
    mode = "redis" if args.redis_url else "in-process"
    print(
        f"ingest ({mode} hot state, {env['DATABASE_URL'].split(':')[0]}, {describe(args)}, "
        f"{len(endpoints)} endpoints)"
    )
    results.report("heartbeats")


if __name__ == "__main__":
    main()
