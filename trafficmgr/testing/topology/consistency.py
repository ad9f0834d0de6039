"""Do the stored events tell every region state change the published tables showed?

``missing_events`` compares a sequence of published region states with the ``Event`` rows of
region transitions: each change of a region's state between two tables must have an event
saying so (old → new). ``unexplained`` is the same check for a watcher that may have missed
tables in between (it read them while a store was down): the states it saw, in order, must
be a walk along the regions' event chains. The fault tests run them after each fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def changes(states: Iterable[Mapping[str, str]]) -> list[tuple[str, str, str]]:
    """(region, old, new) for every change between consecutive tables' region states."""
    out: list[tuple[str, str, str]] = []
    last: dict[str, str] = {}
    for table in states:
        for region, state in table.items():
            if region in last and last[region] != state:
                out.append((region, last[region], state))
            last[region] = state
    return out


def missing_events(
    states: Iterable[Mapping[str, str]], events: Iterable[Mapping[str, str]]
) -> list[tuple[str, str, str]]:
    """The state changes no event records (events: ``{"region", "old", "new"}`` each)."""
    recorded: dict[tuple[str, str, str], int] = {}
    for e in events:
        key = (e["region"], e["old"], e["new"])
        recorded[key] = recorded.get(key, 0) + 1
    missing = []
    for change in changes(states):
        if recorded.get(change, 0) > 0:
            recorded[change] -= 1
        else:
            missing.append(change)
    return missing


def unexplained(
    states: Iterable[Mapping[str, str]], events: Iterable[Mapping[str, str]]
) -> list[tuple[str, str, str]]:
    """The observed changes no sequence of events leads through, in order per region."""
    chains: dict[str, list[tuple[str, str]]] = {}
    for e in events:
        chains.setdefault(e["region"], []).append((e["old"], e["new"]))
    out = []
    position: dict[str, int] = {}
    for region, old, new in changes(states):
        chain = chains.get(region, [])
        at = position.get(region, 0)
        # find an event leaving ``old`` and, from there on, one arriving at ``new``
        start = next((i for i in range(at, len(chain)) if chain[i][0] == old), None)
        end = None
        if start is not None:
            end = next((i for i in range(start, len(chain)) if chain[i][1] == new), None)
        if end is None:
            out.append((region, old, new))
        else:
            position[region] = end + 1
    return out
