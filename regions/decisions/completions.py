"""Completed requests reported by gateways (``POST /api/v1/route/completions``).

A gateway that asked ``/route`` where to send a request later sees the response: how many
tokens the model generated and how long the request took. Reported here, in batches, those
completions teach the region's ``ai_aware`` pickers the output length per prompt prefix and
per prompt size and the service's latency tail (``picker.observe``), which the servers' own
histograms in heartbeats cannot: they know neither the prompt nor the gateway's latency.

Contract: a report is ``{"completions": [...]}`` with 1 to ``MAX_ITEMS`` items, each
``endpoint``, ``model``, ``input_tokens``, ``output_tokens`` (integers 0..``MAX_TOKENS``, as
``/route``), ``latency_ms`` (the request's time from the gateway sending it to the endpoint
until its last token: a finite number, more than 0 and less than an hour) and optionally
``prefix_hashes`` (as ``/route``'s). A report is taken whole or not at all: the first bad item
(a bad field, an endpoint the fleet does not have, a model the fleet does not route to that
endpoint) refuses the batch with 400 naming it (``completions[3].output_tokens``), and nothing
is stored; a gateway fixes or drops that item and sends the rest again. A report that is
taken is answered 202 ``{"accepted": N}``.

Every web process keeps its own pickers and a report reaches one of them, so accepted
completions go to the hot state, one bounded stream per region (``hotstate``), which every
process's ``/route`` core reads when it reads the control plane again (``RequestPath.maintain``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from regions import hotstate
from regions.decisions.route import MAX_TOKENS, PREFIX_HASHES
from regions.errors import DomainError, bad_input
from regions.fleet import snapshot
from regions.validation import (
    Field,
    Invalid,
    integer,
    obj,
    open_number,
    parse_json,
    string,
    validate,
)
from trafficmgr.contracts import Completion

MAX_ITEMS = 1000
MAX_BODY_BYTES = 1024 * 1024
MAX_LATENCY_MS = 3_600_000.0
# Prefix hashes kept per stored completion: the pickers group completions by a prompt's
# leading blocks, and the streams stay small (a /route body may carry 1,024).
STORED_PREFIX_HASHES = 32

COMPLETION = obj(
    {
        "endpoint": Field(string(63)),
        "model": Field(string(63)),
        "input_tokens": Field(integer(0, MAX_TOKENS)),
        "output_tokens": Field(integer(0, MAX_TOKENS)),
        "latency_ms": Field(open_number(0.0, MAX_LATENCY_MS)),
        "prefix_hashes": Field(PREFIX_HASHES, required=False, default=[]),
    }
)
REPORT_BODY = obj({"completions": Field(("list", COMPLETION, MAX_ITEMS))})


def parse_report(body: bytes, view: snapshot.FleetView) -> dict[str, list[Completion]]:
    """Validate a report against the fleet; return its completions by region.

    Raise DomainError: 413 for a body over ``MAX_BODY_BYTES``, 400 naming the first bad field.
    """
    if len(body) > MAX_BODY_BYTES:
        raise DomainError(
            f"completions report larger than {MAX_BODY_BYTES} bytes",
            code="too_large",
            status_code=413,
        )
    with bad_input():
        return _by_region(validate(REPORT_BODY, parse_json(body)), view)


def _by_region(doc: Mapping[str, Any], view: snapshot.FleetView) -> dict[str, list[Completion]]:
    items = doc["completions"]
    if not items:
        raise Invalid("completions", "at least 1 item, got 0")
    out: dict[str, list[Completion]] = {}
    for i, item in enumerate(items):
        name, model = item["endpoint"], item["model"]
        ref = view.endpoints.get(name)
        if ref is None:
            raise Invalid(f"completions[{i}].endpoint", f"unknown endpoint {name!r}")
        endpoint = ref.endpoint
        if model not in endpoint.models:
            served = ", ".join(endpoint.models) or "nothing"
            raise Invalid(
                f"completions[{i}].model",
                f"endpoint {name} does not serve {model!r} (it serves {served})",
            )
        out.setdefault(endpoint.region, []).append(
            Completion(
                name,
                model,
                item["input_tokens"],
                item["output_tokens"],
                item["latency_ms"] / 1000.0,
                tuple(item["prefix_hashes"][:STORED_PREFIX_HASHES]),
            )
        )
    return out


def report(body: bytes, view: snapshot.FleetView | None = None) -> int:
    """Take one report: validate it whole, store it in one round trip; return the count."""
    view = snapshot.current() if view is None else view
    by_region = parse_report(body, view)
    hotstate.get().add_completions(by_region)
    return sum(len(items) for items in by_region.values())
