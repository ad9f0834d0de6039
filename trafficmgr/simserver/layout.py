"""Which simulated endpoint listens where.

From a fleet file: every endpoint, in fleet order (regions as listed, then their endpoints),
numbered from 0. An endpoint whose ``address`` is a loopback ``HOST:PORT`` (127.0.0.0/8,
``::1`` or ``localhost``) is served exactly there, so a fleet written for a laptop needs no
mapping; every other endpoint (``10.1.0.11:8000`` in the demo fleet) is served on
``HOST:BASE_PORT+number`` (``--host``, default 127.0.0.1; ``--base-port``, default 8100;
base port 0 takes ephemeral ports). The server prints the mapping when it starts and can
write it as JSON (``--write-addresses``).

Or one endpoint, from ``--listen HOST:PORT --gpu G --gpus N --models a,b``, whose GPU profile
comes from the fleet file when one is given, else from the built-in defaults (H100, A100,
L4; ``trafficmgr.fleetfile.DEFAULT_PROFILES``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from trafficmgr.fleetfile.read import DEFAULT_PROFILES, parse_address
from trafficmgr.routing.types import Endpoint, Fleet, GpuProfile

DEFAULT_BASE_PORT = 8100
DEFAULT_HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class EndpointSpec:
    """One endpoint to serve, its GPU profile and where to listen (port 0: any free one)."""

    endpoint: Endpoint
    profile: GpuProfile
    host: str
    port: int


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fleet_specs(
    fleet: Fleet,
    *,
    base_port: int = DEFAULT_BASE_PORT,
    host: str = DEFAULT_HOST,
    only: Sequence[str] = (),
) -> list[EndpointSpec]:
    """Return every endpoint of the fleet (or those named in ``only``) with its address."""
    endpoints = fleet.endpoints()
    unknown = set(only) - {e.name for e in endpoints}
    if unknown:
        raise ValueError(f"no endpoint named {', '.join(sorted(unknown))} in the fleet")
    specs: list[EndpointSpec] = []
    for number, endpoint in enumerate(endpoints):
        if only and endpoint.name not in only:
            continue
        profile = fleet.gpu_profiles[endpoint.gpu]
        bound_host, port = _fleet_address(endpoint.address)
        if port is None or not is_loopback(bound_host):
            bound_host, port = host, (base_port + number if base_port else 0)
        if port > 65535:
            raise ValueError(f"{endpoint.name}: base port {base_port} + {number} is over 65535")
        specs.append(EndpointSpec(endpoint, profile, bound_host, port))
    return specs


def _fleet_address(address: str) -> tuple[str, int | None]:
    try:
        return parse_address(address)
    except ValueError:
        return "", None


def listen_address(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` or ``[V6]:PORT``; port 0 asks for any free port."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{text!r} is not HOST:PORT (port 0-65535)")
    return host, int(port)


def single_spec(
    listen: str,
    *,
    gpu: str,
    gpus: int,
    models: Sequence[str],
    name: str = "sim-0",
    region: str = "local",
    profiles: Mapping[str, GpuProfile] | None = None,
) -> EndpointSpec:
    """Return the one endpoint of ``--listen HOST:PORT --gpu G --gpus N --models a,b``."""
    host, port = listen_address(listen)
    known = profiles if profiles is not None else DEFAULT_PROFILES
    if gpu not in known:
        raise ValueError(f"unknown GPU profile {gpu!r}; known: {', '.join(sorted(known))}")
    if gpus < 1:
        raise ValueError("--gpus must be at least 1")
    cleaned = tuple(m.strip() for m in models if m.strip())
    if not cleaned:
        raise ValueError("--models needs at least one model name")
    endpoint = Endpoint(name, region, listen, gpu, gpus, cleaned)
    return EndpointSpec(endpoint, known[gpu], host, port)


def with_addresses(fleet: Fleet, addresses: Mapping[str, tuple[str, int] | str]) -> Fleet:
    """Return the fleet with each endpoint's address replaced by where it is served.

    ``addresses`` maps endpoint names to ``(host, port)`` (``SimServers.addresses()``) or to
    ``"host:port"``; endpoints it does not name keep theirs.
    """

    def address(name: str, current: str) -> str:
        found = addresses.get(name)
        if found is None:
            return current
        return found if isinstance(found, str) else f"{found[0]}:{found[1]}"

    regions = tuple(
        replace(
            r, endpoints=tuple(replace(e, address=address(e.name, e.address)) for e in r.endpoints)
        )
        for r in fleet.regions
    )
    return replace(fleet, regions=regions)
