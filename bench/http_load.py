"""Shared parts of the HTTP benchmarks: a throwaway control plane under daphne, a load generator.

The control plane gets its own temporary SQLite database (or ``--database-url``) and, when
``--redis-url`` is given, the distributed mode on that Redis (its ``trafficmgr:*`` keys are
deleted before and after: give it a database index nobody else uses). The load generator is
a fixed number of threads, each with one keep-alive HTTP/1.1 connection sending requests
back to back for a fixed time: closed-loop, so it measures capacity, with latency under
that load.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--concurrency", type=int, default=8, help="client connections")
    parser.add_argument("--regions", type=int, default=10)
    parser.add_argument("--endpoints", type=int, default=400)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--database-url", default=None)
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prepare(args: argparse.Namespace) -> dict[str, str]:
    """Set up Django on a fresh database holding a synthetic fleet; return the server's env."""
    var = tempfile.mkdtemp(prefix="trafficmgr-bench-")
    env = {
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret-key"),
        "TRAFFICMGR_VAR_DIR": var,
        "DATABASE_URL": args.database_url or f"sqlite:///{var}/bench.sqlite3",
        "TRAFFICMGR_TLS": "0",
        "DJANGO_SETTINGS_MODULE": "trafficmgr.settings",
        "LOG_LEVEL": "WARNING",
    }
    if args.redis_url:
        env["REDIS_URL"] = args.redis_url
    else:
        os.environ.pop("REDIS_URL", None)
    os.environ.update(env)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    from engine_table import build_fleet

    from regions.audit import acting_as
    from regions.fleet import apply_plan, plan_fleet
    from trafficmgr.routing.types import ClientShare

    fleet = build_fleet(args.regions, args.endpoints)
    fleet = replace(fleet, residency=tuple(r for r in fleet.residency if r.regions))
    clients = tuple(
        ClientShare(c, 0.1) for c in ("US", "DE", "GB", "FR", "JP", "IN", "BR", "SG", "AU", "CA")
    )
    with acting_as("bench", "cli"):
        apply_plan(plan_fleet(replace(fleet, clients=clients)), force=True)
    if args.redis_url:
        from regions import hotstate

        hotstate.get().reset()
    return {**os.environ, **env}


def serve(env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """Start daphne on 127.0.0.1:port and wait until /healthz answers."""
    daphne = str(Path(sys.executable).with_name("daphne"))
    process = subprocess.Popen(
        [daphne, "-b", "127.0.0.1", "-p", str(port), "trafficmgr.asgi:application"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return process
        except OSError:
            time.sleep(0.3)
    stop(process)
    raise RuntimeError("daphne did not start")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


@dataclass
class Results:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    elapsed: float = 0.0

    def report(self, what: str) -> None:
        lat = sorted(self.latencies)
        n = len(lat)
        p = (lambda q: lat[min(n - 1, int(q * n))] * 1000) if n else (lambda q: float("nan"))
        print(
            f"{what}: {n / self.elapsed:,.0f}/s over {self.elapsed:.1f} s ({n} requests); "
            f"latency p50 {p(0.5):.1f} ms, p99 {p(0.99):.1f} ms, "
            f"mean {statistics.fmean(lat) * 1000 if n else 0:.1f} ms; "
            f"statuses {dict(self.statuses)}"
        )


def load(
    port: int,
    make: Callable[[int, int], tuple[str, bytes, dict[str, str]]],
    concurrency: int,
    duration: float,
) -> Results:
    """Send ``make(worker, i)`` = (path, body, headers) POSTs from ``concurrency`` threads."""
    results = Results()
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)

    def worker(w: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        statuses: Counter[int] = Counter()
        start.wait()
        deadline = time.monotonic() + duration
        i = 0
        while time.monotonic() < deadline:
            path, body, headers = make(w, i)
            t = time.perf_counter()
            conn.request("POST", path, body, headers)
            response = conn.getresponse()
            response.read()
            mine.append(time.perf_counter() - t)
            statuses[response.status] += 1
            i += 1
        conn.close()
        with lock:
            results.latencies.extend(mine)
            results.statuses.update(statuses)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for t in threads:
        t.start()
    start.wait()
    began = time.monotonic()
    for t in threads:
        t.join()
    results.elapsed = time.monotonic() - began
    return results


def heartbeat_body(endpoint: str, seq: int, gpus: int = 8) -> bytes:
    """An agent-like heartbeat (8 GPUs: ~3 KB)."""
    now = time.time()
    doc: dict[str, Any] = {
        "endpoint": endpoint,
        "seq": seq,
        "sent_at": now,
        "interval_s": 1.0,
        "gpus": [
            {
                "index": i,
                "uuid": f"GPU-{endpoint}-{i}",
                "name": "NVIDIA H100 80GB HBM3",
                "util_pct": 55.0,
                "mem_used_mb": 60000.0,
                "mem_total_mb": 81559.0,
                "temp_c": 64.0,
                "power_w": 420.0,
                "power_limit_w": 700.0,
                "throttle_reasons": [],
                "ecc_errors": 0,
                "ecc_corrected": 0,
                "xid_errors": 0,
                "xid_last": None,
                "lost": False,
                "errors": [],
            }
            for i in range(gpus)
        ],
        "server": {
            "kind": "vllm",
            "requests_running": 12,
            "requests_waiting": 1,
            "kv_cache_usage": 0.42,
            "tokens_per_s": 1800.0,
            "ttft_p50_ms": 140.0,
            "ttft_p99_ms": 520.0,
            "models_loaded": [],
            "scrape_ok": True,
            "garbage_lines": 0,
            "error": None,
        },
        "probe": {"ok": True, "latency_ms": 30.0, "status": 200, "reason": ""},
    }
    return json.dumps(doc).encode()


def agent_tokens() -> dict[str, str]:
    """An agent token per region: region → secret."""
    from regions.models import Region
    from regions.services import create_token

    return {
        r: create_token(f"bench-{r}", "agent", region=r)[1]
        for r in Region.objects.values_list("name", flat=True)
    }
