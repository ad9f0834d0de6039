"""Frozen inputs and outputs of the routing engine.

Everything the engine decides on arrives as one of these values, together with
``now`` (seconds since the epoch, a float). Nothing here reads the clock,
settings or a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from trafficmgr.routing.countries import CONTINENTS, continent_of
from trafficmgr.routing.countrysets import set_countries
from trafficmgr.routing.values import value


class AdminState(StrEnum):
    """What an operator set for a region or an endpoint."""

    ACTIVE = "active"
    DRAINED = "drained"
    DISABLED = "disabled"


class ResidencyMode(StrEnum):
    STRICT = "strict"
    PREFERRED = "preferred"


class AllDown(StrEnum):
    """What to answer when every allowed region is down."""

    FAIL_OPEN = "fail_open"
    FAIL_CLOSED = "fail_closed"


class RegionState(StrEnum):
    """States of the per-region failover state machine (docs/architecture.md §4)."""

    UNKNOWN = "unknown"
    HEALTHY = "healthy"
    DEGRADED = "degraded"
    DOWN = "down"
    RECOVERING = "recovering"
    DRAINED = "drained"


class Priority(StrEnum):
    INTERACTIVE = "interactive"
    BATCH = "batch"


@dataclass(frozen=True, slots=True)
class GpuProfile:
    """Service rates of one GPU type; endpoint figures scale with its GPU count."""

    name: str
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    max_concurrency: int


@dataclass(frozen=True, slots=True)
class GeoPoint:
    lat: float
    lon: float


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One inference server (a GPU node or a replica) inside a region."""

    name: str
    region: str
    address: str
    gpu: str
    gpus: int
    models: tuple[str, ...]
    weight: float = 1.0
    admin_state: AdminState = AdminState.ACTIVE


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    country: str
    continent: str
    location: GeoPoint
    addresses: tuple[str, ...]
    endpoints: tuple[Endpoint, ...] = ()
    priority: int = 1
    weight: float = 1.0
    admin_state: AdminState = AdminState.ACTIVE


@dataclass(frozen=True, slots=True)
class ResidencyRule:
    """Clients of these countries, sets or continents may only be served by ``regions``.

    ``sets`` names country sets (``countrysets.COUNTRY_SETS``: ``EEA``, ``ASEAN``, ...); their
    members are added to ``countries`` on construction, so ``countries`` is every country the
    rule covers by country and whoever reads it needs to know nothing about sets. What was
    written beside the sets is ``listed_countries()``. An unknown set name raises
    ``countrysets.UnknownCountrySet`` (the fleet file and the API check names before).
    """

    name: str
    countries: frozenset[str]
    continents: frozenset[str]
    regions: tuple[str, ...]
    mode: ResidencyMode = ResidencyMode.STRICT
    sets: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.sets:
            members = set_countries(self.sets)
            object.__setattr__(self, "countries", frozenset(self.countries) | members)

    def listed_countries(self) -> frozenset[str]:
        """Return the countries the rule names beyond its sets (what a fleet file writes)."""
        return self.countries - set_countries(self.sets) if self.sets else self.countries


class UnlocatedKind(StrEnum):
    UNRESTRICTED = "unrestricted"
    DENY = "deny"
    RULE = "rule"
    ZONE = "zone"


UNLOCATED_FORMS = "unrestricted, deny, rule:NAME or zone:CODE"


@dataclass(frozen=True, slots=True)
class UnlocatedClients:
    """What a client whose location is unknown gets (no country or continent: a private address,
    no GeoIP answer, no ECS): ``unrestricted`` (no rule applies, the default), ``deny``,
    ``rule:NAME`` (held to that residency rule's regions, strictly, whatever its mode) or
    ``zone:CODE`` (routed as a client of that country or continent).
    """

    kind: UnlocatedKind = UnlocatedKind.UNRESTRICTED
    target: str = ""  # the rule's name or the zone's code

    @classmethod
    def parse(cls, text: object) -> UnlocatedClients:
        """Read the fleet file's form; raise ValueError saying what is accepted."""
        if not isinstance(text, str):
            raise ValueError(f"expected a string ({UNLOCATED_FORMS})")
        head, sep, target = text.strip().partition(":")
        head, target = head.strip().lower(), target.strip()
        if not sep and head in (UnlocatedKind.UNRESTRICTED, UnlocatedKind.DENY):
            return cls(UnlocatedKind(head))
        if sep and head == UnlocatedKind.RULE and target:
            return cls(UnlocatedKind.RULE, target)
        if sep and head == UnlocatedKind.ZONE:
            code = target.upper()
            if code in CONTINENTS or continent_of(code) is not None:
                return cls(UnlocatedKind.ZONE, code)
            raise ValueError(f"{target!r} is no ISO 3166-1 alpha-2 country or continent code")
        raise ValueError(f"{text[:80]!r} is not one of {UNLOCATED_FORMS}")

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.target}" if self.target else self.kind.value


@dataclass(frozen=True, slots=True)
class FailoverPolicy:
    heartbeat_interval_s: float = 1.0
    miss_threshold: int = 3
    up_threshold: int = 2
    down_threshold: int = 1
    hold_down_s: float = 5.0
    slow_start_s: float = 30.0
    spillover_headroom: float = 0.1
    all_down: AllDown = AllDown.FAIL_OPEN
    max_shift_per_tick: float = 1.0


DEFAULT_TTFT_P99_MS = 10_000.0


@dataclass(frozen=True, slots=True)
class ServiceObjective:
    """What a model's clients are promised: time to first token at the 99th percentile.

    ``ttft_p99_ms`` is the objective of every model not named in ``models`` (model → its own
    objective in ms). An endpoint slower than its objective, or with a saturated queue, is
    degraded (``health.py``).
    """

    ttft_p99_ms: float = DEFAULT_TTFT_P99_MS
    models: Mapping[str, float] = field(default_factory=dict)

    def ttft_ms(self, model: str) -> float:
        """Return the TTFT p99 objective of ``model`` in ms."""
        return self.models.get(model, self.ttft_p99_ms)


@dataclass(frozen=True, slots=True)
class ClientShare:
    country: str
    share: float


@dataclass(frozen=True, slots=True)
class Fleet:
    """The whole declarative fleet: what the fleet file describes."""

    zone: str
    ttl: int
    gpu_profiles: Mapping[str, GpuProfile]
    regions: tuple[Region, ...]
    residency: tuple[ResidencyRule, ...] = ()
    failover: FailoverPolicy = field(default_factory=FailoverPolicy)
    clients: tuple[ClientShare, ...] = ()
    slo: ServiceObjective = field(default_factory=ServiceObjective)
    unlocated: UnlocatedClients = field(default_factory=UnlocatedClients)

    def region(self, name: str) -> Region:
        for region in self.regions:
            if region.name == name:
                return region
        raise KeyError(name)

    def endpoints(self) -> tuple[Endpoint, ...]:
        return tuple(e for r in self.regions for e in r.endpoints)

    def models(self) -> tuple[str, ...]:
        return tuple(sorted({m for e in self.endpoints() for m in e.models}))


@dataclass(frozen=True, slots=True)
class ClientLocation:
    """Where a client is, as far as we know; every field may be unknown."""

    country: str | None = None
    continent: str | None = None
    point: GeoPoint | None = None

    def located(self) -> bool:
        """Tell whether the client's continent is known (given, or derived from its country)."""
        if self.continent:
            return True
        return self.country is not None and continent_of(self.country.upper()) is not None


# --- heartbeats (agent → control plane), docs/architecture.md §4 -------------------------------


@dataclass(frozen=True, slots=True)
class GpuSample:
    index: int
    uuid: str
    name: str
    util_pct: float
    mem_used_mb: float
    mem_total_mb: float
    temp_c: float = 0.0
    power_w: float = 0.0
    throttle_reasons: tuple[str, ...] = ()
    ecc_errors: int = 0
    xid_errors: int = 0


@dataclass(frozen=True, slots=True)
class OutputHistogram:
    """One model's output lengths as its inference server counts them, since it started.

    ``counts[i]`` requests generated at most ``le[i]`` tokens (Prometheus' cumulative buckets,
    finite bounds ascending); ``count`` is all of them (the ``+Inf`` bucket).
    """

    model: str
    le: tuple[float, ...]
    counts: tuple[int, ...]
    count: int


@dataclass(frozen=True, slots=True)
class ServerSample:
    kind: str
    requests_running: int = 0
    requests_waiting: int = 0
    kv_cache_usage: float = 0.0
    tokens_per_s: float = 0.0
    ttft_p50_ms: float = 0.0
    ttft_p99_ms: float = 0.0
    models_loaded: tuple[str, ...] = ()
    output_tokens: tuple[OutputHistogram, ...] = ()  # per model, cumulative; empty: not known


@dataclass(frozen=True, slots=True)
class ProbeSample:
    ok: bool
    latency_ms: float = 0.0


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The latest report of one endpoint's agent; ``received_at`` is the control plane's clock."""

    endpoint: str
    seq: int
    sent_at: float
    received_at: float
    gpus: tuple[GpuSample, ...] = ()
    server: ServerSample | None = None
    probe: ProbeSample | None = None


# --- requests and the routing table ---------------------------------------------------


@value
class Request:
    model: str
    client: ClientLocation
    input_tokens: int
    max_output_tokens: int
    priority: Priority = Priority.INTERACTIVE
    prefix_hashes: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedRegion:
    region: str
    weight: float
    reason: str


@dataclass(frozen=True, slots=True)
class RegionStatus:
    """A region as the table publishes it."""

    state: RegionState
    headroom: float
    capacity: float
    reason: str
    since: float = 0.0
    ramp: float = 1.0
    models: Mapping[str, float] = field(default_factory=dict)  # live capacity per model
    demand: float | None = None  # demanded / live capacity (> 1 overloaded); None: 1 - headroom


@dataclass(frozen=True, slots=True)
class RoutingTable:
    """For each client zone and model, the weighted regions; weights of one list sum to 1.

    A zone is an ISO country code, a continent code (``EU``, ``NA``, ...) or ``default``.
    An empty list means fail_closed: no allowed region may be answered.
    """

    version: str
    generated_at: float
    regions: Mapping[str, RegionStatus]
    zones: Mapping[str, Mapping[str, tuple[WeightedRegion, ...]]]
    notes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)  # why a list is empty
