"""What a page sends over the dashboard's WebSocket, against the real ASGI app.

Malformed JSON, binary and deeply nested frames used to raise in the handler and drop the
socket; any viewer could send 16 MiB frames; the Origin check ignored the port. Now every bad
frame gets an ``error`` message on a socket that stays open (a too large one is then closed
with 1009), and the handshake's Origin must match the scheme, host and port it came to.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from dashboard import inbound
from dashboard.origin import trusted
from trafficmgr.asgi import application

PATH = "/ws/dashboard/"
ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async_to_sync(scenario)()


def browser(cookie: bytes, origin: bytes, host: bytes = b"127.0.0.1:8000") -> list[Any]:
    return [(b"origin", origin), (b"host", host), (b"cookie", cookie)]


async def opened(headers: list[Any]) -> WebsocketCommunicator:
    comm = WebsocketCommunicator(application, PATH, headers=headers)
    ok, _ = await comm.connect()
    assert ok
    assert (await comm.receive_json_from(timeout=5))["type"] == "snapshot"
    return comm


async def still_answers(comm: WebsocketCommunicator, ident: str) -> None:
    """The socket survived: a ping after the bad frame is answered."""
    await comm.send_json_to({"type": "ping", "id": ident})
    pong = await comm.receive_json_from(timeout=2)
    assert pong["type"] == "pong" and pong["id"] == ident


@pytest.mark.parametrize(
    ("frame", "code", "field"),
    [
        ("{not json", "invalid_json", "message"),
        ("[" * 2000 + "]" * 2000, "too_deep", "message"),
        ('{"type": {"a": {"b": {"c": {"d": {"e": {"f": {"g": {"h": 1}}}}}}}}}', "too_deep", ""),
        ("[1, 2]", "invalid", "message"),
        ('{"type": "shout"}', "invalid", "type"),
        ('{"type": "ping", "colour": "red"}', "invalid", "colour"),
        ('{"type": "ping", "id": true}', "invalid", "id"),
        ('{"type": "ping", "type": "ping"}', "invalid_json", "message"),
        ("NaN", "invalid", "message"),
        (b"\x00\x01binary", "binary_frame", "message"),
    ],
)
def test_a_bad_frame_gets_an_error_and_the_socket_stays(
    world: Any, make_user: Any, ws_headers: Any, frame: str | bytes, code: str, field: str
) -> None:
    headers = ws_headers(make_user("viewer"))

    async def scenario() -> None:
        comm = await opened(headers)
        if isinstance(frame, bytes):
            await comm.send_to(bytes_data=frame)
        else:
            await comm.send_to(text_data=frame)
        error = await comm.receive_json_from(timeout=2)
        assert error["type"] == "error" and error["error"] == code, error
        if field:
            assert error["field"] == field, error
        assert error["detail"]
        await still_answers(comm, "after")
        await comm.disconnect()

    run(scenario)


def test_a_16_mib_frame_is_refused_undecoded_and_the_socket_closed(
    world: Any, make_user: Any, ws_headers: Any
) -> None:
    headers = ws_headers(make_user("viewer"))
    huge = '{"type": "ping", "id": "' + "x" * (16 * 1024 * 1024) + '"}'

    async def scenario() -> None:
        comm = await opened(headers)
        await comm.send_to(text_data=huge)
        error = await comm.receive_json_from(timeout=2)
        assert error["error"] == "too_large" and "4096 bytes" in error["detail"]
        assert await comm.receive_output(timeout=2) == {
            "type": "websocket.close",
            "code": inbound.CLOSE_TOO_BIG,
        }

    run(scenario)


def test_a_socket_sending_only_garbage_is_closed_after_a_while(
    world: Any, make_user: Any, ws_headers: Any
) -> None:
    headers = ws_headers(make_user("viewer"))

    async def scenario() -> None:
        comm = await opened(headers)
        for _ in range(inbound.MAX_PROBLEMS):
            await comm.send_to(text_data="garbage")
            assert (await comm.receive_json_from(timeout=2))["type"] == "error"
        assert await comm.receive_output(timeout=2) == {
            "type": "websocket.close",
            "code": inbound.CLOSE_POLICY,
        }

    run(scenario)


def test_ping_and_a_rate_limited_snapshot(world: Any, make_user: Any, ws_headers: Any) -> None:
    headers = ws_headers(make_user("operator"))

    async def scenario() -> None:
        comm = await opened(headers)
        await still_answers(comm, "first")
        await comm.send_json_to({"type": "snapshot", "id": 7})
        refused = await comm.receive_json_from(timeout=2)
        assert refused["error"] == "too_frequent" and refused["id"] == 7
        await comm.disconnect()

    run(scenario)


@pytest.mark.parametrize(
    ("origin", "host", "accepted"),
    [
        (b"http://127.0.0.1:8000", b"127.0.0.1:8000", True),
        (b"http://127.0.0.1:1", b"127.0.0.1:8000", False),  # another port: another site
        (b"https://127.0.0.1:8000", b"127.0.0.1:8000", False),  # the socket is plain ws
        (b"http://localhost:8000", b"127.0.0.1:8000", False),
        (b"http://testserver", b"testserver", True),
        (b"http://testserver:80", b"testserver", True),  # the default port, spelled out
        (b"http://testserver:8080", b"testserver", False),
        (b"null", b"testserver", False),
        (b"http://127.0.0.1:99999", b"127.0.0.1:8000", False),
    ],
)
def test_the_origin_must_match_scheme_host_and_port(
    world: Any, make_user: Any, session_cookie: Any, origin: bytes, host: bytes, accepted: bool
) -> None:
    headers = browser(session_cookie(make_user("viewer")), origin, host)

    async def scenario() -> None:
        comm = WebsocketCommunicator(application, PATH, headers=headers)
        ok, _ = await comm.connect()
        assert ok is accepted
        if ok:
            assert (await comm.receive_json_from(timeout=5))["type"] == "snapshot"
        await comm.disconnect()

    run(scenario)


def test_a_tls_proxy_and_the_trusted_origins_are_honoured(
    world: Any, make_user: Any, session_cookie: Any, settings: Any
) -> None:
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    settings.CSRF_TRUSTED_ORIGINS = ["http://localhost:9000"]
    cookie = session_cookie(make_user("viewer"))
    behind_proxy = [*browser(cookie, b"https://testserver", b"testserver")]
    behind_proxy.append((b"x-forwarded-proto", b"https"))
    trusted = browser(cookie, b"http://localhost:9000", b"testserver")
    plain = browser(cookie, b"https://testserver", b"testserver")  # no proxy said TLS
    other = browser(cookie, b"http://localhost:9001", b"testserver")

    async def scenario() -> None:
        cases = ((behind_proxy, True), (trusted, True), (plain, False), (other, False))
        for headers, expected in cases:
            comm = WebsocketCommunicator(application, PATH, headers=headers)
            ok, _ = await comm.connect()
            assert ok is expected, headers
            await comm.disconnect()

    run(scenario)


def test_trusted_origin_patterns_cover_subdomains_only_with_a_star() -> None:
    patterns = ["https://*.example.test", "http://exact.example.test:8080"]
    assert trusted(("https", "dash.example.test", 443), patterns)
    assert trusted(("https", "example.test", 443), patterns)
    assert not trusted(("https", "badexample.test", 443), patterns)
    assert not trusted(("http", "dash.example.test", 80), patterns)
    assert trusted(("http", "exact.example.test", 8080), patterns)
    assert not trusted(("http", "sub.exact.example.test", 8080), patterns)
    assert not trusted(("http", "exact.example.test", 80), patterns)


def test_the_deployed_server_caps_messages_too() -> None:
    """uvicorn's own limit (default 16 MiB) is set where the web server is started."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    argv = [str(a) for a in compose["services"]["web"]["command"]]
    assert argv[argv.index("--ws-max-size") + 1] == str(inbound.SERVER_MAX_BYTES)
    k8s = (ROOT / "deploy" / "k8s" / "web.yaml").read_text()
    assert f'- --ws-max-size\n            - "{inbound.SERVER_MAX_BYTES}"' in k8s
    assert inbound.MAX_MESSAGE_BYTES < inbound.SERVER_MAX_BYTES
