"""Knot's kdig against the server on real sockets: geo answers with and without ECS."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.dns.world import AP_V4, EU_V4, GB, JP, NAME, US, US_V4, ZONE, quiet_config
from trafficmgr.dns.server import DnsServer, ServerThread

pytestmark = pytest.mark.integration


@pytest.fixture
def kdig(make_server: Callable[..., DnsServer]) -> Iterator[Callable[..., list[str]]]:
    """Return a function running kdig against a started server; its output lines."""
    binary = shutil.which("kdig")
    if binary is None:
        pytest.skip("kdig not installed (apt-get install knot-dnsutils)")
    thread = ServerThread(make_server(quiet_config()))
    host, port = thread.start()

    def run(*args: str) -> list[str]:
        done = subprocess.run(
            [binary, f"@{host}", "-p", str(port), "+time=2", "+retry=1", *args],
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split("\n")

    yield run
    thread.stop()


def answers(lines: list[str]) -> set[str]:
    return {line.strip() for line in lines if line.strip()}


def test_kdig_with_ecs_gets_the_region_of_the_subnet(kdig: Callable[..., list[str]]) -> None:
    assert answers(kdig(NAME, "A", f"+subnet={GB}/32", "+short")) <= EU_V4
    assert answers(kdig(NAME, "A", f"+subnet={US}/29", "+short")) <= US_V4  # a US network
    assert answers(kdig(NAME, "A", "+subnet=175.16.199.0/24", "+short")) == AP_V4  # CN
    assert answers(kdig(NAME, "A", f"+subnet={JP}/48", "+short")) == AP_V4
    assert answers(kdig(NAME, "A", f"+subnet={GB}/32", "+short", "+tcp")) <= EU_V4
    assert all(answers(kdig(NAME, "A", f"+subnet={a}", "+short")) for a in (GB, US))


def test_kdig_reply_carries_the_subnet_and_its_scope(kdig: Callable[..., list[str]]) -> None:
    full = "\n".join(kdig(NAME, "A", f"+subnet={GB}/32"))
    assert "NOERROR" in full
    assert f"CLIENT-SUBNET: {GB}/32/" in full  # echoed, with the scope the answer holds for


def test_kdig_without_ecs_is_answered_by_the_source_address(
    kdig: Callable[..., list[str]],
) -> None:
    got = answers(kdig(NAME, "A", "+short"))  # 127.0.0.1 is nowhere: the default zone
    assert len(got) == 1 and got <= EU_V4 | US_V4 | AP_V4
    assert answers(kdig(NAME, "AAAA", "+short", "+noedns"))
    soa = kdig(ZONE, "SOA", "+short")
    assert soa[0].startswith(f"ns1.{ZONE}. hostmaster.{ZONE}.")
