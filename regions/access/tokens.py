"""Bearer secrets: generated once, stored as SHA-256, recognised by their prefix."""

from __future__ import annotations

import hashlib
import secrets

API_PREFIX = "tmk_"
AGENT_PREFIX = "tma_"


def new_secret(agent: bool) -> str:
    return (AGENT_PREFIX if agent else API_PREFIX) + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()
