"""The compiled validators answer exactly as the schema interpreter does, good input or bad."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from regions.decisions.route import ROUTE_BODY
from regions.loop.heartbeat_doc import HEARTBEAT, parse_time
from regions.validation import Invalid, Kind, _check, compiled, parse_json

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


def near(kind: Kind) -> st.SearchStrategy[Any]:
    """Values of ``kind``, mostly well-formed, sometimes not."""
    tag = kind[0]
    if tag == "obj":
        fields = {name: near(f.kind) for name, f in kind[1].items()}
        required = {n: s for n, s in fields.items() if kind[1][n].required}
        optional = {n: s for n, s in fields.items() if not kind[1][n].required}
        good = st.fixed_dictionaries(required, optional=optional)
        extra = st.builds(lambda d, k, v: {**d, k: v}, good, st.text(max_size=4), JUNK)
        return st.one_of(good, good, good, extra, JUNK)
    if tag == "nullable":
        return st.none() | near(kind[1])
    if tag == "list":
        return st.one_of(st.lists(near(kind[1]), max_size=min(kind[2] + 1, 4)), JUNK)
    if tag in ("int", "num"):
        lo, hi = kind[1], kind[2]
        ends = [lo, hi, lo - 1, hi + 1]
        edges = st.sampled_from([*ends, *(int(e) for e in ends), float(hi) + 0.5, (lo + hi) / 2])
        inside = st.integers(int(max(lo, -(2**63))), int(min(hi, 2**63)))
        return st.one_of(edges, inside, st.floats(float(lo), float(hi), exclude_max=True), SCALARS)
    if tag == "str":
        return st.one_of(st.text(min_size=kind[2], max_size=kind[1] + 1), SCALARS)
    if tag == "choice":
        return st.one_of(st.sampled_from(kind[1]), SCALARS)
    if tag == "time":
        return st.one_of(st.floats(1e9, 2e9), st.just("2026-01-01T00:00:00Z"), SCALARS)
    return JUNK


def outcome(check: Any) -> tuple[Any, ...]:
    try:
        return ("ok", json.dumps(check(), sort_keys=True))
    except Invalid as exc:
        return ("invalid", exc.field, exc.message)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(near(HEARTBEAT))
def test_heartbeats(value: Any) -> None:
    fast = outcome(lambda: compiled(HEARTBEAT)(value, parse_time))
    assert fast == outcome(lambda: _check(HEARTBEAT, value, parse_time))


@settings(max_examples=400)
@given(near(ROUTE_BODY))
def test_route_bodies(value: Any) -> None:
    fast = outcome(lambda: compiled(ROUTE_BODY)(value, None))
    assert fast == outcome(lambda: _check(ROUTE_BODY, value, None))


def leaves(kind: Kind) -> list[Kind]:
    """Every scalar kind inside a schema."""
    tag = kind[0]
    if tag == "obj":
        return [leaf for f in kind[1].values() for leaf in leaves(f.kind)]
    if tag in ("nullable", "list"):
        return leaves(kind[1])
    return [kind]


def tricky(kind: Kind) -> list[Any]:
    values: list[Any] = [None, True, False, 0, 1, -1, 0.5, "", "x", "12", "x" * 300, [], {}]
    values += [float("nan"), float("inf"), float("-inf"), 10**400, -(10**400)]
    if kind[0] in ("int", "num"):
        for end in (kind[1], kind[2]):
            values += [end, end - 1, end + 1, int(end), int(end) - 1, int(end) + 1]
            values += [float(end), float(end) - 0.5, float(end) + 0.5]
    if kind[0] == "str":
        values += ["y" * kind[2], "y" * kind[1], "y" * (kind[1] + 1), "y" * max(0, kind[2] - 1)]
    if kind[0] == "choice":
        values += [*kind[1], kind[1][0].upper()]
    return values


def test_every_leaf_on_its_edges() -> None:
    for kind in {id(k): k for k in leaves(HEARTBEAT) + leaves(ROUTE_BODY)}.values():
        for value in tricky(kind):
            fast = outcome(lambda: compiled(kind)(value, parse_time))  # noqa: B023
            assert fast == outcome(lambda: _check(kind, value, parse_time)), (kind, value)  # noqa: B023


def test_a_huge_integer_is_out_of_range_not_a_crash() -> None:
    doc = parse_json(
        b'{"model": "m", "input_tokens": 1' + b"0" * 400 + b', "max_output_tokens": 1}'
    )
    assert outcome(lambda: compiled(ROUTE_BODY)(doc, None))[1] == "input_tokens"
    number = ("num", 0.0, 1.0)
    assert outcome(lambda: compiled(number)(10**400, None)) == ("invalid", "body", "outside 0..1")


def test_duplicate_keys_are_still_refused() -> None:
    try:
        parse_json(b'{"a": 1, "b": 2, "a": 3}')
    except Invalid as exc:
        assert exc.field == "body" and "duplicate key 'a'" in exc.message
    else:
        raise AssertionError("a duplicate key was accepted")
