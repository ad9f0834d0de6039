"""Outside-in measurement of a drill: vantage points asking the DNS server and the route API.

A vantage point is a client subnet placed (by the same GeoIP database the DNS server uses)
in one client country: one per country of the fleet's clients mix and per residency rule
(a rule's continents stand in by a country of theirs), or one per region's country when the
fleet names neither. Each asks ``<model>.<zone>`` A with that subnet as EDNS Client Subnet
every ``dns_every_s`` (real UDP queries to the real server, TCP when truncated) and, when a
control-plane URL is given, ``POST /api/v1/route`` with ``client_ip`` in the subnet every
``route_every_s``. Every answer is kept with its time, the regions it names (by their
ingress addresses) and, for the route API, the endpoint.

Where they ask: ``configure(dns=..., http=...)`` (the demo calls it with its own servers),
else ``TRAFFICMGR["DRILL_DNS"]`` / ``TRAFFICMGR_DRILL_DNS`` (default 127.0.0.1:5353) and
``TRAFFICMGR["DRILL_HTTP"]`` / ``TRAFFICMGR_DRILL_HTTP`` (the control plane's base URL for
route probes; none by default).
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

import dns.edns
import dns.exception
import dns.flags
import dns.message
import dns.query
import dns.rdatatype

from regions import conf
from regions.drills.subnets import CONTINENT_COUNTRY, Locating, probe_address, subnet_for
from trafficmgr.fleetfile import parse_address
from trafficmgr.routing.geo import country_location
from trafficmgr.routing.residency import allowed_regions
from trafficmgr.routing.table import lookup
from trafficmgr.routing.types import Fleet, RoutingTable

log = logging.getLogger(__name__)

DNS_TIMEOUT_S = 0.5
HTTP_TIMEOUT_S = 2.0


@dataclass(frozen=True, slots=True)
class Vantage:
    name: str  # e.g. "DE", or "EU (gdpr)" for a rule's continent
    country: str
    subnet: ipaddress.IPv4Network
    address: str
    model: str
    allowed: tuple[str, ...] | None  # what strict residency allows it (None: anything)


@dataclass(frozen=True, slots=True)
class Answer:
    at: float
    vantage: str
    regions: tuple[str, ...]  # regions the answer names; () when it names none
    endpoint: str = ""  # route answers only
    error: str = ""  # timeout, a DNS rcode, an HTTP status


def vantage_countries(fleet: Fleet) -> list[tuple[str, str]]:
    """Return (name, country) of the vantage points a fleet calls for, in a stable order."""
    out: dict[str, str] = {}
    for client in fleet.clients:
        out.setdefault(client.country, client.country)
    for rule in fleet.residency:
        for country in sorted(rule.countries):
            out.setdefault(country, country)
        for continent in sorted(rule.continents):
            countries = [c for c in out if country_location(c).continent == continent]
            stand_in = CONTINENT_COUNTRY.get(continent)
            if not countries and stand_in:
                out.setdefault(stand_in, stand_in)
    if not out:
        for region in fleet.regions:
            out.setdefault(region.country, region.country)
    return [(name, country) for name, country in out.items()]


def build_vantages(
    fleet: Fleet, model: str, locator: Locating | None, per_country: int = 1
) -> tuple[list[Vantage], list[str]]:
    """Return the vantage points and notes on countries no subnet could be found for."""
    vantages, notes = [], []
    for name, country in vantage_countries(fleet):
        for index in range(per_country):
            subnet = subnet_for(country, locator, index)
            if subnet is None:
                notes.append(f"no client subnet found in {country}: vantage {name} left out")
                break
            address = probe_address(subnet)
            where = locator.locate(address, 24) if locator else country_location(country)
            decision = allowed_regions(fleet, where)
            label = name if index == 0 else f"{name}-{index + 1}"
            vantages.append(
                Vantage(label, country, subnet, address, model, decision.strict_regions)
            )
    return vantages, notes


def region_of_address(fleet: Fleet) -> dict[str, str]:
    return {str(ipaddress.ip_address(a)): r.name for r in fleet.regions for a in r.addresses}


@dataclass(frozen=True, slots=True)
class MeasureSetup:
    dns: tuple[str, int] | None = ("127.0.0.1", 5353)
    route_url: str | None = None
    route_token: str | None = None  # None: issue a viewer token for the drill
    dns_every_s: float = 0.15
    route_every_s: float = 0.5
    baseline_s: float = 1.5
    per_country: int = 1


_configured: MeasureSetup | None = None


def parse_dns(text: str) -> tuple[str, int]:
    host, port = parse_address(text)
    return host, port or 53


def configure(dns: str | tuple[str, int] | None = None, http: str | None = None) -> None:
    """Tell this process's drills where the DNS server and the control plane answer."""
    global _configured
    server = parse_dns(dns) if isinstance(dns, str) else dns
    _configured = replace(default_setup(), dns=server, route_url=http)


def default_setup() -> MeasureSetup:
    if _configured is not None:
        return _configured
    return MeasureSetup(dns=parse_dns(conf.drill_dns()), route_url=conf.drill_http())


def target_share(table: RoutingTable, fleet: Fleet, region: str) -> float:
    """Return ``region``'s share of the traffic: client mix weighted, models alike."""
    models = fleet.models()
    if not models:
        return 0.0
    if fleet.clients:
        total = sum(c.share for c in fleet.clients) or 1.0
        share = 0.0
        for c in fleet.clients:
            where = country_location(c.country)
            weights = [
                sum(w.weight for w in lookup(table, where, m) if w.region == region) for m in models
            ]
            share += c.share * sum(weights) / len(models)
        return share / total
    lists = [entries for per_model in table.zones.values() for entries in per_model.values()]
    if not lists:
        return 0.0
    return sum(w.weight for ls in lists for w in ls if w.region == region) / len(lists)


def model_for(fleet: Fleet, endpoints: Sequence[str]) -> str:
    """Pick the model the probes ask for: one every instructed endpoint serves."""
    served = [set(e.models) for e in fleet.endpoints() if e.name in endpoints]
    common = set.intersection(*served) if served else set()
    pool = common or set().union(*served) or set(fleet.models())
    return sorted(pool)[0] if pool else "model"


def open_locator() -> Any:
    """Open the GeoIP database the DNS server uses (None: every client in the default zone)."""
    from trafficmgr.dns.server import open_locator as dns_locator

    return dns_locator(conf.geoip_db())


class Probes:
    """Ask from every vantage point until stopped; thread-safe lists of answers."""

    def __init__(
        self,
        fleet: Fleet,
        vantages: Sequence[Vantage],
        *,
        dns_server: tuple[str, int] | None,
        route_url: str | None = None,
        route_token: str | None = None,
        dns_every_s: float = 0.15,
        route_every_s: float = 0.5,
    ) -> None:
        self.fleet = fleet
        self.vantages = list(vantages)
        self.dns_server = dns_server
        self.route_url = route_url.rstrip("/") if route_url else None
        self.route_token = route_token
        self.dns_every_s = dns_every_s
        self.route_every_s = route_every_s
        self.dns_answers: list[Answer] = []
        self.route_answers: list[Answer] = []
        self._regions = region_of_address(fleet)
        self._dns_ip: str | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> Probes:
        if self.dns_server is not None and self.vantages:
            self._spawn(self._dns_loop, "drill-dns-probe")
        if self.route_url and self.route_token and self.vantages:
            self._spawn(self._route_loop, "drill-route-probe")
        return self

    def _spawn(self, target: Any, name: str) -> None:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5.0)
        self._threads.clear()

    def _every(self, period: float, once: Any) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            for vantage in self.vantages:
                if self._stop.is_set():
                    return
                try:
                    once(vantage)
                except Exception:  # a broken probe must not end the measurement
                    log.exception("drill probe from %s failed", vantage.name)
            next_at += period
            self._stop.wait(max(0.0, next_at - time.monotonic()))
            next_at = max(next_at, time.monotonic() - period)

    # --- DNS ------------------------------------------------------------------------------

    def _dns_loop(self) -> None:
        self._every(self.dns_every_s, self._ask_dns)

    def _ask_dns(self, v: Vantage) -> None:
        self.dns_answers.append(self.ask_dns(v))

    def ask_dns(self, v: Vantage) -> Answer:
        """Ask the DNS server once for ``v``'s model, with ``v``'s subnet as ECS."""
        assert self.dns_server is not None
        name = f"{v.model}.{self.fleet.zone}"
        try:
            host, port = self._dns_address()
        except OSError as exc:
            return Answer(time.time(), v.name, (), error=f"dns: {type(exc).__name__}")
        ecs = dns.edns.ECSOption(str(v.subnet.network_address), v.subnet.prefixlen)
        query = dns.message.make_query(name, dns.rdatatype.A, use_edns=0, options=[ecs])
        at = time.time()
        try:
            reply = dns.query.udp(query, host, port=port, timeout=DNS_TIMEOUT_S)
            if reply.flags & dns.flags.TC:
                reply = dns.query.tcp(query, host, port=port, timeout=DNS_TIMEOUT_S)
        except (dns.exception.DNSException, OSError) as exc:
            return Answer(at, v.name, (), error=f"dns: {type(exc).__name__}")
        if reply.rcode() != 0:
            return Answer(at, v.name, (), error=f"dns rcode {reply.rcode()}")
        addresses = [
            str(rd.address)
            for rrset in reply.answer
            if rrset.rdtype == dns.rdatatype.A
            for rd in rrset
        ]
        named = sorted({self._regions.get(a, f"?{a}") for a in addresses})
        return Answer(at, v.name, tuple(named))

    def _dns_address(self) -> tuple[str, int]:
        """Return the DNS server as an IP address (a host name, e.g. in compose, resolved)."""
        assert self.dns_server is not None
        host, port = self.dns_server
        if self._dns_ip is None:
            try:
                ipaddress.ip_address(host)
                self._dns_ip = host
            except ValueError:
                self._dns_ip = str(socket.getaddrinfo(host, port, type=socket.SOCK_DGRAM)[0][4][0])
        return self._dns_ip, port

    # --- the L7 decision API --------------------------------------------------------------

    def _route_loop(self) -> None:
        connection: http.client.HTTPConnection | None = None

        def once(v: Vantage) -> None:
            nonlocal connection
            if connection is None:
                connection = self._connect()
            answer, keep = self.ask_route(connection, v)
            self.route_answers.append(answer)
            if not keep:
                connection.close()
                connection = None

        try:
            self._every(self.route_every_s, once)
        finally:
            if connection is not None:
                connection.close()

    def _connect(self) -> http.client.HTTPConnection:
        assert self.route_url is not None
        parts = urlsplit(self.route_url)
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        return kind(parts.netloc, timeout=HTTP_TIMEOUT_S)

    def ask_route(self, connection: http.client.HTTPConnection, v: Vantage) -> tuple[Answer, bool]:
        """POST one route request from ``v``; return the answer and whether to keep the link."""
        assert self.route_url is not None
        path = urlsplit(self.route_url).path + "/api/v1/route"
        body = json.dumps(
            {"model": v.model, "client_ip": v.address, "input_tokens": 512, "max_output_tokens": 64}
        )
        headers = {
            "Authorization": f"Bearer {self.route_token}",
            "Content-Type": "application/json",
        }
        at = time.time()
        try:
            connection.request("POST", path, body, headers)
            response = connection.getresponse()
            raw = response.read()
        except (OSError, http.client.HTTPException) as exc:
            return Answer(at, v.name, (), error=f"http: {type(exc).__name__}"), False
        if response.status != 200:
            return Answer(at, v.name, (), error=f"http {response.status}"), True
        try:
            doc = json.loads(raw)
            return Answer(at, v.name, (str(doc["region"]),), str(doc.get("endpoint", ""))), True
        except (ValueError, KeyError, TypeError):
            return Answer(at, v.name, (), error="http: unreadable answer"), True
