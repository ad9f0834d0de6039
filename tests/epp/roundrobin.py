"""A small but real decision core for the EPP tests: round robin over a fleet's endpoints.

It keeps the accounting the EPP must keep right (in flight, one ``finished`` per plan)
and records every call, so tests can check that bad input and broken streams never leak
a request. The production core lives in ``trafficmgr.requestpath``; this one only has to
be simple enough to trust.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field

from trafficmgr.epp.decision import (
    ClientIdentity,
    Outcome,
    Plan,
    Refusal,
    RequestInfo,
    Target,
    Usage,
)
from trafficmgr.routing.types import AdminState, Fleet

PRIORITIES = (None, "interactive", "batch")


@dataclass
class Record:
    """What happened to one planned request."""

    request: RequestInfo
    plan: Plan
    failed: list[tuple[str, Outcome]] = field(default_factory=list)
    served: list[str] = field(default_factory=list)  # attempts after the first
    current: str = ""
    tokens: int = 0
    finished: list[tuple[Outcome, Usage | None]] = field(default_factory=list)


class RoundRobinDecision:
    """Round robin over the endpoints serving a model; 429 past ``max_in_flight``."""

    def __init__(
        self,
        fleet: Fleet,
        tokens: dict[str, ClientIdentity] | None = None,
        max_in_flight: int = 1000,
        fallbacks: int = 2,
        model_fallbacks: dict[str, str] | None = None,
    ) -> None:
        self.fleet = fleet
        # a model nobody serves → the model served instead (the core's model chains)
        self.model_fallbacks = model_fallbacks or {}
        self.tokens = tokens
        self.max_in_flight = max_in_flight
        self.fallbacks = fallbacks
        self.records: list[Record] = []
        self.requests: list[RequestInfo] = []
        self.refusals: list[Refusal] = []
        self._counter = itertools.count()
        self._lock = threading.Lock()
        self._open: dict[object, Record] = {}
        self._by_handle: dict[object, Record] = {}

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._open)

    def reset(self) -> None:
        with self._lock:
            self.records.clear()
            self.requests.clear()
            self.refusals.clear()

    def cached_identity(self, token: str) -> tuple[bool, ClientIdentity | None]:
        return False, None

    def authenticate(self, token: str) -> ClientIdentity | None:
        if self.tokens is None:
            return ClientIdentity("anonymous")
        return self.tokens.get(token)

    async def identify(self, token: str | None, client: str | None) -> ClientIdentity | Refusal:
        who = self.authenticate(token) if token else None
        return who if who is not None else Refusal(401, "invalid_api_key", "unknown token")

    def models(self) -> tuple[str, ...]:
        return tuple(sorted(self.fleet.models()))

    async def admit(self, request: RequestInfo) -> Plan | Refusal:
        return self.decide(request)

    def decide(self, request: RequestInfo) -> Plan | Refusal:
        with self._lock:
            self.requests.append(request)
            outcome = self._decide(request)
            if isinstance(outcome, Refusal):
                self.refusals.append(outcome)
            return outcome

    def _decide(self, request: RequestInfo) -> Plan | Refusal:
        if request.priority not in PRIORITIES:
            return Refusal(400, "invalid_priority", "priority is interactive or batch")
        model = self.model_fallbacks.get(request.model, request.model)
        serving = [
            e
            for e in self.fleet.endpoints()
            if model in e.models and e.admin_state == AdminState.ACTIVE
        ]
        if not serving:
            return Refusal(404, "model_not_found", f"no endpoint serves {request.model!r}")
        if request.subset is not None:
            serving = [e for e in serving if {e.address, e.name} & request.subset]
        if not serving:
            return Refusal(503, "no_endpoint", "no endpoint of the subset is eligible", 2)
        if len(self._open) >= self.max_in_flight:
            return Refusal(429, "overloaded", "too many requests in flight", 1)
        handle = next(self._counter)
        start = handle % len(serving)
        ordered = (serving[start:] + serving[:start])[: self.fallbacks + 1]
        plan = Plan(
            model=model,
            targets=tuple(Target(e.name, e.address, e.region) for e in ordered),
            region=ordered[0].region,
            reason="round_robin",
            handle=handle,
        )
        record = Record(request, plan, current=ordered[0].address)
        self._open[handle] = self._by_handle[handle] = record
        self.records.append(record)
        return plan

    def attempt_failed(self, handle: object, outcome: Outcome) -> None:
        with self._lock:
            record = self._by_handle[handle]
            record.failed.append((record.current, outcome))

    def served(self, handle: object, endpoint: str) -> None:
        with self._lock:
            record = self._by_handle[handle]
            record.served.append(endpoint)
            record.current = endpoint

    def progress(self, handle: object, tokens: int) -> None:
        with self._lock:
            self._by_handle[handle].tokens += tokens

    def finished(self, handle: object, usage: Usage | None, outcome: Outcome) -> None:
        with self._lock:
            self._by_handle[handle].finished.append((outcome, usage))
            self._open.pop(handle, None)
