"""A simulated GPU node: a small queueing model of an LLM server on N GPUs.

Requests arrive from a trace or a Poisson process, wait for a batch slot and KV-cache room,
are prefilled first-come first-served, then decode together. The model produces the numbers
the real agent reads: a vLLM-shaped /metrics page (``metrics_text``), GPU state for the
NVML-shaped facade in ``sim_nvml`` and a probe answer, so --simulate exercises the same
parsing code as a real node.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agents.heartbeat import ProbeReading
from agents.sim_traces import PoissonArrivals, TraceArrivals, TraceRequest


@dataclass(frozen=True, slots=True)
class SimGpu:
    """Per-GPU service rates (the fleet file's gpu_profiles) and NVML-visible facts."""

    name: str
    nvml_name: str
    prefill_tokens_per_s: float
    decode_tokens_per_s: float  # aggregate, at full concurrency
    max_concurrency: int
    mem_total_mb: float
    power_limit_w: float
    idle_power_w: float


SIM_GPUS: dict[str, SimGpu] = {
    "H100": SimGpu("H100", "NVIDIA H100 80GB HBM3", 12000, 2400, 64, 81559, 700, 72),
    "A100": SimGpu("A100", "NVIDIA A100-SXM4-80GB", 6000, 1300, 48, 81920, 400, 58),
    "L4": SimGpu("L4", "NVIDIA L4", 1500, 350, 16, 23034, 72, 17),
}
# vLLM's 1-2-5 bucket bounds for vllm:request_generation_tokens (up to the model's length)
GENERATION_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)
# vLLM's own bucket bounds for vllm:time_to_first_token_seconds
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
KV_TOKENS_PER_SLOT = 2048
SINGLE_STREAM_SPEEDUP = 3.0  # a lone request decodes this much faster than one in a full batch
STEP_S = 0.05
MAX_CATCH_UP_S = 30.0  # after a long pause, skip ahead rather than replay it all
WARM_UP_S = 30.0  # simulated history before the first reading: start in steady state
MEAN_INPUT, MEAN_OUTPUT = 1024.0, 256.0


@dataclass(slots=True)
class _Request:
    arrival: float
    input_tokens: int
    output_tokens: int
    prefill_left: float
    decoded: float = 0.0


@dataclass(slots=True)
class GpuState:
    util_pct: float
    mem_used_mb: float
    temp_c: float
    power_w: float


def _ewma(old: float, new: float, dt: float, tau: float) -> float:
    return old + (new - old) * (1 - math.exp(-dt / tau))


class NodeSimulation:
    """One endpoint's GPUs and server, advanced to the clock whenever it is read."""

    def __init__(
        self,
        gpu: SimGpu,
        gpus: int = 8,
        *,
        load: float = 0.6,
        trace: Sequence[TraceRequest] | None = None,
        seed: int = 0,
        models: Sequence[str] = ("llama-3-8b",),
        endpoint: str = "sim",
        clock: Callable[[], float] = time.monotonic,
        warm_up_s: float = WARM_UP_S,
    ) -> None:
        self.gpu, self.gpus, self.load = gpu, max(1, gpus), max(0.0, load)
        self.models = tuple(models) or ("llama-3-8b",)
        self.endpoint = endpoint
        self._rng = random.Random(seed)
        self._clock = clock
        self._t0 = clock() - warm_up_s
        self.t = 0.0
        self.prefill_rate = gpu.prefill_tokens_per_s * self.gpus
        self.decode_rate = gpu.decode_tokens_per_s * self.gpus
        self.max_running = gpu.max_concurrency * self.gpus
        self.kv_capacity = self.max_running * KV_TOKENS_PER_SLOT
        self._arrivals = self._make_arrivals(trace)
        self.waiting: deque[_Request] = deque()
        self.running: list[_Request] = []
        self.kv_used = 0.0
        self.prompt_tokens = self.generated_tokens = 0.0
        self.finished = 0
        self.ttft_counts = [0] * (len(TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0
        self.output_counts = [0] * (len(GENERATION_BUCKETS) + 1)  # per finished request
        self.output_sum = 0
        self._busy = 0.0  # share of capacity in use, smoothed
        self._offsets = [
            (self._rng.uniform(-3, 3), self._rng.uniform(0.97, 1.03)) for _ in range(self.gpus)
        ]
        self._gpu = [
            GpuState(
                0.0, gpu.mem_total_mb * 0.9 + self._rng.uniform(200, 600), 32.0, gpu.idle_power_w
            )
            for _ in range(self.gpus)
        ]
        self.advance_to(warm_up_s)

    def _work_s(self, input_tokens: float, output_tokens: float) -> float:
        """Node-seconds one request takes at full rate: what load is measured against."""
        return input_tokens / self.prefill_rate + output_tokens / self.decode_rate

    def _make_arrivals(
        self, trace: Sequence[TraceRequest] | None
    ) -> PoissonArrivals | TraceArrivals:
        if not trace:
            rate = self.load / self._work_s(MEAN_INPUT, MEAN_OUTPUT)
            return PoissonArrivals(rate, self._rng, MEAN_INPUT, MEAN_OUTPUT)
        span = max(trace[-1].at, 1.0)
        offered = sum(self._work_s(r.input_tokens, r.output_tokens) for r in trace) / span
        scale = offered / self.load if self.load > 0 else 1e9
        return TraceArrivals(list(trace), scale, offset=self._rng.uniform(0, span * scale))

    def sync(self) -> None:
        """Advance the model to the present."""
        self.advance_to(self._clock() - self._t0)

    def advance_to(self, t: float) -> None:
        if t - self.t > MAX_CATCH_UP_S:
            self._arrivals.until(t - MAX_CATCH_UP_S)  # arrivals in the skipped span are lost
            self.t = t - MAX_CATCH_UP_S
        while self.t < t - 1e-9:
            self._step(min(STEP_S, t - self.t))

    def _step(self, dt: float) -> None:
        end = self.t + dt
        for req in self._arrivals.until(end):
            self.waiting.append(
                _Request(req.at, req.input_tokens, req.output_tokens, req.input_tokens)
            )
        self._admit()
        pending = sum(r.prefill_left for r in self.running)
        prefill_s = min(dt, pending / self.prefill_rate)
        self._prefill(prefill_s * self.prefill_rate, end)
        decode_used = self._decode(dt - prefill_s)
        busy = (prefill_s + decode_used / self.decode_rate) / dt
        self._busy = _ewma(self._busy, min(1.0, busy), dt, 1.0)
        self._update_gpus(dt)
        self.t = end

    def _admit(self) -> None:
        while self.waiting and len(self.running) < self.max_running:
            head = self.waiting[0]
            if self.running and self.kv_used + head.input_tokens > self.kv_capacity:
                break  # no KV-cache room: it waits, as vLLM's scheduler makes it
            self.running.append(self.waiting.popleft())
            self.kv_used += head.input_tokens

    def _prefill(self, budget: float, end: float) -> None:
        for req in self.running:
            if budget <= 0:
                break
            if req.prefill_left <= 0:
                continue
            done = min(budget, req.prefill_left)
            req.prefill_left -= done
            budget -= done
            self.prompt_tokens += done
            if req.prefill_left <= 0:
                self._first_token(req, end)

    def _first_token(self, req: _Request, at: float) -> None:
        ttft = max(0.0, at - req.arrival)
        self.ttft_counts[bisect.bisect_left(TTFT_BUCKETS, ttft)] += 1
        self.ttft_sum += ttft
        req.decoded = 1.0
        self.generated_tokens += 1
        self.kv_used += 1

    def _decode(self, seconds: float) -> float:
        """Decode for ``seconds``; return the tokens produced."""
        decoding = [r for r in self.running if r.prefill_left <= 0]
        if seconds <= 0 or not decoding:
            return 0.0
        single = SINGLE_STREAM_SPEEDUP * self.decode_rate / self.max_running
        per_request = min(single, self.decode_rate / len(decoding)) * seconds
        produced = 0.0
        for req in decoding:
            step = min(per_request, req.output_tokens - req.decoded)
            req.decoded += step
            produced += step
        self.generated_tokens += produced
        self.kv_used += produced
        done = [r for r in decoding if r.decoded >= r.output_tokens - 1e-9]
        for req in done:
            self.running.remove(req)
            self.kv_used -= req.input_tokens + req.decoded
            self.finished += 1
            generated = round(req.output_tokens)
            self.output_counts[bisect.bisect_left(GENERATION_BUCKETS, generated)] += 1
            self.output_sum += generated
        self.kv_used = max(0.0, self.kv_used)
        return produced

    def _update_gpus(self, dt: float) -> None:
        gpu = self.gpu
        for (temp_offset, power_factor), state in zip(self._offsets, self._gpu, strict=True):
            util = 100.0 * math.sqrt(self._busy)  # NVML's busy-time reading saturates early
            state.util_pct = min(100.0, max(0.0, util + self._rng.uniform(-1.5, 1.5)))
            power = gpu.idle_power_w + (gpu.power_limit_w - gpu.idle_power_w) * self._busy**0.8
            state.power_w = _ewma(
                state.power_w, min(gpu.power_limit_w, power * power_factor), dt, 2.0
            )
            target = 30.0 + temp_offset + 42.0 * state.power_w / gpu.power_limit_w
            state.temp_c = _ewma(state.temp_c, target, dt, 20.0)

    def gpu_state(self, index: int) -> GpuState:
        return self._gpu[index]

    @property
    def kv_usage(self) -> float:
        return min(1.0, self.kv_used / self.kv_capacity)

    def probe(self, detected_kind: str | None = None) -> ProbeReading:
        """Answer like a loaded model: a few ms, more when the queue is long."""
        self.sync()
        latency = 2.0 + 0.5 * len(self.waiting) + self._rng.uniform(0, 1.0)
        return ProbeReading(True, latency, 200, "ok", self.models)

    def metrics_text(self) -> str:
        """A vLLM-shaped /metrics page (v1 engine names) of the current state."""
        self.sync()
        label = f'engine="0",model_name="{self.models[0]}"'
        lines: list[str] = []
        for name, kind, value in (
            ("num_requests_running", "gauge", len(self.running)),
            ("num_requests_waiting", "gauge", len(self.waiting)),
            ("kv_cache_usage_perc", "gauge", self.kv_usage),
            ("prompt_tokens_total", "counter", round(self.prompt_tokens)),
            ("generation_tokens_total", "counter", round(self.generated_tokens)),
            ("request_success_total", "counter", self.finished),
        ):
            lines += [f"# TYPE vllm:{name} {kind}", f"vllm:{name}{{{label}}} {float(value)!r}"]
        lines += _histogram_lines(
            "vllm:time_to_first_token_seconds", label, TTFT_BUCKETS, self.ttft_counts, self.ttft_sum
        )
        lines += _histogram_lines(
            "vllm:request_generation_tokens",
            label,
            tuple(float(b) for b in GENERATION_BUCKETS),
            self.output_counts,
            float(self.output_sum),
        )
        return "\n".join(lines) + "\n"


def _histogram_lines(
    name: str, label: str, bounds: Sequence[float], counts: Sequence[int], total: float
) -> list[str]:
    """Render a Prometheus histogram from per-bucket counts (the last one is ``+Inf``'s)."""
    lines = [f"# TYPE {name} histogram"]
    cumulative = 0
    for bound, count in zip((*bounds, math.inf), counts, strict=True):
        cumulative += count
        le = "+Inf" if math.isinf(bound) else repr(bound)
        lines.append(f'{name}_bucket{{{label},le="{le}"}} {float(cumulative)!r}')
    lines.append(f"{name}_count{{{label}}} {float(cumulative)!r}")
    lines.append(f"{name}_sum{{{label}}} {total!r}")
    return lines
