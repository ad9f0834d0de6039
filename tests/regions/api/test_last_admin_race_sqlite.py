"""Two revokes racing for the last two admin tokens on SQLite: one revokes, the other gets
409 ``last_admin_token``, in either transaction mode. SQLite ignores ``select_for_update``;
read first, the loser's snapshot went stale and it failed "database is locked" (a 500) in
DEFERRED mode. A real file and two threads with their own connections, in a subprocess (the
suite's own database may be PostgreSQL, and an in-memory SQLite cannot be shared so)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["DEFERRED", "IMMEDIATE"])
def test_one_revoke_wins_the_other_is_refused(tmp_path: Path, mode: str) -> None:
    env = {**os.environ, "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "REDIS_URL": ""}
    done = subprocess.run(
        [sys.executable, "-m", "tests.regions.api.sqlite_revoke_race", mode],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(outcome["results"].values()) == ["last_admin_token", "revoked"], outcome
    assert outcome["active_admins"] == 1
