"""Publish to a PowerDNS Authoritative server through its HTTP API.

The zone is read with ``GET /api/v1/servers/{server}/zones/{zone}`` (the server is the truth:
no state is kept here) and changed with one ``PATCH`` of ``rrsets``: ``REPLACE`` for a record
set to create or change, ``DELETE`` for one to remove; only those that differ are sent.
PowerDNS bumps the SOA serial (``soa_edit_api``) and purges its caches for the zone. A zone
that does not exist is created (``Native``, with ``nameservers``) on the first apply.

Three ways to answer (``lua``):
- ``off``: plain A/AAAA/TXT, the highest-weight region(s) of the ``default`` list, as for
  RFC 2136 servers.
- ``weighted``: a LUA record per name and family, ``pickwrandom`` over every region of the
  ``default`` list by weight, so the server itself splits traffic as the table says. Needs
  ``enable-lua-records=yes`` (or the zone's ``ENABLE-LUA-RECORDS`` metadata).
- ``geo``: as ``weighted``, plus ``if country('DE')`` / ``if continent('EU')`` branches for
  the table's other zones. ``country()`` and ``continent()`` need the geoip backend launched
  next to the database backend (``launch=gsqlite3,geoip`` with ``geoip-database-files``
  pointing at a MaxMind Country or City database, and ``edns-subnet-processing=yes`` to
  use the resolver's ECS); without it every test is false and all clients get the default
  list (PowerDNS logs "backend not launched"). See deploy/powerdns/.

Timeouts, refused connections and HTTP 5xx are retried with exponential backoff; 401/403
raise ``AuthError`` at once, other 4xx ``ServerError`` with PowerDNS's message.
"""

from __future__ import annotations

import functools
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from trafficmgr.dns.publishers.errors import AuthError, ConfigError, ServerError
from trafficmgr.dns.publishers.plan import ChangeKind, Plan, owned
from trafficmgr.dns.publishers.records import (
    MANAGED_TYPES,
    DnsZone,
    RecordSet,
    RecordSets,
    desired_records,
    lua_records,
    record_set,
)
from trafficmgr.dns.publishers.retry import Attempts, Retryable, RetryPolicy, with_retries
from trafficmgr.dns.publishers.target import Target
from trafficmgr.routing.types import RoutingTable

LUA_MODES = ("off", "weighted", "geo")
MAX_RRSETS_PER_PATCH = 1000
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class PowerDnsTarget(Target):
    """One zone on a PowerDNS Authoritative server, managed over its HTTP API."""

    kind = "powerdns"

    def __init__(
        self,
        zone: DnsZone,
        api_url: str,
        api_key: str,
        *,
        server_id: str = "localhost",
        lua: str = "off",
        nameservers: Sequence[str] = (),
        name: str | None = None,
        timeout_s: float = 5.0,
        retry: RetryPolicy | None = None,
        create_zone: bool = True,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if lua not in LUA_MODES:
            raise ConfigError(f"lua must be one of {', '.join(LUA_MODES)}, not {lua!r}")
        base = api_url.rstrip("/")
        super().__init__(zone, name or f"powerdns {base}/{zone.name}")
        self.api_key = api_key
        self.lua = lua
        self.nameservers = [_absolute(n) for n in nameservers] or [f"ns1.{zone.name}"]
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.create_zone = create_zone
        self.sleep = sleep
        zone_id = urllib.parse.quote(zone.name, safe=".")
        self.zones_url = f"{base}/api/v1/servers/{urllib.parse.quote(server_id)}/zones"
        self.zone_url = f"{self.zones_url}/{zone_id}"
        self._missing = False

    def __repr__(self) -> str:  # never print the API key
        return f"PowerDnsTarget({self.name!r}, lua={self.lua!r})"

    def desired(self, table: RoutingTable) -> RecordSets:
        if self.lua == "off":
            return desired_records(table, self.zone)
        return lua_records(table, self.zone, geo=self.lua == "geo")

    def read_current(self, desired: RecordSets, attempts: Attempts) -> tuple[str, RecordSets]:
        status, doc = self._call("GET", self.zone_url, None, "read zone", attempts)
        if status == 404:
            if not self.create_zone:
                raise ServerError(f"zone {self.zone.name} does not exist", self.name)
            self._missing = True
            return "api (zone missing)", {}
        self._missing = False
        found: dict[tuple[str, str], RecordSet] = {}
        for rrset in doc.get("rrsets", []) if isinstance(doc, dict) else []:
            rtype = str(rrset.get("type", ""))
            if rtype not in MANAGED_TYPES:
                continue
            owner = str(rrset["name"]).lower()
            contents = [r["content"] for r in rrset.get("records", []) if not r.get("disabled")]
            if contents:
                found[(owner, rtype)] = record_set(owner, rtype, int(rrset["ttl"]), contents)
        return "api", owned(found, desired)

    def write(self, plan: Plan, attempts: Attempts) -> tuple[int, int]:
        requests = 0
        if self._missing:
            self._create(attempts)
            requests += 1
        rrsets = [_rrset_patch(c.kind, c.rrset) for c in plan.changes]
        for start in range(0, len(rrsets), MAX_RRSETS_PER_PATCH):
            body = {"rrsets": rrsets[start : start + MAX_RRSETS_PER_PATCH]}
            self._call("PATCH", self.zone_url, body, "patch rrsets", attempts)
            requests += 1
        return len(rrsets), requests

    def _create(self, attempts: Attempts) -> None:
        soa = (
            f"{self.nameservers[0]} hostmaster.{self.zone.name} 1 3600 600 86400 "
            f"{max(self.zone.ttl, 1)}"
        )
        body = {
            "name": self.zone.name,
            "kind": "Native",
            "nameservers": self.nameservers,
            "soa_edit_api": "DEFAULT",
            "rrsets": [
                _rrset_patch(ChangeKind.CREATE, record_set(self.zone.name, "SOA", 3600, [soa]))
            ],
        }
        status, _ = self._call("POST", self.zones_url, body, "create zone", attempts)
        if status != 409:  # 409: created meanwhile by someone else; fine
            self.metrics.inc("zones_created")
        self._missing = False

    def _call(
        self, method: str, url: str, body: Any, what: str, attempts: Attempts
    ) -> tuple[int, Any]:
        request = functools.partial(self._request, method, url, body, what)
        kw = {"sleep": self.sleep} if self.sleep is not None else {}
        result: tuple[int, Any] = with_retries(
            request, self.retry, what, self.name, self.metrics, attempts, **kw
        )
        return result

    def _request(self, method: str, url: str, body: Any, what: str) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"X-API-Key": self.api_key, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        self.metrics.inc("api_requests")
        try:
            with _NO_PROXY.open(req, timeout=self.timeout_s) as response:
                status, raw = int(response.status), response.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise Retryable(f"{method} {url}: {reason}") from exc
        if status in (401, 403):
            raise AuthError(
                f"PowerDNS API at {url} rejected the API key (HTTP {status}) on {what}; "
                "check api-key and webserver-allow-from",
                self.name,
            )
        if status >= 500:
            raise Retryable(f"{method} {url}: HTTP {status} {_message(raw)}")
        if status >= 400 and not (status == 404 and method == "GET") and status != 409:
            raise ServerError(f"{what}: HTTP {status}: {_message(raw)}", self.name)
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None


def _rrset_patch(kind: ChangeKind, rrset: RecordSet) -> dict[str, Any]:
    if kind is ChangeKind.DELETE:
        return {"name": rrset.name, "type": rrset.rtype, "changetype": "DELETE"}
    records = [{"content": v, "disabled": False} for v in sorted(rrset.values)]
    return {
        "name": rrset.name,
        "type": rrset.rtype,
        "ttl": rrset.ttl,
        "changetype": "REPLACE",
        "records": records,
    }


def _message(raw: bytes) -> str:
    try:
        doc = json.loads(raw)
    except ValueError:
        return raw[:200].decode(errors="replace").strip()
    return str(doc.get("error", doc)) if isinstance(doc, dict) else str(doc)


def _absolute(name: str) -> str:
    return name if name.endswith(".") else f"{name}."
