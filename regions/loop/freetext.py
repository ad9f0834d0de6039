"""Control characters in a heartbeat's free text are replaced, never refused.

Agents report what their GPUs, servers and probes said (``server.error``, ``probe.reason``,
``gpus[].errors``, ``agent.errors``, GPU names): text the agent does not control. A NUL in it
cannot be stored in a PostgreSQL ``text`` or ``json`` column, a lone surrogate cannot be
encoded as UTF-8 at all, and other control characters reach terminals and logs. Refusing
the heartbeat over them would make a broken GPU driver look like the agent going silent, so
each such character (``regions.validation.CONTROL``: C0 but tab and line breaks, DEL, C1 but
NEL, lone surrogates) becomes U+FFFD, keeping the text's length and the schema's limits.

JSON cannot carry a raw control character inside a string: it arrives escaped (``\\u0000``),
as a raw DEL, or as a UTF-8 C1 character (``\\xc2\\x80`` to ``\\xc2\\x9f``). A body with none of
those is left alone without walking it, which is the case of nearly every heartbeat.
"""

from __future__ import annotations

from typing import Any

from regions.validation import CONTROL

REPLACEMENT = "\ufffd"


def may_hold_control(body: bytes) -> bool:
    """Whether a JSON body can hold a control character (cheap: three byte searches)."""
    return b"\\u" in body or b"\x7f" in body or b"\xc2" in body


def cleaned(doc: Any, body: bytes) -> Any:
    """``doc`` (parsed from ``body``) with every control character in its strings replaced."""
    if not may_hold_control(body):
        return doc
    return _clean(doc)


def clean_text(text: str) -> str:
    """``text`` with each control character replaced by U+FFFD."""
    return CONTROL.sub(REPLACEMENT, text)


def _clean(value: Any) -> Any:
    """Walk a parsed JSON document (its depth is bounded by the parser's checks)."""
    if isinstance(value, str):
        return CONTROL.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value
