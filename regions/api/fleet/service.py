"""Fleet apply over HTTP as four steps: parse the request, check who may, plan, apply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rest_framework import exceptions, parsers
from rest_framework.request import Request

from regions.access.permissions import has_role
from regions.api.parsers import flag
from regions.fleet.plan import FleetPlan, apply_plan, plan_fleet
from regions.models import Role
from trafficmgr.fleetfile import MAX_BYTES, load_fleet_text


class FleetTextParser(parsers.BaseParser):
    """Hand the body over as bytes; the fleet loader decodes and validates it."""

    media_type = "application/yaml"

    def parse(  # type: ignore[override]
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: dict[str, Any] | None = None,  # type: ignore[override]
    ) -> bytes:
        if stream is None:
            return b""
        data: bytes = stream.read(MAX_BYTES + 1)
        return data


class YamlParser(FleetTextParser):
    media_type = "application/yaml"


class XYamlParser(FleetTextParser):
    media_type = "application/x-yaml"


class TextYamlParser(FleetTextParser):
    media_type = "text/yaml"


class PlainTextParser(FleetTextParser):
    media_type = "text/plain"


@dataclass(frozen=True, slots=True)
class ApplyRequest:
    """What ``POST fleet/apply`` asks: the fleet file's text and the two flags."""

    text: str | bytes
    dry_run: bool
    force: bool


def parse_apply(request: Request) -> ApplyRequest:
    """Read the flags and the fleet file's text; a 400 names the field at fault."""
    dry_run, force = flag(request, "dry_run"), flag(request, "force")
    return ApplyRequest(fleet_text(request), dry_run=dry_run, force=force)


def fleet_text(request: Request) -> str | bytes:
    """The fleet file: the YAML body, or the ``fleet`` key of a JSON body."""
    data = request.data
    if isinstance(data, bytes | str):
        return data
    if isinstance(data, dict) and isinstance(data.get("fleet"), str):
        return str(data["fleet"])
    raise exceptions.ValidationError(
        {"fleet": ['send the fleet file as YAML text, or JSON {"fleet": "<yaml>"}']}
    )


def check_may_apply(user: Any, ask: ApplyRequest) -> None:
    """Operators may dry-run; applying and forcing need admin (403 otherwise)."""
    if not ask.dry_run and not has_role(user, Role.ADMIN):
        raise exceptions.PermissionDenied(
            "applying a fleet needs the admin role; operators may use dry_run=1"
        )
    if ask.force and not has_role(user, Role.ADMIN):
        raise exceptions.PermissionDenied("force needs the admin role")


def plan_and_apply(ask: ApplyRequest) -> FleetPlan:
    """Plan the fleet file against the stored fleet; apply it unless a dry run."""
    plan = plan_fleet(load_fleet_text(ask.text))
    return plan if ask.dry_run else apply_plan(plan, force=ask.force)


def plan_body(plan: FleetPlan, ask: ApplyRequest) -> dict[str, Any]:
    """The answer: the plan, and whether anything was written."""
    return plan.as_dict() | {"applied": not ask.dry_run and not plan.empty}
