"""The gateway's reading of a request body: the shared reader's (``requestpath.reading``).

The endpoint picker reads bodies with the same function, so a body gets the same refusal
(400, code, field) or the same cost in either front; here a refusal is raised as
``BodyError`` for the handler to answer.
"""

from __future__ import annotations

from trafficmgr.requestpath.reading import MAX_OUTPUT_TOKENS, read_request, with_model
from trafficmgr.requestpath.reading import OpenAIRequest as Body
from trafficmgr.requestpath.types import Refusal

__all__ = ["MAX_OUTPUT_TOKENS", "Body", "BodyError", "parse_body", "with_model"]


class BodyError(Exception):
    """A request body refused with 400, naming the field at fault."""

    def __init__(self, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


def parse_body(raw: bytes, chat: bool) -> Body:
    """Read a ``/v1/chat/completions`` (``chat``) or ``/v1/completions`` body."""
    result = read_request(raw, chat)
    if isinstance(result, Refusal):
        raise BodyError(result.code, result.message, result.param)
    return result
