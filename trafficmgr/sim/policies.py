"""Policies the simulator compares: every engine picker strategy, and an oracle.

An engine policy is the real picker (``make_picker``) fed the gateway's view of the region's
endpoints (``GatewayView.loads``: by default what a production gateway process knows,
``sim.gateways``; the omniscient view on request), one picker per gateway process and region,
with the picker's own *estimates* of output length. It learns only from completed requests,
what a gateway reporting them (``POST /api/v1/route/completions``) tells the decision API:
the output length, the prompt's size and prefix blocks, and the latency from the gateway to
the last token.

``oracle`` knows every request's true output length, its own and those in flight, and picks
the endpoint where it would complete first if nothing else arrived: it runs each candidate's
service model forward (no admission limits; queued prompts assumed uncached). It is a
strong greedy reference, not a global optimum.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from trafficmgr.routing.estimator import LatencyTail, OutputLengthEstimator
from trafficmgr.routing.picker import EndpointLoad, Picker, make_picker, serves
from trafficmgr.routing.types import Request
from trafficmgr.sim.server import BLOCK_TOKENS, EndpointServer

ORACLE = "oracle"


@dataclass(frozen=True, slots=True)
class Choice:
    server: EndpointServer | None
    expected_output: float
    reason: str


class GatewayView(Protocol):
    """What a policy may ask the simulation about the endpoints of a region."""

    def healthy(self, server: EndpointServer) -> bool: ...

    def loads(
        self,
        request: Request,
        servers: Sequence[EndpointServer],
        excluded: frozenset[int],
        gateway: int,
        now: float,
    ) -> tuple[EndpointLoad, ...]: ...


class Policy(Protocol):
    name: str

    def choose(
        self,
        view: GatewayView,
        request: Request,
        output_tokens: int,
        servers: Sequence[EndpointServer],
        excluded: frozenset[int],
        now: float,
        gateway: int = 0,
    ) -> Choice: ...

    def observe(self, region: str, request: Request, output_tokens: int, latency_s: float) -> None:
        """Learn from a request completed in ``region``: what a gateway there would see."""


class EnginePolicy:
    """One of the engine's picker strategies behind the gateway's view.

    One picker per gateway process and region, as each gateway keeps, all sharing one
    output-length estimator and one latency tail, as a process's pickers do and as gateways
    sharing the completions stream learn: how long answers are is the model's and the
    prompt's business, not the region's, and the tail a move must stay within is the one
    users see, the whole service's.
    """

    def __init__(self, name: str, seed: int) -> None:
        self.name, self.seed = name, seed
        self.estimator = OutputLengthEstimator()
        self.tail = LatencyTail()
        self.pickers: dict[tuple[int, str], Picker] = {}

    def picker(self, region: str, gateway: int = 0) -> Picker:
        found = self.pickers.get((gateway, region))
        if found is None:
            found = make_picker(
                self.name, seed=self.seed + gateway, estimator=self.estimator, tail=self.tail
            )
            self.pickers[(gateway, region)] = found
        return found

    def choose(
        self,
        view: GatewayView,
        request: Request,
        output_tokens: int,
        servers: Sequence[EndpointServer],
        excluded: frozenset[int],
        now: float,
        gateway: int = 0,
    ) -> Choice:
        loads = view.loads(request, servers, excluded, gateway, now)
        region = servers[0].endpoint.region if servers else ""
        pick = self.picker(region, gateway).pick(request, loads, now)
        chosen = next((s for s in servers if s.endpoint.name == pick.endpoint), None)
        return Choice(chosen, pick.expected_output_tokens, pick.reason)

    def observe(self, region: str, request: Request, output_tokens: int, latency_s: float) -> None:
        self.picker(region).observe(
            request.model,
            output_tokens,
            input_tokens=request.input_tokens,
            prefix_hashes=request.prefix_hashes,
            latency_s=latency_s,
        )


class OraclePolicy:
    """Earliest true completion, knowing every output length."""

    name = ORACLE

    def choose(
        self,
        view: GatewayView,
        request: Request,
        output_tokens: int,
        servers: Sequence[EndpointServer],
        excluded: frozenset[int],
        now: float,
        gateway: int = 0,
    ) -> Choice:
        best: tuple[float, EndpointServer] | None = None
        for s in servers:
            if s.index in excluded or not view.healthy(s):
                continue
            if not serves(EndpointLoad(s.endpoint, s.profile), request.model):
                continue
            done = forecast_completion(s, request, output_tokens, now)
            if best is None or done < best[0]:
                best = (done, s)
        if best is None:
            return Choice(
                None, float(output_tokens), f"oracle: no endpoint serves {request.model} here"
            )
        return Choice(
            best[1], float(output_tokens), f"oracle: completes in {(best[0] - now) * 1000:.0f} ms"
        )

    def observe(self, region: str, request: Request, output_tokens: int, latency_s: float) -> None:
        """The oracle needs no learning."""


def forecast_completion(
    server: EndpointServer, request: Request, output_tokens: int, now: float
) -> float:
    """Return when ``request`` would finish on ``server`` if nothing else arrived."""
    server.advance(now)
    rates = server.rates
    held = server.held_prefix(request.prefix_hashes) if request.prefix_hashes else 0
    own = max(1.0, request.input_tokens - held * BLOCK_TOKENS)
    queue = [(j.prefill_left, j.output_tokens) for j in server.prefill]
    queue += [(float(j.input_tokens), j.output_tokens) for j in server.waiting]
    queue.append((own, output_tokens))
    mine = len(queue) - 1
    vclock = server.vclock
    decoding = [(end - vclock, 0) for end, _, _ in server.decoding]
    heapq.heapify(decoding)
    t, v, k = now, 0.0, 0
    left = queue[0][0]
    while True:
        b = len(decoding)
        r = rates.decode_rate(b)
        to_decode = (decoding[0][0] - v) / r if b else math.inf
        to_prefill = left / rates.prefill_rate(b) if k <= mine else math.inf
        if to_prefill <= to_decode:
            t += to_prefill
            v += r * to_prefill if b else 0.0
            out = queue[k][1]
            if k == mine and out <= 1:
                return t
            if out > 1:
                heapq.heappush(decoding, (v + out - 1, 1 if k == mine else 0))
            k += 1
            left = queue[k][0] if k <= mine else 0.0
        else:
            t += to_decode
            left -= rates.prefill_rate(b) * to_decode if k <= mine else 0.0
            v = decoding[0][0]
            if heapq.heappop(decoding)[1]:
                return t


def make_policy(name: str, seed: int) -> Policy:
    """Build a simulator policy by name: a picker strategy or ``oracle``."""
    if name == ORACLE:
        return OraclePolicy()
    return EnginePolicy(name, seed)
