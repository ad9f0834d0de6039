"""PNG of a simulation: latency CDF per policy, and per-endpoint utilisation per policy."""

from __future__ import annotations

import math
from collections.abc import Mapping

from trafficmgr.sim.des import DONE, Outcome


def write_plot(outcomes: Mapping[str, Outcome], path: str) -> None:
    """Write the figure to ``path`` (matplotlib's Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(14, 5.5))
    for name, outcome in outcomes.items():
        values = sorted(
            outcome.latency_s[i] * 1000.0
            for i, s in enumerate(outcome.status)
            if s == DONE and not math.isnan(outcome.latency_s[i])
        )
        if values:
            n = len(values)
            cdf.plot(values, [(k + 1) / n for k in range(n)], label=name, linewidth=1.4)
    cdf.set_xscale("log")
    cdf.set_xlabel("latency, ms (log scale; RTT included)")
    cdf.set_ylabel("share of completed requests")
    cdf.set_title("Latency CDF per policy")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(loc="lower right", fontsize="small")
    endpoints = sorted({e for o in outcomes.values() for e in o.utilisation})
    width = 0.8 / max(1, len(outcomes))
    for k, (name, outcome) in enumerate(outcomes.items()):
        xs = [i + k * width for i in range(len(endpoints))]
        bars.bar(xs, [outcome.utilisation.get(e, 0.0) for e in endpoints], width, label=name)
    bars.set_xticks([i + 0.4 - width / 2 for i in range(len(endpoints))])
    bars.set_xticklabels(endpoints, rotation=60, ha="right", fontsize="small")
    bars.set_ylabel("utilisation (share of full-batch capacity)")
    bars.set_title("Per-endpoint utilisation over the arrival window")
    bars.grid(True, axis="y", alpha=0.3)
    bars.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
