"""``python -m trafficmgr.dns``: options, and the server process starting and stopping."""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dns.exception
import dns.query
import pytest

from tests.dns.world import CITY_DB, EU_V4, FLEET_FILE, GB, NAME, ROOT, addresses, query
from trafficmgr.dns.cli import add_server_arguments, config_from_args
from trafficmgr.dns.config import parse_listen
from trafficmgr.testing.ports import TCP_AND_UDP, free_port


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:5353") == ("127.0.0.1", 5353)
    assert parse_listen("[::1]:53") == ("::1", 53)
    assert parse_listen(":8053") == ("127.0.0.1", 8053)
    assert parse_listen("0.0.0.0") == ("0.0.0.0", 5353)
    assert parse_listen("::") == ("::", 5353)
    for bad in ("127.0.0.1:http", "[::1", "example.com:53", "1.2.3.4:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    return parser.parse_args(["--fleet", "f.yaml", *argv])


def test_options_become_the_server_config() -> None:
    config = config_from_args(
        parse("--listen", "[::1]:5300", "--workers", "2", "--rrl-rate", "0", "--answers", "2")
    )
    assert (config.host, config.port, config.workers, config.answers) == ("::1", 5300, 2, 2)
    assert config.rrl_rate == 0 and config.state_file == "var/dns-table.json"
    assert config_from_args(parse("--state-file", "")).state_file is None
    with pytest.raises(ValueError):
        config_from_args(parse("--workers", "0"))


def test_rate_limit_and_tcp_options_become_the_server_config() -> None:
    config = config_from_args(
        parse(
            "--rrl-rate", "300", "--rrl-nxdomain-rate", "0", "--rrl-error-rate", "7",
            "--rrl-window", "5", "--rrl-ipv4-prefix", "22", "--rrl-ipv6-prefix", "48",
            "--rrl-exempt", "192.0.2.0/24", "--rrl-exempt", "2001:db8::/32",
            "--tcp-max-connections", "512", "--tcp-max-per-client", "4",
            "--tcp-idle-timeout", "5", "--tcp-message-timeout", "0.5",
        )
    )  # fmt: skip
    assert (config.rrl_rate, config.rrl_nxdomain_rate, config.rrl_error_rate) == (300, 0, 7)
    assert (config.rrl_window_s, config.rrl_ipv4_prefix, config.rrl_ipv6_prefix) == (5, 22, 48)
    assert config.rrl_exempt == ("192.0.2.0/24", "2001:db8::/32")
    assert (config.tcp_max_connections, config.tcp_max_per_client) == (512, 4)
    assert (config.tcp_idle_timeout_s, config.tcp_message_timeout_s) == (5, 0.5)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("--rrl-rate", "-1"), "--rrl-rate"),
        (("--rrl-window", "nan"), "--rrl-window"),
        (("--rrl-ipv4-prefix", "40"), "--rrl-ipv4-prefix"),
        (("--rrl-exempt", "my-resolvers"), "--rrl-exempt"),
        (("--tcp-max-per-client", "0"), "--tcp-max-per-client"),
        (("--tcp-message-timeout", "0"), "--tcp-message-timeout"),
        (("--tcp-idle-timeout", "inf"), "--tcp-idle-timeout"),
    ],
)
def test_a_bad_rate_limit_or_tcp_option_is_named(argv: tuple[str, str], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        config_from_args(parse(*argv))


def wait_answering(port: int, process: subprocess.Popen[str], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[1]
        try:
            dns.query.udp(query(NAME, "A"), "127.0.0.1", port=port, timeout=0.3)
            return
        except dns.exception.Timeout:
            continue
    raise AssertionError("server did not answer in time")


@contextmanager
def running_server(tmp_path: Path, *extra: str) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """Run the server process on a free port until the block ends."""
    port = free_port(TCP_AND_UDP)
    args = [sys.executable, "-m", "trafficmgr.dns", "--fleet", str(FLEET_FILE)]
    args += ["--listen", f"127.0.0.1:{port}", "--geoip-db", str(CITY_DB)]
    args += ["--state-file", str(tmp_path / "state.json"), "--rrl-rate", "0", *extra]
    process = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_answering(port, process)
        yield port, process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_server_process_answers_and_stops_on_sigterm(tmp_path: Path, workers: str) -> None:
    with running_server(tmp_path, "--workers", workers) as (port, process):
        for _ in range(10):  # several source ports: spread over the workers by SO_REUSEPORT
            message = query(NAME, "A", ecs=(GB, 32))
            reply = dns.query.udp(message, "127.0.0.1", port=port, timeout=3)
            assert addresses(reply) <= EU_V4 and addresses(reply)
        reply = dns.query.tcp(query(NAME, "A", ecs=(GB, 32)), "127.0.0.1", port=port, timeout=3)
        assert addresses(reply) <= EU_V4
        process.send_signal(signal.SIGTERM)
        out, _ = process.communicate(timeout=20)
        assert process.returncode == 0
        assert workers == "2" or f"127.0.0.1:{port}" in out


def test_bad_options_exit_with_a_message(tmp_path: Path) -> None:
    args = [sys.executable, "-m", "trafficmgr.dns", "--fleet", str(tmp_path / "missing.yaml")]
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "missing.yaml" in done.stderr


@pytest.mark.slow
def test_a_stop_that_hangs_is_cut_short(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio
    import logging

    from trafficmgr.dns import server as server_module

    class Stuck:
        async def stop(self) -> None:
            await asyncio.Event().wait()

    exits: list[int] = []
    monkeypatch.setattr(server_module.os, "_exit", exits.append)
    monkeypatch.setattr(server_module.faulthandler, "dump_traceback", lambda **kw: None)
    monkeypatch.setattr(logging, "shutdown", lambda: None)
    asyncio.run(server_module._stop_within(Stuck(), 0.05))  # type: ignore[arg-type]
    assert exits == [server_module.EXIT_STUCK]
    assert "exiting anyway" in caplog.text
