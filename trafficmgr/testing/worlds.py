"""The named fleets the tests run on, each spelled once.

A test that needs a fleet imports one of these texts (or derives a variant with ``replace``
next to the test that needs it) instead of writing a fleet of its own, so that the worlds
stay few and what each is for stays written down. Every text is a fleet file
(docs/architecture.md §4) that ``trafficmgr.fleetfile.load_fleet_text`` accepts.

- ``WORLD``: the small named world most tests use (eu-west healthy, us-east draining,
  ap-south residency-locked).
- ``GDPR``: the control loop's world, an EU residency rule over two EU regions, fail_closed.
- ``GDPR_SHORT``: EU capacity short of EU demand once eu-west is out (the drills' guardrail).
- ``DRILL`` and ``CLUSTER``: fast-ramping fleets for drills and the distributed topology.
- ``FAST_FAILOVER``: half-second heartbeats, for pages that must show a region go down soon.
- ``SIM_LAB``: round-figure GPU profiles, for the simulated inference server's timings.
- ``GATEWAY``: the request path's world on loopback; ``SIM`` and ``ONE_ENDPOINT``: the
  simulator's; ``EEA_SETS``: residency by a named country set; ``PAIR``: two twin endpoints.
"""

from __future__ import annotations

from trafficmgr.testing.fleets import (
    GDPR_RULE,
    PROFILES,
    SITES,
    clients,
    endpoint,
    gpu_profiles,
    header,
    region,
    regions,
    residency,
)

BIG_AND_SMALL = ("llama-3-70b", "llama-3-8b")
SMALL = ("llama-3-8b",)
# the failover policy most worlds share
FAIL_OPEN = (
    "failover: {heartbeat_interval_s: 1, miss_threshold: 3, "
    "slow_start_s: 30, all_down: fail_open}\n"
)
FAIL_CLOSED = FAIL_OPEN.replace("fail_open", "fail_closed")

WORLD = (
    header()
    + gpu_profiles("H100", "A100", "L4")
    + regions(
        region(
            "eu-west",
            endpoint("euw-1", "10.1.0.11:8000", "H100", 8, BIG_AND_SMALL),
            endpoint("euw-2", "10.1.0.12:8000", "A100", 4, SMALL),
            addresses='192.0.2.10, "2001:db8:10::1"',
            priority=1,
        ),
        region(
            "us-east",
            endpoint("use-1", "10.3.0.11:8000", "H100", 8, BIG_AND_SMALL),
            endpoint("use-2", "10.3.0.12:8000", "L4", 4, SMALL),
            priority=1,
            state="drained",
        ),
        region(
            "ap-south",
            endpoint("aps-1", "10.6.0.11:8000", "A100", 8, BIG_AND_SMALL),
            priority=2,
        ),
    )
    + residency(
        "{name: india-local, clients: {countries: [IN]}, regions: [ap-south], mode: strict}"
    )
    + FAIL_OPEN
    + clients(("IE", 0.3), ("US", 0.5), ("IN", 0.2))
)
"""The small named world: ``eu-west`` healthy (two endpoints), ``us-east`` draining (admin
state drained), ``ap-south`` residency-locked (Indian clients may only go there); fail_open."""

GDPR = (
    header()
    + gpu_profiles("H100", "A100")
    + regions(
        region(
            "eu-west",
            endpoint("euw-1", "10.1.0.11:8000", "H100", 8, BIG_AND_SMALL),
            endpoint("euw-2", "10.1.0.12:8000", "A100", 4, SMALL),
        ),
        region("eu-central", endpoint("euc-1", "10.2.0.11:8000", "H100", 8, BIG_AND_SMALL)),
        region("us-east", endpoint("use-1", "10.3.0.11:8000", "H100", 8, BIG_AND_SMALL)),
        region(
            "ap-south", endpoint("aps-1", "10.6.0.11:8000", "A100", 8, BIG_AND_SMALL), priority=2
        ),
    )
    + residency(GDPR_RULE)
    + FAIL_CLOSED
    + clients(("GB", 0.2), ("DE", 0.2), ("US", 0.4), ("IN", 0.2))
)
"""The control loop's world: ``eu-west`` (IE) and ``eu-central`` (DE) hold the strict ``gdpr``
rule for EU clients; ``us-east`` (US) and ``ap-south`` (IN, priority 2) serve everyone else.
The failover policy is fail_closed; tests that want fail_open switch it."""

GDPR_SHORT = (
    header()
    + gpu_profiles("H100", "L4")
    + regions(
        region("eu-west", endpoint("euw-1", "10.1.0.11:8000", "H100", 8, SMALL)),
        region("eu-central", endpoint("euc-1", "10.2.0.11:8000", "L4", 4, SMALL)),
        region(
            "us-east",
            endpoint("use-1", "10.3.0.11:8000", "H100", 8, SMALL),
            endpoint("use-2", "10.3.0.12:8000", "H100", 8, SMALL),
        ),
    )
    + residency(GDPR_RULE)
    + FAIL_OPEN
    + clients(("DE", 0.3), ("US", 0.7))
)
"""Capacity per strict residency zone: plenty in us-east, but EU clients may only use eu-west
(19,200 tokens/s) and the small eu-central (1,400 tokens/s), so an eu-west outage leaves
them short under load (the drills' capacity guardrail)."""

DRILL = (
    header()
    + gpu_profiles("H100", "A100")
    + regions(
        region(
            "eu-west",
            endpoint("euw-1", "10.1.0.11:8000", "H100", 8, BIG_AND_SMALL),
            endpoint("euw-2", "10.1.0.12:8000", "A100", 8, BIG_AND_SMALL),
            priority=1,
        ),
        region(
            "eu-central", endpoint("euc-1", "10.2.0.11:8000", "H100", 8, BIG_AND_SMALL), priority=2
        ),
        region("us-east", endpoint("use-1", "10.3.0.11:8000", "H100", 8, BIG_AND_SMALL)),
    )
    + residency(GDPR_RULE)
    + "failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 3, hold_down_s: 2,\n"
    + "           all_down: fail_open}\n"
    + clients(("DE", 0.3), ("GB", 0.2), ("US", 0.5))
)
"""A drill end to end: ``eu-west`` (two endpoints) and ``eu-central`` (one, priority 2) hold
the strict ``gdpr`` rule for EU clients, ``us-east`` (one endpoint) serves the rest;
heartbeats every second, three missed make an endpoint bad, a 3 s slow start and a 2 s
hold-down, so that a region goes down and comes back within seconds."""

CLUSTER = DRILL.replace("slow_start_s: 3,", "slow_start_s: 4,")
"""``DRILL`` with a 4 s slow start, long enough to watch the ramp: the fleet of the
distributed topology's tests (tests/e2e)."""
assert CLUSTER != DRILL

FAST_FAILOVER = (
    header()
    + gpu_profiles("H100", "A100", "L4")
    + regions(
        region(
            "eu-west",
            endpoint("euw-1", "10.1.0.11:8000", "H100", 8, BIG_AND_SMALL),
            endpoint("euw-2", "10.1.0.12:8000", "A100", 4, BIG_AND_SMALL),
            priority=1,
        ),
        region(
            "us-east", endpoint("use-1", "10.3.0.11:8000", "H100", 8, BIG_AND_SMALL), priority=1
        ),
        region(
            "ap-southeast",
            endpoint("aps-1", "10.5.0.11:8000", "A100", 4, BIG_AND_SMALL),
            priority=1,
        ),
    )
    + "failover:\n  heartbeat_interval_s: 0.5\n  miss_threshold: 2\n  hold_down_s: 0.5\n"
    + "  slow_start_s: 1\n  all_down: fail_open\n"
    + clients(("DE", 0.3), ("US", 0.5), ("SG", 0.2))
)
"""Three regions, four endpoints and a fast failover policy: 0.5 s heartbeats of which two
missed make an endpoint bad, so a silenced region goes down about 1-1.5 s after its agents
stop; the short hold-down and slow start bring regions to healthy in a few seconds. No
residency rule."""

SIM_LAB = (
    header("sim.example.test", ttl=None)
    + gpu_profiles(
        T1="{prefill_tokens_per_s: 1000, decode_tokens_per_s: 100, max_concurrency: 8}",
        H100=PROFILES["H100"],
    )
    + regions(
        region(
            "lab",
            endpoint("slow-1", "10.9.0.1:8000", "T1", 1, ("m-small", "m-big")),
            endpoint("fast-1", "10.9.0.2:8000", "H100", 1, ("m-small",)),
            site=SITES["eu-west"],
        )
    )
)
"""The simulated inference server's lab: the ``T1`` profile has round figures so that timings
are easy to predict (prefill 1,000 tokens/s, decode 100 tokens/s, 8 slots). ``slow-1``
serves ``m-small`` and ``m-big`` on one T1; ``fast-1`` serves ``m-small`` on one H100. Both
have non-loopback addresses, so with base port 0 they listen on free ports of 127.0.0.1."""

GATEWAY = (
    header()
    + gpu_profiles(
        H100="{prefill_tokens_per_s: 12000, decode_tokens_per_s: 24000, max_concurrency: 64}"
    )
    + regions(
        region(
            "eu-west",
            endpoint("euw-1", "10.1.0.11:8000", "H100", 1, ("m1", "m2")),
            endpoint("euw-2", "10.1.0.12:8000", "H100", 1, ("m1",)),
            priority=1,
        ),
        region("eu-central", endpoint("euc-1", "10.2.0.11:8000", "H100", 1, ("m1",)), priority=2),
        region(
            "us-east",
            endpoint("use-1", "10.3.0.11:8000", "H100", 1, ("m1", "m2")),
            endpoint("use-2", "10.3.0.12:8000", "H100", 1, ("m1",)),
            priority=1,
        ),
    )
    + residency(GDPR_RULE)
    + FAIL_OPEN.replace("slow_start_s: 30", "slow_start_s: 0")
)
"""The request path's world, served on loopback by simulated servers: ``eu-west`` (two
H100 endpoints, priority 1), ``eu-central`` (one, priority 2), ``us-east`` (two), a strict GDPR
rule for EU clients and no slow start (tests/gateway, tests/regions/decisions)."""

SIM = (
    header(ttl=5)
    + gpu_profiles("H100", "A100", "L4")
    + regions(
        region(
            "eu-west",
            endpoint("euw-1", "10.1.0.11:8000", "H100", 8, ("big", "small")),
            endpoint("euw-2", "10.1.0.12:8000", "L4", 4, ("small",)),
        ),
        region("eu-central", endpoint("euc-1", "10.2.0.11:8000", "A100", 8, ("big", "small"))),
        region("us-east", endpoint("use-1", "10.3.0.11:8000", "H100", 8, ("big", "small"))),
    )
    + residency(GDPR_RULE)
    + "failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 10, hold_down_s: 2,\n"
    + "           all_down: fail_open}\n"
    + clients(("DE", 0.5), ("US", 0.5))
)
"""The simulator's small world: ``eu-west`` (an H100 and an L4 endpoint) and ``eu-central`` (an
A100), the only regions GDPR lets EU clients use; ``us-east`` (an H100) for the rest; DE and US
clients half each; models ``big`` (not on the L4) and ``small``."""

ONE_ENDPOINT = (
    header("t.test", ttl=5)
    + gpu_profiles("H100")
    + regions(region("us-east", endpoint("use-1", "10.3.0.11:8000", "H100", 2, ("m",))))
    + clients(("US", 1))
)
"""One H100 endpoint in one region with one client country: the simulator's latency arithmetic
can be checked by hand."""

EEA_SETS = (
    header(ttl=None)
    + regions(
        region("eu-west", endpoint("euw-1", "10.1.0.11:8000", "H100", 8, ("m",))),
        region("us-east", endpoint("use-1", "10.3.0.11:8000", "H100", 8, ("m",))),
    )
    + residency(
        "{name: gdpr, clients: {sets: [EEA], countries: [CH]}, regions: [eu-west], mode: strict}"
    )
)
"""A strict rule naming a country set (``sets: [EEA], countries: [CH]``) over eu-west, with
us-east for everyone else: residency by named sets."""

PAIR = (
    header()
    + gpu_profiles("H100")
    + regions(
        region(
            "eu-west",
            endpoint("busy", "10.1.0.11:8000", "H100", 8, ("llama",)),
            endpoint("calm", "10.1.0.12:8000", "H100", 8, ("llama",)),
        )
    )
)
"""Two identical 8-GPU H100 endpoints, ``busy`` and ``calm``, in one region: what the reported
queue and KV cache alone do to a pick."""
