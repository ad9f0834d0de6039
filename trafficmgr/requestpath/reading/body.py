"""Read an OpenAI request body into what routing needs, or refuse it naming the field at fault.

The gateway and the Envoy endpoint picker both read bodies here, so one body gets one answer
in either front. Only what the decision uses is checked (the endpoint validates the rest, and
its 4xx is passed back): the body is a JSON object; ``model`` a non-empty string; ``stream`` a
boolean; ``stream_options`` an object whose ``include_usage`` is a boolean;
``max_completion_tokens`` (else ``max_tokens``) an integer from 1 to ``MAX_OUTPUT_TOKENS`` (a
null one is not given); ``user`` a string. Chat ``messages`` is a non-empty list of objects;
completions ``prompt`` a string, a non-empty list of strings, of token ids, or of lists of
token ids. A body for another path (the endpoint picker routes any body naming a model) is
read as chat when it has ``messages``, as a completion when it has ``prompt``, else as
having no prompt.

The prompt's text follows the project's token rule (``trafficmgr.routing.prompt``): a
token id is one word, so a token-id prompt costs as many input tokens as it has ids.

Refusals are 400 with code ``invalid_json`` (not a JSON object), ``invalid_value`` (missing,
empty or out of range) or ``invalid_type`` (wrong JSON type), ``param`` naming the field.
"""

from __future__ import annotations

from typing import Any

import msgspec

from trafficmgr.requestpath.types import Refusal
from trafficmgr.routing.prompt import chat_prompt
from trafficmgr.routing.values import value

MAX_OUTPUT_TOKENS = 1_000_000
CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
_DECODER = msgspec.json.Decoder()


class _Refused(Exception):
    """A field at fault, raised inside the reader and answered as a ``Refusal``."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.refusal = Refusal(400, code, message, param=param)


@value
class OpenAIRequest:
    """What routing reads from a completion request."""

    model: str
    stream: bool
    include_usage: bool  # ``stream_options.include_usage``
    max_tokens: int  # 0: not given
    prompt: str  # under the token rule
    user: str | None
    doc: dict[str, Any]


def chat_of_path(path: str) -> bool | None:
    """Return True for the chat path, False for completions, None for any other path."""
    path = path.partition("?")[0].rstrip("/")
    if path == CHAT_PATH:
        return True
    if path == COMPLETIONS_PATH:
        return False
    return None


def read_request(raw: bytes, chat: bool | None) -> OpenAIRequest | Refusal:
    """Read a chat (``chat``), completions (not ``chat``) or other (None) request body."""
    try:
        doc = _DECODER.decode(raw)
    except msgspec.DecodeError as exc:
        return Refusal(400, "invalid_json", f"request body is not valid JSON: {exc}")
    if not isinstance(doc, dict):
        return Refusal(400, "invalid_json", "request body must be a JSON object")
    try:
        return _read(doc, chat)
    except _Refused as refused:
        return refused.refusal


def _read(doc: dict[str, Any], chat: bool | None) -> OpenAIRequest:
    model = doc.get("model")
    if not isinstance(model, str) or not model:
        raise _Refused("invalid_value", "model: a non-empty string is required", "model")
    stream = doc.get("stream", False)
    if not isinstance(stream, bool):
        raise _Refused("invalid_type", "stream: must be a boolean", "stream")
    include_usage = _include_usage(doc.get("stream_options"))
    max_tokens = _max_tokens(doc)
    prompt = _prompt_text(doc, chat)
    user = doc.get("user")
    if user is not None and not isinstance(user, str):
        raise _Refused("invalid_type", "user: must be a string", "user")
    return OpenAIRequest(model, stream, include_usage, max_tokens, prompt, user or None, doc)


def _prompt_text(doc: dict[str, Any], chat: bool | None) -> str:
    if chat is None:  # another path: read what the body has
        if "messages" in doc:
            return _chat_text(doc)
        return _completion_text(doc) if "prompt" in doc else ""
    return _chat_text(doc) if chat else _completion_text(doc)


def _include_usage(options: object) -> bool:
    if options is None:
        return False
    if not isinstance(options, dict):
        raise _Refused("invalid_type", "stream_options: must be an object", "stream_options")
    include = options.get("include_usage", False)
    if not isinstance(include, bool):
        raise _Refused(
            "invalid_type", "stream_options.include_usage: must be a boolean", "stream_options"
        )
    return include


def _max_tokens(doc: dict[str, Any]) -> int:
    for name in ("max_completion_tokens", "max_tokens"):
        given = doc.get(name)
        if given is None:
            continue
        if isinstance(given, bool) or not isinstance(given, int):
            raise _Refused("invalid_type", f"{name}: must be an integer", name)
        if not 1 <= given <= MAX_OUTPUT_TOKENS:
            raise _Refused(
                "invalid_value",
                f"{name}: must be between 1 and {MAX_OUTPUT_TOKENS}, got {given}",
                name,
            )
        return int(given)
    return 0


def _chat_text(doc: dict[str, Any]) -> str:
    messages = doc.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _Refused("invalid_value", "messages: a non-empty list is required", "messages")
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise _Refused("invalid_type", f"messages[{i}]: must be an object", "messages")
    return chat_prompt(messages)


def _is_id(item: object) -> bool:
    return isinstance(item, int) and not isinstance(item, bool)


def _completion_text(doc: dict[str, Any]) -> str:
    prompt = doc.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return "\n".join(prompt)
        if all(_is_id(p) for p in prompt):
            return " ".join(str(p) for p in prompt)  # token ids: one word each
        if all(isinstance(p, list) and p and all(_is_id(t) for t in p) for p in prompt):
            return "\n".join(" ".join(str(t) for t in p) for p in prompt)
    raise _Refused(
        "invalid_value",
        "prompt: a string, a list of strings or a list of token ids is required",
        "prompt",
    )


def with_model(doc: dict[str, Any], model: str) -> bytes:
    """Return the body asking for another model (a fallback chain's next)."""
    return msgspec.json.encode({**doc, "model": model})
