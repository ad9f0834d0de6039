"""This process's own view of the requests it has in flight, per endpoint.

Heartbeats arrive every second or so; between two of them a burst would pile onto the
endpoint that looked idlest. So every request this process sends is counted here from the
moment it is picked until it finishes: its prompt tokens while it waits for its first token
(outstanding prefill), its expected remaining output (the picker's expected length minus the
tokens seen so far: outstanding decode) and one running request. The picker sees these
figures added to the heartbeat's (``regionview``, which rebuilds an endpoint's view only
when these figures changed).

A ``Ticket`` is the handle a front holds for one request; closing it twice is harmless, so
no error path can leak or double-count accounting.
"""

from __future__ import annotations

from collections.abc import Iterator

from trafficmgr.routing.types import Priority


class Ticket:
    """One request in flight: where it is, what it costs, how far it got."""

    __slots__ = (
        "closed",
        "endpoint",
        "expected",
        "first_at",
        "generated",
        "identity",
        "input_tokens",
        "max_output",
        "model",
        "prefix_hashes",
        "priority",
        "probe",
        "region",
        "request_id",
        "sent_at",
        "started",
    )

    def __init__(
        self,
        model: str,
        input_tokens: int,
        prefix_hashes: tuple[int, ...],
        expected: float,
        max_output: int,
        priority: Priority,
        started: float,
        request_id: str | None = None,
        identity: str | None = None,
    ) -> None:
        self.model = model
        self.input_tokens = input_tokens
        self.prefix_hashes = prefix_hashes
        self.expected = expected
        self.max_output = max_output
        self.priority = priority
        self.started = started  # monotonic, when the request was decided
        self.sent_at = started  # monotonic, when the current attempt was sent
        self.request_id = request_id
        self.identity = identity
        self.endpoint: str | None = None
        self.region = ""
        self.generated = 0
        self.first_at: float | None = None
        self.probe = False  # this attempt is an ejected endpoint's half-open probe
        self.closed = False

    def remaining(self) -> float:
        """Return the output tokens still expected."""
        left = self.expected - self.generated
        if self.max_output > 0:
            left = min(left, float(self.max_output - self.generated))
        return left if left > 0.0 else 0.0


class EndpointFlight:
    """The in-flight totals of one endpoint."""

    __slots__ = ("decode", "prefill", "running")

    def __init__(self) -> None:
        self.running = 0
        self.prefill = 0.0
        self.decode = 0.0


class Ledger:
    """Per-endpoint in-flight totals, kept exact by adding and removing tickets."""

    def __init__(self) -> None:
        self._by_endpoint: dict[str, EndpointFlight] = {}
        self.total = 0

    def get(self, endpoint: str) -> EndpointFlight | None:
        return self._by_endpoint.get(endpoint)

    def running(self, endpoint: str) -> int:
        flight = self._by_endpoint.get(endpoint)
        return flight.running if flight is not None else 0

    def attach(self, ticket: Ticket, endpoint: str, region: str) -> None:
        """Count ``ticket`` on ``endpoint`` (moving it off the one it was on)."""
        if ticket.endpoint is not None:
            self.detach(ticket)
        flight = self._by_endpoint.get(endpoint)
        if flight is None:
            flight = self._by_endpoint[endpoint] = EndpointFlight()
        ticket.endpoint, ticket.region = endpoint, region
        flight.running += 1
        if ticket.first_at is None:
            flight.prefill += ticket.input_tokens
        flight.decode += ticket.remaining()
        self.total += 1

    def detach(self, ticket: Ticket) -> None:
        """Stop counting ``ticket`` where it is; no-op when it is nowhere."""
        if ticket.endpoint is None:
            return
        flight = self._by_endpoint[ticket.endpoint]
        flight.running -= 1
        if ticket.first_at is None:
            flight.prefill -= ticket.input_tokens
        flight.decode -= ticket.remaining()
        if flight.running <= 0:  # float sums drift; an idle endpoint is exactly zero
            flight.running, flight.prefill, flight.decode = 0, 0.0, 0.0
        ticket.endpoint = None
        self.total -= 1

    def progress(self, ticket: Ticket, tokens: int, now: float) -> bool:
        """Count ``tokens`` more output tokens; return True when they are the first."""
        flight = self._by_endpoint.get(ticket.endpoint) if ticket.endpoint else None
        first = ticket.first_at is None
        before = ticket.remaining()
        if first:
            ticket.first_at = now
        ticket.generated += max(0, tokens)
        if flight is not None:
            if first:
                flight.prefill -= ticket.input_tokens
            flight.decode += ticket.remaining() - before
        return first

    def endpoints(self) -> Iterator[tuple[str, EndpointFlight]]:
        return iter(self._by_endpoint.items())
