"""How a notification is said on each kind of channel, and how one attempt to send it goes.

Webhooks get a generic JSON body (``event``, ``severity``, ``region``, ``endpoint``,
``summary``, ``at``, ``key``, ``channel``, ``notification``); Slack-compatible hooks a
``text``; PagerDuty an Events API v2 ``trigger`` whose ``dedup_key`` is the alert's key;
email goes through Django's mail backend. Each attempt is bounded by ``timeout_s``. The
outcome says whether to retry: a timeout, a refused connection, 429 and 5xx are worth
another attempt; any other 4xx is permanent (the URL or key is wrong: retrying cannot help).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from django.core.mail import EmailMessage, get_connection

from regions.models import ChannelKind, Notification

PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
USER_AGENT = "trafficmgr-alerts/1"
MAX_REPLY_BYTES = 4096  # read (and drop) at most this much of a receiver's answer


@dataclass(frozen=True, slots=True)
class Outcome:
    delivered: bool
    permanent: bool = False  # no retry can help
    error: str = ""


def body_of(n: Notification, kind: str, routing_key: str = "") -> dict[str, Any]:
    """Return the JSON body a channel of ``kind`` receives for ``n``."""
    at = n.at.isoformat()
    if kind == ChannelKind.SLACK:
        where = "/".join(p for p in (n.region, n.endpoint) if p)
        return {"text": f"[{n.severity.upper()}] {n.name} {where}: {n.summary}"}
    if kind == ChannelKind.PAGERDUTY:
        return {
            "routing_key": routing_key,
            "event_action": "trigger",
            "dedup_key": n.key,
            "payload": {
                "summary": n.summary[:1024],
                "source": n.endpoint or n.region or "trafficmgr",
                "severity": n.severity,
                "timestamp": at,
                "component": n.endpoint or None,
                "group": n.region or None,
                "class": n.name,
            },
        }
    return {
        "event": n.name,
        "severity": n.severity,
        "region": n.region,
        "endpoint": n.endpoint,
        "summary": n.summary,
        "at": at,
        "key": n.key,
        "channel": n.channel_name,
        "notification": n.pk,
    }


def send(n: Notification, kind: str, url: str, address: str, timeout_s: float) -> Outcome:
    """Make one attempt to deliver ``n``; never raises."""
    try:
        if kind == ChannelKind.EMAIL:
            return send_email(n, address, timeout_s)
        target = url or (PAGERDUTY_URL if kind == ChannelKind.PAGERDUTY else "")
        return post_json(target, body_of(n, kind, address), timeout_s)
    except Exception as exc:  # a transport's surprise is a failed attempt, not a dead worker
        return Outcome(False, error=f"{type(exc).__name__}: {exc}"[:500])


def post_json(url: str, body: dict[str, Any], timeout_s: float) -> Outcome:
    """POST ``body`` as JSON; 2xx is delivered, 429/5xx/network errors retry, 4xx is final."""
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT},
        method="POST",
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=timeout_s) as reply:
            reply.read(MAX_REPLY_BYTES)
            return Outcome(True)
    except urllib.error.HTTPError as exc:
        code = exc.code
        permanent = 400 <= code < 500 and code != 429
        return Outcome(False, permanent, f"HTTP {code} from the receiver")
    except TimeoutError:
        return Outcome(False, error=f"no answer within {timeout_s:g} s")
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return Outcome(False, error=f"cannot reach the receiver: {reason}"[:500])


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse redirects: a receiver may not send an alert somewhere else (e.g. inside)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def send_email(n: Notification, address: str, timeout_s: float) -> Outcome:
    subject = f"[trafficmgr] {n.severity}: {n.name} {n.region}".strip()
    lines = [n.summary, "", f"at: {n.at.isoformat()}", f"key: {n.key}"]
    connection = get_connection(timeout=timeout_s)
    EmailMessage(subject[:200], "\n".join(lines), to=[address], connection=connection).send()
    return Outcome(True)
