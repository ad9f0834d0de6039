"""apply_fleet, export_fleet and create_token from a shell."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
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
from trafficmgr.testing.demo import Demo, DemoPorts
from trafficmgr.testing.ports import free_port

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


def start_demo(
    var_dir: Path,
    port: int,
    dns_port: int,
    *,
    agents: bool = False,
    extra: tuple[str, ...] = (),
    redis_url: str | None = None,
) -> Demo:
    """``manage.py demo`` on SQLite in ``var_dir``, on Redis only if ``redis_url`` is given."""
    env = os.environ | {
        "TRAFFICMGR_VAR_DIR": str(var_dir),
        "TRAFFICMGR_GEOIP_DB": str(ROOT / "tests" / "data" / "geoip" / "GeoIP2-City-Test.mmdb"),
        "SECRET_KEY": "test",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    ports = DemoPorts(port, dns_port, free_port())
    return Demo(env, ports, agents=agents, extra=extra)


def test_demo_serves_the_api_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    port, dns_port = free_port(), free_port()
    demo = start_demo(tmp_path, port, dns_port)
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
    demo = start_demo(tmp_path, port, dns_port, agents=True)
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


def credentials_of(demo: Demo) -> tuple[str, str]:
    token = demo.wait_for("API token").split()[2]
    password = demo.wait_for("password:").split("password:")[1].strip()
    return token, password


def api_status(base: str, token: str) -> int:
    request = urllib.request.Request(
        f"{base}/api/v1/regions/", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def run_demo(tmp_path: Path, *extra: str) -> tuple[str, str, int]:
    """Start the demo, wait for its banner, check its token, stop it; return its credentials
    and what a call with its token answered while it ran."""
    port, dns_port = free_port(), free_port()
    demo = start_demo(tmp_path, port, dns_port, extra=extra)
    try:
        demo.wait_for("trafficmgr demo is running")
        token, password = credentials_of(demo)
        status = api_status(f"http://127.0.0.1:{port}", token)
    finally:
        assert demo.interrupt() == 0, "".join(demo.lines)
    return token, password, status


def test_demo_keeps_its_credentials_until_asked_to_rotate_them(tmp_path: Path) -> None:
    first_token, first_password, status = run_demo(tmp_path)
    assert status == 200
    kept = json.loads((tmp_path / "demo-credentials.json").read_text())
    assert kept == {"username": "operator", "password": first_password, "token": first_token}
    assert (tmp_path / "demo-credentials.json").stat().st_mode & 0o077 == 0

    again_token, again_password, status = run_demo(tmp_path)
    assert (again_token, again_password) == (first_token, first_password)
    assert status == 200  # the token of the first run still works

    new_token, new_password, status = run_demo(tmp_path, "--rotate-credentials")
    assert new_token != first_token and new_password != first_password and status == 200
    port, dns_port = free_port(), free_port()
    demo = start_demo(tmp_path, port, dns_port)
    try:
        demo.wait_for("trafficmgr demo is running")
        assert credentials_of(demo)[0] == new_token
        assert api_status(f"http://127.0.0.1:{port}", first_token) == 401  # revoked
    finally:
        assert demo.interrupt() == 0


def test_demo_logs_to_a_file_writes_its_url_and_drill_finds_it(tmp_path: Path) -> None:
    """The banner stays on screen (the per-second log goes to var/demo.log), and ``manage.py
    drill`` reaches a demo on a port other than 8000 through var/demo.json."""
    port, dns_port = free_port(), free_port()
    demo = start_demo(tmp_path, port, dns_port, agents=True)
    try:
        demo.wait_for("trafficmgr demo is running")
        demo.wait_for(f"log        {tmp_path / 'demo.log'}")
        run_file = json.loads((tmp_path / "demo.json").read_text())
        assert run_file["url"] == f"http://127.0.0.1:{port}"
        assert run_file["dns"] == f"127.0.0.1:{dns_port}"
        shown = len(demo.lines)
        time.sleep(4)  # a few ticks: tables, heartbeats, DNS swaps, each a log line
        assert demo.lines[shown:] == [], demo.lines[shown:]
        logged = (tmp_path / "demo.log").read_text()
        assert "serving routing table" in logged

        env = {k: v for k, v in demo_env(tmp_path).items() if k != "TRAFFICMGR_SERVER"}
        done = subprocess.run(
            [
                sys.executable,
                "manage.py",
                "drill",
                *("--kind", "latency", "--target", "nowhere"),
                *("--duration", "5"),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 3, done.stdout + done.stderr
        assert f"through http://127.0.0.1:{port} (from {tmp_path / 'demo.json'})" in done.stdout
        assert "target" in done.stderr and "nowhere" in done.stderr  # the demo's 400
    finally:
        assert demo.interrupt() == 0, "".join(demo.lines)
    assert not (tmp_path / "demo.json").exists()
    assert "Traceback" not in "".join(demo.lines)


def demo_env(var_dir: Path) -> dict[str, str]:
    env = os.environ | {"TRAFFICMGR_VAR_DIR": str(var_dir), "SECRET_KEY": "test"}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    return env


def test_server_url_prefers_the_environment_then_the_running_demo(
    tmp_path: Path, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from regions.demo import files as demofiles

    settings.VAR_DIR = tmp_path
    monkeypatch.delenv("TRAFFICMGR_SERVER", raising=False)
    assert demofiles.server_url() == ("http://127.0.0.1:8000", "the default")
    demofiles.write_run_file("http://127.0.0.1:9123", "127.0.0.1:9124")
    assert demofiles.server_url() == ("http://127.0.0.1:9123", str(tmp_path / "demo.json"))
    monkeypatch.setenv("TRAFFICMGR_SERVER", "http://cp.example.test:8443/")
    assert demofiles.server_url() == ("http://cp.example.test:8443", "$TRAFFICMGR_SERVER")
    monkeypatch.delenv("TRAFFICMGR_SERVER")
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    doc = json.loads((tmp_path / "demo.json").read_text()) | {"pid": int(gone.stdout)}
    (tmp_path / "demo.json").write_text(json.dumps(doc))  # a demo that died without cleaning up
    assert demofiles.server_url() == ("http://127.0.0.1:8000", "the default")


def without_secret_key(tmp_path: Path) -> dict[str, str]:
    drop = {"SECRET_KEY", "TRAFFICMGR_SECRET_KEY_FILE", "DEBUG", "DATABASE_URL", "REDIS_URL"}
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["TRAFFICMGR_VAR_DIR"] = str(tmp_path / "var")
    return env


@pytest.mark.parametrize(
    ("args", "shown"),
    [
        (["demo", "--help"], "--rotate-credentials"),
        (["drill", "-h"], "--server URL"),
        (["help"], "Available subcommands"),
    ],
)
def test_help_needs_no_secret_key(tmp_path: Path, args: list[str], shown: str) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=without_secret_key(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert shown in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_run_without_a_secret_key_says_what_to_do_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate"],
        cwd=ROOT,
        env=without_secret_key(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "SECRET_KEY is not set" in lines[0] and "make demo" in lines[0]
    assert str(tmp_path / "var" / "secret_key") in lines[0]


COMPOSE = ROOT / "docker-compose.yml"


def test_compose_builds_one_image_and_restarts_what_stops() -> None:
    import yaml

    services = yaml.safe_load(COMPOSE.read_text())["services"]
    assert [name for name, s in services.items() if "build" in s] == ["migrate"]
    image = services["migrate"]["image"]
    app = {name for name, s in services.items() if s.get("image") == image}
    assert app == {"migrate", "web", "worker", "beat", "dns", "gateway", "agents"}
    for name in app - {"migrate"}:
        assert services[name]["pull_policy"] == "never", name  # built here, never pulled
    for name, service in services.items():
        expected = "on-failure:3" if name == "migrate" else "unless-stopped"
        assert service.get("restart") == expected, name


def test_the_env_file_with_the_secret_key_is_ignored_by_git() -> None:
    done = subprocess.run(
        ["git", "check-ignore", "--quiet", "--no-index", ".env"], cwd=ROOT, check=False
    )
    assert done.returncode == 0


def test_compose_documents_a_dashboard_login_that_works(
    world: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from django.test import Client

    line = next(x for x in COMPOSE.read_text().splitlines() if "manage.py createsuperuser" in x)
    assert line.lstrip("# ").startswith("docker compose exec web python manage.py")
    command = line.split("manage.py", 1)[1].split()
    monkeypatch.setenv("DJANGO_SUPERUSER_PASSWORD", "a-long-compose-password")
    call_command(*command, "--noinput", "--username", "ops", "--email", "ops@example.test")
    settings.SECURE_SSL_REDIRECT = False
    client = Client()
    assert client.login(username="ops", password="a-long-compose-password")
    page = client.get("/")
    assert page.status_code == 200 and b'id="drills-panel"' in page.content


def test_the_docs_say_the_dns_server_follows_apply_fleet_without_a_restart() -> None:
    compose = " ".join(COMPOSE.read_text().split())
    k8s = " ".join((ROOT / "deploy" / "k8s" / "README.md").read_text().split())
    assert "restart it after an apply_fleet" not in compose
    assert "--fleet-poll" in compose and "without a restart" in compose
    assert "rollout restart deployment/dns" not in k8s
    assert "no restart is needed" in k8s


def own_database(redis_url: str, db: int = 11) -> str:
    """The URL of Redis database ``db`` (emptied): the demo's keys apart from other tests'."""
    import redis

    base = redis_url.rsplit("/", 1)[0] if redis_url.count("/") > 2 else redis_url
    url = f"{base}/{db}"
    redis.Redis.from_url(url, socket_timeout=2).flushdb()
    return url


def get_json(url: str, token: str | None = None) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return json.load(r)


def dns_table_version(port: int) -> str:
    import dns.message
    import dns.query

    query = dns.message.make_query("llama-3-70b.infer.example.test", "TXT")
    answer = dns.query.udp(query, "127.0.0.1", port=port, timeout=5)
    head = next(s.decode() for rrset in answer.answer for item in rrset for s in item.strings)
    return head.split()[0].removeprefix("table=")


@pytest.mark.integration
def test_demo_runs_on_redis_and_a_separate_gateway_shares_its_table(
    tmp_path: Path, redis_url: str
) -> None:
    """With REDIS_URL set the demo's DNS server follows the table through Redis, and a
    ``manage.py gateway`` started beside it routes on the same table."""
    url = own_database(redis_url)
    port, dns_port, gw_port = free_port(), free_port(), free_port()
    demo = start_demo(tmp_path, port, dns_port, redis_url=url)
    gateway: subprocess.Popen[str] | None = None
    try:
        demo.wait_for("trafficmgr demo is running")
        token = demo.wait_for("API token").split()[2]
        base = f"http://127.0.0.1:{port}"
        gateway = subprocess.Popen(
            [sys.executable, "manage.py", "gateway", "--listen", f"127.0.0.1:{gw_port}"],
            cwd=ROOT,
            env=demo.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        seen: tuple[str, str, Any] = ("", "", None)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            published = get_json(f"{base}/api/v1/routing/table", token)["version"]
            try:
                health = get_json(f"http://127.0.0.1:{gw_port}/healthz")
            except OSError:
                health = None
            seen = (published, dns_table_version(dns_port), health)
            if seen[1] == published and health and health["table"] == published:
                break
            time.sleep(0.5)
        assert seen[1] == seen[0], seen
        assert seen[2] is not None and seen[2]["table"] == seen[0], seen
    finally:
        if gateway is not None:
            gateway.send_signal(signal.SIGINT)
            gateway.wait(30)
        code = demo.interrupt()
    assert code == 0, "".join(demo.lines)
    assert "Traceback" not in "".join(demo.lines)
