"""A person's path in a real headless Chromium: answer 20 questions, see 20 on the dashboard and in the CSV."""
from __future__ import annotations

import csv
import io
import os
import shutil
import signal
import subprocess
import sys

import pytest
from test_serve import healthy, wait_for

from webapp.demo import demo_items
from webapp.embedded import free_port
from workers.config import StudyConfig
from workers.studies import create_study

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("PROXIMA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser():
    if not CHROMIUM:
        if os.environ.get("CI"):
            pytest.fail("Chromium is required for browser tests in CI (apt-get install chromium)")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def live_server(conn, redis_url, tmp_path):
    create_study(conn, StudyConfig(name="Colours in a browser", pool_size=10, random_state=1), demo_items(12),
                 study_id="browser")
    port = free_port()
    env = dict(os.environ, REDIS_URL=redis_url, PROXIMA_INSTANCE_PATH=str(tmp_path / "instance"))
    proc = subprocess.Popen([sys.executable, "-m", "webapp", "serve", "--port", str(port), "--web-workers", "1"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: healthy(base) or proc.poll() is not None)
        assert proc.poll() is None, proc.stdout.read()
        yield base
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)


def test_a_rater_answers_twenty_questions_and_the_researcher_sees_them(browser, live_server, conn):
    page = browser.new_page()
    page.goto(f"{live_server}/s/browser?PROLIFIC_PID=p-0001")
    assert "more similar" in page.locator("#instructions").inner_text()
    chosen = []
    for n in range(20):
        page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        side = n % 2
        chosen.append(int(page.locator("#left" if side == 0 else "#right").get_attribute("data-index")))
        if n % 4 == 0:
            page.click("#left" if side == 0 else "#right")
        else:
            page.keyboard.press("ArrowLeft" if side == 0 else "ArrowRight")
        page.wait_for_function(f"document.getElementById('answered').textContent === '{n + 1}'")
    from conftest import RESEARCHER, RESEARCHER_PASSWORD

    from webapp.accounts import create_user

    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    dashboard = browser.new_page()
    dashboard.goto(f"{live_server}/studies/browser")  # the login page, then back to the study
    dashboard.fill("#username", RESEARCHER)
    dashboard.fill("#password", RESEARCHER_PASSWORD)
    dashboard.click("#login")
    dashboard.wait_for_function("document.getElementById('n-answers').textContent === '20'")
    assert dashboard.locator("#n-raters").inner_text() == "1"
    # the worker has applied the answers: the nearest-neighbour column is filled in
    dashboard.wait_for_function("Array.from(document.querySelectorAll('#items td.nn'))"
                                ".some((td) => td.textContent !== '—')", timeout=30000)
    csv_text = dashboard.request.get(f"{live_server}/studies/browser/answers.csv").text()
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    assert len(rows) == 20
    assert [int(r["choice"]) for r in rows] == chosen
    assert {r["rater"] for r in rows} == {"p-0001"}
