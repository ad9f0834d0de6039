"""Serve the DNS server's Prometheus text over HTTP, collecting every worker's counters.

One listener per server, in the process that owns ``--metrics HOST:PORT``: ``MetricsHttp``
runs a ``ThreadingHTTPServer`` in a daemon thread and answers ``GET /metrics`` with
``exporter.render`` of what its ``collect`` returns (anything else: 404). Counters are only
ever read on the thread that changes them:

- one process: ``loop_collector`` asks the server's event loop for a snapshot
  (``run_coroutine_threadsafe``) and waits at most ``ASK_TIMEOUT_S``;
- ``--workers N``: the parent holds a ``WorkerLink`` per worker, one end of a pipe; each
  worker's event loop answers on the other end (``answer_on``). A request carries a number
  and its answer repeats it, so an answer that came too late is never taken for the next one.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import count
from multiprocessing.connection import Connection
from typing import Any

from trafficmgr.dns.exporter import Serving, Snapshot, render, snapshot

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
ASK_TIMEOUT_S = 2.0

Collect = Callable[[], Sequence[tuple[str, Snapshot | None]]]


class MetricsHttp:
    """``GET /metrics`` on HOST:PORT, from a daemon thread."""

    def __init__(self, host: str, port: int, collect: Collect) -> None:
        self._collect = collect
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        handler = _handler(self.text)
        server_class = type("Server", (ThreadingHTTPServer,), {"address_family": family})
        self._http: ThreadingHTTPServer = server_class((host, port), handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="dns-metrics", daemon=True
        )

    @property
    def address(self) -> tuple[str, int]:
        """Return the bound host and port (the real port when asked for port 0)."""
        host, port = self._http.server_address[:2]
        return str(host), int(port)

    def start(self) -> MetricsHttp:
        self._thread.start()
        log.info("DNS metrics on http://%s:%d/metrics", *self.address)
        return self

    def stop(self) -> None:
        """Stop answering and close the port (also when it was never started)."""
        if self._thread.is_alive():
            self._http.shutdown()
            self._thread.join(5)
        self._http.server_close()

    def text(self) -> str:
        """Return the Prometheus text of every worker now."""
        return render(self._collect())


def _handler(text: Callable[[], str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._reply(404, b"not found: try /metrics\n", "text/plain; charset=utf-8")
                return
            try:
                body = text().encode()
            except Exception:  # a scrape must never take the server down
                log.exception("rendering DNS metrics failed")
                self._reply(500, b"metrics unavailable\n", "text/plain; charset=utf-8")
                return
            self._reply(200, body, CONTENT_TYPE)

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("metrics %s: " + format, self.address_string(), *args)

    return Handler


def loop_collector(server: Serving, loop: asyncio.AbstractEventLoop) -> Collect:
    """Collect one server's snapshot on its event loop's thread."""

    async def take() -> Snapshot:
        return snapshot(server)

    def collect() -> list[tuple[str, Snapshot | None]]:
        try:
            got = asyncio.run_coroutine_threadsafe(take(), loop).result(ASK_TIMEOUT_S)
        except Exception:  # loop stopped or busy past the timeout: the worker is not up
            return [("0", None)]
        return [("0", got)]

    return collect


class WorkerLink:
    """The parent's end of one worker's pipe."""

    def __init__(self, worker: str, conn: Connection) -> None:
        self.worker = worker
        self._conn = conn
        self._lock = threading.Lock()
        self._ids = count(1)

    def ask(self, timeout: float = ASK_TIMEOUT_S) -> Snapshot | None:
        """Return the worker's snapshot, or None when it does not answer in time."""
        with self._lock:
            ident = next(self._ids)
            deadline = time.monotonic() + timeout
            try:
                self._conn.send(ident)
                while (left := deadline - time.monotonic()) > 0 and self._conn.poll(left):
                    answered, snap = self._conn.recv()
                    if answered == ident:
                        return dict(snap)
            except (OSError, EOFError, ValueError, TypeError):
                return None
            return None


def links_collector(links: Sequence[WorkerLink]) -> Collect:
    """Collect every worker's snapshot over its pipe."""

    def collect() -> list[tuple[str, Snapshot | None]]:
        return [(link.worker, link.ask()) for link in links]

    return collect


def answer_on(conn: Connection, server: Serving, loop: asyncio.AbstractEventLoop) -> None:
    """Answer the parent's snapshot requests on ``conn`` from the worker's event loop."""
    fd = conn.fileno()

    def on_request() -> None:
        try:
            while conn.poll():
                ident = conn.recv()
                conn.send((ident, snapshot(server)))
        except (OSError, EOFError):  # the parent is gone: nobody will ask again
            loop.remove_reader(fd)

    loop.add_reader(fd, on_request)
