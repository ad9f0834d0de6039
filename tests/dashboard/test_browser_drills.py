"""The drills panel and the drill banner in headless Chromium, at 1280 and 390 px wide.

The server is ``manage.py demo`` with its own simulated agents, which obey drill instructions:
the fault really happens, is detected by the control loop and moves the GeoDNS answers the
drill's vantage points ask for. ``TRAFFICMGR_DOCS_SCREENSHOT=1`` also refreshes
docs/dashboard-drills.png and docs/dashboard-phone.png.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.test_browser import PHONE, SHOTS, WIDE, browser, page_errors, sign_in
from trafficmgr.testing.topology.liveserver import OPERATOR, VIEWER, LiveServer, launch, shutdown
from trafficmgr.testing.topology.processes import ROOT

__all__ = ["browser", "page_errors"]  # fixtures shared with test_browser

DOCS = os.environ.get("TRAFFICMGR_DOCS_SCREENSHOT") == "1"


@pytest.fixture(scope="module")
def server() -> Iterator[LiveServer]:
    srv = launch(agents=True)
    try:
        yield srv
    finally:
        shutdown(srv)


def region_cell(page: Any, region: str) -> Any:
    return page.locator(f"#regions-table tr[data-region='{region}'] td[data-machine]")


def wait_state(page: Any, region: str, state: str, timeout: float = 30_000) -> None:
    page.wait_for_selector(
        f"#regions-table tr[data-region='{region}'] td[data-state={state}]", timeout=timeout
    )


def preview(page: Any, kind: str, target: str, seconds: int) -> None:
    page.select_option("#drill-kind", kind)
    page.select_option("#drill-target", target)
    page.fill("#drill-duration", str(seconds))
    page.click("#drill-preview-btn")
    page.wait_for_selector("#drill-preview >> text=The guardrails allow this drill")
    assert page.locator("#drill-start").is_enabled()


def no_overflow(page: Any) -> None:
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1


PLACE = """(sel) => { const r = document.querySelector(sel).getBoundingClientRect();
  return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; }"""


def shoot(page: Any, selector: str, name: str) -> Path:
    """A screenshot of one part of the page, in var/screenshots/: taken again when the part
    moved meanwhile (a card above it grew by a line while the picture was taken)."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    for _ in range(5):
        box = page.evaluate(PLACE, selector)
        page.locator(selector).screenshot(path=str(path))
        if page.evaluate(PLACE, selector) == box:
            break
    return path


def keep(shot: Path, name: str) -> None:
    if DOCS:
        shutil.copyfile(shot, ROOT / "docs" / name)


def test_an_operator_previews_starts_and_follows_a_drill_to_its_report(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, OPERATOR, page_errors, viewport=WIDE)
    wait_state(page, "eu-west", "healthy")
    assert page.locator("#drill-banner").is_hidden()
    preview(page, "region_outage", "eu-west", 8)
    assert "euw-1" in page.locator("#drill-preview").inner_text()  # whom it touches
    page.click("#drill-start")
    page.wait_for_selector("#toast >> text=started")

    # While it runs: "drill" in the header, on the region's row, marker and card; never "down".
    page.wait_for_selector("#drill-banner:not([hidden]) >> text=eu-west")
    assert "practice, not an outage" in page.locator("#drill-banner").inner_text()
    wait_state(page, "eu-west", "drill", 10_000)
    assert page.locator(".marker[data-region='eu-west']").get_attribute("data-state") == "drill"
    page.locator("#regions-table tr[data-region='eu-west'] [data-select]").click()
    page.wait_for_selector("#region-card .drill-note >> text=under way here")
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(SHOTS / "drill-banner-1280.png"))

    live = page.locator("#drills-active .drill-live")
    live.locator("[data-step=detected].done").wait_for(timeout=20_000)
    assert region_cell(page, "eu-west").get_attribute("data-machine") == "down"
    assert region_cell(page, "eu-west").locator(".badge").inner_text() == "drill · down"
    live.locator("[data-step=dns].done").wait_for(timeout=20_000)
    assert live.locator("tr[data-vantage][data-moved=true]").count() >= 1
    shoot(page, "#drills-panel", "drill-live-1280")
    page.wait_for_selector("#drills-active .drill-live[data-phase=recovering]", timeout=20_000)
    # The recovery ramp: eu-west comes back through slow start, its share growing.
    live.locator("[data-step=recovered] >> text=recovering, slow start").wait_for(timeout=20_000)

    # It ends by itself once eu-west is back: the banner goes, the report is there.
    page.wait_for_selector("#drills-recent tr[data-status=finished]", timeout=90_000)
    page.wait_for_selector("#drill-banner", state="hidden")
    assert region_cell(page, "eu-west").get_attribute("data-state") != "drill"
    page.locator("#drills-recent tr[data-status=finished] [data-report]").click()
    report = page.locator("#drill-report")
    report.locator("svg.drill-timeline").wait_for()
    assert report.locator("rect[data-vantage]").count() > 0
    assert report.locator("line[data-mark=detected]").count() == 1
    assert "Report of drill" in report.inner_text()
    keep(shoot(page, "#drills-panel", "drills-1280"), "dashboard-drills.png")
    assert page_errors == []


def test_a_viewer_follows_a_drill_read_only_while_an_operator_aborts_it(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    operator = sign_in(browser, server, OPERATOR, page_errors, viewport=WIDE)
    viewer = sign_in(browser, server, VIEWER, page_errors, viewport=WIDE)
    assert viewer.locator("#drill-form").count() == 0
    wait_state(operator, "us-east", "healthy")
    preview(operator, "endpoint_failure", "use-4", 60)
    operator.click("#drill-start")
    operator.wait_for_selector("#toast >> text=started")

    # The viewer sees it under way, on its region, without an Abort button.
    viewer.wait_for_selector("#drill-banner:not([hidden]) >> text=use-4")
    viewer.wait_for_selector("#drills-active .drill-live")
    wait_state(viewer, "us-east", "drill", 10_000)
    assert viewer.locator("[data-abort]").count() == 0

    operator.locator("#drills-active [data-abort]").click()
    operator.wait_for_selector("#toast >> text=aborted")
    for page in (operator, viewer):
        page.wait_for_selector("#drills-recent tr[data-status=aborted]", timeout=20_000)
        page.wait_for_selector("#drill-banner", state="hidden")
        page.wait_for_selector("#drills-active >> text=No drill under way")
    assert page_errors == []


def test_the_drill_banner_and_panel_at_phone_width(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, OPERATOR, page_errors, viewport=PHONE)
    wait_state(page, "us-west", "healthy")
    preview(page, "latency", "usw-1", 60)
    page.click("#drill-start")
    page.wait_for_selector("#toast >> text=started")
    page.wait_for_selector("#drill-banner:not([hidden]) >> text=usw-1")
    # measured as soon as it shows: on a loaded machine the drill can end early (below), and
    # the banner with it, before the fault phase is reached
    banner = page.locator("#drill-banner").bounding_box()
    assert banner is not None and banner["x"] >= 0 and banner["x"] + banner["width"] <= 390
    wait_state(page, "us-west", "drill", 10_000)
    page.wait_for_selector("#drills-active .drill-live[data-phase=fault]", timeout=20_000)
    no_overflow(page)
    for node in page.locator("#drills-panel button, #drills-panel select").all():
        box = node.bounding_box()
        assert box is None or box["x"] + box["width"] <= 391, node.inner_text()
    keep(shoot(page, "#drills-panel", "drills-phone"), "dashboard-phone.png")
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    abort = page.locator("#drills-active [data-abort]")
    try:
        abort.click(timeout=15_000)
    except PlaywrightTimeout:
        # On a machine loaded by the rest of the suite the drill can end before the click
        # (its guardrails stop it when late heartbeats make the rest of the fleet look unwell,
        # or a runner whose liveness lapsed is rolled back): it must then have left the panel.
        assert abort.count() == 0, "the drill is under way but its Abort button cannot be clicked"
        print(f"drill ended before the click: {page.inner_text('#drills-recent tbody')[:300]}")
    page.wait_for_selector("#drill-banner", state="hidden", timeout=20_000)
    assert page_errors == []
