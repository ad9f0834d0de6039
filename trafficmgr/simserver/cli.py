"""Command line of the simulated inference server (``python -m trafficmgr.simserver``).

``--fleet FILE`` serves every endpoint of a fleet (see ``layout`` for the port mapping);
``--listen HOST:PORT --gpu G --gpus N --models a,b`` serves one. The mapping is printed at
start, one line per endpoint, then ``ready``; Ctrl-C or SIGTERM stops it. Exit status 2 on
bad arguments or a bad fleet file, 1 when a socket cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import signal
import sys
from collections.abc import Sequence
from typing import TextIO

from trafficmgr.fleetfile import FleetError, load_fleet_file
from trafficmgr.simserver.faults import Fault, FaultError, parse_fault_flag
from trafficmgr.simserver.handlers import ServeOptions
from trafficmgr.simserver.layout import (
    DEFAULT_BASE_PORT,
    DEFAULT_HOST,
    EndpointSpec,
    fleet_specs,
    single_spec,
)
from trafficmgr.simserver.servers import SimServers, new_event_loop

_DEFAULTS = ServeOptions()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="trafficmgr-simserver",
        description="Simulated OpenAI-compatible inference server (vLLM-like) serving the "
        "endpoints of a fleet with the simulator's GPU model. See docs/simserver.md.",
    )
    p.add_argument("--fleet", help="fleet YAML file: serve its endpoints (or its GPU profiles)")
    p.add_argument("--endpoints", default="", help="with --fleet: only these, comma-separated")
    p.add_argument(
        "--base-port",
        type=int,
        default=DEFAULT_BASE_PORT,
        help="port of endpoint number 0 without a loopback address (0: any free)",
    )
    p.add_argument("--host", default=DEFAULT_HOST, help="host of the mapped endpoints")
    p.add_argument("--listen", help="serve one endpoint on HOST:PORT")
    p.add_argument("--gpu", default="H100", help="with --listen: GPU profile name")
    p.add_argument("--gpus", type=int, default=1, help="with --listen: GPU count")
    p.add_argument("--models", default="", help="with --listen: served models, comma-separated")
    p.add_argument("--name", default="sim-0", help="with --listen: endpoint name")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="model seconds per real second (10: ten times faster)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of output lengths and 5xx rates")
    p.add_argument("--max-model-len", type=int, default=_DEFAULTS.max_model_len)
    p.add_argument("--max-body-bytes", type=int, default=_DEFAULTS.max_body_bytes)
    p.add_argument(
        "--output-median",
        type=float,
        default=_DEFAULTS.output_median,
        help="median answer length without ignore_eos, tokens",
    )
    p.add_argument(
        "--stream-interval-ms",
        type=float,
        default=5.0,
        help="a stream writes at most this often; tokens due meanwhile go together",
    )
    p.add_argument(
        "--stream-wakeups",
        type=float,
        default=_DEFAULTS.wakeups_per_s,
        help="all streams together wake at most this often per second (CPU budget)",
    )
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="NAME=KIND[,key=value]",
        help="start with a fault: 5xx, slow, stall, refuse, down (NAME * for all)",
    )
    p.add_argument(
        "--write-addresses",
        metavar="FILE",
        help="write {endpoint: 'host:port'} as JSON once listening",
    )
    return p


def specs_from_args(args: argparse.Namespace) -> list[EndpointSpec]:
    """Return the endpoints to serve; raise ValueError or FleetError on bad input."""
    fleet = load_fleet_file(args.fleet) if args.fleet else None
    if args.listen:
        profiles = fleet.gpu_profiles if fleet is not None else None
        models = args.models.split(",")
        spec = single_spec(
            args.listen,
            gpu=args.gpu,
            gpus=args.gpus,
            models=models,
            name=args.name,
            profiles=profiles,
        )
        return [spec]
    if fleet is None:
        raise ValueError("give --fleet FILE or --listen HOST:PORT")
    only = [n for n in args.endpoints.split(",") if n]
    if not 0 <= args.base_port <= 65535:
        raise ValueError("--base-port must be 0..65535")
    return fleet_specs(fleet, base_port=args.base_port, host=args.host, only=only)


def faults_from_args(flags: Sequence[str], specs: Sequence[EndpointSpec]) -> dict[str, Fault]:
    names = [s.endpoint.name for s in specs]
    out: dict[str, Fault] = {}
    for flag in flags:
        name, fault = parse_fault_flag(flag)
        if name != "*" and name not in names:
            raise ValueError(f"--fault {flag!r}: no endpoint {name!r} served here")
        out.update(dict.fromkeys(names if name == "*" else [name], fault))
    return out


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    if not args.time_scale > 0:
        raise ValueError("--time-scale must be positive")
    if args.max_model_len < 2 or args.max_body_bytes < 1024 or args.output_median < 1:
        raise ValueError("--max-model-len >= 2, --max-body-bytes >= 1024, --output-median >= 1")
    if args.stream_interval_ms < 0 or args.stream_wakeups <= 0:
        raise ValueError("--stream-interval-ms must be >= 0 and --stream-wakeups > 0")
    return ServeOptions(
        max_model_len=args.max_model_len,
        max_body_bytes=args.max_body_bytes,
        seed=args.seed,
        output_median=args.output_median,
        stream_interval_s=args.stream_interval_ms / 1000.0,
        wakeups_per_s=args.stream_wakeups,
    )


def describe(servers: SimServers, out: TextIO) -> None:
    """Print one line per endpoint: name, region, GPUs, models, URL, fleet address."""
    for spec in servers.specs:
        e = spec.endpoint
        print(
            f"{e.name:<12} {e.region:<14} {f'{e.gpu}x{e.gpus}':<9} {','.join(e.models):<28} "
            f"{servers.url(e.name):<24} (fleet address {e.address})",
            file=out,
        )
    print(f"ready: {len(servers.specs)} endpoint(s), time scale {servers.time_scale:g}", file=out)
    out.flush()


async def serve(servers: SimServers, addresses_file: str | None, out: TextIO) -> None:
    """Serve until SIGINT or SIGTERM."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with servers:
        if addresses_file:
            table = {n: f"{h}:{p}" for n, (h, p) in servers.addresses().items()}
            with open(addresses_file, "w") as fh:
                json.dump(table, fh, indent=2)
        describe(servers, out)
        await stop.wait()


def raise_open_files_limit() -> None:
    """Lift the soft limit on open files to the hard one: each stream holds a socket."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        # on failure keep the limit we have: the server still runs, holding fewer streams
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))


def run_cli(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    args = build_parser().parse_args(argv)
    try:
        specs = specs_from_args(args)
        options = options_from_args(args)
        faults = faults_from_args(args.fault, specs)
    except (ValueError, FleetError, FaultError, OSError) as exc:
        print(f"trafficmgr-simserver: {exc}", file=sys.stderr)
        return 2
    raise_open_files_limit()
    servers = SimServers(specs, time_scale=args.time_scale, options=options, faults=faults)
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        try:
            runner.run(serve(servers, args.write_addresses, out))
        except OSError as exc:
            print(f"trafficmgr-simserver: cannot listen: {exc}", file=sys.stderr)
            return 1
    return 0


def main() -> None:
    sys.exit(run_cli())
