"""Forgetting a rater and deleting a study from the dashboard in Chromium (issue 28, item 4): each asks for
a confirmation first (a dismissed one changes nothing), then does it; screenshots in artifacts/."""
from __future__ import annotations

import os

import pytest
from helpers import ARTIFACTS, RESEARCHER, RESEARCHER_PASSWORD
from test_deletion import crowd, make_study

from webapp.accounts import create_user
from workers.store import keys

pytestmark = pytest.mark.browser


def test_forget_a_rater_and_delete_the_study_each_after_a_confirmation(browser, live_server, conn):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    make_study(conn, "gdpr")
    crowd(conn, "gdpr", raters=5, per_rater=4)
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(f"{live_server}/studies/gdpr?tab=raters")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.fill("#forget-rater", "p-02")
    page.check("#forget-confirm")
    dialogs = []
    page.once("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.click("#forget-submit")
    assert dialogs == ["Remove every answer of this rater for good?"]
    assert conn.xlen(keys.answers("gdpr")) == 20  # dismissed: nothing removed
    page.once("dialog", lambda d: d.accept())
    page.click("#forget-submit")
    page.wait_for_selector("text=Forgetting rater p-02")
    # the served worker runs the forget job: the Raters tab shows its result when it is done
    # a predicate as a function: an expression string is evaluated by eval() while polling, which the page's
    # Content-Security-Policy refuses (the wait failed whenever the job was not done at the first look)
    page.wait_for_function("() => document.getElementById('rebuild-status').textContent"
                           ".includes('Rater forgotten: 4 answer(s) taken out of the log')", timeout=60000)
    assert conn.xlen(keys.answers("gdpr")) == 16
    page.reload()
    page.wait_for_selector("#audit-table")
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, "forget-rater.png"), full_page=True)
    page.goto(f"{live_server}/studies/gdpr?tab=settings")
    page.fill("#delete-confirm", "gdpr")
    page.once("dialog", lambda d: d.accept())
    page.click("#delete-submit")
    page.wait_for_url(f"{live_server}/")
    assert "Deleted study gdpr" in page.inner_text("body")
    assert not conn.exists(keys.study("gdpr"))
