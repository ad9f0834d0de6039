"""Fixtures of the publisher tests: real servers on loopback, started and stopped per test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dns_publish.servers import (
    BindView,
    Running,
    new_key,
    start_bind,
    start_knot,
    start_powerdns,
)
from trafficmgr.dns.publishers import TsigKey


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """Shadow the root conftest's Django-settings fixture: these tests run without Django."""


@dataclass
class Bind:
    server: Running
    eu: BindView  # clients from 127.0.0.2 (a GeoIP ACL in production)
    default: BindView  # everyone else

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture
def bind(tmp_path: Path) -> Iterator[Bind]:
    """BIND 9 with two views: ``eu`` for 127.0.0.2, ``default`` for the rest."""
    eu = BindView("eu", new_key("tm-eu"), "127.0.0.2")
    default = BindView("default", new_key("tm-default"), "any")
    server = start_bind(tmp_path, [eu, default])
    yield Bind(server, eu, default)
    server.stop()


@dataclass
class Knot:
    server: Running
    key: TsigKey

    @property
    def port(self) -> int:
        return self.server.port


@pytest.fixture
def knot(tmp_path: Path) -> Iterator[Knot]:
    key = new_key("tm-knot")
    server = start_knot(tmp_path, key)
    yield Knot(server, key)
    server.stop()


@pytest.fixture
def knot_no_axfr(tmp_path: Path) -> Iterator[Knot]:
    """Knot whose ACL allows our key to update but not to transfer the zone."""
    key = new_key("tm-knot")
    server = start_knot(tmp_path, key, allow_transfer=False)
    yield Knot(server, key)
    server.stop()


API_KEY = "test-api-key"


@dataclass
class PowerDns:
    server: Running
    api_key: str

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.server.api_port}"


@pytest.fixture
def powerdns(tmp_path: Path) -> Iterator[PowerDns]:
    server = start_powerdns(tmp_path, API_KEY)
    yield PowerDns(server, API_KEY)
    server.stop()
