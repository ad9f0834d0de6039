"""The API's base viewsets: configuration objects by name, and read-only history."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rest_framework import viewsets
from rest_framework.serializers import BaseSerializer

from regions.api.filters import BoundedSearchFilter, QueryFilter, StrictOrderingFilter
from regions.api.parsers import JSONParser
from regions.models import Role

# Any segment routes to the view, so a malformed name is a 404 in the error format too.
ANY_SEGMENT = r"[^/]+"


class ConfigViewSet(viewsets.ModelViewSet):
    """CRUD over a named configuration object: viewer reads, admin writes.

    Objects are addressed by name (``/api/v1/regions/eu-west/``), like the fleet file.
    """

    lookup_field = "name"
    lookup_value_regex = ANY_SEGMENT
    parser_classes = [JSONParser]
    filter_backends = [QueryFilter, StrictOrderingFilter, BoundedSearchFilter]
    search_fields = ["name"]
    read_role = Role.VIEWER
    write_role = Role.ADMIN

    # Each write and the audit rows its signals append commit together, or not at all.
    def perform_create(self, serializer: BaseSerializer[Any]) -> None:
        with transaction.atomic():
            serializer.save()

    def perform_update(self, serializer: BaseSerializer[Any]) -> None:
        with transaction.atomic():
            serializer.save()

    def perform_destroy(self, instance: Any) -> None:
        with transaction.atomic():
            instance.delete()


class HistoryViewSet(viewsets.ReadOnlyModelViewSet):
    """Read-only, newest first."""

    filter_backends = [QueryFilter, StrictOrderingFilter]
    lookup_value_regex = ANY_SEGMENT
    ordering_fields = ["at", "id"]
    ordering = ["-at", "-id"]
    read_role = Role.VIEWER
