"""Time the control loop's tick on 50 regions x 2,000 endpoints, ~250 client zones x 4 models.

A tick here is the whole service (``regions.loop.control.run_tick``): the fleet from the
cache, 2,000 heartbeats from the hot state, evaluate_fleet, compile_table against the
previous table, machines and evaluation back to the hot state, events, the history row,
publish, dashboard. Each timed tick sees fresh heartbeats (new loads), so each one publishes
a new version: the worst case. Printed: wall time and this process's CPU time per tick (CPU
time leaves out the waits for Redis, the database and a busy core, so it stays comparable on
a shared machine; it also counts the fleet reload that ``run_tick`` makes after a tick every
~7 s, and, as in the Celery worker, the collection and heap freeze after each tick;
``--no-keep-heap`` leaves the collector alone), and wall time per phase of the tick. Also
timed: reloading the fleet from the database (``snapshot.load``), to decide between caching
it and reloading it every tick.

Run: .venv/bin/python -m bench.controlplane.tick [--ticks 10] [--redis-url redis://127.0.0.1:6379/13]
     [--database-url postgres://postgres@127.0.0.1:5432/trafficmgr_bench] [--profile N]
     [--dashboards N]
Without --database-url a temporary SQLite file is used; without --redis-url the in-process
hot state and channel layer (with it, Redis for both, as deployed). ``--dashboards N``
subscribes N channels to the dashboard group, as N web processes with dashboards open do
(each table update is then serialised once per process). The fleet and heartbeats come from
bench/engine/table.py.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import tempfile
import time
from dataclasses import replace


def setup(database_url: str | None, redis_url: str | None) -> None:
    """Point Django at a throwaway database and migrate it; dashboard pushes go to Redis."""
    var = tempfile.mkdtemp(prefix="trafficmgr-bench-")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
    os.environ["TRAFFICMGR_VAR_DIR"] = var
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{var}/bench.sqlite3"
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trafficmgr.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    if redis_url:
        from django.conf import settings

        settings.CHANNEL_LAYERS = {
            "default": {
                "BACKEND": "channels_redis.core.RedisChannelLayer",
                "CONFIG": {"hosts": [redis_url]},
            }
        }


def load_fleet() -> None:
    """Store the engine bench's fleet (plus ~250 client countries) through fleet apply."""
    from bench.engine.table import build_fleet
    from regions.audit.trail import acting_as
    from regions.fleet.plan import apply_plan, plan_fleet
    from regions.models import RoutingTableVersion
    from trafficmgr.routing.countries import CENTROID_OF
    from trafficmgr.routing.types import ClientShare

    # A reused database keeps an earlier run's history, stamped up to --ticks s ahead of the
    # clock: its head would not be the table this run published before.
    RoutingTableVersion.objects.all().delete()
    fleet = build_fleet()
    countries = sorted(CENTROID_OF)
    clients = tuple(ClientShare(c, 1 / len(countries)) for c in countries)
    with acting_as("bench", "cli"):
        apply_plan(plan_fleet(replace(fleet, clients=clients)), force=True)


def subscribe(n: int) -> list[str]:
    """Add ``n`` channels to the dashboard group, as the live feeds of ``n`` web processes."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from regions.loop.history import DASHBOARD_GROUP

    layer = get_channel_layer()
    channels = [async_to_sync(layer.new_channel)() for _ in range(n)]
    for channel in channels:
        async_to_sync(layer.group_add)(DASHBOARD_GROUP, channel)
    return channels


def unsubscribe(channels: list[str]) -> None:
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    from regions.loop.history import DASHBOARD_GROUP

    layer = get_channel_layer()
    for channel in channels:  # what they were sent expires with the channel layer's expiry
        async_to_sync(layer.group_discard)(DASHBOARD_GROUP, channel)


def ms(values: list[float]) -> str:
    values = sorted(values)
    p95 = values[min(len(values) - 1, int(0.95 * len(values)))]
    return (
        f"median {statistics.median(values) * 1000:7.1f} ms   p95 {p95 * 1000:7.1f} ms   "
        f"max {values[-1] * 1000:7.1f} ms   (n={len(values)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=10)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--database-url", default=None)
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="print the N costliest functions"
    )
    parser.add_argument(
        "--dashboards", type=int, default=0, metavar="N", help="web processes with dashboards"
    )
    parser.add_argument(
        "--no-keep-heap",
        action="store_true",
        help="leave the garbage collector alone between ticks (the worker freezes the heap)",
    )
    args = parser.parse_args()
    setup(args.database_url, args.redis_url)

    from bench.engine.table import heartbeats
    from regions import hotstate
    from regions.fleet import snapshot
    from regions.hotstate.redis_store import RedisHotState
    from regions.loop import control as controlloop

    started = time.perf_counter()
    load_fleet()
    print(f"fleet stored in {time.perf_counter() - started:.1f} s")
    store = (
        RedisHotState(args.redis_url, prefix=f"trafficmgr-bench-{os.getppid()}")
        if args.redis_url
        else hotstate.MemoryHotState()
    )
    hotstate.use(store)
    listeners = subscribe(args.dashboards)
    try:
        reloads = []
        for _ in range(5):
            t = time.perf_counter()
            view = snapshot.load()
            reloads.append(time.perf_counter() - t)
        fleet = view.fleet
        n_eps, n_regions = len(fleet.endpoints()), len(fleet.regions)
        print(
            f"fleet: {n_regions} regions, {n_eps} endpoints, {len(fleet.models())} models, "
            f"{len(fleet.clients)} client countries; hot state: {type(store).__name__}; "
            f"database: {os.environ['DATABASE_URL'].split(':')[0]}"
        )
        print(f"reload fleet from DB  {ms(reloads)}")
        now = time.time()
        for hb in heartbeats(fleet, now, seed=0).values():
            store.put_heartbeat(hb, 0)
        t = time.perf_counter()
        first = controlloop.run_tick(now, interval_s=60)
        print(
            f"first tick (cold)     {(time.perf_counter() - t) * 1000:7.1f} ms, "
            f"{len(store.table().zones)} zones"
        )
        durations, cpu, published, recorded = [], [], 0, 0
        phases: dict[str, list[float]] = {}
        profile = cProfile.Profile() if args.profile else None
        for i in range(1, args.ticks + 1):
            now += 1.0
            for hb in heartbeats(fleet, now, seed=i).values():
                store.put_heartbeat(replace(hb, seq=i + 1), i)
            if profile is not None:
                profile.enable()
            c = time.process_time()
            result = controlloop.run_tick(now, interval_s=60, keep_heap=not args.no_keep_heap)
            cpu.append(time.process_time() - c)
            if profile is not None:
                profile.disable()
            durations.append(result.duration_s)
            published += result.changed
            recorded += result.recorded
            for name, seconds in result.phases:
                phases.setdefault(name, []).append(seconds)
        print(f"tick (new loads)      {ms(durations)}; {published} published, {recorded} recorded")
        print(f"  CPU time            {ms(cpu)}")
        for name, values in phases.items():
            print(f"  {name:<19} {ms(values)}")
        print(f"  ({n_eps} heartbeats read per tick)")
        if profile is not None:
            pstats.Stats(profile).sort_stats("tottime").print_stats(args.profile)
        assert first.ran
    finally:
        unsubscribe(listeners)
        if isinstance(store, RedisHotState):
            store.reset()
        hotstate.use(None)


if __name__ == "__main__":
    main()
