"""A TCP peer that accepts every connection and never answers: a network partition on loopback.

A partitioned store raises nothing: the handshake succeeds and no reply ever comes, so each
read waits for its socket timeout. The cache, hot-state and DNS partition tests point their
clients at one of these.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Blackhole:
    """A TCP listener on 127.0.0.1 that accepts every connection and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            self.accepted.append(conn)  # held open, never read from, never written to

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread (Linux)
        self.sock.close()
        for conn in self.accepted:
            conn.close()
        self._thread.join(5)
