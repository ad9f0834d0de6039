"""Domain errors: a refused operation and its HTTP status, raised below the API.

The domain raises these; ``regions.api.errors`` maps them (and every other error) to the one
error format in one place, so no domain module imports from the HTTP package.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Self

from regions.validation import Invalid


class DomainError(Exception):
    """A refused operation with an HTTP status, e.g. the safety valve."""

    status_code = 409
    code = "conflict"

    def __init__(
        self,
        detail: str,
        *,
        fields: dict[str, list[str]] | None = None,
        code: str | None = None,
        status_code: int | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fields = fields or {}
        self.extra = extra or {}
        if code:
            self.code = code
        if status_code:
            self.status_code = status_code


class UnsafePlan(DomainError):
    """The safety valve refuses a plan (octoDNS's ``UnsafePlan``): 409 naming each reason.

    ``unsafe`` holds the names of the blocking reasons (``regions.fleet.actionplan.Unsafe``).
    A feature subclasses it for its own error code and wording (``refusal``, with
    ``{reasons}`` where the reasons go); the API maps them all like any ``DomainError``.
    """

    status_code = 409
    code = "unsafe_plan"
    refusal = "refused: the plan {reasons}; apply with force if this is intended"

    def __init__(
        self,
        detail: str,
        *,
        unsafe: Sequence[str] = (),
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(detail, extra=dict(extra or {}))
        self.unsafe = tuple(unsafe)

    @classmethod
    def refusing(
        cls, reasons: Sequence[tuple[str, str]], extra: Mapping[str, Any] | None = None
    ) -> Self:
        """Return the error refusing a plan for these (name, sentence) reasons."""
        text = "; ".join(sentence for _, sentence in reasons)
        return cls(
            cls.refusal.format(reasons=text), unsafe=[name for name, _ in reasons], extra=extra
        )


@contextmanager
def bad_input() -> Iterator[None]:
    """Turn a validation error inside the block into a 400 naming the field."""
    try:
        yield
    except Invalid as exc:
        raise DomainError(
            f"{exc.field}: {exc.message}",
            fields={exc.field: [exc.message]},
            code="invalid",
            status_code=400,
        ) from None
