"""Plain HTTP calls to the endpoints of the simulated-server tests' lab fleet.

The fleet is ``tests.worlds.SIM_LAB``: its ``T1`` profile has round figures so that timings
are easy to predict: prefill 1,000 tokens/s, decode 100 tokens/s aggregate and (8 x 100 / 8)
100 tokens/s for a single stream, 8 slots.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from typing import Any

from trafficmgr.simserver import SimServerThread

StartServers = Callable[..., SimServerThread]


def post_json(
    url: str, path: str, doc: Any, timeout: float = 30.0
) -> tuple[int, dict[str, Any], dict[str, str]]:
    """POST a JSON document; return status, decoded body and headers."""
    return request(url, "POST", path, json.dumps(doc).encode(), timeout)


def request(
    url: str, method: str, path: str, body: bytes | None = None, timeout: float = 30.0
) -> tuple[int, Any, dict[str, str]]:
    """Send one request with http.client; the body is decoded as JSON when it is JSON."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        headers = {k.lower(): v for k, v in response.getheaders()}
    finally:
        conn.close()
    if headers.get("content-type", "").startswith("application/json"):
        return response.status, json.loads(data), headers
    return response.status, data.decode(), headers


def chat(model: str, words: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    """A chat request body whose prompt has ``words`` tokens."""
    content = " ".join(f"w{i}" for i in range(words))
    doc = {"model": model, "messages": [{"role": "user", "content": content}]}
    return {**doc, "max_tokens": max_tokens, **extra}


class RawStream:
    """A request on a bare socket, to watch bytes arrive (or not) and to hang up mid-way."""

    def __init__(self, url: str, path: str, doc: Any = None, *, raw: bytes = b"") -> None:
        """POST ``doc`` as JSON to ``path``, or send ``raw`` bytes as they are."""
        host, port = url.removeprefix("http://").rsplit(":", 1)
        if not raw:
            body = json.dumps(doc).encode()
            raw = (
                f"POST {path} HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        self.sock = socket.create_connection((host, int(port)), timeout=10)
        self.sock.sendall(raw)
        self.received = b""

    def read_until(self, marker: bytes, timeout: float = 10.0) -> bytes:
        """Read until ``marker`` has arrived; return everything so far."""
        deadline = time.monotonic() + timeout
        while marker not in self.received:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{marker!r} did not arrive; got {self.received[-300:]!r}")
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed before {marker!r}; got {self.received[-300:]!r}")
            self.received += chunk
        return self.received

    def read_for(self, seconds: float) -> bytes:
        """Return what arrives within ``seconds`` (the connection must stay open)."""
        deadline, got = time.monotonic() + seconds, b""
        while (left := deadline - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                break
            if not chunk:
                raise ConnectionError("the server closed the connection")
            got += chunk
        self.received += got
        return got

    def close(self) -> None:
        self.sock.close()
