"""Rater pages for everyone: WCAG AA text contrast, touch targets of at least 44 px on a phone,
alt text on images and keyboard focus — measured in a real headless Chromium."""
from __future__ import annotations

import pytest
from helpers import agree_to_consent

from webapp.cli.demo_study import demo_items
from workers.store.config import StudyConfig
from workers.store.studies import create_study

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}

# For every visible element with its own text: its colour against the first opaque background
# behind it (WCAG 2.x relative luminance), and whether the text is large (>= 24 px, or >= 18.66 px bold).
CONTRAST_JS = """() => {
  const parse = (c) => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(',').map(Number); return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = (c) => { const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; };
    return 0.2126 * f(c.r) + 0.7152 * f(c.g) + 0.0722 * f(c.b); };
  const background = (el) => { for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor); if (c && c.a > 0.99) return c; }
    return {r: 255, g: 255, b: 255, a: 1}; };
  const out = [];
  for (const el of document.querySelectorAll('body *')) {
    const own = [...el.childNodes].some(n => n.nodeType === 3 && n.textContent.trim());
    if (!own) continue;
    const s = getComputedStyle(el); const box = el.getBoundingClientRect();
    if (s.visibility === 'hidden' || s.display === 'none' || box.width === 0 || el.closest('[hidden]')) continue;
    if (el.closest('.swatch') || el.disabled) continue;  // WCAG exempts inactive controls
    const fg = parse(s.color); const bg = background(el);
    const mix = (k) => fg[k] * fg.a + bg[k] * (1 - fg.a);
    const blend = {r: mix('r'), g: mix('g'), b: mix('b')};
    const [hi, lo] = [lum(blend), lum(bg)].sort((a, b) => b - a);
    const size = parseFloat(s.fontSize); const bold = parseInt(s.fontWeight) >= 700;
    out.push({text: el.textContent.trim().slice(0, 40), tag: el.tagName, ratio: (hi + 0.05) / (lo + 0.05),
              large: size >= 24 || (bold && size >= 18.66)});
  }
  return out; }"""

TARGETS_JS = """() => [...document.querySelectorAll('button, input, select, textarea, [role=button]')]
  .filter(e => { const s = getComputedStyle(e); const b = e.getBoundingClientRect();
                 return !e.closest('[hidden]') && s.display !== 'none' && s.visibility !== 'hidden' && b.width > 0
                        && e.type !== 'hidden'; })
  .map(e => { const b = e.getBoundingClientRect();
              return {id: e.id || e.name || e.textContent.trim().slice(0, 30), w: b.width, h: b.height}; })"""


def check_page(page, where: str, expect_text: str) -> None:
    texts = page.evaluate(CONTRAST_JS)
    assert any(expect_text in t["text"] for t in texts), f"{where}: {expect_text!r} not found in {texts}"
    low = [c for c in texts if c["ratio"] < (3.0 if c["large"] else 4.5)]
    assert not low, f"{where}: text below WCAG AA contrast: {low}"
    small = [t for t in page.evaluate(TARGETS_JS) if t["w"] < 44 or t["h"] < 44]
    assert not small, f"{where}: touch targets smaller than 44 x 44 px: {small}"
    no_alt = page.evaluate("() => [...document.images].filter(i => !i.alt || !i.alt.trim()).map(i => i.src)")
    assert not no_alt, f"{where}: images without alt text: {no_alt}"


def test_rater_pages_meet_contrast_touch_and_alt_text_bars_on_a_phone(browser, live_server, conn):
    create_study(conn, StudyConfig.from_dict({
        "name": "Ratings on a phone", "random_state": 2, "question_kind": "rating", "allow_skip": True,
        "consent": "I agree to take part. **Data** are kept anonymous.",
        "algorithms": [{"algorithm": "anntri", "question_kind": "rating"}]}), demo_items(8), study_id="phone-rating")
    context = browser.new_context(viewport=PHONE, has_touch=True, is_mobile=True)
    page = context.new_page()
    page.goto(f"{live_server}/s/browser?PROLIFIC_PID=a11y-1")
    check_page(page, "triplet instructions", "You will see one item")
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    check_page(page, "triplet question", "Which of these two")
    # keyboard: a focused answer button shows a visible focus ring
    page.focus("#left")
    outline = page.evaluate("() => { const s = getComputedStyle(document.activeElement);"
                            " return [s.outlineStyle, parseFloat(s.outlineWidth), s.boxShadow]; }")
    assert (outline[0] != "none" and outline[1] >= 2) or outline[2] != "none", outline

    page = context.new_page()
    page.goto(f"{live_server}/s/phone-rating?PROLIFIC_PID=a11y-2")
    check_page(page, "consent page", "I agree to take part")
    agree_to_consent(page)
    page.click("#start")
    page.wait_for_selector(".scale-button:not([disabled])")
    # a buttons scale shows no slider: the [hidden] attribute wins over the slider's display rule
    assert not page.locator("#scale-slider").is_visible()
    page.wait_for_selector("#skip:not([disabled])")
    check_page(page, "rating question", "How similar")
    check_page(page, "rating question with a skip button", "I can't decide")
    context.close()
