"""What a paid study needs end to end (issue 18): codes checked offline, strict exports, no
neighbour named without evidence, one item validation for the CLI and the upload, public links."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import index_of, rate_by_position, run_worker, zip_folder

from webapp.cli import main
from workers.results.exports import export
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study


def strict_json(text: str):
    """Parse as JavaScript's JSON.parse and R's jsonlite do: NaN and Infinity are errors."""
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


# ---------------------------------------------------------------- 4: verify-code needs no Redis
def test_verify_code_works_without_redis_using_the_instance_secret(tmp_path, monkeypatch):
    from webapp.questions_answers import completion_code

    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.delenv("PROXIMA_SECRET_KEY", raising=False)
    instance = tmp_path / "instance"
    instance.mkdir()
    (instance / "secret_key").write_text("the-instance-secret")
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(instance))
    code = completion_code("the-instance-secret", "s1", "rater-7")
    runner = CliRunner()
    ok = runner.invoke(main, ["verify-code", "s1", "rater-7", code.lower()])
    assert ok.exit_code == 0, ok.output
    assert "valid" in ok.output
    bad = runner.invoke(main, ["verify-code", "s1", "rater-8", code])
    assert bad.exit_code != 0 and "invalid" in bad.output and "Traceback" not in bad.output


# ---------------------------------------------------------------- 7 and 14: strict graph export
def _line_study(conn, app, answers: int) -> str:
    items = [Item(id=f"p{i}", kind="color", color="#102030", position=(x,))
             for i, x in enumerate([0.0, 0.05, 1.0, 1.05, 2.0, 2.05])]
    config = StudyConfig.from_dict({"name": "Line", "random_state": 1, "pool_size": 6, "algorithms": [
        {"algorithm": "anntri", "question_kind": "rating", "params": {"k": 2}}]})
    study_id = create_study(conn, config, items, study_id="line")
    run_worker(conn)
    rate_by_position(app.test_client(), conn, study_id, items, answers)
    return study_id


@pytest.mark.parametrize("answers", [0, 3, 40])
def test_graph_json_export_is_strict_json_and_names_no_neighbour_without_answers(app, conn, answers):
    study_id = _line_study(conn, app, answers)
    doc = strict_json("".join(export(conn, study_id, "graph", "json").chunks))
    for edge in doc["edges"]:
        assert edge["samples"] > 0, edge  # an edge without answers is "no data yet", not estimate 0.0
    if answers == 0:
        assert doc["edges"] == []
    if answers == 40:
        assert doc["edges"]


def test_every_json_export_writes_null_for_numbers_that_are_not_finite():
    from workers.results.exports import _json

    doc = {"edges": [{"estimate": float("nan"), "lower": float("-inf"), "upper": float("inf"), "samples": 0}],
           "nested": [[1.5, float("inf")]]}
    assert strict_json(_json(doc)) == {"edges": [{"estimate": None, "lower": None, "upper": None, "samples": 0}],
                                       "nested": [[1.5, None]]}


# ---------------------------------------------------------------- 5 and 13: one validation of items
PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS\xde"
       b"\x00\x00\x00\x0cIDATx\x9cc\xf8\xff\xff?\x00\x05\xfe\x02\xfe\xa7\x35\x81\x84\x00\x00\x00\x00IEND\xaeB`\x82")


@pytest.fixture
def pngs(tmp_path):
    folder = tmp_path / "pngs"
    folder.mkdir()
    for name in ("a", "b", "c", "d"):
        (folder / f"{name}.png").write_bytes(PNG)
    return folder


def test_create_and_the_upload_refuse_a_text_file_named_png_alike(cli, pngs, tmp_path):
    from workers.store.studies import StudyError
    from workers.store.uploads import items_from_zip

    (pngs / "fake.png").write_text("this is not an image")
    (tmp_path / "study.yaml").write_text("name: Pictures\n")
    result = cli("create", tmp_path / "study.yaml", "--items", pngs)
    assert result.exit_code != 0
    assert "fake.png does not contain image/png data" in result.output
    with pytest.raises(StudyError, match="fake.png does not contain image/png data"):
        items_from_zip(zip_folder(pngs))
    (pngs / "fake.png").unlink()
    assert cli("create", tmp_path / "study.yaml", "--items", pngs).exit_code == 0


@pytest.mark.parametrize("yaml_text,field", [
    ("practice:\n- {head: a, candidates: [b, nope], answer: b}\n", "practice.0.candidates.1"),
    ("practice:\n- {kind: rating, items: [a, ghost], answer: [1, 2]}\n", "practice.0.items.1"),
    ("instructions: 'Look at ![x](item:nope) first'\n", "instructions"),
    ("consent: 'We show ![an item](item:missing).'\n", "consent"),
])
def test_every_item_reference_is_checked_at_creation_naming_the_field(cli, pngs, tmp_path, yaml_text, field):
    (tmp_path / "study.yaml").write_text("name: Pictures\n" + yaml_text)
    result = cli("create", tmp_path / "study.yaml", "--items", pngs)
    assert result.exit_code != 0, result.output
    assert f"field '{field}'" in result.output and "Traceback" not in result.output
    ok = yaml_text.replace("nope", "c").replace("ghost", "c").replace("missing", "d")
    (tmp_path / "study.yaml").write_text("name: Pictures\n" + ok)
    assert cli("create", tmp_path / "study.yaml", "--items", pngs).exit_code == 0


def test_the_dashboard_form_refuses_an_unknown_item_in_instructions(researcher_client, conn, pngs):
    import io

    response = researcher_client.post("/studies/new", data={
        "name": "Upload", "instructions": "See ![x](item:nope)",
        "items": (io.BytesIO(zip_folder(pngs)), "items.zip")}, content_type="multipart/form-data")
    assert response.status_code == 400
    assert "field &#39;instructions&#39; names item &#39;nope&#39;" in response.get_data(as_text=True)
    assert not conn.smembers("proxima:studies")


# ---------------------------------------------------------------- 8: a public base URL for every copied link
def test_study_links_use_the_public_url_when_set_whatever_host_the_request_came_through(app, researcher_client,
                                                                                      study_id):
    page = researcher_client.get("/studies/colours", base_url="https://localhost:8443").get_data(as_text=True)
    assert "https://localhost:8443/s/colours" in page and 'id="public-url-hint"' in page
    app.config["PUBLIC_URL"] = "https://study.example.org/"
    page = researcher_client.get("/studies/colours", base_url="https://localhost:8443").get_data(as_text=True)
    assert "https://study.example.org/s/colours?PROLIFIC_PID=" in page
    assert "localhost" not in page and 'id="public-url-hint"' not in page


# ---------------------------------------------------------------- 9 and 15: the finish page
def _finished_rater(client, conn, **completion):
    import re

    from helpers import answer, colour_items, fetch_question

    config = StudyConfig.from_dict({"name": "Flow", "algorithm": "random_triplets", "pool_size": 8,
                                    "limits": {"max_questions_per_rater": 1}, "completion": completion})
    create_study(conn, config, colour_items(), study_id="flow")
    client.get("/s/flow?PROLIFIC_PID=p-done")
    answer(client, fetch_question(client, "flow"), study_id="flow")
    page = client.get("/s/flow/done").get_data(as_text=True)
    return page, re.search(r'name="csrf_token" value="([^"]+)"', page)


REDIRECT = "https://app.prolific.com/submissions/complete?cc={code}"


def test_finish_page_redirects_to_prolific_by_itself_and_keeps_the_button(client, conn):
    from webapp.questions_answers import completion_code

    page, _ = _finished_rater(client, conn, prolific_redirect_url=REDIRECT)
    target = REDIRECT.replace("{code}", completion_code("test-secret-key", "flow", "p-done"))
    assert f'http-equiv="refresh" content="5;url={target}"' in page
    assert f'id="prolific-return" href="{target}"' in page


def test_finish_page_asks_the_debrief_before_redirecting_and_keeps_the_first_comment_only(client, conn):
    from workers.store import keys

    page, csrf = _finished_rater(client, conn, prolific_redirect_url=REDIRECT, debrief_question="Anything unclear?")
    assert 'http-equiv="refresh"' not in page and 'id="debrief-form"' in page
    after = client.post("/s/flow/done", data={"debrief": "first", "csrf_token": csrf.group(1)}).get_data(as_text=True)
    assert 'http-equiv="refresh"' in after and 'id="debrief-thanks"' in after
    reopened = client.get("/s/flow/done").get_data(as_text=True)
    assert 'id="debrief-form"' not in reopened and 'id="debrief-thanks"' in reopened
    client.post("/s/flow/done", data={"debrief": "second", "csrf_token": csrf.group(1)})
    assert conn.hget(keys.rater_stats("flow"), "p-done:debrief") == b"first"


# ---------------------------------------------------------------- 11: a study that never ends says so
def test_create_warns_that_a_study_without_a_per_rater_limit_never_ends(cli, pngs, tmp_path):
    (tmp_path / "study.yaml").write_text("name: Pictures\n")
    result = cli("create", tmp_path / "study.yaml", "--items", pngs)
    assert result.exit_code == 0 and "this study never ends: raters get no completion code" in result.output
    (tmp_path / "study.yaml").write_text("name: Paid\nconsent: OK?\nlimits: {max_questions_per_rater: 30, "
                                         "answer_budget: 900}\n")
    result = cli("create", tmp_path / "study.yaml", "--items", pngs)
    # a folder of images has no labels, yet catch trials (an image with a copy of itself): no warning left
    warnings = [line for line in result.output.splitlines() if line.startswith("Warning")]
    assert result.exit_code == 0 and warnings == [], result.output
    # texts without labels have none (a copy of a text is readable on the wire): the one warning left
    (tmp_path / "texts.csv").write_text("id,text\na,one\nb,two\nc,three\nd,four\n")
    result = cli("create", tmp_path / "study.yaml", "--items", tmp_path / "texts.csv")
    warnings = [line for line in result.output.splitlines() if line.startswith("Warning")]
    assert result.exit_code == 0 and len(warnings) == 1 and "no catch trials" in warnings[0], result.output
    assert "max_questions_per_rater" in cli("create", "--help").output


def test_new_study_form_offers_limit_consent_budget_and_code_and_warns_without_them(researcher_client, conn, pngs):
    import io

    from workers.store.studies import get_study

    form = researcher_client.get("/studies/new").get_data(as_text=True)
    for field in ("max_questions_per_rater", "answer_budget", "consent", "prolific_redirect_url"):
        assert f'name="{field}"' in form
    assert "this study never ends" in form
    response = researcher_client.post("/studies/new", data={
        "name": "Paid", "start": "1", "max_questions_per_rater": "40", "answer_budget": "2000",
        "consent": "You agree.", "prolific_redirect_url": "https://app.prolific.com/submissions/complete?cc={code}",
        "items": (io.BytesIO(zip_folder(pngs)), "items.zip")}, content_type="multipart/form-data",
        follow_redirects=True)
    assert response.status_code == 200 and "never ends" not in response.get_data(as_text=True)
    from workers.store.studies import list_studies

    study = get_study(conn, next(s.id for s in list_studies(conn) if s.config.name == "Paid"))
    assert study.config.limits.max_questions_per_rater == 40 and study.config.limits.answer_budget == 2000
    assert study.config.consent == "You agree." and "{code}" in study.config.completion.prolific_redirect_url
    response = researcher_client.post("/studies/new", data={
        "name": "Free", "items": (io.BytesIO(zip_folder(pngs)), "items.zip")}, content_type="multipart/form-data",
        follow_redirects=True)
    assert "this study never ends: raters get no completion code" in response.get_data(as_text=True)


# ---------------------------------------------------------------- 10: the demo looks like a real study
def test_demo_study_shows_consent_practice_a_question_limit_and_a_code(app, conn):
    from helpers import answer, fetch_question

    from webapp.cli.demo_study import DEMO_QUESTIONS_PER_RATER, ensure_demo_study

    study_id = ensure_demo_study(conn)
    rater = app.test_client()
    page = rater.get(f"/s/{study_id}").get_data(as_text=True)
    assert "Demo consent" in page and 'value="agree"' in page
    import re

    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    rater.post(f"/s/{study_id}/consent", data={"decision": "agree", "csrf_token": csrf})
    page = rater.get(f"/s/{study_id}").get_data(as_text=True)
    assert "The neighbouring hue is the closer colour." in page
    import math

    from workers.store.studies import get_items

    where = [item.position for item in get_items(conn, study_id)]
    q = fetch_question(rater, study_id)
    for _ in range(DEMO_QUESTIONS_PER_RATER):
        run_worker(conn)
        # a careful rater as the page drives one: the candidate nearer the head (what a catch trial built
        # from positions expects), then the question the answer's response brings (a question left
        # unanswered for another counts as a missed check when it was one)
        near = min((index_of(c) for c in q["candidates"]),
                   key=lambda i, h=index_of(q["head"]): math.dist(where[i], where[h]))
        response = answer(rater, q, near, study_id=study_id)
        assert response.status_code == 201
        q = response.get_json().get("next") or (fetch_question(rater, study_id) if _ < DEMO_QUESTIONS_PER_RATER - 1
                                                else None)
    # the finish page waits for the answer check of the last answers: the worker's pass runs it
    waiting = rater.get(f"/s/{study_id}/done")
    assert waiting.headers.get("Refresh") and "completion code in a moment" in waiting.get_data(as_text=True)
    run_worker(conn)
    done = rater.get(f"/s/{study_id}/done").get_data(as_text=True)
    assert 'id="completion-code"' in done and "verify-code" in done


# ---------------------------------------------------------------- 14: early in a study, "no data yet"
def test_early_graph_keeps_items_without_answers_apart_and_names_no_unanswered_neighbour(app, conn,
                                                                                      researcher_client):
    import numpy as np

    from workers.store.studies import get_study

    items = [Item(id=f"p{i:02d}", kind="color", color="#102030", position=(float(i),)) for i in range(30)]
    config = StudyConfig.from_dict({"name": "Early", "random_state": 1, "pool_size": 10, "algorithms": [
        {"algorithm": "anntri", "question_kind": "rating"}]})
    study_id = create_study(conn, config, items, study_id="early")
    run_worker(conn)
    rater = app.test_client()
    for _ in range(12):
        q = rater.get(f"/api/studies/{study_id}/questions/next").get_json()["question"]
        i, j = (index_of(it) for it in q["items"])
        rater.post(f"/api/studies/{study_id}/answers", json={"token": q["token"], "value": 5 - min(4, abs(i - j))})
    run_worker(conn)
    layout = researcher_client.get(f"/api/studies/{study_id}/graph-layout").get_json()
    waiting = set(layout["no_data"])
    assert 0 < len(waiting) < 30
    placed = [tuple(p) for item, p in zip(layout["nodes"], layout["positions"], strict=True) if item not in waiting]
    rows = {tuple(p) for item, p in zip(layout["nodes"], layout["positions"], strict=True) if item in waiting}
    assert len(rows) == len(waiting)  # one position each, not a few stacked points
    assert all(y > max(p[1] for p in placed) for _, y in rows)
    for edge in layout["edges"]:
        assert edge["from"] not in waiting and edge["to"] not in waiting
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    neighbors = np.array(stats["algorithms"][0]["neighbors"])
    assert np.all(neighbors[sorted(waiting)] == -1)  # the page shows "no data yet" for these
    assert get_study(conn, study_id).n_items == 30


# ---------------------------------------------------------------- 15: the raters export
def test_raters_export_writes_iso_times_and_the_code_each_rater_was_shown(client, conn):
    import csv
    import io

    from webapp.questions_answers import completion_code

    _finished_rater(client, conn)
    rows = list(csv.DictReader(io.StringIO("".join(export(conn, "flow", "raters", "csv").chunks))))
    assert len(rows) == 1 and rows[0]["rater"] == "p-done"
    assert rows[0]["completion_code"] == completion_code("test-secret-key", "flow", "p-done")
    assert rows[0]["last_answer_at"].endswith("+00:00") and "T" in rows[0]["last_answer_at"]


# ---------------------------------------------------------------- the dashboard in sections; the plan on it
def test_each_section_of_a_study_page_loads_on_its_own(researcher_client, study_id):
    marks = {"overview": 'id="glance"', "learning": 'id="nn-graph"', "raters": 'id="raters-table"',
             "settings": 'id="settings-form"', "downloads": 'class="downloads"'}
    for tab, mark in marks.items():
        url = f"/studies/{study_id}" + ("" if tab == "overview" else f"?tab={tab}")
        page = researcher_client.get(url).get_data(as_text=True)
        assert mark in page and f'id="tab-{tab}" aria-current="page"' in page, tab
        assert all(other not in page for t, other in marks.items() if t != tab), tab
    assert researcher_client.get(f"/studies/{study_id}?tab=nope").status_code == 404


def test_a_stored_plan_shows_its_curve_cost_and_what_to_expect_now(researcher_client, conn, study_id):
    from workers.store import keys

    plan = {"version": 1, "n_items": 10, "budgets": [10, 50], "source": "a pilot", "spread": "seeds", "runs": 2,
            "algorithms": {"random_triplets": {"exact": {"mean": [0.2, 0.6], "min": [0.1, 0.5], "max": [0.3, 0.7]},
                                               "hit3": {"mean": [0.5, 0.9], "min": [0.4, 0.8], "max": [0.6, 1.0]},
                                               "cpu_seconds": 0.1}},
            "target": 0.9, "metric": "exact", "pay": 0.5, "currency": "£",
            "reach": {"random_triplets": {"value": 50.0, "bound": ">"}}}
    conn.set(keys.plan(study_id), json.dumps(plan))
    conn.hset(keys.study(study_id), "config", conn.hget(keys.study(study_id), "config").decode().replace(
        '"answer_budget": null', '"answer_budget": 400'))
    learning = researcher_client.get(f"/studies/{study_id}?tab=learning").get_data(as_text=True)
    assert 'id="plan-table"' in learning and "0.60" in learning and "&gt; 50/item" in learning
    assert "£250" in learning  # 50 answers x 10 items x 0.50
    overview = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert "£0.00</strong> spent" in overview and "of £200.00" in overview  # budget 400 answers x 0.50
    assert 'id="budget-meter"' in overview
