"""``@value``: a frozen dataclass to the type checker, a plain slotted one at run time.

The value types built for every request (the request as read, its plan, its usage, its
completion) are immutable by contract, and mypy holds every caller to it: an assignment to
a field of a ``@value`` class is a type error, as for ``@dataclass(frozen=True)``. At run
time the class is ``@dataclass(slots=True, unsafe_hash=True)``: equal and hashable by its
fields, as a frozen one is, but its constructor assigns the slots directly, where a frozen
dataclass's goes through ``object.__setattr__`` once per field (1.0 against 0.2 µs for nine
fields on CPython 3.11), and the request path builds several such values per request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

T = TypeVar("T")

if TYPE_CHECKING:
    from typing import dataclass_transform

    @dataclass_transform(frozen_default=True)
    def value(cls: type[T]) -> type[T]: ...

else:

    def value(cls: type[Any]) -> type[Any]:
        return dataclass(slots=True, unsafe_hash=True)(cls)
