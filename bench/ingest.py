"""Heartbeats per second through the whole HTTP stack (daphne → Django → DRF → ingest).

Each client thread owns a slice of the endpoints and sends their heartbeats (8 GPUs each,
agent-shaped, ~3 KB) with increasing seq, authenticated with the region's agent token. Every
request is validated, authorised, compared-and-set into the hot state and counted; one in
ten seconds per endpoint also writes a history row.

Run: .venv/bin/python bench/ingest.py [--duration 10] [--concurrency 8]
     [--redis-url redis://127.0.0.1:6379/13] [--database-url postgres://...]
"""

from __future__ import annotations

import itertools

from http_load import agent_tokens, arguments, heartbeat_body, load, prepare, serve, stop


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    env = prepare(args)
    from regions.services import fleet_snapshot

    endpoints = [(e.name, e.region) for e in fleet_snapshot().endpoints()]
    tokens = agent_tokens()
    seq = itertools.count(1)
    port = __import__("http_load").free_port()
    server = serve(env, port)
    try:

        def make(worker: int, i: int) -> tuple[str, bytes, dict[str, str]]:
            share = endpoints[worker :: args.concurrency]
            name, region = share[i % len(share)]
            headers = {
                "Authorization": f"Bearer {tokens[region]}",
                "Content-Type": "application/json",
            }
            return "/api/v1/heartbeats/", heartbeat_body(name, next(seq)), headers

        results = load(port, make, args.concurrency, args.duration)
    finally:
        stop(server)
    mode = "redis" if args.redis_url else "in-process"
    print(
        f"ingest ({mode} hot state, {env['DATABASE_URL'].split(':')[0]}, one daphne process, "
        f"{args.concurrency} connections, {len(endpoints)} endpoints)"
    )
    results.report("heartbeats")


if __name__ == "__main__":
    main()
