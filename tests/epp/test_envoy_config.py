"""The generated Envoy bootstrap: what it promises, Envoy's own validation, the deploy copy."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.epp.harness import ROOT
from trafficmgr.epp.envoy_config import (
    BODY_MODES,
    EnvoyOptions,
    bootstrap,
    bootstrap_endpoints,
    main,
    render,
)
from trafficmgr.fleetfile import load_fleet_file, load_fleet_text
from trafficmgr.routing.types import AdminState

FLEET = ROOT / "examples" / "fleet.yaml"
DEPLOYED = ROOT / "deploy" / "envoy" / "envoy.yaml"
DEPLOY_ARGS = ["--listen", "0.0.0.0:8080", "--epp", "127.0.0.1:9002"]


def _hcm(config: dict) -> dict:  # type: ignore[type-arg]
    listener = config["static_resources"]["listeners"][0]
    return listener["filter_chains"][0]["filters"][0]["typed_config"]  # type: ignore[no-any-return]


def _clusters(config: dict) -> dict[str, dict]:  # type: ignore[type-arg]
    return {c["name"]: c for c in config["static_resources"]["clusters"]}


def test_endpoints_cluster_follows_the_pickers_list() -> None:
    config = bootstrap(load_fleet_file(str(FLEET)), EnvoyOptions())
    endpoints = _clusters(config)["endpoints.eu-west"]
    policy = endpoints["load_balancing_policy"]["policies"][0]["typed_extension_config"]
    override = policy["typed_config"]
    assert policy["name"] == "envoy.load_balancing_policies.override_host"
    assert override["override_host_sources"] == [
        {"metadata": {"key": "envoy.lb", "path": [{"key": "x-gateway-destination-endpoint"}]}}
    ]
    assert override["selected_host_key"]["path"] == [
        {"key": "x-gateway-destination-endpoint-served"}
    ]
    hosts = [
        e["endpoint"]["address"]["socket_address"]
        for locality in endpoints["load_assignment"]["endpoints"]
        for e in locality["lb_endpoints"]
    ]
    assert {"address": "10.1.0.11", "port_value": 8000} in hosts


def test_one_cluster_per_region_so_a_fallback_stays_in_it() -> None:
    """The fallback of override_host picks inside the cluster: each holds one region."""
    fleet = load_fleet_file(str(FLEET))
    config = bootstrap(fleet, EnvoyOptions())
    clusters = _clusters(config)
    assert set(clusters) == {f"endpoints.{r.name}" for r in fleet.regions} | {"epp"}
    for region in fleet.regions:
        localities = clusters[f"endpoints.{region.name}"]["load_assignment"]["endpoints"]
        assert [loc["locality"]["region"] for loc in localities] == [region.name]
    assert sum(
        len(loc["lb_endpoints"])
        for name, c in clusters.items()
        if name != "epp"
        for loc in c["load_assignment"]["endpoints"]
    ) == len(bootstrap_endpoints(str(DEPLOYED)))
    routes = _hcm(config)["route_config"]["virtual_hosts"][0]["routes"]
    assert routes[0]["route"]["cluster_header"] == "x-trafficmgr-cluster"
    assert routes[1]["direct_response"]["status"] == 503  # never picked: no endpoint at all


def test_bootstrap_endpoints_are_what_envoy_holds() -> None:
    fleet = load_fleet_file(str(FLEET))
    known = bootstrap_endpoints(str(DEPLOYED))
    assert ("eu-west", "10.1.0.11:8000") in known
    assert known == {
        (e.region, e.address) for e in fleet.endpoints() if e.admin_state != AdminState.DISABLED
    }


def test_failure_mode_allow_needs_a_region() -> None:
    with pytest.raises(ValueError, match="--region"):
        EnvoyOptions(failure_mode_allow=True)
    config = bootstrap(
        load_fleet_file(str(FLEET)), EnvoyOptions(failure_mode_allow=True, region="us-east")
    )
    routes = _hcm(config)["route_config"]["virtual_hosts"][0]["routes"]
    assert routes[1]["route"]["cluster"] == "endpoints.us-east"


def test_retries_only_before_the_first_byte_and_epp_failure_is_closed() -> None:
    hcm = _hcm(bootstrap(load_fleet_file(str(FLEET)), EnvoyOptions()))
    retry = hcm["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["retry_policy"]
    assert set(retry["retry_on"].split(",")) == {
        "connect-failure",
        "refused-stream",
        "reset-before-request",
        "retriable-status-codes",
    }
    assert retry["retriable_status_codes"] == [503]
    ext_proc = hcm["http_filters"][0]["typed_config"]
    assert ext_proc["failure_mode_allow"] is False
    assert ext_proc["processing_mode"]["request_body_mode"] == "BUFFERED"
    assert ext_proc["mutation_rules"] == {"allow_envoy": True}


def test_region_keeps_only_its_endpoints() -> None:
    config = bootstrap(load_fleet_file(str(FLEET)), EnvoyOptions(region="eu-central"))
    assert set(_clusters(config)) == {"endpoints.eu-central", "epp"}
    with pytest.raises(KeyError):
        bootstrap(load_fleet_file(str(FLEET)), EnvoyOptions(region="mars"))


def test_host_names_are_refused() -> None:
    text = FLEET.read_text().replace('"10.1.0.11:8000"', '"gpu1.example.test:8000"')
    with pytest.raises(ValueError, match="euw-1"):
        bootstrap(load_fleet_text(text), EnvoyOptions())


def test_deployed_config_is_the_generated_one(tmp_path: Path) -> None:
    out = tmp_path / "envoy.yaml"
    assert main(["--fleet", str(FLEET), *DEPLOY_ARGS, "-o", str(out)]) == 0
    assert out.read_text() == DEPLOYED.read_text(), "regenerate deploy/envoy/envoy.yaml"
    assert yaml.safe_load(out.read_text())["admin"]["address"]["socket_address"]["address"] == (
        "127.0.0.1"
    )


@pytest.mark.integration
@pytest.mark.parametrize("body_mode", sorted(BODY_MODES))
def test_envoy_accepts_the_config(envoy_path: Path, tmp_path: Path, body_mode: str) -> None:
    config = tmp_path / "envoy.yaml"
    options = EnvoyOptions(body_mode=body_mode, subset_header=True, region="us-east")
    config.write_text(render(load_fleet_file(str(FLEET)), options))
    result = subprocess.run(
        [str(envoy_path), "--mode", "validate", "-c", str(config), "--disable-hot-restart"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
