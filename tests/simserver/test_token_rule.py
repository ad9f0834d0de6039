"""The shared token rule (``trafficmgr.routing.prompt``): words, chat prompts, chained hashes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trafficmgr.routing.prompt import BLOCK_TOKENS, chat_prompt, count_tokens, prefix_hashes
from trafficmgr.sim import server

ROOT = Path(__file__).resolve().parents[2]


def words(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def test_a_token_is_a_whitespace_separated_word() -> None:
    assert count_tokens("") == 0
    assert count_tokens("  one\ttwo\n\nthree  four ") == 4
    assert prefix_hashes("a b\n c") == prefix_hashes("a  b c")  # spacing is not a token


def test_one_hash_per_block_the_last_partial() -> None:
    assert prefix_hashes("") == ()
    assert len(prefix_hashes("x")) == 1
    assert len(prefix_hashes(" ".join(words(BLOCK_TOKENS)))) == 1
    assert len(prefix_hashes(" ".join(words(BLOCK_TOKENS + 1)))) == 2
    assert all(0 <= h < 2**64 for h in prefix_hashes(" ".join(words(3000))))
    assert BLOCK_TOKENS == server.BLOCK_TOKENS == 512  # the simulator's prefix-cache block


def test_equal_hashes_mean_equal_prefixes() -> None:
    base = words(3 * BLOCK_TOKENS)
    same_start = base[: 2 * BLOCK_TOKENS] + words(BLOCK_TOKENS, "z")
    other_first = ["changed", *base[1:]]
    h = prefix_hashes(" ".join(base))
    assert prefix_hashes(" ".join(same_start))[:2] == h[:2]
    assert prefix_hashes(" ".join(same_start))[2] != h[2]
    # a different first block changes every later hash, though later blocks are equal (chained)
    assert all(a != b for a, b in zip(prefix_hashes(" ".join(other_first)), h, strict=True))
    # a partial block equals only an equal partial block
    assert prefix_hashes(" ".join(base[:600]))[1] != prefix_hashes(" ".join(base[:601]))[1]


def test_hashes_are_stable_across_processes() -> None:
    code = "from trafficmgr.routing.prompt import prefix_hashes; print(prefix_hashes('a b c'))"
    runs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)},
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert runs == {f"{prefix_hashes('a b c')}\n"}
    assert prefix_hashes("a b c") == (8225749483740752216,)  # pinned: a change breaks caches


def test_chat_prompt_joins_message_contents() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hello there"},
                                     {"type": "image_url", "image_url": {"url": "x"}},
                                     {"type": "text", "text": "again"}]},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "t"}]},
    ]  # fmt: skip
    assert chat_prompt(messages) == "Be brief.\nHello there\nagain\n"
    assert count_tokens(chat_prompt(messages)) == 5
