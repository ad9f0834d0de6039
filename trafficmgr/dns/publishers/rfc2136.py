"""Publish to BIND 9, Knot or any RFC 2136 server: dynamic updates signed with TSIG.

What is there now (``diff``):
- ``axfr`` (default): read the zone with a TSIG-signed AXFR and diff against it, so edits
  made behind our back and a server restored from an old zone file are repaired. When the
  server refuses the transfer (REFUSED, NOTAUTH, or a TSIG error, which is how Knot denies
  a key its ACL does not allow to transfer), fall back to ``state``.
- ``state``: diff against what this target last published: kept in memory and, with
  ``state_file``, in a JSON file that survives restarts. With no state at all (first run,
  or after a failed apply) every record set is sent as a replace (delete RRset + add), so
  the zone ends up right whatever was there; names we published before that the table no
  longer has are only found by ``axfr``.

Only the difference is sent: a new record set is added, a vanished one deleted, and in a
changed one only the records that differ are deleted and added (a TTL change replaces the
set). Updates go over TCP, at most ``max_ops`` RRs per message; each message is atomic on
the server, and retrying one is safe (adding a present RR and deleting an absent one are
no-ops). Timeouts, refused connections and SERVFAIL are retried with exponential backoff;
a rejected TSIG key (``TsigError``) or a refusal (``RefusedError``) fails at once.

Views (BIND): one target per view, each with its own key; the server picks the view by the
key (``match-clients { key ...; }``, see deploy/bind/), so the AXFR and the updates signed
with a view's key read and change that view's copy of the zone. ``view_targets`` builds
them from a mapping view name → (client zone key, server, key).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import dns.exception
import dns.name
import dns.query
import dns.rcode
import dns.rdata
import dns.rdataclass
import dns.rdatatype
import dns.tsig
import dns.tsigkeyring
import dns.update
import dns.xfr
import dns.zone

from trafficmgr.dns.publishers.errors import (
    ConfigError,
    PublishError,
    RefusedError,
    ServerError,
    TsigError,
)
from trafficmgr.dns.publishers.plan import Change, ChangeKind, Plan, owned
from trafficmgr.dns.publishers.records import (
    MANAGED_TYPES,
    DnsZone,
    RecordSet,
    RecordSets,
    desired_records,
    record_set,
    zone_fallbacks,
)
from trafficmgr.dns.publishers.retry import Attempts, Retryable, RetryPolicy, with_retries
from trafficmgr.dns.publishers.target import Target
from trafficmgr.dns.publishers.tsig import TsigKey, ViewSpec
from trafficmgr.routing.table import DEFAULT_ZONE
from trafficmgr.routing.types import RoutingTable

log = logging.getLogger("trafficmgr.dns.publishers")

DIFF_SOURCES = ("axfr", "state")


class Rfc2136Target(Target):
    """One zone (one view of it) on an RFC 2136 server."""

    kind = "rfc2136"

    def __init__(
        self,
        zone: DnsZone,
        server: str,
        key: TsigKey,
        *,
        port: int = 53,
        client_zone: str = DEFAULT_ZONE,
        view: str | None = None,
        name: str | None = None,
        diff: str = "axfr",
        state_file: str | os.PathLike[str] | None = None,
        timeout_s: float = 3.0,
        retry: RetryPolicy | None = None,
        max_ops: int = 500,
        source_address: str | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if diff not in DIFF_SOURCES:
            raise ConfigError(f"diff must be one of {', '.join(DIFF_SOURCES)}, not {diff!r}")
        zone_fallbacks(client_zone)  # an unknown client zone key fails here, not on publish
        where = f"{server}:{port}/{zone.name}" + (f" view {view}" if view else "")
        super().__init__(zone, name or f"rfc2136 {where}")
        self.server = server
        self.port = port
        self.key = key
        self.keyring = key.keyring()
        self.keyname = dns.name.from_text(key.name)
        self.client_zone = client_zone
        self.view = view
        self.diff = diff
        self.state_file = Path(state_file) if state_file else None
        self.timeout_s = timeout_s
        self.retry = retry or RetryPolicy()
        self.max_ops = max(1, max_ops)
        self.source_address = source_address
        self.sleep = sleep
        self.origin = dns.name.from_text(zone.name)
        self._published: RecordSets | None = None

    def desired(self, table: RoutingTable) -> RecordSets:
        return desired_records(table, self.zone, self.client_zone)

    def read_current(self, desired: RecordSets, attempts: Attempts) -> tuple[str, RecordSets]:
        if self.diff == "axfr":
            try:
                records = self._retrying(self._axfr, "zone transfer", attempts)
            except (RefusedError, TsigError) as exc:
                # Knot answers a transfer its ACL denies with NOTAUTH/BADKEY, so a TSIG error
                # here may just mean "no transfer for this key"; a key that is really wrong
                # fails the update that follows.
                self.metrics.inc("axfr_refused")
                log.warning("%s; diffing against the last published state", exc)
            else:
                self.metrics.inc("axfr_reads")
                return "axfr", owned(records, desired)
        state = self._state()
        if state is None:
            return "none", {}
        self.metrics.inc("state_reads")
        return "state", owned(state, desired)

    def write(self, plan: Plan, attempts: Attempts) -> tuple[int, int]:
        ops = messages = 0
        try:
            for message, count in self._messages(plan):
                send = functools.partial(self._send, message)
                self._retrying(send, "update", attempts)
                ops += count
                messages += 1
        except PublishError:
            self._published = None  # partly applied: trust nothing we remember
            raise
        self._remember(plan)
        return ops, messages

    # --- the wire -------------------------------------------------------------------

    def _retrying(self, op: Callable[[], Any], what: str, attempts: Attempts) -> Any:
        sleep = self.sleep
        kw = {"sleep": sleep} if sleep is not None else {}
        return with_retries(op, self.retry, what, self.name, self.metrics, attempts, **kw)

    def _axfr(self) -> dict[tuple[str, str], RecordSet]:
        zone = dns.zone.Zone(self.origin)
        query, _ = dns.xfr.make_query(
            zone,
            serial=None,
            keyring=self.keyring,
            keyname=self.keyname,
            keyalgorithm=self.key.algorithm,
        )
        try:
            dns.query.inbound_xfr(
                self.server,
                zone,
                query=query,
                port=self.port,
                timeout=self.timeout_s,
                lifetime=self.timeout_s * 3,
                source=self.source_address,
            )
        except dns.xfr.TransferError as exc:
            self._raise_for_rcode(exc.rcode, "zone transfer")
        except Exception as exc:
            self._raise_for_exception(exc)
        out: dict[tuple[str, str], RecordSet] = {}
        for relative, node in zone.nodes.items():
            owner = relative.derelativize(self.origin).to_text().lower()
            for rdataset in node.rdatasets:
                rtype = dns.rdatatype.to_text(rdataset.rdtype)
                if rtype not in MANAGED_TYPES:
                    continue  # SOA, NS, DNSSEC records...: never ours
                values = [rd.to_text() for rd in rdataset]
                out[(owner, rtype)] = record_set(owner, rtype, rdataset.ttl, values)
        return out

    def _send(self, message: dns.update.UpdateMessage) -> None:
        try:
            response = dns.query.tcp(
                message,
                self.server,
                timeout=self.timeout_s,
                port=self.port,
                source=self.source_address,
            )
        except Exception as exc:
            self._raise_for_exception(exc)
        self._raise_for_rcode(response.rcode(), "update")

    def _raise_for_exception(self, exc: Exception) -> NoReturn:
        if isinstance(exc, dns.tsig.PeerError):
            raise TsigError(
                f"{self.server}:{self.port} rejected TSIG key {self.key.name!r} "
                f"({type(exc).__name__}: {exc}); check the key name, secret and algorithm "
                "match the server's, and the clocks",
                self.name,
            ) from exc
        if isinstance(exc, OSError | EOFError | dns.exception.Timeout):
            raise Retryable(f"{self.server}:{self.port}: {type(exc).__name__}: {exc}") from exc
        if isinstance(exc, dns.exception.DNSException):  # a malformed or mismatched answer
            raise ServerError(f"{self.server}:{self.port}: {type(exc).__name__}: {exc}", self.name)
        raise exc

    def _raise_for_rcode(self, rcode: int, what: str) -> None:
        if rcode == dns.rcode.NOERROR:
            return
        text = dns.rcode.to_text(dns.rcode.Rcode.make(rcode))
        where = f"{self.server}:{self.port} answered {what} for {self.zone.name} with {text}"
        if rcode == dns.rcode.SERVFAIL:
            raise Retryable(where)
        if rcode in (dns.rcode.REFUSED, dns.rcode.NOTAUTH):
            raise RefusedError(
                f"{where}: not allowed for key {self.key.name!r} (allow-update / "
                "allow-transfer / acl), or not authoritative for the zone",
                self.name,
            )
        if rcode == dns.rcode.NOTZONE:
            raise ServerError(f"{where}: the zone is not on that server (or view)", self.name)
        raise ServerError(where, self.name)

    # --- the plan as UPDATE messages -----------------------------------------------

    def _messages(self, plan: Plan) -> list[tuple[dns.update.UpdateMessage, int]]:
        """Encode the plan in messages of at most ``max_ops`` RRs (a bigger change alone)."""
        out: list[tuple[dns.update.UpdateMessage, int]] = []
        message, count = self._new_message(), 0
        replace = plan.source == "none"  # unknown current state: replace whole sets
        for change in plan.changes:
            if count and count + _ops(change, replace) > self.max_ops:
                out.append((message, count))
                message, count = self._new_message(), 0
            count += _encode(message, change, replace)
        if count:
            out.append((message, count))
        return out

    def _new_message(self) -> dns.update.UpdateMessage:
        return dns.update.UpdateMessage(
            self.origin,
            keyring=self.keyring,
            keyname=self.keyname,
            keyalgorithm=self.key.algorithm,
        )

    # --- remembered state -----------------------------------------------------------

    def _state(self) -> RecordSets | None:
        if self._published is not None:
            return self._published
        if self.state_file is None or not self.state_file.exists():
            return None
        try:
            doc = json.loads(self.state_file.read_text())
            if doc.get("zone") != self.zone.name or doc.get("key") != self.key.name:
                return None
            records = [record_set(n, t, ttl, vs) for n, t, ttl, vs in doc["records"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "%s: ignoring unreadable state file %s: %s", self.name, self.state_file, exc
            )
            return None
        self._published = {r.key: r for r in records}
        return self._published

    def _remember(self, plan: Plan) -> None:
        self._published = dict(plan.desired)
        if self.state_file is None:
            return
        doc = {
            "target": self.name,
            "zone": self.zone.name,
            "key": self.key.name,
            "version": plan.version,
            "records": [[r.name, r.rtype, r.ttl, sorted(r.values)] for r in plan.desired.values()],
        }
        self.state_file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".publish-", dir=self.state_file.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(doc, fh, indent=1, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.state_file)


def _encode(message: dns.update.UpdateMessage, change: Change, replace: bool) -> int:
    """Add one change to an UPDATE message; return how many RRs it put in the update section."""
    rrset = change.rrset
    owner = dns.name.from_text(rrset.name)
    if change.kind is ChangeKind.DELETE:
        message.delete(owner, rrset.rtype)
        return 1
    rdatas = [_rdata(rrset.rtype, v) for v in sorted(rrset.values)]
    old = change.old
    if old is None and not replace:
        message.add(owner, rrset.ttl, *rdatas)
        return len(rdatas)
    if old is None or old.ttl != rrset.ttl:
        message.replace(owner, rrset.ttl, *rdatas)
        return 1 + len(rdatas)
    for value in sorted(change.removed):
        message.delete(owner, _rdata(rrset.rtype, value))
    for value in sorted(change.added):
        message.add(owner, rrset.ttl, _rdata(rrset.rtype, value))
    return len(change.removed) + len(change.added)


def _ops(change: Change, replace: bool) -> int:
    """Return how many RRs ``_encode`` puts in the update section for a change."""
    if change.kind is ChangeKind.DELETE:
        return 1
    old, new = change.old, change.rrset
    if old is None and not replace:
        return len(new.values)
    if old is None or old.ttl != new.ttl:
        return 1 + len(new.values)
    return len(change.removed) + len(change.added)


def _rdata(rtype: str, value: str) -> dns.rdata.Rdata:
    return dns.rdata.from_text(dns.rdataclass.IN, rtype, value)


def view_targets(
    zone: DnsZone, views: Mapping[str, ViewSpec], **options: Any
) -> list[Rfc2136Target]:
    """Return one target per BIND view: that view's client zone, published with its key.

    A ``state_file`` option may contain ``{view}``, replaced by each view's name.
    """
    template = str(options.get("state_file") or "")
    if template and len(views) > 1 and "{view}" not in template:
        raise ConfigError("state_file must contain {view} when publishing to several views")
    targets = []
    for view, spec in views.items():
        per_view = dict(options)
        if per_view.get("state_file"):
            per_view["state_file"] = str(per_view["state_file"]).replace("{view}", view)
        target = Rfc2136Target(
            zone,
            spec.server,
            spec.key,
            port=spec.port,
            client_zone=spec.client_zone,
            view=view,
            **per_view,
        )
        targets.append(target)
    return targets
