"""Measure the GeoDNS server: queries per second, lost queries, latency p50/p99.

    .venv/bin/python bench/dns_qps.py [--duration 20] [--workers 1] [--server HOST:PORT]

Starts ``python -m trafficmgr.dns`` on a free loopback port (rate limiting off, no state
file, MaxMind's City test database when it is there) unless ``--server`` names one that
runs already, then loads it with dnsperf from a query file of mixed names and types, most
with an ECS option of a client prefix drawn from a few thousand (so the answer cache sees
many zones and buckets, as a real resolver population would). dnsperf reads the file in
its binary format (``-B``), which carries each query's own ECS option.

Without dnsperf (``apt-get install dnsperf``) it falls back to a bounded Python load: one
process per core with a window of outstanding UDP queries. That load generator is itself
slower than the server (a few tens of thousands of queries per second at best) and shares
the cores with it, so its figures are a floor, not the server's capacity.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dns.edns
import dns.exception
import dns.message
import dns.query

ROOT = Path(__file__).resolve().parents[1]
FLEET = ROOT / "examples" / "fleet.yaml"
TEST_DB = ROOT.parent / "shared" / "data" / "geoip" / "GeoIP2-City-Test.mmdb"
ZONE = "infer.example.test"
NAMES = ("llama-3-70b", "llama-3-8b", "api")
KNOWN = ("81.2.69.142", "89.160.20.128", "216.160.83.56", "175.16.199.1")
MAX_PY_SECONDS = 30.0
IN_FLIGHT = 100


def make_queries(count: int, seed: int = 1) -> tuple[list[bytes], int]:
    """Return ``count`` queries (A/AAAA/TXT for the model names) and how many carry ECS."""
    rng = random.Random(seed)
    prefixes = [
        f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.0" for _ in range(3000)
    ]
    prefixes += [ip.rsplit(".", 1)[0] + ".0" for ip in KNOWN]
    out = []
    with_ecs = 0
    for _ in range(count):
        name = f"{rng.choice(NAMES)}.{ZONE}"
        rdtype = rng.choices(("A", "AAAA", "TXT"), (0.6, 0.3, 0.1))[0]
        if rng.random() < 0.85:
            with_ecs += 1
            if rng.random() < 0.1:
                option = dns.edns.ECSOption(
                    f"2001:{rng.randrange(1, 0xFFFF):x}:{rng.randrange(256):x}00::", 56
                )
            else:
                option = dns.edns.ECSOption(rng.choice(prefixes), 24)
            message = dns.message.make_query(name, rdtype, use_edns=0, options=[option])
        else:
            message = dns.message.make_query(name, rdtype, use_edns=False)
        out.append(message.to_wire())
    return out, with_ecs


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(port: int, workers: int) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", "trafficmgr.dns", "--fleet", str(FLEET)]
    args += ["--listen", f"127.0.0.1:{port}", "--rrl-rate", "0", "--state-file", ""]
    args += ["--workers", str(workers), "--log-level", "WARNING"]
    if TEST_DB.exists():
        args += ["--geoip-db", str(TEST_DB)]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL)
    probe = dns.message.make_query(f"api.{ZONE}", "A")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            dns.query.udp(probe, "127.0.0.1", port=port, timeout=0.5)
            return process
        except dns.exception.Timeout:
            if process.poll() is not None:
                raise SystemExit("the server did not start") from None
    process.kill()
    raise SystemExit("the server did not answer")


def run_dnsperf(
    host: str,
    port: int,
    queries: list[bytes],
    seconds: float,
    max_qps: float = 0,
    verbose: bool = False,
) -> dict[str, float]:
    """Run dnsperf over the queries; return qps, sent, lost and latencies (ms).

    Without ``verbose`` dnsperf reports only the mean latency; with it, it prints every
    answer's latency, which gives percentiles but costs dnsperf CPU (on two shared cores,
    about a third of the throughput), so the throughput pass runs without it.
    """
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "queries.bin"
        data.write_bytes(b"".join(struct.pack("!H", len(q)) + q for q in queries))
        log = Path(tmp) / "dnsperf.out"
        args = ["dnsperf", "-s", host, "-p", str(port), "-B", "-d", str(data)]
        args += ["-l", f"{seconds:g}", "-c", "1", "-q", str(IN_FLIGHT), "-t", "2"]
        if max_qps:
            args += ["-Q", str(int(max_qps))]
        if verbose:
            args.append("-v")
        print("$", " ".join(args), file=sys.stderr)
        with open(log, "wb") as out:
            subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, check=True)
        text = log.read_text(errors="replace")
    figures = {
        key: _stat(text, label)
        for key, label in (
            ("sent", "Queries sent"),
            ("completed", "Queries completed"),
            ("lost", "Queries lost"),
            ("qps", "Queries per second"),
            ("mean_ms", "Average Latency \\(s\\)"),
        )
    }
    figures["mean_ms"] *= 1000
    latencies = [float(m) for m in re.findall(r"^> \S+ binary input (\S+)$", text, re.M)]
    figures.update(_percentiles(latencies))
    return figures


def _stat(text: str, label: str) -> float:
    found = re.search(rf"{label}:\s+([\d.]+)", text)
    return float(found.group(1)) if found else float("nan")


def _percentiles(latencies_s: list[float]) -> dict[str, float]:
    if len(latencies_s) < 100:
        return {"p50_ms": float("nan"), "p99_ms": float("nan")}
    cuts = statistics.quantiles(latencies_s, n=100)
    return {"p50_ms": cuts[49] * 1000, "p99_ms": cuts[98] * 1000}


def _python_load(args: tuple[str, int, list[bytes], float, int]) -> tuple[int, int, list[float]]:
    """One load process: keep ``window`` queries outstanding for ``seconds``."""
    host, port, queries, seconds, window = args
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((host, port))
    sock.settimeout(0.2)
    pending: dict[int, float] = {}
    latencies: list[float] = []
    sent = 0
    qid = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        while len(pending) < window:
            qid = (qid + 1) & 0xFFFF
            wire = struct.pack("!H", qid) + queries[sent % len(queries)][2:]
            pending[qid] = time.monotonic()
            sock.send(wire)
            sent += 1
        try:
            reply = sock.recv(4096)
        except TimeoutError:
            pending.clear()  # all lost; start a new window
            continue
        started = pending.pop(struct.unpack_from("!H", reply)[0], None)
        if started is not None:
            latencies.append(time.monotonic() - started)
    sock.close()
    return sent, len(latencies), latencies


def run_python(host: str, port: int, queries: list[bytes], seconds: float) -> dict[str, float]:
    seconds = min(seconds, MAX_PY_SECONDS)
    procs = max(1, min(2, os.cpu_count() or 1))
    jobs = [(host, port, queries[i::procs], seconds, IN_FLIGHT // procs) for i in range(procs)]
    with multiprocessing.get_context("spawn").Pool(procs) as pool:
        results = pool.map(_python_load, jobs)
    sent = sum(r[0] for r in results)
    completed = sum(r[1] for r in results)
    latencies = [x for r in results for x in r[2]]
    figures: dict[str, float] = {"sent": sent, "completed": completed, "lost": sent - completed}
    figures["qps"] = completed / seconds
    figures.update(_percentiles(latencies))
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=1, help="server worker processes")
    parser.add_argument("--queries", type=int, default=20000, help="distinct queries in the file")
    parser.add_argument("--server", help="HOST:PORT of a running server (default: start one)")
    parser.add_argument("--python", action="store_true", help="use the Python load generator")
    parser.add_argument(
        "--latency-seconds",
        type=float,
        default=10.0,
        help="then a run at half the measured rate with per-query latencies (0: skip)",
    )
    args = parser.parse_args()
    queries, ecs_count = make_queries(args.queries)
    ecs = ecs_count / len(queries)
    process = None
    if args.server:
        host, _, port_text = args.server.rpartition(":")
        port = int(port_text)
    else:
        host, port = "127.0.0.1", free_port()
        process = start_server(port, args.workers)
    try:
        if shutil.which("dnsperf") is not None and not args.python:
            tool = "dnsperf"
            figures = run_dnsperf(host, port, queries, args.duration)
            relaxed = None
            if args.latency_seconds > 0:
                rate = figures["qps"] / 2
                relaxed = run_dnsperf(host, port, queries, args.latency_seconds, rate, True)
        else:
            tool = "python (bounded; a floor, see the docstring)"
            figures = run_python(host, port, queries, args.duration)
            relaxed = None
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            process.wait(20)
    print(f"load: {tool}, {len(queries)} distinct queries, {ecs:.0%} with ECS")
    print(
        f"server: {args.server or 'python -m trafficmgr.dns'}, workers {args.workers}, "
        f"cores {os.cpu_count()} (shared with the load generator)"
    )
    latency = f"mean {figures['mean_ms']:.2f} ms" if "mean_ms" in figures else ""
    if figures["p99_ms"] == figures["p99_ms"]:  # not NaN: the Python load measures each query
        latency = f"p50 {figures['p50_ms']:.2f} ms  p99 {figures['p99_ms']:.2f} ms"
    print(
        f"throughput, {args.duration:g} s: qps {figures['qps']:.0f}  sent {figures['sent']:.0f}  "
        f"lost {figures['lost']:.0f}  latency {latency}  ({IN_FLIGHT} queries kept in flight)"
    )
    if relaxed is not None:
        print(
            f"latency at half that rate, {args.latency_seconds:g} s: qps {relaxed['qps']:.0f}  "
            f"lost {relaxed['lost']:.0f}  p50 {relaxed['p50_ms']:.2f} ms  "
            f"p99 {relaxed['p99_ms']:.2f} ms"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
