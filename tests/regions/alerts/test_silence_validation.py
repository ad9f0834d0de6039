"""A silence names known fields with strings and ends after it starts, or is refused."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.core.exceptions import ValidationError

from tests.regions.alerts.conftest import at

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("matchers", "hours", "field"),
    [
        ({}, 1, "matchers"),
        ({"colour": "red"}, 1, "matchers"),
        ({"region": 3}, 1, "matchers"),
        ([], 1, "matchers"),
        ({"region": "eu-west"}, -1, "expires_at"),
    ],
)
def test_a_bad_silence_is_refused_naming_the_field(matchers: Any, hours: int, field: str) -> None:
    from regions.models import Silence

    silence = Silence(
        matchers=matchers, starts_at=at(0), expires_at=at(0) + dt.timedelta(hours=hours)
    )
    with pytest.raises(ValidationError) as refused:
        silence.full_clean()
    assert field in refused.value.message_dict
