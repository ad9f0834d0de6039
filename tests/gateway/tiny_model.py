"""Build a tiny chat model offline: ``python tiny_model.py OUT_DIR`` (in the transformers venv).

A byte-level BPE tokenizer trained here on a few sentences, with a chat template, and a Llama
of two layers with random weights (seeded): enough for ``transformers serve`` to load it from
``OUT_DIR`` and generate, with nothing downloaded. Run by ``tests/gateway/transformers_server``
under ``var/transformers-venv``'s Python, not the project's: it imports only transformers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SENTENCES = [
    "the quick brown fox jumps over the lazy dog",
    "one two three four five six seven eight nine ten",
    "hello world how are you today",
    "user assistant system say something short",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)


def tokenizer() -> PreTrainedTokenizerFast:
    """Train a byte-level BPE (any text encodes, no unknown token) and wrap it."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(SENTENCES * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model(tok: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    """A two-layer Llama of width 64 with seeded random weights; greedy by default."""
    ids = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id}
    ids["pad_token_id"] = tok.pad_token_id
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=512,
        **ids,
    )
    torch.manual_seed(0)
    built = LlamaForCausalLM(config)
    built.generation_config = GenerationConfig(do_sample=False, **ids)
    return built


def main(out: Path) -> None:
    tok = tokenizer()
    tok.save_pretrained(out)
    model(tok).save_pretrained(out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
