"""Catch trials by default: one in every few questions at a random place, and a count of allowed misses
chosen so a careful rater is rarely flagged and a random responder rarely passes. The rates README's
"Attention checks" states are measured here on seeded simulated raters."""
from __future__ import annotations

import random

import numpy as np
import pytest
from helpers import EGG_ANSWERS, answer, closer_candidate, colour_items, fetch_question, shared_data_file

from simulation.crowd import eggs_truth, noise_model
from simulation.oracles import TripletOracle
from webapp.catches import choose_comparisons
from workers.store.answers import read_answers
from workers.store.config import CATCH_MISS_RATE, StudyConfig, binomial_tail
from workers.store.studies import create_study


def config(questions: int | None = 40, **attention) -> StudyConfig:
    return StudyConfig.from_dict({"name": "Catches", "limits": {"max_questions_per_rater": questions},
                                  "attention": attention})


@pytest.mark.parametrize(("questions", "every", "misses"), [(40, 3, 3), (100, 6, 4), (200, 15, 3), (None, 6, 4)])
def test_the_default_schedule_and_allowed_misses(questions, every, misses):
    study = config(questions)
    assert (study.catch_every, study.catch_misses_allowed) == (every, misses)


def simulate(study: StudyConfig, miss_rate: float, raters: int, rng: np.random.Generator) -> float:
    """The share of raters answering ``planned_questions`` flagged by the catch rule when they miss each
    catch trial with ``miss_rate``: the schedule placed as next_question.lua places it."""
    every, n = study.catch_every, study.planned_questions
    flagged = 0
    for _ in range(raters):
        places = np.arange(0, n, every) + rng.integers(every, size=len(range(0, n, every)))
        trials = int(np.count_nonzero(places < n))
        flagged += study.catch_failing(trials, int(np.count_nonzero(rng.random(trials) < miss_rate)))
    return flagged / raters


def test_stated_rates_at_40_questions_careful_flagged_under_1_percent_random_passing_under_5():
    rng = np.random.default_rng(26)
    study = config(40)
    careful = simulate(study, CATCH_MISS_RATE, 20000, rng)
    random_pass = 1 - simulate(study, 0.5, 20000, rng)
    assert careful <= 0.01, careful
    assert random_pass <= 0.05, random_pass
    # and as the exact binomial rates README states
    assert binomial_tail(3, 14, CATCH_MISS_RATE) == pytest.approx(0.0080, abs=5e-4)
    assert 1 - binomial_tail(3, 13, 0.5) == pytest.approx(0.046, abs=1e-3)


def test_a_careful_rater_misses_the_egg_catch_trials_at_most_at_the_planned_rate():
    """simulation.oracles' human model on the egg items with lapse 0.1 (issue 26's careful rater), on the
    comparisons webapp.catches chooses from the eggs' positions: misses at most CATCH_MISS_RATE."""
    shared_data_file(EGG_ANSWERS)
    truth = eggs_truth()
    noise, _ = noise_model(truth, lapse=0.1)
    oracle = TripletOracle(truth.distances, noise=noise.logistic_scale, model="human", lapse=noise.lapse,
                           random_state=0)
    found = choose_comparisons([{"position": [float(p[0])]} for p in truth.points], random.Random(0))
    rng = random.Random(1)
    trials = [rng.choice(found) for _ in range(20000)]
    missed = sum(oracle(h, s, d) != s for h, s, d, *_ in trials) / len(trials)
    assert 0.03 < missed <= CATCH_MISS_RATE, missed


def test_an_explicit_share_rule_keeps_its_old_meaning():
    study = config(40, rate=1.0, max_failure_share=0.4, min_checks=2)
    assert study.catch_every == 1
    assert not study.catch_failing(1, 1)  # too few checks
    assert study.catch_failing(2, 1)
    assert not config(40, misses_allowed=1).catch_failing(5, 1)
    assert config(40, misses_allowed=1).catch_failing(5, 2)


def test_rate_zero_asks_no_catch_trials():
    assert config(40, rate=0).catch_every == 0


def test_every_rater_gets_one_catch_trial_in_each_block_at_varying_places(client, conn):
    study_config = StudyConfig.from_dict({"name": "Blocks", "algorithm": "random_triplets", "pool_size": 8,
                                          "limits": {"max_questions_per_rater": 12}, "attention": {"rate": 0.25}})
    create_study(conn, study_config, colour_items(), study_id="blocks")
    places = set()
    for r in range(4):
        client.get(f"/s/blocks?rater=r-block-{r}")
        question = fetch_question(client, "blocks")
        for _ in range(12):
            reply = answer(client, question, choice=closer_candidate(question), study_id="blocks")
            assert reply.status_code == 201, reply.get_json()
            question = reply.get_json().get("next")
            if question is None:
                break
        mine = [a for a in read_answers(conn, "blocks") if a.rater == f"r-block-{r}"]
        caught = [i for i, a in enumerate(mine) if a.algorithm == "catch"]
        assert [i // 4 for i in caught] == [0, 1, 2], caught  # one per block of 4
        assert all("catch_pass" in mine[i].flags for i in caught)
        places.update(i % 4 for i in caught)
    assert len(places) > 1  # not always the same place in the block
