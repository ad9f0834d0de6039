"""What the simulated model answers: how many tokens, and which words.

Output is words, one token each (``trafficmgr.routing.prompt``'s rule), so a client that
counts the words of an answer counts its tokens. The length:

- ``ignore_eos`` (vLLM's sampling parameter): exactly ``max_tokens``;
- otherwise a log-normal draw (median ``median`` tokens, sigma ``OUTPUT_SIGMA``), at least
  ``min_tokens`` and at most ``max_tokens``. The draw is seeded by the server's ``--seed``,
  the model, the whole prompt (its last chained prefix hash) and the request's ``seed``: the
  same request gets the same length, as greedy decoding would, and requests that share a
  prompt answer alike, as the engine's output-length estimator expects.

The words cycle through a small vocabulary from an offset taken from the same key; building
them is a slice and a join, never per-token work.
"""

from __future__ import annotations

import hashlib
import math
from statistics import NormalDist

VOCABULARY = (
    "the", "model", "answers", "in", "plain", "words", "so", "every", "word", "is", "one",
    "token", "and", "a", "client", "can", "count", "them", "the", "gateway", "routes", "each",
    "request", "to", "a", "region", "and", "an", "endpoint", "whose", "GPU", "decodes",
    "tokens", "at", "the", "pace", "its", "profile", "gives", "while", "the", "prefix",
    "cache", "keeps", "blocks", "it", "has", "seen", "before",
)  # fmt: skip
PIECES = tuple(" " + w for w in VOCABULARY)  # a streamed token after the first
DEFAULT_MEDIAN = 200.0
OUTPUT_SIGMA = 0.8
_NORMAL = NormalDist()
_MASK = (1 << 64) - 1


def request_key(seed: int, model: str, hashes: tuple[int, ...], request_seed: int | None) -> int:
    """Return the 64-bit key a request's length and words derive from."""
    text = f"{seed}|{model}|{hashes[-1] if hashes else 0}|{request_seed}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def output_length(
    key: int, max_tokens: int, *, ignore_eos: bool, min_tokens: int = 0, median: float = 200.0
) -> int:
    """Return how many tokens the answer has (see the module docstring)."""
    if ignore_eos:
        return max_tokens
    u = ((key * 0x9E3779B97F4A7C15) & _MASK) / 2.0**64
    u = min(max(u, 1e-12), 1.0 - 1e-12)
    drawn = round(median * math.exp(OUTPUT_SIGMA * _NORMAL.inv_cdf(u)))
    return max(1, min(max_tokens, max(min_tokens, drawn)))


def first_word(key: int) -> int:
    """Return the vocabulary offset an answer starts at."""
    return key % len(VOCABULARY)


def word(offset: int, i: int) -> str:
    """Return the ``i``-th token of an answer starting at ``offset`` as streamed (spaced)."""
    w = (offset + i) % len(VOCABULARY)
    return VOCABULARY[w] if i == 0 else PIECES[w]


def output_text(offset: int, n: int) -> str:
    """Return a whole answer of ``n`` tokens starting at ``offset``."""
    size = len(VOCABULARY)
    rotated = VOCABULARY[offset:] + VOCABULARY[:offset]
    words = rotated * (n // size + 1)
    return " ".join(words[:n])


def streamed_text(offset: int, start: int, stop: int) -> list[str]:
    """Return tokens ``start..stop-1`` as streamed pieces (each after the first spaced)."""
    return [word(offset, i) for i in range(start, stop)]
