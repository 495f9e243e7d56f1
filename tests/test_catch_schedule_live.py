"""Issue 40: in benchmarks/bots.py random bots were paid in 4 of 60 runs of the rank study of labelled images
(catch trials of copies in 8-rank-2 grids, 40 questions per rater) where the catch rule states 1.56%. The live
path serves and judges what the rule is planned on: every rater who answers the planned questions is judged on
exactly the planned catch trials, one per block, each a grid holding the head's copy once among its references
and passed when the copy is among the picks (2 in 8 at random); the rule's stated pass rate
(``webapp.catches.schedule_pass_rate``) is the exact chance of its schedule, short last blocks included. Real
Redis, the Flask test client; everything seeded (the server's draws from the process's generator, ``seeded``)."""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

from webapp.catches import schedule_pass_rate, source_of
from workers.store import keys
from workers.store.answers import CATCH_ALGORITHM, read_answers
from workers.store.config import StudyConfig, binomial_tail
from workers.store.studies import Item, create_study

RANDOM_SEED = 40
N_ITEMS, QUESTIONS, RATERS = 24, 40, 48
PNG_END = b"IEND\xaeB`\x82"


def png(n: int) -> bytes:
    """Bytes that end as a PNG does (what the padding looks for), one file per item."""
    return b"\x89PNG\r\n\x1a\n" + bytes([n]) * (50 + n) + PNG_END


def labelled_images(conn, study_id: str) -> StudyConfig:
    """A rank study (8-rank-2 grids, the kind's defaults) of labelled images without features: catch trials
    of copies. The answer check is off: only the catch rule judges the raters here."""
    items = [Item(id=f"img{i}", kind="image", media_type="image/png", label=f"bin {i * 4 // N_ITEMS}")
             for i in range(N_ITEMS)]
    config = StudyConfig.from_dict({
        "name": "Labelled images", "question_kind": "rank", "random_state": 0, "heldout_share": 0,
        "limits": {"max_questions_per_rater": QUESTIONS, "min_answers_for_code": QUESTIONS},
        "attention": {"answer_check": False}})
    create_study(conn, config, items, media={i: png(i) for i in range(N_ITEMS)}, study_id=study_id)
    assert source_of([{"kind": "image", "label": item.label} for item in items]) == "copies"
    return config


def at_random(client, study_id: str, rater: str, rng: random.Random) -> int:
    """``rater`` answers every question the study gives them with picks drawn at random; returns how many."""
    client.get(f"/s/{study_id}?rater={rater}")
    question = client.get(f"/api/studies/{study_id}/questions/next").get_json().get("question")
    answered = 0
    while question is not None:
        picks = [c["handle"] for c in rng.sample(question["candidates"], question["select"])]
        reply = client.post(f"/api/studies/{study_id}/answers",
                            json={"token": question["token"], "response_ms": 8000, "picks": picks})
        assert reply.status_code == 201, reply.get_json()
        answered += 1
        question = reply.get_json().get("next")
    return answered


def test_random_raters_get_every_planned_catch_trial_of_copies_and_pass_each_two_times_in_eight(app, conn, seeded):
    config = labelled_images(conn, "copies-rank")
    every, (fewest, most) = config.catch_every, config.catch_trials
    assert (every, fewest, most, config.catch_misses_allowed) == (8, 5, 5, 1)
    assert config.catch_rates[1] == 2 / 8
    # the rule's stated rate: no miss or one of 5, each passed 1 time in 4
    assert schedule_pass_rate(config, 2 / 8) == pytest.approx((1 + 5 * 3) / 4 ** 5)

    passes = misses_total = kept = 0
    for r in range(RATERS):
        rater = f"bot-{r}"
        assert at_random(app.test_client(), "copies-rank", rater, random.Random(r)) == QUESTIONS
        mine = [a for a in read_answers(conn, "copies-rank") if a.rater == rater]
        caught = [n for n, a in enumerate(mine) if a.algorithm == CATCH_ALGORITHM]
        # one catch trial in each block of 8, none skipped or added: the 5 the rule is planned on
        assert [n // every for n in caught] == list(range(most)), caught
        missed = 0
        for n in caught:
            answer = mine[n]
            head, references = answer.shown[0], answer.shown[1:]
            assert len(references) == 8 and references.count(head) == 1  # the head's copy, once, among 8
            assert len(set(references)) == 8 and len(answer.picks) == 2
            passed = head in answer.picks
            assert ("catch_pass" if passed else "catch_fail") in answer.flags.split(",")
            missed += not passed
        stats = conn.hmget(keys.rater_stats("copies-rank"),
                           [keys.rater_field(rater, f) for f in ("catch", "catch_failed", "flagged")])
        assert [int(v or 0) for v in stats] == [most, missed, int(missed > config.catch_misses_allowed)]
        passes += most - missed
        misses_total += missed
        kept += missed <= config.catch_misses_allowed
    # 240 catch trials passed at 2 in 8 (a share within 3 standard errors of it), and the raters who kept
    # their codes as many as that rate gives (4 at most: 5 or more of 48 happen 1 time in 300 at 1.56%)
    share = passes / (passes + misses_total)
    assert abs(share - 0.25) < 3 * math.sqrt(0.25 * 0.75 / (passes + misses_total)), share
    assert kept <= 4, kept


@pytest.mark.parametrize(("kind", "settings", "questions"), [
    ("triplet", {}, 40), ("triplet", {}, 100), ("odd_one_out", {}, 100),
    ("rank", {"n_reference": 8, "n_select": 1}, 100), ("rank", {"n_reference": 8, "n_select": 2}, 40)])
def test_the_stated_pass_rate_is_the_schedules_exact_chance_short_last_blocks_included(kind, settings, questions):
    """A last block cut short holds its catch trial with its share of the places, as next_question.lua draws
    them: the stated rate against 200,000 simulated schedules (and, for triplets at 40 questions, 13 or 14
    trials: the binomial tails by hand)."""
    config = StudyConfig.from_dict({"name": "Rates", "question_kind": kind, **({"rank": settings} if settings else {}),
                                    "limits": {"max_questions_per_rater": questions}})
    chance = config.catch_rates[1]
    stated = schedule_pass_rate(config, chance)
    rng = np.random.default_rng(40)
    every, n, raters = config.catch_every, config.planned_questions, 200_000
    blocks = np.arange(0, n, every)
    trials = ((blocks + rng.integers(every, size=(raters, len(blocks)))) < n).sum(axis=1)
    missed = rng.binomial(trials, 1 - chance)
    kept = np.mean([not config.catch_failing(int(t), int(m)) for t, m in zip(trials, missed, strict=True)])
    assert abs(kept - stated) < 4 * math.sqrt(stated * (1 - stated) / raters) + 1e-6, (kept, stated)
    if (kind, questions) == ("triplet", 40):
        assert (every, config.catch_trials, config.catch_misses_allowed) == (3, (13, 14), 3)
        by_hand = 2 / 3 * (1 - binomial_tail(3, 13, 0.5)) + 1 / 3 * (1 - binomial_tail(3, 14, 0.5))
        assert stated == pytest.approx(by_hand)
