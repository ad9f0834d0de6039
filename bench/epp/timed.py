"""``python -m trafficmgr.epp`` with the time of each ext_proc message recorded, for the bench.

Run by ``bench/epp/cpu.py`` in place of ``python -m trafficmgr.epp`` (same arguments). It
times ``ExternalProcessor._answer`` (the exchange's work on one message: reading it, the
core's decision, building the replies; not gRPC's) per message kind, in nanoseconds. On
``SIGUSR1`` it writes the samples gathered since the last signal to ``EPP_TIMINGS`` (JSON:
kind → list of ns) and starts afresh, so the bench reads one load phase at a time.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import defaultdict
from typing import Any

from trafficmgr.epp import cli, server

SAMPLES: dict[str, list[int]] = defaultdict(list)
_answer = server.ExternalProcessor._answer


async def _timed(self: Any, exchange: Any, message: Any) -> Any:
    kind = message.WhichOneof("request") or "none"
    started = time.perf_counter_ns()
    try:
        return await _answer(self, exchange, message)
    finally:
        SAMPLES[kind].append(time.perf_counter_ns() - started)


def _dump(signum: int, frame: object) -> None:
    path = os.environ["EPP_TIMINGS"]
    with open(path + ".tmp", "w") as out:
        json.dump(SAMPLES, out)
    os.replace(path + ".tmp", path)
    SAMPLES.clear()


if __name__ == "__main__":
    server.ExternalProcessor._answer = _timed  # type: ignore[method-assign]
    signal.signal(signal.SIGUSR1, _dump)
    sys.exit(cli.main(sys.argv[1:]))
