"""A drill's report: what was measured, turned into figures, a verdict and its reasons.

Times are seconds after ``fault_at``: the moment the last instructed agent took the fault
(the reply to its heartbeat carried it), i.e. when the injected failure fully existed. How
long delivery took after the injection is ``delivery_s``.

- ``detected_after_s``: first Event of the region going down (a fault that takes the whole
  region out), down or degraded (other region-wide faults), or of an instructed endpoint
  turning unhealthy (endpoint faults; both count for ``gpu_degraded``).
- Agents take the fault at their own heartbeats, up to an interval apart
  (``fault_spread_s``), so part of a region may fail, and be seen, before ``fault_at``:
  figures are not negative, they are clamped at 0.
- ``table_changed_after_s``: first published table where the target region's share of the
  traffic (client mix weighted; every list alike without one) dropped by more than the
  drift load causes (1 point, or 5 % of its share);
  ``traffic_shifted_after_s``: first table where it reached its lowest during the fault.
- ``dns_changed_after_s``: per vantage point that was answered with the target region before
  the fault, its first answer naming it no more; ``dns_changed_after_s_max`` the slowest
  (null when one never moved). Answers are authoritative (no resolver cache in between);
  resolvers may keep an old answer up to ``ttl_s`` longer: ``clients_moved_by_s``.
- ``wrong_answers``: answers (DNS and route) still naming the failed region, or route answers
  naming a failed endpoint, later than one tick after detection while the fault lasted.
- ``residency_violations``: answers naming a region outside what strict residency allows
  the vantage point (the engine's ``allowed_regions``), at any time.
- ``recovered_after_s``: after the restore, the region back to healthy (or what it was
  before) with its slow-start ramp complete and the endpoints healthy; null past the wait.

Verdict targets (``targets``): detection within ``miss_threshold x heartbeat_interval_s +
tick`` (4 s at 1 s / 3 / 1 s), DNS moved within one more tick (5 s), plus ``JITTER_S`` for
timer scheduling. They apply where the fault calls for them: every kind but ``latency``
must be detected; DNS must move when the fault leaves the region nothing to serve with.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from regions.drills.measure import Answer, Vantage
from trafficmgr.routing.table_json import iso8601

JITTER_S = 0.1
EPSILON = 1e-4
SHARE_NOISE = 0.01  # absolute share of the traffic
SHARE_NOISE_RELATIVE = 0.05  # of the region's share before the fault


@dataclass(frozen=True, slots=True)
class TableSample:
    at: float  # when the table was generated
    version: str
    share: float  # the target region's share of the traffic
    state: str
    ramp: float


@dataclass
class Observations:
    kind: str
    target: str
    region: str
    endpoints: tuple[str, ...]
    region_out: bool
    expect_detection: bool
    injected_at: float
    interval_s: float
    miss_threshold: int
    tick_s: float
    ttl_s: float
    taken_at: dict[str, float] = field(default_factory=dict)
    restore_at: float | None = None
    end_at: float = 0.0
    aborted: str | None = None
    detected_at: float | None = None
    detected_by: str = ""
    recovered_at: float | None = None
    recovery_wait_s: float = 0.0
    tables: list[TableSample] = field(default_factory=list)
    vantages: list[Vantage] = field(default_factory=list)
    dns_answers: list[Answer] = field(default_factory=list)
    route_answers: list[Answer] = field(default_factory=list)
    dns_configured: bool = False
    notes: list[str] = field(default_factory=list)
    guardrails: dict[str, Any] = field(default_factory=dict)
    injected: bool = True  # False: it ended before any instruction went out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def fault_time(obs: Observations) -> tuple[float, list[str]]:
    """Return when the fault fully existed, and what went wrong delivering it."""
    if not obs.injected:
        return obs.injected_at, []
    taken = [obs.taken_at[e] for e in obs.endpoints if e in obs.taken_at]
    missing = [e for e in obs.endpoints if e not in obs.taken_at]
    problems = []
    if not taken:
        problems.append(
            f"no agent of {', '.join(obs.endpoints)} took the drill instruction (are agents "
            "running and sending heartbeats?)"
        )
        return obs.injected_at, problems
    if missing:
        problems.append(f"agents of {', '.join(missing)} never took the drill instruction")
    return max(taken), problems


def table_figures(obs: Observations, fault_at: float) -> tuple[float | None, float | None]:
    """Return (table_changed_after_s, traffic_shifted_after_s)."""
    before = [t for t in obs.tables if t.at < obs.injected_at]
    after = [
        t
        for t in obs.tables
        if t.at >= obs.injected_at and (obs.restore_at is None or t.at <= obs.restore_at)
    ]
    if not after:
        return None, None
    baseline = before[-1].share if before else after[0].share
    # Weights drift with load every tick; a drop counts once it is more than that noise.
    noise = max(SHARE_NOISE, SHARE_NOISE_RELATIVE * baseline)
    changed = next((t for t in after if t.share < baseline - noise), None)
    if changed is None:
        return None, None
    lowest = min(t.share for t in after)
    shifted = next(t for t in after if t.share <= lowest + EPSILON)
    return max(0.0, changed.at - fault_at), max(0.0, shifted.at - fault_at)


def dns_moves(obs: Observations, fault_at: float) -> dict[str, float | None]:
    """Per vantage answered with the target region before the fault: when it stopped."""
    out: dict[str, float | None] = {}
    end = obs.restore_at if obs.restore_at is not None else obs.end_at
    for v in obs.vantages:
        mine = [a for a in obs.dns_answers if a.vantage == v.name and not a.error]
        before = [a for a in mine if a.at < obs.injected_at]
        if not before or obs.region not in before[-1].regions:
            continue
        moved = next(
            (a for a in mine if obs.injected_at <= a.at <= end and obs.region not in a.regions),
            None,
        )
        out[v.name] = None if moved is None else max(0.0, moved.at - fault_at)
    return out


def wrong_answers(obs: Observations) -> int:
    if obs.detected_at is None or obs.restore_at is None:
        return 0
    since = obs.detected_at + obs.tick_s
    count = 0
    for a in (*obs.dns_answers, *obs.route_answers):
        if not since < a.at < obs.restore_at or a.error:
            continue
        if (obs.region_out and obs.region in a.regions) or (
            not obs.region_out and a.endpoint and a.endpoint in _failed(obs)
        ):
            count += 1
    return count


def _failed(obs: Observations) -> set[str]:
    """Endpoints the fault takes out (not merely slows)."""
    if obs.kind in ("latency", "gpu_degraded"):
        return set()
    return set(obs.endpoints)


def residency_violations(obs: Observations) -> list[Answer]:
    allowed = {v.name: v.allowed for v in obs.vantages}
    bad = []
    for a in (*obs.dns_answers, *obs.route_answers):
        rule = allowed.get(a.vantage)
        if rule is None:
            continue
        if any(not r.startswith("?") and r not in rule for r in a.regions):
            bad.append(a)
    return bad


def targets(obs: Observations) -> dict[str, float]:
    detect = obs.miss_threshold * obs.interval_s + obs.tick_s
    return {"detected_s": detect, "dns_moved_s": detect + obs.tick_s, "jitter_s": JITTER_S}


def build(obs: Observations) -> dict[str, Any]:
    """Turn the observations into the report (contract keys first, then the extras)."""
    fault_at, reasons = fault_time(obs)
    detected = None if obs.detected_at is None else max(0.0, obs.detected_at - fault_at)
    changed, shifted = table_figures(obs, fault_at)
    moves = dns_moves(obs, fault_at)
    slowest = (
        None
        if not moves or None in moves.values()
        else max(v for v in moves.values() if v is not None)
    )
    wrong = wrong_answers(obs)
    violations = residency_violations(obs)
    recovered = (
        None
        if obs.recovered_at is None or obs.restore_at is None
        else max(0.0, obs.recovered_at - obs.restore_at)
    )
    goal = targets(obs)
    verdict, why = judge(obs, reasons, detected, moves, slowest, wrong, violations, recovered, goal)
    report: dict[str, Any] = {
        "kind": obs.kind,
        "target": obs.target,
        "fault_at": iso8601(fault_at),
        "detected_after_s": _round(detected),
        "table_changed_after_s": _round(changed),
        "dns_changed_after_s": {k: _round(v) for k, v in moves.items()},
        "dns_changed_after_s_max": _round(slowest),
        "traffic_shifted_after_s": _round(shifted),
        "recovered_after_s": _round(recovered),
        "wrong_answers": wrong,
        "residency_violations": len(violations),
        "verdict": verdict,
        "reasons": why,
        "region": obs.region,
        "endpoints": list(obs.endpoints),
        "injected_at": iso8601(obs.injected_at),
        "delivery_s": _round(fault_at - obs.injected_at),
        "fault_spread_s": _round(fault_at - min(obs.taken_at.values(), default=fault_at)),
        "detected_by": obs.detected_by,
        "ttl_s": obs.ttl_s,
        "clients_moved_by_s": _round(None if slowest is None else slowest + obs.ttl_s),
        "targets": goal,
        "vantages": [
            {
                "name": v.name,
                "country": v.country,
                "subnet": str(v.subnet),
                "model": v.model,
                "allowed": list(v.allowed) if v.allowed is not None else None,
            }
            for v in obs.vantages
        ],
        "answers": {"dns": len(obs.dns_answers), "route": len(obs.route_answers)},
        "errors_during_fault": {
            "dns": len(errors_during(obs, obs.dns_answers)),
            "route": len(errors_during(obs, obs.route_answers)),
        },
        "violations": [
            {"at": _round(a.at - fault_at), "vantage": a.vantage, "regions": list(a.regions)}
            for a in violations[:20]
        ],
        "guardrails": obs.guardrails,
        "timeline": timeline(obs, fault_at, detected, recovered),
    }
    return report


def judge(
    obs: Observations,
    problems: list[str],
    detected: float | None,
    moves: dict[str, float | None],
    slowest: float | None,
    wrong: int,
    violations: Sequence[Answer],
    recovered: float | None,
    goal: dict[str, float],
) -> tuple[str, list[str]]:
    """Return the verdict and every reason behind it (failed checks first)."""
    fails, notes = list(problems), list(obs.notes)
    if obs.aborted:
        return "aborted", [obs.aborted, *fails, *notes]
    slack = goal["jitter_s"]
    if detected is None:
        (fails if obs.expect_detection else notes).append("the fault was not detected")
    elif obs.expect_detection and detected > goal["detected_s"] + slack:
        fails.append(f"detected after {detected:.2f} s > target {goal['detected_s']:g} s")
    else:
        notes.append(f"detected after {detected:.2f} s (target {goal['detected_s']:g} s)")
    dns_ok = [a for a in obs.dns_answers if not a.error]
    if not obs.dns_configured:
        notes.append("DNS not measured: no DNS server to ask")
    elif not dns_ok:
        fails.append(f"the DNS server answered none of {len(obs.dns_answers)} queries")
    elif not moves:
        notes.append(f"no vantage point was answered with {obs.region} before the fault")
    elif obs.region_out:
        stuck = sorted(k for k, v in moves.items() if v is None)
        late = sorted(
            k for k, v in moves.items() if v is not None and v > goal["dns_moved_s"] + slack
        )
        if stuck:
            fails.append(f"DNS still answered {obs.region} to {', '.join(stuck)} until the end")
        if late:
            fails.append(
                f"DNS moved {', '.join(late)} after {slowest or 0:.2f} s > target "
                f"{goal['dns_moved_s']:g} s"
            )
        if not stuck and not late and slowest is not None:
            notes.append(f"DNS moved after {slowest:.2f} s (target {goal['dns_moved_s']:g} s)")
    if wrong:
        fails.append(f"{wrong} answers still pointed at the failed target after detection")
    if violations:
        fails.append(f"{len(violations)} answers broke residency")
    if recovered is None:
        fails.append(f"not recovered within {obs.recovery_wait_s:g} s of the restore")
    else:
        notes.append(f"recovered {recovered:.2f} s after the restore{_share_note(obs)}")
    failed = errors_during(obs, obs.route_answers)
    if failed:
        sample = sorted({a.error for a in failed})[:3]
        notes.append(
            f"{len(failed)} route requests failed during the fault ({', '.join(sample)}), "
            f"{_round(failed[0].at - obs.injected_at)}..{_round(failed[-1].at - obs.injected_at)}"
            " s after the injection"
        )
    return ("fail" if fails else "pass"), [*fails, *notes]


def errors_during(obs: Observations, answers: Sequence[Answer]) -> list[Answer]:
    """Answers that failed between the injection and the restore."""
    end = obs.restore_at if obs.restore_at is not None else obs.end_at
    return [a for a in answers if a.error and obs.injected_at <= a.at <= end]


def _share_note(obs: Observations) -> str:
    """Say how much of its traffic the region had back when it counted as recovered."""
    before = [t for t in obs.tables if t.at < obs.injected_at]
    after = [t for t in obs.tables if obs.recovered_at is not None and t.at <= obs.recovered_at]
    if not before or not after or before[-1].share <= EPSILON:
        return ""
    then, now = before[-1].share, after[-1].share
    if now >= then * 0.9:
        return ""
    return (
        f"; it carried {now:.0%} of the traffic then ({then:.0%} before): the table gives the "
        "rest back gradually"
    )


def _changes(points: Sequence[tuple[float, Any]]) -> list[list[Any]]:
    out: list[list[Any]] = []
    for at, value in points:
        if not out or out[-1][1] != value:
            out.append([round(at, 3), value])
    return out


def _label(a: Answer) -> str:
    """Name an answer by its regions ("-": none, "!...": an error); endpoints vary too often."""
    if a.error:
        return "!" + a.error
    return ",".join(a.regions) or "-"


def timeline(
    obs: Observations, fault_at: float, detected: float | None, recovered: float | None
) -> dict[str, Any]:
    """A compact timeline (changes only, seconds after the fault) for plots and readers."""
    restore = None if obs.restore_at is None else obs.restore_at - fault_at
    return {
        "marks": {
            "injected": round(obs.injected_at - fault_at, 3),
            "fault": 0.0,
            "detected": _round(detected),
            "restored": _round(restore),
            "recovered": _round(
                None if recovered is None or restore is None else restore + recovered
            ),
            "end": round(obs.end_at - fault_at, 3),
        },
        "share": _changes([(t.at - fault_at, [round(t.share, 4), t.state]) for t in obs.tables]),
        "dns": {
            v.name: _changes(
                [(a.at - fault_at, _label(a)) for a in obs.dns_answers if a.vantage == v.name]
            )
            for v in obs.vantages
        },
        "route": {
            v.name: _changes(
                [(a.at - fault_at, _label(a)) for a in obs.route_answers if a.vantage == v.name]
            )
            for v in obs.vantages
            if any(a.vantage == v.name for a in obs.route_answers)
        },
    }
