"""What a store outage looks like from outside: a 503 ``unavailable`` with ``Retry-After``.

When Redis (hot state, cache, Celery broker) or the database cannot be reached, a request may
succeed a few seconds later; it is answered 503 with ``Retry-After: OUTAGE_RETRY_AFTER_S`` in
the one error format, by the DRF views (``errors.exception_handler``), the ASGI front of the
hot paths (``regions.api.fastfront``) and every other Django view (``regions.middleware``).
Paths that can do without the store keep working (fail static): the rate limit is not
enforced without its cache (``throttling``), and the token cache and hot state keep what
they hold.

Kept apart from ``errors`` so that modules DRF loads from its settings (the throttle) can use
it without importing DRF's views. A partitioned hot state raises a timeout once, then its
breaker's ``HotStateAway`` (a ``ConnectionError``) at once for a spell
(``regions.hotstate.redis_client``): both are outages here.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from django.db import DatabaseError, InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

# Redis refusing or timing out, the Celery broker behind it, the database refusing, gone or
# locked: the request may succeed later, so 503 with Retry-After.
STORE_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    BrokerError,
    OperationalError,
    InterfaceError,
)
OUTAGE_RETRY_AFTER_S = 5
OUTAGE_LOG_EVERY_S = 10.0


def is_outage(exc: BaseException) -> bool:
    """Whether ``exc`` says a store cannot be reached (``STORE_ERRORS``).

    A bare ``DatabaseError`` counts too: drivers raise a subclass for what they recognise, and
    the token cache raises the bare class while it waits before asking a failed database again.
    Its other subclasses (integrity, data, programming errors) are not outages.
    """
    return isinstance(exc, STORE_ERRORS) or type(exc) is DatabaseError


log = logging.getLogger("django.request")
_logged: dict[str, float] = {}
_logged_lock = threading.Lock()


def store_of(exc: BaseException) -> str:
    """The store an outage error is about, as the error detail names it."""
    if isinstance(exc, RedisError | BrokerError):
        return "Redis"
    return "the database"


def outage_body(exc: BaseException) -> dict[str, Any]:
    """The error format's body (``errors.error_body``) for an outage of ``exc``'s store."""
    detail = f"{store_of(exc)} cannot be reached; retry in {OUTAGE_RETRY_AFTER_S} s"
    return {"error": "unavailable", "detail": detail, "fields": {}}


def outage_headers() -> dict[str, str]:
    return {"Retry-After": str(OUTAGE_RETRY_AFTER_S)}


def note_outage(exc: BaseException, path: str) -> None:
    """Log an outage answer, at most once per store every ``OUTAGE_LOG_EVERY_S`` seconds.

    Under an outage every request fails the same way; one line says so without a flood.
    """
    store, now = store_of(exc), time.monotonic()
    with _logged_lock:
        last = _logged.get(store)
        if last is not None and now - last < OUTAGE_LOG_EVERY_S:
            return
        _logged[store] = now
    log.warning(
        "Service Unavailable: %s: %s cannot be reached (%s: %s)",
        path,
        store,
        type(exc).__name__,
        str(exc)[:300],
    )
