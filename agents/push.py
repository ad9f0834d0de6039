"""Heartbeat delivery: a bounded newest-wins buffer, retries with backoff and jitter, replies."""

from __future__ import annotations

import email.utils
import http.client
import json
import logging
import math
import random
import re
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

HEARTBEAT_PATH = "/api/v1/heartbeats/"
DRILL_POLL_TIMEOUT_S = 1.0
MAX_REPLY_BYTES = 64 * 1024
MIN_INTERVAL_S = 0.05
MAX_INTERVAL_S = 3600.0
# The heartbeat itself is wrong: resending it cannot help, so it is dropped.
PERMANENT_STATUSES = frozenset({400, 409, 410, 413, 415, 422})
# Optional per-GPU keys newer than some control planes. Agents are upgraded node by node, often
# before the control plane; one that refuses such a key as unknown gets heartbeats without it.
OPTIONAL_GPU_KEYS = frozenset({"util_source"})
OPTIONAL_SERVER_KEYS = frozenset({"output_tokens"})  # omitted as "server.<key>"
OPTIONAL_KEYS = frozenset({"session"})  # top-level keys an older control plane may not know
_GPU_FIELD = re.compile(r"gpus\[\d+\]\.(\w+)")
_SERVER_FIELD = re.compile(r"server\.(\w+)")
MAX_ERROR_BYTES = 4096


@dataclass(frozen=True, slots=True)
class Reply:
    """What the control plane answered to one heartbeat."""

    status: int
    interval_s: float | None = None
    drill: Any = None  # the raw instruction; DrillState reads it
    server_time: float | None = None  # from the Date header: the control plane's clock
    garbage: bool = False  # a 2xx whose body was not the expected JSON object
    refused: str | None = None  # taken but not applied ({"accepted": false, "reason": ...})


class PushError(Exception):
    def __init__(
        self,
        reason: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
        body: bytes = b"",
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after
        self.body = body  # the start of an error reply


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, email.utils.parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _server_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def parse_reply(status: int, body: bytes, date: str | None = None) -> Reply:
    """Read a 2xx reply; anything unexpected is flagged as garbage, never raised."""
    server_time = _server_time(date)
    if not body.strip():
        return Reply(status, server_time=server_time)
    try:
        doc = json.loads(body)
    except ValueError:
        return Reply(status, server_time=server_time, garbage=True)
    if not isinstance(doc, dict):
        return Reply(status, server_time=server_time, garbage=True)
    interval = doc.get("interval_s")
    garbage = False
    if interval is not None:
        valid = isinstance(interval, (int, float)) and not isinstance(interval, bool)
        if valid and math.isfinite(interval) and interval > 0:
            interval = min(max(float(interval), MIN_INTERVAL_S), MAX_INTERVAL_S)
        else:
            interval, garbage = None, True
    refused = None
    if doc.get("accepted") is False:
        refused = str(doc.get("reason") or "not accepted")[:200]
    return Reply(status, interval, doc.get("drill"), server_time, garbage, refused)


def _error_body(exc: urllib.error.HTTPError) -> bytes:
    try:
        return exc.read(MAX_ERROR_BYTES)
    except (OSError, ValueError):
        return b""


def _detail(body: bytes) -> str:
    """The start of an error body, for the log (the control plane names the bad field)."""
    text = " ".join(body[:300].decode("utf-8", errors="replace").split())
    return f": {text}" if text else ""


def _optional_key(path: str) -> str | None:
    """Name an optional key by its path: ``util_source`` (per GPU), ``server.output_tokens``
    or a top-level one (``session``)."""
    if path in OPTIONAL_KEYS:
        return path
    match = _GPU_FIELD.fullmatch(path)
    if match is not None and match.group(1) in OPTIONAL_GPU_KEYS:
        return match.group(1)
    match = _SERVER_FIELD.fullmatch(path)
    if match is not None and match.group(1) in OPTIONAL_SERVER_KEYS:
        return path
    return None


def unknown_optional_key(body: bytes) -> str | None:
    """Return the optional key a 400 reply refuses as an unknown field, if it does."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    fields = doc.get("fields") if isinstance(doc, dict) else None
    if not isinstance(fields, dict):
        return None
    for path, messages in fields.items():
        key = _optional_key(str(path))
        if key is None:
            continue
        if isinstance(messages, list) and any("unknown field" in str(m) for m in messages):
            return key
    return None


def control_plane_opener(ca_file: str | None = None) -> urllib.request.OpenerDirector:
    """An opener for the control plane: environment proxies honoured, optional private CA."""
    if ca_file:
        context = ssl.create_default_context(cafile=ca_file)
        return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener()


class Pusher:
    """Send heartbeats oldest first; while the control plane is away keep only the newest few."""

    def __init__(
        self,
        control_plane: str,
        token: str,
        *,
        timeout: float = 5.0,
        buffer_size: int = 16,
        backoff_base: float = 0.5,
        backoff_max: float = 10.0,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        opener: urllib.request.OpenerDirector | None = None,
        on_reply: Callable[[Reply], None] | None = None,
    ) -> None:
        self.url = control_plane.rstrip("/") + HEARTBEAT_PATH
        self.drill_polls = True  # False once the control plane turns out not to offer them
        self._token = token
        self.timeout = timeout
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self._rng = rng or random.Random()
        self._clock = clock
        self._opener = opener or control_plane_opener()
        self.on_reply = on_reply
        self._buffer: deque[dict[str, Any]] = deque(maxlen=max(1, buffer_size))
        self._cond = threading.Condition()
        self._next_attempt = 0.0
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._last_error: str | None = None
        self.failures = 0  # consecutive failed attempts
        self.dropped = 0  # evicted from the full buffer, or refused for good by the server
        self.sent = 0
        self.garbage_replies = 0
        self.omitted: set[str] = set()  # optional GPU keys the control plane does not know

    def submit(self, heartbeat: dict[str, Any]) -> None:
        """Queue a heartbeat; when the buffer is full the oldest one is dropped."""
        with self._cond:
            if len(self._buffer) == self._buffer.maxlen:
                self.dropped += 1
            self._buffer.append(heartbeat)
            self._cond.notify_all()

    def pending(self) -> int:
        with self._cond:
            return len(self._buffer)

    def retry_in(self) -> float:
        """Seconds until the next delivery attempt is allowed (0: now)."""
        with self._cond:
            return max(0.0, self._next_attempt - self._clock())

    def snapshot(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._buffer)

    def post(self, heartbeat: dict[str, Any], timeout: float | None = None) -> Reply:
        """POST one heartbeat; raise PushError saying whether a retry can help."""
        body = json.dumps(self._outgoing(heartbeat), allow_nan=False, separators=(",", ":"))
        request = urllib.request.Request(
            self.url,
            data=body.encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {self._token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            return self._exchange(request, timeout or self.timeout)
        except urllib.error.HTTPError as exc:
            with exc:
                status = exc.code
                retry_after = _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
                error_body = _error_body(exc)
            raise PushError(
                f"HTTP {status}{_detail(error_body)}",
                retryable=status not in PERMANENT_STATUSES,
                status=status,
                retry_after=retry_after,
                body=error_body,
            ) from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            reason = getattr(exc, "reason", None) or exc
            if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError):
                reason = f"no answer within {timeout or self.timeout:g} s"
            raise PushError(f"{type(exc).__name__}: {reason}", retryable=True) from exc

    def _exchange(self, request: urllib.request.Request, timeout: float) -> Reply:
        """Send ``request``; read a 2xx reply (errors raise as urllib raises them)."""
        with self._opener.open(request, timeout=timeout) as response:
            return parse_reply(
                int(response.status), response.read(MAX_REPLY_BYTES), response.headers.get("Date")
            )

    def poll_drill(self, endpoint: str) -> Reply | None:
        """Ask for the endpoint's pending drill instruction without sending a heartbeat.

        For a silenced agent (``GET heartbeats/{endpoint}/drill``). Failures only mean no news:
        None, logged at debug level; a control plane without the route (404) is not asked again.
        """
        if not self.drill_polls:
            return None
        request = urllib.request.Request(
            f"{self.url}{urllib.parse.quote(endpoint, safe='')}/drill",
            method="GET",
            headers={"Authorization": f"Bearer {self._token}", "Accept": "application/json"},
        )
        try:
            return self._exchange(request, DRILL_POLL_TIMEOUT_S)
        except urllib.error.HTTPError as exc:
            with exc:
                if exc.code == 404:
                    log.info("the control plane offers no drill polls; waiting for expiry")
                    self.drill_polls = False
                else:
                    log.debug("drill poll: HTTP %d", exc.code)
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            log.debug("drill poll failed: %s", exc)
        return None

    def _outgoing(self, heartbeat: dict[str, Any]) -> dict[str, Any]:
        """The heartbeat without the optional keys the control plane refused."""
        if not self.omitted:
            return heartbeat
        out = {k: v for k, v in heartbeat.items() if k not in self.omitted}
        gpus = heartbeat.get("gpus")
        if isinstance(gpus, list) and not self.omitted.isdisjoint(OPTIONAL_GPU_KEYS):
            kept = [
                {k: v for k, v in g.items() if k not in self.omitted} if isinstance(g, dict) else g
                for g in gpus
            ]
            out = {**out, "gpus": kept}
        server = heartbeat.get("server")
        if isinstance(server, dict):
            dropped = [k for k in server if f"server.{k}" in self.omitted]
            if dropped:
                out = {**out, "server": {k: v for k, v in server.items() if k not in dropped}}
        return out

    def backoff_delay(self, retry_after: float | None = None) -> float:
        """Exponential backoff with equal jitter, at least what Retry-After asked (capped)."""
        ceiling = min(self.backoff_max, self.backoff_base * 2.0 ** max(0, self.failures - 1))
        delay = ceiling / 2 + self._rng.uniform(0, ceiling / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max))
        return delay

    def deliver(self, deadline: float | None = None) -> int:
        """Send what is buffered, oldest first, until empty, a failure or the deadline."""
        delivered = 0
        while True:
            with self._cond:
                if not self._buffer or (self._stopping and deadline is None):
                    return delivered
                heartbeat = self._buffer[0]
            timeout = self.timeout
            if deadline is not None:
                timeout = min(timeout, deadline - self._clock())
                if timeout <= 0:
                    return delivered
            try:
                reply = self.post(heartbeat, timeout)
            except PushError as exc:
                if not self._failed(heartbeat, exc):
                    return delivered
                continue
            self._delivered(heartbeat, reply)
            delivered += 1

    def _forget(self, heartbeat: dict[str, Any]) -> None:
        with self._cond:
            if self._buffer and self._buffer[0] is heartbeat:
                self._buffer.popleft()

    def _failed(self, heartbeat: dict[str, Any], exc: PushError) -> bool:
        """Record a failure; True when the next heartbeat may be tried at once."""
        key = unknown_optional_key(exc.body) if exc.status == 400 else None
        if key is not None and key not in self.omitted:
            self.omitted.add(key)
            log.warning(
                "the control plane does not know the optional %s (an older version?); "
                "heartbeats go without it",
                key if key.startswith("server.") or key in OPTIONAL_KEYS else f"gpus[].{key}",
            )
            return True  # the same heartbeat goes again at once, without the key
        if not exc.retryable:
            message = f"control plane refused a heartbeat for good ({exc.reason}); dropped"
            log.log(logging.ERROR if message != self._last_error else logging.DEBUG, "%s", message)
            self._last_error = message
            self._forget(heartbeat)
            with self._cond:
                self.dropped += 1
            return True
        self.failures += 1
        delay = self.backoff_delay(exc.retry_after)
        with self._cond:
            self._next_attempt = self._clock() + delay
        hint = " (check the agent token and endpoint name)" if exc.status in (401, 403, 404) else ""
        message = f"heartbeat to {self.url} failed: {exc.reason}{hint}"
        level = logging.WARNING if message != self._last_error else logging.DEBUG
        log.log(level, "%s; retrying in %.1f s", message, delay)
        self._last_error = message
        return False

    def _delivered(self, heartbeat: dict[str, Any], reply: Reply) -> None:
        self._forget(heartbeat)
        if self.failures:
            log.warning("control plane reachable again after %d failed attempts", self.failures)
        self.failures, self._last_error = 0, None
        self.sent += 1
        with self._cond:
            self._next_attempt = 0.0
        if reply.garbage:
            self.garbage_replies += 1
            log.warning(
                "control plane reply to seq %s was not the expected JSON; ignored",
                heartbeat.get("seq"),
            )
        if self.on_reply is not None:
            self.on_reply(reply)

    def start(self) -> None:
        """Deliver from a background thread until stop()."""
        self._thread = threading.Thread(target=self._run, name="heartbeat-push", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    wait = self._next_attempt - self._clock()
                    if self._buffer and wait <= 0:
                        break
                    self._cond.wait(wait if self._buffer else None)
                if self._stopping:
                    return
            try:
                self.deliver()
            except Exception:  # a bug here must not end delivery for good
                log.exception("heartbeat delivery failed unexpectedly")
                with self._cond:
                    self._next_attempt = self._clock() + self.backoff_max

    def stop(self, flush_s: float = 2.0) -> None:
        """Stop the thread, then try once more, within ``flush_s``, to send what is left."""
        deadline = self._clock() + flush_s
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - self._clock()))
        if self._thread is None or not self._thread.is_alive():
            with self._cond:
                self._next_attempt = 0.0
            self.deliver(deadline)
