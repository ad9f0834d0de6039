"""What ``manage.py demo`` keeps in ``var/``: its credentials, where it runs, its log.

- ``var/demo-credentials.json`` (mode 0600): the operator login's password and the operator
  API token. A restart keeps them, so a browser's session and a script's token go on working;
  ``--rotate-credentials`` issues new ones (and revokes the old token).
- ``var/demo.json``: the running demo's URL, DNS address and process id, written once it
  listens and removed when it stops. ``manage.py drill`` (and anyone else) finds the demo
  there instead of assuming port 8000.
- ``var/demo.log``: the log of every component (a line per second or more); the console keeps
  the banner with the credentials and warnings only.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

CREDENTIALS_FILE = "demo-credentials.json"
RUN_FILE = "demo.json"
LOG_FILE = "demo.log"
SERVER_ENV = "TRAFFICMGR_SERVER"  # a control plane's URL, for commands that call one
DEFAULT_SERVER = "http://127.0.0.1:8000"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str
    token: str


def var_path(name: str) -> Path:
    return Path(settings.VAR_DIR) / name


def write_private(path: Path, doc: dict[str, Any]) -> None:
    """Write JSON readable by this user only (it holds a password and a token)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        json.dump(doc, out, indent=2)
        out.write("\n")
    path.chmod(0o600)


def load_credentials() -> Credentials | None:
    """The kept credentials, or None (none kept yet, or a file that does not parse)."""
    try:
        doc = json.loads(var_path(CREDENTIALS_FILE).read_text())
        found = Credentials(str(doc["username"]), str(doc["password"]), str(doc["token"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if found.username and found.password and found.token else None


def save_credentials(credentials: Credentials) -> None:
    write_private(var_path(CREDENTIALS_FILE), asdict(credentials))


def write_run_file(url: str, dns: str) -> None:
    write_private(var_path(RUN_FILE), {"url": url, "dns": dns, "pid": os.getpid()})


def remove_run_file() -> None:
    """Remove ``demo.json`` if it is this process's (another demo may have replaced it)."""
    path = var_path(RUN_FILE)
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


def running_demo() -> dict[str, Any] | None:
    """The running demo's ``demo.json`` (url, dns, pid), or None when no demo runs."""
    try:
        doc = json.loads(var_path(RUN_FILE).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("url"), str):
        return None
    return doc if _alive(doc.get("pid")) else None


def server_url() -> tuple[str, str]:
    """The control plane to call, and where that came from: ``$TRAFFICMGR_SERVER``, else the
    running demo's ``var/demo.json``, else the demo's default address."""
    given = os.environ.get(SERVER_ENV, "").strip()
    if given:
        return given.rstrip("/"), f"${SERVER_ENV}"
    demo = running_demo()
    if demo is not None:
        return str(demo["url"]).rstrip("/"), str(var_path(RUN_FILE))
    return DEFAULT_SERVER, "the default"


def log_to_file(path: Path) -> None:
    """Send the log to ``path``; the console keeps warnings and errors only."""
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    to_file = logging.FileHandler(path)
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for handler in root.handlers:
        if type(handler) is logging.StreamHandler:  # the console (not a file handler)
            handler.setLevel(logging.WARNING)
    root.addHandler(to_file)
