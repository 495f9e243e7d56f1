"""Catch trials of a folder of images with neither positions nor labels (issue 40): their copies are found by a
program comparing the files, so once the study's learner has placed the items its places serve as their positions
(workers/jobs/learned_positions.py): comparisons with a margin in the learned space, judged by the crowd.
Real Redis, the rater API and burst RQ workers."""
from __future__ import annotations

import json
import math
import random

import numpy as np
from helpers import index_of, run_rater, run_worker

from webapp import catches
from webapp.questions_answers import crowd_catch_question
from workers.jobs import learned_positions
from workers.store import keys
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study, get_study

N_ITEMS, QUESTIONS = 30, 40


def images_study(conn, study_id: str) -> str:
    """Duels on 30 images without positions or labels (their catch trials are copies), hidden along a line in
    index order."""
    items = [Item(id=f"img{i}", kind="image", media_type="image/png") for i in range(N_ITEMS)]
    config = StudyConfig.from_dict({
        "name": "Images", "pool_size": 10, "random_state": 5, "heldout_share": 0,
        "limits": {"max_questions_per_rater": QUESTIONS, "min_answers_for_code": QUESTIONS},
        "attention": {"answer_check": False}})
    create_study(conn, config, items, study_id=study_id)
    run_worker(conn)
    return study_id


def careful(question: dict, rng: random.Random) -> int:
    """The candidate nearer the head on the line (a copy of the head nearest of all), a near tie near a coin flip."""
    head = index_of(question["head"])
    a, b = (index_of(c) for c in question["candidates"])
    gap = abs(b - head) - abs(a - head)
    return a if rng.random() < 1 / (1 + math.exp(-0.7 * gap)) else b


def test_a_study_of_copies_takes_comparisons_in_its_learners_space_judged_by_the_crowd(app, conn):
    random.seed(40)  # the server draws catch places and handles from the process's generator, as a request does
    study_id = images_study(conn, "images-learned")
    study = get_study(conn, study_id)
    assert catches.comparisons(conn, study)  # chosen as the first rater's request would
    assert json.loads(conn.get(keys.catch_comparisons(study_id)))["source"] == learned_positions.COPIES
    assert not catches.judged_by_crowd(conn, study)
    raters = 0
    while not conn.exists(keys.catch_learned(study_id)) and raters < 20:
        run_rater(app, study_id, f"person-{raters}", careful, seed=raters)
        run_worker(conn)
        raters += 1
    record = learned_positions.learned_positions(conn, study_id)
    assert record is not None, "the items were never placed"
    applied = int(conn.hget(keys.engine_stats(study_id), "answers_applied"))
    assert record["answers"] >= learned_positions.LEARNED_AT * N_ITEMS and applied >= record["answers"]
    X = np.array(record["positions"])
    assert X.shape[0] == N_ITEMS
    # the learned space keeps the hidden line's order: an item's nearest there is near on the line
    D = np.linalg.norm(X[:, None] - X[None], axis=-1) + np.diag(np.full(N_ITEMS, np.inf))
    gaps = np.abs(D.argmin(axis=1) - np.arange(N_ITEMS))
    assert np.median(gaps) <= 2, gaps.tolist()

    catches.forget(study_id)  # this process's copy, as after CACHE_SECONDS
    found = catches.comparisons(conn, study)
    stored = json.loads(conn.get(keys.catch_comparisons(study_id)))
    assert stored["source"] == catches.LEARNED and stored["crowd"] and catches.judged_by_crowd(conn, study)
    assert found and all(c.similar != c.head for c in found)  # no copy left
    # each with the margin in the learned space: the like item at most half as far from the head as the unlike one
    assert all(D[c.head, c.similar] <= 0.5 * D[c.head, c.different] for c in found)
    # and on the hidden line most of them hold too
    held = [abs(c.similar - c.head) < abs(c.different - c.head) for c in found]
    assert np.mean(held) >= 0.9, held
    question = crowd_catch_question(study, found, frozenset())
    assert question is not None and question["claim"]  # a miss waits for the crowd's verdict

    # placed once: more answers do not move the places (the misses wait for verdicts on these comparisons)
    run_rater(app, study_id, "person-late", careful, seed=99)
    run_worker(conn)
    assert learned_positions.learned_positions(conn, study_id)["positions"] == record["positions"]
