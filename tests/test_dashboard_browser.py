"""The study dashboard in a real headless Chromium: uPlot charts render, and counters, plots, the
learned graph and the raters table refresh while raters answer — without reloading the page."""
from __future__ import annotations

import os

import pytest
from conftest import RESEARCHER, RESEARCHER_PASSWORD
from test_browser import ARTIFACTS, browser, live_server  # noqa: F401  (fixtures)

from webapp.accounts import create_user

pytestmark = pytest.mark.browser


def test_dashboard_plots_render_and_refresh_without_reload(browser, live_server, conn):  # noqa: F811
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{live_server}/studies/browser")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.wait_for_selector("#dashboard")
    # the vendored uPlot draws every chart into a canvas
    for plot in ("plot-per-minute", "plot-cumulative", "plot-pool", "plot-latency"):
        page.wait_for_selector(f"#{plot} .uplot canvas")
    page.wait_for_selector("#nn-graph g.item")
    assert page.locator("#nn-graph g.item").count() == 12
    page.evaluate("window.__notReloaded = true")

    # a rater answers through the JSON API in a second browser context
    rater = browser.new_context()
    api = rater.request
    api.get(f"{live_server}/s/browser?PROLIFIC_PID=p-dash")
    for _ in range(12):
        question = api.get(f"{live_server}/api/studies/browser/questions/next").json()["question"]
        response = api.post(f"{live_server}/api/studies/browser/answers",
                            data={"token": question["token"], "choice": question["candidates"][0]["index"],
                                  "response_ms": 1200})
        assert response.status == 201, response.text()

    page.wait_for_function("() => document.getElementById('n-answers').textContent === '12'", timeout=15000)
    page.wait_for_selector("#plot-response .uplot canvas", timeout=15000)
    page.wait_for_selector('#raters-table tr[data-rater="p-dash"]', timeout=20000)
    assert page.locator('#raters-table tr[data-rater="p-dash"] td').nth(1).inner_text() == "12"
    page.wait_for_function("() => document.querySelectorAll('#nn-graph line.edge').length > 0", timeout=20000)
    assert page.evaluate("window.__notReloaded === true")
    assert int(page.locator("#dashboard").get_attribute("data-updates")) >= 2

    page.locator("#nn-graph g.item").first.dispatch_event("click")  # items may overlap
    page.wait_for_selector("#candidates h3")
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-study.png"), full_page=True)
    rater.close()
