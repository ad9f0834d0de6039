"""The ``ai_aware`` picker, the default (docs/engine-interfaces.md).

``ai_aware`` picks the endpoint with the earliest expected completion of *this*
request: the prefill work queued ahead of it at the prefill rate the decodes leave, plus its
own prefill (minus the prefix blocks the endpoint already holds), plus its expected output at
the per-request decode rate with one more request in the batch (the service model of
``estimator.py``); a full endpoint (slots or KV cache) adds the expected wait for a slot.

Work conservation. Earliest completion alone starves slow endpoints: a request queues
behind a busy H100 while an L4 (or a 2-GPU endpoint) that could serve it sits idle, which
leaves the fast endpoints hot and the region unevenly loaded. So when the cheapest endpoint
has a queue of ``W`` seconds ahead of the request, whose own service there takes ``S``, the
request goes instead to the *least busy* endpoint (least outstanding work, in seconds at its
own speed) among those expected to complete it at most ``min(W, S)`` later. Both bounds come
from the request itself, not from a tuned constant: with no queue the fastest endpoint
always wins; the request is never delayed by more than the queue it leaves (whose requests
are spared its work), nor by more than its own service time, which keeps long prompts, the
latency tail, off slow GPUs. A request the cheapest endpoint holds a cached prefix for
stays there: moving it would turn work the cache saves into work done again, which loads
the region more, not more evenly.

Balancing within the tail. Earliest completion loads the fastest GPUs most: on a region of
H100s next to A100s and L4s the slow endpoints idle while the fast ones run hot, and only
the queue rule above moves work to them. Yet most requests could run on a slower endpoint
without anyone noticing: what users notice is the tail. So once the picker has seen
``TAIL_MIN_SAMPLES`` completions it keeps the service's observed P99 latency (``LatencyTail``,
shared by the pickers of every region: the tail users see is the whole service's), and a request
goes to the *least used* endpoint (the work sent to it, at its own speed, decayed over
``balance_window_s``: equal values are equal utilisation) among those expected to complete it
within that P99 even with a long answer: the longest recent answer to its prompt prefix, or
the 99th percentile for prompts of its size (``OutputLengthEstimator.tail``). A request the
fastest endpoint holds a cached prefix for stays there, as above. The bound is the service's
own tail, not a tuned constant: a move never makes a request slower than the slowest 1 % the
service already serves, so it adds no new tail, while the slow endpoints take their share of
everything that fits under it (prompts that are short, or whose answers are known short).

Batch requests skip endpoints above ``batch_threshold`` utilisation, which keeps headroom
for interactive traffic; when every endpoint is above it they are shed (a 503 upstream).

Speed. Up to ``exact_limit`` candidates serving the model are all scored. Above that the
picker scores a random sample of ``sample_size`` of them plus the best ones of its previous
picks for the model ("power of d choices with memory": Mitzenmacher 2001; Shah & Prabhakar
2002 show remembering the last best beats sampling one more) plus the endpoints its own
routing history says hold the request's longest prefix (the approximate prefix index llm-d's
scorer keeps). A load object seen before keeps its cost terms (they depend on it alone, and
a gateway hands an unchanged endpoint's view over again as the same object). A candidates
*tuple* passed again is recognised: its grouping by model and its per-endpoint terms are
reused, and the work the picker sent since is added to the snapshot, so picks between two
load reports do not herd onto one endpoint. A gateway calls ``prepare(snapshot)`` when a
load report arrives, so that O(N) work stays off the request path and a pick costs
O(sample) (bench/engine/pick.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from trafficmgr.routing.estimator import (
    CostTerms,
    LatencyTail,
    OutputLengthEstimator,
    cost_terms,
)
from trafficmgr.routing.pickbase import (
    EndpointLoad,
    Pick,
    Strategy,
    rates_of,
    refusal,
    serves,
)
from trafficmgr.routing.types import AdminState, Priority, Request

PREFIX_INDEX_SIZE = 1 << 16
TAIL_MIN_SAMPLES = 50  # completions seen before the service's P99 bounds a move
TAIL_Q = 0.99


def cached_tokens(request: Request, held: frozenset[int], block_tokens: int) -> int:
    """Return the prompt tokens an endpoint holding ``held`` blocks need not prefill again."""
    n = 0
    for h in request.prefix_hashes:
        if h not in held:
            break
        n += 1
    return min(n * block_tokens, max(0, request.input_tokens - 1))


# (expected completion s, candidate index, cached prompt tokens, own service s)
Scored = tuple[float, int, int, float]


def _first(entry: Scored) -> float:
    return entry[0]


# endpoint name → (a load, its cost terms, its outstanding work s): shared by a picker's
# snapshots, since a view that did not change is handed over again as the same load object
Costed = dict[str, tuple[EndpointLoad, CostTerms, float]]
COSTED_SIZE = 1 << 16


class _Snapshot:
    """One candidates sequence: grouped by model and costed lazily, plus work sent since."""

    __slots__ = (
        "by_model",
        "costed",
        "grouped",
        "loads",
        "pending",
        "positions",
        "terms",
        "work",
    )

    def __init__(self, loads: Sequence[EndpointLoad], group: bool, costed: Costed) -> None:
        self.loads = loads
        self.costed = costed
        self.by_model: dict[str, list[int]] = {}
        self.terms: list[CostTerms | None] = [None] * len(loads)
        self.work: list[float] = [0.0] * len(loads)  # outstanding_work_s, set with the terms
        self.pending: dict[int, float] = {}
        self.positions: dict[str, int] = {}
        if group:  # many candidates: one pass now instead of one per model later
            for i, c in enumerate(loads):
                self.positions[c.endpoint.name] = i
                e = c.endpoint
                if c.healthy and e.admin_state is AdminState.ACTIVE and e.weight > 0:
                    for m in e.models:
                        self.by_model.setdefault(m, []).append(i)
        self.grouped = group

    def eligible(self, model: str) -> list[int]:
        found = self.by_model.get(model)
        if found is None:
            found = (
                [] if self.grouped else [i for i, c in enumerate(self.loads) if serves(c, model)]
            )
            self.by_model[model] = found
        return found

    def term(self, i: int) -> CostTerms:
        """Return candidate ``i``'s cost terms (and set its work): a pure function of its
        load, so taken from ``costed`` when this very load object was costed before."""
        t = self.terms[i]
        if t is None:
            c = self.loads[i]
            name = c.endpoint.name
            hit = self.costed.get(name)
            if hit is not None and hit[0] is c:
                t, self.work[i] = hit[1], hit[2]
            else:
                t, self.work[i] = _costed(c)
                if len(self.costed) >= COSTED_SIZE:
                    self.costed.clear()
                self.costed[name] = (c, t, self.work[i])
            self.terms[i] = t
        return t

    def index_of(self, name: str) -> int | None:
        if not self.positions:
            self.positions = {c.endpoint.name: i for i, c in enumerate(self.loads)}
        return self.positions.get(name)


def _costed(c: EndpointLoad) -> tuple[CostTerms, float]:
    """Return an endpoint's cost terms and outstanding work (s at full speed)."""
    rates = rates_of(c)
    work = rates.work_s(c.outstanding_prefill_tokens, c.outstanding_decode_tokens)
    terms = cost_terms(
        rates,
        c.running,
        c.waiting,
        c.outstanding_prefill_tokens,
        c.outstanding_decode_tokens,
        c.kv_cache_usage,
        c.gpu_util,
    )
    return terms, work


class AiAwarePicker(Strategy):
    """Earliest expected completion, work-conserving (see the module docstring)."""

    name = "ai_aware"

    def __init__(
        self,
        seed: int = 0,
        estimator: OutputLengthEstimator | None = None,
        *,
        batch_threshold: float = 0.8,
        exact_limit: int = 32,
        sample_size: int = 6,
        memory: int = 2,
        block_tokens: int = 512,
        balance_window_s: float = 30.0,
        tail: LatencyTail | None = None,
    ) -> None:
        super().__init__(seed, estimator)
        self.batch_threshold = batch_threshold
        self.exact_limit = max(1, exact_limit)
        self.sample_size = max(1, sample_size)
        self.memory = max(0, memory)
        self.block_tokens = block_tokens
        self._snapshot: _Snapshot | None = None
        self._costed: Costed = {}
        self._source: Sequence[EndpointLoad] | None = None
        self._recent: dict[str, tuple[str, ...]] = {}  # model → recent best endpoints
        self._prefix_owner: dict[int, str] = {}  # block hash → endpoint last sent it
        self.balance_window_s = balance_window_s
        self.tail = tail if tail is not None else LatencyTail()
        # work sent per endpoint, in seconds at its speed, x exp((t - base) / window): values
        # taken at the same instant compare without decaying each (rebased now and then)
        self._sent: dict[str, float] = {}
        self._sent_base: float | None = None

    def observe(
        self,
        model: str,
        output_tokens: int,
        *,
        input_tokens: int = 0,
        prefix_hashes: Sequence[int] = (),
        latency_s: float | None = None,
    ) -> None:
        """Learn from a completed request; its latency feeds the (shared) tail."""
        super().observe(
            model, output_tokens, input_tokens=input_tokens, prefix_hashes=prefix_hashes
        )
        if latency_s is not None:
            self.tail.observe(latency_s)

    def pick(self, request: Request, candidates: Sequence[EndpointLoad], now: float) -> Pick:
        exp = self.estimator.expected(
            request.model, request.max_output_tokens, request.prefix_hashes
        )
        snap = self._snapshot_for(candidates)
        eligible = snap.eligible(request.model)
        if not eligible:
            return refusal(self.name, request, candidates, exp)
        self._turn += 1
        batch = request.priority is Priority.BATCH
        sampled = len(eligible) > self.exact_limit
        pool = self._sample(request, snap, eligible) if sampled else eligible
        ranked = self._rank(request, snap, pool, exp, batch)
        if not ranked and sampled and batch:
            ranked = self._rank(request, snap, eligible, exp, batch)
        if not ranked:
            return Pick(
                None,
                f"ai_aware: batch request shed: all {len(eligible)} endpoints "
                f"serving {request.model} are above {self.batch_threshold:.0%} "
                "utilisation (headroom kept for interactive traffic)",
                exp,
            )
        chosen, budget = ranked[0], 0.0
        if len(ranked) > 1:
            if self.tail.count >= TAIL_MIN_SAMPLES and not ranked[0][2]:
                budget = self.tail.quantile_s(TAIL_Q)
                chosen = self._balance(request, snap, ranked, budget, exp)
            # by candidate index, not identity: compiled (mypyc), a tuple taken from a list
            # is a new object
            if chosen[1] == ranked[0][1]:
                chosen, budget = self._conserve(snap, ranked), 0.0
        cost, i, cached, _ = chosen
        self._record(request, snap, i, cached, [r[1] for r in ranked[: self.memory]], exp, now)
        head = "ai_aware: earliest expected completion"
        if budget:
            head = (
                f"ai_aware: balanced: least used of the endpoints expected to complete it "
                f"within the service's P99 ({_whole(budget * 1000)} ms) even with a long answer "
                f"({snap.loads[ranked[0][1]].endpoint.name} would be "
                f"{_whole((cost - ranked[0][0]) * 1000)} ms sooner), expected completion"
            )
        elif chosen[1] != ranked[0][1]:
            first = ranked[0]
            head = (
                f"ai_aware: work-conserving: {snap.loads[first[1]].endpoint.name} would complete "
                f"it {_whole((cost - first[0]) * 1000)} ms earlier but has a queue; this is the "
                "least busy endpoint within min(queue, service time) of that, expected completion"
            )
        reason = self._reason(
            head,
            snap.term(i),
            cost,
            request,
            cached,
            exp,
            len(pool),
            len(eligible) if sampled else 0,
        )
        return Pick(snap.loads[i].endpoint.name, reason, exp, cost)

    def prepare(self, candidates: tuple[EndpointLoad, ...]) -> None:
        """Group and cost a new snapshot now (on a load report, off the request path)."""
        snap = self._snapshot_for(candidates)
        for i in range(len(candidates)):
            snap.term(i)

    def _snapshot_for(self, candidates: Sequence[EndpointLoad]) -> _Snapshot:
        if self._snapshot is not None and candidates is self._source:
            return self._snapshot
        snap = _Snapshot(candidates, len(candidates) > self.exact_limit, self._costed)
        if type(candidates) is tuple:  # immutable: safe to recognise by identity
            self._snapshot, self._source = snap, candidates
        return snap

    def _sample(self, request: Request, snap: _Snapshot, eligible: list[int]) -> list[int]:
        """Return a random sample, the recent best and the likely prefix holders."""
        n, rand = len(eligible), self.rng.random
        pool = {eligible[int(rand() * n)] for _ in range(self.sample_size)}
        names = list(self._recent.get(request.model, ()))
        names.extend(self._prefix_holders(request))
        for name in names:
            i = snap.index_of(name)
            if i is not None and serves(snap.loads[i], request.model):
                pool.add(i)
        return list(pool)

    def _prefix_holders(self, request: Request) -> list[str]:
        """Return the endpoints last sent this request's first and longest shared prefix."""
        owner, found = self._prefix_owner, list[str]()
        for h in request.prefix_hashes:
            name = owner.get(h)
            if name is None:
                break
            if not found or found[-1] != name:
                found.append(name)
        return found[:1] + found[-1:] if len(found) > 1 else found

    def _rank(
        self, request: Request, snap: _Snapshot, pool: list[int], exp: float, batch: bool
    ) -> list[Scored]:
        """Return (expected completion s, index, cached tokens, own service s), best first."""
        out: list[Scored] = []
        k = self._turn % len(pool) if len(pool) <= self.exact_limit else 0
        terms, pending, loads = snap.terms, snap.pending, snap.loads
        hashes, size, threshold = request.prefix_hashes, request.input_tokens, self.batch_threshold
        first = hashes[0] if hashes else None
        for i in pool[k:] + pool[:k]:
            t = terms[i] or snap.term(i)
            if batch and t.utilisation > threshold:
                continue
            cached = 0
            if first is not None and first in loads[i].cached_prefixes:
                cached = cached_tokens(request, loads[i].cached_prefixes, self.block_tokens)
            service = (size - cached) * t.prefill_s_per_token + exp * t.decode_s_per_token
            cost = t.wait_s + service
            if pending:
                cost += pending.get(i, 0.0)
            out.append((cost, i, cached, service))
        out.sort(key=_first)  # stable: equal costs keep the rotated order
        return out

    def _balance(
        self, request: Request, snap: _Snapshot, ranked: list[Scored], budget: float, exp: float
    ) -> Scored:
        """Return the least used endpoint completing the request, long answer and all, within
        ``budget``: the best one when no less used endpoint does."""
        terms, pending, loads, sent = snap.terms, snap.pending, snap.loads, self._sent
        chosen = ranked[0]
        least = sent.get(loads[chosen[1]].endpoint.name, 0.0)
        long = -1.0  # the long answer, computed at the first endpoint worth checking
        size = request.input_tokens
        for entry in ranked[1:]:
            i = entry[1]
            used = sent.get(loads[i].endpoint.name, 0.0)
            if used >= least:
                continue
            if long < 0.0:
                long = self.estimator.tail(request.model, size, request.prefix_hashes)
                if request.max_output_tokens > 0:
                    long = min(long, float(request.max_output_tokens))
                long = max(long, exp)  # never shorter than the answer it is expected to get
            t = terms[i] or snap.term(i)
            worst = (
                t.wait_s
                + pending.get(i, 0.0)
                + (size - entry[2]) * t.prefill_s_per_token
                + long * t.decode_s_per_token
            )
            if worst <= budget:
                chosen, least = entry, used
        return chosen

    def _conserve(self, snap: _Snapshot, ranked: list[Scored]) -> Scored:
        """Return the least busy endpoint completing within min(queue, service) of the best.

        The best itself when it has no queue or holds part of the prompt in its cache.
        """
        best = ranked[0]
        cost, _, cached, service = best
        slack = min(cost - service, service)
        if cached or not slack > 0:
            return best
        limit = cost + slack
        work, pending = snap.work, snap.pending  # seconds in flight, and sent since
        chosen, least = best, work[best[1]] + pending.get(best[1], 0.0)
        for entry in ranked[1:]:
            if entry[0] > limit:
                break
            busy = work[entry[1]] + pending.get(entry[1], 0.0)
            if busy < least:
                chosen, least = entry, busy
        return chosen

    def _record(
        self,
        request: Request,
        snap: _Snapshot,
        i: int,
        cached: int,
        best: list[int],
        exp: float,
        now: float,
    ) -> None:
        """Remember the work sent, the best endpoints and who now holds the prefix."""
        t = snap.term(i)
        snap.pending[i] = snap.pending.get(i, 0.0) + (
            (request.input_tokens - cached) * t.prefill_s_per_token
        )
        self._add_sent(snap.loads[i], request.input_tokens - cached, exp, now)
        if self.memory:
            self._recent[request.model] = tuple([snap.loads[j].endpoint.name for j in best])
        name, owner = snap.loads[i].endpoint.name, self._prefix_owner
        for h in request.prefix_hashes:
            owner[h] = name
        if len(owner) > PREFIX_INDEX_SIZE:  # forget the oldest half: cheap and bounded
            for h in list(owner)[: PREFIX_INDEX_SIZE // 2]:
                del owner[h]

    def _add_sent(self, load: EndpointLoad, prefill_tokens: int, exp: float, now: float) -> None:
        """Add a request's expected work to its endpoint's decayed total."""
        window, base = self.balance_window_s, self._sent_base
        if base is None or now - base > 20.0 * window or now < base:
            factor = math.exp(-(now - base) / window) if base is not None and now > base else 0.0
            self._sent = {k: v * factor for k, v in self._sent.items() if v * factor > 1e-9}
            self._sent_base = base = now
        work = rates_of(load).work_s(prefill_tokens, exp)
        name = load.endpoint.name
        self._sent[name] = self._sent.get(name, 0.0) + work * math.exp((now - base) / window)

    def _reason(
        self,
        head: str,
        t: CostTerms,
        cost: float,
        request: Request,
        cached: int,
        exp: float,
        scored: int,
        sampled_from: int,
    ) -> str:
        prefix = f", {cached} cached" if cached else ""
        among = f"sampled from {sampled_from}" if sampled_from else "all serving the model"
        full = "; full, waits for a slot" if t.full else ""
        return (
            f"{head} {_whole(cost * 1000)} ms (queue "
            f"{_whole(t.wait_s * 1000)} ms, {request.input_tokens} prompt tokens{prefix}, "
            f"~{_whole(exp)} output tokens); best of {scored} {among}{full}"
        )


def _whole(value: float) -> str:
    """Return ``f"{value:.0f}"`` at a fraction of its cost: a float format is a method call
    of some 1,700 instructions, rounding to an int and printing that a tenth of it (a request's
    reason has three to five; the same text, but for no minus sign on a value that rounds to 0)."""
    return str(round(value)) if math.isfinite(value) else f"{value:.0f}"
