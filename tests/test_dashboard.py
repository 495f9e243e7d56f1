"""The researcher dashboard: study lifecycle, creating studies from uploads, settings while a study
runs, excluding raters (a queued rebuild), the stats/raters/graph-layout JSON, the error curve of
studies with a known truth, the MDS layout of the learned graph (capped for large studies) and
changing one's own password."""
from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import (
    NO_CHECKS,
    RESEARCHER,
    RESEARCHER_PASSWORD,
    answer,
    colour_items,
    fetch_question,
    index_of,
    log_in,
    rate_by_position,
    run_worker,
    upload_study,
    zip_of,
)

from workers.results.layout import MAX_DRAWN, classical_mds, fill_distances
from workers.store import keys
from workers.store.config import ConfigError, StudyConfig
from workers.store.queue import schedule_update
from workers.store.studies import Item, StudyError, create_study, get_items, get_study, update_config
from workers.store.truth import TRUTH_ERROR_PREFIX
from workers.store.uploads import items_from_csv_bytes, items_from_zip

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32


# ---------------------------------------------------------------------- lifecycle
def test_pause_resume_and_close_from_the_dashboard(researcher_client, conn, study_id):
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert 'id="action-pause"' in page and "PROLIFIC_PID={{%PROLIFIC_PID%}}" in page
    assert "STUDY_ID={{%STUDY_ID%}}&amp;SESSION_ID={{%SESSION_ID%}}" in page
    for action, status in (("pause", "paused"), ("resume", "running"), ("close", "closed")):
        response = researcher_client.post(f"/studies/{study_id}/status", data={"action": action})
        assert response.status_code == 302
        assert get_study(conn, study_id).status == status
    # a closed study stays closed
    researcher_client.post(f"/studies/{study_id}/status", data={"action": "resume"})
    assert get_study(conn, study_id).status == "closed"
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert "cannot resume" in page and 'id="action-resume"' not in page


def test_the_study_page_refreshes_at_the_instance_setting(researcher_client, app, study_id):
    # DASHBOARD_REFRESH_SECONDS (default 10) reaches the page's script as data-refresh-seconds
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert 'data-refresh-seconds="10"' in page
    app.config["DASHBOARD_REFRESH_SECONDS"] = 1.5
    page = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
    assert 'data-refresh-seconds="1.5"' in page


def test_paused_study_asks_no_questions_and_resumes(researcher_client, client, conn, study_id):
    researcher_client.post(f"/studies/{study_id}/status", data={"action": "pause"})
    rater = client.application.test_client()
    assert rater.get(f"/api/studies/{study_id}/questions/next").status_code == 409
    researcher_client.post(f"/studies/{study_id}/status", data={"action": "resume"})
    run_worker(conn)
    assert rater.get(f"/api/studies/{study_id}/questions/next").status_code == 200


def test_lifecycle_posts_need_a_csrf_token_and_a_login(researcher_client, app, conn, study_id):
    del researcher_client.environ_base["HTTP_X_CSRFTOKEN"]
    assert researcher_client.post(f"/studies/{study_id}/status", data={"action": "pause"}).status_code == 400
    anonymous = app.test_client()
    assert anonymous.post(f"/studies/{study_id}/status", data={"action": "pause"}).status_code == 302
    assert anonymous.get(f"/api/studies/{study_id}/graph-layout").status_code == 401
    assert anonymous.get(f"/api/studies/{study_id}/raters").status_code == 401
    assert get_study(conn, study_id).status == "running"


# ---------------------------------------------------------------------- settings
def test_update_config_revalidates_and_keeps_the_algorithms(conn, study_id):
    config = update_config(conn, study_id, instructions="Look at the hue only.", pool_size=5,
                           budgets={"random_triplets": 40})
    assert config.instructions == "Look at the hue only."
    stored = get_study(conn, study_id).config
    assert stored.pool_size == 5 and stored.algorithms[0].budget == 40
    with pytest.raises(ConfigError, match="pool_size"):
        update_config(conn, study_id, pool_size=0)
    with pytest.raises(StudyError, match="cannot change algorithms"):
        update_config(conn, study_id, algorithms=[{"algorithm": "anntri"}])
    with pytest.raises(StudyError, match="no algorithm 'nope'"):
        update_config(conn, study_id, budgets={"nope": 3})
    assert get_study(conn, study_id).config.pool_size == 5


def test_instructions_edited_while_running_reach_raters(researcher_client, app, study_id):
    response = researcher_client.post(f"/studies/{study_id}/settings",
                                      data={"instructions": "Judge by brightness.", "budget:random_triplets": ""})
    assert response.status_code == 302
    assert "Judge by brightness." in app.test_client().get(f"/s/{study_id}").get_data(as_text=True)
    response = researcher_client.post(f"/studies/{study_id}/settings", data={"pool_size": "many"},
                                      follow_redirects=True)
    assert "Settings not saved: field &#39;pool_size&#39; must be a whole number" in response.get_data(as_text=True)


def test_rater_limits_are_edited_while_running_and_enforced(researcher_client, app, conn, study_id):
    response = researcher_client.post(f"/studies/{study_id}/settings", data={
        "limit:max_questions_per_rater": "1", "limit:answer_budget": "", "limit:min_response_ms": "300"})
    assert response.status_code == 302
    limits = get_study(conn, study_id).config.limits
    assert (limits.max_questions_per_rater, limits.answer_budget, limits.min_response_ms) == (1, None, 300)
    page = researcher_client.get(f"/studies/{study_id}?tab=settings").get_data(as_text=True)
    assert 'name="limit:max_questions_per_rater" min="1" value="1"' in page
    rater = app.test_client()
    question = rater.get(f"/api/studies/{study_id}/questions/next").get_json()["question"]
    body = {"token": question["token"], "choice": question["candidates"][0]["handle"]}
    assert rater.post(f"/api/studies/{study_id}/answers", json=body).status_code == 201
    response = rater.get(f"/api/studies/{study_id}/questions/next")
    assert response.status_code == 409 and "finish_url" in response.get_json()["error"]
    response = researcher_client.post(f"/studies/{study_id}/settings", data={"limit:answer_budget": "0"},
                                      follow_redirects=True)
    assert "Settings not saved" in response.get_data(as_text=True) and "answer_budget" in response.get_data(
        as_text=True)
    assert get_study(conn, study_id).config.limits.max_questions_per_rater == 1


# ---------------------------------------------------------------------- create from uploads
def test_create_a_study_from_a_zip_of_images(researcher_client, conn):
    archive = zip_of({"cats/a.png": PNG, "cats/b.jpg": JPEG, "c.png": PNG, "__MACOSX/._c.png": b"junk"})
    response = upload_study(researcher_client, archive, "pets.zip")
    assert response.status_code == 302, response.get_data(as_text=True)
    study_id = response.headers["Location"].rsplit("/", 1)[1]
    study = get_study(conn, study_id)
    assert study.n_items == 3 and study.status == "running"
    assert "Uploaded" in researcher_client.get("/").get_data(as_text=True)
    assert researcher_client.get(f"/media/{study_id}/2").data == JPEG  # sorted by path: c, cats/a, cats/b


def test_create_a_paused_study_from_a_csv_with_labels(researcher_client, conn):
    csv_bytes = b"id,text,label\nx,red apple,fruit\ny,green pear,fruit\nz,blue car,vehicle\n"
    response = upload_study(researcher_client, csv_bytes, "texts.csv", start="")
    assert response.status_code == 302
    study = get_study(conn, response.headers["Location"].rsplit("/", 1)[1])
    assert study.status == "paused"
    from workers.store.studies import get_items
    assert [(i.id, i.label) for i in get_items(conn, study.id)] == [("x", "fruit"), ("y", "fruit"),
                                                                     ("z", "vehicle")]


def test_create_from_a_csv_with_feature_columns(researcher_client, conn):
    csv_bytes = (b"id,text,label,length,weight\nx,red apple,fruit,7.5,0.2\ny,green pear,fruit,9,0.25\n"
                 b"z,blue car,vehicle,400,1e3\n")
    response = upload_study(researcher_client, csv_bytes, "features.csv")
    assert response.status_code == 302, response.get_data(as_text=True)
    items = get_items(conn, response.headers["Location"].rsplit("/", 1)[1])
    assert [i.features for i in items] == [{"length": 7.5, "weight": 0.2}, {"length": 9.0, "weight": 0.25},
                                           {"length": 400.0, "weight": 1000.0}]
    assert [i.label for i in items] == ["fruit", "fruit", "vehicle"]


def test_a_bad_feature_cell_is_named_by_file_row_and_column(researcher_client, conn):
    csv_bytes = b"text,length\nred apple,7.5\ngreen pear,long\nblue car,400\n"
    response = upload_study(researcher_client, csv_bytes, "features.csv")
    page = response.get_data(as_text=True).replace("&#39;", "'")
    assert response.status_code == 400
    assert "features.csv, row 3, column 'length': 'long' is not a number" in page
    assert not conn.smembers(keys.studies())


def test_create_from_an_uploaded_yaml_config(researcher_client, conn):
    yaml_text = b"name: From YAML\nalgorithm: anntri\nquestion_kind: rating\n"
    response = upload_study(researcher_client, b"text\none\ntwo\nthree\nfour\n", "t.csv",
                            config=(yaml_text, "study.yaml"))
    assert response.status_code == 302
    study = get_study(conn, response.headers["Location"].rsplit("/", 1)[1])
    assert study.config.name == "From YAML" and study.config.algorithms[0].question_kind == "rating"


@pytest.mark.parametrize("members, message", [
    ({"../evil.png": PNG, "a.png": PNG, "b.png": PNG}, "parent-directory"),
    ({"/etc/evil.png": PNG, "a.png": PNG, "b.png": PNG}, "absolute"),
    ({"a.png": PNG, "b.png": PNG, "notes.txt": b"hello"}, "notes.txt is not an image"),
    ({"a.png": PNG, "b.png": PNG, "c.png": b"MZ\x90\x00 not a png"}, "c.png does not contain image/png data"),
    ({"x/a.png": PNG, "y/a.png": PNG, "b.png": PNG}, "would both be item 'a'"),
])
def test_hostile_or_broken_zips_are_refused_with_the_member_named(researcher_client, conn, members, message):
    response = upload_study(researcher_client, zip_of(members), "items.zip")
    assert response.status_code == 400
    assert message in response.get_data(as_text=True).replace("&#39;", "'")
    assert not conn.smembers(keys.studies())


def test_zip_bombs_are_refused_before_anything_is_decompressed():
    bomb = zip_of({f"{i}.png": PNG + b"\x00" * 100_000 for i in range(5)})
    assert len(bomb) < 5000
    with pytest.raises(StudyError, match="would unpack to"):
        items_from_zip(bomb, "bomb.zip", max_total_bytes=200_000)
    with pytest.raises(StudyError, match="holds 5 entries; at most 4"):
        items_from_zip(bomb, "bomb.zip", max_members=4)
    # padded images within every size limit: 70 MiB from a few hundred KiB is refused as padding
    padded = zip_of({f"{i}.png": PNG + b"\x00" * (7 * 2**20) for i in range(10)})
    with pytest.raises(StudyError, match=r"would unpack to 70 MiB from 0\.\d MiB .* holds padding"):
        items_from_zip(padded, "padded.zip")
    # a member whose header lies about its size fails its check instead of unpacking without limit
    raw = bytearray(zip_of({"a.png": PNG + b"\x00" * 5000, "b.png": PNG, "c.png": PNG}))
    central = raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"PK\x01\x02")))
    raw[central + 24:central + 28] = (10).to_bytes(4, "little")  # declared uncompressed size of a.png
    with pytest.raises(StudyError, match="a.png"):
        items_from_zip(bytes(raw), "liar.zip")


def test_wrong_file_types_and_bad_configs_are_named(researcher_client):
    response = upload_study(researcher_client, b"MZ\x90\x00", "setup.exe")
    assert response.status_code == 400 and "must be a .zip" in response.get_data(as_text=True)
    response = upload_study(researcher_client, b"not a zip at all", "items.zip")
    assert "items.zip is not a ZIP archive" in response.get_data(as_text=True)
    response = upload_study(researcher_client, b"text\na\nb\nc\n", "t.csv",
                            config=(b"name: x\nwindow_size: 3\n", "c.yaml"))
    page = response.get_data(as_text=True)
    assert response.status_code == 400 and "c.yaml: unknown field(s) window_size" in page
    response = upload_study(researcher_client, b"text\na\nb\nc\n", "t.csv", name="")
    assert "field &#39;name&#39;" in response.get_data(as_text=True)
    response = upload_study(researcher_client, b"text\na\nb\nc\n", "t.csv", config=(b"name: [unclosed", "c.yaml"))
    assert "c.yaml is not valid YAML" in response.get_data(as_text=True)


def test_csv_errors_name_the_row():
    with pytest.raises(StudyError, match=r"t.csv, row 3: the 'text' cell is empty"):
        items_from_csv_bytes(b"text\nfine\n\"\"\nok\n", "t.csv")
    with pytest.raises(StudyError, match=r"t.csv, row 3: id 'a' is already used by row 2"):
        items_from_csv_bytes(b"id,text\na,one\na,two\n", "t.csv")
    with pytest.raises(StudyError, match="needs a header row with a 'text' column"):
        items_from_csv_bytes(b"words\none\n", "t.csv")
    with pytest.raises(StudyError, match="not UTF-8"):
        items_from_csv_bytes(b"text\n\xff\xfe\n", "t.csv")


def test_an_oversized_upload_is_refused_with_a_clear_message(researcher_client, app):
    app.config["UPLOAD_MAX_BYTES"] = 2048
    response = upload_study(researcher_client, zip_of({"a.png": PNG + np.random.default_rng(0).bytes(5000)}), "big.zip")
    assert response.status_code == 413
    assert "The upload is too large: at most" in response.get_data(as_text=True)


def test_uploads_above_the_app_wide_limit_reach_the_create_form(researcher_client, conn):
    # 64 KiB is the limit of every other request; the create form accepts far more
    big = zip_of({f"{i}.png": PNG + np.random.default_rng(i).bytes(40_000) for i in range(3)})
    assert len(big) > 64 * 1024
    response = upload_study(researcher_client, big, "big.zip")
    assert response.status_code == 302


# ---------------------------------------------------------------------- stats, raters, exclusion
def _answer_some(app, conn, study_id, raters=("r-good", "r-bad"), per_rater=6):
    for rater in raters:
        c = app.test_client()
        c.get(f"/s/{study_id}?rater={rater}")
        for _ in range(per_rater):
            q = fetch_question(c, study_id)
            assert answer(c, q, study_id=study_id, response_ms=1500).status_code == 201
        run_worker(conn)


def test_stats_json_has_histograms_latencies_and_active_raters(researcher_client, app, conn, study_id):
    _answer_some(app, conn, study_id)
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert stats["answers"] == 12 and stats["active_raters"] == 2
    hist = stats["response_ms"]["histogram"]
    assert len(hist["edges"]) == len(hist["counts"]) + 1 and sum(hist["counts"]) == 12
    assert stats["response_ms"]["recent_answers"] == 12
    assert stats["engine"]["latencies_ms"] and stats["engine"]["latency_ms_p95"] is not None
    assert set(stats["algorithms"][0]) >= {"share_certified", "progress", "pool_depth", "fallback_rate"}


def test_raters_table_uses_per_rater_counters_when_present(researcher_client, app, conn, study_id):
    _answer_some(app, conn, study_id)
    if hasattr(keys, "rater_stats"):
        conn.hset(keys.rater_stats(study_id), mapping={"r-bad:catch": 2, "r-bad:catch_failed": 2,
                                                       "r-bad:too_fast": 3, "r-bad:flagged": 1})
    rows = {r["rater"]: r for r in researcher_client.get(f"/api/studies/{study_id}/raters").get_json()["raters"]}
    assert rows["r-good"]["answers"] == 6 and rows["r-good"]["median_response_ms"] is not None
    assert not rows["r-good"]["flagged"] and not rows["r-good"]["excluded"]
    if hasattr(keys, "rater_stats"):
        assert rows["r-bad"]["flagged"] and rows["r-bad"]["catch_failed"] == 2
        assert rows["r-bad"]["too_fast_share"] == pytest.approx(0.5)


def test_excluding_a_rater_queues_a_rebuild_that_a_worker_runs(researcher_client, app, conn, study_id):
    _answer_some(app, conn, study_id)
    applied = conn.hget(keys.engine_stats(study_id), "answers_applied")
    response = researcher_client.post(f"/studies/{study_id}/raters/exclude", data={"rater": "r-bad"},
                                      follow_redirects=True)
    assert response.status_code == 200
    page = response.get_data(as_text=True)
    # the request only queued the job: nothing was replayed yet
    assert "Excluded rater r-bad: rebuild queued" in page and 'id="rebuild-status"' in page
    assert conn.sismember(keys.excluded_raters(study_id), "r-bad")
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert stats["rebuild"]["state"] == "queued" and "Rebuild queued" in stats["rebuild"]["message"]
    assert conn.hget(keys.engine_stats(study_id), "answers_applied") == applied
    # the same exclusion again queues nothing more
    again = researcher_client.post(f"/studies/{study_id}/raters/exclude", data={"rater": "r-bad"},
                                   follow_redirects=True)
    assert "already excluded" in again.get_data(as_text=True)

    assert run_worker(conn) == 1  # one rebuild job (its follow-up update is queued by the job)
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    rebuild = stats["rebuild"]
    assert rebuild["state"] == "finished", rebuild
    assert rebuild["answers_replayed"] == 6 and rebuild["answers_excluded"] == 6
    assert rebuild["excluded_raters"] == ["r-bad"] and "Rebuild finished" in rebuild["message"]
    rows = {r["rater"]: r for r in researcher_client.get(f"/api/studies/{study_id}/raters").get_json()["raters"]}
    assert rows["r-bad"]["excluded"] and not rows["r-good"]["excluded"]
    # the engine now holds the good rater's answers only
    run_worker(conn)
    algorithm = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()["algorithms"][0]
    assert algorithm["progress"]["answers"] == 6
    # the error curve (the colours have known positions) starts again from the rebuilt engine
    assert [x for x, _ in algorithm["truth_error"]["curve"]] == [6]
    page = researcher_client.get(f"/studies/{study_id}?tab=raters").get_data(as_text=True)
    assert "Rebuild finished at" in page


def test_a_second_exclusion_while_a_rebuild_waits_gets_its_own_job(researcher_client, app, conn, study_id):
    _answer_some(app, conn, study_id, raters=("r-1", "r-2", "r-3"), per_rater=3)
    researcher_client.post(f"/studies/{study_id}/raters/exclude", data={"rater": "r-1"})
    researcher_client.post(f"/studies/{study_id}/raters/exclude", data={"rater": "r-2"})
    assert run_worker(conn) == 2
    rebuild = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()["rebuild"]
    assert rebuild["state"] == "finished" and rebuild["excluded_raters"] == ["r-1", "r-2"]
    assert rebuild["answers_excluded"] == 6


# ---------------------------------------------------------------------- known truth: error against answers
def test_stats_carry_an_error_curve_against_answers_for_a_study_with_known_positions(researcher_client, app,
                                                                                       conn):
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Line", "algorithm": "anntri", "question_kind": "rating",
                                    "random_state": 3, "pool_size": 8})
    study_id = create_study(conn, config, colour_items(8), study_id="line")
    schedule_update(conn, study_id)
    run_worker(conn)
    first = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert first["study"]["truth_known"]
    error = first["algorithms"][0]["truth_error"]
    assert error["curve"] == [[0, error["share_wrong"]]] and error["answers_applied"] == 0
    rater = app.test_client()
    for _ in range(4):
        for _ in range(10):
            q = fetch_question(rater, study_id)
            i, j = (index_of(it) for it in q["items"])
            rater.post(f"/api/studies/{study_id}/answers",
                       json={"token": q["token"], "value": 5 - min(4, abs(i - j))})
        run_worker(conn)  # each update job records a point
        researcher_client.get(f"/api/studies/{study_id}/stats")  # polls record nothing
    error = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()["algorithms"][0]["truth_error"]
    xs = [x for x, _ in error["curve"]]
    assert xs == sorted(xs) and xs[0] == 0 and xs[-1] == error["answers_applied"] == 40
    assert len(error["curve"]) == 5
    assert all(0.0 <= y <= 1.0 for _, y in error["curve"])
    # the learned graph after 40 noiseless answers is better than the empty one
    assert error["curve"][-1][1] < error["curve"][0][1]
    # a poll without new answers adds nothing
    again = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()["algorithms"][0]["truth_error"]
    assert again["curve"] == error["curve"]
    page = researcher_client.get(f"/studies/{study_id}?tab=learning").get_data(as_text=True)
    assert 'class="plot error-plot"' in page


def _line_study(conn) -> str:
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Line", "algorithm": "anntri", "question_kind": "rating",
                                    "random_state": 3, "pool_size": 8})
    return create_study(conn, config, colour_items(8), study_id="line")


def _rate(rater, study_id: str, n: int) -> None:
    """``n`` noiseless ratings: items closer on the line are rated more alike."""
    for _ in range(n):
        q = fetch_question(rater, study_id)
        i, j = (index_of(it) for it in q["items"])
        assert rater.post(f"/api/studies/{study_id}/answers",
                          json={"token": q["token"], "value": 5 - min(4, abs(i - j))}).status_code == 201


def test_the_error_curve_grows_with_no_dashboard_open(app, conn):
    study_id = _line_study(conn)
    schedule_update(conn, study_id)
    run_worker(conn)
    rater = app.test_client()
    for _ in range(3):
        _rate(rater, study_id, 10)
        run_worker(conn)
    curve = json.loads(conn.hget(keys.engine_stats(study_id), TRUTH_ERROR_PREFIX + "anntri"))
    assert [x for x, _ in curve] == [0, 10, 20, 30]
    assert all(0.0 <= y <= 1.0 for _, y in curve)


def _study_keys_dumped(conn, study_id: str) -> dict[bytes, bytes]:
    return {key: conn.dump(key) for key in conn.scan_iter(match=keys.engine_stats(study_id).replace(
        "engine:stats", "*"), count=1000)}


def test_reading_a_studys_stats_writes_nothing(researcher_client, app, conn):
    study_id = _line_study(conn)
    before = _study_keys_dumped(conn, study_id)  # no pass yet: nothing known, and a read computes nothing
    assert researcher_client.get(f"/api/studies/{study_id}/stats").get_json()["algorithms"][0]["truth_error"] is None
    assert _study_keys_dumped(conn, study_id) == before
    schedule_update(conn, study_id)
    run_worker(conn)
    _rate(app.test_client(), study_id, 10)
    run_worker(conn)
    before = _study_keys_dumped(conn, study_id)
    assert keys.engine_stats(study_id).encode() in before
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert stats["study"]["truth_known"] and stats["algorithms"][0]["truth_error"]["answers_applied"] == 10
    for tab in ("overview", "learning"):
        assert researcher_client.get(f"/studies/{study_id}?tab={tab}").status_code == 200
    assert _study_keys_dumped(conn, study_id) == before


def test_a_study_without_positions_has_no_error_curve(researcher_client, conn):
    items = [Item(id=f"t{i}", kind="text", text=f"text {i}") for i in range(4)]
    study_id = create_study(conn, StudyConfig(name="Texts"), items, study_id="texts")
    stats = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()
    assert not stats["study"]["truth_known"] and stats["algorithms"][0]["truth_error"] is None
    assert "error-plot" not in researcher_client.get(f"/studies/{study_id}?tab=learning").get_data(as_text=True)


def test_forest_progress_has_depth_per_tree_next_to_nodes_built_and_pending(researcher_client, conn):
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Forest", "algorithm": "comparison_forest", "random_state": 0,
                                    "params": {"n_trees": 3}})
    study_id = create_study(conn, config, colour_items(12), study_id="forest")
    schedule_update(conn, study_id)
    run_worker(conn)
    progress = researcher_client.get(f"/api/studies/{study_id}/stats").get_json()["algorithms"][0]["progress"]
    assert len(progress["nodes_built"]) == len(progress["nodes_pending"]) == len(progress["depth"]) == 3


# ---------------------------------------------------------------------- graph layout (classical MDS)
def test_classical_mds_recovers_a_known_metric_and_its_neighbours():
    rng = np.random.default_rng(0)
    points = rng.normal(size=(30, 2))
    d = np.linalg.norm(points[:, None] - points[None], axis=-1)
    coords = classical_mds(d)
    d2 = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    np.testing.assert_allclose(d2, d, atol=1e-8)
    np.fill_diagonal(d, np.inf)
    np.fill_diagonal(d2, np.inf)
    assert (d.argmin(axis=1) == d2.argmin(axis=1)).all()


def test_unknown_distances_are_filled_from_bounds_then_the_largest_known():
    mean = np.array([[0, .2, 0], [.2, 0, 0], [0, 0, 0]], float)
    count = np.array([[0, 3, 0], [3, 0, 0], [0, 0, 0]])
    lower = np.array([[0, .1, .4], [.1, 0, 0], [.4, 0, 0]], float)
    upper = np.array([[0, .3, .6], [.3, 0, np.inf], [.6, np.inf, 0]], float)
    d = fill_distances(mean, count, lower, upper)
    assert d[0, 1] == pytest.approx(.2) and d[0, 2] == pytest.approx(.5) and d[1, 2] == pytest.approx(.5)
    assert (d == d.T).all() and (np.diag(d) == 0).all()


def test_graph_layout_route_places_items_and_lists_candidates_with_bounds(researcher_client, app, conn):
    items = [Item(id=f"p{i}", kind="color", color="#102030", position=(x,))
             for i, x in enumerate([0.0, 0.05, 1.0, 1.05, 2.0, 2.05])]
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Line", "algorithm": "anntri", "question_kind": "rating",
                                    "random_state": 1, "pool_size": 6})
    study_id = create_study(conn, config, items, study_id="line")
    run_worker(conn)
    rate_by_position(app.test_client(), conn, study_id, items, 120)
    layout = researcher_client.get(f"/api/studies/{study_id}/graph-layout?algorithm=anntri").get_json()
    assert layout["nodes"] == list(range(6)) and len(layout["positions"]) == 6
    assert all(0 <= x <= 1 and 0 <= y <= 1 for x, y in layout["positions"])
    assert layout["edges"] and {"from", "to", "certified"} <= set(layout["edges"][0])
    cands = layout["candidates"][0]
    assert cands and {"item", "estimate", "lower", "upper", "samples"} <= set(cands[0])
    assert sum(layout["samples_histogram"]["counts"]) == 6
    pos = np.array(layout["positions"])
    # pair-mates are drawn closer together than items of other pairs
    assert np.linalg.norm(pos[0] - pos[1]) < np.linalg.norm(pos[0] - pos[4])
    assert researcher_client.get(f"/api/studies/{study_id}/graph-layout?algorithm=nope").status_code == 404
    assert json.loads(researcher_client.get(f"/api/studies/{study_id}/graph-layout").data)["algorithm"] == "anntri"


def test_graph_layout_of_a_study_without_engine_state_yet(researcher_client, conn, study_id):
    layout = researcher_client.get(f"/api/studies/{study_id}/graph-layout").get_json()
    assert len(layout["positions"]) == 10 and layout["candidates"] == [[] for _ in range(10)]


def test_a_large_study_draws_at_most_max_drawn_items_the_busiest_ones(researcher_client, app, conn):
    items = [Item(id=f"p{i}", kind="color", color="#102030", position=(float(i),)) for i in range(1200)]
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Big", "algorithm": "anntri", "question_kind": "rating",
                                    "random_state": 1, "pool_size": 10})
    study_id = create_study(conn, config, items, study_id="big")
    schedule_update(conn, study_id)
    run_worker(conn)
    rater = app.test_client()
    asked = set()
    for _ in range(10):
        q = fetch_question(rater, study_id)
        asked.update(index_of(it) for it in q["items"])
        rater.post(f"/api/studies/{study_id}/answers", json={"token": q["token"], "value": 3})
    run_worker(conn)
    layout = researcher_client.get(f"/api/studies/{study_id}/graph-layout").get_json()
    assert MAX_DRAWN == 1000 and layout["n_items"] == 1200 and layout["max_drawn"] == MAX_DRAWN
    assert len(layout["nodes"]) == len(layout["positions"]) == len(layout["candidates"]) == MAX_DRAWN
    assert asked <= set(layout["nodes"])  # the items with answers are drawn first
    drawn = set(layout["nodes"])
    assert all(e["from"] in drawn and e["to"] in drawn for e in layout["edges"])
    assert len(layout["edges"]) + layout["edges_not_drawn"] <= 1200
    assert sum(layout["samples_histogram"]["counts"]) == 1200  # the histogram covers every item
    assert 'id="graph-cap"' in researcher_client.get(f"/studies/{study_id}?tab=learning").get_data(as_text=True)


# ---------------------------------------------------------------------- changing one's password
def test_a_researcher_changes_their_password_and_stays_logged_in(researcher_client, app, conn):
    assert 'id="password-form"' in researcher_client.get("/account").get_data(as_text=True)
    other = app.test_client()
    assert log_in(other).status_code == 302 and other.get("/").status_code == 200
    new = "a brand new long password"
    response = researcher_client.post("/account", data={"current_password": RESEARCHER_PASSWORD,
                                                        "new_password": new, "repeat_password": new},
                                      follow_redirects=True)
    assert response.status_code == 200 and "Your password is changed" in response.get_data(as_text=True)
    assert researcher_client.get("/").status_code == 200  # this session goes on
    assert other.get("/").status_code == 302  # the other session is logged out
    assert log_in(app.test_client(), password=RESEARCHER_PASSWORD).status_code == 401
    assert log_in(app.test_client(), password=new).status_code == 302


@pytest.mark.parametrize("current, new, repeat, message", [
    ("wrong password!", "a brand new long password", "a brand new long password", "current password is wrong"),
    (RESEARCHER_PASSWORD, "a brand new long password", "another new long password", "two new passwords differ"),
    (RESEARCHER_PASSWORD, "short", "short", "too weak"),
    (RESEARCHER_PASSWORD, RESEARCHER_PASSWORD, RESEARCHER_PASSWORD, "is the current one"),
])
def test_a_password_change_is_refused_with_the_reason(researcher_client, app, current, new, repeat, message):
    response = researcher_client.post("/account", data={"current_password": current, "new_password": new,
                                                        "repeat_password": repeat})
    assert response.status_code == 400 and message in response.get_data(as_text=True)
    assert log_in(app.test_client()).status_code == 302  # the old password still works


def test_a_password_change_needs_a_csrf_token_and_a_login(researcher_client, app):
    del researcher_client.environ_base["HTTP_X_CSRFTOKEN"]
    new = "a brand new long password"
    body = {"current_password": RESEARCHER_PASSWORD, "new_password": new, "repeat_password": new}
    assert researcher_client.post("/account", data=body).status_code == 400
    anonymous = app.test_client()
    assert anonymous.get("/account").status_code == 302
    assert anonymous.post("/account", data=body).status_code in (302, 400)
    assert log_in(app.test_client(), name=RESEARCHER).status_code == 302  # unchanged


def test_wrong_current_passwords_count_as_failed_logins(researcher_client, app):
    app.config["LOGIN_MAX_FAILURES"] = 2
    body = {"current_password": "wrong password!", "new_password": "x" * 12, "repeat_password": "x" * 12}
    assert researcher_client.post("/account", data=body).status_code == 400
    assert researcher_client.post("/account", data=body).status_code == 400
    blocked = researcher_client.post("/account", data={**body, "current_password": RESEARCHER_PASSWORD})
    assert blocked.status_code == 429 and "Too many wrong passwords" in blocked.get_data(as_text=True)
