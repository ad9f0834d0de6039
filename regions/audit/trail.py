"""The append-only audit trail: every write to configuration, from every path.

Writes are captured by model signals, so the API, the admin, fleet apply and
management commands are all audited the same way. Who acted comes from a
context variable set by the HTTP middleware, the API's token authentication, or
``acting_as`` in commands and tasks.
"""

from __future__ import annotations

import contextvars
import datetime as dt
import getpass
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import models
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from django.http import HttpRequest, HttpResponse
from django.utils import timezone

from regions.models import (
    AgentToken,
    AlertChannel,
    ApiToken,
    AuditLog,
    Endpoint,
    FailoverPolicy,
    FleetSettings,
    GpuProfile,
    Region,
    ResidencyRule,
)

AUDITED: tuple[type[models.Model], ...] = (
    FleetSettings,
    GpuProfile,
    Region,
    Endpoint,
    ResidencyRule,
    FailoverPolicy,
    ApiToken,
    AgentToken,
    AlertChannel,
)
_HIDDEN = {"key_hash", "created_at", "updated_at", "last_used_at"}


@dataclass(frozen=True)
class Actor:
    name: str
    kind: str  # user | token | cli | system
    source: str = ""


_current: contextvars.ContextVar[Actor | None] = contextvars.ContextVar("audit_actor", default=None)


def current_actor() -> Actor:
    return _current.get() or Actor("system", "system")


def set_actor(actor: Actor) -> None:
    _current.set(actor)


@contextmanager
def acting_as(name: str, kind: str = "cli", source: str = "") -> Iterator[Actor]:
    """Attribute the writes inside the block to ``name``."""
    actor = Actor(name, kind, source)
    token = _current.set(actor)
    try:
        yield actor
    finally:
        _current.reset(token)


def cli_actor() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no passwd entry in some containers
        return "cli"


def client_address(request: HttpRequest) -> str:
    return str(request.META.get("REMOTE_ADDR") or "")[:100]


class AuditContextMiddleware:
    """Attribute writes made while serving a request to its signed-in user."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            actor = Actor(user.get_username(), "user", client_address(request))
        else:
            actor = Actor("anonymous", "user", client_address(request))
        token = _current.set(actor)
        try:
            return self.get_response(request)
        finally:
            _current.reset(token)


def snapshot(instance: models.Model) -> dict[str, Any]:
    """A JSON-safe picture of a row's concrete fields (secrets left out)."""
    out: dict[str, Any] = {}
    for field in instance._meta.concrete_fields:
        if field.name in _HIDDEN:
            continue
        value = getattr(instance, field.attname)
        if isinstance(value, dt.datetime | dt.date):
            value = value.isoformat()
        out[field.name] = value
    return out


def record(
    action: str,
    object_type: str,
    object_id: str = "",
    object_repr: str = "",
    before: Any = None,
    after: Any = None,
) -> AuditLog:
    """Append one audit row attributed to the current actor."""
    actor = current_actor()
    return AuditLog.objects.create(
        at=timezone.now(),
        actor=actor.name[:150],
        actor_type=actor.kind,
        source=actor.source,
        action=action,
        object_type=object_type,
        object_id=str(object_id)[:63],
        object_repr=str(object_repr)[:200],
        before=before,
        after=after,
    )


def _on_pre_save(sender: type[models.Model], instance: models.Model, **kwargs: Any) -> None:
    if kwargs.get("raw"):
        return
    before = None
    if instance.pk is not None:
        old = sender._default_manager.filter(pk=instance.pk).first()
        before = snapshot(old) if old is not None else None
    instance._audit_before = before  # type: ignore[attr-defined]


def _on_post_save(
    sender: type[models.Model], instance: models.Model, created: bool, **kwargs: Any
) -> None:
    if kwargs.get("raw"):
        return
    before = getattr(instance, "_audit_before", None)
    after = snapshot(instance)
    if not created and before == after:
        return
    record(
        "create" if created or before is None else "update",
        sender.__name__,
        str(instance.pk),
        str(instance),
        before,
        after,
    )


def _on_post_delete(sender: type[models.Model], instance: models.Model, **kwargs: Any) -> None:
    record("delete", sender.__name__, str(instance.pk), str(instance), snapshot(instance), None)


def _on_m2m(
    sender: Any, instance: models.Model, action: str, pk_set: set[int] | None, **kwargs: Any
) -> None:
    if action not in {"post_add", "post_remove", "post_clear"} or (
        action != "post_clear" and not pk_set
    ):
        return
    field = "regions" if isinstance(instance, ResidencyRule) else "endpoints"
    model = kwargs["model"]
    names = sorted(str(o) for o in model._default_manager.filter(pk__in=pk_set or []))
    verb = {"post_add": "add", "post_remove": "remove", "post_clear": "clear"}[action]
    record(
        "update",
        type(instance).__name__,
        str(instance.pk),
        str(instance),
        None,
        {field: {verb: names}},
    )


for _model in AUDITED:
    pre_save.connect(_on_pre_save, sender=_model, dispatch_uid=f"audit-pre-{_model.__name__}")
    post_save.connect(_on_post_save, sender=_model, dispatch_uid=f"audit-post-{_model.__name__}")
    post_delete.connect(_on_post_delete, sender=_model, dispatch_uid=f"audit-del-{_model.__name__}")
m2m_changed.connect(_on_m2m, sender=ResidencyRule.regions.through, dispatch_uid="audit-m2m-rr")
m2m_changed.connect(_on_m2m, sender=AgentToken.endpoints.through, dispatch_uid="audit-m2m-at")
