"""``manage.py drill``: local and remote runs, the report as JSON and PNG, exit statuses."""

from __future__ import annotations

import json
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from regions.models import Drill, DrillStatus
from tests.regions.drills.conftest import REAL_DISPATCH, RecordingHotState  # before any patching


def run(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("drill", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + str(exc)
    return 0, out.getvalue()


@pytest.mark.django_db
def test_missing_flags_and_unreachable_servers_are_errors(world: Any) -> None:
    code, out = run("--kind", "region_outage", "--target", "eu-west")
    assert code == 1 and "--duration required" in out
    code, out = run(
        "--kind",
        "region_outage",
        "--target",
        "eu-west",
        "--duration",
        "5",
        "--server",
        "http://127.0.0.1:9",
        "--token",
        "x",
    )
    assert code == 3 and "cannot reach http://127.0.0.1:9" in out


@pytest.mark.django_db
def test_abort_from_the_shell(world: Any, store: RecordingHotState) -> None:
    from regions.drills import service

    drill = service.create_drill("latency", "euw-1", 30)
    code, out = run("--abort", str(drill.pk))
    assert code == 0, out
    assert Drill.objects.get(pk=drill.pk).status == DrillStatus.ABORTED
    assert store.kinds_for("euw-1") == ["none"]
    code, out = run("--abort", str(drill.pk))
    assert code == 3 and "already aborted" in out


@pytest.mark.integration
@pytest.mark.django_db(transaction=True)
def test_remote_drill_prints_progress_and_writes_the_report(
    postgres_db: str,
    world: Any,
    live_server: Any,
    make_client: Callable[..., Any],
    feeder: Callable[[tuple[str, ...]], None],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    from regions.drills import measure, tasks

    monkeypatch.setattr(tasks, "dispatch", REAL_DISPATCH)
    monkeypatch.setattr(tasks, "eager", lambda: True)  # on a thread, as embedded
    monkeypatch.setattr(measure, "_configured", None)
    measure.configure(dns=None)  # no DNS server here: DNS is left unmeasured
    feeder(("euw-1", "aps-1"))  # euw-2 has no agent: the fault is never taken
    token = make_client("operator").token_secret
    out_json, out_png = tmp_path / "drill.json", tmp_path / "drill.png"
    code, out = run(
        "--kind",
        "agent_silence",
        "--target",
        "euw-2",
        "--duration",
        "2",
        "--param",
        "recovery_wait_s=1",
        "--server",
        live_server.url,
        "--token",
        token,
        "--json",
        str(out_json),
        "--plot",
        str(out_png),
    )
    assert code == 1, out  # verdict fail
    assert "status running" in out and "status finished" in out
    assert "agent_silence on euw-2: FAIL" in out
    report = json.loads(out_json.read_text())
    assert report["verdict"] == "fail" and report["target"] == "euw-2"
    assert any("no agent of euw-2 took" in r for r in report["reasons"])
    assert "DNS not measured: no DNS server to ask" in report["reasons"]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.django_db(transaction=True)
def test_local_drill_runs_in_this_process(
    world: Any,
    settings: Any,
    store: RecordingHotState,
    feeder: Callable[[tuple[str, ...]], None],
    tmp_path: Path,
) -> None:
    settings.REDIS_URL = "redis://127.0.0.1:6379/15"  # a shared hot state: stay local
    feeder(("euw-1", "aps-1"))
    out_json = tmp_path / "local.json"
    code, out = run(
        "--kind",
        "endpoint_failure",
        "--target",
        "euw-2",
        "--duration",
        "1",
        "--param",
        "recovery_wait_s=0.5",
        "--dns",
        "127.0.0.1:9",
        "--json",
        str(out_json),
    )
    assert code == 1, out
    assert "(local)" in out and "injected report_unhealthy on euw-2" in out
    report = json.loads(out_json.read_text())
    assert report["target"] == "euw-2" and report["verdict"] == "fail"
    assert any(r.startswith("the DNS server answered none of") for r in report["reasons"])
    assert store.kinds_for("euw-2") == ["report_unhealthy", "none"]
    assert Drill.objects.get().created_by.startswith("cli")
