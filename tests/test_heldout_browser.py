"""The Learning tab's held-out curve in a real headless Chromium: the chart is drawn next to its ceiling, with
the sentence saying what it means and how many answers are held out."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import RESEARCHER, RESEARCHER_PASSWORD
from test_heldout import answer, make_study

from webapp.accounts import create_user
from workers.store import keys

pytestmark = pytest.mark.browser


def test_the_learning_tab_draws_the_heldout_curve_and_its_ceiling(browser, conn, start_serve):
    sid = make_study(conn, "held-browser", algorithms=[{"algorithm": "random_triplets"}], heldout_share=0.25)
    answer(conn, sid, 400, np.random.default_rng(8), every=40)
    # validation repeats answered alike 9 times in 10 set the ceiling (counted by the update pass)
    conn.hset(keys.engine_stats(sid), mapping={"repeats:triplet": 10, "repeats-agreed:triplet": 9,
                                               "repeat-choices:triplet": 20})
    answer(conn, sid, 10, np.random.default_rng(9))
    base = start_serve()
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{base}/studies/{sid}?tab=learning")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.wait_for_selector(".heldout-plot .uplot canvas", timeout=15000)
    held = conn.llen(keys.heldout(sid))
    note = page.locator("#heldout-note").inner_text()
    assert "25% of each learner's questions are drawn at random and held out" in note
    assert f"({held} held-out answers so far)" in note
    caption = page.locator(".heldout-caption").inner_text()
    assert f"on {held} held-out answers" in caption
    assert "ceiling 0.95 (10 repeated questions, 90% answered alike)" in caption  # (1 + sqrt(.8)) / 2
    # the chart's legend names both lines: the learner's held-out agreement and the ceiling
    legend = page.locator(".heldout-plot .u-legend").inner_text()
    assert "held-out agreement" in legend and "ceiling (repeats)" in legend
