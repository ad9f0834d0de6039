"""Read an OpenAI request body into what the simulated server needs, or say which field is bad.

Checked as vLLM's OpenAI front checks them, and refused with 400 naming the field: JSON that
does not parse, ``model`` missing, ``messages`` (chat) or ``prompt`` (completions) missing or
malformed, ``max_tokens`` / ``max_completion_tokens`` below 1 or beyond the context
(``max_model_len`` minus the prompt), ``n`` other than 1, ``stream``, ``ignore_eos`` or
``stream_options.include_usage`` not booleans, ``min_tokens`` or ``seed`` not integers. Every
other field (temperature, top_p, tools, ...) is accepted and ignored: the answer's words do
not depend on them. ``max_tokens`` absent means "up to the context's end", as in vLLM.

A completions ``prompt`` is a string, a list of one string, or a list of token ids (each id
one token; its prefix hashes are taken over the ids written as words).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, overload

import msgspec

from trafficmgr.routing.prompt import chat_prompt, word_prefix_hashes

_DECODER = msgspec.json.Decoder()


class RequestError(Exception):
    """A request the server refuses: HTTP status, OpenAI ``code`` and the field at fault."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param


@dataclass(frozen=True, slots=True)
class Generation:
    """One generation request, as the simulated engine sees it."""

    chat: bool
    model: str
    input_tokens: int
    hashes: tuple[int, ...]
    max_tokens: int
    ignore_eos: bool
    min_tokens: int
    stream: bool
    include_usage: bool
    seed: int | None


def parse_generation(body: bytes, *, chat: bool, max_model_len: int) -> Generation:
    """Validate a ``/v1/chat/completions`` or ``/v1/completions`` body."""
    try:
        doc = _DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise RequestError(400, "invalid_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise RequestError(400, "invalid_json", "request body must be a JSON object")
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(400, "invalid_value", "'model' must be a non-empty string", "model")
    words = _chat_words(doc) if chat else _prompt_words(doc)
    max_tokens = _max_tokens(doc, chat, len(words), max_model_len)
    options = doc.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise RequestError(
            400, "invalid_type", "'stream_options' must be an object", "stream_options"
        )
    _check_n(doc)
    min_tokens = _integer(doc, "min_tokens", 0)
    if min_tokens < 0 or min_tokens > max_tokens:
        raise RequestError(
            400, "invalid_value", f"'min_tokens' must be 0..{max_tokens}", "min_tokens"
        )
    return Generation(
        chat=chat,
        model=model,
        input_tokens=len(words),
        hashes=word_prefix_hashes(words),
        max_tokens=max_tokens,
        ignore_eos=_boolean(doc, "ignore_eos"),
        min_tokens=min_tokens,
        stream=_boolean(doc, "stream"),
        include_usage=_boolean(options or {}, "include_usage", "stream_options.include_usage"),
        seed=_integer(doc, "seed", None),
    )


def _chat_words(doc: dict[str, Any]) -> list[str]:
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(
            400, "invalid_value", "'messages' must be a non-empty list of messages", "messages"
        )
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise RequestError(
                400, "invalid_value", f"messages[{i}] must be an object with a 'role'", "messages"
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise RequestError(
                400,
                "invalid_type",
                f"messages[{i}].content must be a string or a list of parts",
                "messages",
            )
    return chat_prompt(messages).split()


def _prompt_words(doc: dict[str, Any]) -> list[str]:
    prompt = doc.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.split()
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        return [str(t) for t in prompt]
    raise RequestError(
        400,
        "invalid_value",
        "'prompt' must be a string, a list of one string or a non-empty list of token ids",
        "prompt",
    )


def _max_tokens(doc: dict[str, Any], chat: bool, prompt_tokens: int, max_model_len: int) -> int:
    room = max_model_len - prompt_tokens
    if room < 1:
        raise RequestError(
            400,
            "context_length_exceeded",
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt has {prompt_tokens} tokens, leaving no room for the completion.",
            "messages" if chat else "prompt",
        )
    field = "max_completion_tokens" if chat and "max_completion_tokens" in doc else "max_tokens"
    value = doc.get(field)
    if value is None:
        return room
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, "invalid_type", f"'{field}' must be an integer", field)
    if value < 1:
        raise RequestError(
            400, "invalid_value", f"'{field}' must be at least 1, got {value}", field
        )
    if value > room:
        raise RequestError(
            400,
            "context_length_exceeded",
            f"This model's maximum context length is {max_model_len} tokens. However, you "
            f"requested {prompt_tokens + value} tokens ({prompt_tokens} in the prompt, "
            f"{value} in the completion). Please reduce the length of the prompt or '{field}'.",
            field,
        )
    return int(value)


def _check_n(doc: dict[str, Any]) -> None:
    n = doc.get("n", 1)
    if n is not None and (isinstance(n, bool) or n != 1):
        raise RequestError(400, "invalid_value", "only 'n': 1 is supported", "n")


def _boolean(doc: dict[str, Any], key: str, name: str | None = None) -> bool:
    value = doc.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        field = name or key
        raise RequestError(400, "invalid_type", f"'{field}' must be a boolean", field)
    return value


@overload
def _integer(doc: dict[str, Any], key: str, default: int) -> int: ...
@overload
def _integer(doc: dict[str, Any], key: str, default: None) -> int | None: ...
def _integer(doc: dict[str, Any], key: str, default: int | None) -> int | None:
    value = doc.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, "invalid_type", f"'{key}' must be an integer", key)
    return int(value)
