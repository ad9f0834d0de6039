"""The events of region transitions name each state once: "unknown → healthy: healthy: …"
repeated the new state, because the engine's reasons start with it."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.regions.loop.conftest import ENDPOINTS

pytestmark = pytest.mark.django_db

T0 = 1_800_000_000.0
EU_WEST = ("euw-1", "euw-2")
OTHERS = tuple(e for e in ENDPOINTS if e not in EU_WEST)


def test_each_state_is_named_once_in_a_transition_message(feed: Any, fresh_hot_state: Any) -> None:
    from regions.loop.control import run_tick
    from regions.models import Event

    feed(T0)
    first = run_tick(T0, interval_s=1.0)
    for k in range(1, 5):  # eu-west falls silent: down after the miss threshold
        feed(T0 + k, OTHERS)
        run_tick(T0 + k, interval_s=1.0)
    assert {t.new.value for t in first.transitions} == {"healthy"}
    messages = list(
        Event.objects.filter(kind__in=["health", "failover"], endpoint="").values_list(
            "message", flat=True
        )
    )
    assert any("unknown → healthy: " in m for m in messages), messages
    assert any("eu-west: healthy → down: " in m for m in messages), messages
    for message in messages:
        new = re.search(r"→ (\w+): ", message)
        assert new is not None, message
        assert not message.split("→ ", 1)[1].startswith(f"{new[1]}: {new[1]}:"), message
