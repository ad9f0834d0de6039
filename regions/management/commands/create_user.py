"""``manage.py create_user NAME --role ROLE``: a dashboard user of a role, its password read from
the environment (``TRAFFICMGR_USER_PASSWORD``), never from the command line."""

from __future__ import annotations

import os
from typing import Any

from django.contrib.auth.models import Group, User
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from regions.models import Role

PASSWORD_VARIABLE = "TRAFFICMGR_USER_PASSWORD"
# admin is a superuser: the role every check reads from ``is_superuser``.
ROLES = (Role.VIEWER, Role.OPERATOR, Role.ADMIN)


class Command(BaseCommand):
    help = (
        "Create a dashboard user of a role (viewer and operator join the group of that name, "
        f"admin is a superuser); the password is read from {PASSWORD_VARIABLE}."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--role", required=True, choices=[str(r) for r in ROLES])
        parser.add_argument("--email", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        password = os.environ.get(PASSWORD_VARIABLE, "")
        if not password:
            raise CommandError(f"{PASSWORD_VARIABLE} is empty: set it to the user's password")
        name, role = options["username"], options["role"]
        if User.objects.filter(username=name).exists():
            raise CommandError(f"username: {name!r} already exists")
        with transaction.atomic():
            if role == Role.ADMIN:
                User.objects.create_superuser(name, options["email"], password)
            else:
                user = User.objects.create_user(name, options["email"], password)
                user.groups.add(Group.objects.get_or_create(name=role)[0])
        self.stdout.write(f"Created {role} user {name!r}.")
