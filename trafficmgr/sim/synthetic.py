"""A seeded synthetic trace in the BurstGPT CSV format, unlike the Azure and Mooncake traces.

Run: ``python -m trafficmgr.sim.synthetic --out FILE [--requests 6000] [--seed 1]``

Its shape follows what the BurstGPT paper (Wang et al., 2024) reports of real ChatGPT/GPT-4
service logs, with figures of our own choosing, so that routing policies can be checked on a
workload they were not built around:

- Arrivals are bursty: a two-state (calm/burst) modulated process, the burst rate four times
  the calm one, with Gamma inter-arrival times of shape 0.5 (coefficient of variation 1.4)
  inside each state.
- Two models, about one request in five for the larger one (``GPT-4``).
- Request tokens: a log-normal mixture (chat turns around 600 tokens, pasted documents
  around 3,000), API calls longer than conversations; response tokens: log-normal around
  250 with a short-answer mode around 20, so decode weighs far more than in the Azure code
  trace and there is no shared prefix to reuse, unlike Mooncake.

The same seed always gives the same file.
"""

from __future__ import annotations

import argparse
import csv
import math
import random
from pathlib import Path
from typing import TextIO

from trafficmgr.sim.traces import BURSTGPT_COLUMNS

CALM_RPS, BURST_RPS = 2.0, 8.0
MEAN_CALM_S, MEAN_BURST_S = 60.0, 15.0
GAMMA_SHAPE = 0.5
MAX_REQUEST_TOKENS = 32_000
MAX_RESPONSE_TOKENS = 4_000


def _lognormal(rng: random.Random, median: float, sigma: float) -> float:
    return median * math.exp(rng.gauss(0.0, sigma))


def _request_tokens(rng: random.Random, api: bool) -> int:
    document = rng.random() < (0.45 if api else 0.2)
    tokens = _lognormal(rng, 3000, 0.6) if document else _lognormal(rng, 600, 1.0)
    return max(1, min(MAX_REQUEST_TOKENS, round(tokens)))


def _response_tokens(rng: random.Random) -> int:
    tokens = _lognormal(rng, 20, 0.7) if rng.random() < 0.25 else _lognormal(rng, 250, 0.8)
    return max(1, min(MAX_RESPONSE_TOKENS, round(tokens)))


def rows(requests: int, seed: int) -> list[tuple[float, str, int, int, int, str]]:
    """Return the trace's rows: time, model, request, response and total tokens, log type."""
    rng = random.Random(seed)
    out: list[tuple[float, str, int, int, int, str]] = []
    t, burst = 0.0, False
    state_ends = rng.expovariate(1.0 / MEAN_CALM_S)
    while len(out) < requests:
        rate = BURST_RPS if burst else CALM_RPS
        t += rng.gammavariate(GAMMA_SHAPE, 1.0 / (GAMMA_SHAPE * rate))
        while t >= state_ends:
            burst = not burst
            state_ends += rng.expovariate(1.0 / (MEAN_BURST_S if burst else MEAN_CALM_S))
        api = rng.random() < 0.3
        model = "GPT-4" if rng.random() < 0.2 else "ChatGPT"
        ask, answer = _request_tokens(rng, api), _response_tokens(rng)
        kind = "API log" if api else "Conversation log"
        out.append((round(t, 3), model, ask, answer, ask + answer, kind))
    return out


def write(stream: TextIO, requests: int, seed: int) -> None:
    """Write the trace as BurstGPT CSV."""
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(BURSTGPT_COLUMNS)
    for row in rows(requests, seed):
        writer.writerow((f"{row[0]:.3f}", *row[1:]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="CSV file to write")
    parser.add_argument("--requests", type=int, default=6000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    with Path(args.out).open("w", encoding="utf-8", newline="") as fh:
        write(fh, args.requests, args.seed)


if __name__ == "__main__":
    main()
