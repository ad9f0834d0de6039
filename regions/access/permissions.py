"""Roles: viewer reads; operator also acts (drain, weights, drills); admin also configures."""

from __future__ import annotations

from typing import Any

from rest_framework import permissions
from rest_framework.request import Request

from regions.models import ROLE_RANK, Role


def role_of(user: Any) -> str | None:
    """The role of a request's user: a token's role, or a Django user's group/superuser."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    role = getattr(user, "role", None)
    if isinstance(role, str):
        return role
    if getattr(user, "is_superuser", False):
        return Role.ADMIN
    names = set(user.groups.values_list("name", flat=True))
    for candidate in (Role.ADMIN, Role.OPERATOR, Role.VIEWER):
        if candidate in names:
            return candidate
    return Role.VIEWER if getattr(user, "is_staff", False) else None


def has_role(user: Any, needed: str) -> bool:
    role = role_of(user)
    if role is None or role == "agent":
        return False
    return ROLE_RANK[Role(role)] >= ROLE_RANK[Role(needed)]


class RolePermission(permissions.BasePermission):
    """Reads need viewer; writes need the view's ``write_role`` (admin by default).

    Agent tokens are refused everywhere except views that set ``agent_allowed``.
    """

    message = "your role may not do this"

    def has_permission(self, request: Request, view: Any) -> bool:
        role = role_of(request.user)
        if role is None:
            return False
        if role == "agent":
            return bool(getattr(view, "agent_allowed", False))
        if getattr(view, "agent_only", False):
            return False
        if request.method in permissions.SAFE_METHODS:
            needed = getattr(view, "read_role", Role.VIEWER)
        else:
            needed = getattr(view, "write_role", Role.ADMIN)
        return has_role(request.user, needed)
