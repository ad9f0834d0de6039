"""The control plane tells the request path, without a query, which tokens could be client
secrets: ``create_token``'s shape (prefix ``tmk_``, 43 base64url characters) and no other."""

from __future__ import annotations

import pytest

from regions.access.tokens import new_secret
from regions.decisions.source import DjangoControlPlane


def test_an_issued_client_secret_is_well_formed() -> None:
    assert DjangoControlPlane().well_formed(new_secret(agent=False))


@pytest.mark.parametrize(
    "token",
    [
        new_secret(agent=True),  # an agent's secret is no inference credential
        new_secret(agent=False)[:-1],
        new_secret(agent=False) + "A",
        "tmk_" + "A" * 42 + "!",
        "sk-anything",
        "tmk_" + "A" * 60_000,
    ],
)
def test_anything_else_is_not(token: str) -> None:
    assert not DjangoControlPlane().well_formed(token)
