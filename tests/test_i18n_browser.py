"""Rater pages in other languages in a real headless Chromium: a German study from consent to completion
code, and right-to-left (Arabic) studies whose arrow keys pick the item drawn on that side and whose keys
work from an Arabic keyboard layout."""
from __future__ import annotations

import os

import pytest
from helpers import ARTIFACTS, agree_to_consent, colour_items

from workers.store.config import StudyConfig
from workers.store.studies import create_study
from workers.store.translations import CATALOGUES

pytestmark = pytest.mark.browser

DE, AR = CATALOGUES["de"], CATALOGUES["ar"]
QUESTIONS = 4


@pytest.fixture
def language_server(conn, start_serve):
    """A German study (consent, one practice question) and an Arabic one (can't decide allowed), four triplet
    questions each, and Arabic odd-one-out and rank studies."""
    common = {"algorithm": "random_triplets", "pool_size": 10, "random_state": 3,
              "limits": {"max_questions_per_rater": QUESTIONS}, "attention": {"rate": 0, "answer_check": False}}
    german = StudyConfig.from_dict({
        "name": "Farben im Vergleich", "language": "de", "consent": "**Einwilligung.** Wir speichern Ihre Antworten.",
        "practice": [{"head": "c0", "candidates": ["c1", "c2"], "answer": "c1", "explanation": "c1 ist näher."}],
        **common})
    create_study(conn, german, colour_items(12), study_id="de")
    create_study(conn, StudyConfig.from_dict({"name": "مقارنة الألوان", "language": "ar", "allow_skip": True,
                                              **common}), colour_items(12), study_id="ar")
    odd = StudyConfig.from_dict({"name": "الدخيل", "language": "ar", "question_kind": "odd_one_out", "pool_size": 10,
                                 "random_state": 3, "attention": {"rate": 0, "answer_check": False}})
    create_study(conn, odd, colour_items(12), study_id="ar-odd")
    rank = StudyConfig.from_dict({"name": "ترتيب", "language": "ar", "question_kind": "rank", "pool_size": 10,
                                  "random_state": 3, "attention": {"rate": 0, "answer_check": False}})
    create_study(conn, rank, colour_items(12), study_id="ar-rank")
    return start_serve()


def console_errors(page) -> list[str]:
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def sent_answers(page) -> list[dict]:
    sent: list[dict] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.method == "POST" and "/answers" in r.url else None)
    return sent


def press_on_arabic_layout(page, key: str, code: str) -> None:
    """A key press as an Arabic keyboard layout sends it (``key`` the Arabic character, ``code`` the key)."""
    page.evaluate("([key, code]) => document.dispatchEvent(new KeyboardEvent('keydown', {key, code, bubbles: true}))",
                  [key, code])


def answered(page, n: int) -> None:
    page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n}'")


def test_a_german_study_from_consent_to_code_in_german(browser, language_server):
    page = browser.new_page()
    errors = console_errors(page)
    page.goto(f"{language_server}/s/de?PROLIFIC_PID=p-de")
    assert page.locator("html").get_attribute("lang") == "de"
    assert page.locator("#consent-agree").inner_text() == DE["consent_agree"]
    agree_to_consent(page)
    assert page.locator("#start").inner_text() == DE["start_practice.one"].replace("{n}", "1")
    assert page.locator("#instructions").inner_text().startswith("Sie sehen oben ein Element")
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    assert page.locator("#practice-banner").inner_text() == "Übungsfrage 1 von 1 — wird nicht gespeichert"
    assert page.locator("#prompt").inner_text() == DE["prompt_triplet"]
    page.keyboard.press("ArrowLeft")
    page.wait_for_selector("#feedback:not([hidden])")
    feedback = page.locator("#feedback-text").inner_text()
    assert feedback.startswith((DE["practice_right"], DE["practice_wrong"])) and feedback.endswith("c1 ist näher.")
    assert page.locator("#feedback-next").inner_text() == DE["feedback_next"]
    page.click("#feedback-next")
    for n in range(QUESTIONS - 1):
        page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        page.keyboard.press("ArrowRight" if n % 2 else "ArrowLeft")
        answered(page, n + 1)
        assert page.locator("#progress-text").inner_text() == f"{n + 1} von {QUESTIONS} beantwortet"
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    with page.expect_navigation():
        page.keyboard.press("ArrowLeft")
    assert page.locator("h1").inner_text() == DE["finish_heading"]
    assert page.locator("#completion-code").inner_text().strip()
    assert DE["copy_code"] in page.locator("#finish").inner_text()
    assert errors == []


def test_a_right_to_left_study_maps_the_arrow_keys_to_what_is_on_screen(browser, language_server):
    page = browser.new_page()
    errors = console_errors(page)
    sent = sent_answers(page)
    page.goto(f"{language_server}/s/ar?PROLIFIC_PID=p-ar")
    assert page.locator("html").get_attribute("dir") == "rtl"
    assert page.locator("#start").inner_text() == AR["start"]
    page.click("#start")
    for n, key in enumerate(["ArrowLeft", "ArrowRight", "ArrowLeft"]):
        page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        first, second = page.locator("#left"), page.locator("#right")
        # right to left: the first candidate (#left in the markup) is drawn on the right
        assert first.bounding_box()["x"] > second.bounding_box()["x"]
        drawn_left, drawn_right = second, first
        assert drawn_left.get_attribute("aria-keyshortcuts") == "ArrowLeft"
        wanted = (drawn_left if key == "ArrowLeft" else drawn_right).get_attribute("data-handle")
        if n == 0:
            os.makedirs(ARTIFACTS, exist_ok=True)
            page.screenshot(path=os.path.join(ARTIFACTS, "rater-page-rtl.png"), full_page=True)
        page.keyboard.press(key)
        answered(page, n + 1)
        assert sent[-1]["choice"] == wanted
        assert page.locator("#progress-text").inner_text() == f"أُجيب عن {n + 1} من {QUESTIONS}"
    assert page.locator("#prompt").inner_text() == AR["prompt_triplet"]
    assert page.locator("#skip").inner_text() == AR["skip"]
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    with page.expect_navigation():  # "can't decide" by the key where S is (س on an Arabic layout): the last
        press_on_arabic_layout(page, "س", "KeyS")
    assert sent[-1]["skip"] is True
    assert page.locator("h1").inner_text() == AR["finish_heading"]
    assert errors == []


def test_odd_one_out_in_arabic_reads_right_to_left_and_takes_arabic_digits(browser, language_server):
    page = browser.new_page()
    errors = console_errors(page)
    sent = sent_answers(page)
    page.goto(f"{language_server}/s/ar-odd?PROLIFIC_PID=p-ar-odd")
    page.click("#start")
    for n, (digit, place) in enumerate([("١", 0), ("٣", 2), ("3", 2)]):
        page.wait_for_selector("#odd:not([hidden]) .odd-item:not([disabled])")
        xs = [page.locator(f'.odd-item[data-n="{i}"]').bounding_box()["x"] for i in range(3)]
        assert xs[0] > xs[1] > xs[2]  # item 1 is the first in reading order: on the right
        wanted = page.locator(f'.odd-item[data-n="{place}"]').get_attribute("data-handle")
        press_on_arabic_layout(page, digit, f"Digit{place + 1}")
        answered(page, n + 1)
        assert sent[-1]["choice"] == wanted
    assert page.locator("#odd-prompt").inner_text() == AR["prompt_odd_one_out"]
    assert errors == []


def test_a_rank_screen_in_arabic_puts_keys_and_badges_at_the_mirrored_corners(browser, language_server):
    page = browser.new_page()
    errors = console_errors(page)
    page.goto(f"{language_server}/s/ar-rank?PROLIFIC_PID=p-ar-rank")
    page.click("#start")
    page.wait_for_selector("#grid:not([hidden]) .grid-ref:not([disabled])")
    first = page.locator('.grid-ref[data-n="0"]')
    assert first.bounding_box()["x"] > page.locator('.grid-ref[data-n="1"]').bounding_box()["x"]
    page.keyboard.press("1")
    box, key = first.bounding_box(), first.locator(".grid-key").bounding_box()
    badge = first.locator(".grid-badge").bounding_box()
    # the item's number at its inline start (the right), the pick's badge at its inline end (the left)
    assert key["x"] + key["width"] > box["x"] + box["width"] / 2 > badge["x"] + badge["width"]
    assert page.locator("#grid-status").inner_text() == AR["grid_picked"].replace("{picked}", "1").replace("{k}", "2")
    assert first.get_attribute("aria-label") == AR["grid_item_picked"].replace("{n}", "1").replace("{place}", "1")
    assert errors == []
