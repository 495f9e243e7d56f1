"""A same_different study in a real headless Chromium against a real serve: the "same" widget shows two items
and two buttons, Same and Different, answered by mouse, keys (1 the same, 2 different) and touch; no rating
scale anywhere; the practice question checks the value; the log keeps the pair and its value (1 or 0); catch
trials (an item against its copy, a pair far apart) pass when a look says "the same" or "different"."""
from __future__ import annotations

import pytest
from helpers import PHONE, served_index, watched_page
from test_kinds_browser import _gap, _log, _screenshot, _wait_answered, picture_items

from engine.kinds import DIFFERENT, SAME
from workers.store.config import StudyConfig
from workers.store.studies import create_study

pytestmark = pytest.mark.browser

SAME_DIFFERENT = {"name": "Same or different", "question_kind": "same_different", "random_state": 6,
                  "pool_size": 20, "limits": {"max_questions_per_rater": 12},
                  "attention": {"rate": 0.3, "answer_check": False},
                  "practice": [{"kind": "same_different", "items": ["disc-00", "disc-12"], "answer": "different",
                                "explanation": "A red disc and a cyan one."}]}
#: a careful rater's "the same": hues at most one step apart on the 24-step wheel (a copy is 0 apart)
NEAR = 1.5 / 24


@pytest.fixture
def same_server(conn, start_serve):
    items, media = picture_items()
    create_study(conn, StudyConfig.from_dict(SAME_DIFFERENT), items, media, study_id="same")
    return start_serve()


def _pair(page, tmp_path) -> list[int]:
    handles = [page.locator(f"#same-{x}").get_attribute("data-handle") for x in "ab"]
    return [served_index(tmp_path / "instance", h) for h in handles]


def _ready(page) -> None:
    page.wait_for_selector("#same:not([hidden]) .same-choice:not([disabled])")


def test_a_same_different_pair_by_mouse_keys_and_touch_logs_1_or_0(browser, same_server, conn, tmp_path):
    context, page, errors = watched_page(browser, f"{same_server}/s/same?PROLIFIC_PID=same-desk",
                                         viewport={"width": 1100, "height": 900})
    assert "Same or Different" in page.locator("#instructions").inner_text()
    # only the kind's own widget: no rating scale on the page
    assert page.locator("#rating").count() == 0 and page.locator("#scale-buttons").count() == 0
    page.click("#start")
    _ready(page)
    # the practice pair: a wrong answer is told so, and nothing is sent
    page.locator("#same .same-choice[data-value='1']").click()
    page.wait_for_selector("#feedback.wrong")
    assert "cyan" in page.locator("#feedback-text").inner_text()
    page.click("#feedback-next")
    buttons = page.locator("#same .same-choice")
    assert buttons.all_inner_texts() == ["Same", "Different"]
    assert [buttons.nth(n).get_attribute("aria-keyshortcuts") for n in range(2)] == ["1", "2"]
    assert page.locator("#same [role=group]").get_attribute("aria-labelledby") == "same-prompt"
    sent = []
    for n in range(10):
        _ready(page)
        assert page.locator("#same-prompt").inner_text() == "Are these two the same, or different?"
        i, j = _pair(page, tmp_path)
        value = SAME if _gap(i, j) <= NEAR else DIFFERENT
        if n == 0:
            _screenshot(page, tmp_path, "same_different.png")
        if n % 2:
            page.keyboard.press("1" if value == SAME else "2")
        else:
            page.locator(f"#same .same-choice[data-value='{value}']").click()
        sent.append(([i, j], value))
        _wait_answered(page, n + 1)
    log = _log(conn, "same", "same-desk")
    assert errors == [] and len(log) == 10
    assert [(list(a.shown), a.value) for a in log] == sent
    assert all(a.kind == "same_different" and not a.picks for a in log)
    catches = [a for a in log if a.algorithm == "catch"]
    # each check is an item against its copy ("the same") or a pair far apart ("different"), and a look passes it
    assert catches and all((a.shown[0] == a.shown[1]) == (a.value == SAME) for a in catches)
    assert all("catch_pass" in a.flags for a in catches)
    context.close()

    phone, page, errors = watched_page(browser, f"{same_server}/s/same?PROLIFIC_PID=same-phone", **PHONE)
    page.click("#start")
    _ready(page)
    page.locator("#same .same-choice[data-value='0']").tap()  # the practice pair, right this time
    page.wait_for_selector("#feedback.right")
    page.click("#feedback-next")
    _ready(page)
    assert "Tap" in page.locator("#same .hint").inner_text()
    pair = _pair(page, tmp_path)
    page.locator("#same .same-choice[data-value='0']").tap()
    _wait_answered(page, 1)
    (answer,) = _log(conn, "same", "same-phone")
    assert list(answer.shown) == pair and answer.value == DIFFERENT and errors == []
    phone.close()
