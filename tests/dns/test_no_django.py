"""The DNS server runs standalone: importing it pulls in no Django, Celery or Channels."""

from __future__ import annotations

import subprocess
import sys

from tests.dns.world import ROOT

MODULES = (
    "trafficmgr.dns.cli",
    "trafficmgr.dns.server",
    "trafficmgr.dns.responder",
    "trafficmgr.dns.sources",
)


def test_dns_package_imports_no_web_framework() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in MODULES)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('django', 'celery', 'channels', 'rest_framework'))\n"
        "print(','.join(bad))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""
