"""The rater's page on a phone (issue 28, item 7): candidate images sit in the middle of their buttons, the
skip button does not offer a key ("or press S") on a touch screen, and the start button goes once the
practice has started. Headless Chromium as a phone (390 x 844, touch); screenshots in artifacts/."""
from __future__ import annotations

import io
import os

import pytest
from helpers import ARTIFACTS, PHONE

from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study

pytestmark = pytest.mark.browser


def png(colour: tuple[int, int, int], size: int = 120) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (size, size), colour).save(out, format="PNG")
    return out.getvalue()


@pytest.fixture
def image_study(conn):
    items = [Item(id=f"img{i}", kind="image", media_type="image/png") for i in range(8)]
    media = {i: png((30 * i, 200 - 20 * i, 90)) for i in range(8)}
    config = StudyConfig.from_dict({
        "name": "Pictures on a phone", "algorithm": "random_triplets", "pool_size": 10, "random_state": 0,
        "allow_skip": True, "attention": {"rate": 0, "answer_check": False},
        "practice": [{"head": "img0", "candidates": ["img1", "img7"], "answer": "img1"}],
        "limits": {"max_questions_per_rater": 5}})
    return create_study(conn, config, items, media, study_id="phone")


def test_on_a_phone_images_are_centred_no_key_is_offered_and_the_start_button_goes(browser, flow_server,
                                                                                   image_study):
    context = browser.new_context(**PHONE)
    page = context.new_page()
    page.goto(f"{flow_server}/s/phone?PROLIFIC_PID=p-phone-layout")
    assert page.locator("#start").is_visible()
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled]) img")
    assert not page.locator("#start").is_visible()  # practice started: the button is gone
    page.click("#left")
    page.click("#feedback-next")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled]) img")
    page.wait_for_function("() => Array.from(document.querySelectorAll('.candidate img')).every((i) => i.complete)")
    for side in ("#left", "#right"):
        button = page.locator(side).bounding_box()
        image = page.locator(f"{side} img").bounding_box()
        offset = (image["x"] + image["width"] / 2) - (button["x"] + button["width"] / 2)
        assert abs(offset) < 1.5, (side, offset)
    assert page.locator("#skip").is_visible()
    assert "press S" not in page.locator("#skip-row").inner_text()
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.screenshot(path=os.path.join(ARTIFACTS, "rater-phone-images.png"))
    context.close()
    desktop = browser.new_page()
    desktop.goto(f"{flow_server}/s/phone?PROLIFIC_PID=p-desk-layout")
    desktop.click("#start")
    desktop.click("#left")
    desktop.click("#feedback-next")
    desktop.wait_for_selector("#skip-row:not([hidden])")
    assert "press S" in desktop.locator("#skip-row").inner_text()  # a keyboard: the key is offered
    desktop.close()
