"""The README and docs cite committed figures, render them from bench/results, and link true."""

from __future__ import annotations

import importlib.util
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
RESULT_PATH = re.compile(r"bench/results/[\w./-]+\.json")


def _render() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render", ROOT / "bench/results/render.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("doc", [ROOT / "README.md", ROOT / "docs" / "figures.md"], ids=_name)
def test_figures_table_is_what_the_renderer_prints(doc: Path) -> None:
    render = _render()
    expected = render.targets(render.load())[doc]
    held = render.between_markers(doc.read_text(encoding="utf-8"), doc.name)
    assert held == expected, f"run: python bench/results/render.py --write ({_name(doc)})"


def test_readme_table_is_short_with_one_file_per_row() -> None:
    render = _render()
    rows = render.readme_table(render.load()).splitlines()[2:]
    assert 1 <= len(rows) <= 10
    assert all(row.count("](bench/results/") == 1 for row in rows)


def test_every_figure_file_names_a_commit_and_a_date() -> None:
    for name, fig in _render().load().items():
        assert re.fullmatch(r"[0-9a-f]{7,40}", fig["commit"]), name
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", fig["date"]), name
        raw = fig.get("raw")
        assert raw is None or (ROOT / raw).is_file(), f"{name}: raw file {raw} missing"


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_cited_result_files_exist(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for cited in RESULT_PATH.findall(text):
        assert (ROOT / cited).is_file(), f"{_name(doc)} cites {cited}, which is not committed"


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_no_evidence_in_ignored_bench_out(doc: Path) -> None:
    # bench/out/ is git-ignored: a figure cited from there cannot be opened by a reader.
    assert "bench/out/" not in doc.read_text(encoding="utf-8"), _name(doc)


@pytest.mark.parametrize("doc", DOCS, ids=_name)
def test_relative_links_resolve(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if not (doc.parent / path).exists():
            broken.append(target)
    assert broken == [], f"{_name(doc)}: broken links {broken}"


def test_results_are_committed_not_ignored() -> None:
    files = [str(p.relative_to(ROOT)) for p in (ROOT / "bench/results").glob("*.json")]
    ignored = subprocess.run(
        ["git", "check-ignore", *files], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    assert ignored == []
