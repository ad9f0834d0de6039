"""Read an OpenAI request body into what routing needs, or say which field is bad.

Only what the decision uses is checked (the endpoint validates the rest, and its 4xx is
passed back to the client): the body is a JSON object; ``model`` a non-empty string;
``stream`` a boolean; ``max_tokens`` / ``max_completion_tokens`` integers from 1 to
``MAX_OUTPUT_TOKENS``; chat ``messages`` a non-empty list of objects, completions ``prompt``
a string, a list of strings or token ids; ``user`` a string. The prompt's text follows the
project's token rule (``trafficmgr.routing.prompt``), so the gateway's estimate matches the
simulated server's bill.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trafficmgr.routing.prompt import chat_prompt
from trafficmgr.routing.values import value

MAX_OUTPUT_TOKENS = 1_000_000
_DECODER = msgspec.json.Decoder()


class BodyError(Exception):
    """A request body refused with 400, naming the field at fault."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


@value
class Body:
    """What the gateway reads from a completion request."""

    model: str
    stream: bool
    max_tokens: int  # 0: not given
    prompt: str
    user: str | None
    doc: dict[str, Any]


def parse_body(raw: bytes, chat: bool) -> Body:
    """Validate a ``/v1/chat/completions`` (``chat``) or ``/v1/completions`` body."""
    try:
        doc = _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        raise BodyError("invalid_json", f"request body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise BodyError("invalid_json", "request body must be a JSON object")
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise BodyError("invalid_value", "model: a non-empty string is required", "model")
    stream = doc.get("stream", False)
    if not isinstance(stream, bool):
        raise BodyError("invalid_type", "stream: must be a boolean", "stream")
    max_tokens = _max_tokens(doc)
    prompt = _chat_text(doc) if chat else _completion_text(doc)
    user = doc.get("user")
    if user is not None and not isinstance(user, str):
        raise BodyError("invalid_type", "user: must be a string", "user")
    return Body(model, stream, max_tokens, prompt, user or None, doc)


def _max_tokens(doc: dict[str, Any]) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        value = doc.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise BodyError("invalid_type", f"{name}: must be an integer", name)
        if not 1 <= value <= MAX_OUTPUT_TOKENS:
            raise BodyError(
                "invalid_value",
                f"{name}: must be between 1 and {MAX_OUTPUT_TOKENS}, got {value}",
                name,
            )
        return int(value)
    return 0


def _chat_text(doc: dict[str, Any]) -> str:
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BodyError("invalid_value", "messages: a non-empty list is required", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BodyError("invalid_type", f"messages[{i}]: must be an object", "messages")
    return chat_prompt(messages)


def _completion_text(doc: dict[str, Any]) -> str:
    prompt = doc.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt)
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return " ".join(str(p) for p in prompt)  # token ids: one word each
        if all(isinstance(p, list) for p in prompt):
            return "\n".join(" ".join(str(t) for t in p) for p in prompt)
    raise BodyError(
        "invalid_value",
        "prompt: a string, a list of strings or a list of token ids is required",
        "prompt",
    )


def with_model(doc: dict[str, Any], model: str) -> bytes:
    """Return the body asking for another model (a fallback chain's next)."""
    return msgspec.json.encode({**doc, "model": model})
