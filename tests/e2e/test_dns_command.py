"""The GeoDNS server is started alike wherever it is deployed, and its counters are scraped.

docker-compose.yml's ``dns`` service and the Kubernetes Deployment (deploy/k8s/dns.yaml) run the
same ``manage.py dnsserver`` command, which the server's own option parser accepts; its
``--metrics`` port is the one deploy/prometheus.yml scrapes, declared on the pod and reached
through the headless ``dns-metrics`` Service, never through the public ``dns`` Service. No
services needed: this reads the files.
"""

from __future__ import annotations

import argparse
from typing import Any

import yaml

from trafficmgr.dns.cli import add_server_arguments, config_from_args
from trafficmgr.testing.topology.processes import ROOT


def compose_dns() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return dict(doc["services"]["dns"])


def k8s_docs() -> dict[tuple[str, str], dict[str, Any]]:
    docs = yaml.safe_load_all((ROOT / "deploy" / "k8s" / "dns.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]): d for d in docs if d}


def k8s_dns_container() -> dict[str, Any]:
    deployment = k8s_docs()[("Deployment", "dns")]
    containers = deployment["spec"]["template"]["spec"]["containers"]
    return dict(next(c for c in containers if c["name"] == "dns"))


def parsed(argv: list[str]) -> Any:
    """Parse a ``manage.py dnsserver`` command line as the server does."""
    assert argv[:3] == ["python", "manage.py", "dnsserver"], argv
    parser = argparse.ArgumentParser()
    add_server_arguments(parser, fleet_required=False)
    return config_from_args(parser.parse_args(argv[3:]))


def prometheus_dns_ports() -> set[int]:
    doc = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    job = next(j for j in doc["scrape_configs"] if j["job_name"] == "trafficmgr-dns")
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    return {int(t.rsplit(":", 1)[1]) for t in targets}


def test_kubernetes_runs_the_compose_command_with_its_metrics() -> None:
    compose = [str(a) for a in compose_dns()["command"]]
    k8s = [str(a) for a in k8s_dns_container()["command"]]
    assert k8s == compose
    config = parsed(k8s)
    assert config.metrics == ("0.0.0.0", 9153)
    assert (config.host, config.port) == ("0.0.0.0", 5353)


def test_prometheus_scrapes_the_port_the_pods_serve_their_counters_on() -> None:
    port = parsed([str(a) for a in k8s_dns_container()["command"]]).metrics[1]
    assert prometheus_dns_ports() == {port}
    declared = {p["name"]: p for p in k8s_dns_container()["ports"]}
    assert declared["metrics"]["containerPort"] == port
    assert declared["metrics"].get("protocol", "TCP") == "TCP"
    template = k8s_docs()[("Deployment", "dns")]["spec"]["template"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == str(port)


def test_the_counters_are_reached_per_pod_and_not_on_the_public_service() -> None:
    docs = k8s_docs()
    pods = docs[("Deployment", "dns")]["spec"]["template"]["metadata"]["labels"]
    metrics = docs[("Service", "dns-metrics")]["spec"]
    assert metrics["clusterIP"] == "None"  # headless: one address per pod, every replica
    assert metrics["selector"].items() <= pods.items()
    assert [(p["port"], p["targetPort"]) for p in metrics["ports"]] == [(9153, "metrics")]
    public = docs[("Service", "dns")]["spec"]["ports"]
    assert {p["targetPort"] for p in public} == {"dns-udp", "dns-tcp"}
