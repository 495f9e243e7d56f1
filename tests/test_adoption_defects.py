"""Smaller defects a lab adopting Proxima met: a negative --seconds gave a negative cost; the --n-select error
was laid on --algorithms; a CSV quote left open read as one item; a huge cell's error named no row; package
pseudonyms grew past R9999, and rater ids sorted as text (sim-10 before sim-2) and wrapped in the Raters
table; "0% right" and "0.0 / 0.0 MB" before any answer; the data package did not say raters withdrew."""
from __future__ import annotations

import json
import time

import pytest
from click.testing import CliRunner
from helpers import run_worker

from webapp.cli import main
from workers.store import keys
from workers.store.studies import StudyError, items_from_csv_text


def give_answers(conn, study_id: str, n: int, raters: tuple[str, ...]) -> None:
    """``n`` answers, the raters in turn, through the issue/accept path the web app uses."""
    from workers.store.answers import accept_answer
    from workers.store.questions import issue_question
    from workers.store.studies import get_study

    study = get_study(conn, study_id)
    for i in range(n):
        rater, now = raters[i % len(raters)], time.time()
        question, _, _ = issue_question(conn, study_id, study.config, study.n_items, rater, now=now,
                                        expires_at=now + 600)
        accept_answer(conn, study_id, question, rater, question["candidates"][0], issued_at=now, response_ms=900,
                      used_ttl=3600)


def plan(*args):
    return CliRunner().invoke(main, ["plan", "--truth", "points:nowhere.csv", "--runs", "1", "--budgets", "10",
                                     *args])


def test_plan_refuses_a_screen_taking_negative_seconds():
    for value in ("-5", "0", "nan", "inf"):
        result = plan("--seconds", f"triplet={value}", "--wage", "10")
        assert result.exit_code == 2, result.output
        assert "Invalid value for '--seconds'" in result.output and "positive number of seconds" in result.output


def test_plan_lays_a_rank_screen_size_error_on_the_option_that_set_it():
    result = plan("--kinds", "rank", "--n-reference", "3", "--n-select", "3")
    assert result.exit_code == 2
    assert "Invalid value for '--n-select'" in result.output and "'--algorithms'" not in result.output
    assert "must be smaller than 'rank.n_reference'" in result.output


def test_a_quote_left_open_in_an_items_csv_is_an_error_naming_its_row_not_one_item():
    text = 'text\nalpha\n"beta, the start\ngamma\ndelta\nepsilon\n'
    with pytest.raises(StudyError, match=r"items\.csv, row 3: a cell opens a quote .* never closed"):
        items_from_csv_text(text)
    # a quote written twice inside a quoted cell is no such error
    items = items_from_csv_text('text\n"a ""quoted"" word"\nplain\n')
    assert [i.text for i in items] == ['a "quoted" word', "plain"]


def test_a_cell_past_the_csv_size_limit_is_an_error_naming_its_row():
    import csv

    text = "text\nfirst\nsecond\n" + "x" * 200_000 + "\nfourth\n"
    with pytest.raises(StudyError, match=r"items\.csv, row 4: not valid CSV: a cell is longer than 131,072"):
        items_from_csv_text(text)
    # whatever limit another library set for the whole process (frictionless raises it on import)
    before = csv.field_size_limit(10 ** 9)
    try:
        with pytest.raises(StudyError, match=r"items\.csv, row 4: not valid CSV: a cell is longer than 131,072"):
            items_from_csv_text(text)
    finally:
        csv.field_size_limit(before)


def test_package_pseudonyms_keep_one_width_so_they_sort_in_their_numbers_order():
    from workers.results.package import _Pseudonyms

    small = _Pseudonyms(keep=False, n_raters=12)
    assert small("a") == "R0001"
    rename = _Pseudonyms(keep=False, n_raters=10_500)
    names = [rename(f"rater-{i}") for i in range(10_500)]
    assert names[0] == "R00001" and names[-1] == "R10500"
    assert sorted(names) == names and len(set(map(len, names))) == 1


def test_no_score_and_no_memory_are_shown_before_any_answer(conn, study_id, researcher_client):
    from webapp.stats import study_stats
    from workers.store.studies import get_study
    from workers.store.truth import append_error_point, save_truth

    run_worker(conn)  # the pools filled, nothing learned yet
    with conn.pipeline() as pipe:  # a pass that knows the truth scored the learner before any answer
        save_truth(pipe, study_id, 10, [[float(i)] for i in range(10)], [1.0] * 10)
        append_error_point(pipe, study_id, "random_triplets", 0, 1.0)
        pipe.execute()
    stats = study_stats(conn, get_study(conn, study_id))
    assert stats["answers"] == 0
    assert stats["algorithms"][0]["truth_error"]["answers_applied"] == 0  # the curve starts at 0 answers
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert "% right" not in page and "0.0 / 0.0 MB" not in page
    # a small study's memory in units that show it, each side its own: Redis measured, no worker figure yet
    conn.hset(keys.engine_stats(study_id), mapping={"memory_redis_bytes": 3707})
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    card = page.split('id="study-memory">', 1)[1].split("</span>", 1)[0]
    assert card == "4 KiB / —"
    conn.hset(keys.engine_stats(study_id), mapping={"memory_engine_bytes": 12 * 1024 * 1024 + 5})
    card = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True).split(
        'id="study-memory">', 1)[1].split("</span>", 1)[0]
    assert card == "4 KiB / 12 MiB"


def test_the_package_records_withdrawals_as_counts_and_dates_without_ids(conn, study_id, tmp_path):
    from datetime import UTC, datetime

    from workers.results.package import write_package_folder
    from workers.store.deletion import forget_rater, rater_digest

    give_answers(conn, study_id, 9, raters=("p-stay", "p-leave", "p-keep"))
    removed = forget_rater(conn, study_id, "p-leave", by="cli:test").answers_removed
    run_worker(conn)
    descriptor = write_package_folder(conn, study_id, tmp_path / "pkg")
    today = datetime.now(tz=UTC).date().isoformat()
    assert descriptor["proxima"]["withdrawals"] == {"raters": 1, "answers_removed": removed, "dates": [today]}
    assert removed == 3
    text = json.dumps(descriptor)
    assert "p-leave" not in text and rater_digest("p-leave") not in text


def test_the_raters_table_counts_rater_ids_in_number_order(conn, study_id):
    from workers.store.raters import rater_order, rater_table

    give_answers(conn, study_id, 6, raters=("sim-10", "sim-2", "sim-1"))  # two answers each
    assert [r["rater"] for r in rater_table(conn, study_id)] == ["sim-1", "sim-2", "sim-10"]
    assert sorted(["R10000", "R9999", "p-b", "p-a"], key=rater_order) == ["R9999", "R10000", "p-a", "p-b"]


def _overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["width"] and b["x"] < a["x"] + a["width"] and a["y"] < b["y"] + b["height"] \
        and b["y"] < a["y"] + a["height"]


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [{"width": 390, "height": 844}, {"width": 1100, "height": 850}])
def test_the_account_line_lies_over_neither_the_preview_banner_nor_the_header(browser, live_server, conn, viewport):
    from helpers import RESEARCHER, RESEARCHER_PASSWORD, colour_items

    from webapp.accounts import create_user
    from workers.store.config import StudyConfig
    from workers.store.studies import create_study

    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    name = "A study whose name is long enough to wrap on a phone"
    create_study(conn, StudyConfig.from_dict({"name": name, "algorithm": "random_triplets", "consent": "We keep it."}),
                 colour_items(10), study_id="banner")
    context = browser.new_context(viewport=viewport, has_touch=viewport["width"] < 600)
    page = context.new_page()
    page.goto(f"{live_server}/studies/banner")
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    page.wait_for_selector("header.bar")
    account = page.locator("form.account").bounding_box()
    title = page.evaluate("""() => { const r = document.createRange(); r.selectNodeContents(document.querySelector(
        'header.bar')); return Array.from(r.getClientRects()).map((b) => ({x: b.x, y: b.y, width: b.width,
        height: b.height})); }""")
    assert not [box for box in title if _overlap(account, box)], (account, title)
    page.goto(f"{live_server}/studies/banner/preview")
    banner = page.locator("#preview-banner").bounding_box()
    account = page.locator("form.account").bounding_box()
    assert not _overlap(account, banner), (account, banner)
    assert page.locator("#logout").is_visible()
    context.close()


def test_create_help_names_every_question_kind():
    # `proxima create --help` offered triplet and rating only; a kind added to engine/kinds.py must show there too
    from engine.kinds import QUESTION_KINDS

    shown = CliRunner().invoke(main, ["create", "--help"]).output
    assert [kind for kind in QUESTION_KINDS if kind not in shown] == []
