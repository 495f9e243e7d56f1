"""API tokens on the account page in a real headless Chromium: make one (shown once), use it from a
program, see it listed without its secret, revoke it; and the Downloads tab's data package link."""
from __future__ import annotations

import io
import os
import zipfile

import pytest
import requests
from helpers import ARTIFACTS, RESEARCHER, RESEARCHER_PASSWORD

from webapp.accounts import create_user

pytestmark = pytest.mark.browser


def test_a_researcher_makes_uses_and_revokes_a_token_in_the_browser(browser, live_server, conn):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    page = browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
    page.goto(f"{live_server}/account")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.wait_for_selector("#token-form")
    assert page.locator("#no-tokens").is_visible()
    page.fill("#token-name", "laptop analysis")
    page.select_option("#token-study", "browser")
    page.click("#create-token")
    page.wait_for_selector("#new-token-value")
    token = page.locator("#new-token-value").inner_text().strip()
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.locator("#api-tokens").scroll_into_view_if_needed()
    page.screenshot(path=os.path.join(ARTIFACTS, "account-api-token.png"), full_page=True)
    assert page.locator("#token-table tbody tr").count() == 1
    assert "read-only" in page.locator("#token-table").inner_text()

    # a program with the token, no browser session
    stats = requests.get(f"{live_server}/api/studies/browser/stats", headers={"Authorization": f"Bearer {token}"},
                         timeout=30)
    assert stats.status_code == 200 and stats.json()["study"]["id"] == "browser"

    page.goto(f"{live_server}/account")  # shown once: not on the page again
    assert token not in page.content() and "laptop analysis" in page.locator("#token-table").inner_text()
    assert "UTC" in page.locator("#token-table").inner_text()  # created and last used, in words
    page.click("#token-table button")
    page.wait_for_selector("#no-tokens")
    assert "is revoked" in page.content()
    refused = requests.get(f"{live_server}/api/studies/browser/stats", headers={"Authorization": f"Bearer {token}"},
                           timeout=30)
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]

    page.goto(f"{live_server}/studies/browser?tab=downloads")
    # the package is built by the worker on request (workers/jobs/package.py), then offered for download
    page.click("#package-pseudonymous button")
    page.wait_for_selector("ul.downloads a#download-package", timeout=60000)
    with page.expect_download() as download:
        page.click("#download-package")
    archive = zipfile.ZipFile(io.BytesIO(open(download.value.path(), "rb").read()))
    assert "browser-data-package/datapackage.json" in archive.namelist()
    page.screenshot(path=os.path.join(ARTIFACTS, "downloads-data-package.png"))
