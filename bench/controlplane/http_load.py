"""Shared parts of the HTTP benchmarks: a throwaway control plane, a load generator.

The control plane runs under daphne (the default) or ``--server uvicorn --workers N``, with
its own temporary SQLite database (or ``--database-url``) and, when ``--redis-url`` is given,
the distributed mode on that Redis (its ``trafficmgr:*`` keys are deleted before and after:
give it a database index nobody else uses). The load generator is a fixed number of threads
in this process, each with one keep-alive HTTP/1.1 connection sending requests back to back
for a fixed time: closed-loop, so it measures capacity, with latency under that load. It
runs on the same machine and shares its cores with the server; the report says how much CPU
each side used (core-seconds per second), and ``cpu/req`` is the server's CPU per request.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
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

from bench.suite import ROOT

WARM_UP = 20  # requests per connection before the clock starts


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of load")
    parser.add_argument("--concurrency", type=int, default=8, help="client connections")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="requests/s to offer (default: as fast as served)"
    )
    parser.add_argument("--regions", type=int, default=10)
    parser.add_argument("--endpoints", type=int, default=400)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--server", choices=("daphne", "uvicorn"), default="daphne")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    parser.add_argument(
        "--in-process",
        type=int,
        default=0,
        metavar="N",
        help="no server: time N requests through the ASGI app in this process, front and Django",
    )
    parser.add_argument(
        "--no-front",
        action="store_true",
        help="turn the ASGI front of the hot paths off (TRAFFICMGR_LOOP_FRONT=0): all Django",
    )
    return parser.parse_args()


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
    from bench.engine.table import build_fleet
    from regions.audit.trail import acting_as
    from regions.fleet.plan import apply_plan, plan_fleet
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


def serve(
    env: dict[str, str], port: int, args: argparse.Namespace | None = None
) -> subprocess.Popen[bytes]:
    """Start the server on 127.0.0.1:port and wait until /healthz answers."""
    server = args.server if args else "daphne"
    workers = args.workers if args else 1
    if args is not None and args.no_front:
        env = {**env, "TRAFFICMGR_LOOP_FRONT": "0"}
    if server == "daphne":
        if workers != 1:
            raise SystemExit("daphne runs one process here: use --server uvicorn --workers N")
        command = ["daphne", "-b", "127.0.0.1", "-p", str(port)]
    else:
        command = ["uvicorn", "--host", "127.0.0.1", "--port", str(port)]
        command += ["--workers", str(workers), "--lifespan", "off", "--no-access-log"]
        command += ["--log-level", "warning"]
    command[0] = str(Path(sys.executable).with_name(command[0]))
    process = subprocess.Popen(
        [*command, "trafficmgr.asgi:application"],
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
    raise RuntimeError(f"{server} did not start")


def describe(args: argparse.Namespace) -> str:
    """The server set-up and the load in words, for the report."""
    front = "" if not args.no_front else ", ASGI front off"
    if args.server == "daphne":
        server = f"one daphne process{front}"
    else:
        server = f"uvicorn, {args.workers} worker process{'es' if args.workers > 1 else ''}{front}"
    offered = f"{args.rate:,.0f}/s offered" if args.rate else "closed loop"
    return f"{server}, {args.concurrency} connections, {offered}"


def session_cpu(session: int) -> float:
    """CPU seconds used so far by every process of a session (the server and its workers)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session:  # field 6 of stat: the session id
            total += int(fields[11]) + int(fields[12])  # utime + stime
    return total / os.sysconf("SC_CLK_TCK")


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
    client_cpu: float = 0.0  # CPU seconds of this process (the load generator) during the run
    server_cpu: float = 0.0  # CPU seconds of the server's processes during the run

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
        if n:
            print(
                f"cpu: server {self.server_cpu / self.elapsed:.2f} cores, load generator "
                f"{self.client_cpu / self.elapsed:.2f} cores (of {os.cpu_count()}); "
                f"server cpu/req {self.server_cpu / n * 1e6:,.0f} us"
            )


def load(
    port: int,
    make: Callable[[int, int], tuple[str, bytes, dict[str, str]]],
    concurrency: int,
    duration: float,
    server: subprocess.Popen[bytes] | None = None,
    rate: float = 0.0,
) -> Results:
    """Send ``make(worker, i)`` = (path, body, headers) POSTs from ``concurrency`` threads.

    Each connection first sends ``WARM_UP`` requests (``i`` negative) that are not counted.

    Back to back by default (closed loop: capacity). With ``rate``, requests/s in all, each
    thread keeps a schedule instead and a request's latency counts from when it was due, so
    a server falling behind shows as queueing, not as fewer samples. With ``server``, the CPU
    its processes used during the run is recorded too.
    """
    results = Results()
    lock = threading.Lock()
    start = threading.Barrier(concurrency + 1)
    gap = concurrency / rate if rate else 0.0
    warm = threading.Barrier(concurrency)

    def worker(w: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        mine: list[float] = []
        statuses: Counter[int] = Counter()
        for i in range(WARM_UP):  # first requests fill each worker's caches: not measured
            path, body, headers = make(w, -1 - i)
            conn.request("POST", path, body, headers)
            conn.getresponse().read()
        warm.wait()
        start.wait()
        began = time.perf_counter() + gap * w / concurrency
        deadline = time.monotonic() + duration
        i = 0
        while time.monotonic() < deadline:
            path, body, headers = make(w, i)
            t = time.perf_counter()
            if gap:
                due = began + i * gap
                if due > t:
                    time.sleep(due - t)
                t = due
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
    cpu = time.process_time()
    served = session_cpu(server.pid) if server else 0.0
    for t in threads:
        t.join()
    results.elapsed = time.monotonic() - began
    results.client_cpu = time.process_time() - cpu
    results.server_cpu = session_cpu(server.pid) - served if server else 0.0
    return results


def in_process(
    make: Callable[[int, int], tuple[str, bytes, dict[str, str]]], requests: int, front: bool
) -> tuple[float, Counter[int]]:
    """Mean seconds per request through the ASGI application in this process, and statuses.

    No sockets, no server: one request after another on an event loop, through the ASGI
    front (``front``) or straight into Django's handler with the front off.
    """
    import asyncio

    from regions.api.fastfront.front import LoopFront
    from trafficmgr import asgi

    app = LoopFront(asgi.django_asgi_app, enabled=front)
    statuses: Counter[int] = Counter()

    async def one(i: int) -> None:
        path, body, headers = make(0, i)
        given = {"host": "127.0.0.1", "content-length": str(len(body)), **headers}
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in given.items()],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8000),
        }
        pending = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop(0)
            await asyncio.sleep(3600)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                statuses[message["status"]] += 1

        await app(scope, receive, send)

    async def run() -> float:
        for i in range(min(200, requests)):  # warm up: caches, connections, the fleet view
            await one(i)
        statuses.clear()
        began = time.perf_counter()
        for i in range(requests):
            await one(i)
        return (time.perf_counter() - began) / requests

    try:
        import uvloop

        per_request = uvloop.run(run())
    except ImportError:
        per_request = asyncio.run(run())
    app.close()
    return per_request, statuses


def report_in_process(
    what: str, make: Callable[[int, int], tuple[str, bytes, dict[str, str]]], requests: int
) -> None:
    """Print the in-process cost per request: the ASGI front, Django through ASGI, Django
    called synchronously (its test client: no thread per request, which ASGI adds)."""
    runs = [
        ("ASGI front", lambda: in_process(make, requests, True)),
        ("Django + DRF under ASGI (front off)", lambda: in_process(make, requests, False)),
        ("Django + DRF called synchronously", lambda: in_test_client(make, requests)),
    ]
    for how, run in runs:
        seconds, statuses = run()
        print(
            f"{what} in process, {how}: {seconds * 1e6:,.0f} us/request "
            f"({1 / seconds:,.0f}/s on one core); statuses {dict(statuses)}"
        )


def in_test_client(
    make: Callable[[int, int], tuple[str, bytes, dict[str, str]]], requests: int
) -> tuple[float, Counter[int]]:
    """Mean seconds per request through Django's test client (the whole middleware stack)."""
    from django.test import Client

    client = Client(SERVER_NAME="127.0.0.1")
    statuses: Counter[int] = Counter()

    def one(i: int) -> int:
        path, body, headers = make(0, i)
        extra = {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
        extra.pop("HTTP_CONTENT_TYPE", None)
        return client.generic("POST", path, body, "application/json", **extra).status_code

    for i in range(min(200, requests)):
        one(i)
    began = time.perf_counter()
    for i in range(requests):
        statuses[one(i)] += 1
    return (time.perf_counter() - began) / requests, statuses


def heartbeat_template(endpoint: str, gpus: int = 8) -> Callable[[int], bytes]:
    """``body(seq)``: the heartbeat of ``heartbeat_body``, filled in cheaply (a %-format)."""
    text = heartbeat_body(endpoint, -7, gpus, sent_at=-7.5)
    template = text.replace(b'"seq": -7,', b'"seq": %d,').replace(
        b'"sent_at": -7.5,', b'"sent_at": %.6f,'
    )
    if template.count(b"%") != 2:
        raise ValueError("heartbeat_body changed: update heartbeat_template")
    return lambda seq: template % (seq, time.time())


# What a vLLM agent sends for a model: the server's histogram of output tokens per request.
OUTPUT_TOKENS = {
    "le": [5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000],
    "counts": [310, 1204, 5120, 19877, 51230, 90112, 131008, 140211, 141590, 141700],
    "count": 141700,
}


def heartbeat_body(endpoint: str, seq: int, gpus: int = 8, sent_at: float | None = None) -> bytes:
    """An agent-like heartbeat (8 GPUs and one model's output-length histogram: ~3 KB)."""
    now = time.time() if sent_at is None else sent_at
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
            "output_tokens": {"llama-3-70b": OUTPUT_TOKENS},
            "scrape_ok": True,
            "garbage_lines": 0,
            "error": None,
        },
        "probe": {"ok": True, "latency_ms": 30.0, "status": 200, "reason": ""},
    }
    return json.dumps(doc).encode()


def agent_tokens() -> dict[str, str]:
    """An agent token per region: region → secret."""
    from regions.access.issue import create_token
    from regions.models import Region

    return {
        r: create_token(f"bench-{r}", "agent", region=r)[1]
        for r in Region.objects.values_list("name", flat=True)
    }
