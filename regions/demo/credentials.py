"""The demo's operator login and API token, kept across restarts in ``var/``."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from regions.access.issue import create_token
from regions.access.tokens import hash_secret
from regions.demo import files
from regions.demo.files import Credentials
from regions.models import ApiToken, Role

DEMO_USER = "operator"
DEMO_TOKEN = "demo operator"


def ensure_role_groups() -> dict[str, Group]:
    return {role: Group.objects.get_or_create(name=role)[0] for role in Role.values}


def reset_operator_login(password: str | None = None) -> str:
    """Create (or reset) the ``operator`` login in group operator with ``password`` (a new one
    when None); return the password."""
    groups = ensure_role_groups()
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=DEMO_USER)
    password = password or secrets.token_urlsafe(12)
    if not user.check_password(password):  # leaves the sessions of an unchanged login alone
        user.set_password(password)
    user.is_active = True
    user.save()
    user.groups.set([groups[Role.OPERATOR]])
    return password


def new_operator_token() -> str:
    """Revoke earlier demo tokens and issue a fresh operator token."""
    for old in ApiToken.objects.filter(name=DEMO_TOKEN, revoked_at__isnull=True):
        old.revoked_at = timezone.now()
        old.save(update_fields=["revoked_at"])
    _, secret = create_token(DEMO_TOKEN, Role.OPERATOR, created_by="demo")
    return secret


def kept_operator_token(secret: str) -> str:
    """Keep the token of an earlier run: stored again if the database is new, replaced by a new
    one if it was revoked (someone meant it) or is no operator token."""
    row = ApiToken.objects.filter(key_hash=hash_secret(secret)).first()
    if row is None:
        ApiToken.objects.create(
            name=DEMO_TOKEN,
            role=Role.OPERATOR,
            prefix=secret[:12],
            key_hash=hash_secret(secret),
            created_by="demo",
        )
        return secret
    if row.revoked_at is None and row.role == Role.OPERATOR:
        return secret
    return new_operator_token()


def demo_credentials(rotate: bool) -> Credentials:
    """The operator login and token: the ones kept in ``var/`` unless ``rotate``."""
    kept = None if rotate else files.load_credentials()
    if kept is None:
        credentials = Credentials(DEMO_USER, reset_operator_login(), new_operator_token())
    else:
        credentials = Credentials(
            DEMO_USER, reset_operator_login(kept.password), kept_operator_token(kept.token)
        )
    files.save_credentials(credentials)
    return credentials
