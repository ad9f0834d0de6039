"""The web process is started alike wherever it is deployed.

tests/e2e runs docker-compose.yml's web command (``cluster.web_command``); the Kubernetes
Deployment and the image's default command must be that same command, so that what the e2e
tests show holds for them too. The number of workers comes from ``WEB_CONCURRENCY``, 2 by
default everywhere. No services needed: this reads the files.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from trafficmgr.testing.topology.cluster import WEB_WORKERS
from trafficmgr.testing.topology.processes import ROOT, web_command

DEFAULT_WORKERS = "2"


def compose_web() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return dict(doc["services"]["web"])


def k8s_web_container() -> dict[str, Any]:
    docs = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "web.yaml").read_text())
    deployment = next(d for d in docs if d and d["kind"] == "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return dict(next(c for c in containers if c["name"] == "web"))


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text().replace("\\\n", " ")


def without_workers(argv: list[str]) -> list[str]:
    i = argv.index("--workers")
    return argv[:i] + argv[i + 2 :]


def test_compose_runs_uvicorn_with_web_concurrency_workers() -> None:
    argv = [str(a) for a in compose_web()["command"]]
    assert argv[:2] == ["uvicorn", "trafficmgr.asgi:application"], argv
    assert argv[argv.index("--workers") + 1] == "${WEB_CONCURRENCY:-" + DEFAULT_WORKERS + "}"
    assert argv[argv.index("--lifespan") + 1] == "off", "Django has no ASGI lifespan"
    assert str(WEB_WORKERS) == DEFAULT_WORKERS, "the e2e tests run another number of workers"
    assert web_command(8123, 2)[1:] == [
        *argv[1:3],
        "127.0.0.1",
        "--port",
        "8123",
        "--workers",
        "2",
        *argv[8:],
    ]


def test_kubernetes_runs_the_compose_command() -> None:
    compose = [str(a) for a in compose_web()["command"]]
    container = k8s_web_container()
    argv = [str(a) for a in container["command"]]
    assert argv[argv.index("--workers") + 1] == "$(WEB_CONCURRENCY)"
    assert without_workers(argv) == without_workers(compose)
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env.get("WEB_CONCURRENCY") == DEFAULT_WORKERS, env


def test_the_image_runs_the_compose_command() -> None:
    text = dockerfile()
    cmd = re.search(r"^CMD (\[.*?\])", text, re.M)
    assert cmd, "no exec-form CMD in the Dockerfile"
    compose = [str(a) for a in compose_web()["command"]]
    # uvicorn reads WEB_CONCURRENCY itself when --workers is not given.
    assert json.loads(cmd[1]) == without_workers(compose)
    env = re.search(r"^ENV WEB_CONCURRENCY=(\S+)", text, re.M)
    assert env and env[1] == DEFAULT_WORKERS, "the image does not default WEB_CONCURRENCY to 2"
