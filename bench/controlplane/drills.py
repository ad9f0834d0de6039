"""Run N failover drills and report the spread of detection and DNS-moved times.

Self-contained by default: a throwaway database (SQLite file, or --database-url), the demo
fleet (examples/fleet.yaml, slow start shortened by --slow-start so recoveries are quick),
the control plane's API on a free port (Django's threaded WSGI server), the control loop
ticking every second, the GeoDNS server on a free port fed by the published tables, and one
simulated agent per endpoint pushing heartbeats over HTTP. Drills take turns over --targets
(region_outage by default), each once its target carries its usual traffic again.

With --server URL --token T the drills run on that control plane instead (e.g. the demo);
its DNS server is the one its drills are configured to ask.

Run: .venv/bin/python -m bench.controlplane.drills [-n 20] [--duration 6] [--kind region_outage]
     [--targets eu-west,us-east,ap-southeast] [--json OUT] [--plot OUT.png]
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import tempfile
import threading
import time
from dataclasses import replace
from typing import Any

from bench.suite import ROOT, write_json

METRICS = ("detected_after_s", "table_changed_after_s", "dns_changed_after_s_max")


def setup(database_url: str | None) -> None:
    """Point Django at a throwaway database, in-process hot state, and migrate."""
    var = tempfile.mkdtemp(prefix="trafficmgr-bench-drills-")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
    os.environ.update({"TRAFFICMGR_VAR_DIR": var, "TRAFFICMGR_TLS": "0", "LOG_LEVEL": "ERROR"})
    os.environ["DATABASE_URL"] = database_url or f"sqlite:///{var}/bench.sqlite3"
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trafficmgr.settings")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)


class Harness:
    """The whole system in this process (see the module docstring)."""

    def __init__(self, slow_start_s: float, load: float) -> None:
        from regions.audit.trail import acting_as
        from regions.fleet.plan import apply_plan, plan_fleet
        from regions.fleet.services import fleet_snapshot
        from trafficmgr.fleetfile import load_fleet_text

        desired = load_fleet_text((ROOT / "examples" / "fleet.yaml").read_text())
        policy = replace(desired.failover, slow_start_s=slow_start_s, hold_down_s=2.0)
        with acting_as("bench", "cli"):
            apply_plan(plan_fleet(replace(desired, failover=policy)), force=True)
        self.fleet = fleet_snapshot()
        self.load = load
        self.parts: list[Any] = []

    def start(self) -> tuple[tuple[str, int], str]:
        from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
        from django.core.wsgi import get_wsgi_application

        from regions import hotstate
        from regions.loop.control import EmbeddedTicker
        from trafficmgr.dns.config import ServerConfig
        from trafficmgr.dns.server import DnsServer, ServerThread

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

        httpd = ThreadedWSGIServer(("127.0.0.1", 0), Quiet)
        httpd.set_app(get_wsgi_application())
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        dns = DnsServer(self.fleet, ServerConfig(host="127.0.0.1", port=0, state_file=None))
        dns_thread = ServerThread(dns)
        address = dns_thread.start()
        hotstate.get().listeners.append(dns.set_table)  # type: ignore[attr-defined]
        ticker = EmbeddedTicker(1.0).start()
        self.parts += [httpd, dns_thread, ticker]
        self.agents = start_agents(self.fleet, url, self.load)
        return address, url

    def stop(self) -> None:
        for agent, _ in self.agents:
            agent.stop()
        httpd, dns_thread, ticker = self.parts
        ticker.stop()
        dns_thread.stop()
        httpd.shutdown()


def start_agents(fleet: Any, url: str, load: float) -> list[tuple[Any, threading.Thread]]:
    from agents.cli import build_agent
    from agents.config import AgentConfig
    from regions.access.issue import create_token

    started = []
    for region in fleet.regions:
        _, secret = create_token(f"bench {region.name}", "agent", region=region.name)
        for seed, e in enumerate(region.endpoints):
            cfg = AgentConfig(
                control_plane=url,
                token=secret,
                endpoint=e.name,
                interval_s=1.0,
                simulate=True,
                sim_gpu=e.gpu,
                sim_gpus=e.gpus,
                sim_load=load,
                sim_seed=seed,
                models=e.models,
            )
            agent = build_agent(cfg)
            thread = threading.Thread(target=agent.run, daemon=True)
            thread.start()
            started.append((agent, thread))
    return started


def share_of(region: str) -> float:
    from regions import hotstate
    from regions.drills.measure import target_share
    from regions.fleet import snapshot

    table = hotstate.get().table()
    return 0.0 if table is None else target_share(table, snapshot.current().fleet, region)


def wait_ready(region: str, usual: float, timeout_s: float = 90.0) -> float:
    """Wait until ``region`` carries at least 80 % of its usual share; return the wait."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s and share_of(region) < 0.8 * usual:
        time.sleep(0.5)
    return time.monotonic() - started


def run_local(args: argparse.Namespace) -> list[dict[str, Any]]:
    from regions.drills import service
    from regions.drills.measure import MeasureSetup
    from regions.drills.runner import run_drill

    harness = Harness(args.slow_start, args.load)
    dns, url = harness.start()
    targets = args.targets.split(",")
    time.sleep(4)  # first heartbeats, first healthy tables
    usual = {t: share_of(t) for t in targets}
    print(
        f"harness up: API {url}, DNS {dns[0]}:{dns[1]}, {len(harness.agents)} agents; "
        f"usual shares {', '.join(f'{t} {s:.2f}' for t, s in usual.items())}"
    )
    setup = MeasureSetup(dns=dns, route_url=url if args.route else None)
    reports = []
    try:
        for i in range(args.n):
            target = targets[i % len(targets)]
            waited = wait_ready(target, usual[target])
            drill = service.create_drill(
                args.kind, target, args.duration, {"recovery_wait_s": args.recovery_wait}
            )
            report = run_drill(drill.pk, setup) or {}
            reports.append(report)
            print(row(i + 1, report, waited), flush=True)
    finally:
        harness.stop()
    return reports


def run_remote(args: argparse.Namespace) -> list[dict[str, Any]]:
    from regions.drills.client import DrillClient

    client = DrillClient(args.server, args.token)
    targets = args.targets.split(",")
    reports = []
    for i in range(args.n):
        body = {
            "kind": args.kind,
            "target": targets[i % len(targets)],
            "duration_s": args.duration,
            "params": {"recovery_wait_s": args.recovery_wait},
        }
        started = client.start(body)
        doc = client.follow(
            int(started["id"]),
            started["params"]["resolved"]["region"],
            lambda line: None,
            args.duration + args.recovery_wait + 120,
        )
        reports.append(doc.get("report") or {})
        print(row(i + 1, reports[-1], 0.0), flush=True)
    return reports


def _s(value: Any) -> str:
    return "     —" if value is None else f"{value:6.2f}"


def row(n: int, r: dict[str, Any], waited: float) -> str:
    return (
        f"{n:3d} {r.get('target', '?'):13s} detect {_s(r.get('detected_after_s'))}  "
        f"table {_s(r.get('table_changed_after_s'))}  dns {_s(r.get('dns_changed_after_s_max'))}"
        f"  recovered {_s(r.get('recovered_after_s'))}  {r.get('verdict', '?'):7s}"
        f"  (waited {waited:4.1f} s)"
    )


def spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return {
        "n": len(ordered),
        "min": ordered[0],
        "median": statistics.median(ordered),
        "p90": p90,
        "max": ordered[-1],
    }


def summarise(reports: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "drills": len(reports),
        "passed": sum(r.get("verdict") == "pass" for r in reports),
    }
    for key in METRICS:
        values = [r[key] for r in reports if isinstance(r.get(key), int | float)]
        out[key] = spread(values) if values else None
    return out


def print_table(summary: dict[str, Any]) -> None:
    print(f"\n{summary['passed']}/{summary['drills']} drills passed")
    print(
        f"{'seconds after the fault':26s} {'n':>3s} {'min':>7s} {'median':>7s} {'p90':>7s} "
        f"{'max':>7s}"
    )
    for key in METRICS:
        s = summary[key]
        if s is None:
            print(f"{key:26s}   0       —")
            continue
        print(
            f"{key:26s} {s['n']:3d} {s['min']:7.2f} {s['median']:7.2f} {s['p90']:7.2f} "
            f"{s['max']:7.2f}"
        )


def plot(reports: list[dict[str, Any]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for axis, key, title, target in (
        (axes[0], "detected_after_s", "detection", 4.0),
        (axes[1], "dns_changed_after_s_max", "DNS moved (slowest vantage)", 5.0),
    ):
        values = [r[key] for r in reports if isinstance(r.get(key), int | float)]
        axis.hist(values, bins=[x / 4 for x in range(0, 29)], color="#4c72b0")
        axis.axvline(target, color="#d62728", linestyle="--", label=f"target {target:g} s")
        axis.set_title(f"{title} (n={len(values)})")
        axis.set_xlabel("seconds after the fault")
        axis.legend()
    axes[0].set_ylabel("drills")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="drills to run (20)")
    parser.add_argument("--kind", default="region_outage")
    parser.add_argument("--targets", default="eu-west,us-east,ap-southeast")
    parser.add_argument("--duration", type=float, default=6.0)
    parser.add_argument("--recovery-wait", type=float, default=30.0)
    parser.add_argument("--slow-start", type=float, default=3.0)
    parser.add_argument("--load", type=float, default=0.1, help="simulated agents' load")
    parser.add_argument(
        "--no-route",
        dest="route",
        action="store_false",
        help="DNS probes only (no route API probes)",
    )
    parser.add_argument("--database-url")
    parser.add_argument("--server")
    parser.add_argument("--token")
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--plot", metavar="OUT.png")
    args = parser.parse_args()
    if args.server:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trafficmgr.settings")
        reports = run_remote(args)
    else:
        setup(args.database_url)
        logging.disable(logging.ERROR)  # the 503s the route probes meet are in the reports
        reports = run_local(args)
    summary = summarise(reports)
    print_table(summary)
    if args.json:
        write_json(args.json, {"summary": summary, "reports": reports}, indent=1)
    if args.plot:
        plot(reports, args.plot)
        print(f"histogram: {args.plot}")


if __name__ == "__main__":
    main()
