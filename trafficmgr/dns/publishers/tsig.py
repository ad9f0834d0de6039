"""TSIG keys and the BIND views they select."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import dns.name
import dns.tsig
import dns.tsigkeyring

from trafficmgr.dns.publishers.errors import ConfigError

_BIND_KEY = re.compile(
    r'key\s+"?(?P<name>[^"\s{]+)"?\s*\{(?P<body>[^}]*)\}', re.IGNORECASE | re.DOTALL
)


@dataclass(frozen=True, slots=True)
class TsigKey:
    """A TSIG key: name, base64 secret, algorithm (as ``tsig-keygen`` prints it)."""

    name: str
    secret: str
    algorithm: str = "hmac-sha256"

    def __repr__(self) -> str:  # never print the secret
        return f"TsigKey(name={self.name!r}, algorithm={self.algorithm!r})"

    def keyring(self) -> dict[dns.name.Name, dns.tsig.Key]:
        try:
            ring: dict[dns.name.Name, dns.tsig.Key] = dns.tsigkeyring.from_text(
                {self.name: (self.algorithm, self.secret)}
            )
        except Exception as exc:  # binascii.Error, dns.exception.SyntaxError, ...
            raise ConfigError(f"TSIG key {self.name!r}: unusable secret or algorithm") from exc
        return ring

    @classmethod
    def parse(cls, text: str) -> TsigKey:
        """Parse ``[algorithm:]name:secret`` (what ``dig -y`` takes)."""
        parts = text.strip().split(":")
        if len(parts) == 2:
            return cls(parts[0], parts[1])
        if len(parts) == 3:
            return cls(parts[1], parts[2], parts[0])
        raise ConfigError("TSIG key must be [algorithm:]name:secret")

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> TsigKey:
        """Read a key in BIND syntax (``key "name" { algorithm ...; secret "..."; };``)."""
        text = Path(path).read_text()
        match = _BIND_KEY.search(text)
        body = match.group("body") if match else ""
        algorithm = re.search(r"algorithm\s+\"?([\w.-]+)\"?\s*;", body)
        secret = re.search(r'secret\s+"([^"]+)"\s*;', body)
        if not (match and algorithm and secret):
            raise ConfigError(f'{path}: no key {{ algorithm ...; secret "..."; }} found')
        return cls(match.group("name"), secret.group(1), algorithm.group(1))


@dataclass(frozen=True, slots=True)
class ViewSpec:
    """Where one BIND view lives and which client zone it answers for."""

    client_zone: str  # e.g. "DE", "EU", "country:NA", "default"
    server: str
    key: TsigKey
    port: int = 53
