"""Build the local tokenizer AIPerf counts with: one token per whitespace-separated word.

Why: AIPerf needs a Hugging Face tokenizer to write prompts of a given length and to count
the tokens it receives; none may be downloaded here, and the project's token rule
(``trafficmgr/routing/prompt.py``: a token is a ``str.split()`` word) is what the gateway and
the simulated servers count. So this writes a word-level ``tokenizers`` tokenizer whose
pre-tokenizer splits on whitespace only, whose vocabulary is every word of AIPerf's own
prompt corpus plus the simulated servers' answer words, and which decodes ids back to words
joined by spaces: a prompt of N AIPerf tokens is N words under the token rule.

    var/aiperf-venv/bin/python bench/gateway/aiperf_tokenizer.py HF_HOME WORDS.json

(``bench/gateway/aiperf.py`` calls it; ``WORDS.json`` is the simulated servers' vocabulary.)
AIPerf offline (``HF_HUB_OFFLINE=1``) only looks tokenizers up by repository name in the
Hugging Face cache, so the files are laid out as that cache holds a downloaded repository:
``HF_HOME/hub/models--trafficmgr--word-tokenizer/snapshots/REV/`` with ``refs/main`` naming
``REV``. Run AIPerf with ``HF_HOME`` pointing there and ``--tokenizer {REPO}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import aiperf
from tokenizers import Tokenizer, models, pre_tokenizers

UNK = "[UNK]"
REPO = "trafficmgr/word-tokenizer"
REVISION = "0" * 40


CORPUS = Path(aiperf.__file__).parent / "dataset" / "generator" / "assets" / "shakespeare.txt"


def build(out: Path, extra: list[str]) -> int:
    words = dict.fromkeys([UNK, *CORPUS.read_text(encoding="utf-8").split(), *extra])
    vocab = {w: i for i, w in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    # no decoder: ids decode to their words joined by single spaces
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": UNK,
              "model_max_length": 1_000_000, "clean_up_tokenization_spaces": False}  # fmt: skip
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps({"unk_token": UNK}))
    return len(vocab)


def cache_dir(hf_home: Path) -> Path:
    """Lay out the Hugging Face cache entry of ``REPO``; return its snapshot directory."""
    repo = hf_home / "hub" / f"models--{REPO.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(REVISION)
    return repo / "snapshots" / REVISION


def main(argv: list[str]) -> int:
    out, words = cache_dir(Path(argv[0])), json.loads(Path(argv[1]).read_text())
    size = build(out, words)
    check = Tokenizer.from_file(str(out / "tokenizer.json"))
    text = " ".join(CORPUS.read_text(encoding="utf-8").split()[:200])
    ids = check.encode(text).ids
    assert len(ids) == len(text.split()) and check.decode(ids).split() == text.split()
    print(f"{REPO} in {argv[0]}: word-level tokenizer, {size} words")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
