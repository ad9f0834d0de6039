"""Probe the model, not the port: healthy only when the server answers and its model is loaded."""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from agents.heartbeat import ProbeReading

MAX_BODY_BYTES = 1024 * 1024
PROBE_KINDS = ("vllm", "tgi", "triton", "http")


def direct_opener() -> urllib.request.OpenerDirector:
    """An opener that ignores proxy settings (for the node's own inference server)."""
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


class _ProbeFailed(Exception):
    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class Prober:
    """Ask the server, with a bounded time budget, whether the expected models can serve.

    vLLM: ``/health`` then ``/v1/models``; TGI: ``/health`` then ``/info``; Triton:
    ``/v2/health/ready`` then ``/v2/models/{m}/ready`` (or the repository index when no model
    is named); ``http``: any 2xx from the URL itself.
    """

    def __init__(
        self,
        base_url: str,
        kind: str = "auto",
        models: Sequence[str] = (),
        *,
        timeout: float = 2.0,
        opener: urllib.request.OpenerDirector | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if kind != "auto" and kind not in PROBE_KINDS:
            raise ValueError(f"unknown probe kind {kind!r}; expected auto or one of {PROBE_KINDS}")
        self.base_url = base_url.rstrip("/")
        self.kind = kind
        self.models = tuple(models)
        self.timeout = timeout
        # the server is local to the node: never through an HTTP proxy from the environment
        self._opener = opener or direct_opener()
        self._clock = clock
        self._deadline = 0.0

    def probe(self, detected_kind: str | None = None) -> ProbeReading:
        """Run the probe for the configured kind (``auto``: the kind the metrics revealed)."""
        kind = self.kind
        if kind == "auto":
            kind = detected_kind if detected_kind in PROBE_KINDS else "http"
        start = self._clock()
        self._deadline = start + self.timeout
        try:
            models, facts = getattr(self, f"_probe_{kind}")()
        except _ProbeFailed as failed:
            return ProbeReading(False, self._ms(start), failed.status, failed.reason)
        except TimeoutError:
            return ProbeReading(False, self._ms(start), None, f"timeout after {self.timeout:g} s")
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                return ProbeReading(
                    False, self._ms(start), None, f"timeout after {self.timeout:g} s"
                )
            return ProbeReading(False, self._ms(start), None, f"unreachable: {reason}")
        missing = [m for m in self.models if m not in models]
        if missing:
            reason = f"model not loaded: {', '.join(missing)}"
            return ProbeReading(False, self._ms(start), 200, reason, tuple(models), facts)
        if not models and kind != "http":
            return ProbeReading(False, self._ms(start), 200, "no model loaded", (), facts)
        return ProbeReading(True, self._ms(start), 200, "ok", tuple(models), facts)

    def _ms(self, start: float) -> float:
        return (self._clock() - start) * 1000

    def _request(self, path: str, data: bytes | None = None) -> tuple[int, bytes]:
        remaining = self._deadline - self._clock()
        if remaining <= 0:
            raise TimeoutError
        url = self.base_url + path
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(url, data=data, headers=headers)
        try:
            with self._opener.open(request, timeout=remaining) as response:
                return int(response.status), response.read(MAX_BODY_BYTES)
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read(MAX_BODY_BYTES)

    def _expect_200(self, path: str, data: bytes | None = None) -> bytes:
        status, body = self._request(path, data)
        if status != 200:
            raise _ProbeFailed(f"{path} answered {status}", status)
        return body

    def _json(self, path: str, data: bytes | None = None) -> Any:
        body = self._expect_200(path, data)
        try:
            return json.loads(body)
        except ValueError as exc:
            raise _ProbeFailed(f"{path} answered something other than JSON", 200) from exc

    def _probe_http(self) -> tuple[list[str], dict[str, float]]:
        status, _ = self._request("")
        if not 200 <= status < 300:
            raise _ProbeFailed(f"answered {status}", status)
        return list(self.models), {}

    def _probe_vllm(self) -> tuple[list[str], dict[str, float]]:
        self._expect_200("/health")
        doc = self._json("/v1/models")
        data = doc.get("data") if isinstance(doc, dict) else None
        if not isinstance(data, list):
            raise _ProbeFailed("/v1/models has no model list", 200)
        return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m], {}

    def _probe_tgi(self) -> tuple[list[str], dict[str, float]]:
        self._expect_200("/health")
        info = self._json("/info")
        if not isinstance(info, dict) or not info.get("model_id"):
            raise _ProbeFailed("/info names no model", 200)
        facts: dict[str, float] = {}
        total = info.get("max_batch_total_tokens")
        if isinstance(total, (int, float)) and total > 0:
            facts["max_batch_total_tokens"] = float(total)
        return [str(info["model_id"])], facts

    def _probe_triton(self) -> tuple[list[str], dict[str, float]]:
        self._expect_200("/v2/health/ready")
        if self.models:
            for model in self.models:
                status, _ = self._request(f"/v2/models/{urllib.parse.quote(model, safe='')}/ready")
                if status != 200:
                    raise _ProbeFailed(f"model not ready: {model} ({status})", status)
            return list(self.models), {}
        index = self._json("/v2/repository/index", data=b"{}")
        if not isinstance(index, list):
            raise _ProbeFailed("/v2/repository/index is not a list", 200)
        ready = {
            str(m["name"])
            for m in index
            if isinstance(m, dict) and m.get("state") == "READY" and "name" in m
        }
        return sorted(ready), {}
