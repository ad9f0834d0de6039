"""Read a ``RequestInfo`` into what the engine needs, or refuse it naming the header at fault.

Both fronts pass the raw header values, so the gateway and the endpoint picker refuse a bad
``x-trafficmgr-strategy`` or ``x-trafficmgr-priority`` with the same 400, and an unknown
model with the same 404.
"""

from __future__ import annotations

from collections.abc import Mapping

from trafficmgr.requestpath.types import Refusal, RequestInfo
from trafficmgr.routing.picker import STRATEGIES
from trafficmgr.routing.prompt import word_prefix_hashes
from trafficmgr.routing.types import Priority
from trafficmgr.routing.values import value

STRATEGY_HEADER = "x-trafficmgr-strategy"
PRIORITY_HEADER = "x-trafficmgr-priority"
MAX_OUTPUT_TOKENS = 1_000_000  # as ``/route``
_PRIORITIES = {p.value: p for p in Priority}
_DEFAULT_PRIORITY = Priority.INTERACTIVE.value  # an enum's ``.value`` is a Python descriptor
_STRATEGIES = frozenset(STRATEGIES)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of ``authorization: Bearer <token>``, or None when absent or another scheme."""
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


@value
class Parsed:
    """A request's routing inputs, validated."""

    priority: Priority
    strategy: str
    input_tokens: int
    prefix_hashes: tuple[int, ...]
    max_output: int


def parse_info(
    info: RequestInfo, default_strategy: str, models: frozenset[str]
) -> Parsed | Refusal:
    """Validate a request's routing inputs; return them or a Refusal (400 or 404)."""
    priority = _PRIORITIES.get(info.priority or _DEFAULT_PRIORITY)
    if priority is None:
        return Refusal(
            400,
            "invalid_priority",
            f"{PRIORITY_HEADER}: unknown priority {info.priority!r} "
            f"(known: {', '.join(_PRIORITIES)})",
            param=PRIORITY_HEADER,
        )
    strategy = info.strategy or default_strategy
    if strategy not in _STRATEGIES:
        return Refusal(
            400,
            "invalid_strategy",
            f"{STRATEGY_HEADER}: unknown strategy {info.strategy!r} "
            f"(known: {', '.join(STRATEGIES)})",
            param=STRATEGY_HEADER,
        )
    if info.model not in models:
        return Refusal(
            404,
            "model_not_found",
            f"The model {info.model!r} does not exist or no endpoint serves it",
            param="model",
        )
    if not 0 <= info.max_output_tokens <= MAX_OUTPUT_TOKENS:
        return Refusal(
            400,
            "invalid_value",
            f"max_tokens: must be between 1 and {MAX_OUTPUT_TOKENS}, got {info.max_output_tokens}",
            param="max_tokens",
        )
    hashes = info.prefix_hashes
    if info.input_tokens is not None and hashes is not None:
        tokens = info.input_tokens
    else:
        words = info.prompt.split()
        tokens = len(words) if info.input_tokens is None else info.input_tokens
        hashes = word_prefix_hashes(words) if hashes is None else hashes
    return Parsed(priority, strategy, tokens, hashes, info.max_output_tokens)
