"""Figures of the gateway's trace benchmarks: per-run summaries, the table, the verdict, a plot.

Kept apart from ``bench/gateway/traces.py`` (which runs the processes) so that a JSON result
can be summarised again without re-running anything, and so that both fault and trace
benchmarks read the load generator's records the same way. Busy share and its per-region
CoV reuse the simulator's own definitions (``trafficmgr.sim.metrics.region_balance``).
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from typing import Any

from trafficmgr.geoip import default_database_path
from trafficmgr.routing.estimator import service_rates
from trafficmgr.routing.types import Fleet
from trafficmgr.sim.metrics import percentile, region_balance
from trafficmgr.sim.traces import read_trace
from trafficmgr.sim.workload import MAX_OUTPUT_TOKENS, endpoint_capacity_rps

POOL_SIZE = 64
TARGETS = {"round_robin": 0.5, "vllm_best": 0.8, "cov": 0.15}


def ip_pools(countries: Sequence[str], size: int = POOL_SIZE) -> dict[str, list[str]]:
    """Return ``size`` IPv4 addresses per country, as the bundled GeoIP database places them."""
    import maxminddb

    found: dict[str, list[str]] = {c: [] for c in countries}
    with maxminddb.open_database(str(default_database_path())) as db:
        for network, record in db:
            if network.version != 4 or not isinstance(record, dict):
                continue
            country = (record.get("country") or {}).get("iso_code")
            if country in found and len(found[country]) < size:
                net = ipaddress.ip_network(network)
                found[country].append(str(net.network_address + 1))
                if all(len(v) >= size for v in found.values()):
                    break
    return found


def busy_shares(fleet: Fleet, result: dict[str, Any], time_scale: float) -> dict[str, float]:
    """Return each endpoint's busy share over the arrival window (module doc)."""
    model_s = result["window_s"] * time_scale
    out: dict[str, float] = {}
    for r in fleet.regions:
        for e in r.endpoints:
            rates = service_rates(fleet.gpu_profiles[e.gpu], e.gpus)
            before, after = result["counters_before"][e.name], result["counters_after"][e.name]
            prompt, hits, generated = (a - b for a, b in zip(after, before, strict=True))
            work = rates.work_s(max(0.0, prompt - hits), generated)
            out[e.name] = work / model_s if model_s > 0 else 0.0
    return out


def _ms(values: list[float], q: float) -> float | None:
    return round(percentile(sorted(values), q), 1) if values else None


def summarise(fleet: Fleet, base: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """Return one run's figures (latencies in model-time ms)."""
    scale = base["time_scale"] * 1000.0
    e2e, ttft, errors, violations = [], [], 0, 0
    kinds: dict[str, int] = {}
    for _country, allowed, status, t, total, region, _endpoint, error in result["requests"]:
        if allowed is not None and region is not None and region not in allowed:
            violations += 1
        if status != 200 or error is not None or total is None:
            errors += 1
            kind = f"{status}" if status != 200 else (error or "")[:40]
            kinds[kind] = kinds.get(kind, 0) + 1
            continue
        e2e.append(total * scale)
        ttft.append(t * scale if t is not None else total * scale)
    trace = read_trace(base["trace"]).requests
    mean_in = sum(r.input_tokens for r in trace) / len(trace)
    mean_out = sum(min(r.output_tokens, MAX_OUTPUT_TOKENS) for r in trace) / len(trace)
    capacity = endpoint_capacity_rps(fleet, mean_in, max(1.0, mean_out))
    util = busy_shares(fleet, result, base["time_scale"])
    region_of = {e.name: r.name for r in fleet.regions for e in r.endpoints}
    by_region, weighted = region_balance(util, region_of, capacity)
    covs = [
        v["cov"] for v in by_region.values() if v["cov"] is not None and not math.isnan(v["cov"])
    ]
    return {
        "requests": len(result["requests"]),
        "errors": errors,
        "error_kinds": kinds,
        "e2e_ms": {"p50": _ms(e2e, 0.5), "p99": _ms(e2e, 0.99)},
        "ttft_ms": {"p50": _ms(ttft, 0.5), "p99": _ms(ttft, 0.99)},
        "busy_share": {k: round(v, 4) for k, v in util.items()},
        "busy_by_region": by_region,
        "busy_cov_region_weighted": round(weighted, 4) if not math.isnan(weighted) else None,
        "busy_cov_region_max": round(max(covs), 4) if covs else None,
        "residency_violations": violations,
        "send_lag_s": round(result["send_lag_s"], 3),
        "send_lag_p99_s": round(result.get("send_lag_p99_s", 0.0), 3),
        "cpu_s": result.get("cpu_s", {}),
    }


def line(s: dict[str, Any]) -> str:
    return (
        f"  {s['trace']:<34} {s['target']:<34} p50 {s['e2e_ms']['p50']} p99 {s['e2e_ms']['p99']}"
        f" ttft p99 {s['ttft_ms']['p99']} cov {s['busy_cov_region_weighted']}"
        f"/{s['busy_cov_region_max']} err {s['errors']} {s['error_kinds'] or ''}"
        f" resid {s['residency_violations']} lag max/p99 {s['send_lag_s']}/{s['send_lag_p99_s']} s"
        f" cpu {s['cpu_s']} load {s['load_average']}"
    )


def _spread(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    lo, hi = min(got), max(got)
    mid = sorted(got)[len(got) // 2]
    return f"{mid:,.0f}" if lo == hi else f"{mid:,.0f} ({lo:,.0f}-{hi:,.0f})"


def _spread_f(values: list[float | None]) -> str:
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    mid = sorted(got)[len(got) // 2]
    return f"{mid:.3f}" if min(got) == max(got) else f"{mid:.3f} ({min(got):.3f}-{max(got):.3f})"


def grouped(runs: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        out.setdefault((r["trace"], r["target"]), []).append(r)
    return out


def table(runs: list[dict[str, Any]]) -> str:
    """Return the Markdown table: medians over repeats, (min-max) when repeated."""
    rows = [
        "| trace | target | e2e p50 ms | e2e p99 ms | TTFT p50 ms | TTFT p99 ms "
        "| busy CoV in region (weighted / max) | errors | residency violations |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for (trace, target), rs in grouped(runs).items():
        rows.append(
            f"| {trace} | {target} | {_spread([r['e2e_ms']['p50'] for r in rs])} "
            f"| {_spread([r['e2e_ms']['p99'] for r in rs])} "
            f"| {_spread([r['ttft_ms']['p50'] for r in rs])} "
            f"| {_spread([r['ttft_ms']['p99'] for r in rs])} "
            f"| {_spread_f([r['busy_cov_region_weighted'] for r in rs])} / "
            f"{_spread_f([r['busy_cov_region_max'] for r in rs])} "
            f"| {sum(r['errors'] for r in rs)} / {sum(r['requests'] for r in rs)} "
            f"| {sum(r['residency_violations'] for r in rs)} |"
        )
    return "\n".join(rows)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def verdict(runs: list[dict[str, Any]]) -> str:
    """Return ai_aware's P99 against round_robin and vLLM Router's best, CoV and residency."""
    groups = grouped(runs)
    out = []
    for trace in sorted({t for t, _ in groups}):
        p99 = {
            target: _median([r["e2e_ms"]["p99"] for r in rs if r["e2e_ms"]["p99"]])
            for (t, target), rs in groups.items()
            if t == trace and any(r["e2e_ms"]["p99"] for r in rs)
        }
        ai = p99.get("gateway:ai_aware")
        if ai is None:
            continue
        parts = [f"{trace}: ai_aware p99 {ai:,.0f} ms"]
        if "gateway:round_robin" in p99:
            ratio = ai / p99["gateway:round_robin"]
            parts.append(f"/ round_robin {ratio:.2f} (<= 0.5: {'ok' if ratio <= 0.5 else 'MISS'})")
        peers = {t: v for t, v in p99.items() if t.startswith("vllm-router:")}
        if peers:
            best = min(peers, key=lambda t: peers[t])
            ratio = ai / peers[best]
            mark = "ok" if ratio <= 0.8 else "MISS"
            parts.append(f"/ best vLLM Router ({best}) {ratio:.2f} (<= 0.8: {mark})")
        epp = p99.get("envoy-epp:ai_aware")
        if epp is not None:
            parts.append(f"Envoy + EPP ai_aware p99 {epp:,.0f} ms ({epp / ai:.2f} x the gateway's)")
        ai_runs = groups[(trace, "gateway:ai_aware")]
        cov = _median([r["busy_cov_region_max"] for r in ai_runs if r["busy_cov_region_max"]])
        parts.append(
            f"busy CoV max over regions {cov:.3f} (<= 0.15: {'ok' if cov <= 0.15 else 'MISS'})"
        )
        violations = sum(r["residency_violations"] for r in ai_runs)
        parts.append(f"residency violations {violations}")
        out.append(", ".join(parts))
    return "\n".join(out)


def plot(runs: list[dict[str, Any]], path: str) -> None:
    """Write the e2e latency CDFs and the busy share per endpoint, one row per trace."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = grouped(runs)
    traces = sorted({t for t, _ in groups})
    fig, axes = plt.subplots(len(traces), 2, figsize=(15, 4.5 * len(traces)), squeeze=False)
    for row, trace in enumerate(traces):
        cdf, bars = axes[row]
        mine = [(target, rs[0]) for (t, target), rs in groups.items() if t == trace]
        width = 0.8 / max(1, len(mine))
        for k, (target, r) in enumerate(mine):
            scale = r["time_scale"] * 1000.0
            e2e = sorted(x[4] * scale for x in r["raw"]["requests"] if x[4] is not None)
            if e2e:
                cdf.plot(e2e, [(i + 1) / len(e2e) for i in range(len(e2e))], label=target)
            names = list(r["busy_share"])
            xs = [i + k * width for i in range(len(names))]
            bars.bar(xs, [r["busy_share"][n] for n in names], width, label=target)
            bars.set_xticks([i + 0.4 for i in range(len(names))], names, rotation=60)
        cdf.set_xscale("log")
        cdf.set_xlabel("end-to-end latency, model-time ms")
        cdf.set_ylabel("share of requests")
        cdf.set_title(f"{trace}: latency CDF")
        cdf.legend(fontsize=8)
        bars.set_ylabel("busy share over the arrival window")
        bars.set_title(f"{trace}: busy share per endpoint (first repeat)")
        bars.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
