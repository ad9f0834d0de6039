"""What changed between two routing tables: region states and the weighted lists."""

from __future__ import annotations

from dataclasses import dataclass

from trafficmgr.routing.types import RegionState, RoutingTable, WeightedRegion


@dataclass(frozen=True, slots=True)
class RegionChange:
    region: str
    old: RegionState | None  # None: the region is new
    new: RegionState | None  # None: the region is gone
    reason: str


@dataclass(frozen=True, slots=True)
class ListChange:
    zone: str
    model: str
    old: tuple[WeightedRegion, ...]
    new: tuple[WeightedRegion, ...]
    moved: float  # share of the traffic that moved, 0..1


@dataclass(frozen=True, slots=True)
class TableDiff:
    old_version: str | None
    new_version: str
    regions: tuple[RegionChange, ...]
    lists: tuple[ListChange, ...]

    @property
    def changed(self) -> bool:
        """Tell whether anything routed differently."""
        return bool(self.regions or self.lists)

    @property
    def max_moved(self) -> float:
        """Return the largest share of one list's traffic that moved."""
        return max((c.moved for c in self.lists), default=0.0)

    def summary(self) -> str:
        """Describe the diff in one line."""
        if not self.changed:
            return "no change"
        states = ", ".join(
            f"{c.region} {c.old.value if c.old else 'new'} → {c.new.value if c.new else 'gone'}"
            for c in self.regions[:5]
        )
        more = f" (+{len(self.regions) - 5})" if len(self.regions) > 5 else ""
        head = f"regions: {states}{more}; " if self.regions else ""
        return f"{head}{len(self.lists)} lists changed, up to {self.max_moved:.0%} moved"


def diff_tables(old: RoutingTable | None, new: RoutingTable) -> TableDiff:
    """Compare two tables (``old`` None: everything in ``new`` is a change)."""
    regions = []
    old_regions = old.regions if old else {}
    for name in sorted(old_regions.keys() | new.regions.keys()):
        before = old_regions.get(name)
        after = new.regions.get(name)
        if before is None or after is None or before.state is not after.state:
            reason = after.reason if after else "removed from the fleet"
            regions.append(
                RegionChange(
                    name, before.state if before else None, after.state if after else None, reason
                )
            )
    lists = []
    old_zones = old.zones if old else {}
    for zone in sorted(old_zones.keys() | new.zones.keys()):
        before_lists = old_zones.get(zone, {})
        after_lists = new.zones.get(zone, {})
        for model in sorted(before_lists.keys() | after_lists.keys()):
            a = tuple(before_lists.get(model, ()))
            b = tuple(after_lists.get(model, ()))
            if a is b or a == b:  # equal entries: equal weights, nothing moved
                continue
            wa, wb = _weights(a), _weights(b)
            if wa != wb:
                lists.append(ListChange(zone, model, a, b, _moved_weights(wa, wb)))
    return TableDiff(old.version if old else None, new.version, tuple(regions), tuple(lists))


def _weights(entries: tuple[WeightedRegion, ...]) -> dict[str, float]:
    return {w.region: w.weight for w in entries}


def _moved_weights(wa: dict[str, float], wb: dict[str, float]) -> float:
    """Return the share of traffic that moved (half the L1 distance; 1 to or from empty)."""
    if not wa or not wb:
        return 1.0
    moved = 0.0
    before, after = wa.get, wb.get
    for region in sorted(wa.keys() | wb):  # name order: the same sum in every process
        moved += abs(before(region, 0.0) - after(region, 0.0))
    return min(1.0, moved / 2)
