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

WORLD = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  A100: {prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}
  L4: {prefill_tokens_per_s: 1500, decode_tokens_per_s: 350, max_concurrency: 16}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10, "2001:db8:10::1"]
    priority: 1
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: A100, gpus: 4, models: [llama-3-8b]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    priority: 1
    state: drained
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
      - {name: use-2, address: "10.3.0.12:8000", gpu: L4, gpus: 4, models: [llama-3-8b]}
  - name: ap-south
    country: IN
    location: {lat: 19.08, lon: 72.88}
    addresses: [203.0.113.30]
    priority: 2
    endpoints:
      - {name: aps-1, address: "10.6.0.11:8000", gpu: A100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
residency:
  - {name: india-local, clients: {countries: [IN]}, regions: [ap-south], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 30, all_down: fail_open}
clients:
  - {country: IE, share: 0.3}
  - {country: US, share: 0.5}
  - {country: IN, share: 0.2}
"""
"""The small named world: ``eu-west`` healthy (two endpoints), ``us-east`` draining (admin
state drained), ``ap-south`` residency-locked (Indian clients may only go there); fail_open."""

GDPR = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  A100: {prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: A100, gpus: 4, models: [llama-3-8b]}
  - name: eu-central
    country: DE
    location: {lat: 50.11, lon: 8.68}
    addresses: [192.0.2.20]
    endpoints:
      - {name: euc-1, address: "10.2.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: ap-south
    country: IN
    location: {lat: 19.08, lon: 72.88}
    addresses: [203.0.113.30]
    priority: 2
    endpoints:
      - {name: aps-1, address: "10.6.0.11:8000", gpu: A100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
residency:
  - {name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 30, all_down: fail_closed}
clients:
  - {country: GB, share: 0.2}
  - {country: DE, share: 0.2}
  - {country: US, share: 0.4}
  - {country: IN, share: 0.2}
"""
"""The control loop's world: ``eu-west`` (IE) and ``eu-central`` (DE) hold the strict ``gdpr``
rule for EU clients; ``us-east`` (US) and ``ap-south`` (IN, priority 2) serve everyone else.
The failover policy is fail_closed; tests that want fail_open switch it."""

GDPR_SHORT = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  L4: {prefill_tokens_per_s: 1500, decode_tokens_per_s: 350, max_concurrency: 16}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8, models: [llama-3-8b]}
  - name: eu-central
    country: DE
    location: {lat: 50.11, lon: 8.68}
    addresses: [192.0.2.20]
    endpoints:
      - {name: euc-1, address: "10.2.0.11:8000", gpu: L4, gpus: 4, models: [llama-3-8b]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8, models: [llama-3-8b]}
      - {name: use-2, address: "10.3.0.12:8000", gpu: H100, gpus: 8, models: [llama-3-8b]}
residency:
  - {name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 30, all_down: fail_open}
clients:
  - {country: DE, share: 0.3}
  - {country: US, share: 0.7}
"""
"""Capacity per strict residency zone: plenty in us-east, but EU clients may only use eu-west
(19,200 tokens/s) and the small eu-central (1,400 tokens/s), so an eu-west outage leaves
them short under load (the drills' capacity guardrail)."""

DRILL = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  A100: {prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    priority: 1
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: A100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: eu-central
    country: DE
    location: {lat: 50.11, lon: 8.68}
    addresses: [192.0.2.20]
    priority: 2
    endpoints:
      - {name: euc-1, address: "10.2.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
residency:
  - {name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 3, hold_down_s: 2,
           all_down: fail_open}
clients:
  - {country: DE, share: 0.3}
  - {country: GB, share: 0.2}
  - {country: US, share: 0.5}
"""
"""A drill end to end: ``eu-west`` (two endpoints) and ``eu-central`` (one, priority 2) hold
the strict ``gdpr`` rule for EU clients, ``us-east`` (one endpoint) serves the rest;
heartbeats every second, three missed make an endpoint bad, a 3 s slow start and a 2 s
hold-down, so that a region goes down and comes back within seconds."""

CLUSTER = DRILL.replace("slow_start_s: 3,", "slow_start_s: 4,")
"""``DRILL`` with a 4 s slow start, long enough to watch the ramp: the fleet of the
distributed topology's tests (tests/e2e)."""
assert CLUSTER != DRILL

FAST_FAILOVER = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  A100: {prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}
  L4: {prefill_tokens_per_s: 1500, decode_tokens_per_s: 350, max_concurrency: 16}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    priority: 1
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: A100, gpus: 4,
         models: [llama-3-70b, llama-3-8b]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    priority: 1
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8,
         models: [llama-3-70b, llama-3-8b]}
  - name: ap-southeast
    country: SG
    location: {lat: 1.29, lon: 103.85}
    addresses: [203.0.113.10]
    priority: 1
    endpoints:
      - {name: aps-1, address: "10.5.0.11:8000", gpu: A100, gpus: 4,
         models: [llama-3-70b, llama-3-8b]}
failover:
  heartbeat_interval_s: 0.5
  miss_threshold: 2
  hold_down_s: 0.5
  slow_start_s: 1
  all_down: fail_open
clients:
  - {country: DE, share: 0.3}
  - {country: US, share: 0.5}
  - {country: SG, share: 0.2}
"""
"""Three regions, four endpoints and a fast failover policy: 0.5 s heartbeats of which two
missed make an endpoint bad, so a silenced region goes down about 1-1.5 s after its agents
stop; the short hold-down and slow start bring regions to healthy in a few seconds. No
residency rule."""

SIM_LAB = """\
zone: sim.example.test
gpu_profiles:
  T1: {prefill_tokens_per_s: 1000, decode_tokens_per_s: 100, max_concurrency: 8}
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
regions:
  - name: lab
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    endpoints:
      - {name: slow-1, address: "10.9.0.1:8000", gpu: T1, gpus: 1, models: [m-small, m-big]}
      - {name: fast-1, address: "10.9.0.2:8000", gpu: H100, gpus: 1, models: [m-small]}
"""
"""The simulated inference server's lab: the ``T1`` profile has round figures so that timings
are easy to predict (prefill 1,000 tokens/s, decode 100 tokens/s, 8 slots). ``slow-1``
serves ``m-small`` and ``m-big`` on one T1; ``fast-1`` serves ``m-small`` on one H100. Both
have non-loopback addresses, so with base port 0 they listen on free ports of 127.0.0.1."""

GATEWAY = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 24000, max_concurrency: 64}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    priority: 1
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 1, models: [m1, m2]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: H100, gpus: 1, models: [m1]}
  - name: eu-central
    country: DE
    location: {lat: 50.11, lon: 8.68}
    addresses: [192.0.2.20]
    priority: 2
    endpoints:
      - {name: euc-1, address: "10.2.0.11:8000", gpu: H100, gpus: 1, models: [m1]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    priority: 1
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 1, models: [m1, m2]}
      - {name: use-2, address: "10.3.0.12:8000", gpu: H100, gpus: 1, models: [m1]}
residency:
  - {name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 0, all_down: fail_open}
"""
"""The request path's world, served on loopback by simulated servers: ``eu-west`` (two
H100 endpoints, priority 1), ``eu-central`` (one, priority 2), ``us-east`` (two), a strict GDPR
rule for EU clients and no slow start (tests/gateway, tests/regions/decisions)."""

SIM = """\
zone: infer.example.test
ttl: 5
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
  A100: {prefill_tokens_per_s: 6000, decode_tokens_per_s: 1300, max_concurrency: 48}
  L4: {prefill_tokens_per_s: 1500, decode_tokens_per_s: 350, max_concurrency: 16}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8, models: [big, small]}
      - {name: euw-2, address: "10.1.0.12:8000", gpu: L4, gpus: 4, models: [small]}
  - name: eu-central
    country: DE
    location: {lat: 50.11, lon: 8.68}
    addresses: [192.0.2.20]
    endpoints:
      - {name: euc-1, address: "10.2.0.11:8000", gpu: A100, gpus: 8, models: [big, small]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8, models: [big, small]}
residency:
  - {name: gdpr, clients: {continents: [EU]}, regions: [eu-west, eu-central], mode: strict}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 10, hold_down_s: 2,
           all_down: fail_open}
clients:
  - {country: DE, share: 0.5}
  - {country: US, share: 0.5}
"""
"""The simulator's small world: ``eu-west`` (an H100 and an L4 endpoint) and ``eu-central`` (an
A100), the only regions GDPR lets EU clients use; ``us-east`` (an H100) for the rest; DE and US
clients half each; models ``big`` (not on the L4) and ``small``."""

ONE_ENDPOINT = """\
zone: t.test
ttl: 5
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
regions:
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 2, models: [m]}
clients:
  - {country: US, share: 1}
"""
"""One H100 endpoint in one region with one client country: the simulator's latency arithmetic
can be checked by hand."""

EEA_SETS = """\
zone: infer.example.test
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    endpoints:
      - {name: euw-1, address: "10.1.0.11:8000", gpu: H100, gpus: 8, models: [m]}
  - name: us-east
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: use-1, address: "10.3.0.11:8000", gpu: H100, gpus: 8, models: [m]}
residency:
  - {name: gdpr, clients: {sets: [EEA], countries: [CH]}, regions: [eu-west], mode: strict}
"""
"""A strict rule naming a country set (``sets: [EEA], countries: [CH]``) over eu-west, with
us-east for everyone else: residency by named sets."""

PAIR = """\
zone: infer.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
regions:
  - name: eu-west
    country: IE
    location: {lat: 53.35, lon: -6.26}
    addresses: [192.0.2.10]
    endpoints:
      - {name: busy, address: "10.1.0.11:8000", gpu: H100, gpus: 8, models: [llama]}
      - {name: calm, address: "10.1.0.12:8000", gpu: H100, gpus: 8, models: [llama]}
"""
"""Two identical 8-GPU H100 endpoints, ``busy`` and ``calm``, in one region: what the reported
queue and KV cache alone do to a pick."""
