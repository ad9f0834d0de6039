"""Routed answers: the A, AAAA and TXT records of ``<model>.<zone>`` and ``api.<zone>``.

The routing table says, per client zone and model, which regions serve and with what
weight (``lookup``); this module turns that into records. It answers the ingress addresses
of the region(s) ``choose`` picks for the client's prefix bucket among those that have an
address of the asked family, and a TXT record that explains the answer. A table that names
only regions this server's fleet does not know (the control plane runs a newer fleet) is
answered from the static table instead of with nothing. An empty list (``fail_closed``, or
residency allowing nothing) is answered NODATA, and the TXT says why.
"""

from __future__ import annotations

from dataclasses import dataclass

import dns.rdatatype

from trafficmgr.dns.choice import choose, choose_one, cumulative_weights, merge_models
from trafficmgr.dns.tables import Snapshot
from trafficmgr.dns.wire import NOERROR
from trafficmgr.dns.zone import Rendered, ZoneData, address_rrset, qname_of, render, txt_rrset
from trafficmgr.routing.table import lookup, zone_keys
from trafficmgr.routing.types import ClientLocation, RoutingTable, WeightedRegion

TXT = int(dns.rdatatype.TXT)


@dataclass(frozen=True, slots=True)
class Candidates:
    """The regions one client population may be answered with, for one name and type."""

    regions: tuple[WeightedRegion, ...]  # those with an address of the asked family
    used: Snapshot  # the table they come from: the served one, or static (see module doc)
    cumulative: tuple[float, ...] = ()  # running sums of the weights


class RoutedAnswers:
    """Finds candidates, picks among them, renders; ``answers`` is regions per answer."""

    def __init__(self, answers: int = 1) -> None:
        self.answers = max(1, answers)

    def candidates(
        self,
        qtype: int,
        model: str | None,
        location: ClientLocation,
        snapshot: Snapshot,
        static: Snapshot,
        zone: ZoneData,
    ) -> Candidates:
        """Return the weighted regions the table gives ``location`` that can answer ``qtype``."""
        used = snapshot
        weighted = self.weighted(snapshot.table, location, model, zone)
        known = [w for w in weighted if w.region in zone.addresses]
        if weighted and not known and static is not snapshot:
            used = static
            weighted = self.weighted(static.table, location, model, zone)
            known = [w for w in weighted if w.region in zone.addresses]
        if qtype == TXT:
            regions = [w for w in known if zone.addresses[w.region].any()]
        else:
            regions = [w for w in known if zone.addresses[w.region].of(qtype)]
        regions.sort(key=lambda w: w.region)  # a fixed order: see ``choice``
        return Candidates(tuple(regions), used, cumulative_weights(regions))

    def choose(self, candidates: Candidates, bucket: int) -> tuple[WeightedRegion, ...]:
        """Pick the regions for a client prefix bucket."""
        if self.answers == 1:
            return choose_one(candidates.regions, candidates.cumulative, bucket)
        return choose(candidates.regions, bucket, self.answers)

    def render(
        self,
        question: bytes,
        qtype: int,
        model: str | None,
        location: ClientLocation,
        candidates: Candidates,
        chosen: tuple[WeightedRegion, ...],
        snapshot: Snapshot,
        zone: ZoneData,
    ) -> Rendered:
        """Render the answer naming ``chosen`` (A/AAAA) or explaining it (TXT)."""
        multi = len(candidates.regions) > 1
        name = qname_of(question)
        if qtype == TXT:
            texts = explain(candidates, snapshot, location, model, chosen, zone)
            txt = txt_rrset(name, texts, zone.ttl)
            return render(question, NOERROR, [txt], multi=multi)
        addresses = [a for w in chosen for a in zone.addresses[w.region].of(qtype)]
        rrset = address_rrset(name, qtype, addresses, zone.ttl)
        if rrset is None:
            soa = zone.negative_soa(snapshot.serial)
            return render(question, NOERROR, authority=[soa], multi=multi)
        return render(question, NOERROR, [rrset], multi=multi)

    @staticmethod
    def weighted(
        table: RoutingTable, location: ClientLocation, model: str | None, zone: ZoneData
    ) -> tuple[WeightedRegion, ...]:
        """Return the table's weighted regions for a client and model (None: any model)."""
        if model is not None:
            return lookup(table, location, model)
        return merge_models([lookup(table, location, m) for m in zone.models])


def explain(
    candidates: Candidates,
    served: Snapshot,
    location: ClientLocation,
    model: str | None,
    chosen: tuple[WeightedRegion, ...],
    zone: ZoneData,
) -> list[str]:
    """Return the TXT strings that explain an answer: table, client, regions and reasons."""
    used = candidates.used
    where = f"{location.country or '-'}/{location.continent or '-'}"
    head = (
        f"table={served.version} source={served.source} client={where} "
        f"model={model or 'any'} regions={len(chosen)}/{len(candidates.regions)}"
    )
    texts = [head]
    if used is not served:
        texts.append(f"table names no region of this fleet: answered from static {used.version}")
    for w in chosen:
        texts.append(f"region={w.region} weight={w.weight:.4f} reason={w.reason}")
    if not chosen:
        texts.append(f"no region: {_note(used.table, location, model, zone) or 'none allowed'}")
    return texts


def _note(table: RoutingTable, location: ClientLocation, model: str | None, zone: ZoneData) -> str:
    """Return the table's note on why a client's list is empty."""
    for key in zone_keys(location):
        if key in table.zones:
            notes = table.notes.get(key, {})
            if model is not None:
                return notes.get(model, "")
            return next((notes[m] for m in zone.models if m in notes), "")
    return ""
