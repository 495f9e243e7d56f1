"""The study dashboard in a real headless Chromium: uPlot charts render, and counters, plots, the
learned graph and the raters table refresh while raters answer — without reloading the page; and a
researcher's whole journey: log in, create a study from a ZIP of images, watch a rater answer,
download every export, see hostile uploads refused, and a picture of a study with a live crowd."""
from __future__ import annotations

import csv
import io
import json
import os
import threading
import time
import zipfile

import numpy as np
import pytest
from helpers import ARTIFACTS, RESEARCHER, RESEARCHER_PASSWORD, zip_of

from simulation.crowd import Crowd, NoiseModel, Truth
from webapp.accounts import create_user
from webapp.cli.demo_study import demo_items
from webapp.handles import identifier
from workers.store.config import StudyConfig
from workers.store.queue import schedule_update
from workers.store.studies import Item, create_study

pytestmark = pytest.mark.browser


def test_dashboard_plots_render_and_refresh_without_reload(browser, live_server, conn):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{live_server}/studies/browser")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.wait_for_selector("#dashboard")
    # the Overview: the vendored uPlot draws every chart into a canvas
    for plot in ("plot-per-minute", "plot-cumulative", "plot-pool", "plot-latency"):
        page.wait_for_selector(f"#{plot} .uplot canvas", state="attached")
    # healthy? how good? who cheats? all three answered above the fold of a laptop screen
    assert page.evaluate("() => document.getElementById('glance').getBoundingClientRect().bottom") <= 900
    for box in ("glance-health", "glance-quality", "glance-raters"):
        assert page.locator(f"#{box}").is_visible()
    learning = context.new_page()  # the same login
    learning.goto(f"{live_server}/studies/browser?tab=learning")
    learning.wait_for_selector("#nn-graph g.item")
    assert learning.locator("#nn-graph g.item").count() == 12
    page.evaluate("window.__notReloaded = true")
    learning.evaluate("window.__notReloaded = true")

    # a rater answers through the JSON API in a second browser context
    rater = browser.new_context()
    api = rater.request
    api.get(f"{live_server}/s/browser?PROLIFIC_PID=p-dash")
    for _ in range(12):
        reply = api.get(f"{live_server}/api/studies/browser/questions/next").json()
        while reply.get("error", {}).get("code") == "rate_limited":  # a rater session is held to 5/s
            time.sleep(reply["error"]["retry_after"])
            reply = api.get(f"{live_server}/api/studies/browser/questions/next").json()
        question = reply.get("question") or pytest.fail(str(reply))
        body = {"token": question["token"], "choice": question["candidates"][0]["handle"], "response_ms": 1200}
        response = api.post(f"{live_server}/api/studies/browser/answers", data=body)
        while response.status == 429:  # the same 5/s per session holds for answers
            time.sleep(response.json()["error"]["retry_after"])
            response = api.post(f"{live_server}/api/studies/browser/answers", data=body)
        assert response.status == 201, response.text()

    page.wait_for_function("() => document.getElementById('n-answers')?.textContent === '12'", timeout=15000)
    page.wait_for_selector("#plot-response .uplot canvas", state="attached", timeout=15000)
    learning.wait_for_function("() => document.querySelectorAll('#nn-graph line.edge').length > 0", timeout=20000)
    assert page.evaluate("window.__notReloaded === true") and learning.evaluate("window.__notReloaded === true")
    assert int(page.locator("#dashboard").get_attribute("data-updates")) >= 2
    page.click("#tab-raters")
    page.wait_for_selector('#raters-table tr[data-rater="p-dash"]', timeout=20000)
    assert page.locator('#raters-table tr[data-rater="p-dash"] td').nth(1).inner_text() == "12"

    learning.locator("#nn-graph g.item").first.dispatch_event("click")  # items may overlap
    learning.wait_for_selector("#candidates h3")
    os.makedirs(ARTIFACTS, exist_ok=True)
    page.goto(f"{live_server}/studies/browser")
    page.wait_for_selector("#plot-per-minute .uplot canvas")
    page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-overview.png"))  # the laptop screen, unscrolled
    learning.screenshot(path=os.path.join(ARTIFACTS, "dashboard-learning.png"), full_page=True)
    rater.close()
    context.close()


# ------------------------------------------------------------------------------ the researcher's journey
UPLOAD_LIMIT = 256 * 1024  # the journey's server accepts uploads up to this size
CROWD_STUDY = "crowd"


def png(colour: tuple[int, int, int]) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (48, 48), colour).save(buf, format="PNG")
    return buf.getvalue()


@pytest.fixture
def journey_server(conn, start_serve):
    """``proxima serve`` (two web processes, one RQ worker) with a small upload limit and its dashboards
    refreshed every second, a researcher account, and a running study of colours with known positions for a
    simulated crowd."""
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    config = StudyConfig.from_dict({"name": "Colours with a simulated crowd", "algorithm": "anntri",
                                    "question_kind": "rating", "pool_size": 20, "random_state": 4})
    create_study(conn, config, demo_items(12), study_id=CROWD_STUDY)
    schedule_update(conn, CROWD_STUDY)
    return start_serve(web_workers=2, env={"PROXIMA_UPLOAD_MAX_BYTES": UPLOAD_LIMIT,
                                           "PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES": "127.0.0.1",
                                           "PROXIMA_DASHBOARD_REFRESH_SECONDS": 1})


def parse_download(path: str, filename: str):
    """The downloaded file read by the parser its format calls for (raises if it does not parse)."""
    import networkx as nx

    with open(path, "rb") as fh:
        data = fh.read()
    assert data, f"{filename} is empty"
    if filename.endswith(".csv"):
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
        assert rows and all(len(r) == len(rows[0]) for r in rows), filename
        return rows
    if filename.endswith(".jsonl"):
        return [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    if filename.endswith(".json"):
        return json.loads(data)
    if filename.endswith(".graphml"):
        return nx.read_graphml(path)
    if filename.endswith(".zip"):  # the data package
        import proxima

        return proxima.read_export(path)
    raise AssertionError(f"unexpected download {filename}")


def crowd_truth(items) -> Truth:
    points = np.array([item.position for item in items], dtype=np.float64)
    distances = np.linalg.norm(points[:, None] - points[None], axis=-1)
    return Truth([item.id for item in items], distances / distances.max(), source="demo colour positions",
                 points=points)


def test_a_researcher_creates_a_study_watches_raters_and_downloads_every_export(browser, journey_server, conn,
                                                                               tmp_path):
    base = journey_server
    page = browser.new_page(viewport={"width": 1280, "height": 900}, accept_downloads=True)
    page.goto(f"{base}/")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")

    # create a study: a ZIP of images and a YAML config (two algorithms, so every export is offered)
    page.click("#new-study")
    colours = [(200, 30, 30), (210, 60, 40), (30, 160, 60), (40, 170, 90), (30, 60, 200), (60, 80, 210)]
    images = zip_of({f"pets/{n}.png": png(c) for n, c in zip("abcdef", colours, strict=True)})
    page.set_input_files("#items", files=[{"name": "pets.zip", "mimeType": "application/zip", "buffer": images}])
    config = (b"name: Pets in a browser\nrandom_state: 5\npool_size: 12\nalgorithms:\n"
              b"  - {algorithm: anntri, question_kind: triplet}\n"
              b"  - {algorithm: comparison_forest, params: {n_trees: 2}}\n")
    page.set_input_files("#config_file", files=[{"name": "pets.yaml", "mimeType": "text/yaml", "buffer": config}])
    page.click("#create")
    page.wait_for_selector("#dashboard")
    assert "created with 6 items" in page.locator(".flash").first.inner_text()
    assert "this study never ends" in page.locator("#dashboard").inner_text()  # no per-rater limit: said
    study_url = page.url
    study_id = study_url.rstrip("/").rsplit("/", 1)[1]
    page.goto(f"{base}/")
    assert page.locator("#studies", has_text="Pets in a browser").count() == 1
    page.click("#studies >> text=Pets in a browser")
    page.wait_for_selector("#dashboard")
    page.wait_for_selector("#plot-per-minute .uplot canvas")
    page.evaluate("window.__notReloaded = true")
    assert page.locator("#n-answers").inner_text() == "0"

    # a rater answers in a second browser context, through the rater page
    rater_context = browser.new_context()
    rater = rater_context.new_page()
    rater.goto(page.locator("#rater-link").get_attribute("href") + "?PROLIFIC_PID=p-journey")
    rater.click("#start")
    for n in range(4):
        rater.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        rater.click("#left" if n % 2 else "#right")
        rater.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n + 1}'")
    rater_context.close()

    # the dashboard counts them without a reload
    page.wait_for_function("() => document.getElementById('n-answers')?.textContent === '4'", timeout=15000)
    assert page.evaluate("window.__notReloaded === true")
    page.click("#tab-raters")
    page.wait_for_selector('#raters-table tr[data-rater="p-journey"]', timeout=20000)
    # the forest's nodes built / pending and depth per tree
    page.click("#tab-learning")
    page.wait_for_selector('.alg-plot[data-kind="comparison_forest"] .progress-plot .uplot canvas')
    page.wait_for_function("() => document.querySelector('#algorithms tr[data-label=\"comparison_forest\"] "
                           ".alg-progress').textContent.includes('depth up to')")

    # every export link on the page downloads a non-empty file that parses
    page.click("#tab-downloads")
    # the tab is a page of its own: wait for it; the data package is built by a worker, its progress shown
    page.wait_for_selector("#package-pseudonymous button")
    assert page.locator("#package-pseudonymous .package-message").inner_text() == "Not built yet."
    page.click("#package-pseudonymous button")
    page.click("#package-ids button")
    page.wait_for_selector("ul.downloads a#download-package", timeout=60000)
    page.wait_for_selector("ul.downloads a#download-package-ids", timeout=60000)
    assert "Built (" in page.locator("#package-pseudonymous .package-message").inner_text()
    links = page.locator("ul.downloads a")
    hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
    # the data package twice (pseudonymous, recruitment ids), answers CSV/JSONL, triplets, raters,
    # 2 x graph JSON/CSV/GraphML, forest JSON
    assert len(hrefs) == 13, "\n".join(hrefs)  # (neither anntri nor a forest fits coordinates)
    parsed = {}
    for i in range(len(hrefs)):
        with page.expect_download() as info:
            links.nth(i).click()
        download = info.value
        parsed[download.suggested_filename] = parse_download(download.path(), download.suggested_filename)
    assert len(parsed) == 13, sorted(parsed)
    package = parsed[f"{study_id}-data-package-with-rater-ids.zip"]
    assert set(package.answers()["rater"]) == {"p-journey"}
    assert set(parsed[f"{study_id}-data-package.zip"].answers()["rater"]) == {"R0001"}
    answers = parsed[f"{study_id}-answers.csv"]
    assert len(answers) == 1 + 4 and {row[answers[0].index("rater")] for row in answers[1:]} == {"p-journey"}
    assert len(parsed[f"{study_id}-answers.jsonl"]) == 4
    raters = parsed[f"{study_id}-raters.csv"]
    assert [row[0] for row in raters] == ["rater", "p-journey"] and raters[1][raters[0].index("answers")] == "4"
    graph = parsed[f"{study_id}-graph-anntri.graphml"]
    assert graph.number_of_nodes() == 6
    assert "trees" in parsed[f"{study_id}-forest-comparison_forest.json"]

    # hostile uploads are refused in the browser with a message on the page
    page.goto(f"{base}/studies/new")
    slip = zip_of({"../../evil.png": png((0, 0, 0)), "a.png": png((1, 1, 1)), "b.png": png((2, 2, 2))})
    page.set_input_files("#items", files=[{"name": "slip.zip", "mimeType": "application/zip", "buffer": slip}])
    page.fill("#name", "Zip slip")
    page.click("#create")
    assert "parent-directory ('..') path; the archive is refused" in page.locator("#create-error").inner_text()
    big = zip_of({"big.png": png((3, 3, 3)) + os.urandom(UPLOAD_LIMIT)}, zipfile.ZIP_STORED)
    page.set_input_files("#items", files=[{"name": "big.zip", "mimeType": "application/zip", "buffer": big}])
    page.fill("#name", "Too big")
    page.click("#create")
    assert "The upload is too large: at most 256 KiB" in page.locator("#create-error").inner_text()
    assert {s.decode() for s in conn.smembers("proxima:studies")} == {CROWD_STUDY, study_id}

    # the study page of a running study with a simulated crowd answering, saved as a picture
    page.goto(f"{base}/studies/{CROWD_STUDY}")
    page.wait_for_selector("#dashboard")
    items = [Item.from_dict(json.loads(raw)) for raw in conn.lrange(f"proxima:{{{CROWD_STUDY}}}:items", 0, -1)]
    # the simulated people read the handles of what they are shown with the server's secret key
    secret = (tmp_path / "instance" / "secret_key").read_text().strip()
    crowd = Crowd(base, CROWD_STUDY, crowd_truth(items), NoiseModel(sigma=0.05), raters=4, think=0.05,
                  duration=40, seed=1, identify=identifier(secret, CROWD_STUDY, [item.id for item in items]))
    runner = threading.Thread(target=crowd.run, daemon=True)
    runner.start()
    try:
        page.wait_for_function("() => Number(document.getElementById('n-answers')?.textContent) >= 100",
                               timeout=30000)
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-live-overview.png"))
        page.click("#tab-raters")
        page.wait_for_selector('#raters-table tr[data-rater="sim-0"]', timeout=20000)
        page.click("#tab-learning")
        page.wait_for_selector(".error-plot .uplot canvas", timeout=15000)
        # the graph and the raters table refresh every second here: wait for a graph drawn from answers
        page.wait_for_function("() => new Set(Array.from(document.querySelectorAll('#nn-graph g.item'))"
                               ".map((g) => g.getAttribute('transform'))).size > 1", timeout=20000)
        page.locator("#nn-graph g.item").nth(3).dispatch_event("click")
        page.wait_for_selector("#candidates table")
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.screenshot(path=os.path.join(ARTIFACTS, "dashboard-live-crowd.png"), full_page=True)
    finally:
        crowd.stop.set()
        runner.join(30)
