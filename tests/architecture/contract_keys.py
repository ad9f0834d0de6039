"""The cross-process contract, kept in fact: no ``trafficmgr:`` key is spelled outside it.

``trafficmgr/contracts.py`` names every Redis key and cache key that more than one process
reads. A key spelled again elsewhere (``"trafficmgr:table"`` beside an import of the
contract, an f-string building ``trafficmgr:drill-alive:…`` in a feature) drifts the day
one of the two changes; this walk finds every string literal, f-strings included, that
starts with ``trafficmgr:`` followed by a key character, in the product, the benchmarks and
the tests, and names each one outside the contract.

``python -m tests.architecture.contract_keys`` prints them and exits non-zero when any is
found (``make lint`` runs it); ``test_contract_keys`` fails the same way.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("trafficmgr", "regions", "dashboard", "agents", "bench", "tests")
CONTRACT = ROOT / "trafficmgr" / "contracts.py"
# ``trafficmgr:`` then a key character: a message such as "trafficmgr: SECRET_KEY ..." is not
# a key
KEY = re.compile(r"^trafficmgr:[A-Za-z0-9{_-]")
# ... and the project's container image (``trafficmgr:latest``) is an image reference, not a key
IMAGE = re.compile(r"^trafficmgr:latest\b")


def literal_starts(node: ast.AST) -> Iterator[tuple[int, str]]:
    """Yield (line, text) of each string literal in ``node`` that could begin a key."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            yield sub.lineno, sub.value
        elif isinstance(sub, ast.JoinedStr) and sub.values:
            first = sub.values[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield sub.lineno, first.value + ("{" if len(sub.values) > 1 else "")


def spelled_keys(path: Path) -> list[tuple[int, str]]:
    """Return the ``trafficmgr:`` key literals in one source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    by_line = {
        line: text
        for line, text in literal_starts(tree)
        if KEY.match(text) and not IMAGE.match(text)
    }
    return sorted(by_line.items())


def violations(root: Path = ROOT) -> list[str]:
    """Return ``path:line: literal`` for every key spelled outside the contract."""
    found = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            if path.resolve() == CONTRACT or path.resolve() == Path(__file__).resolve():
                continue
            for line, text in spelled_keys(path):
                found.append(f"{path.relative_to(root)}:{line}: {text!r}")
    return found


def main() -> int:
    found = violations()
    for line in found:
        print(f"key spelled outside trafficmgr/contracts.py: {line}")
    if not found:
        print("contract keys: every trafficmgr: key is named in trafficmgr/contracts.py")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
