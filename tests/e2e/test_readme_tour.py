"""The README's five-minute tour, run step by step against ``manage.py demo``.

The commands are read from README.md itself, so that the page and this test cannot drift: the
fenced ``sh`` blocks of the section "A five-minute tour", backslash continuations joined and
comment lines dropped, each command run in order by bash, as a reader pastes it into a second
shell, with ``$TOKEN`` and ``$CLIENT`` the API and client tokens the demo printed.

**Addresses.** The tour is written for the demo's default addresses: the web app on
127.0.0.1:8000, the GeoDNS server on 127.0.0.1 port 5353 and the gateway on 127.0.0.1:8080.
The test runs the demo on free ports instead and rewrites exactly those three addresses in
each command, and ``.venv/bin/python`` to the interpreter running the tests
(``on_test_ports``); nothing else in a command changes.

**Working directory.** A temporary directory holding links to the checkout's ``manage.py`` and
``examples/``, whose ``var/`` is the demo's ``TRAFFICMGR_VAR_DIR``: ``--json var/drill.json``
and the drill's discovery of the running demo (``var/demo.json``) work as in a fresh clone,
and nothing is written into the checkout. The demo runs as ``make demo`` runs it on a fresh
machine: SQLite, no Redis, the bundled GeoLite2 database, plain HTTP.

Every command must exit 0 and print what the tour promises (``CHECKS``); a command that no
check recognises fails the test, so a new step of the tour comes with its check here. dig is
the system's (dnsutils): without it the test skips, which fails the run under
``TRAFFICMGR_REQUIRE_SERVICES=1``. It takes about 1.5 minutes, most of it the drill.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from trafficmgr.fleetfile import load_fleet_file
from trafficmgr.geoip import Locator
from trafficmgr.routing.residency import allowed_regions
from trafficmgr.routing.types import Fleet
from trafficmgr.testing.demo import Demo, DemoPorts

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FLEET = ROOT / "examples" / "fleet.yaml"
TOUR_HEADING = "## A five-minute tour"
COMMAND_TIMEOUT_S = 120.0
# The demo's defaults as the tour spells them, and what each becomes on the test's ports.
DEFAULT_WEB, DEFAULT_GATEWAY, DEFAULT_DNS = "127.0.0.1:8000", "127.0.0.1:8080", "@127.0.0.1 -p 5353"


def tour_commands(readme: str) -> list[str]:
    """Return the tour's commands in order: its ``sh`` blocks, continuations joined."""
    start = readme.index(TOUR_HEADING)
    end = readme.find("\n## ", start + len(TOUR_HEADING))
    section = readme[start : end if end >= 0 else len(readme)]
    commands: list[str] = []
    for block in re.findall(r"^```sh\n(.*?)^```", section, flags=re.M | re.S):
        pending = ""
        for line in block.splitlines():
            stripped = line.strip()
            if not pending and (not stripped or stripped.startswith("#")):
                continue
            pending += stripped
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip() + " "
                continue
            commands.append(pending)
            pending = ""
        assert not pending, f"a command of the tour ends in a continuation: {pending!r}"
    return commands


def on_test_ports(command: str, ports: DemoPorts) -> str:
    """Rewrite the demo's default addresses (and the checkout's interpreter) to the test's."""
    command = command.replace(DEFAULT_WEB, f"127.0.0.1:{ports.web}")
    command = command.replace(DEFAULT_GATEWAY, f"127.0.0.1:{ports.gateway}")
    command = command.replace(DEFAULT_DNS, f"@127.0.0.1 -p {ports.dns}")
    return re.sub(r"(?<![\w/.])\.venv/bin/python(?=\s)", shlex.quote(sys.executable), command)


def fresh_clone_env(var_dir: Path) -> dict[str, str]:
    """The environment of ``make demo`` on a fresh machine: SQLite, no Redis, bundled GeoIP."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "TRAFFICMGR_GEOIP_DB", "TRAFFICMGR_SERVER"}
    }
    env.update(
        {
            "TRAFFICMGR_VAR_DIR": str(var_dir),
            "TRAFFICMGR_TLS": "0",
            "PYTHONUNBUFFERED": "1",
            "SECRET_KEY": env.get("SECRET_KEY") or "readme-tour-test-secret-key",
        }
    )
    return env


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory that looks like the checkout to the tour's commands (see the docstring)."""
    (tmp_path / "var").mkdir()
    for name in ("manage.py", "examples"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


@pytest.fixture
def tools() -> None:
    for tool, package in (("dig", "dnsutils"), ("curl", "curl")):
        if shutil.which(tool) is None:
            pytest.skip(
                f"the tour needs {tool}, which is not installed (apt-get install {package})"
            )


@pytest.fixture
def demo(workdir: Path, tools: None) -> Iterator[tuple[Demo, DemoPorts, dict[str, str]]]:
    """The running demo, its ports, and the second shell's environment ($TOKEN, $CLIENT)."""
    ports = DemoPorts.free()
    env = fresh_clone_env(workdir / "var")
    running = Demo(env, ports, cwd=workdir)
    try:
        running.wait_for("trafficmgr demo is running")
        token = running.wait_for("API token").split()[2]
        client = running.wait_for("(a client token for the gateway)").split()[1]
        yield running, ports, {**env, "TOKEN": token, "CLIENT": client}
    finally:
        code = running.interrupt()
    assert code == 0, "".join(running.lines[-40:])
    assert "Traceback" not in "".join(running.lines), "".join(running.lines[-40:])


# What each step promises: (name, recognises the command, checks its output).
Check = Callable[[list[str], str, Path], None]


def fleet() -> Fleet:
    return load_fleet_file(str(FLEET))


def allowed_for(ip: str) -> set[str] | None:
    """Regions residency lets the client at ``ip`` use (None: any), by the bundled database."""
    decision = allowed_regions(fleet(), Locator().locate(ip))
    return None if decision.regions is None else set(decision.regions)


def option(argv: list[str], prefix: str) -> str:
    return next(a.removeprefix(prefix) for a in argv if a.startswith(prefix))


def check_dig_a(argv: list[str], out: str, workdir: Path) -> None:
    answers = out.split()
    assert answers, "dig got no answer"
    assert all(ipaddress.ip_address(a) for a in answers), out
    subnet = option(argv, "+subnet=")
    allowed = allowed_for(subnet.split("/")[0])
    if allowed is not None:
        addresses = {a for r in fleet().regions if r.name in allowed for a in r.addresses}
        assert set(answers) <= addresses, f"{answers} outside {sorted(allowed)} for {subnet}"


def check_dig_txt(argv: list[str], out: str, workdir: Path) -> None:
    assert "region=" in out and "reason=" in out, f"no explained answer: {out!r}"


def check_table(argv: list[str], out: str, workdir: Path) -> None:
    assert out.startswith('{"version":"') and '"regions":{' in out, out[:600]


def check_route(argv: list[str], out: str, workdir: Path) -> None:
    decision = json.loads(out)
    assert {"region", "endpoint", "address", "table_version", "reason"} <= decision.keys()
    body = json.loads(argv[argv.index("-d") + 1])
    allowed = allowed_for(body["client_ip"])
    assert allowed is None or decision["region"] in allowed, decision


def check_gateway(argv: list[str], out: str, workdir: Path) -> None:
    head, _, body = out.replace("\r\n", "\n").partition("\n\n")
    assert head.startswith("HTTP/1.1 200"), head
    for name in ("region", "endpoint", "reason", "overhead-ms"):
        assert f"x-trafficmgr-{name}:" in head.lower(), head
    assert "x-trafficmgr-region: eu-" in head.lower(), head  # a Swedish client stays in the EU
    answer = json.loads(body)
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"]


def check_drill(argv: list[str], out: str, workdir: Path) -> None:
    assert "PASS" in out, out[-2000:]
    report = json.loads((workdir / option_after(argv, "--json")).read_text())
    assert report["verdict"] == "pass", report.get("reasons")
    assert report["detected_after_s"] is not None and report["dns_changed_after_s"] is not None


def check_simulate(argv: list[str], out: str, workdir: Path) -> None:
    result = json.loads((workdir / option_after(argv, "--json")).read_text())
    policies = option_after(argv, "--policies").split(",")
    assert sorted(result["policies"]) == sorted(policies)
    for name, figures in result["policies"].items():
        assert figures["completed"] > 0 and figures["residency_violations"] == 0, name
    assert (workdir / option_after(argv, "--plot")).stat().st_size > 0


def option_after(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


CHECKS: list[tuple[str, Callable[[str], bool], Check]] = [
    ("dig TXT", lambda c: c.startswith("dig ") and " TXT " in c, check_dig_txt),
    ("dig A", lambda c: c.startswith("dig "), check_dig_a),
    ("routing table", lambda c: "/api/v1/routing/table" in c, check_table),
    ("route decision", lambda c: "/api/v1/route " in c, check_route),
    ("gateway", lambda c: "/v1/chat/completions" in c, check_gateway),
    ("drill", lambda c: "manage.py drill " in c, check_drill),
    ("simulator", lambda c: "manage.py simulate " in c, check_simulate),
]


def check_of(command: str) -> tuple[str, Check]:
    for name, recognises, check in CHECKS:
        if recognises(command):
            return name, check
    raise AssertionError(f"a tour command this test has no check for: {command}")


def test_the_readme_parses_into_the_tour_s_commands() -> None:
    commands = tour_commands(README.read_text())
    assert [check_of(c)[0] for c in commands] == [
        "dig A",
        "dig TXT",
        "routing table",
        "route decision",
        "gateway",
        "drill",
        "simulator",
    ]
    ports = DemoPorts(18000, 15353, 18080)
    rewritten = [on_test_ports(c, ports) for c in commands]
    shown = " ".join(rewritten)
    assert "127.0.0.1:8000" not in shown and "-p 5353" not in shown and ":8080" not in shown
    assert "127.0.0.1:18000" in shown and "-p 15353" in shown and "127.0.0.1:18080" in shown
    python = shlex.quote(sys.executable) + " manage.py "
    assert [c.startswith(python) for c in rewritten] == [False] * 5 + [True] * 2


def test_the_tour_works_step_by_step_on_the_demo_fleet(
    demo: tuple[Demo, DemoPorts, dict[str, str]], workdir: Path
) -> None:
    running, ports, env = demo
    wait_until_every_region_reported(ports, env["TOKEN"])
    for command in tour_commands(README.read_text()):
        name, check = check_of(command)
        shell = on_test_ports(command, ports)
        started = time.monotonic()
        done = subprocess.run(
            ["bash", "-c", shell],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
        )
        said = f"{name}: {shell}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-2000:]}"
        assert done.returncode == 0, said
        try:
            check(shlex.split(shell), done.stdout, workdir)
        except (AssertionError, ValueError, KeyError, StopIteration) as exc:
            raise AssertionError(f"{said}\n{exc!r}") from exc
        print(f"{name}: ok in {time.monotonic() - started:.1f} s")
    assert running.proc.poll() is None, "the demo stopped during the tour"


def wait_until_every_region_reported(ports: DemoPorts, token: str, timeout: float = 60.0) -> None:
    """Wait until the table knows every region from its agents (the reader's first minute)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{ports.web}/api/v1/routing/table",
        headers={"Authorization": f"Bearer {token}"},
    )
    states: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(request, timeout=10) as response:
            states = {name: r["state"] for name, r in json.load(response)["regions"].items()}
        if len(states) == len(fleet().regions) and "unknown" not in states.values():
            return
        time.sleep(0.5)
    raise AssertionError(f"regions still unknown after {timeout:g} s: {states}")
