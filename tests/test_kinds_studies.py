"""Odd-one-out and rank studies end to end in-process: question → answer (checked by the kind) → log with
the whole screen → RQ worker → the kind's planner → pool of whole screens → exports that load (cblearn
list-order triplets, the SPoSE/VICE layout with its item table); older log entries keep loading."""
from __future__ import annotations

import csv
import io
import json
import zipfile

import numpy as np
import pytest
from helpers import colour_items, fetch_question, index_of, post_answer, run_worker

from workers.jobs.learners import Learner
from workers.store import engine_state, keys
from workers.store.answers import Answer, export_triplets, read_answers
from workers.store.config import StudyConfig
from workers.store.questions import pooled_questions, repeat_question
from workers.store.raters import replay_rater_stats
from workers.store.studies import create_study

N = 16


def _create(conn, study_id, **config):
    base = {"name": study_id, "random_state": 0, "pool_size": 12, "attention": {"rate": 0}, "heldout_share": 0}
    return create_study(conn, StudyConfig.from_dict({**base, **config}), colour_items(N), study_id=study_id)


def _odd_pick(question):
    """A careful rater's odd one in a colour_items study (item i at position i): the item farthest from
    the other two."""
    idx = [index_of(i) for i in question["items"]]
    return max(idx, key=lambda x: sum(abs(x - y) for y in idx))


def _rank_picks(question):
    head = index_of(question["head"])
    return sorted((index_of(c) for c in question["candidates"]), key=lambda i: (abs(i - head), i))[
        : question["select"]]


def test_an_odd_one_out_study_learns_from_whole_screens_and_exports_them(client, researcher_client, conn):
    study = _create(conn, "odd", question_kind="odd_one_out")
    question = fetch_question(client, study)
    assert question["kind"] == "odd_one_out" and question["widget"] == "odd" and len(question["items"]) == 3
    assert "head" not in question and "odd one out" in question["prompt"]
    for n in range(30):
        response = post_answer(client, study, question, choice=_odd_pick(question), response_ms=2000)
        assert response.status_code == 201, response.get_json()
        question = response.get_json()["next"]
        if n % 10 == 9:
            run_worker(conn)
    run_worker(conn)
    log = read_answers(conn, study)
    assert len(log) == 30 and all(a.kind == "odd_one_out" and len(a.shown) == 3 and len(a.picks) == 1 for a in log)
    # the worker drives the engine's odd-one-out planner: it observed every answer and pooled whole screens
    config = StudyConfig.from_dict({"name": "odd", "question_kind": "odd_one_out"})
    learner = Learner.from_state(config.algorithms[0], config, engine_state.load(conn, study, "duels"))
    assert learner.progress()["answers"] == 30
    pool = pooled_questions(conn, study, "duels")
    assert pool and all(q["kind"] == "odd_one_out" and len(set(q["items"])) == 3 for q in pool)
    assert not any(q["fallback"] for q in pool)

    # the implied triplets in cblearn's list order (i closer to j than to k): two per answer, each (x; y, odd)
    # won by y (tests/test_cblearn_reads_exports.py has cblearn itself read such a file)
    text = researcher_client.get(f"/studies/{study}/export/triplets.csv").get_data(as_text=True)
    triplets = np.loadtxt(io.StringIO(text), delimiter=",", dtype=int, ndmin=2)
    assert triplets.shape[1] == 3 and all(len(set(row)) == 3 for row in triplets.tolist())
    assert len(triplets) == 60
    for a, rows in zip(log, triplets.reshape(30, 2, 3), strict=True):
        x, y = (i for i in a.shown if i != a.picks[0])
        assert sorted(map(tuple, rows.tolist())) == sorted([(x, y, a.picks[0]), (y, x, a.picks[0])])
    # the SPoSE/VICE layout: rows 'i j k', odd one last, 0-based; with the item table beside them
    spose = researcher_client.get(f"/studies/{study}/export/odd_one_out.txt").get_data(as_text=True)
    rows = np.loadtxt(io.StringIO(spose), dtype=int, ndmin=2)
    assert rows.shape == (30, 3) and (rows[:, 2] == [a.picks[0] for a in log]).all()
    assert all(sorted(r) == sorted(a.shown) for r, a in zip(rows.tolist(), log, strict=True))
    archive = zipfile.ZipFile(io.BytesIO(researcher_client.get(f"/studies/{study}/export/odd_one_out.zip").data))
    assert archive.read("triplets.txt").decode() == spose
    table = list(csv.DictReader(io.StringIO(archive.read("items.tsv").decode()), delimiter="\t"))
    assert [int(r["index"]) for r in table] == list(range(N)) and table[3]["id"] == "c3"
    # the raw answers keep the screen: every item in the order shown, the pick
    answers = list(csv.DictReader(io.StringIO(
        researcher_client.get(f"/studies/{study}/answers.csv").get_data(as_text=True))))
    assert [r["shown"] for r in answers] == [" ".join(map(str, a.shown)) for a in log]
    assert answers[0]["picks_ids"] == f"c{log[0].picks[0]}"
    jsonl = researcher_client.get(f"/studies/{study}/answers.jsonl").get_data(as_text=True).splitlines()
    assert json.loads(jsonl[0])["picks"] == str(log[0].picks[0])
    # the researcher watches it on the dashboard like any study
    for tab in ("overview", "learning", "raters", "settings", "downloads"):
        page = researcher_client.get(f"/studies/{study}?tab={tab}")
        assert page.status_code == 200, tab
    assert "<td>odd_one_out</td>" in researcher_client.get(f"/studies/{study}?tab=learning").get_data(as_text=True)
    stats = researcher_client.get(f"/api/studies/{study}/stats").get_json()
    assert stats["answers"] == 30 and stats["algorithms"][0]["question_kind"] == "odd_one_out"


def test_a_rank_study_takes_ordered_picks_and_refuses_bad_ones_in_words(client, researcher_client, conn):
    study = _create(conn, "grid", question_kind="rank", rank={"n_reference": 5, "n_select": 2})
    question = fetch_question(client, study)
    assert question["widget"] == "grid" and question["select"] == 2 and len(question["candidates"]) == 5
    offered = [index_of(c) for c in question["candidates"]]
    stray = next(i for i in range(N) if i not in offered and i != index_of(question["head"]))
    for body, code, words in [
        ({"picks": offered[:1]}, "choice_not_offered", "2 item indices"),
        ({"picks": [offered[0], stray]}, "item_not_shown", f"{stray!r} is not one this question offered"),
        ({"picks": [offered[0], offered[0]]}, "choice_not_offered", "once"),
        ({"picks": "1,2"}, "malformed_answer", "list"),
        ({"choice": offered[0], "picks": offered[:2]}, "malformed_answer", "either"),
    ]:
        response = post_answer(client, study, question, **body)
        assert response.status_code == 400, body
        error = response.get_json()["error"]
        assert error["code"] == code and words in error["message"], error
    picks = _rank_picks(question)
    response = post_answer(client, study, question, picks=picks, response_ms=4000)
    assert response.status_code == 201, response.get_json()
    for _ in range(19):
        question = response.get_json()["next"]
        response = post_answer(client, study, question, picks=_rank_picks(question), response_ms=4000)
        assert response.status_code == 201
    run_worker(conn)
    log = read_answers(conn, study)
    assert len(log) == 20 and list(log[0].picks) == picks and len(log[0].shown) == 6
    # 5-rank-2: 1 + 2 x 3 triplets per screen
    rows = [line for line in "".join(export_triplets(log)).splitlines() if line]
    assert len(rows) == 20 * 7
    pool = pooled_questions(conn, study, "duels")
    assert pool and all(len(q["candidates"]) == 5 and q["select"] == 2 and q["head"] not in q["candidates"]
                        for q in pool)


def test_each_kind_has_its_own_too_fast_threshold(client, conn):
    odd = _create(conn, "odd", question_kind="odd_one_out")
    triplets = _create(conn, "trip", algorithms=[{"algorithm": "random_triplets"}])
    question = fetch_question(client, odd)
    assert post_answer(client, odd, question, choice=question["items"][0]["handle"], response_ms=10).status_code == 201
    question = fetch_question(client, triplets)
    assert post_answer(client, triplets, question, choice=question["candidates"][0]["handle"],
                 response_ms=10).status_code == 201
    assert "too_fast" in read_answers(conn, odd)[0].flags  # 750 ms for three pairs to compare
    assert "too_fast" not in read_answers(conn, triplets)[0].flags  # triplets: none unless a study sets one


def test_log_entries_written_before_screens_were_kept_still_load(conn):
    """A triplet and a rating answer as the log held them before ``shown``/``picks`` existed."""
    old = {"qid": "q1", "rater": "r", "kind": "triplet", "head": 3, "a": 4, "b": 9, "choice": 9, "value": "",
           "probe": "", "algorithm": "duels", "fallback": 0, "issued_at": "1.0", "answered_at": "2.0",
           "response_ms": "", "flags": ""}
    rating = {**old, "qid": "q2", "kind": "rating", "b": -1, "choice": -1, "value": "4.0"}
    conn.xadd(keys.answers("old"), old)
    conn.xadd(keys.answers("old"), rating)
    triplet, rated = read_answers(conn, "old")
    assert triplet.shown == (3, 4, 9) and triplet.picks == (9,) and triplet.triplets() == [(3, 4, 9, 9)]
    assert triplet.question()["candidates"] == [4, 9] and "select" not in triplet.question()
    assert rated.shown == (3, 4) and rated.picks == () and rated.triplets() == []
    assert "".join(export_triplets([triplet, rated])) == "3,9,4\n"


@pytest.mark.parametrize("kind", ["odd_one_out", "rank"])
def test_repeats_and_catch_trials_of_screens_replay_as_they_were_judged(conn, kind):
    """A validation repeat shows the same items in another order and agrees when the first pick is the
    same; a restore judges a catch trial from the items alone (the like pair by known positions)."""
    config = StudyConfig.from_dict({"name": "s", "question_kind": kind, "rank": {"n_reference": 4, "n_select": 1},
                                    "attention": {"validation_repeats": 2}})
    screen = ({"qid": "q", "kind": kind, "items": [2, 3, 12]} if kind == "odd_one_out"
              else {"qid": "q", "kind": kind, "head": 2, "candidates": [12, 3, 14, 0], "select": 1})
    first = 12 if kind == "odd_one_out" else 3
    again = repeat_question(screen, first)
    shown = ([*again["items"]] if kind == "odd_one_out" else [again["head"], *again["candidates"]])
    original = screen.get("items") or [screen["head"], *screen["candidates"]]
    assert again["qid"].startswith("v") and shown != original and sorted(shown) == sorted(original)
    items = [{"id": f"c{i}", "position": [float(i)]} for i in range(N)]

    def logged(n, algorithm, shown, pick):
        return Answer(id=f"{n}-0", qid=f"q{n}", rater="r", kind=kind, head=shown[0], a=shown[1], b=shown[2],
                      choice=pick, algorithm=algorithm, fallback=False, issued_at=0.0, answered_at=10.0 + n,
                      response_ms=5000, shown=tuple(shown), picks=(pick,))

    log = [logged(1, "duels", original, first), logged(2, "repeat", shown, first),
           logged(3, "catch", original, first), logged(4, "catch", original, 14 if kind == "rank" else 2)]
    flags, _ = replay_rater_stats(log, config, items)
    assert flags["2-0"] == "repeat_agree"
    assert flags["3-0"] == "catch_pass" and flags["4-0"] == "catch_fail"


def _texts_csv(n: int = 12) -> bytes:
    return ("id,text\n" + "".join(f"t{i},Item number {i}\n" for i in range(n))).encode()


def test_the_new_study_form_asks_any_kind_with_a_grids_size_and_warns_of_weak_learners(researcher_client, conn):
    from workers.store.studies import get_study, list_studies

    form = researcher_client.get("/studies/new").get_data(as_text=True)
    for kind in ("triplet", "rating", "odd_one_out", "rank"):
        assert f'<option value="{kind}"' in form
    assert 'name="rank:n_reference"' in form and 'name="rank:n_select"' in form
    assert "loses to random questions" in form  # anntri, ann and random carry the table's warning
    response = researcher_client.post("/studies/new", data={
        "name": "Grid", "question_kind": "rank", "rank:n_reference": "6", "rank:n_select": "1",
        "items": (io.BytesIO(_texts_csv()), "items.csv")}, content_type="multipart/form-data", follow_redirects=True)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    study = get_study(conn, next(s.id for s in list_studies(conn) if s.config.name == "Grid"))
    assert study.config.question_kind == "rank" and study.config.settings_of("rank") == {"n_reference": 6,
                                                                                          "n_select": 1}
    response = researcher_client.post("/studies/new", data={
        "name": "Weak", "algorithm": "anntri", "question_kind": "triplet",
        "items": (io.BytesIO(_texts_csv()), "items.csv")}, content_type="multipart/form-data", follow_redirects=True)
    page = response.get_data(as_text=True)
    assert "anntri in a triplet study: In triplet studies" in page and "loses to random questions" in page
    # the settings offer the triplet prompt only to a study that asks triplets
    weak = next(s.id for s in list_studies(conn) if s.config.name == "Weak")
    assert 'id="settings-question"' in researcher_client.get(f"/studies/{weak}?tab=settings").get_data(as_text=True)
    settings = researcher_client.get(f"/studies/{study.id}?tab=settings").get_data(as_text=True)
    assert 'id="settings-question"' not in settings and 'placeholder="' in settings
    # a grid larger than the items is refused in words
    response = researcher_client.post("/studies/new", data={
        "name": "Too big", "question_kind": "rank", "rank:n_reference": "12",
        "items": (io.BytesIO(_texts_csv(8)), "items.csv")}, content_type="multipart/form-data")
    assert response.status_code == 400 and "shows 13 items, but the study has only 8" in response.get_data(as_text=True)


def test_proxima_create_warns_of_a_learner_that_loses_to_random_questions(conn, redis_url, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from webapp.cli import main as cli

    monkeypatch.setenv("REDIS_URL", redis_url)
    (tmp_path / "items.csv").write_bytes(_texts_csv())
    (tmp_path / "study.yaml").write_text("name: Weak\nalgorithm: anntri\nquestion_kind: triplet\n")
    result = CliRunner().invoke(cli, ["create", str(tmp_path / "study.yaml"), "--items", str(tmp_path / "items.csv"),
                                      "--id", "weak"])
    assert result.exit_code == 0, result.output
    assert "Warning: anntri in a triplet study: In triplet studies" in result.output
    assert "loses to random questions" in result.output
    (tmp_path / "odd.yaml").write_text("name: Odd\nquestion_kind: odd_one_out\n")
    result = CliRunner().invoke(cli, ["create", str(tmp_path / "odd.yaml"), "--items", str(tmp_path / "items.csv"),
                                      "--id", "odd"])
    assert result.exit_code == 0 and "loses to random" not in result.output
