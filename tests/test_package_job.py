"""The data package is built by an RQ worker, not in the web request: asking (the dashboard's button, the
researcher API) queues one build per study and variant and a second request joins it; the status says the
answers written of the total, then links the zip, kept until the study's data change; a failure is said in
words; a withdrawal drops built packages. Real Redis, a real RQ worker (SimpleWorker), the Flask test client."""
from __future__ import annotations

import io
import re
import time
import zipfile

import pytest
from helpers import run_worker
from test_adoption_defects import give_answers

from workers.jobs.package import build
from workers.results import package as package_module
from workers.results.package import write_package
from workers.store import keys
from workers.store.packages import built_package, package_status, request_build
from workers.store.queue import get_queue

RATERS = ("p-ann", "p-bob", "p-cat")


@pytest.fixture
def answered(conn, study_id):
    run_worker(conn)
    give_answers(conn, study_id, 12, RATERS)
    run_worker(conn)
    return study_id


def answers_in(data: bytes, study_id: str) -> list[str]:
    archive = zipfile.ZipFile(io.BytesIO(data))
    return archive.read(f"{study_id}-data-package/answers.csv").decode().splitlines()[1:]


def test_a_build_is_queued_joined_run_by_a_worker_and_then_downloaded(researcher_client, conn, answered):
    refused = researcher_client.get(f"/api/studies/{answered}/package")
    assert refused.status_code == 409
    assert "not ready" in refused.get_json()["error"]["message"] and "/package/build" in refused.get_json()["error"][
        "message"]
    first = researcher_client.post(f"/api/studies/{answered}/package/build")
    assert first.status_code == 202
    status = first.get_json()
    assert status["state"] == "queued" and status["written"] == 0 and status["total"] == 12
    assert status["download"] is None and "Waiting for a worker" in status["message"]
    # a second request while the first is queued joins it: one job, one status
    again = researcher_client.post(f"/api/studies/{answered}/package/build")
    assert again.status_code == 202 and again.get_json()["state"] == "queued"
    assert get_queue(conn).count == 1
    assert run_worker(conn) == 1
    done = researcher_client.get(f"/api/studies/{answered}/package/status").get_json()
    assert done["state"] == "finished" and done["written"] == done["total"] == 12 and done["size"] > 0
    assert done["download"] == f"/api/studies/{answered}/package"
    zipped = researcher_client.get(done["download"])
    assert zipped.status_code == 200 and zipped.mimetype == "application/zip"
    assert len(answers_in(zipped.data, answered)) == 12
    # kept: asking again while the data are unchanged builds nothing
    kept = researcher_client.post(f"/api/studies/{answered}/package/build")
    assert kept.status_code == 200 and kept.get_json()["state"] == "finished" and get_queue(conn).count == 0
    # an answer more: the package is stale (still downloadable, said so) and the next request builds anew
    give_answers(conn, answered, 1, RATERS)
    stale = researcher_client.get(f"/api/studies/{answered}/package/status").get_json()
    assert stale["state"] == "stale" and "build it again" in stale["message"]
    assert len(answers_in(researcher_client.get(f"/api/studies/{answered}/package").data, answered)) == 12
    assert researcher_client.post(f"/api/studies/{answered}/package/build").status_code == 202
    run_worker(conn)
    assert len(answers_in(researcher_client.get(f"/api/studies/{answered}/package").data, answered)) == 13


def test_the_writer_reports_answers_written_as_it_goes(conn, answered, monkeypatch):
    monkeypatch.setattr(package_module, "PROGRESS_EVERY", 5)
    seen = []
    write_package(conn, answered, lambda path, data: None, progress=lambda written, total: seen.append((written,
                                                                                                       total)))
    assert seen == [(5, 12), (10, 12), (12, 12)]


def test_a_worker_reports_progress_while_it_writes(conn, answered, monkeypatch):
    # what the status route reads during the build: each progress report lands in the status as it happens
    monkeypatch.setattr(package_module, "PROGRESS_EVERY", 4)
    request_build(conn, answered)
    job_id = conn.hget(keys.package_status(answered, "pseudonymous"), "job_id").decode()
    seen = []
    real = package_module.write_package

    def watching(*args, progress=None, **kwargs):
        def report(written, total):
            progress(written, total)
            status = package_status(conn, answered)
            seen.append((status["state"], status["written"], status["total"]))
        return real(*args, progress=report, **kwargs)

    monkeypatch.setattr(package_module, "write_package", watching)
    build(conn, answered, False, job_id)
    assert seen == [("running", 4, 12), ("running", 8, 12), ("running", 12, 12), ("running", 12, 12)]
    assert package_status(conn, answered)["state"] == "finished"


def test_a_failed_build_is_said_in_words_and_can_be_asked_again(researcher_client, app, conn, answered):
    app.config["PACKAGE_MAX_BYTES"] = 100
    researcher_client.post(f"/api/studies/{answered}/package/build")
    run_worker(conn)
    status = researcher_client.get(f"/api/studies/{answered}/package/status").get_json()
    assert status["state"] == "failed"
    assert "more than the 1 KiB the server keeps" in status["message"] and "proxima export" in status["message"]
    assert researcher_client.get(f"/api/studies/{answered}/package").status_code == 409
    app.config["PACKAGE_MAX_BYTES"] = 10 ** 9
    assert researcher_client.post(f"/api/studies/{answered}/package/build").status_code == 202
    run_worker(conn)
    assert package_status(conn, answered)["state"] == "finished"


def test_a_build_whose_worker_ended_is_failed_not_waited_on_forever(conn, answered):
    request_build(conn, answered)
    get_queue(conn).empty()  # the queued job is gone (emptying deletes it), as when its worker was killed and lost
    status = package_status(conn, answered)
    assert status["state"] == "failed" and "stopped before it finished" in status["message"]
    assert request_build(conn, answered)["state"] == "queued"
    run_worker(conn)
    assert package_status(conn, answered)["state"] == "finished"


def test_the_two_variants_build_one_after_the_other(researcher_client, conn, answered):
    researcher_client.post(f"/api/studies/{answered}/package/build")
    with_ids = researcher_client.post(f"/api/studies/{answered}/package/build?rater_ids=1").get_json()
    assert with_ids["state"] == "queued" and with_ids["rater_ids"] is True
    assert get_queue(conn).count == 1  # the second waits for the first (deferred), one build at a time
    run_worker(conn)
    assert package_status(conn, answered, rater_ids=True)["state"] == "finished"
    ids = researcher_client.get(f"/api/studies/{answered}/package?rater_ids=1")
    assert "with-rater-ids" in ids.headers["Content-Disposition"]
    assert {line.split(",")[3] for line in answers_in(ids.data, answered)} == set(RATERS)
    plain = researcher_client.get(f"/api/studies/{answered}/package")
    assert {line.split(",")[3] for line in answers_in(plain.data, answered)} == {"R0001", "R0002", "R0003"}


def test_forgetting_a_rater_drops_built_packages_and_the_builds_under_way(conn, answered):
    from workers.store.deletion import forget_rater

    request_build(conn, answered, rater_ids=True)
    run_worker(conn)
    assert built_package(conn, answered, rater_ids=True) is not None
    request_build(conn, answered)  # queued, not run yet: it must store nothing once the rater is forgotten
    forget_rater(conn, answered, "p-bob", by="cli:test", rebuild=False)
    assert built_package(conn, answered, rater_ids=True) is None
    run_worker(conn)
    assert built_package(conn, answered) is None and package_status(conn, answered)["state"] == "none"
    request_build(conn, answered, rater_ids=True)
    run_worker(conn)
    assert b"p-bob" not in built_package(conn, answered, rater_ids=True)


def test_the_oldest_kept_zips_are_dropped_to_keep_all_within_the_total_and_say_so(conn, answered):
    request_build(conn, answered)
    run_worker(conn)
    first = package_status(conn, answered)
    assert first["state"] == "finished"
    # room for one zip only: building the other variant drops the older one, which says why and builds again
    request_build(conn, answered, rater_ids=True, total_bytes=first["size"] + first["size"] // 2)
    run_worker(conn)
    assert package_status(conn, answered, rater_ids=True)["state"] == "finished"
    dropped = package_status(conn, answered)
    assert dropped["state"] == "dropped" and built_package(conn, answered) is None
    assert "PROXIMA_PACKAGES_TOTAL_BYTES" in dropped["message"] and "build it again" in dropped["message"]
    assert conn.zrange(keys.packages_kept(), 0, -1) == [f"{answered}|rater-ids".encode()]
    assert request_build(conn, answered)["state"] == "queued"
    run_worker(conn)  # a total large enough for both keeps both
    assert package_status(conn, answered)["state"] == "finished"
    assert package_status(conn, answered, rater_ids=True)["state"] == "finished"
    assert conn.zcard(keys.packages_kept()) == 2


def test_forgetting_a_rater_leaves_no_kept_zip_in_the_index(conn, answered):
    from workers.store.deletion import forget_rater

    request_build(conn, answered)
    run_worker(conn)
    assert conn.zcard(keys.packages_kept()) == 1
    forget_rater(conn, answered, "p-bob", by="cli:test", rebuild=False)
    assert conn.zcard(keys.packages_kept()) == 0


def test_a_read_only_token_may_ask_for_a_build_and_the_client_waits_for_it(app, conn, answered, redis_url):
    from webapp.accounts import create_user
    from webapp.api_tokens import create_token

    create_user(conn, "reader", "a long reader password")
    token = create_token(conn, "reader", "read", access="read")[0]
    client = app.test_client()
    headers = {"Authorization": f"Bearer {token}"}
    assert client.post(f"/api/studies/{answered}/package/build", headers=headers).status_code == 202
    assert client.post(f"/api/studies/{answered}/status", json={"action": "pause"},
                       headers=headers).status_code == 403  # still read-only for what changes a study
    run_worker(conn)
    assert client.get(f"/api/studies/{answered}/package", headers=headers).status_code == 200


def test_the_downloads_tab_builds_shows_progress_and_links_the_zip(researcher_client, conn, answered):
    page = researcher_client.get(f"/studies/{answered}?tab=downloads").get_data(as_text=True)
    assert f'action="/studies/{answered}/package/build"' in page and "Not built yet." in page
    assert re.search(rf'id="download-package"\s+href="/studies/{answered}/package.zip" hidden>', page)
    early = researcher_client.get(f"/studies/{answered}/package.zip")
    assert early.status_code == 302 and early.headers["Location"].endswith("?tab=downloads")
    built = researcher_client.post(f"/studies/{answered}/package/build", data={"rater_ids": "0"})
    assert built.status_code == 302
    page = researcher_client.get(f"/studies/{answered}?tab=downloads").get_data(as_text=True)
    assert "Waiting for a worker to start the build." in page and '<progress max="12" value="0">' in page
    run_worker(conn)
    page = researcher_client.get(f"/studies/{answered}?tab=downloads").get_data(as_text=True)
    assert re.search(rf'id="download-package"\s+href="/studies/{answered}/package.zip">', page)
    assert re.search(r"Built \(\d+ KiB, 12 answers\)\.", page)
    response = researcher_client.get(f"/studies/{answered}/package.zip")
    assert response.status_code == 200 and f"filename={answered}-data-package.zip" in response.headers[
        "Content-Disposition"]
    assert len(answers_in(response.data, answered)) == 12


def test_the_request_returns_before_the_package_is_written(researcher_client, conn, answered):
    # the web request only queues: nothing is written until a worker runs (the 18 s at 100,000 answers
    # moved out of the request; benchmarks/researcher_pull.py measures both)
    before = time.time()
    researcher_client.post(f"/api/studies/{answered}/package/build")
    assert not conn.exists(keys.package_zip(answered, "pseudonymous"))
    assert package_status(conn, answered)["state"] == "queued"
    run_worker(conn)
    assert float(conn.hget(keys.package_status(answered, "pseudonymous"), "finished_at")) >= before


@pytest.mark.parametrize("failure", ["too large", "unexpected"])
def test_a_build_waiting_for_the_other_variant_runs_even_when_that_one_fails(conn, answered, failure):
    if failure == "too large":
        request_build(conn, answered, rater_ids=False, max_bytes=10)
    else:  # a status document the writer cannot write: the job itself fails (RQ marks it failed)
        request_build(conn, answered, rater_ids=False, status={"when": object()})
    assert request_build(conn, answered, rater_ids=True)["state"] == "queued"
    run_worker(conn)
    failed = package_status(conn, answered)
    assert failed["state"] == "failed"
    assert ("more than the" if failure == "too large" else "an unexpected error (TypeError") in failed["message"]
    assert package_status(conn, answered, rater_ids=True)["state"] == "finished"


@pytest.mark.browser
def test_the_downloads_tab_shows_the_build_waiting_then_the_link_in_chromium(browser, start_serve, conn, answered):
    from helpers import ARTIFACTS, RESEARCHER, RESEARCHER_PASSWORD, researcher_page

    from webapp.accounts import create_user

    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    base = start_serve("--workers", "0")  # no worker: the build waits until this test runs one
    with researcher_page(browser, base, f"/studies/{answered}?tab=downloads") as page:
        box = page.locator("#package-pseudonymous")
        assert box.locator(".package-message").inner_text() == "Not built yet."
        assert not box.locator("progress").is_visible() and not box.locator("a.package-download").is_visible()
        box.locator("button").click()
        page.wait_for_function("() => document.getElementById('package-pseudonymous').dataset.state === 'queued'")
        assert box.locator("progress").is_visible() and box.locator("button").is_disabled()
        assert box.locator("progress").get_attribute("max") == "12"
        assert box.locator(".package-message").inner_text() == "Waiting for a worker to start the build."
        page.locator("#package").screenshot(path=f"{ARTIFACTS}/downloads-package-waiting.png")
        run_worker(conn)  # the page polls the status once a second
        box.locator("a.package-download").wait_for(state="visible", timeout=15000)
        assert "12 answers" in box.locator(".package-message").inner_text()
        assert not box.locator("progress").is_visible()
        with page.expect_download() as info:
            box.locator("a.package-download").click()
        assert info.value.suggested_filename == f"{answered}-data-package.zip"
        assert len(answers_in(open(info.value.path(), "rb").read(), answered)) == 12
        page.locator("#package").screenshot(path=f"{ARTIFACTS}/downloads-package-built.png")
