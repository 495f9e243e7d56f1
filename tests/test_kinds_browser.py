"""Odd-one-out and ranked-grid studies in a real headless Chromium against a real serve: mouse, touch
and keyboard answers land in the log with the whole screen (every item in the order shown, the picks in
order), practice questions give feedback, catch trials of each kind are ordinary screens that a look
answers, a phone shows a whole 8-reference grid without scrolling, and each kind's too-fast threshold
flags a hasty answer. Screenshots go to the test's folder (and, with PROXIMA_SCREENSHOTS=DIR, there)."""
from __future__ import annotations

import io
import math
import os
from pathlib import Path

import pytest
from helpers import PHONE, served_index, watched_page

from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study

pytestmark = pytest.mark.browser

N_ITEMS = 24


def _picture(hue: float, size: int = 160) -> bytes:
    """A picture of a coloured disc on a light ground: items alike by hue, as a rater sees them."""
    import colorsys

    from PIL import Image, ImageDraw

    r, g, b = (round(255 * x) for x in colorsys.hls_to_rgb(hue, 0.5, 0.7))
    image = Image.new("RGB", (size, size), (246, 246, 246))
    ImageDraw.Draw(image).ellipse((12, 12, size - 12, size - 12), fill=(r, g, b))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def picture_items(n: int = N_ITEMS) -> tuple[list[Item], dict[int, bytes]]:
    """``n`` image items around the colour wheel, their hue as a known position (catch trials use it)."""
    items, media = [], {}
    for i in range(n):
        hue = i / n
        angle = 2 * math.pi * hue
        items.append(Item(id=f"disc-{i:02d}", kind="image", media_type="image/png",
                          position=(round(math.cos(angle), 6), round(math.sin(angle), 6))))
        media[i] = _picture(hue)
    return items, media


ODD = {"name": "Odd one out", "question_kind": "odd_one_out", "random_state": 3, "pool_size": 20,
       "limits": {"max_questions_per_rater": 12},
       "attention": {"rate": 0.25, "answer_check": False},
       "practice": [{"kind": "odd_one_out", "items": ["disc-00", "disc-01", "disc-12"], "answer": "disc-12",
                     "explanation": "The two reddish discs belong together."}]}
RANK = {"name": "Ranked grid", "question_kind": "rank", "rank": {"n_reference": 8, "n_select": 2},
        "random_state": 4, "pool_size": 20, "limits": {"max_questions_per_rater": 12},
        "attention": {"rate": 0.25, "answer_check": False},
        "practice": [{"kind": "rank", "head": "disc-00",
                      "candidates": ["disc-12", "disc-01", "disc-06", "disc-23", "disc-18", "disc-09", "disc-15",
                                     "disc-03"],
                      "answer": ["disc-01", "disc-23"], "explanation": "The nearest hues come first."}]}


@pytest.fixture
def kinds_server(conn, start_serve):
    items, media = picture_items()
    create_study(conn, StudyConfig.from_dict(ODD), items, media, study_id="odd")
    create_study(conn, StudyConfig.from_dict(RANK), items, media, study_id="grid")
    return start_serve()


def indices_at(page, selector: str, tmp_path: Path) -> list[int]:
    """The item indices the handles of the page's ``selector`` elements name (the served instance's key)."""
    handles = page.locator(selector).evaluate_all("bs => bs.map(b => b.dataset.handle)")
    return [served_index(tmp_path / "instance", h) for h in handles]


def handle_at(page, selector: str, tmp_path: Path, index: int) -> str:
    """The handle of the ``selector`` element showing item ``index``."""
    handles = page.locator(selector).evaluate_all("bs => bs.map(b => b.dataset.handle)")
    return next(h for h in handles if served_index(tmp_path / "instance", h) == index)


def _shots(tmp_path: Path) -> list[Path]:
    folders = [tmp_path]
    if os.environ.get("PROXIMA_SCREENSHOTS"):
        folders.append(Path(os.environ["PROXIMA_SCREENSHOTS"]))
    for folder in folders:
        folder.mkdir(parents=True, exist_ok=True)
    return folders


def _screenshot(page, tmp_path: Path, name: str) -> None:
    for folder in _shots(tmp_path):
        page.screenshot(path=str(folder / name))


def _hue(index: int) -> float:
    return index / N_ITEMS


def _gap(i: int, j: int) -> float:
    d = abs(_hue(i) - _hue(j))
    return min(d, 1 - d)


def started_page(browser, url: str, instructions: str, **context_options) -> tuple:
    """(context, page, errors) of a rater's page whose instructions say ``instructions``, started."""
    context, page, errors = watched_page(browser, url, **context_options)
    assert instructions in page.locator("#instructions").inner_text()
    page.click("#start")
    return context, page, errors


def _wait_answered(page, n: int) -> None:
    page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n}'")


def _log(conn, study_id: str, rater: str):
    return [a for a in read_answers(conn, study_id) if a.rater == rater]


def test_odd_one_out_by_mouse_touch_and_keys_keeps_the_whole_screen(browser, kinds_server, conn, tmp_path):
    context, page, errors = started_page(browser, f"{kinds_server}/s/odd?PROLIFIC_PID=odd-desk",
                                         "least like the other two", viewport={"width": 1100, "height": 900})
    # the practice question: feedback, never sent
    page.wait_for_selector("#odd:not([hidden]) .odd-item:not([disabled])")
    assert page.locator("#practice-banner").is_visible()
    page.locator(f".odd-item[data-handle='{handle_at(page, '.odd-item', tmp_path, 12)}']").click()
    page.wait_for_selector("#feedback.right")
    assert "belong together" in page.locator("#feedback-text").inner_text()
    page.click("#feedback-next")
    shown, picked = [], []
    for n in range(8):
        page.wait_for_selector("#odd:not([hidden]) .odd-item:not([disabled])")
        indices = indices_at(page, ".odd-item", tmp_path)
        # the odd one: the item farthest (in hue) from the other two
        odd = max(range(3), key=lambda k: sum(_gap(indices[k], indices[m]) for m in range(3) if m != k))
        shown.append(indices)
        picked.append(indices[odd])
        if n == 0:
            _screenshot(page, tmp_path, "odd_one_out.png")
        if n % 2:
            page.keyboard.press(str(odd + 1))
        else:
            page.locator(".odd-item").nth(odd).click()
        _wait_answered(page, n + 1)
    log = _log(conn, "odd", "odd-desk")
    assert len(log) == 8 and errors == []
    assert [list(a.shown) for a in log] == shown and [list(a.picks) for a in log] == [[p] for p in picked]
    assert all(a.kind == "odd_one_out" for a in log)
    # catch trials are odd-one-out screens too (one in four), and a look at the discs passes them
    catches = [a for a in log if a.algorithm == "catch"]
    assert catches and all("catch_pass" in a.flags for a in catches)
    # every answer implies the two anchored triplets of its pair left
    for a in log:
        x, y = (i for i in a.shown if i != a.picks[0])
        assert sorted(a.triplets()) == sorted([(x, y, a.picks[0], y), (y, x, a.picks[0], x)])
    context.close()

    phone, page, errors = watched_page(browser, f"{kinds_server}/s/odd?PROLIFIC_PID=odd-phone", **PHONE)
    page.click("#start")
    page.wait_for_selector("#odd:not([hidden]) .odd-item:not([disabled])")
    page.locator(".odd-item").nth(0).tap()  # the practice question, answered wrong on purpose
    page.wait_for_selector("#feedback.wrong")
    page.click("#feedback-next")
    page.wait_for_selector("#odd:not([hidden]) .odd-item:not([disabled])")
    page.wait_for_function("() => Array.from(document.querySelectorAll('.odd-item img')).every(i => i.complete)")
    for k in range(3):  # each item's picture inside its button, on screen
        button, picture = (page.locator(".odd-item").nth(k).bounding_box(),
                           page.locator(".odd-item img").nth(k).bounding_box())
        assert button["y"] + button["height"] <= 844 and button["x"] >= 0 and button["x"] + button["width"] <= 390
        assert button["x"] <= picture["x"] and picture["x"] + picture["width"] <= button["x"] + button["width"], \
            (button, picture)
    assert "Tap" in page.locator("#odd .hint").inner_text()
    _screenshot(page, tmp_path, "odd_one_out_phone.png")
    first = served_index(tmp_path / "instance", page.locator(".odd-item").nth(2).get_attribute("data-handle"))
    page.locator(".odd-item").nth(2).tap()
    _wait_answered(page, 1)
    (answer,) = _log(conn, "odd", "odd-phone")
    assert answer.picks == (first,) and len(answer.shown) == 3
    assert errors == []
    phone.close()


def test_a_ranked_grid_by_mouse_touch_and_keys_numbers_the_picks_and_undoes(browser, kinds_server, conn, tmp_path):
    context, page, errors = started_page(browser, f"{kinds_server}/s/grid?PROLIFIC_PID=grid-desk",
                                         "Pick the 2 of the 8", viewport={"width": 1100, "height": 1000})
    page.wait_for_selector("#grid:not([hidden]) .grid-ref:not([disabled])")
    # practice: the two nearest hues, nearest first
    page.locator(f".grid-ref[data-handle='{handle_at(page, '.grid-ref', tmp_path, 1)}']").click()
    page.locator(f".grid-ref[data-handle='{handle_at(page, '.grid-ref', tmp_path, 23)}']").click()
    page.click("#grid-confirm")
    page.wait_for_selector("#feedback.right")
    page.click("#feedback-next")
    sent = []
    for n in range(8):
        page.wait_for_selector("#grid:not([hidden]) .grid-ref:not([disabled])")
        head = served_index(tmp_path / "instance", page.locator("#grid-head").get_attribute("data-handle"))
        refs = indices_at(page, ".grid-ref", tmp_path)
        order = sorted(range(len(refs)), key=lambda k: _gap(head, refs[k]))
        first, second = order[0], order[1]
        assert page.locator("#grid-confirm").is_disabled()
        if n == 0:
            # a wrong first pick, taken back by clicking it again; then the right two: numbered in order
            wrong = order[-1]
            page.locator(".grid-ref").nth(wrong).click()
            assert page.locator(".grid-ref").nth(wrong).locator(".grid-badge").inner_text() == "1st"
            page.locator(".grid-ref").nth(wrong).click()
            assert page.locator(".grid-ref.picked").count() == 0
        if n % 2:
            page.keyboard.press(str(first + 1))
            page.keyboard.press(str(order[2] + 1))
            page.keyboard.press("Backspace")  # undo the last pick before confirming
            page.keyboard.press(str(second + 1))
            assert page.locator(".grid-ref").nth(second).locator(".grid-badge").inner_text() == "2nd"
            page.keyboard.press("Enter")
        else:
            page.locator(".grid-ref").nth(first).click()
            page.locator(".grid-ref").nth(second).click()
            assert page.locator(".grid-ref").nth(first).locator(".grid-badge").inner_text() == "1st"
            if n == 0:
                _screenshot(page, tmp_path, "rank.png")
            page.click("#grid-confirm")
        sent.append(([head, *refs], [refs[first], refs[second]]))
        _wait_answered(page, n + 1)
    log = _log(conn, "grid", "grid-desk")
    assert errors == [] and len(log) == 8
    assert [(list(a.shown), list(a.picks)) for a in log] == sent
    assert all(a.kind == "rank" and len(a.shown) == 9 for a in log)
    catches = [a for a in log if a.algorithm == "catch"]
    assert catches and all("catch_pass" in a.flags for a in catches)
    # 8-rank-2: 1 + 2 x 6 anchored triplets per screen, each won by a pick over an item ranked below it
    for a in log:
        triplets = a.triplets()
        assert len(triplets) == 13 and all(t[0] == a.shown[0] and t[3] in a.picks for t in triplets)
    context.close()

    phone, page, errors = watched_page(browser, f"{kinds_server}/s/grid?PROLIFIC_PID=grid-phone", **PHONE)
    page.click("#start")
    page.wait_for_selector("#feedback-next, #grid:not([hidden]) .grid-ref:not([disabled])")
    page.locator(".grid-ref").nth(0).tap()
    page.locator(".grid-ref").nth(1).tap()
    page.locator("#grid-confirm").tap()
    page.click("#feedback-next")
    page.wait_for_selector("#grid:not([hidden]) .grid-ref:not([disabled])")
    page.wait_for_function("() => Array.from(document.querySelectorAll('.grid-ref img')).every(i => i.complete)")
    # every image of the 8-reference grid, the head and the confirm button are on screen without scrolling
    assert page.evaluate("() => window.scrollY") == 0
    for selector in ["#grid-head img", *[f".grid-ref img >> nth={k}" for k in range(8)], "#grid-confirm"]:
        box = page.locator(selector).bounding_box()
        assert box and box["y"] >= 0 and box["y"] + box["height"] <= 844 and box["x"] + box["width"] <= 390, \
            (selector, box)
    _screenshot(page, tmp_path, "rank_phone.png")
    page.locator(".grid-ref").nth(3).tap()
    page.locator(".grid-ref").nth(5).tap()
    page.locator("#grid-confirm").tap()
    _wait_answered(page, 1)
    (answer,) = _log(conn, "grid", "grid-phone")
    assert len(answer.picks) == 2 and answer.picks == (answer.shown[4], answer.shown[6])
    assert errors == []
    phone.close()
