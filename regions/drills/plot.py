"""Draw a drill's timeline as a PNG, from its report alone (so remote reports plot too).

Top: the target region's share of the traffic in each published table. Bottom: what each
vantage point was answered, DNS (thick) and the route API (thin), coloured by region. Lines
mark the injection, the fault, its detection, the restore and the recovery.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

MARKS = (
    ("injected", "injected", "#999999", ":"),
    ("fault", "fault", "#d62728", "-"),
    ("detected", "detected", "#ff7f0e", "--"),
    ("restored", "restored", "#1f77b4", "-."),
    ("recovered", "recovered", "#2ca02c", "--"),
)
STATE_COLOURS = {"down": "#f4c7c3", "recovering": "#fde5c7", "degraded": "#fff3b0"}
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3")


def _segments(points: Sequence[Sequence[Any]], end: float) -> list[tuple[float, float, str]]:
    out = []
    for i, (at, label) in enumerate(points):
        until = points[i + 1][0] if i + 1 < len(points) else end
        out.append((float(at), float(until) - float(at), str(label)))
    return out


def _colour(label: str, colours: dict[str, str]) -> str:
    if label.startswith("!"):
        return "#222222"
    if label == "-":
        return "#dddddd"
    if label not in colours:
        colours[label] = PALETTE[len(colours) % len(PALETTE)]
    return colours[label]


def plot_report(report: Mapping[str, Any], path: str | Path) -> Path:
    """Write the PNG of a report's timeline to ``path``; return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    timeline = report.get("timeline") or {}
    marks = timeline.get("marks") or {}
    end = float(marks.get("end") or 1.0)
    start = min(float(marks.get("injected") or 0.0), 0.0) - 2.0
    dns = timeline.get("dns") or {}
    route = timeline.get("route") or {}
    names = list(dns) or list(route)
    fig, (top, bottom) = plt.subplots(
        2,
        1,
        figsize=(11, 3 + 0.5 * max(3, len(names))),
        sharex=True,
        gridspec_kw={"height_ratios": [1, 1.6]},
    )
    share = timeline.get("share") or []
    if share:
        xs = [float(p[0]) for p in share] + [end]
        ys = [float(p[1][0]) for p in share]
        top.step(xs, [*ys, ys[-1]], where="post", color="#333333")
        for at, width, label in _segments([(p[0], p[1][1]) for p in share], end):
            if label in STATE_COLOURS:
                top.axvspan(at, at + width, color=STATE_COLOURS[label], zorder=0)
    top.set_ylabel(f"{report.get('region', report.get('target'))} share")
    top.set_ylim(-0.05, 1.05)
    colours: dict[str, str] = {}
    for row, name in enumerate(names):
        for at, width, label in _segments(dns.get(name, []), end):
            bottom.broken_barh([(at, width)], (row - 0.3, 0.4), color=_colour(label, colours))
        for at, width, label in _segments(route.get(name, []), end):
            bottom.broken_barh([(at, width)], (row + 0.15, 0.15), color=_colour(label, colours))
    bottom.set_yticks(range(len(names)), names)
    bottom.set_ylim(-0.6, max(1, len(names)) - 0.4)
    bottom.set_xlabel("seconds after the fault (DNS: thick bars, route API: thin bars)")
    for axis in (top, bottom):
        for key, text, colour, style in MARKS:
            if marks.get(key) is not None:
                axis.axvline(float(marks[key]), color=colour, linestyle=style, linewidth=1.2)
                if axis is top:
                    axis.annotate(
                        text,
                        (float(marks[key]), 1.02),
                        fontsize=8,
                        color=colour,
                        rotation=90,
                        va="bottom",
                        ha="right",
                    )
        axis.set_xlim(start, end + 0.5)
    legend = [Patch(color=c, label=label) for label, c in colours.items()]
    legend.append(Patch(color="#222222", label="error"))
    bottom.legend(handles=legend, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    states = [Patch(color=c, label=s) for s, c in STATE_COLOURS.items()]
    top.legend(handles=states, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)

    def figure(key: str) -> str:
        value = report.get(key)
        return "—" if value is None else f"{value:.2f} s"

    fig.suptitle(
        f"{report.get('kind')} on {report.get('target')}: {report.get('verdict')} — detected "
        f"{figure('detected_after_s')}, DNS moved {figure('dns_changed_after_s_max')}, "
        f"recovered {figure('recovered_after_s')}",
        fontsize=11,
    )
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
