"""The report's figures and verdict, from measurements made up to say exactly what happened."""

from __future__ import annotations

import ipaddress
from typing import Any

from regions.drills.measure import Answer, Vantage
from regions.drills.report import Observations, TableSample, build

T0 = 1_800_000_000.0  # the injection
FAULT = T0 + 0.4  # the last agent took the fault
CONTRACT_KEYS = {
    "kind",
    "target",
    "fault_at",
    "detected_after_s",
    "table_changed_after_s",
    "dns_changed_after_s",
    "dns_changed_after_s_max",
    "recovered_after_s",
    "wrong_answers",
    "residency_violations",
    "verdict",
    "reasons",
}
EU = ("eu-central", "eu-west")


def vantage(name: str, allowed: tuple[str, ...] | None) -> Vantage:
    subnet = ipaddress.IPv4Network("192.0.2.0/24")
    return Vantage(name, name, subnet, "192.0.2.1", "llama-3-8b", allowed)


def dns(vantage_name: str, after_fault: float, *regions: str, error: str = "") -> Answer:
    return Answer(FAULT + after_fault, vantage_name, tuple(regions), error=error)


def observations(**changes: Any) -> Observations:
    """An outage of eu-west seen well: detected at 1.5 s, DNS moved at 2 s, recovered."""
    obs = Observations(
        kind="region_outage",
        target="eu-west",
        region="eu-west",
        endpoints=("euw-1", "euw-2"),
        region_out=True,
        expect_detection=True,
        injected_at=T0,
        interval_s=1.0,
        miss_threshold=3,
        tick_s=1.0,
        ttl_s=10.0,
        taken_at={"euw-1": T0 + 0.1, "euw-2": FAULT},
        restore_at=FAULT + 8,
        end_at=FAULT + 16,
        detected_at=FAULT + 1.5,
        detected_by="region eu-west: healthy → down",
        recovered_at=FAULT + 14,
        recovery_wait_s=30,
        tables=[
            TableSample(T0 - 1, "a", 0.5, "healthy", 1.0),
            TableSample(FAULT + 1.5, "b", 0.0, "down", 0.0),
            TableSample(FAULT + 11, "c", 0.05, "recovering", 0.05),
            TableSample(FAULT + 14, "d", 0.5, "healthy", 1.0),
        ],
        vantages=[vantage("DE", EU), vantage("US", None)],
        dns_answers=[
            dns("DE", -1.0, "eu-west"),
            dns("US", -1.0, "us-east"),
            dns("DE", 1.0, "eu-west"),
            dns("DE", 2.0, "eu-central"),
            dns("US", 2.0, "us-east"),
            dns("DE", 12.0, "eu-west"),
        ],
        dns_configured=True,
    )
    for key, value in changes.items():
        setattr(obs, key, value)
    return obs


def test_a_good_outage_passes_with_every_contract_key() -> None:
    report = build(observations())
    assert set(report) >= CONTRACT_KEYS
    assert report["verdict"] == "pass", report["reasons"]
    assert report["fault_at"].startswith("2027-01-15T08:00:00.4")
    assert report["delivery_s"] == 0.4 and report["fault_spread_s"] == 0.3
    assert report["detected_after_s"] == 1.5
    assert report["table_changed_after_s"] == 1.5
    assert report["traffic_shifted_after_s"] == 1.5
    assert report["dns_changed_after_s"] == {"DE": 2.0}  # US was never answered by eu-west
    assert report["dns_changed_after_s_max"] == 2.0
    assert report["clients_moved_by_s"] == 12.0
    assert report["recovered_after_s"] == 6.0
    assert report["wrong_answers"] == 0 and report["residency_violations"] == 0
    assert report["timeline"]["dns"]["DE"] == [
        [-1.0, "eu-west"],
        [2.0, "eu-central"],
        [12.0, "eu-west"],
    ]
    assert report["timeline"]["marks"]["recovered"] == 14.0


def test_slow_detection_and_slow_dns_fail() -> None:
    obs = observations(detected_at=FAULT + 4.5)
    obs.dns_answers = [a for a in obs.dns_answers if a.at != FAULT + 2.0] + [
        dns("DE", 5.5, "eu-central")
    ]
    report = build(obs)
    assert report["verdict"] == "fail"
    assert any(r.startswith("detected after 4.50 s > target 4 s") for r in report["reasons"])
    assert any("DNS moved DE after 5.50 s > target 5 s" in r for r in report["reasons"])


def test_dns_that_never_moves_fails_and_has_no_max() -> None:
    obs = observations()
    obs.dns_answers = [
        a if a.at != FAULT + 2.0 else dns("DE", 2.0, "eu-west") for a in obs.dns_answers
    ]
    report = build(obs)
    assert report["dns_changed_after_s"] == {"DE": None}
    assert report["dns_changed_after_s_max"] is None
    assert report["verdict"] == "fail"
    assert any("DNS still answered eu-west to DE" in r for r in report["reasons"])
    assert report["wrong_answers"] == 0  # the late eu-west answer came before detection + 1 s


def test_answers_naming_the_failed_region_after_detection_are_wrong() -> None:
    obs = observations()
    obs.dns_answers.append(dns("DE", 3.0, "eu-west"))
    obs.route_answers = [Answer(FAULT + 4.0, "DE", ("eu-west",), "euw-1")]
    report = build(obs)
    assert report["wrong_answers"] == 2
    assert report["verdict"] == "fail"


def test_answers_outside_residency_are_violations_at_any_time() -> None:
    obs = observations()
    obs.dns_answers.append(dns("DE", 3.0, "us-east"))
    obs.route_answers = [Answer(FAULT - 1.0, "DE", ("ap-south",), "aps-1")]
    report = build(obs)
    assert report["residency_violations"] == 2
    assert report["verdict"] == "fail"
    assert {v["vantage"] for v in report["violations"]} == {"DE"}


def test_a_dns_server_that_never_answers_fails() -> None:
    obs = observations()
    obs.dns_answers = [
        dns(a.vantage, 0.1 * i, error="dns: Timeout") for i, a in enumerate(obs.dns_answers)
    ]
    report = build(obs)
    assert report["verdict"] == "fail"
    assert any("answered none of 6 queries" in r for r in report["reasons"])


def test_without_a_dns_server_the_move_is_not_judged() -> None:
    report = build(observations(dns_configured=False, dns_answers=[]))
    assert report["verdict"] == "pass"
    assert "DNS not measured: no DNS server to ask" in report["reasons"]


def test_a_fault_no_agent_took_fails() -> None:
    report = build(observations(taken_at={}, detected_at=None))
    assert report["verdict"] == "fail"
    assert report["fault_at"] == "2027-01-15T08:00:00Z" and report["delivery_s"] == 0
    assert any(
        "no agent of euw-1, euw-2 took the drill instruction" in r for r in report["reasons"]
    )


def test_not_recovered_within_the_wait_fails() -> None:
    report = build(observations(recovered_at=None))
    assert report["recovered_after_s"] is None
    assert report["verdict"] == "fail"
    assert "not recovered within 30 s of the restore" in report["reasons"]


def test_latency_need_not_be_detected_nor_move_dns() -> None:
    obs = observations(kind="latency", region_out=False, expect_detection=False, detected_at=None)
    obs.dns_answers = [dns("DE", t, "eu-west") for t in (-1.0, 1.0, 3.0, 6.0)]
    report = build(obs)
    assert report["verdict"] == "pass", report["reasons"]
    assert "the fault was not detected" in report["reasons"]


def test_an_aborted_drill_says_why_first() -> None:
    report = build(observations(aborted="aborted by alice"))
    assert report["verdict"] == "aborted"
    assert report["reasons"][0] == "aborted by alice"


def test_route_failures_during_the_fault_are_reported() -> None:
    obs = observations()
    obs.route_answers = [Answer(FAULT + 1.0, "DE", (), error="http 503")]
    report = build(obs)
    assert report["errors_during_fault"]["route"] == 1
    assert any(
        r.startswith("1 route requests failed during the fault (http 503)")
        for r in report["reasons"]
    )


def test_weights_drifting_with_load_are_not_a_table_change() -> None:
    obs = observations()
    obs.tables.insert(1, TableSample(T0 + 0.2, "a2", 0.49, "healthy", 1.0))  # load drift
    report = build(obs)
    assert report["table_changed_after_s"] == 1.5
