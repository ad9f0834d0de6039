"""Plain HTTP calls through Envoy, for the cases the OpenAI client would hide."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def post(url: str, body: bytes | dict[str, Any], headers: dict[str, str] | None = None) -> Reply:
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    return call(urllib.request.Request(url, data=data, headers=headers or {}, method="POST"))


def get(url: str, headers: dict[str, str] | None = None) -> Reply:
    return call(urllib.request.Request(url, headers=headers or {}, method="GET"))


def call(request: urllib.request.Request) -> Reply:
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return Reply(response.status, _lower(response.headers.items()), response.read())
    except urllib.error.HTTPError as error:
        return Reply(error.code, _lower(error.headers.items()), error.read())


def _lower(items: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in items}
