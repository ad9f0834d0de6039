"""Plans: the diff, which record sets are ours, the safety valve, the UPDATE encoding."""

from __future__ import annotations

import dns.update
import pytest

from tests.dns_publish.servers import new_key
from tests.dns_publish.world import make_zone, table_v1, table_v2
from trafficmgr.dns.publishers import Rfc2136Target, UnsafePlanError, desired_records
from trafficmgr.dns.publishers.plan import ChangeKind, make_plan, owned
from trafficmgr.dns.publishers.records import RecordSets, record_set

ZONE = make_zone()
APEX = "infer.example.test."


def server_zone(records: RecordSets) -> RecordSets:
    """What an AXFR would return: our records plus the apex and an operator's own name."""
    others = [
        record_set(APEX, "SOA", 300, ["ns1.infer.example.test. hostmaster. 1 3600 600 86400 10"]),
        record_set(APEX, "NS", 300, ["ns1.infer.example.test."]),
        record_set(f"www.{APEX}", "A", 300, ["192.0.2.200"]),
        record_set(f"www.{APEX}", "TXT", 300, ['"hello"']),
        record_set(f"old-model.{APEX}", "A", 10, ["192.0.2.99"]),
        record_set(f"old-model.{APEX}", "TXT", 10, ['"trafficmgr table=x zone=default"']),
    ]
    return {**records, **{r.key: r for r in others}}


def test_only_differing_record_sets_are_changed() -> None:
    old, new = desired_records(table_v1(), ZONE), desired_records(table_v2(), ZONE)

    plan = make_plan("t", "v2", "axfr", owned(server_zone(old), new), new)

    kinds = {(c.rrset.name.split(".")[0], c.rrset.rtype): c.kind for c in plan.changes}
    assert kinds == {
        ("llama-3-70b", "A"): ChangeKind.UPDATE,
        ("llama-3-70b", "TXT"): ChangeKind.UPDATE,
        ("llama-3-8b", "TXT"): ChangeKind.UPDATE,
        ("api", "TXT"): ChangeKind.UPDATE,
        ("old-model", "A"): ChangeKind.DELETE,  # carries our marker: a model that left
        ("old-model", "TXT"): ChangeKind.DELETE,
    }
    assert plan.unchanged == 4  # www, SOA and NS are not ours: never in a plan
    (a,) = [c for c in plan.changes if c.rrset.rtype == "A" and c.kind is ChangeKind.UPDATE]
    assert (a.removed, a.added) == (frozenset({"198.51.100.10"}), frozenset({"192.0.2.10"}))
    assert "update llama-3-70b.infer.example.test. A -198.51.100.10 +192.0.2.10" in plan.summary()


def test_the_safety_valve_refuses_mass_deletes_unless_forced() -> None:
    current = {
        r.key: r
        for r in (record_set(f"m{i}.{APEX}", "TXT", 10, ['"trafficmgr x"']) for i in range(10))
    }
    keep = dict(list(current.items())[:6])

    plan = make_plan("t", "v", "axfr", current, keep)

    with pytest.raises(UnsafePlanError, match="deletes 4 of 10"):
        plan.raise_if_unsafe()
    plan.raise_if_unsafe(force=True)
    make_plan("t", "v", "axfr", dict(list(current.items())[:9]), {}).raise_if_unsafe()  # < 10


def count_rrs(message: dns.update.UpdateMessage) -> int:
    return sum(max(1, len(rrset)) for rrset in message.update)


@pytest.mark.parametrize("source", ["axfr", "none"])
def test_update_messages_carry_exactly_the_counted_ops(source: str) -> None:
    target = Rfc2136Target(ZONE, "127.0.0.1", new_key("k"), max_ops=5)
    old, new = desired_records(table_v1(), ZONE), desired_records(table_v2(), ZONE)
    plan = make_plan("t", "v2", source, {} if source == "none" else old, new)

    messages = target._messages(plan)

    assert len(messages) > 1 and all(count <= 5 for _, count in messages)
    assert [count_rrs(m) for m, _ in messages] == [count for _, count in messages]
    total = sum(count for _, count in messages)
    assert total == (8 if source == "axfr" else 16)  # replace = delete RRset + add each RR
