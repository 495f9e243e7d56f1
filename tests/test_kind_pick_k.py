"""The pick_k question kind (a head and n references, pick the k most similar in any order: Wilber et al.'s
grid, HCOMP 2014) through the platform: its config section, the screen served with its widget, answers
checked in words and kept in the log, the update job feeding the learner picked-vs-unpicked triplets, the
triplets export, catch trials, validation repeats, its simulated rater and its screen planner."""
from __future__ import annotations

import io

import numpy as np
import pytest
from helpers import colour_items, fetch_question, index_of, post_answer, run_worker, shared_data_file
from scipy.spatial.distance import cdist

from engine.implied_triplets import pick_triplets
from engine.kinds import AnswerError, get_kind
from engine.planners import make_planner, restore_planner
from engine.screens import PickScreens
from simulation.datasets import load_food100
from workers.jobs.learners import Learner
from workers.store import engine_state
from workers.store.answers import Answer, export_triplets, read_answers
from workers.store.config import StudyConfig
from workers.store.questions import pooled_questions, repeat_question
from workers.store.raters import replay_rater_stats
from workers.store.studies import create_study

N = 16
KIND = get_kind("pick_k")


def _config(study_id: str, **config) -> StudyConfig:
    base = {"name": study_id, "random_state": 0, "pool_size": 12, "attention": {"rate": 0}, "heldout_share": 0,
            "question_kind": "pick_k", "pick_k": {"n_reference": 5, "n_select": 2}}
    return StudyConfig.from_dict({**base, **config})


def _nearest(question) -> list[int]:
    """A careful rater's picks in a colour_items study (item i at position i): the k references nearest the
    head, listed farthest first, so the order sent is not the order of likeness."""
    head = index_of(question["head"])
    near = sorted((index_of(c) for c in question["candidates"]), key=lambda i: (abs(i - head), i))
    return near[: question["select"]][::-1]


# ------------------------------------------------------------------------------------------ the entry
def test_the_config_takes_a_pick_k_section_and_refuses_bad_sizes_in_words():
    config = _config("p")
    assert config.settings_of(KIND) == {"n_reference": 5, "n_select": 2}
    assert StudyConfig.from_dict({"name": "p", "question_kind": "pick_k"}).settings_of(KIND) == \
        {"n_reference": 8, "n_select": 2}
    with pytest.raises(ValueError, match=r"'pick_k.n_select' \(5\) must be smaller than 'pick_k.n_reference'"):
        _config("p", pick_k={"n_reference": 5, "n_select": 5})
    with pytest.raises(ValueError, match="n_reference"):
        _config("p", pick_k={"n_reference": 13, "n_select": 2})


def test_an_answer_implies_each_pick_over_each_unpicked_reference_and_nothing_between_picks():
    shown = [0, 5, 6, 7, 8, 9]
    rows = KIND.triplets(shown, (6, 9))
    assert sorted(rows) == sorted([(0, s, x, s) for s in (6, 9) for x in (5, 7, 8)])
    assert KIND.triplets(shown, (9, 6)) == pick_triplets(0, shown[1:], (9, 6))
    assert len(rows) == 2 * (5 - 2)
    assert not any({t[1], t[2]} == {6, 9} for t in rows)  # no triplet between the two picks


def test_answers_are_checked_as_an_unordered_set_of_k_distinct_references():
    screen = KIND.screen((0, (5, 6, 7, 8, 9)), {"n_reference": 5, "n_select": 2})
    assert screen == {"kind": "pick_k", "head": 0, "candidates": [5, 6, 7, 8, 9], "select": 2}
    assert KIND.check_answer(screen, [9, 6], None) == KIND.check_answer(screen, [6, 9], None) == (6, 9)
    for picks, words in [([6], "2 item indices most like the one on top, in any order; got 1"),
                         ([6, 7, 8], "got 3"), ([6, 1], "pick 1 was not one of the offered items"),
                         ([6, 6], "each item can be picked once"), (None, "got 0")]:
        with pytest.raises(AnswerError, match=words):
            KIND.check_answer(screen, picks, None)


# ------------------------------------------------------------------------------------------ a study
def test_a_pick_k_study_serves_grids_takes_picks_in_any_order_and_learns_from_them(client, researcher_client,
                                                                                    conn):
    study = create_study(conn, _config("pk"), colour_items(N), study_id="pk")
    question = fetch_question(client, study)
    assert question["kind"] == "pick_k" and question["widget"] == "choose" and question["select"] == 2
    assert len(question["candidates"]) == 5 and question["prompt"] == \
        "Pick the 2 most similar to the one on top (in any order)."
    offered = [index_of(c) for c in question["candidates"]]
    stray = next(i for i in range(N) if i not in offered and i != index_of(question["head"]))
    for body, code, words in [
        ({"picks": offered[:1]}, "choice_not_offered", "2 item indices most like the one on top, in any order"),
        ({"picks": offered[:3]}, "choice_not_offered", "got 3"),
        ({"picks": [offered[0], stray]}, "item_not_shown", f"{stray!r} is not one this question offered"),
        ({"picks": [offered[0], offered[0]]}, "choice_not_offered", "once"),
        ({"picks": "1,2"}, "malformed_answer", "list"),
    ]:
        response = post_answer(client, study, question, **body)
        assert response.status_code == 400, body
        error = response.get_json()["error"]
        assert error["code"] == code and words in error["message"], error
    sent = []
    for _ in range(20):
        picks = _nearest(question)
        sent.append(([index_of(question["head"]), *(index_of(c) for c in question["candidates"])], sorted(picks)))
        response = post_answer(client, study, question, picks=picks, response_ms=5000)
        assert response.status_code == 201, response.get_json()
        question = response.get_json()["next"]
    run_worker(conn)
    log = read_answers(conn, study)
    # every answer kept once, with the whole screen and its picks (as a set: in item order)
    assert [(list(a.shown), list(a.picks)) for a in log] == sent
    assert all(a.kind == "pick_k" for a in log)
    # answered the instant each grid was served: under the kind's too-fast threshold for 5 and 2 (1.2 s)
    assert KIND.too_fast({"n_reference": 5, "n_select": 2}) == 1162
    assert {a.flags for a in log} == {"too_fast"}
    # the update job fed the learner through the pick_k screen planner: 2 x 3 triplets per answer
    config = _config("pk")
    learner = Learner.from_state(config.algorithms[0], config, engine_state.load(conn, study, "duels"))
    assert learner.progress()["answers"] == 20 and learner.progress()["triplets"] == 20 * 6
    pool = pooled_questions(conn, study, "duels")
    assert pool and all(q["kind"] == "pick_k" and len(q["candidates"]) == 5 and q["select"] == 2
                        and q["head"] not in q["candidates"] for q in pool)
    # the export: picked over unpicked (i closer to j than to k), none between the two picks
    text = researcher_client.get(f"/studies/{study}/export/triplets.csv").get_data(as_text=True)
    rows = np.loadtxt(io.StringIO(text), delimiter=",", dtype=int, ndmin=2)
    assert rows.shape == (20 * 6, 3)
    for a, block in zip(log, rows.reshape(20, 6, 3).tolist(), strict=True):
        unpicked = [x for x in a.shown[1:] if x not in a.picks]
        assert sorted(map(tuple, block)) == sorted((a.shown[0], s, x) for s in a.picks for x in unpicked)
    assert "".join(export_triplets(log)) == text
    # the rater page carries the kind's widget
    page = client.application.test_client().get(f"/s/{study}?PROLIFIC_PID=p-1").get_data(as_text=True)
    assert 'id="choose"' in page and "js/widgets/choose.js" in page


def test_catch_trials_of_a_pick_k_study_pass_a_careful_rater_and_fail_a_careless_one(client, conn):
    study = create_study(conn, _config("pkc", attention={"rate": 0.3, "answer_check": False}),
                         colour_items(N), study_id="pkc")
    for rater, careful in (("careful", True), ("careless", False)):
        rater_client = client.application.test_client()
        rater_client.get(f"/s/{study}?PROLIFIC_PID={rater}")
        question = fetch_question(rater_client, study)
        for _ in range(20):
            picks = _nearest(question)
            if not careful:  # the two references farthest from the head
                head = index_of(question["head"])
                picks = sorted((index_of(c) for c in question["candidates"]), key=lambda i: -abs(i - head))[:2]
            response = post_answer(rater_client, study, question, picks=picks, response_ms=5000)
            assert response.status_code == 201, response.get_json()
            question = response.get_json()["next"]
    log = read_answers(conn, study)
    catches = {r: [a for a in log if a.rater.endswith(r) and a.algorithm == "catch"] for r in ("careful", "careless")}
    assert catches["careful"] and all("catch_pass" in a.flags for a in catches["careful"])
    assert catches["careless"] and all("catch_fail" in a.flags for a in catches["careless"])
    # a catch screen is an ordinary grid: one reference like the head, the others unlike it
    assert all(len(a.shown) == 6 and len(a.picks) == 2 for a in catches["careful"])


def test_a_repeat_shuffles_the_grid_and_agrees_on_the_same_set_and_a_restore_judges_catches_alike():
    config = StudyConfig.from_dict({"name": "s", "question_kind": "pick_k",
                                    "pick_k": {"n_reference": 4, "n_select": 2},
                                    "attention": {"validation_repeats": 2}})
    screen = {"qid": "q", "kind": "pick_k", "head": 2, "candidates": [12, 3, 14, 1], "select": 2}
    picks = KIND.check_answer(screen, [3, 1], None)
    again = repeat_question(screen, picks[0])
    assert again["qid"].startswith("v") and again["select"] == 2 and again["head"] == 2
    assert again["candidates"] != screen["candidates"] and sorted(again["candidates"]) == [1, 3, 12, 14]
    # the same set, picked in another order on the shuffled screen, is the same answer
    assert KIND.check_answer(again, [1, 3], None) == picks
    items = [{"id": f"c{i}", "position": [float(i)]} for i in range(N)]

    def logged(n, algorithm, shown, picked):
        return Answer(id=f"{n}-0", qid=f"q{n}", rater="r", kind="pick_k", head=shown[0], a=shown[1], b=shown[2],
                      choice=picked[0], algorithm=algorithm, fallback=False, issued_at=0.0, answered_at=10.0 + 5 * n,
                      response_ms=9000, shown=tuple(shown), picks=tuple(picked))

    original = [2, 12, 3, 14, 1]
    log = [logged(1, "duels", original, picks), logged(2, "repeat", [2, *again["candidates"]], picks),
           logged(3, "catch", original, (3, 14)), logged(4, "catch", original, (12, 14))]
    flags, _ = replay_rater_stats(log, config, items)
    assert flags["2-0"] == "repeat_agree"
    assert flags["3-0"] == "catch_pass" and flags["4-0"] == "catch_fail"


# ------------------------------------------------------------------------------------------ simulation
def test_the_simulated_rater_picks_the_nearest_in_the_order_shown_and_the_screen_planner_learns():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    D = cdist(X, X)
    rater = KIND.simulated_rater(D, 0.0, 0.0, {"n_reference": 6, "n_select": 2}, random_state=1)
    ((head, refs, picks),) = rater.answer([(0, (5, 6, 7, 8, 9, 10))])
    nearest = sorted(refs, key=lambda r: D[0, r])[:2]
    assert set(picks) == set(nearest) and list(picks) == [r for r in refs if r in nearest]
    planner = make_planner("duels", 30, question_kind="pick_k", random_state=0, n_reference=6, n_select=2)
    assert isinstance(planner, PickScreens)
    for _ in range(40):
        planner.observe(rater.answer(planner.next_questions(15)))
    assert planner.progress()["triplets"] == planner.progress()["answers"] * 2 * 4
    again = restore_planner(planner.to_state())
    assert isinstance(again, PickScreens) and again.next_questions(5) == planner.next_questions(5)
    true_nn = np.argsort(D + np.diag(np.full(30, np.inf)), axis=1)[:, 0]
    found = planner.neighbor_graph(k=1).neighbors[:, 0]
    assert (found == true_nn).mean() >= 0.8
    # a random rater's answers are refused by the kind's check when they do not fit the screen
    with pytest.raises(AnswerError):
        KIND.check_answer(KIND.screen((0, refs), {"n_select": 2}), list(refs[:3]), None)


# ------------------------------------------------------------------------------------------ real screens
def test_food100s_screens_load_and_read_as_pick_k_answers_give_the_published_triplets():
    """Food-100 (Wilber et al., HCOMP 2014) read by ``load_food100``: every screen fits the kind (a probe, a
    grid of distinct dishes without it, K distinct picks among them), and the non-catch screens, each read
    through the kind's implied triplets, give the 250,320 triplets the data set's README states."""
    path = shared_data_file("food100/food100_grids.zip")
    data = load_food100(path.parents[1])
    assert data.n_items == 100 and len(data.screens) == 19_150
    assert sum(s.is_catch for s in data.screens) == 3_830 and len({s.worker for s in data.screens}) == 243
    total = 0
    for s in data.screens:
        screen = {"kind": "pick_k", "head": s.probe, "candidates": list(s.grid), "select": len(s.picks)}
        assert KIND.check_answer(screen, list(s.picks), None) == tuple(sorted(s.picks))
        if not s.is_catch:
            total += len(KIND.triplets([s.probe, *s.grid], s.picks))
    assert total == 250_320
    assert {(len(s.grid), len(s.picks)) for s in data.screens} == {(n, k) for n in (2, 4, 8, 12, 16)
                                                                    for k in (1, 2, 4) if k < n}
