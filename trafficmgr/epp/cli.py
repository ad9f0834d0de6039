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

import uvloop

from trafficmgr.epp.envoy_config import bootstrap_endpoints, check_listen
from trafficmgr.epp.exchange import ExchangeSettings
from trafficmgr.epp.server import ServerTls, serve
from trafficmgr.requestpath.config import RequestPathConfig
from trafficmgr.requestpath.core import RequestPath
from trafficmgr.requestpath.credentials import add_secret_flags, client_tokens
from trafficmgr.requestpath.reading import IpNetwork, networks
from trafficmgr.requestpath.shared.config import add_sharing_flags, sharing_from
from trafficmgr.requestpath.shared.upkeep import SharedUpkeep, serve_metrics
from trafficmgr.requestpath.source import StaticSource
from trafficmgr.requestpath.types import ClientIdentity
from trafficmgr.routing.residency import untrusted_proxy_warning


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The EPP's own options (shared with the ``epp`` management command)."""
    parser.add_argument(
        "--listen", default="127.0.0.1:9002", help="HOST:PORT or unix:/PATH for gRPC"
    )
    parser.add_argument(
        "--envoy-bootstrap",
        metavar="FILE",
        help="the bootstrap Envoy runs (envoy_config's): plans naming other endpoints get 503",
    )
    parser.add_argument("--tls-cert", help="serve mTLS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="its private key (PEM)")
    parser.add_argument("--tls-client-ca", help="the CA a client (Envoy) certificate must chain to")
    parser.add_argument("--region", help="route inside this region only")
    parser.add_argument(
        "--full-duplex",
        action="store_true",
        help="assume FULL_DUPLEX_STREAMED bodies when Envoy does not say (it does since 1.34)",
    )
    parser.add_argument("--max-body-bytes", type=int, default=4 << 20)
    parser.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="CIDR",
        help="a proxy in front of Envoy whose x-forwarded-for entry is believed (repeatable)",
    )
    parser.add_argument("--trusted-hops", type=int, help=argparse.SUPPRESS)  # gone: says so
    parser.add_argument(
        "--metrics-listen",
        metavar="HOST:PORT",
        help="serve Prometheus /metrics here (the shared state's figures, in flight)",
    )
    add_sharing_flags(parser)


def settings_from_args(args: argparse.Namespace) -> ExchangeSettings:
    check_listen(args.listen)
    if args.max_body_bytes < 1:
        raise ValueError("--max-body-bytes must be positive")
    if args.trusted_hops is not None:
        raise ValueError(
            "--trusted-hops is gone: name the proxies in front of Envoy with "
            "--trusted-proxy CIDR (repeatable), as the gateway does"
        )
    return ExchangeSettings(
        max_body_bytes=args.max_body_bytes,
        trusted_proxies=_trusted(args.trusted_proxy),
        full_duplex=args.full_duplex,
        envoy_endpoints=_envoy_endpoints(args.envoy_bootstrap),
    )


def _trusted(specs: Sequence[str]) -> tuple[IpNetwork, ...]:
    try:
        return networks(specs)
    except ValueError as exc:
        raise ValueError(f"--trusted-proxy: {exc}") from None


def _envoy_endpoints(path: str | None) -> frozenset[tuple[str, str]] | None:
    if path is None:
        logging.getLogger("trafficmgr.epp").warning(
            "no --envoy-bootstrap: plans are not checked against Envoy's endpoints"
        )
        return None
    try:
        return bootstrap_endpoints(path)
    except OSError as exc:
        raise ValueError(f"--envoy-bootstrap: {exc}") from None


def warn_unlocatable(core: RequestPath, settings: ExchangeSettings) -> None:
    """Log a warning when no proxy is trusted and the fleet has residency rules."""
    if settings.trusted_proxies:
        return
    warning = untrusted_proxy_warning(core.snapshot().fleet)
    if warning is not None:
        logging.getLogger("trafficmgr.epp").warning("endpoint picker: %s", warning)


def tls_from_args(args: argparse.Namespace) -> ServerTls | None:
    """The mTLS material named by ``--tls-cert``, ``--tls-key``, ``--tls-client-ca``, if any."""
    named = (args.tls_cert, args.tls_key, args.tls_client_ca)
    if not any(named):
        return None
    if not all(named):
        raise ValueError("--tls-cert, --tls-key and --tls-client-ca go together")
    try:
        return ServerTls.from_files(args.tls_cert, args.tls_key, args.tls_client_ca)
    except OSError as exc:
        raise ValueError(f"--tls-*: {exc}") from None


def _tokens(values: Sequence[str]) -> dict[str, ClientIdentity]:
    """``SECRET[=NAME[@TENANT]]`` → the identity it stands for."""
    tokens = {}
    for value in values:
        secret, _, who = value.partition("=")
        name, _, tenant = (who or "client").partition("@")
        tokens[secret] = ClientIdentity(name, tenant or None)
    return tokens


async def _run(
    core: RequestPath, listen: str, settings: ExchangeSettings, tls: ServerTls | None
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    upkeep = SharedUpkeep(core)
    try:
        await serve(core, listen, settings, upkeep, core.config.loads_ttl_s, stop, tls)
    finally:
        await asyncio.to_thread(upkeep.stop)


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
        tls = tls_from_args(args)
        secrets, warnings = client_tokens(args.token, args.token_file, os.environ)
        source = StaticSource.from_file(args.fleet, _tokens(secrets))
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    for warning in warnings:
        logging.getLogger("trafficmgr.epp").warning(warning)
    try:
        config = RequestPathConfig(region=args.region, sharing=sharing_from(vars(args), os.environ))
    except ValueError as exc:
        parser.error(str(exc))
    core = RequestPath(source, config)
    warn_unlocatable(core, settings)
    if args.metrics_listen:
        serve_metrics(core, args.metrics_listen, "trafficmgr_epp")
    # uvloop: about a tenth less CPU per request under grpc.aio (bench/epp/cpu.py)
    uvloop.run(_run(core, args.listen, settings, tls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
