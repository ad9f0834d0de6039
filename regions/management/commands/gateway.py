"""``manage.py gateway --listen HOST:PORT [--region NAME] [--workers N]``: the OpenAI gateway.

Every request is routed by the engine over the control plane's fleet, published table and
heartbeats (``regions.decisions.source``), and authenticated with tokens of role ``client``
(``create_token --role client``). Clients use ``http://HOST:PORT/v1`` as their OpenAI base URL.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from regions import conf
from regions.decisions.source import DjangoControlPlane
from trafficmgr.gateway.server import parse_listen, serve
from trafficmgr.gateway.settings import (
    DEFAULT_BODY_BYTES,
    HTTP_SERVERS,
    GatewaySettings,
    add_client_flags,
    client_limits,
    networks,
)
from trafficmgr.requestpath import RequestPathConfig
from trafficmgr.requestpath.credentials import add_secret_flags, upstream_key
from trafficmgr.requestpath.shared.config import add_sharing_flags, sharing_from
from trafficmgr.routing.picker import DEFAULT_STRATEGY, STRATEGIES


class Command(BaseCommand):
    help = "Serve the OpenAI-compatible gateway; every request is routed by the engine."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--listen", default="127.0.0.1:8080", help="HOST:PORT")
        parser.add_argument("--region", help="serve this region's clients from it only")
        parser.add_argument("--workers", type=int, default=1, help="processes (SO_REUSEPORT)")
        parser.add_argument(
            "--strategy", default=DEFAULT_STRATEGY, choices=STRATEGIES, help="default picker"
        )
        parser.add_argument(
            "--trusted-proxy",
            action="append",
            default=[],
            help="address or CIDR whose X-Forwarded-For is believed (repeat)",
        )
        parser.add_argument("--max-body-bytes", type=int, default=DEFAULT_BODY_BYTES)
        parser.add_argument(
            "--upstream-key", help="bearer token sent to the endpoints (visible: prefer the file)"
        )
        add_secret_flags(parser, tokens=False)
        parser.add_argument("--access-log", action="store_true")
        add_client_flags(parser)
        parser.add_argument(
            "--http-server",
            default="own",
            choices=HTTP_SERVERS,
            help="the HTTP server under the routes: the project's own, or uvicorn",
        )
        add_sharing_flags(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            parse_listen(options["listen"])
            trusted = networks(options["trusted_proxy"])
            key, warnings = upstream_key(
                options["upstream_key"], options["upstream_key_file"], os.environ
            )
            limits = client_limits(options)
            sharing = sharing_from(options, os.environ)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        if options["workers"] < 1 or options["max_body_bytes"] < 1:
            raise CommandError("--workers and --max-body-bytes must be at least 1")
        settings = GatewaySettings(
            max_body_bytes=options["max_body_bytes"],
            trusted_proxies=trusted,
            upstream_api_key=key,
            metrics_token=conf.metrics_token() or None,
            access_log=options["access_log"],
            client_limits=limits,
            http_server=options["http_server"],
        )
        for warning in warnings:
            self.stderr.write(f"warning: {warning}")
        config = RequestPathConfig(default_strategy=options["strategy"], sharing=sharing)
        connections.close_all()  # each worker opens its own after the fork
        serve(
            DjangoControlPlane,
            options["listen"],
            options["region"],
            options["workers"],
            settings=settings,
            config=config,
        )
