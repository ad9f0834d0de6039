"""Refused fleet input names the path (and line), and leaves the stored fleet untouched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from regions.fleet.plan import plan_fleet
from trafficmgr.fleetfile import FleetError, load_fleet_text
from trafficmgr.routing.types import ResidencyRule

pytestmark = pytest.mark.django_db

BOMB = """\
a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: [*d, *d, *d, *d, *d, *d, *d, *d, *d]
"""


def edited(world_yaml: str, edit: Callable[[dict[str, Any]], None]) -> str:
    doc = yaml.safe_load(world_yaml)
    edit(doc)
    return yaml.safe_dump(doc, sort_keys=False)


def setter(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return edit


EP = ("regions", 0, "endpoints", 0)
INVALID_EDITS = {
    "unknown GPU profile": (
        setter((*EP, "gpu"), "H200"),
        "regions[0].endpoints[0].gpu: unknown GPU profile 'H200'",
    ),
    "duplicate region": (
        setter(("regions", 1, "name"), "eu-west"),
        "regions[1].name: duplicate region name 'eu-west'",
    ),
    "duplicate endpoint across regions": (
        setter(("regions", 2, "endpoints", 0, "name"), "euw-1"),
        "regions[2].endpoints[0].name: duplicate endpoint name 'euw-1'",
    ),
    "bad IPv4": (
        setter(("regions", 0, "addresses"), ["192.0.2.300"]),
        "regions[0].addresses[0]: '192.0.2.300' is not an IPv4 or IPv6 address",
    ),
    "bad IPv6": (
        setter(("regions", 0, "addresses"), ["2001:db8::g"]),
        "regions[0].addresses[0]: '2001:db8::g' is not an IPv4 or IPv6 address",
    ),
    "port out of range": (
        setter((*EP, "address"), "10.1.0.11:99999"),
        "regions[0].endpoints[0].address: '10.1.0.11:99999'",
    ),
    "port not a number": (
        setter((*EP, "address"), "10.1.0.11:http"),
        "regions[0].endpoints[0].address: '10.1.0.11:http'",
    ),
    "bad host": (
        setter((*EP, "address"), "bad host!:80"),
        "regions[0].endpoints[0].address: 'bad host!:80'",
    ),
    "latitude": (
        setter(("regions", 0, "location", "lat"), 91),
        "regions[0].location.lat: 91 out of range",
    ),
    "longitude": (
        setter(("regions", 0, "location", "lon"), -180.5),
        "regions[0].location.lon: -180.5 out of range",
    ),
    "residency unknown region": (
        setter(("residency", 0, "regions"), ["ap-south", "mars-1"]),
        "residency[0].regions[1]: unknown region 'mars-1'",
    ),
    "residency empty clients": (
        setter(("residency", 0, "clients"), {"countries": []}),
        "residency[0].clients: a residency rule must name client countries, country sets or "
        "continents",
    ),
    "residency unknown country set": (
        setter(("residency", 0, "clients"), {"sets": ["EEA", "EUROPE"]}),
        "residency[0].clients.sets[1]: unknown country set 'EUROPE' (known: ASEAN, EEA,",
    ),
    "residency country set not a string": (
        setter(("residency", 0, "clients"), {"sets": [["EEA"]]}),
        "residency[0].clients.sets[0]: expected a non-empty string, got list",
    ),
    "slo negative objective": (
        setter(("slo",), {"ttft_p99_ms": -5}),
        "slo.ttft_p99_ms: -5 out of range",
    ),
    "slo unknown model": (
        setter(("slo",), {"models": {"gpt-9": {"ttft_p99_ms": 2000}}}),
        "slo.models.gpt-9: no endpoint serves model 'gpt-9'",
    ),
    "slo objective not a number": (
        setter(("slo",), {"models": {"llama-3-70b": {"ttft_p99_ms": "fast"}}}),
        "slo.models.llama-3-70b.ttft_p99_ms: expected a number, got str",
    ),
    "slo unknown key": (setter(("slo",), {"ttft_p50_ms": 500}), "slo.ttft_p50_ms: unknown key"),
    "residency no regions": (
        setter(("residency", 0, "regions"), []),
        "residency[0].regions: a residency rule must allow",
    ),
    "unknown key": (
        setter((*EP, "gpu_type"), "H100"),
        "regions[0].endpoints[0].gpu_type: unknown key",
    ),
    "boolean as a number": (
        setter((*EP, "gpus"), True),
        "regions[0].endpoints[0].gpus: expected a number, got bool",
    ),
    "negative weight": (setter(("regions", 1, "weight"), -1), "regions[1].weight: -1 out of range"),
    "bad state": (
        setter(("regions", 1, "state"), "draining"),
        "regions[1].state: 'draining' is not one of active, drained, disabled",
    ),
    "bad all_down": (setter(("failover", "all_down"), "maybe"), "failover.all_down"),
}


@pytest.mark.parametrize("case", sorted(INVALID_EDITS))
def test_invalid_values_are_refused_by_path(
    case: str,
    world: Any,
    world_yaml: str,
    apply_yaml: Callable[..., Any],
    state: Callable[[], dict[str, Any]],
) -> None:
    edit, expected = INVALID_EDITS[case]
    before = state()
    with pytest.raises(FleetError) as info:
        apply_yaml(edited(world_yaml, edit))
    assert expected in str(info.value)
    assert state() == before


def test_unknown_gpu_error_carries_the_line(world_yaml: str) -> None:
    text = world_yaml.replace("gpu: A100, gpus: 4", "gpu: H200, gpus: 4")
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "H200" in s)
    with pytest.raises(FleetError) as info:
        load_fleet_text(text)
    (issue,) = info.value.issues
    assert str(issue) == f"regions[0].endpoints[1].gpu: unknown GPU profile 'H200' (line {line})"


RAW_INPUTS: dict[str, tuple[str | bytes, str, int | None]] = {
    "syntax error": (
        "zone: a.example\nregions:\n  - name: [eu-west\n    country: IE\n",
        "YAML syntax error",
        4,
    ),
    "tab indentation": ("zone: a.example\nregions:\n\t- name: x\n", "YAML syntax error", 3),
    "bomb": (BOMB, "anchors are not allowed", 1),
    "alias": ("zone: &z a.example\nregions: *z\n", "anchors are not allowed", 1),
    "10,000 regions": (
        "zone: a.example\nregions:\n" + "  - x\n" * 10_000,
        "regions: more than 5000 items",
        3,
    ),
    "10,000 models": (
        "zone: a.example\nregions:\n  - name: r\n    endpoints:\n      - models: ["
        + ", ".join(f"m{i}" for i in range(10_000))
        + "]\n",
        "regions[0].endpoints[0].models: more than 5000 items",
        5,
    ),
    "not UTF-8": (b"zone: infer.example.test\nregions: [\xff\xfe]\n", "not UTF-8 text", None),
    "UTF-16": ("zone: a.example\n".encode("utf-16"), "not UTF-8 text", None),
    "empty": ("", "the file is empty", None),
    "missing zone": ("regions: []\n", "zone: required key is missing", 1),
    "a list, not a mapping": ("- zone\n", "fleet: expected a mapping, got list", None),
    "duplicate key": ("zone: a.example\nzone: b.example\nregions: []\n", "zone: duplicate key", 2),
    "too large": (b"#" * 1_000_001, "larger than 1000000 bytes", None),
    "python tag": (
        "zone: !!python/name:os.system\nregions: []\n",
        "could not determine a constructor",
        1,
    ),
    "python tag on a list": (
        "zone: !!python/object/apply:os.system ['true']\nregions: []\n",
        "zone: expected a non-empty string, got list",
        1,
    ),
}


@pytest.mark.parametrize("case", sorted(RAW_INPUTS))
def test_malformed_documents_are_refused(
    case: str, world: Any, apply_yaml: Callable[..., Any], state: Callable[[], dict[str, Any]]
) -> None:
    text, expected, line = RAW_INPUTS[case]
    before = state()
    with pytest.raises(FleetError) as info:
        apply_yaml(text)
    assert expected in str(info.value)
    if line is not None:
        assert info.value.issues[0].line == line
    assert state() == before


def test_programmatic_fleet_with_dangling_residency_is_refused(
    world: Any, state: Callable[[], dict[str, Any]]
) -> None:
    rule = ResidencyRule("eu", frozenset(), frozenset({"EU"}), ("eu-west", "nowhere"))
    before = state()
    with pytest.raises(FleetError, match=r"residency\[0\]\.regions\[1\]: unknown region"):
        plan_fleet(dataclasses.replace(world, residency=(rule,)))
    assert state() == before


def test_every_problem_is_reported_at_once(world_yaml: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["regions"][0]["endpoints"][0]["gpu"] = "H200"
        doc["regions"][1]["location"]["lat"] = 100
        doc["residency"][0]["regions"] = ["mars-1"]

    with pytest.raises(FleetError) as info:
        load_fleet_text(edited(world_yaml, edit))
    assert set(info.value.as_fields()) == {
        "regions[0].endpoints[0].gpu",
        "regions[1].location.lat",
        "residency[0].regions[0]",
    }
