"""Drive an ASGI application from a sync test: one HTTP request in, status/headers/body out."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AsgiReply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Recorder:
    """An ASGI app that notes the paths it was asked for, then hands them to ``app``."""

    app: Any
    paths: list[str] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.paths.append(scope["path"])
        await self.app(scope, receive, send)


def call(
    app: Any,
    path: str,
    body: bytes = b"",
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    query: bytes = b"",
    scheme: str = "http",
    chunks: Sequence[bytes] | None = None,
) -> AsgiReply:
    """Send one request (``chunks``: the body in several messages, no Content-Length)."""
    given = {"host": "testserver", **(headers or {})}
    if chunks is None:
        given.setdefault("content-length", str(len(body)))
        chunks = [body]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": scheme,
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in given.items()],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }
    return asyncio.run(_run(app, scope, list(chunks)))


def call_together(app: Any, requests: Sequence[tuple[str, bytes, dict[str, str]]]) -> list[Any]:
    """Send (path, body, headers) requests at once, on one event loop; replies in order."""
    scopes = []
    for path, body, headers in requests:
        given = {"host": "testserver", "content-length": str(len(body)), **headers}
        scopes.append(
            {
                "type": "http",
                "method": "POST",
                "scheme": "http",
                "path": path,
                "query_string": b"",
                "root_path": "",
                "headers": [(k.lower().encode(), v.encode("latin-1")) for k, v in given.items()],
                "client": ("127.0.0.1", 50000),
            }
        )

    async def run() -> list[Any]:
        replies = [
            _run(app, scope, [body]) for scope, (_, body, _) in zip(scopes, requests, strict=True)
        ]
        return list(await asyncio.gather(*replies))

    return asyncio.run(run())


async def _run(app: Any, scope: dict[str, Any], chunks: list[bytes]) -> AsgiReply:
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)  # the client stays connected until the reply is sent
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers: dict[str, str] = {}
    for name, value in start["headers"]:
        key = name.decode().title()
        headers[key] = f"{headers[key]}, {value.decode()}" if key in headers else value.decode()
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return AsgiReply(start["status"], headers, body)
