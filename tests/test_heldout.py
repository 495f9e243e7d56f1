"""Held-out questions: a study keeps a stated share of uniformly random questions out of training, stores their
answers marked, never lets a learner learn from them (live or on a rebuild), scores every learner's model on
them with each summary, and shows the curve next to the ceiling raters' self-agreement sets.

Raters answer through the store's own issue and accept steps (the ones the JSON API calls with the question its
token carries), from items with known 1-D positions; the update passes run in this process.
"""
from __future__ import annotations

import csv
import io
import json
import math
import time

import numpy as np
import pytest

from engine.heldout import choice_agreement, choice_ceiling, rating_correlation
from engine.kinds import KINDS, kind_of
from workers.jobs.learner_cache import load_learners
from workers.jobs.rebuild import rebuild_study
from workers.jobs.update_pass import apply_new_answers
from workers.results.package import write_package
from workers.store import heldout as stored
from workers.store import keys
from workers.store.answers import REPEAT_AGREE_FLAG, REPEAT_DISAGREE_FLAG, accept_answer, read_answers
from workers.store.config import ConfigError, StudyConfig
from workers.store.questions import issue_question, repeat_question
from workers.store.studies import Item, create_study, get_study

POSITIONS = np.sort(np.random.default_rng(0).uniform(0, 10, 30))


def make_study(conn, study_id: str, **config) -> str:
    items = [Item(id=f"p{i}", kind="color", color="#203040", position=(float(x),)) for i, x in enumerate(POSITIONS)]
    config = StudyConfig.from_dict({"name": study_id, "random_state": 1, "pool_size": 60, "attention": {"rate": 0},
                                    **config})
    create_study(conn, config, items, study_id=study_id)
    apply_new_answers(conn, study_id)
    return study_id


def respond(question: dict, rng: np.random.Generator) -> tuple[int | None, float | None]:
    """A rater who answers from the positions with human-like noise: (choice, rating value)."""
    kind = kind_of(question)
    shown = kind.shown(question)
    if kind.name == "rating":
        i, j = shown
        return None, float(np.clip(5 - 4 * abs(POSITIONS[i] - POSITIONS[j]) / 10 + rng.normal(0, 0.7), 1, 5))
    head, a, b = shown
    gap = abs(POSITIONS[head] - POSITIONS[b]) - abs(POSITIONS[head] - POSITIONS[a])
    return (a if rng.random() < 1 / (1 + math.exp(-gap / 0.5)) else b), None


def answer(conn, study_id: str, n: int, rng: np.random.Generator, every: int = 50) -> None:
    """``n`` answers from three raters, an update pass after every ``every``."""
    study = get_study(conn, study_id)
    for t in range(n):
        now, rater = time.time(), f"r{t % 3}"
        question, _, _ = issue_question(conn, study_id, study.config, study.n_items, rater, now, now + 600)
        choice, value = respond(question, rng)
        accept_answer(conn, study_id, question, rater, choice, issued_at=now, response_ms=1500, used_ttl=600,
                      value=value)
        if t % every == every - 1:
            apply_new_answers(conn, study_id)
    apply_new_answers(conn, study_id)


def engine_stats(conn, study_id: str) -> dict[str, str]:
    return {k.decode(): v.decode() for k, v in conn.hgetall(keys.engine_stats(study_id)).items()}


# ---------------------------------------------------------------------------------------------- config
def test_heldout_share_defaults_to_five_percent_and_is_validated():
    assert StudyConfig.from_dict({"name": "s"}).heldout_share == 0.05
    assert StudyConfig.from_dict({"name": "s", "heldout_share": 0}).heldout_share == 0
    assert StudyConfig.from_stored(StudyConfig.from_dict({"name": "s", "heldout_share": 0.1}).to_dict()
                                   ).heldout_share == 0.1
    for bad in (0.9, -0.1, "some"):
        with pytest.raises(ConfigError, match="heldout_share"):
            StudyConfig.from_dict({"name": "s", "heldout_share": bad})


# ---------------------------------------------------------------------------------------------- the split
@pytest.mark.parametrize(("algorithm", "kind"), [("random_triplets", "triplet"), ("pooled", "rating")])
def test_heldout_answers_are_marked_and_never_reach_a_learner_live_or_replayed(conn, algorithm, kind):
    sid = make_study(conn, f"split-{algorithm.replace('_', '-')}", algorithms=[{"algorithm": algorithm}],
                     question_kind=kind, heldout_share=0.3)
    answer(conn, sid, 300, np.random.default_rng(1))
    logged = read_answers(conn, sid)
    held = [a for a in logged if a.heldout]
    assert 0.2 * len(logged) < len(held) < 0.4 * len(logged)  # the stated share, drawn per question
    assert all(not a.fallback for a in held)
    learner = load_learners(conn, get_study(conn, sid))[algorithm]
    assert learner.progress()["answers"] == len(logged) - len(held)
    if algorithm == "pooled":  # the rating log holds exactly the ratings not held out, in order
        state = learner.planner.to_state()
        trained = [a for a in logged if not a.heldout]
        assert state["pairs"].tolist() == [sorted((a.head, a.a)) for a in trained]
    assert conn.llen(keys.heldout(sid)) == len(held)

    report = rebuild_study(conn, sid)  # a replay of the whole log leaves them out too
    assert report.answers_replayed == len(logged)
    assert load_learners(conn, get_study(conn, sid))[algorithm].progress()["answers"] == len(logged) - len(held)
    assert conn.llen(keys.heldout(sid)) == len(held)


def test_a_share_of_zero_holds_nothing_out(conn):
    sid = make_study(conn, "none-held", algorithms=[{"algorithm": "random_triplets"}], heldout_share=0)
    answer(conn, sid, 100, np.random.default_rng(2))
    assert not any(a.heldout for a in read_answers(conn, sid))
    assert stored.curves(engine_stats(conn, sid)) == {}


# ---------------------------------------------------------------------------------------------- the curve
def test_the_heldout_curve_rises_as_the_model_learns_and_the_ceiling_comes_from_repeats(conn):
    # random triplets learn slowly (a win rate per pair), so their curve climbs over the whole run
    sid = make_study(conn, "curve", algorithms=[{"algorithm": "random_triplets"}], heldout_share=0.25)
    rng = np.random.default_rng(3)
    answer(conn, sid, 1200, rng, every=40)
    curve = stored.curves(engine_stats(conn, sid))["random_triplets"]
    assert len(curve) >= 20
    applied = [p[0] for p in curve]
    assert applied == sorted(applied)
    early = np.mean([p[1] for p in curve if p[0] < 300 and p[2] >= 20])
    late = np.mean([p[1] for p in curve[-3:]])
    assert late > early + 0.08 and late > 0.65, curve
    assert curve[-1][2] == conn.llen(keys.heldout(sid))  # every held-out answer scored

    # validation repeats: 18 of 20 answered alike, so no model can agree with more than (1 + sqrt(.8)) / 2
    study = get_study(conn, sid)
    for t in range(20):
        now = time.time()
        question, _, _ = issue_question(conn, sid, study.config, study.n_items, "r0", now, now + 600)
        again = repeat_question(question, kind_of(question).shown(question)[1])
        accept_answer(conn, sid, again, "r0", kind_of(again).shown(again)[1], issued_at=now, response_ms=1500,
                      used_ttl=600, flags=REPEAT_AGREE_FLAG if t < 18 else REPEAT_DISAGREE_FLAG)
    apply_new_answers(conn, sid)
    kinds = stored.kinds_scored(engine_stats(conn, sid))
    assert kinds["triplet"]["repeats"] == 20 and kinds["triplet"]["metric"] == "agreement"
    assert kinds["triplet"]["ceiling"] == pytest.approx((1 + math.sqrt(0.8)) / 2, abs=1e-3)


def test_a_rating_study_is_scored_by_correlation(conn):
    sid = make_study(conn, "rated", algorithms=[{"algorithm": "pooled"}], question_kind="rating", heldout_share=0.25)
    answer(conn, sid, 900, np.random.default_rng(4), every=40)
    curve = stored.curves(engine_stats(conn, sid))["pooled"]
    assert stored.kinds_scored(engine_stats(conn, sid))["rating"]["metric"] == "correlation"
    # a model that has learned nothing correlates 0 (test_choices_are_scored...); one rating's noise is large
    assert curve[-1][1] > 0.6 and curve[-1][2] == conn.llen(keys.heldout(sid)), curve


# ---------------------------------------------------------------------------------------------- scoring
def test_choices_are_scored_by_the_pick_the_model_makes_for_every_kind():
    X = np.array([0.0, 1.0, 5.0, 9.0])

    def distances(h, o):
        return np.abs(X[h] - X[o])

    # triplet: 0 is nearer 1 than 2; odd-one-out: 3 is far from the pair (0, 1); rank: 1 is nearest 0
    assert choice_agreement(distances, KINDS["triplet"], [([0, 1, 2], [1]), ([0, 2, 1], [2])]).tolist() == [1, 0]
    assert choice_agreement(distances, KINDS["odd_one_out"], [([0, 1, 3], [3]), ([0, 1, 3], [0])]).tolist() == [1, 0]
    assert choice_agreement(distances, KINDS["rank"], [([0, 2, 1, 3], [1, 2]), ([0, 2, 1, 3], [2, 1])]).tolist() == [
        1, 0]

    def nothing(h, o):
        return np.full(len(h), np.nan)

    # a model that knows nothing ties every pick: chance
    assert choice_agreement(nothing, KINDS["odd_one_out"], [([0, 1, 3], [3])]).tolist() == [pytest.approx(1 / 3)]
    pairs = np.array([[0, 1], [0, 2], [0, 3], [1, 3]])
    assert rating_correlation(distances, pairs, distances(pairs[:, 0], pairs[:, 1])) == pytest.approx(1.0)
    assert rating_correlation(nothing, pairs, np.array([0.1, 0.5, 0.9, 0.7])) == 0.0


def test_the_ceiling_follows_self_agreement():
    assert choice_ceiling(1.0, 2) == 1.0 and choice_ceiling(1.0, 8) == 1.0
    assert choice_ceiling(0.5, 2) == 0.5  # coin flips twice agree half the time: nothing to predict
    assert choice_ceiling(1 / 3, 3) == pytest.approx(1 / 3)
    assert choice_ceiling(0.82, 2) == pytest.approx((1 + math.sqrt(0.64)) / 2)
    assert choice_ceiling(0.2, 2) == 0.5  # below chance: chance


# ---------------------------------------------------------------------------------------------- shown
def test_the_package_marks_heldout_answers_and_states_the_share(conn):
    sid = make_study(conn, "packaged", algorithms=[{"algorithm": "random_triplets"}], heldout_share=0.3)
    answer(conn, sid, 120, np.random.default_rng(5))
    files: dict[str, bytes] = {}
    descriptor = write_package(conn, sid, files.__setitem__, media=False)
    rows = list(csv.DictReader(io.StringIO(files["answers.csv"].decode())))
    held = {a.id for a in read_answers(conn, sid) if a.heldout}
    assert held and {r["answer_id"] for r in rows if r["heldout"] == "1"} == held
    assert {r["heldout"] for r in rows} == {"0", "1"}
    assert descriptor["proxima"]["heldout"]["share"] == 0.3 and descriptor["proxima"]["heldout"]["answers"] == len(held)
    schema = next(r for r in descriptor["resources"] if r["name"] == "answers")["schema"]
    assert {"name": "heldout", "type": "boolean"}.items() <= next(f for f in schema["fields"]
                                                                 if f["name"] == "heldout").items()


def test_the_learning_tab_plots_the_heldout_curve_with_its_sentence_and_the_api_carries_it(conn, researcher_client):
    sid = make_study(conn, "shown", algorithms=[{"algorithm": "embedding"}], heldout_share=0.2)
    answer(conn, sid, 300, np.random.default_rng(6))
    page = researcher_client.get(f"/studies/{sid}?tab=learning").get_data(as_text=True)
    assert 'class="plot heldout-plot"' in page
    held = conn.llen(keys.heldout(sid))
    assert "20% of each learner&#39;s questions are drawn at random and held out" in page
    assert f"({held} held-out answers so far)" in page
    assert "share whose pick the model makes" in page and "ceiling" in page
    stats = researcher_client.get(f"/api/studies/{sid}/stats").get_json()
    assert stats["heldout"] == {"share": 0.2, "answers": held}
    curve = stats["algorithms"][0]["heldout"]
    assert curve["metric"] == "agreement" and curve["curve"] and curve["answers_scored"] == held
    assert json.dumps(curve["curve"]) == json.dumps(stored.curves(engine_stats(conn, sid))["embedding"])


def test_the_learning_tab_says_when_nothing_is_held_out(conn, researcher_client):
    sid = make_study(conn, "unshown", algorithms=[{"algorithm": "embedding"}], heldout_share=0)
    page = researcher_client.get(f"/studies/{sid}?tab=learning").get_data(as_text=True)
    assert "No questions are held out" in page and "heldout-plot" not in page


def test_a_study_stored_before_held_out_questions_holds_none_out_after_an_upgrade():
    from workers.store.config import HELDOUT_SHARE, StudyConfig

    new = StudyConfig.from_dict({"name": "New"})
    assert new.heldout_share == HELDOUT_SHARE > 0
    stored = new.to_dict()
    del stored["heldout_share"]  # what an older version stored
    assert StudyConfig.from_stored(stored).heldout_share == 0.0
    assert StudyConfig.from_stored(new.to_dict()).heldout_share == HELDOUT_SHARE
