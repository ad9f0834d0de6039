"""The dashboard in headless Chromium against a real server (see liveserver.py).

Needs Debian's ``chromium`` and the ``playwright`` Python package (no browser download):
skipped with the reason when either is missing, failed instead when
``TRAFFICMGR_REQUIRE_BROWSER=1`` (CI). Screenshots go to var/screenshots/;
``TRAFFICMGR_DOCS_SCREENSHOT=1`` also refreshes docs/dashboard.png.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trafficmgr.testing.topology.liveserver import (
    CHROMIUM,
    CHROMIUM_ARGS,
    OPERATOR,
    PASSWORD,
    VIEWER,
    HeartbeatFeeder,
    LiveServer,
    browser_missing,
    fleet_regions,
    launch,
    shutdown,
)
from trafficmgr.testing.topology.processes import ROOT

MISSING = browser_missing()
REQUIRED = os.environ.get("TRAFFICMGR_REQUIRE_BROWSER", "") in {"1", "true", "yes", "on"}
SHOTS = ROOT / "var" / "screenshots"
WIDE = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def running() -> Iterator[tuple[LiveServer, HeartbeatFeeder]]:
    srv = launch()
    feeder = HeartbeatFeeder(srv).start()
    try:
        yield srv, feeder
    finally:
        feeder.stop()
        shutdown(srv)


@pytest.fixture(scope="module")
def server(running: tuple[LiveServer, HeartbeatFeeder]) -> LiveServer:
    return running[0]


@pytest.fixture(scope="module")
def feeder(running: tuple[LiveServer, HeartbeatFeeder]) -> HeartbeatFeeder:
    return running[1]


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if MISSING is not None:
        (pytest.fail if REQUIRED else pytest.skip)(f"browser tests: {MISSING}")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page_errors() -> list[str]:
    return []


def sign_in(
    browser: Any, server: LiveServer, user: str, errors: list[str], viewport: dict[str, int] = WIDE
) -> Any:
    page = browser.new_page(viewport=viewport)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{server.url}/")
    assert re.search(r"/login/\?next=/$", page.url), page.url
    page.fill("input[name=username]", user)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)  # a loaded machine is slow
    return page


def wait_healthy(page: Any, region: str, timeout: float = 60_000) -> None:
    # The live server is shared by the module's tests: a region an earlier test strained or
    # drained comes back through its hold-down and slow start, which a loaded machine stretches.
    page.wait_for_selector(
        f"#regions-table tr[data-region='{region}'] td[data-state=healthy]", timeout=timeout
    )


def shoot(page: Any, name: str, full: bool = False) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full)
    return path


def share(page: Any, region: str) -> float:
    value = page.get_attribute(
        f"#regions-table tr[data-region='{region}'] td[data-share]", "data-share"
    )
    return float(value or 0)


def test_every_region_is_on_the_map_and_in_the_table(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, VIEWER, page_errors)
    for region in fleet_regions():
        assert page.locator(f".marker[data-region='{region}']").count() == 1, region
        assert page.locator(f"#regions-table tr[data-region='{region}']").count() == 1, region
    wait_healthy(page, "eu-west")
    page.wait_for_function("document.querySelectorAll('.world .flow').length > 0")
    assert page.locator("#conn").inner_text() == "live"
    assert page.locator(".world .residency path[data-rule=gdpr]").count() > 10
    shoot(page, "dashboard-1280x800")
    if os.environ.get("TRAFFICMGR_DOCS_SCREENSHOT") == "1":
        page.wait_for_timeout(20_000)  # some ticks for the charts
        page.screenshot(path=str(ROOT / "docs" / "dashboard.png"))
    assert page_errors == []


def test_a_viewer_has_no_action_buttons(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, VIEWER, page_errors)
    wait_healthy(page, "us-east")
    assert page.locator("[data-action]").count() == 0
    assert page.locator("#action-dialog").count() == 0
    assert page_errors == []


def test_an_operator_drains_a_region_and_the_weights_move_without_reload(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, OPERATOR, page_errors)
    wait_healthy(page, "eu-west")
    wait_healthy(page, "eu-central")
    page.wait_for_function(
        "Number(document.querySelector(\"tr[data-region='eu-west'] td[data-share]\")"
        ".dataset.share) > 0"
    )
    page.evaluate("window.__sameDocument = true")
    row = page.locator("#regions-table tr[data-region='eu-west']")
    row.locator("[data-action=drain]").click()
    dialog = page.locator("#action-dialog")
    dialog.locator(".plan >> text=of all client traffic moves").wait_for()
    assert re.search(r"\b[A-Z]{2} / llama-3-70b", dialog.inner_text())  # names what moves
    shoot(page, "drain-plan")
    dialog.locator("#action-confirm").click()
    page.wait_for_selector("#toast:not([hidden])")
    page.wait_for_selector(
        "#regions-table tr[data-region='eu-west'] td[data-state=drained]", timeout=10_000
    )
    page.wait_for_function(
        "Number(document.querySelector(\"tr[data-region='eu-west'] td[data-share]\")"
        ".dataset.share) === 0"
    )
    assert page.locator("#routing-table .entry[data-region='eu-west']").count() == 0
    assert page.locator(".marker[data-region='eu-west']").get_attribute("data-state") == "drained"
    assert share(page, "eu-central") > 0.2  # EU clients moved there
    assert page.evaluate("window.__sameDocument") is True  # no reload
    page.locator("#events li[data-kind=action]").first.wait_for()
    shoot(page, "after-drain", full=True)

    # Draining the last EU region would strand the gdpr zone: the valve refuses it (409).
    page.locator("#regions-table tr[data-region='eu-central'] [data-action=drain]").click()
    dialog.locator(".warn >> text=safety valve").wait_for()
    dialog.locator("#action-confirm").click()
    error = dialog.locator("#action-error")
    error.wait_for(state="visible")
    assert "Refused by the control plane" in error.inner_text()
    assert "rule gdpr" in error.inner_text()
    shoot(page, "refused")
    dialog.locator("#action-cancel").click()

    # Undrain: the region comes back through slow start.
    page.locator("#regions-table tr[data-region='eu-west'] [data-action=undrain]").click()
    dialog.locator(".plan >> text=of all client traffic moves").wait_for()
    dialog.locator("#action-confirm").click()
    page.wait_for_selector(
        "#regions-table tr[data-region='eu-west'] td:is([data-state=recovering],"
        "[data-state=healthy])",
        timeout=15_000,
    )
    assert page_errors == []


def test_the_map_is_keyboard_reachable(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, VIEWER, page_errors)
    page.focus(".marker[data-region='us-east']")
    page.keyboard.press("Enter")
    page.wait_for_selector("#region-card h3 >> text=us-east")
    assert page.locator("#map-tip").is_visible()  # focus shows the hover card too
    page.keyboard.press("Tab")  # markers are in the tab order, west of the map last
    assert page.evaluate("document.activeElement.dataset.region") == "us-west"
    page.keyboard.press("Space")
    page.wait_for_selector("#region-card h3 >> text=us-west")


def test_phone_width_has_no_horizontal_overflow(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, VIEWER, page_errors, viewport=PHONE)
    wait_healthy(page, "ap-southeast")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 1
    shoot(page, "dashboard-phone", full=True)
    assert page_errors == []


def test_it_reconnects_by_itself_and_flags_stale_data(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = browser.new_page(viewport=WIDE)
    sockets: list[Any] = []
    mute = {"on": False}

    def route(ws: Any) -> None:
        upstream = ws.connect_to_server()
        sockets.append(ws)

        def to_page(message: str | bytes) -> None:
            if not mute["on"] or '"type": "snapshot"' in str(message)[:40]:
                ws.send(message)

        upstream.on_message(to_page)

    page.route_web_socket(re.compile(r".*/ws/dashboard/$"), route)
    page.goto(f"{server.url}/login/?next=/")
    page.fill("input[name=username]", VIEWER)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-ready=true]", timeout=15_000)
    wait_healthy(page, "us-east")
    assert page.locator("#stale").is_hidden()

    mute["on"] = True  # the server goes quiet: no tick reaches the page
    page.wait_for_selector("#stale >> text=Stale", timeout=10_000)
    shoot(page, "stale")
    mute["on"] = False

    sockets[-1].close(code=1011, reason="server restart")
    page.wait_for_selector("#stale >> text=Connection lost", timeout=5_000)
    page.wait_for_function("document.querySelector('#conn').textContent === 'live'", timeout=15_000)
    page.wait_for_selector("#stale", state="hidden", timeout=10_000)
    assert len(sockets) >= 2  # it opened a new socket by itself
    assert page_errors == []


REGION_CELLS = """[...document.querySelectorAll('#regions-table tbody td')].map((td) => {
  const box = td.getBoundingClientRect();
  return [td.dataset.label, box.left, box.right,
          getComputedStyle(td, '::before').content.replace(/^"|"$/g, '')];
})"""


def test_phone_tables_fit_and_reasons_open_with_a_tap(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, VIEWER, page_errors, viewport=PHONE)
    wait_healthy(page, "eu-west")
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
    # Every cell of the regions table is on screen, under its column's name.
    cells = page.evaluate(REGION_CELLS)
    assert len(cells) >= 5 * 12
    for label, left, right, shown in cells:
        assert left >= 0 and right <= PHONE["width"] + 1, (label, left, right)
        assert shown == label
    # A region's reason is in its row, not in a hover title.
    reason = page.locator("#regions-table tr[data-region='eu-west'] .sub.reason")
    assert reason.is_visible() and "healthy" in reason.inner_text()
    # A weight's reason opens with a tap, and stays open when the next table arrives.
    entry = page.locator("#routing-table .entry").first
    key = entry.locator(".entry-toggle").get_attribute("data-reason-key")
    assert entry.locator(".reason").is_hidden()
    entry.locator(".entry-toggle").click()
    opened = page.locator(f"#routing-table [data-reason-key='{key}'] + .reason")
    assert opened.is_visible() and opened.inner_text().strip()
    version = page.locator("#table-version").inner_text()
    page.wait_for_function(
        f"document.querySelector('#table-version').textContent !== {version!r}", timeout=20_000
    )
    assert opened.is_visible()
    boxes = page.evaluate(
        "[...document.querySelectorAll('#routing-table td')].map((td) => "
        "td.getBoundingClientRect().right)"
    )
    assert boxes and max(boxes) <= PHONE["width"] + 1
    assert page.locator("#routing-table [title]").count() == 0  # no reason left in a hover
    # An endpoint's health reason shows in the region card without hovering.
    page.locator("#regions-table tr[data-region='eu-west'] [data-select]").click()
    why = page.locator("#region-card .endpoints .why").first
    assert why.is_visible() and why.inner_text().strip()
    assert page.locator("#region-card .endpoints [title]").count() == 0
    shoot(page, "phone-tables", full=True)
    assert page_errors == []


PLAN_AND_TABLE = """[...document.querySelectorAll('#action-plan tr[data-zone]')].map((tr) => {
  const cell = document.querySelector(
    `#routing-table td[data-zone="${tr.dataset.zone}"][data-model="${tr.dataset.model}"]`);
  const live = cell ? [...cell.querySelectorAll('.entry-toggle')]
    .map((b) => b.textContent.trim()).join(', ') : 'none';
  return [tr.dataset.zone, tr.dataset.model, tr.querySelector('.before').textContent, live];
})"""


def test_routing_follows_live_after_a_change_and_plans_start_from_it(
    browser: Any, server: LiveServer, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, OPERATOR, page_errors)
    wait_healthy(page, "us-west")
    dialog = page.locator("#action-dialog")
    drain = "#regions-table tr[data-region='us-west'] [data-action=drain]"

    # A drain plan's "before" is the live table shown under the dialog, list by list.
    page.locator(drain).click()
    dialog.locator(".plan >> text=of all client traffic moves").wait_for()
    rows = page.evaluate(PLAN_AND_TABLE)  # read together: one table for both
    assert rows
    for zone, model, before, live in rows:
        assert before == live, (zone, model, before, live)
    dialog.locator("#action-cancel").click()

    # A recorded version is plainly not live; a change brings the live table back.
    page.locator("#history [data-version]").first.click()
    bar = page.locator("#routing-viewing .history-bar")
    bar.wait_for()
    assert "Not live" in bar.inner_text()
    page.locator(drain).click()
    dialog.locator(".plan >> text=of all client traffic moves").wait_for()
    dialog.locator("#action-confirm").click()
    page.wait_for_selector("#routing-viewing .notice >> text=Back to the live table")
    assert bar.count() == 0
    assert "live · version" in page.locator("#routing-viewing").inner_text()

    # "Stay on this version" keeps a recorded version open through changes.
    page.locator("#history [data-version]").first.click()
    bar.wait_for()
    bar.locator("[data-stay]").check()
    page.locator("#regions-table tr[data-region='us-west'] [data-action=undrain]").click()
    dialog.locator(".plan >> text=of all client traffic moves").wait_for()
    dialog.locator("#action-confirm").click()
    page.wait_for_selector("#toast >> text=Applied")
    assert bar.is_visible()
    bar.locator("[data-live]").click()
    page.wait_for_selector("#routing-viewing .history-bar", state="detached")
    assert page_errors == []


def test_a_slow_endpoint_is_shown_degraded_at_phone_width_and_healthy_again(
    browser: Any, server: LiveServer, feeder: HeartbeatFeeder, page_errors: list[str]
) -> None:
    page = sign_in(browser, server, VIEWER, page_errors, viewport=PHONE)
    wait_healthy(page, "us-east")
    page.locator("#regions-table tr[data-region='us-east'] [data-select]").click()
    row = "#region-card .endpoints tr[data-endpoint='use-2']"
    page.wait_for_selector(f"{row} td[data-state=healthy]", timeout=20_000)
    feeder.slow.add("use-2")  # 28 % of us-east's capacity: the region itself stays healthy
    try:
        cell = page.locator(f"{row} td[data-state=degraded]")
        cell.wait_for(timeout=20_000)
        text = cell.inner_text()
        assert "degraded" in text and "over objective" in text, text
        # read in one go: every tick's new figures render the rows afresh
        left, right = page.evaluate(
            f"(() => {{ const b = document.querySelector({row + ' td[data-state]'!r})"
            ".getBoundingClientRect(); return [b.left, b.right]; })()"
        )
        assert left >= 0 and right <= PHONE["width"] + 1, (left, right)
        count = page.locator("#regions-table tr[data-region='us-east'] [data-degraded]")
        assert count.is_visible() and count.inner_text() == "1 degraded"
        assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 1
        shoot(page, "phone-endpoint-degraded", full=True)
    finally:
        feeder.slow.discard("use-2")
    # back under the band: healthy again once the hold-down has passed
    page.wait_for_selector(f"{row} td[data-state=healthy]", timeout=30_000)
    assert page.locator("#regions-table tr[data-region='us-east'] [data-degraded]").count() == 0
    assert page_errors == []
