"""Configure PowerDNS (geoip backend) and gdnsd (plugin_geoip) to answer like our plan.

Both are given the plan's zone, names, client zones and region addresses, the same GeoIP2
City database and EDNS Client Subnet on, and run as one process on loopback:

- PowerDNS: the geoip backend's YAML zone file. Each name is a service whose candidates are
  tried in order, country, continent, default (``%cc``/``%cn`` placeholders); each candidate
  name holds the region's A and AAAA records, weighted when the zone splits traffic (the
  backend then picks one record by weight, as our server picks one region per prefix).
  ``receiver-threads`` and ``distributor-threads`` 1 (``--threads``); its packet cache
  stays on (the default).
- gdnsd: one geoip map per name (continent → country → region list), a resource per name
  whose datacenters are the regions, and for a zone that splits traffic a pseudo-datacenter
  backed by a ``weighted`` resource (one address by weight). ``udp_threads`` and
  ``tcp_threads`` 1 (``--threads``).
"""

from __future__ import annotations

from pathlib import Path

from bench.dns.geodns.plan import Plan, ZoneAnswer
from trafficmgr.routing.countries import continent_of

NS_ADDRESS = "127.0.0.1"
SOA_TIMERS = "3600 600 86400"


def _pdns_candidate(label: str, answer: ZoneAnswer, zone: str) -> str:
    if answer.kind == "default":
        return f"default.{label}.geo.{zone}"
    prefix = "c" if answer.kind == "country" else "k"
    return f"{prefix}-{answer.code.lower()}.{label}.geo.{zone}"


def _pdns_records(plan: Plan, answer: ZoneAnswer) -> list[str]:
    lines = []
    weighted = len(answer.regions) > 1
    for family, index in (("a", 0), ("aaaa", 1)):
        for region, weight in answer.regions:
            for address in plan.addresses[region][index]:
                if weighted:
                    lines.append(f"      - {family}: {{content: '{address}', weight: {weight}}}")
                else:
                    lines.append(f"      - {family}: '{address}'")
    return lines


def powerdns_zone_yaml(plan: Plan) -> str:
    """Return the geoip backend's zones file for the plan."""
    zone, ttl = plan.zone, plan.ttl
    out = [
        "domains:",
        f"- domain: {zone}",
        f"  ttl: {ttl}",
        "  records:",
        f"    {zone}:",
        f"      - soa: ns1.{zone} hostmaster.{zone} 1 {SOA_TIMERS} {ttl}",
        f"      - ns: ns1.{zone}",
        f"    ns1.{zone}:",
        f"      - a: {NS_ADDRESS}",
    ]
    services = []
    for label, answers in plan.names.items():
        for answer in answers:
            if answer.regions:
                out.append(f"    {_pdns_candidate(label, answer, zone)}:")
                out.extend(_pdns_records(plan, answer))
        candidates = [
            f"'c-%cc.{label}.geo.{zone}'",
            f"'k-%cn.{label}.geo.{zone}'",
            f"'default.{label}.geo.{zone}'",
        ]
        services.append(f"    {label}.{zone}: [{', '.join(candidates)}]")
    out.append("  services:")
    out.extend(services)
    return "\n".join(out) + "\n"


def powerdns_conf(workdir: Path, port: int, geoip_db: Path, threads: int = 1) -> str:
    """Return pdns.conf for one loopback instance reading the zones file in ``workdir``."""
    return "\n".join(
        [
            "launch=geoip",
            f"geoip-database-files=mmdb:{geoip_db}",
            f"geoip-zones-file={workdir / 'zones.yaml'}",
            "edns-subnet-processing=yes",
            "local-address=127.0.0.1",
            f"local-port={port}",
            f"receiver-threads={threads}",
            f"distributor-threads={threads}",
            "reuseport=no",
            "daemon=no",
            "guardian=no",
            "disable-syslog=yes",
            "loglevel=3",
            "webserver=no",
            "api=no",
            f"socket-dir={workdir}",
            "",
        ]
    )


def write_powerdns(
    plan: Plan, workdir: Path, port: int, geoip_db: Path, threads: int = 1
) -> list[str]:
    """Write PowerDNS's files into ``workdir``; return the command that runs it."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "zones.yaml").write_text(powerdns_zone_yaml(plan))
    (workdir / "pdns.conf").write_text(powerdns_conf(workdir, port, geoip_db, threads))
    return ["pdns_server", f"--config-dir={workdir}"]


# --- gdnsd ---------------------------------------------------------------------------------


def _dc_of(label: str, answer: ZoneAnswer) -> str:
    """Return the datacenter a zone's clients get: a region, or a weighted pseudo-DC."""
    if len(answer.regions) == 1:
        return answer.regions[0][0]
    return f"w-{_slug(answer.zone)}"


def _slug(zone: str) -> str:
    return zone.replace(":", "-").lower()


def _gdnsd_map(plan: Plan, label: str, geoip_db: Path) -> tuple[list[str], list[str], set[str]]:
    """Return a map stanza, its datacenters, and the weighted pseudo-DCs it uses."""
    answers = plan.names[label]
    default = next(a for a in answers if a.kind == "default")
    continents: dict[str, dict[str, str]] = {}
    for answer in answers:
        if answer.kind == "continent":
            continents.setdefault(answer.code, {})["default"] = _dc_of(label, answer)
    for answer in answers:
        if answer.kind == "country":
            continent = continent_of(answer.code)
            if continent:
                continents.setdefault(continent, {})[answer.code] = _dc_of(label, answer)
    used = {_dc_of(label, a) for a in answers if a.regions}
    datacenters = [r for r in plan.regions()] + sorted(d for d in used if d.startswith("w-"))
    lines = [
        f"      m-{label} => {{",
        f"        geoip2_db => {geoip_db}",
        f"        datacenters => [{', '.join(datacenters)}]",
        "        map => {",
        f"          default => [{_dc_of(label, default)}]",
    ]
    for continent, entries in sorted(continents.items()):
        inner = ", ".join(f"{k} => [{v}]" for k, v in sorted(entries.items()))
        lines.append(f"          {continent} => {{ {inner} }}")
    lines += ["        }", "      }"]
    return lines, datacenters, {d for d in used if d.startswith("w-")}


def _dc_addresses(plan: Plan, region: str) -> str:
    v4, v6 = plan.addresses[region]
    parts = []
    if v4:
        parts.append(f"addrs_v4 => [{', '.join(v4)}]")
    if v6:
        parts.append(f"addrs_v6 => [{', '.join(v6)}]")
    return "{ " + ", ".join(parts) + " }"


def _weighted(plan: Plan, name: str, answer: ZoneAnswer) -> list[str]:
    lines = [f"    {name} => {{", "      multi => false"]
    for key, index in (("addrs_v4", 0), ("addrs_v6", 1)):
        entries = [
            f"{region}-{i} => [{address}, {weight}]"
            for region, weight in answer.regions
            for i, address in enumerate(plan.addresses[region][index])
        ]
        if entries:
            lines.append(f"      {key} => {{ {', '.join(entries)} }}")
    lines.append("    }")
    return lines


def gdnsd_config(plan: Plan, workdir: Path, port: int, geoip_db: Path, threads: int = 1) -> str:
    """Return gdnsd's ``config`` file for the plan."""
    maps: list[str] = []
    resources: list[str] = []
    weighted: list[str] = []
    for label, answers in plan.names.items():
        stanza, datacenters, pseudo = _gdnsd_map(plan, label, geoip_db)
        maps += stanza
        by_dc = {_dc_of(label, a): a for a in answers if a.regions}
        dcmap = []
        for dc in datacenters:
            if dc in pseudo:
                resource = f"{label}-{dc}"
                dcmap.append(f"{dc} => %weighted!{resource}")
                weighted += _weighted(plan, resource, by_dc[dc])
            else:
                dcmap.append(f"{dc} => {_dc_addresses(plan, dc)}")
        resources += [
            f"      {label} => {{",
            f"        map => m-{label}",
            "        dcmap => {",
            *[f"          {line}" for line in dcmap],
            "        }",
            "      }",
        ]
    return "\n".join(
        [
            "options => {",
            f"  listen => [ 127.0.0.1:{port} ]",
            f"  udp_threads => {threads}",
            f"  tcp_threads => {threads}",
            "  edns_client_subnet => true",
            f"  run_dir => {workdir / 'run'}",
            f"  state_dir => {workdir / 'state'}",
            "}",
            "plugins => {",
            "  geoip => {",
            "    maps => {",
            *maps,
            "    }",
            "    resources => {",
            *resources,
            "    }",
            "  }",
            "  weighted => {",
            *weighted,
            "  }",
            "}",
            "",
        ]
    )


def gdnsd_zone(plan: Plan) -> str:
    """Return gdnsd's zone file: apex, nameserver and one DYNA record per name."""
    ttl = plan.ttl
    lines = [
        f"$TTL {ttl}",
        f"@ 3600 SOA ns1 hostmaster 1 {SOA_TIMERS} {ttl}",
        "@ 3600 NS ns1",
        f"ns1 3600 A {NS_ADDRESS}",
    ]
    lines += [f"{label} {ttl} DYNA geoip!{label}" for label in plan.names]
    return "\n".join(lines) + "\n"


def write_gdnsd(
    plan: Plan, workdir: Path, port: int, geoip_db: Path, threads: int = 1
) -> list[str]:
    """Write gdnsd's config directory into ``workdir``; return the command that runs it."""
    (workdir / "zones").mkdir(parents=True, exist_ok=True)
    (workdir / "config").write_text(gdnsd_config(plan, workdir, port, geoip_db, threads))
    (workdir / "zones" / plan.zone).write_text(gdnsd_zone(plan))
    return ["gdnsd", "-c", str(workdir), "start"]
