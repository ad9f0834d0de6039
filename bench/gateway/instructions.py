"""Instructions per proxied request, counted by callgrind: the gateway against vLLM Router.

The CPU time a router spends per request moves from run to run on a shared machine, and a
router that idles between requests pays for caches gone cold (``bench/gateway/core.py``):
``bench/gateway/overhead.py``'s ratios spread by ±0.1 between rounds. The instructions a
request executes do neither: ``valgrind --tool=callgrind`` counts them, the same on every run
to a fraction of a percent, whatever else the machine is doing. They measure work, not time
(a cache miss costs no instruction), so this is the figure to compare two versions of the
code by, and the ratio to vLLM Router says how much of the CPU gap is work.

Method: a router serves the simulated servers of ``bench/gateway/overhead.py`` under
callgrind for the same time twice, once sent ``N1`` and once ``N2`` requests (open loop, the
non-streaming chat request of that bench, the load generator outside valgrind); start-up and
idle work are the same in both runs, so ``(I(N2) - I(N1)) / (N2 - N1)`` is what one request
costs. Valgrind runs a program some 50 times slower, hence the low rates.

``--strategies`` measures the gateway once per picker (``round_robin`` next to ``ai_aware``
shows what the cost-based pick adds to a request); ``--policies`` likewise vLLM Router;
``--compiled`` adds the gateway on the compiled build (``scripts/build_compiled.py``: the hot
modules through mypyc), per picker. ``--http-servers own,uvicorn`` counts the gateway on each
HTTP server it runs on (``--http-server``: its own, or uvicorn), per picker.

    .venv/bin/python -m bench.gateway.instructions [--vllm-router PATH] [--requests 40,400]
        [--seconds 20] [--strategies ai_aware,round_robin] [--policies power_of_two] [--compiled]
        [--http-servers own,uvicorn] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.gateway.overhead import (
    ROOT,
    TOKEN,
    compiled_env,
    free_port,
    run_loadgen,
    simulated_servers,
    wait_ready,
)
from bench.suite import write_json

COLLECTED = re.compile(rb"Collected : (\d+)")


Target = tuple[str, str, dict[str, str] | None]  # router, picker or policy, environment


def instructions(
    target: Target, requests: int, seconds: float, fleet: Path,
    sim_ports: tuple[int, int], args: argparse.Namespace,
) -> int:  # fmt: skip
    """Return the instructions the router executed in a run sent ``requests`` requests."""
    port = free_port()
    router, policy, env = target
    if router == "trafficmgr":
        strategy, *variant = policy.split(", ")  # e.g. "ai_aware, uvicorn, compiled"
        server = "uvicorn" if "uvicorn" in variant else "own"
        cmd = [sys.executable, "-m", "trafficmgr.gateway", "--fleet", str(fleet),
               "--listen", f"127.0.0.1:{port}", "--token", TOKEN,
               "--strategy", strategy, "--http-server", server]  # fmt: skip
        ready = "/healthz"
    else:
        cmd = [args.vllm_router, "--host", "127.0.0.1", "--port", str(port),
               "--policy", policy, "--log-level", "error",
               "--worker-urls", *(f"http://127.0.0.1:{p}" for p in sim_ports),
               "--prometheus-port", str(free_port())]  # fmt: skip
        ready = "/health"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "callgrind.out"
        proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env={**os.environ, **env} if env else None,
        )
        try:
            wait_ready(port, ready, timeout=300)
            time.sleep(1.0)
            url = f"http://127.0.0.1:{port}/v1/chat/completions"
            result = run_loadgen(url, requests / seconds, seconds, 0)
            if result["errors"]:
                raise RuntimeError(f"{router}: {result['errors']} requests failed")
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=600)
    counts = [int(n) for n in COLLECTED.findall(err)]
    if not counts:
        raise RuntimeError(f"{router}: callgrind reported no count:\n{err.decode()[-2000:]}")
    return sum(counts)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--requests", default="40,400", help="N1,N2: requests in the two runs")
    p.add_argument("--seconds", type=float, default=20.0, help="length of each run")
    p.add_argument("--vllm-router", help="path of the vllm-router binary (default: on PATH)")
    p.add_argument("--strategies", default="ai_aware,round_robin", help="the gateway's pickers")
    p.add_argument("--policies", default="power_of_two", help="vLLM Router's policies")
    p.add_argument(
        "--compiled",
        action="store_true",
        help="also count the gateway on the compiled build (scripts/build_compiled.py)",
    )
    p.add_argument(
        "--http-servers", default="own", help="the gateway's HTTP servers: own, uvicorn or both"
    )
    p.add_argument("--json", help="write the figures as JSON here")
    args = p.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    n1, n2 = (int(n) for n in args.requests.split(","))
    installed = ROOT / "var" / "vllm-router-venv" / "bin" / "vllm-router"
    args.vllm_router = (
        args.vllm_router
        or shutil.which("vllm-router")
        or (str(installed) if installed.exists() else None)
    )
    servers = [s for s in args.http_servers.split(",") if s]
    if set(servers) - {"own", "uvicorn"}:
        print(f"--http-servers: own or uvicorn, got {args.http_servers!r}", file=sys.stderr)
        return 2
    # a picker on each server: "ai_aware" (the own server), "ai_aware, uvicorn"
    strategies = [
        s if server == "own" else f"{s}, {server}"
        for server in servers
        for s in args.strategies.split(",")
        if s
    ]
    targets: list[Target] = [("trafficmgr", s, None) for s in strategies]
    if args.compiled:
        env = compiled_env()
        targets += [("trafficmgr", f"{s}, compiled", env) for s in strategies]
    if args.vllm_router:
        targets += [("vllm-router", p, None) for p in args.policies.split(",") if p]
    rows: list[dict[str, Any]] = []
    with simulated_servers() as (sim_ports, fleet):
        for target in targets:
            name = f"{target[0]} ({target[1]})"
            counts = []
            for n in (n1, n2):
                print(f"  {name}: {n} requests under callgrind ...", file=sys.stderr)
                counts.append(instructions(target, n, args.seconds, fleet, sim_ports, args))
            rows.append(
                {"target": name, "runs": dict(zip((n1, n2), counts, strict=True)),
                 "per_request": (counts[1] - counts[0]) / (n2 - n1)}
            )  # fmt: skip
    first = rows[0]["per_request"]
    print(f"{'target':<30} {'instructions per request':>25} {'/ the first':>12}")
    for row in rows:
        print(
            f"{row['target']:<30} {row['per_request']:>25,.0f} {row['per_request'] / first:>11.2f}x"
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
