"""The researcher's preview (issue 28, item 5): the rater pages of any study, every question kind it asks,
consent and practice included, with nothing recorded: no answer, rater, counter, session or code."""
from __future__ import annotations

import os

import pytest
from helpers import ARTIFACTS, RESEARCHER, RESEARCHER_PASSWORD, agree_to_consent, colour_items

from webapp.accounts import create_user
from workers.store.config import StudyConfig
from workers.store.studies import create_study

#: Triplet and rating questions in one study, with consent, practice and a per-rater limit.
CONFIG = {
    "name": "Two kinds", "random_state": 1, "pool_size": 6, "consent": "You agree to **take part**.",
    "instructions": "Pick the more similar colour.",
    "algorithms": [{"algorithm": "random_triplets", "label": "tri"},
                   {"algorithm": "simforest", "question_kind": "rating", "label": "rated"}],
    "rating": {"min": 1, "max": 5, "step": 1},
    "practice": [{"head": "c1", "candidates": ["c2", "c8"], "answer": "c2", "explanation": "c2 is closer."}],
    "limits": {"max_questions_per_rater": 6},
}


def snapshot(conn) -> dict[bytes, bytes]:
    """Every key and its value, but for the researcher's login session and the request-time metrics
    (written by every request, researcher or not)."""
    skip = (b"proxima:researcher-session:", b"proxima:metrics:")
    return {k: conn.dump(k) for k in conn.scan_iter() if not k.startswith(skip)}


def study_keys(conn) -> dict[bytes, bytes]:
    return {k: conn.dump(k) for k in conn.scan_iter(match="proxima:{two-kinds}:*")}


@pytest.fixture
def two_kinds(conn):
    items = [item.__class__(**{**item.__dict__, "label": "ab"[i % 2]}) for i, item in enumerate(colour_items())]
    return create_study(conn, StudyConfig.from_dict(CONFIG), items, study_id="two-kinds")


def test_a_preview_goes_through_consent_and_every_kind_and_writes_nothing(researcher_client, conn, two_kinds):
    client = researcher_client
    before = snapshot(conn)
    consent = client.get("/studies/two-kinds/preview").get_data(as_text=True)
    assert 'id="preview-banner"' in consent and "<strong>take part</strong>" in consent
    assert 'action="/studies/two-kinds/preview"' in consent
    agreed = client.post("/studies/two-kinds/preview", data={"decision": "agree"})
    assert agreed.status_code == 302 and agreed.headers["Location"].endswith("/studies/two-kinds/preview?consented=1")
    page = client.get("/studies/two-kinds/preview?consented=1").get_data(as_text=True)
    assert 'data-next-url="/studies/two-kinds/preview/next"' in page and "c2 is closer." in page
    assert 'data-study="preview.two-kinds"' in page and 'data-total="6"' in page

    question = client.get("/studies/two-kinds/preview/next").get_json()["question"]
    kinds = []
    while True:
        kinds.append(question["kind"])
        if question["kind"] == "rating":
            assert question["scale"]["max"] == 5 and len(question["items"]) == 2
            body = {"token": question["token"], "value": 4}
        else:
            assert question["prompt"] and len(question["candidates"]) == 2
            body = {"token": question["token"], "choice": question["candidates"][1]["handle"]}
        reply = client.post("/studies/two-kinds/preview/answers", json=body).get_json()
        if "done" in reply:
            break
        question = reply["next"]
    assert kinds == ["triplet", "rating"] * 3
    done = client.get(reply["done"]["finish_url"]).get_data(as_text=True)
    assert "none is made for a preview" in done
    # a wrong answer is refused as the live route refuses it
    bad = client.post("/studies/two-kinds/preview/answers", json={"token": question["token"], "value": 9})
    assert bad.status_code == 400
    assert snapshot(conn) == before


def test_a_preview_token_is_refused_by_the_raters_answer_route(researcher_client, conn, two_kinds):
    question = researcher_client.get("/studies/two-kinds/preview/next").get_json()["question"]
    refused = researcher_client.post("/api/studies/two-kinds/answers",
                                     json={"token": question["token"], "choice": question["candidates"][0]["handle"]})
    assert refused.status_code == 400 and refused.get_json()["error"]["code"] == "invalid_token"
    assert conn.xlen("proxima:{two-kinds}:answers") == 0 and conn.scard("proxima:{two-kinds}:raters") == 0


def test_only_a_researcher_may_preview(client, two_kinds):
    assert client.get("/studies/two-kinds/preview").status_code == 302  # to the login page
    assert client.get("/studies/two-kinds/preview/next").status_code == 302


@pytest.mark.browser
def test_a_researcher_previews_a_study_in_chromium_and_nothing_is_recorded(browser, live_server, conn,
                                                                              two_kinds):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    page = browser.new_page(viewport={"width": 1100, "height": 850})
    page.goto(f"{live_server}/studies/two-kinds")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.click("#preview-link")
    # the server's own worker keeps its heartbeat in Redis: the study's keys are what must not change
    before = study_keys(conn)
    page.wait_for_selector("#consent-agree")
    agree_to_consent(page)
    page.click("#start")
    page.wait_for_selector("#practice-banner:not([hidden])")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    page.click("#left")
    page.click("#feedback-next")
    os.makedirs(ARTIFACTS, exist_ok=True)
    seen = set()
    for n in range(6):
        page.wait_for_function("() => !document.getElementById('question').hidden"
                               " || !document.getElementById('rating').hidden")
        if page.locator("#rating").is_visible():
            page.wait_for_selector("#scale-buttons button:not([disabled])")
            if "rating" not in seen:
                page.screenshot(path=os.path.join(ARTIFACTS, "preview-rating.png"))
            seen.add("rating")
            page.locator("#scale-buttons button").nth(2).click()
        else:
            seen.add("triplet")
            if n == 0:
                page.screenshot(path=os.path.join(ARTIFACTS, "preview-triplet.png"))
            page.locator("#left:not([disabled])").click()
        page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n + 1}'"
                               " || location.pathname.endsWith('/done')")
    page.wait_for_selector("#preview-done-text")
    page.screenshot(path=os.path.join(ARTIFACTS, "preview-done.png"))
    assert seen == {"triplet", "rating"}
    assert page.locator("#preview-banner").is_visible()
    assert study_keys(conn) == before and conn.scard("proxima:studies") == 2
