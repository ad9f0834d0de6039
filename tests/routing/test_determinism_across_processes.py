"""Same inputs → same table version in every process, whatever its string hashing.

Set iteration order follows ``PYTHONHASHSEED``; a float sum taken in that order can tip the
rounding of a shift-limited zone, so a restarted worker would publish a new version for the
same inputs. Compiles failing, shift-limited ticks of the benchmark fleet in two interpreters
with different seeds and compares every version.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import random
from dataclasses import replace
from bench.engine.table import build_fleet, heartbeats
from trafficmgr.routing.countries import CONTINENT_OF
from trafficmgr.routing.failover import evaluate_fleet
from trafficmgr.routing.table import compile_table, diff_tables, static_table
from trafficmgr.routing.types import ProbeSample

fleet = build_fleet(seed=7)
fleet = replace(fleet, failover=replace(fleet.failover, max_shift_per_tick=0.2))
now, rng, machines = 1_700_000_000.0, random.Random(7), {{}}
previous = static_table(fleet, now)
base = heartbeats(fleet, now, seed=107)
for tick in range(7):
    down = {{r.name for r in fleet.regions if rng.random() < 0.15}}
    beats = {{}}
    for name, hb in base.items():
        hb = replace(hb, received_at=hb.received_at + tick * 3, sent_at=hb.sent_at + tick * 3)
        if name.rsplit("-e", 1)[0] in down:
            hb = replace(hb, probe=ProbeSample(False, 1.0))
        elif rng.random() < 0.3:
            kv, waiting = rng.uniform(0, 1), rng.randint(0, 40)
            hb = replace(hb, server=replace(hb.server, kv_cache_usage=kv, requests_waiting=waiting))
        beats[name] = hb
    evaluation = evaluate_fleet(fleet, beats, machines, now + tick * 3)
    machines = evaluation.machines
    zones = sorted(CONTINENT_OF)
    at = now + tick * 3
    table = compile_table(fleet, evaluation.statuses, at, previous=previous, zones=zones)
    print(table.version, repr(diff_tables(previous, table).max_moved))
    previous = table
"""


def versions(seed: str) -> list[str]:
    script = SCRIPT.format()
    env = {**os.environ, "PYTHONHASHSEED": seed}
    done = subprocess.run(
        # run from the root: ``-c`` puts the working directory first on the path
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.splitlines()


@pytest.mark.slow
def test_a_shift_limited_table_is_the_same_under_any_hash_seed() -> None:
    first, second = versions("0"), versions("123")
    assert len(first) == 7
    assert first == second
