"""A person's path in a real headless Chromium: answer 20 questions, see 20 on the dashboard and in the CSV."""
from __future__ import annotations

import csv
import io
import os

import pytest
from helpers import ARTIFACTS, agree_to_consent, served_index

pytestmark = pytest.mark.browser


def test_a_rater_answers_twenty_questions_and_the_researcher_sees_them(browser, live_server, conn, tmp_path):
    page = browser.new_page()
    page.goto(f"{live_server}/s/browser?PROLIFIC_PID=p-0001")
    assert "more similar" in page.locator("#instructions").inner_text()
    page.click("#start")
    chosen = []
    for n in range(20):
        page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        side = n % 2
        chosen.append(served_index(tmp_path / "instance",
                                   page.locator("#left" if side == 0 else "#right").get_attribute("data-handle")))
        if n % 4 == 0:
            page.click("#left" if side == 0 else "#right")
        else:
            page.keyboard.press("ArrowLeft" if side == 0 else "ArrowRight")
        page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n + 1}'")
    from helpers import RESEARCHER, RESEARCHER_PASSWORD

    from webapp.accounts import create_user

    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    dashboard = browser.new_page()
    dashboard.goto(f"{live_server}/studies/browser")  # the login page, then back to the study
    dashboard.fill("#username", RESEARCHER)
    dashboard.fill("#password", RESEARCHER_PASSWORD)
    dashboard.click("#login")
    dashboard.wait_for_url(f"{live_server}/studies/browser")
    dashboard.wait_for_function("() => document.getElementById('n-answers')?.textContent === '20'")
    assert dashboard.locator("#n-raters").inner_text() == "1"
    # the worker has applied the answers: the nearest-neighbour column (Learning section) is filled in
    dashboard.click("#tab-learning")
    dashboard.wait_for_function("() => Array.from(document.querySelectorAll('#items td.nn'))"
                                ".some((td) => td.textContent !== '—' && td.textContent !== 'no data yet')",
                                timeout=30000)
    csv_text = dashboard.request.get(f"{live_server}/studies/browser/answers.csv").text()
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert len(rows) == 20
    assert [int(r["choice"]) for r in rows] == chosen
    assert {r["rater"] for r in rows} == {"p-0001"}


def test_consent_practice_ten_questions_by_keyboard_and_a_completion_code(browser, flow_server, conn, tmp_path):
    flow_server_instance = tmp_path / "instance"
    from workers.store.answers import read_answers

    page = browser.new_page()
    page.goto(f"{flow_server}/s/flow?PROLIFIC_PID=p-keys")
    agree_to_consent(page)
    page.click("#start")
    page.wait_for_selector("#practice-banner:not([hidden])")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    left = served_index(flow_server_instance, page.locator("#left").get_attribute("data-handle"))
    page.keyboard.press("ArrowLeft" if left == 1 else "ArrowRight")
    page.wait_for_selector("#feedback.right:not([hidden])")
    page.click("#feedback-next")
    os.makedirs(ARTIFACTS, exist_ok=True)
    for n in range(10):
        page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        if n == 0:
            page.screenshot(path=os.path.join(ARTIFACTS, "rater-question-desktop.png"))
            page.set_viewport_size({"width": 390, "height": 844})
            page.screenshot(path=os.path.join(ARTIFACTS, "rater-question-phone.png"))
        if n == 4:  # reload mid-study: back at the same progress
            page.reload()
            page.wait_for_function("() => document.getElementById('answered')?.textContent === '4'")
            page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        page.keyboard.press("ArrowLeft" if n % 2 else "ArrowRight")
        if n < 9:
            page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n + 1}'")
    page.wait_for_selector("#completion-code")
    from webapp.questions_answers import completion_code

    secret = (flow_server_instance / "secret_key").read_text().strip()
    assert page.locator("#completion-code").inner_text().strip() == completion_code(secret, "flow", "p-keys")
    page.fill("#debrief", "all fine")
    page.click("#debrief-submit")
    page.wait_for_selector("#debrief-thanks")
    answers = read_answers(conn, "flow")
    assert len(answers) == 10  # the practice answer was not stored
    assert all(a.rater == "p-keys" and a.response_ms is not None for a in answers)


def test_consent_declined_means_no_questions(browser, flow_server, conn):
    page = browser.new_page()
    page.goto(f"{flow_server}/s/flow?PROLIFIC_PID=p-no")
    page.click("#consent-decline")
    page.wait_for_selector("#declined")
    response = page.request.get(f"{flow_server}/api/studies/flow/questions/next")
    assert response.status == 403
    assert conn.xlen("proxima:{flow}:answers") == 0


def test_rating_questions_by_keys_one_to_five(browser, flow_server, conn):
    from workers.store.answers import read_answers

    page = browser.new_page()
    page.goto(f"{flow_server}/s/ratings?PROLIFIC_PID=p-rate")
    page.click("#start")
    for n in range(5):
        page.wait_for_selector("#rating:not([hidden]) .scale-button:not([disabled])")
        page.keyboard.press(str(n + 1))
        if n < 4:
            page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n + 1}'")
    page.wait_for_selector("#completion-code")
    assert [a.value for a in read_answers(conn, "ratings")] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_an_answer_sent_while_offline_is_retried_and_stored_once(browser, flow_server, conn):
    from workers.store.answers import read_answers

    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{flow_server}/s/flow?PROLIFIC_PID=p-net")
    agree_to_consent(page)
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    page.click("#left")  # the practice question
    page.click("#feedback-next")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    context.route("**/answers", lambda route: route.abort())
    page.click("#left")
    page.wait_for_selector("#offline:not([hidden])")
    assert len(read_answers(conn, "flow")) == 0
    context.unroute("**/answers")
    page.wait_for_function("() => document.getElementById('answered')?.textContent === '1'")
    page.wait_for_selector("#offline", state="hidden")
    assert len(read_answers(conn, "flow")) == 1


def _wait_for_triplet(page):
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    return page.locator("#head").get_attribute("data-handle")


def test_a_rater_by_mouse_skips_twice_fails_catch_trials_and_is_stopped_politely(browser, flow_server, conn,
                                                                                  tmp_path):
    """Mouse only: "can't decide" by button and by the S key is logged as a skip; a rater who then
    always picks the candidate less like the head (the page cannot tell which questions are attention
    checks) fails them, is flagged and is then stopped politely."""
    from workers.store import keys
    from workers.store.answers import read_answers

    page = browser.new_page()
    page.goto(f"{flow_server}/s/checks?PROLIFIC_PID=p-careless")
    page.click("#start")
    skipped = answered = 0
    while True:
        # the next question, or the finish page the stopped rater is sent to (after the last answer's
        # response, a moment later)
        page.wait_for_function("() => location.pathname.endsWith('/done') || "
                               "!!document.querySelector('#question:not([hidden]) #left:not([disabled])')")
        if page.url.endswith("/s/checks/done"):
            break
        head = served_index(tmp_path / "instance", _wait_for_triplet(page))
        sides = [served_index(tmp_path / "instance", page.locator(side).get_attribute("data-handle"))
                 for side in ("#left", "#right")]
        if skipped == 0:
            page.click("#skip")
            skipped += 1
        elif skipped == 1:
            page.keyboard.press("s")
            skipped += 1
        else:  # colour item i sits at position i: the farther one is what a catch trial does not expect
            page.click("#left" if abs(sides[0] - head) > abs(sides[1] - head) else "#right")
        answered += 1
        page.wait_for_function("() => location.pathname.endsWith('/done') || "
                               f"document.getElementById('answered')?.textContent === '{answered}'")
        assert answered < 80
    assert "no more questions for you" in page.content() and page.locator("#completion-code").count() == 0
    answers = read_answers(conn, "checks")
    assert len(answers) == answered and all(a.response_ms is not None for a in answers)
    assert sum(a.skipped for a in answers) == skipped == 2
    assert sum("catch_fail" in a.flags for a in answers) >= 2
    assert sum("catch_pass" in a.flags for a in answers) == 0
    assert conn.hget(keys.rater_stats("checks"), "p-careless:flagged") == b"1"


def test_a_rater_completes_ten_questions_by_mouse_alone(browser, flow_server, conn, tmp_path):
    from workers.store.answers import read_answers

    page = browser.new_page()
    page.goto(f"{flow_server}/s/flow?PROLIFIC_PID=p-mouse")
    agree_to_consent(page)
    page.click("#start")
    _wait_for_triplet(page)
    page.click("#right")  # the practice question: feedback either way, nothing stored
    page.wait_for_selector("#feedback:not([hidden])")
    page.click("#feedback-next")
    chosen = []
    for n in range(10):
        _wait_for_triplet(page)
        side = "#left" if n % 3 else "#right"
        chosen.append(served_index(tmp_path / "instance", page.locator(side).get_attribute("data-handle")))
        page.click(side)
        if n < 9:
            page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n + 1}'")
    page.wait_for_selector("#completion-code")
    answers = read_answers(conn, "flow")
    assert [a.choice for a in answers] == chosen
    assert all(a.rater == "p-mouse" and a.response_ms is not None and a.response_ms > 0 for a in answers)


def test_on_a_phone_the_practice_question_scrolls_into_view(browser, flow_server):
    """After "Try the practice question" on a phone the choices are on the screen (the tap did
    something), not below the instructions."""
    context = browser.new_context(viewport={"width": 360, "height": 640}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(f"{flow_server}/s/flow?PROLIFIC_PID=p-phone")
    agree_to_consent(page)
    page.evaluate("() => window.scrollTo(0, 0)")
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    box = page.locator("#left").bounding_box()
    assert box is not None and 0 <= box["y"] < 640, box
    context.close()
