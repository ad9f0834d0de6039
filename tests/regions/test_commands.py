"""apply_fleet, export_fleet and create_token from a shell."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from regions.access.auth import resolve_token
from regions.audit.trail import cli_actor
from regions.fleet.services import fleet_snapshot
from regions.models import AgentToken, ApiToken, AuditLog, Endpoint, Region
from trafficmgr.fleetfile import dump_fleet

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_apply_fleet_prints_the_plan_and_applies(db: None, world_file: Path) -> None:
    output = run("apply_fleet", str(world_file))
    assert "Fleet plan: 14 to create, 0 to update, 0 to delete" in output
    assert "+ region eu-west" in output and "+ endpoint euw-1" in output
    assert "Applied: 14 to create" in output
    assert Endpoint.objects.count() == 5
    assert "no changes" in run("apply_fleet", str(world_file))


def test_apply_fleet_dry_run_writes_nothing(db: None, world_file: Path) -> None:
    output = run("apply_fleet", str(world_file), "--dry-run")
    assert "14 to create" in output and "Dry run: nothing applied." in output
    assert not Region.objects.exists()
    assert not AuditLog.objects.exists()


def test_apply_fleet_is_audited_as_the_cli_user(db: None, world_file: Path) -> None:
    run("apply_fleet", str(world_file))
    rows = AuditLog.objects.all()
    assert rows and {r.actor for r in rows} == {cli_actor()}
    assert {r.actor_type for r in rows} == {"cli"}
    summary = AuditLog.objects.get(action="apply")
    assert summary.after["summary"] == "14 to create, 0 to update, 0 to delete"
    created = AuditLog.objects.get(object_type="Endpoint", object_repr="euw-1")
    assert created.action == "create" and created.before is None
    assert created.after["address"] == "10.1.0.11:8000"


def test_apply_fleet_refuses_unsafe_plan_without_force(
    world: Any, world_yaml: str, tmp_path: Path
) -> None:
    path = tmp_path / "shrunk.yaml"
    # Keep eu-west only: us-east and ap-south go, with 3 of the 5 endpoints.
    path.write_text(world_yaml.split("  - name: us-east")[0])
    with pytest.raises(CommandError, match="refused: the plan deletes 3 of 5 endpoints"):
        run("apply_fleet", str(path))
    assert Endpoint.objects.count() == 5
    assert "Applied" in run("apply_fleet", str(path), "--force")
    assert Endpoint.objects.count() == 2


def test_apply_fleet_error_names_file_path_and_line(
    world: Any, world_yaml: str, tmp_path: Path
) -> None:
    path = tmp_path / "bad.yaml"
    text = world_yaml.replace("gpu: A100, gpus: 4", "gpu: H200, gpus: 4")
    path.write_text(text)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "H200" in s)
    with pytest.raises(CommandError) as info:
        run("apply_fleet", str(path))
    expected = f"{path}: regions[0].endpoints[1].gpu: unknown GPU profile 'H200' (line {line})"
    assert expected in str(info.value)


def test_apply_fleet_missing_file(db: None, tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="cannot read the fleet file"):
        run("apply_fleet", str(tmp_path / "nope.yaml"))


def test_apply_fleet_failure_exits_non_zero_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("zone: infer.example.test\nregions:\n  - name: [x\n")
    env = os.environ | {"TRAFFICMGR_VAR_DIR": str(tmp_path), "SECRET_KEY": "test"}
    env.pop("DATABASE_URL", None)
    proc = subprocess.run(
        [sys.executable, "manage.py", "apply_fleet", str(path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert f"{path}: fleet: YAML syntax error" in proc.stderr
    assert "(line 4)" in proc.stderr


def test_export_fleet_to_stdout_and_file(world: Any, tmp_path: Path) -> None:
    assert run("export_fleet") == dump_fleet(fleet_snapshot())
    out = tmp_path / "exported.yaml"
    assert "Wrote 3 regions and 5 endpoints" in run("export_fleet", "--output", str(out))
    assert out.read_text() == dump_fleet(fleet_snapshot())
    assert "no changes" in run("apply_fleet", str(out))


def last_line(output: str) -> str:
    return output.rstrip("\n").splitlines()[-1]


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_create_token_prints_the_secret_last(role: str, world: Any) -> None:
    secret = last_line(run("create_token", "--name", f"ci {role}", "--role", role))
    user = resolve_token(secret)
    assert user is not None and user.role == role
    token = ApiToken.objects.get(name=f"ci {role}")
    assert secret not in (token.key_hash, token.prefix) and secret.startswith(token.prefix)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert client.get("/api/v1/fleet/export").status_code == 200


def test_create_agent_token_is_bound_to_the_region(world: Any) -> None:
    output = run("create_token", "--name", "euw agent", "--role", "agent", "--region", "eu-west")
    assert "endpoints: euw-1, euw-2" in output
    user = resolve_token(last_line(output))
    assert user is not None and user.is_agent
    token = AgentToken.objects.get(name="euw agent")
    assert token.may_report(Endpoint.objects.get(name="euw-1"))
    assert not token.may_report(Endpoint.objects.get(name="use-1"))
    audit = AuditLog.objects.filter(object_type="AgentToken").first()
    assert audit is not None and audit.actor == cli_actor()
    assert "key_hash" not in audit.after


@pytest.mark.parametrize(
    "args, message",
    [
        (("--role", "agent"), "must be bound to a region"),
        (("--role", "agent", "--region", "mars"), "unknown region 'mars'"),
        (("--role", "viewer", "--region", "eu-west"), "only agent tokens"),
    ],
)
def test_create_token_refusals(
    args: tuple[str, ...], message: str, world: Any, state: Callable[[], dict[str, Any]]
) -> None:
    with pytest.raises(CommandError, match=message):
        run("create_token", "--name", "x", *args)
    assert not ApiToken.objects.exists() and not AgentToken.objects.exists()


def test_token_names_that_look_like_sql_or_html_round_trip(world: Any) -> None:
    name = "Robert'); DROP TABLE regions_apitoken;-- <b>x</b>"
    secret = last_line(run("create_token", "--name", name, "--role", "viewer"))
    user = resolve_token(secret)
    assert user is not None and user.name == name
    assert ApiToken.objects.get().name == name


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Demo:
    """``manage.py demo`` in a subprocess, its output collected line by line."""

    def __init__(self, var_dir: Path, port: int, dns_port: int, *, agents: bool = False) -> None:
        env = os.environ | {
            "TRAFFICMGR_VAR_DIR": str(var_dir),
            "TRAFFICMGR_GEOIP_DB": str(ROOT / "tests" / "data" / "geoip" / "GeoIP2-City-Test.mmdb"),
            "SECRET_KEY": "test",
            "PYTHONUNBUFFERED": "1",
        }
        env.pop("DATABASE_URL", None)
        env.pop("REDIS_URL", None)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "manage.py",
                "demo",
                "--http",
                f"127.0.0.1:{port}",
                "--dns",
                f"127.0.0.1:{dns_port}",
                *([] if agents else ["--no-agents"]),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C the demo and return its exit code; kill it (and fail) if it does not stop."""
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(
                f"demo still running {timeout:g} s after Ctrl-C:\n{''.join(self.lines)}"
            ) from None

    def wait_for(self, marker: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if marker in line:
                    return line
            if self.proc.poll() is not None:
                break
            time.sleep(0.2)
        raise AssertionError(f"no {marker!r} in demo output:\n{''.join(self.lines)}")


def test_demo_serves_the_api_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port, dns_port = free_port(), free_port()
    demo = Demo(tmp_path, port, dns_port)
    try:
        demo.wait_for("trafficmgr demo is running")
        token = demo.wait_for("API token").split()[2]
        password = demo.wait_for("password:").split("password:")[1].strip()
        assert token.startswith("tmk_") and len(password) >= 12
        base = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{base}/healthz", timeout=10) as response:
            assert json.load(response) == {"status": "ok"}
        request = urllib.request.Request(
            f"{base}/api/v1/fleet/export?format=json", headers={"Authorization": f"Bearer {token}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert len(json.load(response)["regions"]) == 5
        demo.wait_for(f'curl -H "Authorization: Bearer {token}" {base}/api/v1/regions/')
        demo.wait_for(f"GeoDNS     127.0.0.1:{dns_port} (udp+tcp)")
    finally:
        code = demo.interrupt()
    demo.wait_for("trafficmgr demo stopped.", timeout=5)
    assert code == 0, "".join(demo.lines)
    assert "Traceback" not in "".join(demo.lines)


def test_demo_runs_loop_dns_and_agents_together(tmp_path: Path) -> None:
    """Agents' heartbeats reach the loop, whose table reaches the DNS server's answers."""
    import dns.edns
    import dns.message
    import dns.query

    port, dns_port = free_port(), free_port()
    demo = Demo(tmp_path, port, dns_port, agents=True)
    try:
        demo.wait_for("trafficmgr demo is running")
        token = demo.wait_for("API token").split()[2]
        base = f"http://127.0.0.1:{port}"
        states: dict[str, str] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            request = urllib.request.Request(
                f"{base}/api/v1/routing/table", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                table = json.load(response)
            states = {name: r["state"] for name, r in table["regions"].items()}
            if len(states) == 5 and "unknown" not in states.values():
                break
            time.sleep(0.5)
        assert len(states) == 5 and "unknown" not in states.values(), states
        query = dns.message.make_query(
            "llama-3-70b.infer.example.test",
            "A",
            use_edns=0,
            options=[dns.edns.ECSOption("81.2.69.142", 32)],
        )
        answer = dns.query.udp(query, "127.0.0.1", port=dns_port, timeout=5)
        addresses = {item.address for rrset in answer.answer for item in rrset}
        # 81.2.69.142 is GB in the test database: strict EU residency, eu-* only.
        assert addresses and addresses <= {"192.0.2.10", "192.0.2.20"}, addresses
    finally:
        code = demo.interrupt()
    assert code == 0, "".join(demo.lines)
    assert "Traceback" not in "".join(demo.lines)
