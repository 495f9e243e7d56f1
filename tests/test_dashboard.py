"""The researcher dashboard: study lifecycle, creating studies from uploads, settings while a study
runs, excluding raters, the stats/raters/graph-layout JSON and the MDS layout of the learned graph."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from conftest import answer, fetch_question, run_worker

from workers import keys
from workers.config import ConfigError, StudyConfig
from workers.layout import classical_mds, fill_distances
from workers.studies import Item, StudyError, create_study, get_study, update_config
from workers.uploads import items_from_csv_bytes, items_from_zip

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32


def make_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def create(client, items: bytes, filename: str, config: tuple[bytes, str] | None = None, **fields):
    data = {"name": "Uploaded", "algorithm": "random_triplets", "question_kind": "triplet", "start": "1",
            "items": (io.BytesIO(items), filename), **fields}
    if config:
        data["config_file"] = (io.BytesIO(config[0]), config[1])
    return client.post("/studies/new", data=data, content_type="multipart/form-data")


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


# ---------------------------------------------------------------------- create from uploads
def test_create_a_study_from_a_zip_of_images(researcher_client, conn):
    archive = make_zip({"cats/a.png": PNG, "cats/b.jpg": JPEG, "c.png": PNG, "__MACOSX/._c.png": b"junk"})
    response = create(researcher_client, archive, "pets.zip")
    assert response.status_code == 302, response.get_data(as_text=True)
    study_id = response.headers["Location"].rsplit("/", 1)[1]
    study = get_study(conn, study_id)
    assert study.n_items == 3 and study.status == "running"
    assert "Uploaded" in researcher_client.get("/").get_data(as_text=True)
    assert researcher_client.get(f"/media/{study_id}/2").data == JPEG  # sorted by path: c, cats/a, cats/b


def test_create_a_paused_study_from_a_csv_with_labels(researcher_client, conn):
    csv_bytes = b"id,text,label\nx,red apple,fruit\ny,green pear,fruit\nz,blue car,vehicle\n"
    response = create(researcher_client, csv_bytes, "texts.csv", start="")
    assert response.status_code == 302
    study = get_study(conn, response.headers["Location"].rsplit("/", 1)[1])
    assert study.status == "paused"
    from workers.studies import get_items
    assert [(i.id, i.label) for i in get_items(conn, study.id)] == [("x", "fruit"), ("y", "fruit"),
                                                                     ("z", "vehicle")]


def test_create_from_an_uploaded_yaml_config(researcher_client, conn):
    yaml_text = b"name: From YAML\nalgorithm: anntri\nquestion_kind: rating\n"
    response = create(researcher_client, b"text\none\ntwo\nthree\nfour\n", "t.csv", config=(yaml_text, "study.yaml"))
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
    response = create(researcher_client, make_zip(members), "items.zip")
    assert response.status_code == 400
    assert message in response.get_data(as_text=True).replace("&#39;", "'")
    assert not conn.smembers(keys.studies())


def test_zip_bombs_are_refused_before_anything_is_decompressed():
    bomb = make_zip({f"{i}.png": PNG + b"\x00" * 100_000 for i in range(5)})
    assert len(bomb) < 5000
    with pytest.raises(StudyError, match="would unpack to"):
        items_from_zip(bomb, "bomb.zip", max_total_bytes=200_000)
    with pytest.raises(StudyError, match="holds 5 entries; at most 4"):
        items_from_zip(bomb, "bomb.zip", max_members=4)
    # a member whose header lies about its size fails its check instead of unpacking without limit
    raw = bytearray(make_zip({"a.png": PNG + b"\x00" * 5000, "b.png": PNG, "c.png": PNG}))
    central = raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"PK\x01\x02", 0, raw.rfind(b"PK\x01\x02")))
    raw[central + 24:central + 28] = (10).to_bytes(4, "little")  # declared uncompressed size of a.png
    with pytest.raises(StudyError, match="a.png"):
        items_from_zip(bytes(raw), "liar.zip")


def test_wrong_file_types_and_bad_configs_are_named(researcher_client):
    response = create(researcher_client, b"MZ\x90\x00", "setup.exe")
    assert response.status_code == 400 and "must be a .zip" in response.get_data(as_text=True)
    response = create(researcher_client, b"not a zip at all", "items.zip")
    assert "items.zip is not a ZIP archive" in response.get_data(as_text=True)
    response = create(researcher_client, b"text\na\nb\nc\n", "t.csv", config=(b"name: x\nwindow_size: 3\n", "c.yaml"))
    page = response.get_data(as_text=True)
    assert response.status_code == 400 and "c.yaml: unknown field(s) window_size" in page
    response = create(researcher_client, b"text\na\nb\nc\n", "t.csv", name="")
    assert "field &#39;name&#39;" in response.get_data(as_text=True)
    response = create(researcher_client, b"text\na\nb\nc\n", "t.csv", config=(b"name: [unclosed", "c.yaml"))
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
    response = create(researcher_client, make_zip({"a.png": PNG + np.random.default_rng(0).bytes(5000)}), "big.zip")
    assert response.status_code == 413
    assert "The upload is too large: at most" in response.get_data(as_text=True)


def test_uploads_above_the_app_wide_limit_reach_the_create_form(researcher_client, conn):
    # 64 KiB is the limit of every other request; the create form accepts far more
    big = make_zip({f"{i}.png": PNG + np.random.default_rng(i).bytes(40_000) for i in range(3)})
    assert len(big) > 64 * 1024
    response = create(researcher_client, big, "big.zip")
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


def test_excluding_a_rater_rebuilds_the_engines_without_them(researcher_client, app, conn, study_id, monkeypatch):
    _answer_some(app, conn, study_id)
    import workers.rebuild

    calls = []
    real = workers.rebuild.rebuild_study
    monkeypatch.setattr(workers.rebuild, "rebuild_study",
                        lambda conn, sid, exclude_raters=(): calls.append((sid, list(exclude_raters)))
                        or real(conn, sid, exclude_raters=exclude_raters))
    response = researcher_client.post(f"/studies/{study_id}/raters/exclude", data={"rater": "r-bad"},
                                      follow_redirects=True)
    assert response.status_code == 200
    assert calls == [(study_id, ["r-bad"])]
    assert "Excluded rater r-bad" in response.get_data(as_text=True)
    assert conn.sismember(keys.excluded_raters(study_id), "r-bad")
    rows = {r["rater"]: r for r in researcher_client.get(f"/api/studies/{study_id}/raters").get_json()["raters"]}
    assert rows["r-bad"]["excluded"] and not rows["r-good"]["excluded"]


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
    config = StudyConfig.from_dict({"name": "Line", "algorithm": "anntri", "question_kind": "rating",
                                    "random_state": 1, "pool_size": 6})
    study_id = create_study(conn, config, items, study_id="line")
    run_worker(conn)
    rater = app.test_client()
    truth = [x.position[0] for x in items]
    for _ in range(120):
        response = rater.get(f"/api/studies/{study_id}/questions/next")
        if response.status_code != 200:
            break
        q = response.get_json()["question"]
        i, j = (it["index"] for it in q["items"])
        value = round(5 - 4 * abs(truth[i] - truth[j]) / 2.05)
        rater.post(f"/api/studies/{study_id}/answers", json={"token": q["token"], "value": value})
        run_worker(conn)
    layout = researcher_client.get(f"/api/studies/{study_id}/graph-layout?algorithm=anntri").get_json()
    assert len(layout["positions"]) == 6
    assert all(0 <= x <= 1 and 0 <= y <= 1 for x, y in layout["positions"])
    assert layout["edges"] and {"from", "to", "certified"} <= set(layout["edges"][0])
    cands = layout["candidates"][0]
    assert cands and {"item", "estimate", "lower", "upper", "samples"} <= set(cands[0])
    assert sum(layout["samples_per_item"]) > 0
    pos = np.array(layout["positions"])
    # pair-mates are drawn closer together than items of other pairs
    assert np.linalg.norm(pos[0] - pos[1]) < np.linalg.norm(pos[0] - pos[4])
    assert researcher_client.get(f"/api/studies/{study_id}/graph-layout?algorithm=nope").status_code == 404
    assert json.loads(researcher_client.get(f"/api/studies/{study_id}/graph-layout").data)["algorithm"] == "anntri"


def test_graph_layout_of_a_study_without_engine_state_yet(researcher_client, conn, study_id):
    layout = researcher_client.get(f"/api/studies/{study_id}/graph-layout").get_json()
    assert len(layout["positions"]) == 10 and layout["candidates"] == [[] for _ in range(10)]
