"""Why a publish failed: one class per thing an operator would do differently.

Every error is a ``PublishError``; ``target`` names the server (and view) it happened on, so
a report over several targets can say which one failed. ``counter`` is the metric the error
is counted under.
"""

from __future__ import annotations


class PublishError(Exception):
    """Publishing a routing table to an external DNS server failed."""

    counter = "errors_other"

    def __init__(self, message: str, target: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.target = target

    def __str__(self) -> str:
        return f"{self.target}: {self.message}" if self.target else self.message


class TableError(PublishError, ValueError):
    """The routing table (or the zone description) cannot be turned into records."""

    counter = "errors_table"


class UnknownRegionError(TableError):
    """The table names regions the zone has no ingress addresses for."""

    def __init__(self, regions: list[str], target: str = "") -> None:
        names = ", ".join(sorted(regions))
        super().__init__(
            f"routing table names unknown region(s): {names} (no ingress addresses known; "
            "is the fleet file older than the table?)",
            target,
        )
        self.regions = sorted(regions)


class UnknownZoneKeyError(TableError):
    """A client zone key is no country, continent or ``default``."""

    def __init__(self, key: str, target: str = "") -> None:
        super().__init__(
            f"unknown client zone key {key!r}: expected an ISO country code, a continent code, "
            "'country:XX' or 'default'",
            target,
        )
        self.key = key


class ConfigError(PublishError, ValueError):
    """A publisher target is misconfigured (names the path of the bad setting)."""

    counter = "errors_config"


class AuthError(PublishError):
    """The server rejected our credentials (TSIG key or API key); retrying cannot help."""

    counter = "errors_auth"


class TsigError(AuthError):
    """The server rejected the TSIG signature (unknown key name, wrong secret or clock skew)."""


class RefusedError(PublishError):
    """The server refused the request (ACL, not authoritative for the zone)."""

    counter = "errors_refused"


class UnreachableError(PublishError):
    """The server did not answer usefully after every retry."""

    counter = "errors_unreachable"

    def __init__(self, message: str, target: str = "", attempts: int = 0) -> None:
        super().__init__(message, target)
        self.attempts = attempts


class ServerError(PublishError):
    """The server answered with an error that is not about credentials or reachability."""

    counter = "errors_server"


class UnsafePlanError(PublishError):
    """The plan deletes more of the managed records than the safety valve allows."""

    counter = "errors_unsafe"
