"""Render the figures tables of README.md and docs/figures.md from bench/results/*.json.

Each figure is one small JSON file here with `figure`, `value`, `target`, `date`, `commit`,
`command`, `machine` and `source` (and optionally `readme`: its row number in the README's
table, `area`, `raw`: a fuller result file, `details`). Files without a `figure` key are raw
results that a figure file points at.

    python bench/results/render.py            # print the README table
    python bench/results/render.py --index    # print the docs/figures.md table
    python bench/results/render.py --write    # rewrite both tables in place
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent
ROOT = RESULTS.parent.parent
REQUIRED = ("figure", "value", "target", "date", "commit", "command", "machine", "source")
BEGIN = "<!-- figures:begin (bench/results/render.py --write) -->"
END = "<!-- figures:end -->"
AREAS = ("engine", "control plane", "DNS", "simulator", "gateway", "EPP")


def load(results: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """Return the figure files by file name, checking each has every required key."""
    figures: dict[str, dict[str, Any]] = {}
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "figure" not in data:
            continue
        missing = [key for key in REQUIRED if not isinstance(data.get(key), str)]
        if missing:
            raise ValueError(f"{path.name}: missing or not a string: {', '.join(missing)}")
        figures[path.name] = data
    return figures


def _cell(text: str) -> str:
    """Keep a value inside one Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _row(name: str, fig: dict[str, Any], prefix: str) -> str:
    """Return one figure's row: what, value (linking its file), target, date, commit, command."""
    cells = (
        _cell(fig["figure"]),
        f"[{_cell(fig['value'])}]({prefix}{name})",
        _cell(fig["target"]),
        fig["date"],
        f"`{fig['commit']}`",
        f"`{_cell(fig['command'])}`",
    )
    return "| " + " | ".join(cells) + " |"


HEADER = "| what | figure | target | measured | commit | command |"


def readme_table(figures: dict[str, dict[str, Any]]) -> str:
    """Return the README's table: the figures with a `readme` row number, in that order."""
    rows = {n: f["readme"] for n, f in figures.items() if isinstance(f.get("readme"), int)}
    chosen = sorted((row, name) for name, row in rows.items())
    lines = [HEADER, "|---|---|---|---|---|---|"]
    lines += [_row(name, figures[name], "bench/results/") for _, name in chosen]
    return "\n".join(lines)


def index_table(figures: dict[str, dict[str, Any]]) -> str:
    """Return docs/figures.md's table: every figure by area, with its command."""

    def key(name: str) -> tuple[int, str]:
        area = figures[name].get("area", "")
        return (AREAS.index(area) if area in AREAS else len(AREAS), name)

    lines = ["| area " + HEADER, "|---|---|---|---|---|---|---|"]
    for name in sorted(figures, key=key):
        row = _row(name, figures[name], "../bench/results/")
        lines.append(f"| {figures[name].get('area', '')} {row}")
    return "\n".join(lines)


def splice(text: str, table: str, where: str) -> str:
    """Return text with the part between the figure markers replaced by table."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{where}: no {BEGIN!r} ... {END!r} markers")
    return text[: start + len(BEGIN)] + "\n" + table + "\n" + text[end:]


def between_markers(text: str, where: str) -> str:
    """Return what stands between the figure markers of text."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{where}: no {BEGIN!r} ... {END!r} markers")
    return text[start + len(BEGIN) : end].strip("\n")


def targets(figures: dict[str, dict[str, Any]]) -> dict[Path, str]:
    """Return each document with the table it should hold."""
    return {
        ROOT / "README.md": readme_table(figures),
        ROOT / "docs" / "figures.md": index_table(figures),
    }


def main(argv: list[str] | None = None) -> int:
    """Print or write the figures tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", action="store_true", help="print docs/figures.md's table")
    parser.add_argument("--write", action="store_true", help="rewrite both tables in place")
    args = parser.parse_args(argv)
    figures = load()
    if args.write:
        # Splice every document before writing any, so a missing marker changes nothing.
        texts = {
            p: splice(p.read_text(encoding="utf-8"), t, p.name) for p, t in targets(figures).items()
        }
        for path, text in texts.items():
            path.write_text(text, encoding="utf-8")
        return 0
    print(index_table(figures) if args.index else readme_table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
