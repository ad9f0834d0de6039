"""Plan before changing: what differs between a server's records and the desired ones.

Pure. A plan holds one ``Change`` per record set to create, update or delete; a record set
that already matches is left alone, so applying a plan sends only the difference. Which
record sets are ours: every name we publish, plus every name whose TXT carries the marker
(a model that left the table is deleted; an operator's ``www`` is never touched).

The safety valve is octoDNS's: a plan that would delete more than ``MAX_DELETE_SHARE`` of
the record sets we manage (when we manage at least ``MIN_EXISTING``) is refused unless
forced, since that is more often a truncated table or a wrong zone than intent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from trafficmgr.dns.publishers.errors import UnsafePlanError
from trafficmgr.dns.publishers.records import MANAGED_TYPES, RecordSet, RecordSets, is_marker

MAX_DELETE_SHARE = 0.3
MIN_EXISTING = 10


class ChangeKind(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Change:
    """One record set to create, update or delete."""

    kind: ChangeKind
    old: RecordSet | None
    new: RecordSet | None

    @property
    def rrset(self) -> RecordSet:
        """Return the record set this change is about (the new one unless deleted)."""
        found = self.new or self.old
        assert found is not None
        return found

    @property
    def added(self) -> frozenset[str]:
        old = self.old.values if self.old else frozenset()
        return self.new.values - old if self.new else frozenset()

    @property
    def removed(self) -> frozenset[str]:
        new = self.new.values if self.new else frozenset()
        return self.old.values - new if self.old else frozenset()

    def describe(self) -> str:
        r = self.rrset
        if self.kind is ChangeKind.DELETE:
            return f"delete {r.name} {r.rtype}"
        if self.kind is ChangeKind.CREATE:
            return f"create {r.name} {r.ttl} {r.rtype} {' '.join(sorted(r.values))}"
        ttl = f" ttl {self.old.ttl}→{r.ttl}" if self.old and self.old.ttl != r.ttl else ""
        added = " ".join(f"+{v}" for v in sorted(self.added))
        removed = " ".join(f"-{v}" for v in sorted(self.removed))
        return f"update {r.name} {r.rtype}{ttl} {removed} {added}".rstrip()


@dataclass(frozen=True, slots=True)
class Plan:
    """The changes that bring one target from ``current`` to ``desired``."""

    target: str
    version: str  # routing table version the desired records come from
    source: str  # where ``current`` came from: axfr | state | none | api
    changes: tuple[Change, ...]
    existing: int  # record sets we managed before
    desired: RecordSets = field(default_factory=dict)

    def count(self, kind: ChangeKind) -> int:
        return sum(1 for c in self.changes if c.kind is kind)

    @property
    def unchanged(self) -> int:
        return len(self.desired) - self.count(ChangeKind.CREATE) - self.count(ChangeKind.UPDATE)

    def summary(self) -> str:
        """Return a one-line summary, then one line per change."""
        counts = ", ".join(f"{self.count(k)} {k.value}" for k in ChangeKind)
        head = (
            f"{self.target}: table {self.version} ({self.source}): {counts}, "
            f"{self.unchanged} unchanged"
        )
        return "\n".join([head, *(f"  {c.describe()}" for c in self.changes)])

    def raise_if_unsafe(self, force: bool = False) -> None:
        """Refuse a plan that deletes too much of what we manage, unless forced."""
        deletes = self.count(ChangeKind.DELETE)
        if force or self.existing < MIN_EXISTING:
            return
        if deletes / self.existing > MAX_DELETE_SHARE:
            raise UnsafePlanError(
                f"plan deletes {deletes} of {self.existing} managed record sets "
                f"(> {MAX_DELETE_SHARE:.0%}); check the table and zone, or force it",
                self.target,
            )


def owned(records: Mapping[tuple[str, str], RecordSet], desired: RecordSets) -> RecordSets:
    """Return the record sets of a zone that we manage (see the module docstring)."""
    names = {name for name, _ in desired}
    names.update(r.name for r in records.values() if is_marker(r))
    return {k: r for k, r in records.items() if r.name in names and r.rtype in MANAGED_TYPES}


def make_plan(
    target: str, version: str, source: str, current: RecordSets, desired: RecordSets
) -> Plan:
    """Diff ``current`` (record sets we manage now) against ``desired``."""
    changes: list[Change] = []
    for key in sorted(current.keys() | desired.keys()):
        old, new = current.get(key), desired.get(key)
        if old is None and new is not None:
            changes.append(Change(ChangeKind.CREATE, None, new))
        elif new is None and old is not None:
            changes.append(Change(ChangeKind.DELETE, old, None))
        elif old is not None and new is not None and (old.values, old.ttl) != (new.values, new.ttl):
            changes.append(Change(ChangeKind.UPDATE, old, new))
    return Plan(target, version, source, tuple(changes), len(current), dict(desired))
