"""One change of a fleet plan: create, update or delete one object, with its field diffs.

This is what a fleet apply writes (``regions.fleet.writer``); what the apply does to serving
capacity, and why it may be unsafe, is its ``ActionPlan`` (``regions.fleet.actionplan``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Change:
    action: str  # create | update | delete
    type: str  # one of TYPES
    name: str
    fields: Mapping[str, tuple[Any, Any]]  # field → (old, new)

    def as_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "type": self.type,
            "name": self.name,
            "fields": {k: [old, new] for k, (old, new) in self.fields.items()},
        }
