"""Pytest plugin: integration tests need real PostgreSQL / Redis.

Without them (a laptop) the tests skip and the run ends with the list of what was
skipped; with ``TRAFFICMGR_REQUIRE_SERVICES=1`` (CI) a skipped integration test fails.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import pytest

# Defaults for a bare ``pytest`` run, set before pytest-django loads the settings;
# real values from the environment win.
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production")
os.environ.setdefault("TRAFFICMGR_TLS", "0")  # the test client speaks plain HTTP
os.environ.setdefault("TRAFFICMGR_VAR_DIR", tempfile.mkdtemp(prefix="trafficmgr-test-var-"))

REQUIRED = os.environ.get("TRAFFICMGR_REQUIRE_SERVICES", "") in {"1", "true", "yes", "on"}
_skipped: list[str] = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Any:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and item.get_closest_marker("integration") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if REQUIRED:
            report.outcome = "failed"
            report.longrepr = (
                f"integration test skipped while TRAFFICMGR_REQUIRE_SERVICES=1: {reason}"
            )
        elif report.when in {"setup", "call"}:
            _skipped.append(f"{item.nodeid}: {reason}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tiers that follow from where a test lives: ``e2e`` and ``browser``."""
    for item in items:
        path = item.path.as_posix()
        if "/tests/e2e/" in path:
            item.add_marker(pytest.mark.e2e)
            item.add_marker(pytest.mark.slow)
        elif "/tests/dashboard/test_browser" in path:
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.slow)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _skipped:
        terminalreporter.section("integration tests skipped (real service not available)")
        for line in _skipped:
            terminalreporter.write_line(line)
