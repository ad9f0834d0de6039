"""A PostgreSQL server of a test's own (``initdb`` + ``pg_ctl`` on a free port), to stop and
start at will without touching the shared one others use.

As root (CI, the dev machines) the server runs as the ``postgres`` user, which PostgreSQL
requires; its data directory lives in a directory of its own under the system temp dir
(pytest's temp dirs are closed to other users). ``stop`` is an immediate shutdown, as close
to a crash as ``pg_ctl`` offers; ``start`` brings the same data back.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from trafficmgr.testing.ports import free_port


class PostgresMissing(Exception):
    """``initdb``/``pg_ctl`` are not installed, or cannot run here."""


def _binary(name: str) -> str:
    found = shutil.which(name) or next(
        iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None
    )
    if found is None:
        raise PostgresMissing(f"{name} is not installed")
    return found


class PrivatePostgres:
    """One PostgreSQL server on 127.0.0.1:``port`` with trust authentication."""

    def __init__(self) -> None:
        self.initdb, self.pg_ctl = _binary("initdb"), _binary("pg_ctl")
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="trafficmgr-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._user: list[str] = []
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError as exc:
                raise PostgresMissing("running as root and there is no postgres user") from exc
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
            self._user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self._user, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            raise PostgresMissing(f"{' '.join(argv[:2])} failed: {done.stderr or done.stdout}")

    def start(self) -> PrivatePostgres:
        if not (self.data / "PG_VERSION").exists():
            self._run(
                self.initdb, "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"
            )
        options = (
            f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            self.pg_ctl, "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "start"
        )
        return self

    def stop(self) -> None:
        """Shut down at once (every connection dropped, as in a crash)."""
        self._run(self.pg_ctl, "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def remove(self) -> None:
        if self.running():
            with contextlib.suppress(PostgresMissing):
                self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
