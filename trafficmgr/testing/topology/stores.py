"""PostgreSQL and Redis for one cluster: a database of its own, a Redis database index of its own.

The servers come from DATABASE_URL and REDIS_URL (CI points them at its services). The
cluster's PostgreSQL database is created here and dropped afterwards, so it never meets
pytest-django's test database. Its Redis database index is claimed with a key (``SET NX``)
from ``REDIS_DBS``, so two runs side by side on one machine each get their own. What a run
killed outright leaves behind (its database, its claim) the next run clears.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse, urlunparse

from trafficmgr.runtime.procs import pid_alive

# The bench uses 13, tests/regions/loop 14, tests/regions/drills 15, CI's REDIS_URL 0.
REDIS_DBS = (12, 11, 10, 9)
REDIS_OWNER_KEY = "trafficmgr-e2e:owner"
REDIS_CLAIM_S = 1800  # a run killed outright frees its index after this (or once it is gone)
DB_PREFIX = "trafficmgr_e2e_"


class ServicesMissing(Exception):
    """PostgreSQL or Redis is not there to run the cluster against."""


@dataclass(frozen=True, slots=True)
class Services:
    database_url: str  # a PostgreSQL server (its database name is not used)
    redis_url: str


def find_services(environ: dict[str, str]) -> Services:
    """Return PostgreSQL and Redis from DATABASE_URL and REDIS_URL; raise when unusable."""
    import psycopg
    import redis

    database_url, redis_url = environ.get("DATABASE_URL", ""), environ.get("REDIS_URL", "")
    if urlparse(database_url).scheme not in {"postgres", "postgresql", "pgsql"}:
        raise ServicesMissing("DATABASE_URL does not point at PostgreSQL")
    if not redis_url:
        raise ServicesMissing("REDIS_URL is not set")
    try:
        with psycopg.connect(admin_conninfo(database_url), connect_timeout=3):
            pass
    except psycopg.Error as exc:
        raise ServicesMissing(f"PostgreSQL does not answer: {exc}") from exc
    try:
        redis.Redis.from_url(redis_url, socket_timeout=2).ping()
    except redis.RedisError as exc:
        raise ServicesMissing(f"Redis at {redis_url} does not answer: {exc}") from exc
    return Services(database_url, redis_url)


def admin_conninfo(database_url: str) -> str:
    """Connection string for the server's maintenance database ``postgres``."""
    p = urlparse(database_url)
    parts = {
        "host": p.hostname or "127.0.0.1",
        "port": str(p.port or 5432),
        "user": unquote(p.username or ""),
        "password": unquote(p.password or ""),
        "dbname": "postgres",
    }
    return " ".join(f"{k}='{v}'" for k, v in parts.items() if v)


def with_database(url: str, name: str) -> str:
    """The URL with its path (database name or index) replaced."""
    return urlunparse(urlparse(url)._replace(path=f"/{name}"))


def create_database(services: Services, name: str) -> str:
    """Create a fresh database (dropping a leftover of the same name); return its URL.

    Databases of earlier runs that died without dropping theirs (``DB_PREFIX<pid>`` of a pid
    no longer running here, nobody connected) are dropped on the way.
    """
    _drop_leftovers(services)
    _admin(services, "DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
    _admin(services, "CREATE DATABASE {}", name)
    return with_database(services.database_url, name)


def _drop_leftovers(services: Services) -> None:
    import psycopg

    with psycopg.connect(admin_conninfo(services.database_url), autocommit=True) as c:
        rows = c.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{DB_PREFIX}%",)
        ).fetchall()
    for (name,) in rows:
        pid = name.removeprefix(DB_PREFIX)
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(psycopg.Error):  # in use after all: leave it
                _admin(services, "DROP DATABASE IF EXISTS {}", name)


def drop_database(services: Services, name: str) -> None:
    """Drop the database, closing whatever connections are still open to it."""
    _admin(services, "DROP DATABASE IF EXISTS {} WITH (FORCE)", name)


def _admin(services: Services, statement: str, name: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(admin_conninfo(services.database_url), autocommit=True) as c:
        c.execute(sql.SQL(statement).format(sql.Identifier(name)))


def claim_redis(services: Services) -> tuple[str, Any]:
    """Claim the first free index of ``REDIS_DBS`` and empty it (but the claim); return its URL
    and a client of it. ``flushdb`` on that client gives the claim up with the rest."""
    import redis

    owner = f"{socket.gethostname()}:{os.getpid()}"
    for index in REDIS_DBS:
        url = with_database(services.redis_url, str(index))
        client = redis.Redis.from_url(url, socket_timeout=5, decode_responses=True)
        if client.set(REDIS_OWNER_KEY, owner, nx=True, ex=REDIS_CLAIM_S) or _take_over(
            client, owner
        ):
            stale = [k for k in client.scan_iter(count=1000) if k != REDIS_OWNER_KEY]
            if stale:
                client.delete(*stale)
            return url, client
        client.close()
    raise AssertionError(f"Redis databases {REDIS_DBS} are all claimed by other runs")


def _take_over(client: Any, owner: str) -> bool:
    """Take a claim left by a run on this host that is no longer running (compare and set)."""
    import redis

    host = socket.gethostname()
    with client.pipeline() as pipe:
        try:
            pipe.watch(REDIS_OWNER_KEY)
            held = pipe.get(REDIS_OWNER_KEY) or ""
            their_host, _, pid = held.rpartition(":")
            if their_host != host or not pid.isdigit() or pid_alive(int(pid)):
                return False
            pipe.multi()
            pipe.set(REDIS_OWNER_KEY, owner, ex=REDIS_CLAIM_S)
            pipe.execute()
        except redis.WatchError:
            return False
    return True
