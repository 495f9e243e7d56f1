"""Every learner's fitted embedding is exported, not only the embedding learners': candidate duels (the
default learner) fits one to pick its shortlists, and the CLI, the API (so the client), the Downloads tab and
the data package give it with its dimension and a fit quality computed on the learner's own answers."""
from __future__ import annotations

import csv
import io
import json
import re

import numpy as np
import pytest
import redis
from helpers import (
    LOOPBACK,
    SECRET,
    answer,
    dump_redis,
    fetch_question,
    index_of,
    positioned_study,
    restore_redis,
    run_worker,
)

from webapp import create_app
from workers.results.exports import ExportError, embedding_document, export
from workers.store.answers import read_answers

STUDY = "duelmap"
#: 12 items on a line: item i at position POSITIONS[i]
POSITIONS = [0.0, 1.0, 2.5, 3.0, 5.0, 6.5, 7.0, 9.0, 10.5, 11.0, 13.0, 14.5]


def answer_truthfully(app, conn, study_id: str, n: int, raters: int = 6) -> None:
    """About ``n`` answers through the rater pages, each picking the candidate nearer the head."""
    for r in range(raters):
        client = app.test_client()
        page = client.get(f"/s/{study_id}?PROLIFIC_PID=p{r}&STUDY_ID=s&SESSION_ID=p{r}").get_data(as_text=True)
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', page)
        if csrf:  # a consent page first
            client.post(f"/s/{study_id}/consent", data={"decision": "agree", "csrf_token": csrf.group(1)})
        question = fetch_question(client, study_id)
        for i in range(n // raters):
            head = index_of(question["head"])
            nearer = min((index_of(c) for c in question["candidates"]),
                         key=lambda c: abs(POSITIONS[c] - POSITIONS[head]))
            question = answer(client, question, nearer, study_id=study_id).get_json().get("next")
            if i % 10 == 9:
                run_worker(conn)
            if not question:
                break
        run_worker(conn)


@pytest.fixture(scope="module")
def answered_once(redis_url, tmp_path_factory):
    """Redis holding the duels study answered truthfully (360 answers through the rater pages), built once
    for the module: its tests only read the study."""
    conn = redis.Redis.from_url(redis_url)
    conn.flushall()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path_factory.mktemp("duelmap") / "instance"))
        app = create_app({"TESTING": True, "REDIS_URL": redis_url, "SECRET_KEY": SECRET,
                          "RATE_LIMIT_EXEMPT_ADDRESSES": LOOPBACK})
        positioned_study(conn, STUDY, POSITIONS, random_state=4, pool_size=20,
                         algorithms=[{"algorithm": "duels", "share": 3}, {"algorithm": "random_triplets", "share": 1}])
        answer_truthfully(app, conn, STUDY, 360)
    dumped = dump_redis(conn)
    conn.flushall()
    conn.close()
    return dumped


@pytest.fixture
def duels_study(conn, answered_once):
    restore_redis(conn, answered_once)
    return STUDY


def test_the_default_learners_embedding_is_exported_with_its_dimension_and_an_honest_fit_quality(conn, duels_study):
    doc = embedding_document(conn, duels_study, "duels")
    assert doc["method"] == "duels" and len(doc["items"]) == len(POSITIONS) == len(doc["coordinates"])
    assert doc["dim"] >= 1 and all(len(row) == doc["dim"] for row in doc["coordinates"])
    # the fit quality, computed here again from the log: duels' own answers, as triplets
    X = np.asarray(doc["coordinates"])
    own = [(h, w, y if w == x else x) for a in read_answers(conn, duels_study) if a.algorithm == "duels"
           for h, x, y, w in a.triplets()]
    t = np.asarray(own)
    right = np.sum((X[t[:, 0]] - X[t[:, 1]]) ** 2, axis=1) < np.sum((X[t[:, 0]] - X[t[:, 2]]) ** 2, axis=1)
    quality = doc["fit_quality"]
    assert quality["triplets"] == len(own) > 100
    assert quality["share_predicted"] == round(float(right.mean()), 4) > 0.8  # truthful answers on a line
    assert quality["in_sample"] is True
    # the default embedding (no --algorithm) is the first learner's that has one
    assert embedding_document(conn, duels_study)["algorithm"] == "duels"


def test_a_learner_without_an_embedding_says_so(conn, duels_study):
    with pytest.raises(ExportError, match=r"'random_triplets' \(random_triplets\) has no fitted embedding"):
        embedding_document(conn, duels_study, "random_triplets")


def test_the_cli_exports_it_and_says_its_dimension_and_fit(cli, conn, duels_study):
    result = cli("export", duels_study, "--what", "embedding", "--algorithm", "duels")
    assert result.exit_code == 0, result.output
    rows = list(csv.reader(io.StringIO(result.stdout)))
    dim = json.loads("".join(export(conn, duels_study, "embedding", "json", "duels").chunks))["dim"]
    assert rows[0] == ["item", *(f"x{d + 1}" for d in range(dim))] and len(rows) == 1 + len(POSITIONS)
    assert f"Embedding of 'duels' (duels): {dim} dimension(s); places" in result.stderr
    assert "in-sample" in result.stderr


def test_the_api_downloads_tab_and_package_offer_it(conn, duels_study, researcher_client, tmp_path):
    from workers.results.package import write_package_folder

    page = researcher_client.get(f"/studies/{duels_study}?tab=downloads").get_data(as_text=True)
    assert f'class="embedding-link" href="/studies/{duels_study}/export/embedding.csv?algorithm=duels"' in page
    assert page.count('class="embedding-link"') == 1  # random triplets fits none
    got = researcher_client.get(f"/api/studies/{duels_study}/export/embedding", query_string={"format": "json"})
    assert got.status_code == 200 and got.get_json()["algorithm"] == "duels"

    descriptor = write_package_folder(conn, duels_study, tmp_path / "pkg")
    learners = {e["label"]: e for e in descriptor["proxima"]["learners"]}
    assert learners["duels"]["embedding"] == "embeddings/duels.json"
    assert learners["duels"]["embedding_dim"] == got.get_json()["dim"]
    assert learners["duels"]["embedding_fit"] == got.get_json()["fit_quality"]["share_predicted"]
    assert "embedding" not in learners["random_triplets"] and learners["random_triplets"]["embedding_missing"]
    assert descriptor["proxima"]["defaults"]["embedding"] == "duels"
    assert (tmp_path / "pkg" / "embeddings" / "duels.csv").exists()

    import proxima

    package = proxima.read_export(tmp_path / "pkg")
    assert package.embedding().shape == (len(POSITIONS), got.get_json()["dim"])


def test_the_downloads_tab_loads_no_learner_larger_than_the_probe_bound(conn, study_id, monkeypatch):
    from helpers import colour_items

    from workers.results import exports
    from workers.store.config import StudyConfig
    from workers.store.studies import create_study

    assert exports.embedding_labels(conn, study_id) == []  # random triplets: its entry fits no coordinates
    duels = create_study(conn, StudyConfig(name="Duels"), colour_items(), study_id="duels-study")
    assert exports.embedding_labels(conn, duels) == []  # loaded: no fit yet
    loaded = []
    monkeypatch.setattr(exports, "_load", lambda *args: loaded.append(args) or pytest.fail("loaded a learner"))
    monkeypatch.setattr(exports, "PROBE_BYTES", 0)  # every learner "too large" to load in a web process
    # offered unloaded where the entry fits coordinates (its download says whether it has them), never elsewhere
    assert exports.embedding_labels(conn, duels) == ["duels"] and not loaded
    assert exports.embedding_labels(conn, study_id) == [] and not loaded
