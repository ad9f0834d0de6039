"""``python -m trafficmgr.gateway``: the gateway without a control plane (benchmarks, trials).

The fleet comes from a fleet file and the routing table is the engine's static one (residency
applied); clients authenticate with the tokens given by ``--token-file``,
``TRAFFICMGR_CLIENT_TOKENS`` or ``--token`` (``trafficmgr.requestpath.credentials``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.gateway.server import serve
from trafficmgr.gateway.settings import (
    DEFAULT_BODY_BYTES,
    HTTP_SERVERS,
    GatewaySettings,
    add_client_flags,
    client_limits,
    networks,
    tracing_wanted,
)
from trafficmgr.requestpath import ClientIdentity, RequestPathConfig, StaticSource
from trafficmgr.requestpath.credentials import (
    add_secret_flags,
    client_tokens,
    metrics_token,
    upstream_key,
)
from trafficmgr.requestpath.shared.config import add_sharing_flags, sharing_from
from trafficmgr.routing.picker import DEFAULT_STRATEGY, STRATEGIES


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m trafficmgr.gateway", description=__doc__)
    p.add_argument("--fleet", required=True, help="fleet file (YAML)")
    p.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT")
    p.add_argument(
        "--token",
        action="append",
        default=[],
        help="a client token (repeat; visible in the process list: prefer --token-file)",
    )
    p.add_argument("--region", help="serve this region only")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--strategy", default=DEFAULT_STRATEGY, choices=STRATEGIES)
    p.add_argument("--trusted-proxy", action="append", default=[], help="address or CIDR")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_BODY_BYTES)
    p.add_argument(
        "--upstream-key", help="bearer token sent to the endpoints (visible: prefer the file)"
    )
    add_secret_flags(p)
    p.add_argument("--access-log", action="store_true")
    p.add_argument(
        "--first-byte-timeout",
        type=float,
        default=GatewaySettings().first_byte_timeout_s,
        help="seconds a stream may wait for its first event before it is retried elsewhere",
    )
    p.add_argument(
        "--otlp-endpoint",
        help="trace requests with OpenTelemetry, exported over OTLP/HTTP to this collector "
        "(e.g. http://127.0.0.1:4318); without it the OTEL_* variables decide",
    )
    add_client_flags(p)
    p.add_argument(
        "--http-server",
        default="own",
        choices=HTTP_SERVERS,
        help="the HTTP server under the routes: the project's own, or uvicorn (docs/gateway.md)",
    )
    add_sharing_flags(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.access_log else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    try:
        fleet = load_fleet_file(args.fleet)
        trusted = networks(args.trusted_proxy)
        secrets, warnings = client_tokens(args.token, args.token_file, os.environ)
        key, more = upstream_key(args.upstream_key, args.upstream_key_file, os.environ)
        if not secrets:
            raise ValueError("no client token: give --token-file PATH or $TRAFFICMGR_CLIENT_TOKENS")
        limits = client_limits(vars(args))
        sharing = sharing_from(vars(args), os.environ)
        tracing_wanted(GatewaySettings(otlp_endpoint=args.otlp_endpoint), os.environ)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for warning in warnings + more:
        print(f"warning: {warning}", file=sys.stderr)
    tokens = {t: ClientIdentity(f"token-{i + 1}") for i, t in enumerate(secrets)}
    settings = GatewaySettings(
        max_body_bytes=args.max_body_bytes,
        trusted_proxies=trusted,
        upstream_api_key=key,
        metrics_token=metrics_token(os.environ),
        access_log=args.access_log,
        first_byte_timeout_s=args.first_byte_timeout,
        otlp_endpoint=args.otlp_endpoint,
        client_limits=limits,
        http_server=args.http_server,
    )
    config = RequestPathConfig(default_strategy=args.strategy, sharing=sharing)
    serve(
        StaticSource(fleet, tokens),
        args.listen,
        args.region,
        args.workers,
        settings=settings,
        config=config,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
