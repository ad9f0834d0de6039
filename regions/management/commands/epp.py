"""``manage.py epp --listen HOST:PORT [--region NAME]``: the Envoy endpoint picker (ext_proc v3,
the Gateway API Inference Extension protocol), deciding with the control plane's fleet, table
and heartbeats and checking ``client`` tokens like the gateway. ``manage.py envoy_config``
prints the Envoy bootstrap that points at it.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from regions.decisions.source import DjangoControlPlane
from trafficmgr.epp.cli import (
    add_arguments,
    settings_from_args,
    tls_from_args,
    warn_unlocatable,
)
from trafficmgr.epp.server import ServerTls, serve
from trafficmgr.requestpath import RequestPath, RequestPathConfig


class Command(BaseCommand):
    help = "Serve the Envoy endpoint picker (ext_proc gRPC) with the engine's decisions."

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = settings_from_args(argparse.Namespace(**options))
            tls = tls_from_args(argparse.Namespace(**options))
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        core = RequestPath(DjangoControlPlane(), RequestPathConfig(region=options["region"]))
        warn_unlocatable(core, settings)
        asyncio.run(self._run(core, options["listen"], settings, tls))

    async def _run(
        self, core: RequestPath, listen: str, settings: Any, tls: ServerTls | None
    ) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await serve(core, listen, settings, core.maintain, core.config.loads_ttl_s, stop, tls)
