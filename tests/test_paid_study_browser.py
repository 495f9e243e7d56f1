"""A paid study in a real headless Chromium: the rater's hint fits the device, and the Learning
section draws the budget plan's expected curve."""
from __future__ import annotations

import json

import pytest
from helpers import PHONE, RESEARCHER, RESEARCHER_PASSWORD, researcher_page

from webapp.accounts import create_user
from workers.store import keys

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(("device", "says", "not_said"), [
    (PHONE, "Tap", "←"),
    ({}, "←", "Tap"),
], ids=["phone", "mouse"])
def test_the_hint_says_tap_on_a_phone_and_names_the_arrow_keys_with_a_mouse(browser, live_server, device, says,
                                                                           not_said):
    context = browser.new_context(**device)
    page = context.new_page()
    page.goto(f"{live_server}/s/browser?PROLIFIC_PID=p-hint")
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    hint = page.locator("#question .hint").inner_text()
    assert says in hint and not_said not in hint, hint
    context.close()


def test_learning_section_draws_the_plans_expected_curve(browser, live_server, conn):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    plan = {"version": 1, "n_items": 12, "budgets": [10, 50, 200], "source": "a pilot", "spread": "seeds",
            "runs": 3, "target": 0.9, "metric": "exact", "pay": 0.1, "currency": "$",
            "algorithms": {name: {"exact": {"mean": [0.2, 0.5, 0.9], "min": [0.1, 0.4, 0.8], "max": [0.3, 0.6, 1.0]},
                                  "hit3": {"mean": [0.5, 0.8, 1.0], "min": [0.4, 0.7, 1.0], "max": [0.6, 0.9, 1.0]},
                                  "cpu_seconds": 0.1} for name in ("anntri", "random_triplets")},
            "reach": {"anntri": {"value": 200.0, "bound": "="}, "random_triplets": {"value": 200.0, "bound": ">"}}}
    conn.set(keys.plan("browser"), json.dumps(plan))
    with researcher_page(browser, live_server, "/studies/browser?tab=learning", {"width": 1280, "height": 900}) as page:
        page.wait_for_selector("#plan-plot .uplot canvas")
        assert page.locator("#plan-table tbody tr").count() == 2
        assert "$240" in page.locator("#plan-table thead").inner_text()  # 200 answers x 12 items x $0.10
