"""Loopback ports free to bind, for servers a test or benchmark starts."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable

TCP = (socket.SOCK_STREAM,)
# a DNS server binds both on one port
TCP_AND_UDP = (socket.SOCK_STREAM, socket.SOCK_DGRAM)
ATTEMPTS = 50


def free_ports(count: int, kinds: Iterable[int] = TCP, host: str = "127.0.0.1") -> list[int]:
    """Return ``count`` distinct ports of ``host`` free for every socket kind in ``kinds``.

    Each port is held open until all are chosen, so the ports differ; they are free at the
    time of asking (a server binds them right after).
    """
    kinds = tuple(kinds)
    if count < 1 or not kinds:
        raise ValueError(f"count must be >= 1 and kinds non-empty, got {count} and {kinds}")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        for _ in range(ATTEMPTS * count):
            first = held.enter_context(socket.socket(family, kinds[0]))
            first.bind((host, 0))
            port = int(first.getsockname()[1])
            if all(_bound(held, family, kind, host, port) for kind in kinds[1:]):
                ports.append(port)
            if len(ports) == count:
                return ports
    raise RuntimeError(f"no {count} free ports on {host} for socket kinds {kinds}")


def free_port(kinds: Iterable[int] = TCP, host: str = "127.0.0.1") -> int:
    """Return a port of ``host`` free for every socket kind in ``kinds`` (TCP by default)."""
    return free_ports(1, kinds, host)[0]


def _bound(held: contextlib.ExitStack, family: int, kind: int, host: str, port: int) -> bool:
    """Bind a socket of ``kind`` to ``port`` and hold it; say whether that worked."""
    sock = held.enter_context(socket.socket(family, kind))
    try:
        sock.bind((host, port))
    except OSError:
        return False
    return True
