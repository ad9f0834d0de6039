"""A small HTTP client of the drills API, for ``manage.py drill --server`` and the bench."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

FINAL = ("finished", "aborted", "refused")
PROGRESS_KINDS = ("health", "failover", "drill")
REPORT_WAIT_S = 15.0


class ApiError(Exception):
    def __init__(self, status: int, doc: dict[str, Any]) -> None:
        super().__init__(doc.get("detail") or f"HTTP {status}")
        self.status = status
        self.doc = doc


class DrillClient:
    """Start, follow and abort drills through a control plane's API."""

    def __init__(self, server: str, token: str, timeout_s: float = 10.0) -> None:
        self.server = server.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._seen: set[int] = set()  # events already shown

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.server}/api/v1/{path}",
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.token}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                doc: dict[str, Any] = json.loads(response.read() or b"{}")
                return doc
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read() or b"{}")
            except ValueError:
                err = {}
            raise ApiError(exc.code, err if isinstance(err, dict) else {}) from None

    def start(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.call("POST", "drills/", body)

    def get(self, drill_id: int) -> dict[str, Any]:
        return self.call("GET", f"drills/{drill_id}/")

    def abort(self, drill_id: int) -> dict[str, Any]:
        return self.call("POST", f"drills/{drill_id}/abort")

    def events(self, region: str, since: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode(
            [("region", region), ("since", since), ("ordering", "at"), ("limit", "200")]
            + [("kind", k) for k in PROGRESS_KINDS]
        )
        doc = self.call("GET", f"events/?{query}")
        results: list[dict[str, Any]] = doc.get("results", [])
        return results

    def follow(
        self,
        drill_id: int,
        region: str,
        say: Callable[[str], None],
        deadline_s: float,
        poll_s: float = 1.0,
    ) -> dict[str, Any]:
        """Poll until the drill ends and has its report (or the deadline); print its region's
        events meanwhile. An abort ends the status at once; the report follows shortly."""
        seen = self._seen
        doc = self.get(drill_id)
        since = doc["created_at"]
        status = ""
        end = time.monotonic() + deadline_s
        while True:
            if doc["status"] != status:
                status = doc["status"]
                say(f"status {status}")
            try:
                for event in self.events(region, since):
                    if event["id"] not in seen:
                        seen.add(event["id"])
                        say(f"{event['at'][11:23]} {event['message']}")
            except ApiError:
                pass  # progress is a courtesy; the drill's own status is what counts
            done = status == "refused" or (status in FINAL and doc.get("report") is not None)
            if done or time.monotonic() > end:
                return doc
            if status in FINAL:  # the runner is still writing the report
                end = min(end, time.monotonic() + REPORT_WAIT_S)
            time.sleep(poll_s)
            doc = self.get(drill_id)
