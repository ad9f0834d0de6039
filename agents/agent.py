"""The agent loop: read GPUs, scrape the server, probe the model, push; obey replies."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from agents import __version__
from agents.drill import DrillError, DrillState
from agents.heartbeat import (
    AgentStatus,
    GpuReading,
    Heartbeat,
    ProbeReading,
    SeqCounter,
    new_session,
    to_json,
)
from agents.nvml import NvmlCollector
from agents.push import Pusher, Reply
from agents.server_metrics import ServerMetrics

log = logging.getLogger(__name__)

Probe = Callable[[str | None], ProbeReading]
SKEW_WARN_S = 30.0
SILENT_POLL_S = 2.0  # how often a silenced agent asks whether its drill was cancelled
SKEW_WARN_EVERY_S = 600.0


class Agent:
    """One endpoint's agent; ``run`` until ``stop`` (safe to call from a signal handler)."""

    def __init__(
        self,
        endpoint: str,
        *,
        pusher: Pusher | None = None,
        gpu: NvmlCollector | None = None,
        server: ServerMetrics | None = None,
        probe: Probe | None = None,
        interval_s: float = 1.0,
        nvml_state: str = "ok",
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        flush_s: float = 2.0,
    ) -> None:
        self.endpoint = endpoint
        self.pusher = pusher
        self.gpu = gpu
        self.server = server
        self.probe = probe
        self.interval_s = interval_s
        self.nvml_state = nvml_state
        self.drills = DrillState(clock)
        self.seq = SeqCounter(wall)
        self.session = new_session()
        self.flush_s = flush_s
        self._clock = clock
        self._wall = wall
        self._facts: dict[str, float] = {}
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._skew_warned_at: float | None = None
        self._refused: str | None = None
        self._polled_at: float | None = None
        self.ticks = 0
        if pusher is not None:
            pusher.on_reply = self.handle_reply

    def collect(self) -> Heartbeat:
        """Take the true reading of this node now; collector failures are reported, not raised."""
        errors: list[str] = []
        gpus: tuple[GpuReading, ...] = ()
        if self.gpu is not None:
            try:
                gpus = self.gpu.read()
                errors.extend(self.gpu.errors)
            except Exception as exc:  # a broken collector must not stop the heartbeats
                log.exception("reading the GPUs failed")
                errors.append(f"gpu collector: {type(exc).__name__}: {exc}")
        server = self.server.collect(self._facts) if self.server is not None else None
        probe = None
        if self.probe is not None:
            try:
                probe = self.probe(self.server.kind if self.server is not None else None)
                self._facts = dict(probe.facts)
            except Exception as exc:
                log.exception("the probe failed unexpectedly")
                probe = ProbeReading(ok=False, reason=f"probe error: {type(exc).__name__}")
        if server is not None and probe is not None and probe.models:
            server = replace(server, models_loaded=probe.models)  # the probe checked them
        status = AgentStatus(
            version=__version__,
            nvml=self.nvml_state,
            driver=self.gpu.driver if self.gpu is not None else None,
            dropped=self.pusher.dropped if self.pusher is not None else 0,
            errors=tuple(errors),
        )
        return Heartbeat(
            endpoint=self.endpoint,
            seq=self.seq.next(),
            sent_at=self._wall(),
            interval_s=self.interval_s,
            gpus=gpus,
            server=server,
            probe=probe,
            agent=status,
            session=self.session,
        )

    def tick(self) -> Heartbeat | None:
        """Collect, let an active drill shape the report, queue it; None while silenced."""
        self.ticks += 1
        heartbeat = self.drills.apply(self.collect())
        if self.drills.silenced():
            log.debug("drill silence: heartbeat seq %d not sent", heartbeat.seq)
            self._poll_while_silent()
            return None
        if self.pusher is not None:
            self.pusher.submit(to_json(heartbeat))
        return heartbeat

    def _poll_while_silent(self) -> None:
        """Ask now and then, without reporting, whether the silence was cancelled.

        A silenced agent reads no heartbeat replies, so an operator's abort would otherwise
        wait for the instruction to expire. The poll records no heartbeat: the control plane
        still sees silence, and the drill measures what a dead agent would cause.
        """
        now = self._clock()
        if self.pusher is None or (
            self._polled_at is not None and now - self._polled_at < SILENT_POLL_S
        ):
            return
        self._polled_at = now
        reply = self.pusher.poll_drill(self.endpoint)
        if reply is not None:
            self.handle_reply(reply)

    def handle_reply(self, reply: Reply) -> None:
        """Obey ``interval_s`` and drill instructions; warn when the clocks disagree."""
        if reply.interval_s is not None and reply.interval_s != self.interval_s:
            log.info(
                "control plane set the interval to %g s (was %g s)",
                reply.interval_s,
                self.interval_s,
            )
            self.interval_s = reply.interval_s
            self._wake.set()
        if reply.drill is not None:
            try:
                change = self.drills.instruct(reply.drill, self._wall(), reply.server_time)
            except DrillError as exc:
                log.warning("ignored a drill instruction: %s", exc)
            else:
                if change:
                    log.warning("%s", change)
        if reply.server_time is not None:
            self._check_skew(reply.server_time)
        if reply.refused != self._refused:
            if reply.refused:
                log.warning(
                    "control plane took the heartbeat but did not apply it: %s (another agent "
                    "for this endpoint, or a clock that stepped back?)",
                    reply.refused,
                )
            self._refused = reply.refused

    def _check_skew(self, server_time: float) -> None:
        skew = self._wall() - server_time
        now = self._clock()
        recently = (
            self._skew_warned_at is not None and now - self._skew_warned_at < SKEW_WARN_EVERY_S
        )
        if abs(skew) > SKEW_WARN_S and not recently:
            self._skew_warned_at = now
            log.warning(
                "this node's clock is %+.0f s off the control plane's; heartbeats still count "
                "(the server uses its own receive time), but fix NTP",
                skew,
            )

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> None:
        """Tick every ``interval_s`` (start to start) until stop(), then flush and close."""
        if self.pusher is not None:
            self.pusher.start()
        try:
            while not self._stop.is_set():
                started = self._clock()
                try:
                    self.tick()
                except Exception:
                    log.exception("heartbeat tick failed")
                while not self._stop.is_set():
                    remaining = started + self.interval_s - self._clock()
                    if remaining <= 0:
                        break
                    self._wake.wait(remaining)
                    self._wake.clear()
        finally:
            log.info("stopping: sending what is left (up to %g s)", self.flush_s)
            if self.pusher is not None:
                self.pusher.stop(self.flush_s)
            if self.gpu is not None:
                self.gpu.close()
