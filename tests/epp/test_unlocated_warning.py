"""The endpoint picker warns at start when it trusts no proxy and the fleet has residency rules:
through Envoy every client may be a private address, which residency cannot place."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from tests.worlds import GATEWAY
from trafficmgr.epp.cli import warn_unlocatable
from trafficmgr.epp.exchange import ExchangeSettings
from trafficmgr.fleetfile import load_fleet_text
from trafficmgr.requestpath import RequestPath, RequestPathConfig
from trafficmgr.requestpath.reading import networks
from trafficmgr.requestpath.source import StaticSource


def warnings_for(
    settings: ExchangeSettings, caplog: pytest.LogCaptureFixture, **fleet: object
) -> list[str]:
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="trafficmgr.epp")
    core = RequestPath(
        StaticSource(replace(load_fleet_text(GATEWAY), **fleet), {}), RequestPathConfig()
    )
    warn_unlocatable(core, settings)
    return [r.getMessage() for r in caplog.records if "no trusted proxy" in r.getMessage()]


def test_warns_when_no_proxy_is_trusted(caplog: pytest.LogCaptureFixture) -> None:
    (warning,) = warnings_for(ExchangeSettings(), caplog)
    assert "residency rules" in warning and "unlocated_clients unrestricted" in warning


def test_quiet_with_trusted_proxies_or_without_rules(caplog: pytest.LogCaptureFixture) -> None:
    trusting = ExchangeSettings(trusted_proxies=networks(["10.0.0.0/8"]))
    assert warnings_for(trusting, caplog) == []
    assert warnings_for(ExchangeSettings(), caplog, residency=()) == []
