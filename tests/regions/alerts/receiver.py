"""A webhook receiver on 127.0.0.1 (http.server in a thread) answering a scripted status list.

With ``hang_s`` it holds each answer that long, or until ``release`` is set.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """Answer each POST with the next scripted status (the last one repeats); keep the bodies."""

    def __init__(self, statuses: list[int], hang_s: float = 0.0) -> None:
        self.statuses = list(statuses)
        self.hang_s = hang_s
        # set: answer now (a receiver told to hang until released, or shut down)
        self.release = threading.Event()
        self.bodies: list[dict[str, Any]] = []
        self.answered: list[int] = []
        self.lock = threading.Lock()
        self.url = ""

    def next_status(self, body: dict[str, Any]) -> int:
        with self.lock:
            self.bodies.append(body)
            status = self.statuses[min(len(self.answered), len(self.statuses) - 1)]
            self.answered.append(status)
            return status


@contextmanager
def receiving(statuses: list[int], hang_s: float = 0.0) -> Iterator[Receiver]:
    """Run a ``Receiver`` on a free loopback port for the block."""
    receiver = Receiver(statuses, hang_s)
    stop = receiver.release

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            status = receiver.next_status(body)
            if receiver.hang_s:
                stop.wait(receiver.hang_s)
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)
