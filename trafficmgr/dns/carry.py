"""What a cached reply rests on besides its query and the zone: a new table need not empty it.

The control loop publishes a table version every tick, and most versions route most clients
as the last one did. A reply is a function of its query, the zone (names, addresses, TTL) and
one of these, its ``Basis``:

- nothing more (NS, nameserver glue, ANY, REFUSED): the zone's basis, true in every
  generation of the same zone;
- the SOA serial (SOA, NXDOMAIN, NODATA: the negative SOA names it): true while the serial
  stays;
- the whole table (TXT, which names the table version): true in its own generation only;
- for A and AAAA of a routed name, a ``Route``: the (region, weight) list the table gives one
  client place for that name and type, in the order the pick runs over. The pick (by client
  prefix bucket), the ECS scope (it widens to the hashed prefix when there are several
  regions) and the records follow from that list and the zone, so while a new table gives
  the place the same list, every reply rendered from it is byte for byte what rendering it
  again would give. Reasons are not part of it: A and AAAA do not show them.

One basis is shared by all the replies that rest on it (all the client prefixes of a place
asking for a name), so a swap costs one check per basis, done when the first of its replies
is asked for again; the others are then served as they are. ``valid_in`` is the last
generation the basis was found true in, ``checked_in`` the last it was checked in. A basis
holds no reference to a table (a reply kept for long must not keep old tables alive), and a
reply names its basis by ``id``, a number: a reply cache entry then holds only bytes and
numbers, which the garbage collector stops tracking, so a full collection does not walk the
cache (``heap``: with an object in each entry, 23 ms per 100,000 entries against 0.5).

When a route's weights move, most of its client prefixes keep their region (``choice``: a
weight moving by 2 % moves 2 % of the prefix buckets), so each reply also keeps the bucket it
was picked by: its region is picked again under the old and the new list (two bisections,
``same_pick``), and the reply is kept under the new route when the region and the number of
candidates (which sets the ECS scope) are the same.
"""

from __future__ import annotations

from itertools import accumulate, count

from trafficmgr.dns.choice import pick_index
from trafficmgr.routing.types import ClientLocation, WeightedRegion

Picks = tuple[tuple[str, float], ...]

_IDS = count(1)


class Basis:
    """What a group of cached replies rests on; see the module's docstring."""

    __slots__ = ("checked_in", "id", "valid_in")

    def __init__(self, generation: int) -> None:
        self.id = next(_IDS)  # never reused
        self.valid_in = generation
        self.checked_in = generation

    def renew(self, generation: int) -> None:
        """Mark the basis true in ``generation``."""
        self.valid_in = self.checked_in = generation


class SerialBasis(Basis):
    """Replies that show the SOA serial (SOA, NXDOMAIN, NODATA)."""

    __slots__ = ("serial",)

    def __init__(self, generation: int, serial: int) -> None:
        super().__init__(generation)
        self.serial = serial


class Route(Basis):
    """A and AAAA replies of one name, type and client place: the regions picked among."""

    __slots__ = ("cumulative", "location", "model", "picks", "serial", "where")

    def __init__(
        self,
        generation: int,
        where: tuple[bytes, int, str | None, str | None],
        model: str | None,
        location: ClientLocation,
        picks: Picks,
        serial: int | None = None,
    ) -> None:
        super().__init__(generation)
        self.where = where  # (qname, qtype, country, continent): the candidates' cache key
        self.model = model
        self.location = location
        self.picks = picks
        self.cumulative = tuple(accumulate(max(0.0, weight) for _, weight in picks))
        self.serial = serial  # set when the replies show the SOA (NODATA: nothing to pick)


def same_pick(old: Route, new: Route, bucket: int) -> bool:
    """Tell whether a one-region answer picked by ``bucket`` under ``old`` is ``new``'s too."""
    if old.serial is not None or new.serial is not None:
        return False
    if (len(old.picks) > 1) != (len(new.picks) > 1):
        return False  # the ECS scope changes with it
    was, now = pick_index(old.cumulative, bucket), pick_index(new.cumulative, bucket)
    return was >= 0 and now >= 0 and old.picks[was][0] == new.picks[now][0]


def picks_of(regions: tuple[WeightedRegion, ...]) -> Picks:
    """Return what an A/AAAA answer takes from a candidate list: names and weights, in order."""
    return tuple((w.region, w.weight) for w in regions)
