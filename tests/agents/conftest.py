"""Fixtures for the agent tests: a fake NVML from recorded data and a real local HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.agents.fake_nvml import FakeNvml

FIXTURES = Path(__file__).parent / "fixtures"
HANG = "hang"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Answer = tuple[int, Any] | tuple[int, Any, dict[str, str]] | str
Route = Answer | Callable[[Seen], Answer]


@dataclass
class Stub:
    """A real HTTP server on 127.0.0.1; a route answers from its queue, the last one repeating."""

    url: str = ""
    routes: dict[tuple[str, str], list[Route]] = field(default_factory=dict)
    seen: list[Seen] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def on(self, method: str, path: str, *answers: Route) -> None:
        with self.lock:
            self.routes[(method, path)] = list(answers)

    def posts(self, path: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.method == "POST" and s.path == path]

    def answer(self, seen: Seen) -> Answer:
        with self.lock:
            self.seen.append(seen)
            queue = self.routes.get((seen.method, seen.path))
            if not queue:
                return (404, {"detail": "no route"})
            route = queue.pop(0) if len(queue) > 1 else queue[0]
        return route(seen) if callable(route) else route


def _handler(stub: Stub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            seen = Seen(self.command, self.path, dict(self.headers.items()), body)
            answer = stub.answer(seen)
            if isinstance(answer, str):  # HANG
                stub.release.wait(5)  # released at teardown; the client times out well before
                self.close_connection = True
                return
            status, payload = answer[0], answer[1]
            headers: dict[str, str] = answer[2] if len(answer) == 3 else {}
            if isinstance(payload, bytes):
                data = payload
            elif isinstance(payload, str):
                data = payload.encode()
            else:
                data = json.dumps(payload).encode()
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return Handler


@pytest.fixture
def stub() -> Iterator[Stub]:
    stub = Stub()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub))
    server.daemon_threads = True
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True)
    thread.start()
    yield stub
    stub.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def _isolated_var_dir() -> None:
    """The agent never touches Django settings: override tests/conftest.py's autouse fixture,
    which needs pytest-django, so these tests also run with ``-p no:django``."""


@pytest.fixture
def fake_nvml() -> FakeNvml:
    return FakeNvml.from_fixture()
