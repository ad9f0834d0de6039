"""Build publisher targets from a YAML or JSON file (what the control loop and CLI read).

```yaml
targets:
  - kind: rfc2136                  # BIND 9, Knot, any RFC 2136 server
    server: 192.0.2.53
    port: 53
    key_file: /etc/trafficmgr/tm-default.key   # BIND syntax, as tsig-keygen prints it
    # key: hmac-sha256:tm-default:BASE64SECRET  # or inline, [algorithm:]name:secret
    client_zone: default           # whose answer this zone gets (DE, EU, country:NA, ...)
    diff: axfr                     # axfr (read the zone back) | state (last published)
    state_file: /var/lib/trafficmgr/publish-{view}.json
    views:                         # BIND views: one key and client zone per view
      eu: {client_zone: EU, key_file: /etc/trafficmgr/tm-eu.key}
      default: {client_zone: default, key_file: /etc/trafficmgr/tm-default.key}
  - kind: powerdns
    api_url: http://127.0.0.1:8081
    api_key_file: /etc/trafficmgr/pdns-api-key  # or api_key_env: PDNS_API_KEY, or api_key
    lua: off                       # off | weighted | geo
    nameservers: [ns1.infer.example.test.]
```

Both kinds also take ``name``, ``timeout_s`` and ``retry: {attempts, first_delay_s,
max_delay_s}``. Relative paths are relative to the file. Unknown keys are errors that name
their path (``targets[1].lua_mode``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from trafficmgr.dns.publishers.errors import ConfigError, PublishError
from trafficmgr.dns.publishers.powerdns import PowerDnsTarget
from trafficmgr.dns.publishers.records import DnsZone
from trafficmgr.dns.publishers.retry import RetryPolicy
from trafficmgr.dns.publishers.rfc2136 import Rfc2136Target, view_targets
from trafficmgr.dns.publishers.target import Target
from trafficmgr.dns.publishers.tsig import TsigKey, ViewSpec

_COMMON = {"kind", "name", "timeout_s", "retry"}
_RFC2136 = _COMMON | {
    "server", "port", "key", "key_file", "client_zone", "diff", "state_file", "views",
    "max_ops", "source_address",
}  # fmt: skip
_VIEW = {"client_zone", "key", "key_file", "server", "port"}
_POWERDNS = _COMMON | {
    "api_url", "api_key", "api_key_file", "api_key_env", "server_id", "lua", "nameservers",
    "create_zone",
}  # fmt: skip
_RETRY = {"attempts", "first_delay_s", "max_delay_s", "multiplier", "jitter"}


def load_targets(path: str | os.PathLike[str], zone: DnsZone) -> list[Target]:
    """Read a targets file (YAML or JSON) and build its targets for ``zone``."""
    file = Path(path)
    try:
        text = file.read_text()
        doc = json.loads(text) if file.suffix == ".json" else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    return targets_from_dict(doc, zone, file.parent)


def targets_from_dict(doc: Any, zone: DnsZone, base: Path | None = None) -> list[Target]:
    """Build targets from a parsed targets document."""
    root = base or Path.cwd()
    items = _mapping(doc, "")
    _only(items, {"targets"}, "")
    entries = items.get("targets")
    if not isinstance(entries, list) or not entries:
        raise ConfigError("targets: expected a non-empty list")
    targets: list[Target] = []
    for i, entry in enumerate(entries):
        path = f"targets[{i}]"
        item = _mapping(entry, path)
        kind = item.get("kind")
        try:
            if kind == "rfc2136":
                targets.extend(_rfc2136(item, zone, root, path))
            elif kind == "powerdns":
                targets.append(_powerdns(item, zone, root, path))
            else:
                raise ConfigError(f"{path}.kind: expected rfc2136 or powerdns, not {kind!r}")
        except PublishError:
            raise
        except (TypeError, ValueError, OSError) as exc:
            raise ConfigError(f"{path}: {exc}") from exc
    return targets


def _rfc2136(item: Mapping[str, Any], zone: DnsZone, root: Path, path: str) -> list[Target]:
    _only(item, _RFC2136, path)
    options: dict[str, Any] = {"retry": _retry(item.get("retry"), f"{path}.retry")}
    for option in ("name", "timeout_s", "diff", "max_ops", "source_address"):
        if option in item:
            options[option] = item[option]
    if "state_file" in item:
        options["state_file"] = str(_path(root, item["state_file"]))
    server = _text(item.get("server"), f"{path}.server")
    port = int(item.get("port", 53))
    views = item.get("views")
    if views is None:
        key = _key(item, root, path)
        client_zone = str(item.get("client_zone", "default"))
        return [Rfc2136Target(zone, server, key, port=port, client_zone=client_zone, **options)]
    specs: dict[str, ViewSpec] = {}
    for view, raw in _mapping(views, f"{path}.views").items():
        vpath = f"{path}.views.{view}"
        spec = _mapping(raw, vpath)
        _only(spec, _VIEW, vpath)
        specs[str(view)] = ViewSpec(
            client_zone=_text(spec.get("client_zone"), f"{vpath}.client_zone"),
            server=str(spec.get("server", server)),
            key=_key(spec, root, vpath),
            port=int(spec.get("port", port)),
        )
    options.pop("name", None)  # each view is named after its server and view
    return list(view_targets(zone, specs, **options))


def _powerdns(item: Mapping[str, Any], zone: DnsZone, root: Path, path: str) -> Target:
    _only(item, _POWERDNS, path)
    if "api_key" in item:
        api_key = str(item["api_key"])
    elif "api_key_file" in item:
        api_key = _path(root, item["api_key_file"]).read_text().strip()
    elif "api_key_env" in item:
        api_key = os.environ.get(str(item["api_key_env"]), "")
        if not api_key:
            raise ConfigError(f"{path}.api_key_env: ${item['api_key_env']} is not set")
    else:
        raise ConfigError(f"{path}: one of api_key, api_key_file, api_key_env is required")
    options: dict[str, Any] = {"retry": _retry(item.get("retry"), f"{path}.retry")}
    for option in ("name", "timeout_s", "server_id", "lua", "create_zone"):
        if option in item:
            options[option] = item[option]
    nameservers = [str(n) for n in item.get("nameservers", [])]
    api_url = _text(item.get("api_url"), f"{path}.api_url")
    return PowerDnsTarget(zone, api_url, api_key, nameservers=nameservers, **options)


def _key(item: Mapping[str, Any], root: Path, path: str) -> TsigKey:
    if "key" in item:
        return TsigKey.parse(str(item["key"]))
    if "key_file" in item:
        try:
            return TsigKey.from_file(_path(root, item["key_file"]))
        except OSError as exc:
            raise ConfigError(f"{path}.key_file: {exc}") from exc
    raise ConfigError(f"{path}: key or key_file is required (TSIG)")


def _retry(raw: Any, path: str) -> RetryPolicy:
    if raw is None:
        return RetryPolicy()
    item = _mapping(raw, path)
    _only(item, _RETRY, path)
    defaults = RetryPolicy()
    return RetryPolicy(
        attempts=int(item.get("attempts", defaults.attempts)),
        first_delay_s=float(item.get("first_delay_s", defaults.first_delay_s)),
        max_delay_s=float(item.get("max_delay_s", defaults.max_delay_s)),
        multiplier=float(item.get("multiplier", defaults.multiplier)),
        jitter=float(item.get("jitter", defaults.jitter)),
    )


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{path or 'document'}: expected a mapping")
    return value


def _only(item: Mapping[str, Any], allowed: set[str], path: str) -> None:
    unknown = sorted(set(map(str, item)) - allowed)
    if unknown:
        where = f"{path}." if path else ""
        raise ConfigError(
            f"{where}{unknown[0]}: unknown key (allowed: {', '.join(sorted(allowed))})"
        )


def _text(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{path}: required")
    return value


def _path(root: Path, value: Any) -> Path:
    path = Path(str(value))
    return path if path.is_absolute() else root / path
