"""``manage.py create_user``: dashboard users of each role, the password from the environment."""

from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client

from regions.access.permissions import role_of

pytestmark = pytest.mark.django_db
PASSWORD = "create-user-test-password"


def create(name: str, role: str) -> str:
    out = StringIO()
    call_command("create_user", name, "--role", role, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize("role", ["viewer", "operator", "admin"])
def test_a_created_user_has_its_role_and_signs_in(
    role: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAFFICMGR_USER_PASSWORD", PASSWORD)
    assert f"Created {role} user" in create(f"u-{role}", role)
    user = User.objects.get(username=f"u-{role}")
    assert role_of(user) == role
    assert Client().login(username=f"u-{role}", password=PASSWORD)


def test_no_password_in_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAFFICMGR_USER_PASSWORD", raising=False)
    with pytest.raises(CommandError, match="TRAFFICMGR_USER_PASSWORD"):
        create("nobody", "viewer")
    assert not User.objects.filter(username="nobody").exists()


def test_an_existing_username_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAFFICMGR_USER_PASSWORD", PASSWORD)
    create("twice", "viewer")
    with pytest.raises(CommandError, match="username: 'twice' already exists"):
        create("twice", "operator")
