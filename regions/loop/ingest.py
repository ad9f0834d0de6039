"""Heartbeat ingest: the agent's endpoint binding, compare-and-set in the hot state, history.

What a heartbeat may say, and its conversion to the engine's ``Heartbeat``, is
``heartbeat_doc``'s (a bad one is refused 400, naming the field); its downsampled history is
``heartbeat_history``'s. A replayed or out-of-order ``seq`` is not an error: it is answered
200 ``{"accepted": false, "reason": "stale seq"}`` and changes nothing.

Ordering (``regions.hotstate.is_newer``): a heartbeat's ``seq`` counts within its agent's
``session`` (agents send a new random id each time they start; older agents send none and
are one session). Another session wins at once; in one session a higher seq wins, a seq
jump is believed only as far as ``SEQ_PER_S`` per second since the stored beat plus one
interval, and a lower seq loses only within one heartbeat interval of the stored beat: a
forged or replayed heartbeat cannot silence an endpoint for longer than one interval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import DatabaseError

from regions import hotstate, metrics
from regions.errors import DomainError
from regions.fleet import snapshot
from regions.loop import freetext, heartbeat_history
from regions.loop.heartbeat_doc import HEARTBEAT, SESSION_CHARS, parse_time, to_heartbeat
from regions.loop.heartbeat_history import SAMPLE_EVERY_S
from regions.models import AgentToken, HeartbeatSample
from regions.models import Endpoint as EndpointRow
from regions.validation import Invalid, parse_json, validate

MAX_BODY_BYTES = 256 * 1024
# The failover policy's heartbeat interval, as of the last fleet view an endpoint was looked
# up in: how long a stored heartbeat may block out-of-order ones (``hotstate.Order``).
_interval_s = 1.0


@dataclass(frozen=True, slots=True)
class IngestResult:
    accepted: bool
    body: dict[str, Any]
    sample: HeartbeatSample | None = None  # the bucket's history row, when this beat opens it


def rejected(
    reason: str, status_code: int, detail: str, field: str = "", code: str = "invalid"
) -> DomainError:
    """Count a refused heartbeat and build the error the API answers."""
    metrics.count_ingest(False, reason)
    fields = {field: [detail]} if field else {}
    return DomainError(
        f"{field}: {detail}" if field else detail, fields=fields, code=code, status_code=status_code
    )


def parse_heartbeat(body: bytes) -> dict[str, Any]:
    """Parse and validate one heartbeat body; raise DomainError (400/413) naming the field."""
    if len(body) > MAX_BODY_BYTES:
        raise rejected(
            "too_large", 413, f"heartbeat body larger than {MAX_BODY_BYTES} bytes", code="too_large"
        )
    try:
        doc: dict[str, Any] = validate(HEARTBEAT, parse_json(body), "", times=parse_time)
    except Invalid as exc:
        raise _invalid(exc) from None
    return freetext.cleaned(doc, body)  # control characters replaced, never refused


def _invalid(exc: Invalid) -> DomainError:
    reason = "malformed_json" if exc.field == "body" else "invalid"
    return rejected(reason, 400, exc.message, exc.field)


def endpoint_ref(view: snapshot.FleetView, name: str) -> snapshot.EndpointRef:
    """Return the endpoint a heartbeat names; refuse an unknown one (400)."""
    global _interval_s
    ref = view.endpoints.get(name)
    if ref is None:
        raise rejected("unknown_endpoint", 400, f"unknown endpoint {name!r}", "endpoint")
    _interval_s = view.fleet.failover.heartbeat_interval_s
    return ref


def known_binding(
    view: snapshot.FleetView, token: AgentToken, ref: snapshot.EndpointRef
) -> bool | None:
    """Whether the token may report for the endpoint, if known without the database."""
    allowed = view.bindings.get((token.pk, ref.pk))
    if allowed is None and token.region_id is not None and token.region_id == ref.region_pk:
        return True
    return allowed


def authorise(view: snapshot.FleetView, token: AgentToken, ref: snapshot.EndpointRef) -> None:
    """Refuse (403) an endpoint the token is not bound to; may ask the database once per view."""
    allowed = known_binding(view, token, ref)
    if allowed is None:
        allowed = token.may_report(EndpointRow(pk=ref.pk, region_id=ref.region_pk))
        view.bindings[(token.pk, ref.pk)] = allowed
    if not allowed:
        raise rejected(
            "foreign_endpoint",
            403,
            f"this agent token may not report for endpoint {ref.endpoint.name!r}",
            "endpoint",
            code="permission_denied",
        )


def bound_endpoint(token: AgentToken, name: str) -> snapshot.EndpointRef:
    """Return the endpoint an agent token reports for; refuse unknown or foreign ones."""
    view = snapshot.current()
    ref = endpoint_ref(view, name)
    authorise(view, token, ref)
    return ref


def needs_totals(gpus: list[dict[str, Any]]) -> bool:
    """Tell whether the error deltas depend on the previous running counts.

    All-zero counts give zero deltas and zero running counts whatever came before, so the
    common healthy heartbeat skips reading them (one Redis round trip fewer).
    """
    return any(g["xid_errors"] or g["ecc_errors"] is None or g["ecc_errors"] for g in gpus)


def ingest(token: AgentToken, body: bytes, now: float) -> IngestResult:
    """Validate, authorise and store one heartbeat and its history row; return the reply."""
    doc = parse_heartbeat(body)
    view = snapshot.current()
    authorise(view, token, ref := endpoint_ref(view, doc["endpoint"]))
    result = accept(view, ref, doc, now)
    if result.sample is not None:
        try:
            heartbeat_history.store_samples([result.sample])
        except DatabaseError:  # kept and written once the database answers
            heartbeat_history.late_history.submit(result.sample)
    return result


def accept(
    view: snapshot.FleetView, ref: snapshot.EndpointRef, doc: dict[str, Any], now: float
) -> IngestResult:
    """Store a validated, authorised heartbeat in the hot state (no database access).

    The history row, when this is the first heartbeat of its bucket, is returned for the
    caller to store (``heartbeat_history.store_samples``), in the request or in the background.
    """
    put = prepare(ref, doc, now)
    return conclude(view, ref, put, hotstate.get().put_heartbeat(*put))


def prepare(ref: snapshot.EndpointRef, doc: dict[str, Any], now: float) -> hotstate.HeartbeatPut:
    """Check what the schema cannot; return the heartbeat, its bucket and the running counts."""
    store = hotstate.get()
    before = store.error_totals(ref.endpoint.name) if needs_totals(doc["gpus"]) else {}
    try:
        hb, totals = to_heartbeat(doc, now, before)
        session = doc.get("session") or ""
        if not SESSION_CHARS.issuperset(session):
            raise Invalid("session", "only letters, digits, '-' and '_'")
    except Invalid as exc:
        raise _invalid(exc) from None
    order = hotstate.Order(session, _interval_s)
    return hb, int(now // SAMPLE_EVERY_S) * SAMPLE_EVERY_S, totals, order


def conclude(
    view: snapshot.FleetView,
    ref: snapshot.EndpointRef,
    put: hotstate.HeartbeatPut,
    result: hotstate.PutResult,
) -> IngestResult:
    """Count the outcome of a compare-and-set and build the reply (and the history row)."""
    if not result.accepted:
        metrics.count_ingest(False, "stale_seq")
        return IngestResult(False, {"accepted": False, "reason": "stale seq"})
    metrics.count_ingest(True, "ok")
    reply: dict[str, Any] = {
        "accepted": True,
        "interval_s": view.fleet.failover.heartbeat_interval_s,
    }
    if result.drill is not None:
        reply["drill"] = result.drill
    hb, bucket = put[0], put[1]
    sample = heartbeat_history.history_row(ref.pk, bucket, hb) if result.new_bucket else None
    return IngestResult(True, reply, sample)
