"""What the endpoint picker needs from the request-path core, as a typed Protocol.

The EPP speaks Envoy's ext_proc protocol and nothing else: which endpoints may take a
request, in-flight accounting, ejection, affinity and residency all live in the shared
request-path core (``trafficmgr.requestpath``) that the Python gateway uses too. This
module names the few calls the EPP makes into it, over the core's own value types, so the
protocol layer can be tested against any implementation.

Lifecycle, per request: ``cached_identity``/``authenticate`` → ``admit`` (or ``models``
for a model listing); after a ``Plan``, for each endpoint Envoy went past ``attempt_failed``
(then ``served`` for the next one), ``progress`` while tokens stream, and exactly one
``finished`` whatever happens to the stream (completion, upstream error, client gone, Envoy
closing early). A ``Refusal`` needs nothing more. Envoy, not the EPP, makes the retries, so
the EPP learns of them only when the response starts (from the served-endpoint metadata) and
reports them then.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from trafficmgr.requestpath.types import (
    ClientIdentity,
    Outcome,
    Plan,
    Refusal,
    RequestInfo,
    Target,
    Usage,
)

__all__ = [
    "ClientIdentity",
    "Decision",
    "Outcome",
    "Plan",
    "Refusal",
    "RequestInfo",
    "Target",
    "Usage",
]


@runtime_checkable
class Decision(Protocol):
    """The request-path core as the EPP calls it (``RequestPath`` has this shape).

    Everything but ``authenticate`` and ``admit`` runs on the event loop and must be quick.
    """

    def cached_identity(self, token: str) -> tuple[bool, ClientIdentity | None]:
        """Return (known, identity) from the cache; not known: call ``authenticate``."""
        ...

    def authenticate(self, token: str) -> ClientIdentity | None:
        """Return who a bearer token belongs to, or None (may block: run in a thread)."""
        ...

    async def identify(self, token: str | None, client: str | None) -> ClientIdentity | Refusal:
        """Return who a bearer token belongs to, or the 401, 429 or 503 to answer (the shape
        checked first, lookups bounded, failures limited per client address)."""
        ...

    def models(self) -> tuple[str, ...]:
        """Return the models the fleet serves (answers ``GET /v1/models``)."""
        ...

    async def admit(self, info: RequestInfo) -> Plan | Refusal:
        """Choose endpoints for a request (waiting while all are full), or refuse it."""
        ...

    def served(self, handle: object, endpoint: str) -> None:
        """Record that an attempt went to ``endpoint`` (``host:port``) of the plan."""
        ...

    def attempt_failed(self, handle: object, outcome: Outcome) -> None:
        """Record that the current attempt failed before its first byte."""
        ...

    def progress(self, handle: object, tokens: int) -> None:
        """Record that the response carried ``tokens`` more output tokens."""
        ...

    def finished(self, handle: object, usage: Usage | None, outcome: Outcome) -> None:
        """Close the request's accounting; called exactly once per Plan."""
        ...
