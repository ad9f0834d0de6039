"""The gateway under abuse: memory, file descriptors, in-flight slots and legitimate service.

Why: the gateway faces the internet; a client or an endpoint that misbehaves must cost a
bounded amount of memory, have its connections closed within the deadlines, leave no
request counted in flight, and not slow down the clients that behave. Targets: RSS growth
<= 64 MB per worker under every attack, every slot freed, legitimate p99 <= 2x unloaded.

    .venv/bin/python -m bench.gateway.abuse [--attacks pipeline,tokens,...] [--hold 40]
        [--json bench/results/gateway_abuse.json]

Two simulated endpoints serve model ``bench`` (``python -m trafficmgr.simserver``), a third
``long`` (the non-reading streams, in a process of its own), and a
fake endpoint process of this script serves ``evil-head`` (a response head that never ends)
and ``evil-body`` (a non-streamed body that never ends, up to ``--evil-cap-mb`` per answer).
Each attack gets a fresh gateway (``python -m trafficmgr.gateway``, one worker) and runs
alone: first ``--baseline`` s of the well-behaved client only (unloaded), then the attack
with the well-behaved client beside it. That client (a process of its own, from 127.0.0.1)
sends ``--legit-rate`` non-streamed chat completions a second, one new connection each;
attackers connect from other loopback addresses (127.0.0.2 and up), so that a per-client
limit can tell them apart. Sampled every 0.1 s from /proc: the gateway's VmRSS (its VmHWM
is reset before each attack where the kernel allows) and open descriptors; in flight
(``trafficmgr_gateway_in_flight``, summed) from /metrics at the attack's end, while the
attacker still holds its connections, and again after it closed them. Every loop is bounded
in count and time; everything is on loopback; the run stops by itself.

The attacks: ``pipeline`` (GET /healthz pipelined on one connection that never reads),
``metrics`` (the same with GET /metrics), ``tokens`` (distinct 60 KB bearer tokens),
``slowloris`` (heads sent a byte a second, and authenticated bodies that stall),
``evil`` (requests routed to the fake endpoint), ``nonreader`` (streams whose client stops
reading), ``conns`` (idle connections toward the connection cap).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.gateway import procs
from bench.gateway.abuse_attacks import (
    LEGIT_ENDPOINTS,
    MB,
    Sampler,
    attack_coro,
    chat,
    evil_server,
    in_flight,
    measure_epp,
    post_head,
)
from bench.suite import write_json

RESULTS = procs.ROOT / "bench" / "results" / "gateway_abuse.json"
ATTACKS = ("pipeline", "metrics", "tokens", "slowloris", "evil", "nonreader", "conns")
# attacks that outlast the gateway's deadlines: at their end the gateway holds none of it
DEADLINED = ("slowloris", "nonreader", "conns")
FLEET = """\
zone: bench.example.test
ttl: 10
gpu_profiles:
  H100: {prefill_tokens_per_s: 12000, decode_tokens_per_s: 2400, max_concurrency: 64}
regions:
  - name: bench
    country: US
    location: {lat: 39.04, lon: -77.49}
    addresses: [198.51.100.10]
    endpoints:
      - {name: sim-1, address: "10.0.0.1:8000", gpu: H100, gpus: 2, models: [bench]}
      - {name: sim-2, address: "10.0.0.2:8000", gpu: H100, gpus: 2, models: [bench]}
      - {name: sim-long, address: "10.0.0.3:8000", gpu: H100, gpus: 2, models: [long]}
      - {name: evil-head, address: "127.0.0.1:HEADPORT", gpu: H100, gpus: 1, models: [evil-head]}
      - {name: evil-body, address: "127.0.0.1:BODYPORT", gpu: H100, gpus: 1, models: [evil-body]}
failover: {heartbeat_interval_s: 1, miss_threshold: 3, slow_start_s: 0, all_down: fail_open}
"""
# --- the well-behaved client (a process of its own) -------------------------------------------


def legit(port: int, rate: float, seconds: float, out: str) -> int:
    """Send ``rate`` requests a second for ``seconds``; append ``latency status`` lines."""
    body = chat("bench")
    request = post_head(len(body)) + body
    stop = time.monotonic() + seconds
    with open(out, "a", buffering=1) as f:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        nxt = time.monotonic()
        while nxt < stop:
            time.sleep(max(0.0, nxt - time.monotonic()))
            nxt += 1 / rate
            t0 = time.perf_counter()
            status = "error"
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.sendall(request)
                    got = b""
                    while b"\r\n\r\n" not in got or not got.endswith(b"}"):
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        got += chunk
                    status = got[9:12].decode() or "eof"
            except OSError as exc:
                status = type(exc).__name__
            f.write(f"{time.perf_counter() - t0:.6f} {status}\n")
    return 0


def legit_summary(path: Path) -> dict[str, Any]:
    text = path.read_text() if path.exists() else ""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    lat = sorted(float(r[0]) * 1000 for r in rows if r[1] == "200")
    errors: dict[str, int] = {}
    for r in rows:
        if r[1] != "200":
            errors[r[1]] = errors.get(r[1], 0) + 1
    if not lat:
        return {"requests": len(rows), "p50_ms": None, "p99_ms": None, "errors": errors}
    p99 = lat[min(len(lat) - 1, int(len(lat) * 0.99))]
    return {"requests": len(rows), "p50_ms": round(statistics.median(lat), 2),
            "p99_ms": round(p99, 2), "errors": errors}  # fmt: skip


# --- the run --------------------------------------------------------------------------------


def legit_run(port: int, a: argparse.Namespace, seconds: float, out: Path) -> subprocess.Popen:
    cmd = [
        *procs.module("bench.gateway.abuse"),
        "--legit",
        f"{port}:{a.legit_rate}:{seconds}:{out}",
    ]
    return procs.start(cmd, procs.SIM_CPU)


def measure(name: str, fleet_file: Path, a: argparse.Namespace, tmp: Path, evil_out: Path) -> dict:
    """Run one attack on a fresh gateway; return its row."""
    with procs.gateway(fleet_file, "--workers", "1") as (port, proc):
        sampler = Sampler(proc.pid, a.rss_guard_mb * MB)
        base_out, during_out = tmp / f"{name}-base.txt", tmp / f"{name}-during.txt"
        base = legit_run(port, a, a.baseline, base_out)
        base.wait(a.baseline + 30)
        time.sleep(0.5)
        rss0, fds0 = sampler.rss(), sampler.fds()
        evil_out.unlink(missing_ok=True)
        sampler.start()
        during = legit_run(port, a, 3 * a.hold + 30, during_out)
        while not during_out.exists() and during.poll() is None:
            time.sleep(0.05)  # the attack starts when the client does
        at_end: dict[str, Any] = {}

        def probe() -> None:  # the attacker still holds what it opened
            at_end.update(fds=sampler.fds(), in_flight=in_flight(port, LEGIT_ENDPOINTS))

        t0 = time.monotonic()
        detail = asyncio.run(attack_coro(name, port, a, probe, evil_out))
        took = time.monotonic() - t0
        procs.stop(during)
        peak = sampler.stop()
        time.sleep(a.settle)
        alive = proc.poll() is None
        row = {
            "attack": name,
            "attack_s": round(took, 1),
            "rss_before_mb": round(rss0 / MB, 1),
            "rss_peak_mb": round(peak / MB, 1),
            "rss_growth_mb": round((peak - rss0) / MB, 1),
            "rss_after_mb": round(sampler.rss() / MB, 1),
            "fds_before": fds0,
            "fds_peak": sampler.fds_peak,
            "fds_at_attack_end": at_end.get("fds"),
            "fds_after": sampler.fds(),
            "attack_in_flight_at_end": at_end.get("in_flight"),
            "in_flight_after": in_flight(port) if alive else None,
            "gateway_alive": alive,
            "killed_by_rss_guard": sampler.tripped,
            "legit_unloaded": legit_summary(base_out),
            "legit_during": legit_summary(during_out),
            "detail": detail,
        }
    row["verdict"] = verdict(row)
    return row


def verdict(row: dict[str, Any]) -> dict[str, bool]:
    """The issue's targets: RSS, slots freed (by the deadlines, where the attacker still holds
    its connections at the end), legitimate p99 within twice unloaded and nothing lost."""
    base, during = row["legit_unloaded"]["p99_ms"], row["legit_during"]["p99_ms"]
    lost = sum(row["legit_during"]["errors"].values())
    freed = row["in_flight_after"] == 0 and row["fds_after"] <= row["fds_before"] + 4
    if row["attack"] in DEADLINED:
        held = row["fds_at_attack_end"] or 0
        freed = freed and row["attack_in_flight_at_end"] == 0 and held <= row["fds_before"] + 4
    return {
        "rss_ok": row["rss_growth_mb"] <= 64,
        "slots_freed": freed,
        "legit_p99_ok": bool(base and during and during <= 2 * base and not lost),
    }


def marks(verdict: dict[str, bool]) -> str:
    return " ".join("ok" if v else "MISS" for v in verdict.values())


def pair(legit: dict[str, Any]) -> str:
    return f"{legit['p50_ms']}/{legit['p99_ms']}"


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"{'attack':<10} {'RSS +MB':>8} {'fds peak/end/after':>19} {'in flight end/after':>20}"
            f" {'legit p50/p99 ms unloaded':>26} {'during':>16} {'legit errors':>13}"
            f"  targets (RSS, freed, legit)")  # fmt: skip
    lines = [head, "-" * len(head)]
    for r in rows:
        u, d = r["legit_unloaded"], r["legit_during"]
        fds = f"{r['fds_peak']}/{r['fds_at_attack_end']}/{r['fds_after']}"
        fl = f"{r['attack_in_flight_at_end']}/{r['in_flight_after']}"
        lines.append(
            f"{r['attack']:<10} {r['rss_growth_mb']:>8} {fds:>19} {fl:>20}"
            f" {pair(u):>26} {pair(d):>16}"
            f" {sum(d['errors'].values()):>13}  {marks(r['verdict'])}"
        )
    return "\n".join(lines)


@contextmanager
def fleet_served(fleet: Path, time_scale: float) -> Iterator[Path]:
    """Serve sim-1 and sim-2 in one process, sim-long in another; yield the fleet file.

    The long streams of ``nonreader`` cost their simulated server CPU (seconds for a 50,000
    token answer); in a process of their own they do not delay the legitimate requests.
    """
    served = ["--max-model-len", "1000000", "--endpoints"]
    with (
        procs.simulated_fleet(str(fleet), time_scale, [*served, "sim-1,sim-2"]) as (_, one, _),
        procs.simulated_fleet(str(one), time_scale, [*served, "sim-long"]) as (_, both, _),
    ):
        yield both


def run(a: argparse.Namespace) -> dict[str, Any]:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows = []
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        head_port, body_port = procs.free_port(), procs.free_port()
        fleet = tmp / "fleet.yaml"
        fleet.write_text(
            FLEET.replace("HEADPORT", str(head_port)).replace("BODYPORT", str(body_port))
        )
        evil_out = tmp / "evil.json"
        spec = f"{head_port}:{body_port}:{a.evil_cap_mb * MB}:{evil_out}"
        evil = procs.start([*procs.module("bench.gateway.abuse"), "--evil", spec], procs.SIM_CPU)
        try:
            with fleet_served(fleet, a.time_scale) as path:
                for name in [n for n in a.attacks.split(",") if n]:
                    row = measure(name, path, a, tmp, evil_out)
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        finally:
            procs.stop(evil)
        epp = measure_epp(a, tmp) if a.epp else None
        if epp is not None:
            print(json.dumps(epp), flush=True)
    return {
        "command": "python -m bench.gateway.abuse " + " ".join(sys.argv[1:]),
        "commit": _commit(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average": procs.load_average(),
        "settings": {k: v for k, v in vars(a).items() if k not in ("json", "legit", "evil")},
        "rows": rows,
        "epp": epp,
    }


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=procs.ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    dirty = subprocess.run(["git", "status", "--porcelain", "trafficmgr"], cwd=procs.ROOT,
                           capture_output=True, text=True, check=False)  # fmt: skip
    return done.stdout.strip() + ("+uncommitted" if dirty.stdout.strip() else "")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--attacks", default=",".join(ATTACKS), help="comma-separated, in order")
    p.add_argument("--hold", type=float, default=50.0, help="longest an attack lasts, s")
    p.add_argument("--baseline", type=float, default=8.0, help="unloaded legit phase, s")
    p.add_argument("--settle", type=float, default=3.0, help="wait after an attack, s")
    p.add_argument("--legit-rate", type=float, default=20.0, help="legit requests a second")
    p.add_argument("--time-scale", type=float, default=20.0, help="of the simulated servers")
    p.add_argument("--pipeline", type=int, default=200_000, help="pipelined GET /healthz")
    p.add_argument("--tokens", type=int, default=3_000, help="distinct 60 KB junk tokens")
    p.add_argument("--slow-heads", type=int, default=300)
    p.add_argument("--slow-bodies", type=int, default=100)
    p.add_argument("--evil-rounds", type=int, default=4, help="pairs of requests to the fake")
    p.add_argument("--evil-cap-mb", type=int, default=512, help="bytes per fake answer, MB")
    p.add_argument("--nonreaders", type=int, default=8)
    p.add_argument("--rss-guard-mb", type=int, default=6144, help="kill the gateway past it")
    p.add_argument("--stream-tokens", type=int, default=50_000)
    p.add_argument("--conns", type=int, default=12_000, help="idle connections to open")
    p.add_argument("--epp", action=argparse.BooleanOptionalAction, default=True,
                   help="also forge ext_proc streams at an endpoint picker")  # fmt: skip
    p.add_argument("--forged", type=int, default=200, help="forged streams of each kind")
    p.add_argument("--json", default=str(RESULTS), help="write the results here ('' : no)")
    p.add_argument("--legit", help=argparse.SUPPRESS)
    p.add_argument("--evil", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.legit:
        port, rate, seconds, out = a.legit.split(":", 3)
        return legit(int(port), float(rate), float(seconds), out)
    if a.evil:
        hp, bp, cap, out = a.evil.split(":", 3)
        asyncio.run(evil_server(int(hp), int(bp), int(cap), out))
        return 0
    unknown = {n for n in a.attacks.split(",") if n} - set(ATTACKS)
    if unknown:
        p.error(f"--attacks: unknown {sorted(unknown)}; choose from {', '.join(ATTACKS)}")
    result = run(a)
    print(table(result["rows"]))
    if result["epp"]:
        e = result["epp"]
        print(f"EPP, forged ext_proc streams {e['forged_streams']}: victim in plans "
              f"{e['victim_in_plans_before']} before, {e['victim_in_plans_after']} after; "
              f"ejected: {e['victim_ejected']}")  # fmt: skip
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        write_json(a.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
