"""What this process's pickers learn from, and what it tells the other processes.

Every picker of every region and strategy shares one output-length estimator and one latency
tail (as in ``/route`` and the simulator: answer lengths do not depend on the region, and the
tail users see is the whole service's). They learn from three sources:

- the servers' own histograms of generated tokens in heartbeats (what each grew by since this
  process last saw it: the engine's ``histogram_delta``);
- this process's completed requests, observed at once (``observe``) and queued for the
  control plane (``drain_reports``), so the other processes learn too;
- the completions other processes reported, read from the control plane's per-region stream
  (``learn_stream``); the ones this process reported itself are recognised and skipped, so
  none is counted twice.

Not thread-safe: the core calls it under its lock.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Mapping, Sequence

from trafficmgr.contracts import Completion, StreamEntry, stream_position
from trafficmgr.routing.decision import histogram_delta
from trafficmgr.routing.estimator import LatencyTail, OutputLengthEstimator
from trafficmgr.routing.picker import Picker, make_picker
from trafficmgr.routing.types import Heartbeat, OutputHistogram, Region

STORED_PREFIX_HASHES = 32  # as the control plane keeps them
OWN_MEMORY = 50_000  # own reports remembered, to skip them when the stream returns them
STREAM_REPLAY = 2_000
STREAM_PER_READ = 2_000


class Learner:
    """The shared estimator and tail, fed from heartbeats, completions and the stream."""

    def __init__(self) -> None:
        self.estimator = OutputLengthEstimator()
        self.tail = LatencyTail()
        # observe() of any picker feeds the shared estimator and tail: one does it for all
        self._teacher = make_picker("ai_aware", estimator=self.estimator, tail=self.tail)
        self._fed: dict[str, tuple[float, dict[str, OutputHistogram]]] = {}
        self._stream_at: dict[str, str] = {}
        self._own: Counter[Completion] = Counter()
        self._own_order: deque[Completion] = deque()
        self._outbox: list[Completion] = []
        self._unsettled: list[Completion] = []

    def picker(self, strategy: str, seed: int = 0) -> Picker:
        """Build a picker sharing what this process learns."""
        return make_picker(strategy, seed=seed, estimator=self.estimator, tail=self.tail)

    def completed(self, c: Completion) -> None:
        """Learn from one of this process's completions and queue it for the control plane."""
        self._teacher.observe(
            c.model,
            c.output_tokens,
            input_tokens=c.input_tokens,
            prefix_hashes=c.prefix_hashes,
            latency_s=c.latency_s,
        )
        stored = c
        if type(c.prefix_hashes) is not tuple or len(c.prefix_hashes) > STORED_PREFIX_HASHES:
            stored = Completion(
                c.endpoint,
                c.model,
                c.input_tokens,
                c.output_tokens,
                c.latency_s,
                c.prefix_hashes[:STORED_PREFIX_HASHES],
            )  # else it is already as the control plane keeps it (a frozen value)
        self._outbox.append(stored)
        self._unsettled.append(stored)  # remembered as own before it is reported
        if len(self._unsettled) >= OWN_MEMORY:
            self._settle()

    def _settle(self) -> None:
        """Remember the completions queued since last time as this process's own: here, off
        the request path (hashing a completion costs more than the rest of ``completed``)."""
        own, order = self._own, self._own_order
        for stored in self._unsettled:
            own[stored] += 1
            order.append(stored)
        self._unsettled = []
        while len(order) > OWN_MEMORY:
            old = order.popleft()
            own[old] -= 1
            if own[old] <= 0:
                del own[old]

    def drain_reports(self) -> list[Completion]:
        """Return (and forget) the completions not yet reported."""
        self._settle()  # own before the stream can return them
        out, self._outbox = self._outbox, []
        return out

    def stream_after(self, region: str) -> tuple[str | None, int]:
        """Return where to read the region's stream from, and how much to read."""
        at = self._stream_at.get(region)
        return at, STREAM_REPLAY if at is None else STREAM_PER_READ

    def learn_stream(self, region: str, entries: Sequence[StreamEntry]) -> None:
        """Learn from completions other processes reported for a region."""
        if self._unsettled:
            self._settle()
        at = self._stream_at.get(region)
        last = stream_position(at) if at is not None else None
        for entry_id, c in entries:
            position = stream_position(entry_id)
            if last is not None and position <= last:
                continue
            last, self._stream_at[region] = position, entry_id
            if self._own.get(c, 0) > 0:
                self._own[c] -= 1  # this process's own report, observed when it completed
                continue
            self._teacher.observe(
                c.model,
                c.output_tokens,
                input_tokens=c.input_tokens,
                prefix_hashes=c.prefix_hashes,
                latency_s=c.latency_s,
            )
        self._stream_at.setdefault(region, "0-0")

    def learn_heartbeats(self, region: Region, beats: Mapping[str, Heartbeat]) -> None:
        """Feed the estimator the output lengths the region's servers counted since last time."""
        for e in region.endpoints:
            hb = beats.get(e.name)
            if hb is None or hb.server is None or not hb.server.output_tokens:
                continue
            last = self._fed.get(e.name)
            if last is not None and hb.received_at <= last[0]:
                continue
            before = last[1] if last is not None else {}
            seen: dict[str, OutputHistogram] = {}
            for h in hb.server.output_tokens:
                if h.model not in e.models:
                    continue
                counts, count = histogram_delta(h, before.get(h.model))
                if count > 0:
                    self.estimator.observe_histogram(h.model, h.le, counts, count)
                seen[h.model] = h
            self._fed[e.name] = (hb.received_at, seen)
