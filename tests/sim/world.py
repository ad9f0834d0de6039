"""The simulator's small world: a fleet file shared by the sim tests.

``eu-west`` (an H100 and an L4 endpoint) and ``eu-central`` (an A100), both priority 1 and
the only regions GDPR lets EU clients use; ``us-east`` (an H100) for the rest. Clients: DE
and US, half each. Models ``big`` (not on the L4) and ``small``.
"""

from __future__ import annotations

SIM_WORLD_YAML = """\
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
