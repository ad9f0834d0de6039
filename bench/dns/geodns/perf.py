"""Run dnsperf and read its report."""

from __future__ import annotations

import contextlib
import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

IN_FLIGHT = 100
CLIENTS = 4  # source ports: with one, SO_REUSEPORT would send everything to one worker


@dataclass
class PerfResult:
    qps: float
    sent: int
    completed: int
    lost: int
    mean_ms: float
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    command: str = ""


def run_dnsperf(
    port: int,
    data: Path,
    seconds: float,
    max_qps: float = 0,
    latencies: bool = False,
    host: str = "127.0.0.1",
    in_flight: int = IN_FLIGHT,
    passes: int = 0,
) -> PerfResult:
    """Run dnsperf over the binary query file ``data``.

    Without ``latencies`` dnsperf reports only the mean latency; with it, it prints every
    answer's latency (``-v``), which gives percentiles but costs dnsperf CPU, so the
    throughput runs go without it. ``passes`` > 0 stops after that many passes through the
    file instead of after ``seconds``.
    """
    args = ["dnsperf", "-s", host, "-p", str(port), "-B", "-d", str(data)]
    args += ["-n", str(passes)] if passes else ["-l", f"{seconds:g}"]
    args += ["-c", str(CLIENTS), "-q", str(in_flight), "-t", "2"]
    if max_qps:
        args += ["-Q", str(int(max_qps))]
    if latencies:
        args.append("-v")
    done = subprocess.run(args, capture_output=True, text=True, errors="replace", check=True)
    text = done.stdout + done.stderr
    result = PerfResult(
        qps=_stat(text, "Queries per second"),
        sent=int(_stat(text, "Queries sent")),
        completed=int(_stat(text, "Queries completed")),
        lost=int(_stat(text, "Queries lost")),
        mean_ms=_stat(text, "Average Latency \\(s\\)") * 1000,
        command=" ".join(args),
    )
    found = [float(m) for m in re.findall(r"^> \S+ binary input (\S+)$", text, re.M)]
    if len(found) >= 100:
        cuts = statistics.quantiles(found, n=100)
        result.p50_ms, result.p99_ms = cuts[49] * 1000, cuts[98] * 1000
    return result


def run_queue_wait_s(pid: int) -> float:
    """Return the seconds a process and its children have spent runnable but not running.

    The kernel's ``schedstat`` (second field, per thread): while a server waits there for a
    core, datagrams queue up whatever the server does, so this tells a latency run whose
    tail is the machine's (dnsperf and other work on the same cores) from one whose tail is
    the server's own.
    """
    return _schedstat(pid, 1)


def run_cpu_s(pid: int) -> float:
    """Return the seconds of CPU a process and its children have used (``schedstat``, first)."""
    return _schedstat(pid, 0)


def _schedstat(pid: int, field: int) -> float:
    total = 0
    pids = [pid]
    for task in _tasks(pid):
        with contextlib.suppress(OSError):
            pids += [int(c) for c in Path(f"{task}/children").read_text().split()]
    for one in pids:
        for task in _tasks(one):
            with contextlib.suppress(OSError, IndexError, ValueError):
                total += int(Path(f"{task}/schedstat").read_text().split()[field])
    return total / 1e9


def _tasks(pid: int) -> list[Path]:
    try:
        return list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []


def _stat(text: str, label: str) -> float:
    found = re.search(rf"{label}:\s+([\d.]+)", text)
    return float(found.group(1)) if found else float("nan")
