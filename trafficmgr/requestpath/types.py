"""The values crossing the request-path core's boundary: what a front asks, what it gets back.

A front (the OpenAI gateway, the Envoy endpoint picker) reads a request into a
``RequestInfo``; the core answers a ``Plan`` (endpoints to try, best first, and a handle for
the request's accounting) or a ``Refusal`` (an HTTP status, an OpenAI error code and a
message). The front then tells the core what happened to each attempt as an ``Outcome``.
Frozen and framework-free, so both fronts and their tests share them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from trafficmgr.routing.types import ClientLocation
from trafficmgr.routing.values import value


@dataclass(frozen=True, slots=True)
class ClientIdentity:
    """Who sent a request, as the control plane's token check found it."""

    name: str
    tenant: str | None = None


@value
class RequestInfo:
    """One inference request as a front read it.

    ``priority`` and ``strategy`` are the raw header values (``x-trafficmgr-priority``,
    ``x-trafficmgr-strategy``): the core validates them, so both fronts refuse alike.
    ``prompt`` is the prompt's text under the token rule (``trafficmgr.routing.prompt``);
    ``input_tokens`` and ``prefix_hashes``, when given, are used instead of deriving them.
    ``subset``, when given, limits the endpoints (names or ``host:port``) to those listed.
    ``location``, when given, is the client's location, used instead of locating ``client_ip``.
    """

    model: str
    client_ip: str | None = None
    identity: ClientIdentity | None = None
    priority: str | None = None
    strategy: str | None = None
    session_id: str | None = None
    prompt: str = ""
    input_tokens: int | None = None
    prefix_hashes: tuple[int, ...] | None = None
    max_output_tokens: int = 0  # 0: not given
    request_id: str | None = None
    subset: frozenset[str] | None = None
    location: ClientLocation | None = None  # already located (``/route``'s client_country)


@value
class Target:
    """One endpoint a request may be sent to."""

    name: str
    address: str  # host:port
    region: str


@value
class Plan:
    """Where a request goes: ``targets`` in fallback order, the pick first.

    ``model`` is the model to ask the endpoints for: the request's, or the next one of its
    fallback chain when no endpoint of its own could take it. ``handle`` is handed back to
    ``served``, ``progress``, ``attempt_failed`` and ``finished``.
    """

    model: str
    targets: tuple[Target, ...]
    region: str
    reason: str
    handle: object
    routing_s: float = 0.0  # time the decision took
    queued_s: float = 0.0  # time the request waited for admission


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request is answered at once instead of routed (OpenAI error shape)."""

    status: int  # 400 bad header, 403 unlocated, 404 unknown model, 429 saturated, 503 none
    code: str
    message: str
    retry_after_s: int | None = None
    param: str | None = None  # the header or field at fault

    @property
    def error_type(self) -> str:
        """Return OpenAI's error ``type`` for the status."""
        return ERROR_TYPES.get(self.status, "server_error")


ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "request_forbidden",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    431: "invalid_request_error",
    429: "rate_limit_error",
    502: "server_error",
    503: "server_error",
    504: "server_error",
}


@value
class Usage:
    """Token counts of one finished request: the upstream's usage, or counted."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


class Outcome(StrEnum):
    """What happened to one attempt, as the outlier detector sees it."""

    OK = "ok"
    CLIENT_ERROR = "client_error"  # upstream 4xx other than 429: the request, not the endpoint
    THROTTLED = "throttled"  # upstream 429: back-pressure, retried elsewhere, not a failure
    CANCELLED = "cancelled"  # the client went away: says nothing about the endpoint
    SERVER_ERROR = "server_error"  # upstream 5xx
    CONNECT_ERROR = "connect_error"
    TIMEOUT = "timeout"  # no first byte in time
    STALLED = "stalled"  # a stream stopped sending mid-way
    BROKEN = "broken"  # cut mid-way, or a body that is not what the API says

    @property
    def is_failure(self) -> bool:
        """Tell whether the outcome counts against the endpoint (trips outlier detection)."""
        return self in _FAILURES


_FAILURES = frozenset(
    {
        Outcome.SERVER_ERROR,
        Outcome.CONNECT_ERROR,
        Outcome.TIMEOUT,
        Outcome.STALLED,
        Outcome.BROKEN,
    }
)
