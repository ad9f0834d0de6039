"""The token rule shared by the gateway, the simulated server and the load generator.

Real tokenizers differ per model and cost CPU on the request path; the project needs one
cheap rule every process applies alike, so that the gateway's estimate of a request, the
simulated server's bill and the load generator's intent agree to the token:

- a token is a whitespace-separated word (``str.split()``), of the prompt and of the output;
- a chat request's prompt is its messages' contents in order, joined by newlines; a content
  given as a list of parts contributes its ``text`` parts, joined by newlines; roles, names,
  tool calls and non-text parts count nothing (``chat_prompt``);
- a prompt's prefix hashes are one stable 64-bit hash per block of ``BLOCK_TOKENS`` words,
  the last block possibly partial (as the Mooncake trace's ``hash_ids``), each chaining the
  previous one (as vLLM's block hashes): two prompts share their first ``k`` hashes exactly
  when they share their first ``k`` blocks of words (a partial block only equals an equal
  partial block).

Pure: no clock, no I/O; the hash is BLAKE2b, identical across processes and runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BLOCK_TOKENS = 512  # words per prefix block: the prefix cache's unit (vLLM, Mooncake)
_SEED = b"trafficmgr-prefix-v1"


def count_tokens(text: str) -> int:
    """Return the tokens of ``text``: its whitespace-separated words."""
    return len(text.split())


def prefix_hashes(text: str) -> tuple[int, ...]:
    """Return the chained 64-bit hashes of ``text``'s blocks of ``BLOCK_TOKENS`` words."""
    return word_prefix_hashes(text.split())


def word_prefix_hashes(words: Sequence[str]) -> tuple[int, ...]:
    """Return the chained block hashes of a prompt already split into words."""
    out: list[int] = []
    previous = _SEED
    for start in range(0, len(words), BLOCK_TOKENS):
        block = " ".join(words[start : start + BLOCK_TOKENS]).encode()
        digest = hashlib.blake2b(block, digest_size=8, key=previous[:64]).digest()
        out.append(int.from_bytes(digest, "big"))
        previous = digest
    return tuple(out)


def chat_prompt(messages: Iterable[Mapping[str, Any]]) -> str:
    """Return a chat request's prompt text under the token rule (see the module docstring)."""
    return "\n".join(_content_text(m.get("content")) for m in messages)


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""
