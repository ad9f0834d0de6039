"""Outstanding work from what a server reports, for a picker without an in-flight view of its own.

A gateway counts the work it sent and has not seen finish (``requestpath.inflight``):
prompt tokens not yet prefilled, answer tokens not yet decoded. ``POST /api/v1/route`` sees
none of that, and a gateway sees only its own share when several serve one fleet; what every
caller has is the heartbeat: requests running, requests waiting, KV cache use and the
endpoint's profile. Without an estimate the cost model reads zero outstanding work from it,
so an endpoint at full batch with 5,000 requests waiting and a 99 % full KV cache costs the
same as a peer at full batch with none waiting, and the two get the same share.

The estimate, in the units the picker's cost model takes (``estimator.cost_terms``):

- a request's size is what a running one holds in the KV cache (usage x capacity / running:
  its prompt and its answer so far, or all of the answer where the server reserves it, as the
  simulator does); with nothing running or no KV figure, the profile's nominal slot
  (``KV_TOKENS_PER_SLOT``);
- half of that is prompt, half answer (a heartbeat does not say which; what ranks endpoints
  is the queue, which this counts in whole requests);
- a waiting request still has its whole prompt to prefill and its whole answer to decode; a
  running one, on average, half its answer left.

``with_own_flight`` combines the heartbeat's view with a caller's own in-flight requests (a
gateway's ledger: exact and current, but only its own). The server's count includes the
caller's requests as of the heartbeat; the rest are other callers'. So the combined view is
the caller's own requests now plus the others the heartbeat implies: what it reported beyond
the caller's own count when it read that heartbeat (``own_at_report``; its count now when it
kept none). Several callers that see the same heartbeats and pick by the same rule move
together between two heartbeats, so a caller that knows how many others like it the
heartbeats imply (``peers``: the region's reported requests beyond its own, over its own)
counts the others' change since as that many times its own. The others' outstanding work is
taken to be like the caller's own requests at that endpoint, per request, when it has any
there (known exactly, where the KV-based estimate only guesses how long prompts and answers
are); else their share of the heartbeat's estimate. The requests split into running and
waiting as a server splits them: up to the batch the heartbeat showed when it had a queue,
else up to its slots.

What the simulator measured for these choices (``bench/engine/sim_policies.py``, Azure code trace
at load 0.6, P99 of ``ai_aware`` with one / four gateway processes; the omniscient upper
bound 5.6 s): the larger of the two views per figure, which counts a caller's queued
requests twice and keeps a drained endpoint busy until its next heartbeat, 13.0 / 8.4 s;
own plus others with the count at the heartbeat, 5.8 / 13.6 s; mirroring peers, 5.8 / 10.4 s;
the others' work like the caller's own, 5.8 / 5.8 s.
"""

from __future__ import annotations

from trafficmgr.routing.estimator import KV_TOKENS_PER_SLOT, ServiceRates, service_rates
from trafficmgr.routing.pickbase import EndpointLoad

PROMPT_SHARE = 0.5  # of a request's KV footprint, taken as its prompt


def reported_work(
    rates: ServiceRates, running: int, waiting: int, kv_cache_usage: float
) -> tuple[float, float]:
    """Return the (prefill, decode) tokens an endpoint reporting these figures has to do."""
    running, waiting = max(0, running), max(0, waiting)
    if running == 0 and waiting == 0:
        return 0.0, 0.0
    held = min(1.0, max(0.0, kv_cache_usage)) * rates.kv_capacity_tokens
    size = held / running if running and held > 0 else float(KV_TOKENS_PER_SLOT)
    prompt = size * PROMPT_SHARE
    answer = size - prompt
    return waiting * prompt, waiting * answer + running * answer / 2.0


def peers(reported: int, own: int) -> float:
    """Return how many callers like this one a region's heartbeats imply besides it."""
    return max(0.0, reported - own) / own if own > 0 else 0.0


def with_own_flight(
    base: EndpointLoad,
    running: int,
    prefill_tokens: float,
    decode_tokens: float,
    blocks: frozenset[int],
    own_at_report: int | None = None,
    peers: float = 0.0,
) -> EndpointLoad:
    """Return the heartbeat view ``base`` with a caller's own in-flight requests and blocks.

    ``running`` counts every request the caller has at the endpoint (queued there or not);
    ``prefill_tokens`` and ``decode_tokens`` are their outstanding work; ``own_at_report``
    how many it had when it read the heartbeat; ``peers`` how many callers like it the
    heartbeats imply besides it (see the module doc). A constructor call:
    ``dataclasses.replace`` is slower on this path.
    """
    reported = base.running + base.waiting
    mine = running if own_at_report is None else own_at_report
    then = max(0, reported - mine)
    share = then / reported if reported else 0.0
    prefill = prefill_tokens + share * base.outstanding_prefill_tokens
    decode = decode_tokens + share * base.outstanding_decode_tokens
    others = then
    if peers > 0.0 and running != mine:
        # the others see what this caller saw and pick as it picks: their change since the
        # heartbeat mirrors its own, ``peers`` times
        others = max(0, then + round(peers * (running - mine)))
    if running and others:
        # the others' requests are taken to be like the caller's own here (known exactly)
        # rather than like the heartbeat's coarse KV-based estimate
        scale = 1.0 + others / running
        prefill, decode = prefill_tokens * scale, decode_tokens * scale
    total = running + others
    if base.waiting > 0:
        batch = base.running  # it had a queue: that was as many as it could run
    else:
        batch = service_rates(base.profile, base.endpoint.gpus).max_concurrency
    in_batch = min(total, max(batch, base.running))
    return EndpointLoad(
        base.endpoint,
        base.profile,
        base.healthy,
        in_batch,
        total - in_batch,
        prefill,
        decode,
        base.kv_cache_usage,
        base.gpu_util,
        base.latency_ewma_ms,
        blocks,
    )
