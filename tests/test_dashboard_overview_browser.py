"""The Overview of a paid study on a laptop screen (1366 x 768) in headless Chromium: healthy? how good?
who cheats? answered above the fold while a simulated crowd with two careless raters has answered,
saved as artifacts/dashboard-overview-laptop.png."""
from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import ARTIFACTS, RESEARCHER, RESEARCHER_PASSWORD, wait_for
from scipy.spatial.distance import cdist

from simulation.crowd import Crowd, NoiseModel, Truth
from simulation.oracles import HUMAN_LAPSE
from webapp.accounts import create_user
from webapp.cli.demo_study import demo_items
from webapp.handles import identifier
from workers.store import keys
from workers.store.config import StudyConfig
from workers.store.queue import schedule_update
from workers.store.raters import rater_table
from workers.store.studies import create_study

pytestmark = pytest.mark.browser
LAPTOP = {"width": 1366, "height": 768}


@pytest.fixture
def paid_server(conn, start_serve):
    items = demo_items(12)
    config = StudyConfig.from_dict({
        "name": "Colours, a paid pilot", "random_state": 2, "pool_size": 10, "consent": "You agree.",
        "limits": {"max_questions_per_rater": 40, "answer_budget": 1000},
        "attention": {"rate": 0.1, "validation_repeats": 10, "min_self_agreement": 0.6},
        "completion": {"prolific_redirect_url": "https://app.prolific.com/submissions/complete?cc={code}"}})
    create_study(conn, config, items, study_id="paid")
    schedule_update(conn, "paid")
    return start_serve(env={"PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES": "127.0.0.1"}), items


def test_the_overview_answers_health_quality_and_cheating_on_a_laptop_screen(browser, paid_server, conn, tmp_path):
    base, items = paid_server
    points = np.array([item.position for item in items], dtype=float)
    D = cdist(points, points)
    truth = Truth([item.id for item in items], D / D.max(), source="demo colours", points=points)
    secret = (tmp_path / "instance" / "secret_key").read_text().strip()  # the people read handles with it
    crowd = Crowd(base, "paid", truth, NoiseModel(sigma=0.05, logistic_scale=0.02, lapse=HUMAN_LAPSE), raters=6,
                  careless=0.34, think=0.1, seed=3, identify=identifier(secret, "paid", [item.id for item in items]))
    report = crowd.run(progress=lambda *_: None, every=60)
    assert report.answers >= 200, report.errors
    # whether a careless rater's random answers are caught is left to chance (tests/test_answer_check.py
    # pins the detection, seeded): this test pins that the overview shows the count the checks flagged,
    # once the answer check has seen every answer
    def checked() -> bool:
        fields = {k.decode(): v for k, v in conn.hgetall(keys.rater_stats("paid")).items()}
        return all(int(fields.get(keys.rater_field(r["rater"], "checked_answers"), 0)) >= r["answers"]
                   for r in rater_table(conn, "paid"))

    wait_for(checked, timeout=60)
    expected = sum(r["flagged"] for r in rater_table(conn, "paid"))
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    page = browser.new_page(viewport=LAPTOP)
    page.goto(f"{base}/studies/paid")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.wait_for_selector("#dashboard")
    for plot in ("plot-per-minute", "plot-cumulative"):
        page.wait_for_selector(f"#{plot} .uplot canvas", state="attached")
    # healthy? how good? who cheats? each box whole above the fold, without scrolling
    for box in ("glance-health", "glance-quality", "glance-raters"):
        bottom = page.evaluate(f"() => document.getElementById('{box}').getBoundingClientRect().bottom")
        assert bottom <= LAPTOP["height"], (box, bottom)
    assert page.evaluate("() => window.scrollY") == 0
    cheats = page.locator("#glance-raters").inner_text()
    assert "self-agreement" in cheats and "catch trials failed" in cheats
    assert int(page.locator("#n-flagged").inner_text()) == expected  # the raters the checks flagged
    assert "sim-0" in cheats or "sim-1" in cheats
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-overview-laptop.png"))
    page.close()
