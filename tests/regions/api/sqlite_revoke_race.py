"""Race two revokes of the last two admin tokens on a SQLite file: ``python -m
tests.regions.api.sqlite_revoke_race MODE`` (MODE: SQLite's transaction mode, DEFERRED or
IMMEDIATE), with ``DATABASE_URL`` naming the file. Two threads, each with its own connection,
both pass the admin check before either writes (a pre-save hook holds them for a moment);
prints each revoke's outcome and the active admins left, as JSON."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trafficmgr.settings")

from django.conf import settings  # the mode is set before Django starts

settings.DATABASES["default"]["OPTIONS"]["transaction_mode"] = sys.argv[1]

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models.signals import pre_save  # noqa: E402

from regions.access.issue import create_token  # noqa: E402
from regions.api.config.views import _revoke  # noqa: E402
from regions.errors import DomainError  # noqa: E402
from regions.models import ApiToken, Role  # noqa: E402

# Both revokes wait here until the other arrives (or a second has passed: a revoke that
# holds the database lock keeps the other from arriving, which is the point).
barrier = threading.Barrier(2, timeout=1)
results: dict[str, str] = {}


def hold(sender: Any, instance: Any, **kwargs: Any) -> None:
    if sender is ApiToken and instance.revoked_at is not None:
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait()


def revoke(pk: int, name: str) -> None:
    try:
        _revoke(ApiToken.objects.get(pk=pk), None)
        results[name] = "revoked"
    except DomainError as exc:
        results[name] = str(getattr(exc, "code", exc))
    except Exception as exc:  # the outcome under test: print it rather than die
        results[name] = f"error: {type(exc).__name__}: {exc}"
    finally:
        connection.close()


def main() -> None:
    call_command("migrate", verbosity=0)
    tokens = [create_token(f"admin-{n}", "admin")[0] for n in "ab"]
    connection.close()
    pre_save.connect(hold, weak=False)
    threads = [threading.Thread(target=revoke, args=(t.pk, t.name)) for t in tokens]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    active = ApiToken.objects.filter(role=Role.ADMIN, revoked_at__isnull=True).count()
    print(json.dumps({"results": results, "active_admins": active}))


if __name__ == "__main__":
    main()
