"""Build the request path's hot modules with mypyc and print the build's source directory.

    python scripts/build_compiled.py [--modules] [--mypyc CMD] [--out DIR]

The modules are listed in ``pyproject.toml`` under ``[tool.trafficmgr.compiled]`` (the picker
modules all together: an interpreted class may not subclass a compiled one). The build is a
copy of the ``trafficmgr`` package in ``var/compiled/src`` with those modules as C extensions
beside their sources: the development tree stays pure Python (an extension module next to
its ``.py`` would shadow later edits), and the copy is rebuilt only when a source file, the
list or mypy changed (a hash of them is kept beside it). Run from it with Python's safe path,
so the checkout's sources do not come first::

    PYTHONSAFEPATH=1 PYTHONPATH=$(.venv/bin/python scripts/build_compiled.py) \\
        .venv/bin/python -m trafficmgr.gateway ...

``--modules`` prints the list and builds nothing. The Dockerfile's ``compiled`` stage runs
the same build; ``tests/requestpath/test_compiled_build.py`` runs the engine's, the core's,
the simulator's and the gateway's tests against it. Needs a C compiler and mypy (the
project's dev extra); ``MYPYC`` and ``COMPILED_DIR`` are the defaults of ``--mypyc`` and
``--out``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "trafficmgr"


def listed_modules(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """Return the module paths ``[tool.trafficmgr.compiled] modules`` lists."""
    with pyproject.open("rb") as handle:
        table = tomllib.load(handle).get("tool", {}).get("trafficmgr", {}).get("compiled", {})
    modules = table.get("modules")
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise SystemExit(f"{pyproject}: [tool.trafficmgr.compiled] modules: a list of paths")
    missing = [m for m in modules if not (ROOT / m).is_file()]
    if missing:
        raise SystemExit(f"{pyproject}: [tool.trafficmgr.compiled] modules: no file {missing}")
    return modules


def source_hash(modules: list[str], mypyc: Path) -> str:
    """Hash what the build depends on: the list, mypy's version and every package source."""
    digest = hashlib.sha256("\n".join(modules).encode())
    mypy = mypyc.parent / "mypy"
    if mypy.exists():
        version = subprocess.run([mypy, "--version"], capture_output=True, text=True, check=False)
        digest.update(version.stdout.encode())
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def build(modules: list[str], mypyc: Path, out: Path) -> Path:
    """Build ``modules`` into ``out/src`` unless the build there is current; return it."""
    stamp = out / "source-hash"
    wanted = source_hash(modules, mypyc)
    if stamp.is_file() and stamp.read_text().strip() == wanted:
        return out / "src"
    # built aside and renamed into place: a benchmark or test reading ``out`` meanwhile, or a
    # second build started at the same time, never sees a half-built copy
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _compile(modules, mypyc, staging, out.with_name(f"{out.name}-failed.log"))
        (staging / "source-hash").write_text(wanted + "\n")
        old = out.with_name(f".{out.name}-old-{os.getpid()}")
        if out.exists():
            out.rename(old)
        staging.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out / "src"


def _compile(modules: list[str], mypyc: Path, into: Path, failed_log: Path) -> None:
    """Copy the package into ``into/src`` and compile ``modules`` there; keep a failure's log."""
    src = into / "src"
    shutil.copytree(
        ROOT / PACKAGE, src / PACKAGE, ignore=shutil.ignore_patterns("__pycache__", "*.so")
    )
    log = into / "build.log"
    # mypyc builds with setuptools in the current directory: one without the project's files
    with log.open("w") as handle:
        done = subprocess.run([mypyc, *modules], cwd=src, stdout=handle, stderr=handle)
    if done.returncode != 0:
        shutil.copyfile(log, failed_log)
        sys.stderr.write("".join(log.read_text().splitlines(keepends=True)[-40:]))
        raise SystemExit(f"mypyc failed: {failed_log}")
    shutil.rmtree(src / "build", ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Print the module list, or build and print the build's source directory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", action="store_true", help="print the list, build nothing")
    parser.add_argument("--mypyc", default=os.environ.get("MYPYC", ".venv/bin/mypyc"))
    parser.add_argument("--out", default=os.environ.get("COMPILED_DIR", "var/compiled"))
    args = parser.parse_args(argv)
    modules = listed_modules()
    if args.modules:
        print("\n".join(modules))
        return 0
    # a path is taken from the checkout's root, a bare name from PATH
    found = shutil.which(str(ROOT / args.mypyc) if "/" in args.mypyc else args.mypyc)
    if found is None:
        print(
            f"mypyc not found ({args.mypyc}): make install brings it (mypy, the dev extra)",
            file=sys.stderr,
        )
        return 2
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    print(build(modules, Path(found).resolve(), out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
