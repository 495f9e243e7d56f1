"""A pick_k study in a real headless Chromium against a real serve: the "choose" widget toggles up to k picks
by mouse, touch and keys (a tick, never a number), Undo takes back the latest, Confirm waits for exactly k,
the practice question takes the right set in any order, and the log keeps the whole screen with the picks
as a set; catch trials are ordinary grids that a look passes."""
from __future__ import annotations

import pytest
from helpers import PHONE, served_index, watched_page
from test_kinds_browser import _gap, _log, _screenshot, _wait_answered, handle_at, indices_at, picture_items

from workers.store.config import StudyConfig
from workers.store.studies import create_study

pytestmark = pytest.mark.browser

PICK = {"name": "Pick two", "question_kind": "pick_k", "pick_k": {"n_reference": 8, "n_select": 2},
        "random_state": 5, "pool_size": 20, "limits": {"max_questions_per_rater": 12},
        "attention": {"rate": 0.25, "answer_check": False},
        "practice": [{"kind": "pick_k", "head": "disc-00",
                      "candidates": ["disc-12", "disc-01", "disc-06", "disc-23", "disc-18", "disc-09", "disc-15",
                                     "disc-03"],
                      "answer": ["disc-01", "disc-23"], "explanation": "The two nearest hues, in any order."}]}


@pytest.fixture
def pick_server(conn, start_serve):
    items, media = picture_items()
    create_study(conn, StudyConfig.from_dict(PICK), items, media, study_id="pick")
    return start_serve()


def _badges(page) -> list[str]:
    return page.locator("#choose .grid-badge").all_inner_texts()


def test_a_pick_k_grid_by_mouse_keys_and_touch_toggles_k_unnumbered_picks(browser, pick_server, conn, tmp_path):
    context, page, errors = watched_page(browser, f"{pick_server}/s/pick?PROLIFIC_PID=pick-desk",
                                         viewport={"width": 1100, "height": 1000})
    assert "Pick the 2 of the 8" in page.locator("#instructions").inner_text()
    assert "in any order" in page.locator("#instructions").inner_text()
    page.click("#start")
    page.wait_for_selector("#choose:not([hidden]) .grid-ref:not([disabled])")
    # practice: the right two, picked in the other order than the answer lists them
    page.locator(f"#choose .grid-ref[data-handle='{handle_at(page, '#choose .grid-ref', tmp_path, 23)}']").click()
    page.locator(f"#choose .grid-ref[data-handle='{handle_at(page, '#choose .grid-ref', tmp_path, 1)}']").click()
    page.click("#choose-confirm")
    page.wait_for_selector("#feedback.right")
    page.click("#feedback-next")
    sent = []
    for n in range(8):
        page.wait_for_selector("#choose:not([hidden]) .grid-ref:not([disabled])")
        assert "in any order" in page.locator("#choose-prompt").inner_text()
        head = served_index(tmp_path / "instance", page.locator("#choose-head").get_attribute("data-handle"))
        refs = indices_at(page, "#choose .grid-ref", tmp_path)
        order = sorted(range(len(refs)), key=lambda k: _gap(head, refs[k]))
        first, second = order[0], order[1]
        buttons = page.locator("#choose .grid-ref")
        assert page.locator("#choose-confirm").is_disabled()
        if n == 0:
            # a wrong pick, taken back by clicking it again; a third pick is not taken; Undo takes back the latest
            wrong = order[-1]
            buttons.nth(wrong).click()
            assert buttons.nth(wrong).locator(".grid-badge").inner_text() == "✓"
            assert buttons.nth(wrong).get_attribute("aria-pressed") == "true"
            buttons.nth(wrong).click()
            assert page.locator("#choose .grid-ref.picked").count() == 0
            buttons.nth(second).click()
            buttons.nth(order[2]).click()
            buttons.nth(first).click()  # two are picked already: not taken
            assert page.locator("#choose .grid-ref.picked").count() == 2
            assert buttons.nth(first).get_attribute("aria-pressed") == "false"
            page.click("#choose-undo")
            assert page.locator("#choose .grid-ref.picked").count() == 1
            assert page.locator("#choose-confirm").is_disabled()
            buttons.nth(first).click()
            assert sorted(_badges(page)) == [""] * 6 + ["✓", "✓"]  # ticks, no places in an order
            assert page.locator("#choose-confirm").is_enabled()
            _screenshot(page, tmp_path, "pick_k.png")
            page.click("#choose-confirm")
        elif n % 2:
            page.keyboard.press(str(second + 1))
            page.keyboard.press(str(order[3] + 1))
            page.keyboard.press(str(order[3] + 1))  # the same key again takes it back
            page.keyboard.press(str(first + 1))
            assert _badges(page).count("✓") == 2
            page.keyboard.press("Enter")
        else:
            buttons.nth(first).click()
            buttons.nth(second).click()
            page.click("#choose-confirm")
        sent.append(([head, *refs], sorted([refs[first], refs[second]])))
        _wait_answered(page, n + 1)
    log = _log(conn, "pick", "pick-desk")
    assert errors == [] and len(log) == 8
    assert [(list(a.shown), list(a.picks)) for a in log] == sent
    assert all(a.kind == "pick_k" and len(a.shown) == 9 for a in log)
    catches = [a for a in log if a.algorithm == "catch"]
    assert catches and all("catch_pass" in a.flags for a in catches)
    # pick 2 of 8: 2 x 6 triplets per screen, each a pick over an unpicked reference
    for a in log:
        triplets = a.triplets()
        assert len(triplets) == 12 and all(t[1] in a.picks and t[2] not in a.picks for t in triplets)
    context.close()

    phone, page, errors = watched_page(browser, f"{pick_server}/s/pick?PROLIFIC_PID=pick-phone", **PHONE)
    page.click("#start")
    page.wait_for_selector("#choose:not([hidden]) .grid-ref:not([disabled])")
    buttons = page.locator("#choose .grid-ref")
    buttons.nth(0).tap()
    buttons.nth(1).tap()
    page.locator("#choose-confirm").tap()  # the practice question, most likely wrong: feedback either way
    page.click("#feedback-next")
    page.wait_for_selector("#choose:not([hidden]) .grid-ref:not([disabled])")
    assert "Tap" in page.locator("#choose .hint").inner_text()
    refs = indices_at(page, "#choose .grid-ref", tmp_path)
    buttons.nth(3).tap()
    buttons.nth(5).tap()
    page.locator("#choose-confirm").tap()
    _wait_answered(page, 1)
    (answer,) = _log(conn, "pick", "pick-phone")
    assert list(answer.picks) == sorted([refs[3], refs[5]]) and errors == []
    phone.close()
