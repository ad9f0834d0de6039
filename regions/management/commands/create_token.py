"""``manage.py create_token --name NAME --role ROLE [--region R]``: the secret is the last line."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from regions.access.issue import TOKEN_ROLES, create_token
from regions.audit.trail import acting_as, cli_actor
from regions.errors import DomainError
from regions.models import AgentToken


class Command(BaseCommand):
    help = (
        "Create an API token (viewer, operator, admin), a client token for the gateway "
        "(optionally of a tenant) or an agent token bound to a region's endpoints; print its "
        "secret alone on the last line."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", required=True, help="what the token is for")
        parser.add_argument("--role", required=True, choices=TOKEN_ROLES)
        parser.add_argument(
            "--region", help="for agent tokens: the region whose endpoints it may report for"
        )
        parser.add_argument("--tenant", default="", help="for client tokens: their tenant")

    def handle(self, *args: Any, **options: Any) -> None:
        actor = cli_actor()
        with acting_as(actor, "cli", "cli"):
            try:
                token, secret = create_token(
                    options["name"],
                    options["role"],
                    region=options["region"],
                    created_by=actor,
                    tenant=options["tenant"],
                )
            except DomainError as exc:
                raise CommandError(exc.detail) from exc
        self.stdout.write(
            f"Created {options['role']} token {token.name!r} (prefix {token.prefix})."
        )
        if isinstance(token, AgentToken) and token.region is not None:
            names = ", ".join(e.name for e in token.endpoints.all()) or "none yet"
            self.stdout.write(f"Bound to region {token.region.name} (endpoints: {names}).")
        self.stdout.write("The secret is shown once; store it now:")
        self.stdout.write(secret)
