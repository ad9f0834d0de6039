"""The gateway as shipped: compose, Kubernetes, Prometheus, alerting rules, Grafana.

The commands in docker-compose.yml and deploy/k8s/gateway.yaml are parsed by the gateway
command's own parser; every gateway series the dashboard plots or a rule alerts on is one a
running gateway exports (scraped on loopback, after it answered, refused and retried); the
rules and the scrape configuration pass ``promtool`` where it is installed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.world import TOKEN, US_IP, GatewayThread, make_core, world_fleet
from trafficmgr.gateway import GatewaySettings, networks
from trafficmgr.requestpath.credentials import UPSTREAM_KEY_ENV
from trafficmgr.simserver import ServeOptions, SimServerThread, fleet_specs
from trafficmgr.simserver.faults import Fault, FaultKind
from trafficmgr.simserver.layout import with_addresses

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
GATEWAY_SERIES = re.compile(r"trafficmgr_gateway_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}


def k8s_docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "k8s" / name).read_text()) if d]


def gateway_container() -> dict[str, Any]:
    deployment = next(d for d in k8s_docs("gateway.yaml") if d["kind"] == "Deployment")
    spec = deployment["spec"]["template"]["spec"]
    return dict(next(c for c in spec["containers"] if c["name"] == "gateway"))


def compose_gateway() -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return dict(doc["services"]["gateway"])


def parse_gateway(argv: list[str]) -> dict[str, Any]:
    """Parse a deployed command line with ``manage.py gateway``'s own parser."""
    from regions.management.commands.gateway import Command

    assert argv[:3] == ["python", "manage.py", "gateway"], argv
    return vars(Command().create_parser("manage.py", "gateway").parse_args(argv[3:]))


def test_compose_and_kubernetes_run_the_gateway_command_on_port_8080() -> None:
    compose = [str(a) for a in compose_gateway()["command"]]
    container = gateway_container()
    k8s = [str(a) for a in container["command"]]
    assert compose[compose.index("--workers") + 1] == "${GATEWAY_WORKERS:-2}"
    assert k8s[k8s.index("--workers") + 1] == "$(GATEWAY_WORKERS)"
    env = {e["name"]: e for e in container["env"]}
    assert env["GATEWAY_WORKERS"]["value"] == "2"
    for argv in (compose, k8s):
        i = argv.index("--workers")
        options = parse_gateway([*argv[: i + 1], "2", *argv[i + 2 :]])
        assert options["listen"] == "0.0.0.0:8080" and options["workers"] == 2
        assert not options.get("upstream_key"), "a secret on the command line shows in ps"
    assert compose_gateway()["ports"] == ["8080:8080"]
    key = compose_gateway()["environment"][UPSTREAM_KEY_ENV]
    assert key.startswith("${"), "the key comes from .env, not the file in the repository"
    assert [p["containerPort"] for p in container["ports"]] == [8080]


def test_kubernetes_gateway_has_probes_limits_and_no_secret_in_argv() -> None:
    container = gateway_container()
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz", probe
    resources = container["resources"]
    assert set(resources) == {"requests", "limits"}
    assert {"cpu", "memory"} <= set(resources["limits"])
    secrets = [e for e in container["env"] if "valueFrom" in e]
    assert secrets, "the upstream key comes from a Secret"
    for e in secrets:
        assert e["valueFrom"]["secretKeyRef"]["name"] == "trafficmgr-gateway"
        assert e["name"] == UPSTREAM_KEY_ENV, "the variable the gateway reads its key from"
    kustomization = yaml.safe_load((DEPLOY / "k8s" / "kustomization.yaml").read_text())
    assert "gateway.yaml" in kustomization["resources"]
    kinds = {(d["kind"], d["metadata"]["name"]) for d in k8s_docs("gateway.yaml")}
    assert {("Service", "gateway"), ("Service", "gateway-metrics")} <= kinds


def test_prometheus_scrapes_the_gateway_and_loads_its_rules() -> None:
    config = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    targets = jobs["trafficmgr-gateway"]["static_configs"][0]["targets"]
    assert targets == ["gateway:8080"], "the compose service's name and port"
    assert config["rule_files"] == ["prometheus-rules.yml"]
    rules = yaml.safe_load((DEPLOY / "prometheus-rules.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    for name in ("Down", "5xxRatioHigh", "TTFTHigh", "EndpointsEjected", "RejectsHigh"):
        assert f"TrafficmgrGateway{name}" in alerts, name


@pytest.mark.integration
@pytest.mark.skipif(
    not shutil.which("promtool"), reason="promtool not installed (Debian: prometheus)"
)
def test_promtool_accepts_the_rules_and_the_configuration() -> None:
    for args in (["check", "rules", "prometheus-rules.yml"], ["check", "config", "prometheus.yml"]):
        done = subprocess.run(
            ["promtool", *args], cwd=DEPLOY, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture(scope="module")
def scraped() -> Iterator[set[str]]:
    """Every series name a gateway exports once it answered, refused and retried."""
    fleet = world_fleet()
    specs = fleet_specs(fleet, base_port=0)
    with SimServerThread(specs, time_scale=50.0, options=ServeOptions(seed=3)) as sim:
        fleet = with_addresses(fleet, sim.servers.addresses())
        core, _ = make_core(fleet, region="us-east", default_strategy="round_robin")
        sim.set_fault("use-1", Fault(FaultKind.ERROR, status=503))
        settings = GatewaySettings(trusted_proxies=networks(["127.0.0.1"]), first_byte_timeout_s=5)
        with GatewayThread(core, settings) as gw:
            for _ in range(4):  # use-1 fails: retried elsewhere
                assert _post(gw.base_url, TOKEN) == 200
            assert _post(gw.base_url, "not-a-token") == 401
            with urllib.request.urlopen(gw.origin + "/metrics", timeout=10) as r:
                text = r.read().decode()
    names = set()
    for family in text_string_to_metric_families(text):
        names |= {family.name + s for s in SUFFIXES.get(family.type, ("",))}
        names |= {s.name for s in family.samples}
    yield names


def _post(base_url: str, token: str) -> int:
    body = {"model": "m1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    request = urllib.request.Request(
        base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/json",
            "X-Forwarded-For": US_IP,  # a located client, sent to us-east
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return int(r.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_every_gateway_series_the_dashboard_plots_is_exported(scraped: set[str]) -> None:
    dashboard = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    wanted = {
        name
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        for name in GATEWAY_SERIES.findall(target["expr"])
    }
    assert len(wanted) >= 8, "the dashboard's gateway row is missing"
    assert not wanted - scraped, f"plotted but not exported: {sorted(wanted - scraped)}"
    assert "trafficmgr_gateway_retries_total" in scraped


def test_every_gateway_series_an_alert_uses_is_exported(scraped: set[str]) -> None:
    wanted = set(GATEWAY_SERIES.findall((DEPLOY / "prometheus-rules.yml").read_text()))
    assert wanted, "no rule uses a gateway series"
    assert not wanted - scraped, f"alerted on but not exported: {sorted(wanted - scraped)}"
