"""Balancing on real traces: the gateway's strategies against vLLM Router's policies.

Why: the simulator says what ``ai_aware`` is worth (README, "Routing policies on real
traces"); this says what the running gateway delivers over the same physics, next to the
best-known open router, on the same simulated servers and the same requests.

    .venv/bin/python -m bench.gateway.traces [--vllm-router PATH] [--repeats N]
        [--traces A,B] [--load 0.8] [--time-scales 0.25,0.5] [--limits 4000,2000]
        [--envoy-strategies ai_aware] [--no-envoy] [--json OUT] [--plot OUT.png]

Per trace (Azure code, Mooncake; ``--load`` of the fleet's capacity, as
``bench/engine/sim_policies.py`` scales it) and per target, a fresh set of simulated servers
(``examples/fleet.yaml``: 5 regions, 14 endpoints of H100/A100/L4; ``--time-scales`` and the
first ``--limits`` requests of each trace, so that a run takes a minute or two) and a fresh
router; then the load generator replays the trace from a process of its own
(``bench/gateway/loadgen.py``: prompts under the token rule, Mooncake's hash ids as shared
prefixes, ``max_tokens`` + ``ignore_eos``, clients from the fleet's mix in
``X-Forwarded-For``). Targets run interleaved, ``--repeats`` times.

- the gateway (one process), each strategy by ``x-trafficmgr-strategy``: it picks the region
  (residency, weights) and the endpoint, and may spill to the next region;
- Envoy + the EPP (``bench/epp/envoy.py``: Envoy from ``scripts/peers/envoy.sh`` over the
  generated bootstrap, ``python -m trafficmgr.epp`` over the same fleet file, loopback one
  trusted hop), each strategy of ``--envoy-strategies`` by the same header: the same
  request-path core as the gateway, behind Envoy's data path; its P99 is reported beside the
  gateway's (``--no-envoy`` leaves it out);
- vLLM Router, each policy: it balances inside one pool, so it gets one pool per region and
  model (the endpoints of that region serving that model: what the engine would allow), one
  router process per pool, and each client is sent to the pool of the region the engine's
  global choice gives it (``decision.region_candidates``, the gateway's own first choice).
  Same global split, so the comparison is of the in-region balancing; vLLM Router cannot
  spill over, and does not know the answer lengths (``max_tokens``) the gateway reads.

Latencies are in model time (real seconds times the time scale: what the simulated GPUs'
users would see). Busy share: each endpoint's work over the arrival window at its full-batch
rates (prefill tokens computed / prefill rate + tokens generated / decode rate, from its
``/metrics`` counters), as the simulator's utilisation; its CoV per region is weighted by
capacity as ``util_cov_region`` is. Residency violations: answers from a region the client's
strict rule forbids (the gateway's ``x-trafficmgr-region``; a router's pool region).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.epp import envoy as envoy_epp
from bench.gateway import procs, report
from bench.suite import write_json
from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.routing.types import Fleet

DATA = procs.ROOT.parent / "shared" / "data" / "traces"
TRACES = (
    str(DATA / "AzureLLMInferenceTrace_code.csv"),
    str(DATA / "mooncake_synthetic_trace.jsonl"),
)


def pools(fleet: Fleet, addresses: dict[str, str]) -> dict[str, list[str]]:
    """Return vLLM Router's pools: per (region, model), that region's endpoints serving it."""
    out: dict[str, list[str]] = {}
    for r in fleet.regions:
        for model in sorted({m for e in r.endpoints for m in e.models}):
            out[f"{r.name}|{model}"] = [addresses[e.name] for e in r.endpoints if model in e.models]
    return out


def run_loadgen(spec: dict[str, Any], tmp: Path, pids: dict[str, list[int]]) -> dict[str, Any]:
    """Run the load generator; add the CPU seconds each side used meanwhile."""
    path, out = tmp / "spec.json", tmp / "result.json"
    spec = {**spec, "out": str(out), "token": procs.TOKEN}
    path.write_text(json.dumps(spec))
    cmd = [*procs.module("bench.gateway.loadgen"), str(path)]
    before = {k: sum(procs.cpu_seconds(p) for p in v) for k, v in pids.items()}
    subprocess.run(procs.pinned(cmd, procs.SIM_CPU), cwd=procs.ROOT, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    result["cpu_s"] = {
        k: round(sum(procs.cpu_seconds(p) for p in v) - before[k], 2) for k, v in pids.items()
    }
    return result


def one_run(target: str, base: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """Serve the fleet afresh, put the target in front, replay the trace through it."""
    kind, _, name = target.partition(":")
    with (
        procs.simulated_fleet(args.fleet, base["time_scale"], args.sim_args) as sim,
        tempfile.TemporaryDirectory() as tmp,
    ):
        fleet, path, where = sim
        spec = {**base, "fleet": str(path), "endpoints": where}
        sim_pid = procs.simserver_pid(where)
        if kind == "gateway":
            with procs.gateway(path) as (port, proc):
                spec |= {"mode": "gateway", "strategy": name,
                         "url": f"http://127.0.0.1:{port}/v1/chat/completions"}  # fmt: skip
                return run_loadgen(spec, Path(tmp), {"router": [proc.pid], "sim": sim_pid})
        if kind == "envoy-epp":
            assert args.envoy is not None
            with envoy_epp.envoy_epp(
                path, args.envoy, trusted_proxies=("127.0.0.0/8",), timeout_s=1800
            ) as pair:
                spec |= {"mode": "gateway", "strategy": name,
                         "url": f"http://127.0.0.1:{pair.port}/v1/chat/completions"}  # fmt: skip
                return run_loadgen(spec, Path(tmp), {"router": pair.pids, "sim": sim_pid})
        binary = procs.router_binary(args.vllm_router)
        assert binary is not None
        with procs.vllm_routers(binary, pools(fleet, where), name) as (ports, routers):
            urls = {k: f"http://127.0.0.1:{p}/v1/chat/completions" for k, p in ports.items()}
            spec |= {"mode": "router", "routers": urls}
            pids = {"router": [r.pid for r in routers], "sim": sim_pid}
            return run_loadgen(spec, Path(tmp), pids)


def targets(args: argparse.Namespace) -> list[str]:
    out = [f"gateway:{s}" for s in args.strategies.split(",") if s]
    if args.envoy:
        out += [f"envoy-epp:{s}" for s in args.envoy_strategies.split(",") if s]
    if procs.router_binary(args.vllm_router):
        out += [f"vllm-router:{p}" for p in args.policies.split(",") if p]
    else:
        print("vLLM Router not found (scripts/peers/vllm_router.sh installs it): gateway only")
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--fleet", default=str(procs.ROOT / "examples" / "fleet.yaml"))
    p.add_argument("--traces", default=",".join(TRACES))
    p.add_argument("--time-scales", default="0.25,0.5", help="per trace, model s per real s")
    p.add_argument("--load", type=float, default=0.8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--limits", default="4000,2000", help="per trace, only its first N requests (0: all)"
    )
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--strategies", default="round_robin,least_outstanding_work,ai_aware")
    p.add_argument("--policies", default="power_of_two,cache_aware")
    p.add_argument("--vllm-router", help="vllm-router binary (default: PATH, then var/)")
    p.add_argument("--envoy-strategies", default="ai_aware", help="through Envoy + the EPP")
    p.add_argument("--no-envoy", action="store_true", help="leave Envoy + the EPP out")
    p.add_argument("--json", default="bench/out/gateway_traces.json")
    p.add_argument("--plot", default="bench/out/gateway_traces.png")
    args = p.parse_args(argv)
    args.sim_args = ["--max-model-len", "262144", "--seed", str(args.seed)]
    args.envoy = None if args.no_envoy else envoy_epp.envoy_binary()
    if args.envoy is None and not args.no_envoy:
        print("Envoy not found (scripts/peers/envoy.sh installs it): no Envoy + EPP target")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fleet = load_fleet_file(args.fleet)
    ip_pools = report.ip_pools(sorted({c.country for c in fleet.clients}))
    scales = [float(x) for x in args.time_scales.split(",")]
    limits = [int(x) for x in args.limits.split(",")]
    doc: dict[str, Any] = {"load": args.load, "seed": args.seed, "runs": []}
    for i, trace in enumerate(t for t in args.traces.split(",") if t):
        scale = scales[min(i, len(scales) - 1)]
        base = {"trace": trace, "load": args.load, "seed": args.seed, "time_scale": scale,
                "limit": limits[min(i, len(limits) - 1)], "ip_pools": ip_pools}  # fmt: skip
        for repeat in range(args.repeats):
            for target in targets(args):
                load_before = procs.load_average()
                result = one_run(target, base, args)
                summary = report.summarise(fleet, base, result)
                summary |= {"trace": Path(trace).name, "target": target, "repeat": repeat,
                            "time_scale": scale, "load_average": [load_before,
                            procs.load_average()]}  # fmt: skip
                print(report.line(summary), flush=True)
                doc["runs"].append({**summary, "raw": result})
                Path(args.json).parent.mkdir(parents=True, exist_ok=True)
                write_json(args.json, doc, indent=None)  # after every run: partial results
    print(report.table(doc["runs"]))
    print(report.verdict(doc["runs"]))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    write_json(args.json, doc, indent=None)
    report.plot(doc["runs"], args.plot)
    print(f"wrote {args.json} and {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
