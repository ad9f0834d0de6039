"""``manage.py epp --listen HOST:PORT [--region NAME]``: the Envoy endpoint picker (ext_proc v3,
the Gateway API Inference Extension protocol), deciding with the control plane's fleet, table
and heartbeats and checking ``client`` tokens like the gateway. ``manage.py envoy_config``
prints the Envoy bootstrap that points at it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Any

import uvloop
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
from trafficmgr.requestpath.shared.config import sharing_from
from trafficmgr.requestpath.shared.upkeep import SharedUpkeep, serve_metrics


class Command(BaseCommand):
    help = "Serve the Envoy endpoint picker (ext_proc gRPC) with the engine's decisions."

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            settings = settings_from_args(argparse.Namespace(**options))
            tls = tls_from_args(argparse.Namespace(**options))
            sharing = sharing_from(options, os.environ)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        config = RequestPathConfig(region=options["region"], sharing=sharing)
        core = RequestPath(DjangoControlPlane(), config)
        warn_unlocatable(core, settings)
        if options.get("metrics_listen"):
            serve_metrics(core, options["metrics_listen"], "trafficmgr_epp")
        # uvloop: about a tenth less CPU per request under grpc.aio (bench/epp/cpu.py)
        uvloop.run(self._run(core, options["listen"], settings, tls))

    async def _run(
        self, core: RequestPath, listen: str, settings: Any, tls: ServerTls | None
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
