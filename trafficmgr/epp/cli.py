"""Command line of the endpoint picker: ``python -m trafficmgr.epp --fleet FILE ...``.

Runs the request-path core over a fleet file (``StaticSource``: the fleet, its static
routing table, fixed client tokens) behind the ext_proc server. The ``epp`` management
command builds the same server over the control plane instead, through ``add_arguments``,
``settings_from_args`` and ``trafficmgr.epp.server.serve``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Sequence

from trafficmgr.epp.envoy_config import split_host_port
from trafficmgr.epp.exchange import ExchangeSettings
from trafficmgr.epp.server import serve
from trafficmgr.requestpath.config import RequestPathConfig
from trafficmgr.requestpath.core import RequestPath
from trafficmgr.requestpath.credentials import add_secret_flags, client_tokens
from trafficmgr.requestpath.source import StaticSource
from trafficmgr.requestpath.types import ClientIdentity


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The EPP's own options (shared with the ``epp`` management command)."""
    parser.add_argument("--listen", default="127.0.0.1:9002", help="HOST:PORT for gRPC")
    parser.add_argument("--region", help="route inside this region only")
    parser.add_argument(
        "--full-duplex",
        action="store_true",
        help="assume FULL_DUPLEX_STREAMED bodies when Envoy does not say (it does since 1.34)",
    )
    parser.add_argument("--max-body-bytes", type=int, default=4 << 20)
    parser.add_argument(
        "--trusted-hops",
        type=int,
        default=0,
        help="proxies in front of Envoy that append to x-forwarded-for",
    )


def settings_from_args(args: argparse.Namespace) -> ExchangeSettings:
    split_host_port(args.listen)
    if args.max_body_bytes < 1 or args.trusted_hops < 0:
        raise ValueError("--max-body-bytes must be positive, --trusted-hops not negative")
    return ExchangeSettings(
        max_body_bytes=args.max_body_bytes,
        trusted_hops=args.trusted_hops,
        full_duplex=args.full_duplex,
    )


def _tokens(values: Sequence[str]) -> dict[str, ClientIdentity]:
    """``SECRET[=NAME[@TENANT]]`` → the identity it stands for."""
    tokens = {}
    for value in values:
        secret, _, who = value.partition("=")
        name, _, tenant = (who or "client").partition("@")
        tokens[secret] = ClientIdentity(name, tenant or None)
    return tokens


async def _run(core: RequestPath, listen: str, settings: ExchangeSettings) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await serve(core, listen, settings, core.maintain, core.config.loads_ttl_s, stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trafficmgr.epp")
    parser.add_argument("--fleet", required=True, help="fleet YAML file")
    parser.add_argument(
        "--token",
        action="append",
        default=[],
        metavar="SECRET[=NAME[@TENANT]]",
        help="a client token to accept (repeatable; visible in the process list: prefer "
        "--token-file); without one every request gets 401",
    )
    add_secret_flags(parser, upstream_key=False)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
        secrets, warnings = client_tokens(args.token, args.token_file, os.environ)
        source = StaticSource.from_file(args.fleet, _tokens(secrets))
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for warning in warnings:
        logging.getLogger("trafficmgr.epp").warning(warning)
    core = RequestPath(source, RequestPathConfig(region=args.region))
    asyncio.run(_run(core, args.listen, settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
