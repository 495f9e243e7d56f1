"""Issue 26: raters judged by their answers (the answer check of the update pass), and validation
repeats judged once at a fixed count so the rates docs/researcher/catch-trials.md states are the code's."""
from __future__ import annotations

import dataclasses
import random
from math import comb
from types import MappingProxyType

import numpy as np
import pytest
from helpers import index_of, positioned_study, run_rater, run_worker, wire_body

from engine import kinds
from engine import rater_checks as engine_checks
from webapp.questions_answers import flag_low_self_agreement
from workers.jobs import rater_checks
from workers.store import keys
from workers.store.answers import Answer
from workers.store.config import Attention, StudyConfig
from workers.store.raters import answer_check_looks, rater_table
from workers.store.studies import Item, create_study, get_study

N_ITEMS, QUESTIONS = 16, 40
POSITIONS = [float(i * i) for i in range(N_ITEMS)]
RANDOM_SEED = 26  # the global random the platform draws from (conftest's ``seeded``)


def study(conn, **attention) -> str:
    return positioned_study(conn, "judged", POSITIONS, random_state=5, attention=attention,
                            limits={"max_questions_per_rater": QUESTIONS, "min_answers_for_code": QUESTIONS})


def careful(q, rng):
    h = POSITIONS[index_of(q["head"])]
    a, b = (index_of(c) for c in q["candidates"])
    if rng.random() < 0.1:
        return rng.choice((a, b))
    return a if abs(POSITIONS[a] - h) < abs(POSITIONS[b] - h) else b


def lowest_index(q, rng):
    return min(index_of(c) for c in q["candidates"])


def coin_flip(q, rng):
    return index_of(rng.choice(q["candidates"]))


def test_a_bot_that_never_looks_is_flagged_and_gets_no_code_while_careful_raters_get_theirs(app, conn, seeded):
    study_id = study(conn)
    for n in range(6):
        run_rater(app, study_id, f"person-{n}", careful, seed=n, conn=conn)
    bot = run_rater(app, study_id, "bot-index", lowest_index, seed=10, conn=conn)
    flipper = run_rater(app, study_id, "bot-coin", coin_flip, seed=11, conn=conn)
    person = run_rater(app, study_id, "person-last", careful, seed=12, conn=conn)
    rows = {r["rater"]: r for r in rater_table(conn, study_id)}
    for name in ("bot-index", "bot-coin"):
        assert rows[name]["flagged"] and rows[name]["answer_check_flagged"], rows[name]
        assert rows[name]["answer_check_p"] < 0.01
    assert rows["bot-index"]["answer_check_rule"] == "lowest index"
    assert not any(rows[f"person-{n}"]["flagged"] for n in range(6)) and not rows["person-last"]["flagged"]
    assert rows["person-last"]["answer_check_p"] is not None
    for client in (bot, flipper):
        page = client.get(f"/s/{study_id}/done").get_data(as_text=True)
        assert 'id="completion-code"' not in page
    assert 'id="completion-code"' in person.get(f"/s/{study_id}/done").get_data(as_text=True)


def test_flag_action_mark_only_marks(app, conn, seeded):
    study_id = study(conn, flag_action="mark", rate=0)  # catch-trial misses withhold the code whatever the action
    for n in range(4):
        run_rater(app, study_id, f"person-{n}", careful, seed=n, conn=conn)
    bot = run_rater(app, study_id, "bot-index", lowest_index, seed=10, conn=conn)
    row = next(r for r in rater_table(conn, study_id) if r["rater"] == "bot-index")
    assert row["answer_check_flagged"] and not row["flagged"]
    assert 'id="completion-code"' in bot.get(f"/s/{study_id}/done").get_data(as_text=True)


def test_flag_action_exclude_stops_the_rater_and_leaves_them_out_of_learning(app, conn, seeded):
    # no catch trials: they would flag the bot first, and a catch-trial flag does not exclude (yet)
    study_id = study(conn, flag_action="exclude", rate=0)
    for n in range(4):
        run_rater(app, study_id, f"person-{n}", careful, seed=n, conn=conn)
    run_rater(app, study_id, "bot-index", lowest_index, seed=10, conn=conn)
    row = next(r for r in rater_table(conn, study_id) if r["rater"] == "bot-index")
    assert row["flagged"] and row["excluded"]
    assert row["answers"] < QUESTIONS  # stopped at the look that flagged them


def test_the_finish_page_waits_for_the_answer_check_of_the_last_answers(app, conn, seeded):
    study_id = study(conn)
    conn.hset(keys.engine_stats(study_id), "answer_check_at", 1)  # the check runs for this study
    client = app.test_client()
    client.get(f"/s/{study_id}?PROLIFIC_PID=fast&STUDY_ID=s&SESSION_ID=fast")
    question = client.get(f"/api/studies/{study_id}/questions/next").get_json()["question"]
    rng = random.Random(0)
    while question is not None:  # no worker runs: the check has not seen these answers
        sent = wire_body(question, {"token": question["token"], "choice": careful(question, rng)})
        body = client.post(f"/api/studies/{study_id}/answers", json=sent).get_json()
        question = body.get("next")
    page = client.get(f"/s/{study_id}/done")
    assert 'id="checking"' in page.get_data(as_text=True) and page.headers["Refresh"]
    run_worker(conn)
    assert 'id="completion-code"' in client.get(f"/s/{study_id}/done").get_data(as_text=True)


def test_a_code_shown_after_the_wait_for_the_check_ran_out_says_it_is_unconfirmed_and_a_flag_then_takes_it(
        app, conn, seeded):
    """A bot finishing while the workers are behind waits for its verdict on the checking page; once the wait
    (ANSWER_CHECK_WAIT_SECONDS after its last answer) has run out it is shown a code, but one the page says
    is confirmed once its answers are checked, and the Raters table marks it (code_before_check); when the
    check then flags it, the finish page shows no code. A careful rater's code has no such note."""
    from workers.store.raters import ANSWER_CHECK_WAIT_SECONDS

    study_id = study(conn, rate=0)  # no catch trials: the answer check alone decides
    for n in range(6):
        run_rater(app, study_id, f"person-{n}", careful, seed=n, conn=conn)
    client = app.test_client()
    client.get(f"/s/{study_id}?PROLIFIC_PID=late-bot&STUDY_ID=s&SESSION_ID=late-bot")
    question = client.get(f"/api/studies/{study_id}/questions/next").get_json()["question"]
    rng = random.Random(0)
    while question is not None:  # no worker runs meanwhile: the check has not seen these answers
        sent = wire_body(question, {"token": question["token"], "choice": lowest_index(question, rng)})
        question = client.post(f"/api/studies/{study_id}/answers", json=sent).get_json().get("next")
    assert 'id="checking"' in client.get(f"/s/{study_id}/done").get_data(as_text=True)
    row = next(r for r in rater_table(conn, study_id) if r["rater"] == "late-bot")
    assert not row["code_before_check"] and not row["flagged"]
    # the wait runs out (the rater's last answer long ago)
    last = float(conn.hget(keys.rater_stats(study_id), keys.rater_field("late-bot", "last_answer_at")))
    conn.hset(keys.rater_stats(study_id), keys.rater_field("late-bot", "last_answer_at"),
              last - ANSWER_CHECK_WAIT_SECONDS - 1)
    page = client.get(f"/s/{study_id}/done").get_data(as_text=True)
    assert 'id="completion-code"' in page and 'id="code-unconfirmed"' in page
    row = next(r for r in rater_table(conn, study_id) if r["rater"] == "late-bot")
    assert row["code_before_check"] and row["completion_code"]
    run_worker(conn)  # the check runs: the bot is flagged, and its code is gone from the page
    row = next(r for r in rater_table(conn, study_id) if r["rater"] == "late-bot")
    assert row["flagged"] and row["code_before_check"]
    page = client.get(f"/s/{study_id}/done").get_data(as_text=True)
    assert 'id="completion-code"' not in page and 'id="code-unconfirmed"' not in page
    person = run_rater(app, study_id, "person-last", careful, seed=12, conn=conn)
    page = person.get(f"/s/{study_id}/done").get_data(as_text=True)
    assert 'id="completion-code"' in page and 'id="code-unconfirmed"' not in page


# ------------------------------------------------------------------ what a pick means is the kind's to say
class _Farther(kinds._Triplet):
    """A kind whose rater picks the candidate LESS like the head: the triplet it implies is won by the other."""

    def triplets(self, shown, picks):
        head, a, b = shown
        return [(head, a, b, b if picks[0] == a else a)]


_TRIPLET = kinds.get_kind("triplet")
FARTHER = _Farther(**{**{f.name: getattr(_TRIPLET, f.name) for f in dataclasses.fields(_TRIPLET)}, "name": "farther"})


@pytest.fixture
def farther(monkeypatch):
    """The kinds table with the kind ``farther`` in it (for this test only)."""
    monkeypatch.setattr(kinds, "KINDS", MappingProxyType({**kinds.KINDS, "farther": FARTHER}))


def logged(n: int, rater: str, kind: str, screen: tuple[int, int, int], pick: int) -> Answer:
    head, a, b = screen
    return Answer(id=f"{n + 1}-0", qid=f"q{n}", rater=rater, kind=kind, head=head, a=a, b=b, choice=pick,
                  algorithm="random_triplets", fallback=False, issued_at=0.0, answered_at=0.0, response_ms=2000)


def test_triplet_rows_read_which_candidate_is_nearer_from_the_triplet_the_kind_implies(farther):
    # the same judgement (3 is nearer 2 than 9) as a triplet answer picking 2 and a farther answer picking 9
    rows, picked_first = rater_checks.triplet_rows([logged(0, "r", "triplet", (3, 2, 9), 2),
                                                    logged(1, "r", "farther", (3, 2, 9), 9),
                                                    logged(2, "r", "farther", (3, 9, 2), 9)])
    assert rows.tolist() == [[3, 2, 9, 1], [3, 2, 9, 1], [3, 9, 2, 0]]
    assert picked_first.tolist() == [1, 0, 1]  # what the rater clicked, for the item-blind rules


def test_a_careful_rater_of_a_kind_picking_the_farther_item_is_not_judged_backwards(conn, farther):
    """The answer check judges a kind's answers by the triplets they imply, not by ``choice == a``: a
    careful rater who picks the item less like the head agrees with the model of careful triplet raters,
    and a bot clicking the lower index is still caught by what it clicks."""
    study_id = positioned_study(conn, "farther", POSITIONS, random_state=5)
    rng, log = random.Random(7), []

    def nearer(head, a, b):
        return a if abs(POSITIONS[a] - POSITIONS[head]) < abs(POSITIONS[b] - POSITIONS[head]) else b

    def answer(rater, kind, rule):
        screen = tuple(rng.sample(range(N_ITEMS), 3))
        log.append(logged(len(log), rater, kind, screen, rule(*screen)))

    for n in range(12):
        for _ in range(QUESTIONS):
            answer(f"person-{n}", "triplet",
                   lambda h, a, b: rng.choice((a, b)) if rng.random() < 0.1 else nearer(h, a, b))
    for _ in range(QUESTIONS):
        answer("far-person", "farther",
               lambda h, a, b: rng.choice((a, b)) if rng.random() < 0.1 else ({a, b} - {nearer(h, a, b)}).pop())
        answer("far-bot", "farther", lambda h, a, b: min(a, b))
    look = answer_check_looks(QUESTIONS)[-1]  # the third look: 40 answers
    due = {"far-person": look, "far-bot": look}
    verdicts = rater_checks.judge(get_study(conn, study_id), log, due, {})
    alpha = engine_checks.look_alpha(look[0], Attention().false_flag_rate)
    person, bot = verdicts["far-person"], verdicts["far-bot"]
    assert person.n == QUESTIONS and person.agreement > 0.6 and person.p >= alpha, person
    assert bot.p < alpha and bot.likeliest == "lowest index", bot


# ------------------------------------------------------------------ validation repeats (item 8)
def binomial_below(n: int, p: float, share: float) -> float:
    """P(agreed / n < share) for agreed ~ Binomial(n, p)."""
    return sum(comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1) if k / n < share)


def simulate_repeat_flags(conn, attention: Attention, consistency: float, raters: int, seed: int) -> float:
    """The share of simulated raters the repeat rule flags, each answering all their repeats in turn and
    agreeing with themself with chance ``consistency`` (the rule runs after every repeat, as live)."""
    config = StudyConfig(name="R", attention=attention)
    items = [Item(id=f"p{i}", kind="color", color="#203040") for i in range(4)]
    study_id = create_study(conn, config, items, study_id="repeat-rates")
    the_study = get_study(conn, study_id)
    rng = random.Random(seed)
    flagged = 0
    for r in range(raters):
        rater = f"r{r}"
        agreed = 0
        for repeats in range(1, attention.validation_repeats + 1):
            agreed += rng.random() < consistency
            # the rater's two counters after this repeat, as the answer script counts them (one round trip)
            conn.hset(keys.rater_stats(study_id), mapping={keys.rater_field(rater, "repeats"): repeats,
                                                            keys.rater_field(rater, "repeat_agreed"): agreed})
            flag_low_self_agreement(conn, the_study, rater)
        flagged += conn.hget(keys.rater_stats(study_id), keys.rater_field(rater, "flagged")) is not None
    return flagged / raters


@pytest.mark.parametrize("repeats, honest_rate, random_rate", [(10, 0.056, 0.637), (20, 0.027, 0.773)])
def test_the_repeat_flag_rates_in_the_readme_are_the_rates_the_code_produces(conn, repeats, honest_rate,
                                                                             random_rate):
    attention = Attention(validation_repeats=repeats, min_self_agreement=0.6)
    n = attention.repeats_to_judge
    assert binomial_below(n, 0.8, 0.6) == pytest.approx(honest_rate, abs=0.001)
    assert binomial_below(n, 0.5, 0.6) == pytest.approx(random_rate, abs=0.001)
    honest = simulate_repeat_flags(conn, attention, 0.8, 1000, seed=1)
    conn.flushall()
    coin = simulate_repeat_flags(conn, attention, 0.5, 1000, seed=2)
    # 1000 raters: within about three standard errors of the exact rates
    assert abs(honest - honest_rate) < 0.025 and abs(coin - random_rate) < 0.05, (honest, coin)


def test_no_honest_rater_is_flagged_on_five_repeats(conn):
    attention = Attention(validation_repeats=5, min_self_agreement=0.6)
    assert simulate_repeat_flags(conn, attention, 0.8, 200, seed=3) == 0
    assert attention.repeats_to_judge is None


# ------------------------------------------------------------------ leave-one-out (issue 40)
def test_held_out_margins_do_not_depend_on_the_answers_they_predict():
    """Each group's margins come from a model fitted on the other groups only: rewriting every answer of
    group 0 leaves group 0's margins exactly as they were (a model fitted on them would move)."""
    rng = np.random.default_rng(3)
    rows = np.column_stack([rng.choice(N_ITEMS, size=(400, 3)), rng.integers(0, 2, 400)])
    rows = rows[(rows[:, 0] != rows[:, 1]) & (rows[:, 0] != rows[:, 2]) & (rows[:, 1] != rows[:, 2])]
    group = rng.integers(0, engine_checks.N_FOLDS, len(rows))
    reference = np.ones(len(rows), bool)
    before = engine_checks.held_out_triplet_margins(rows, group, reference, N_ITEMS, seed=1)
    flipped = rows.copy()
    flipped[group == 0, 3] = 1 - flipped[group == 0, 3]
    after = engine_checks.held_out_triplet_margins(flipped, group, reference, N_ITEMS, seed=1)
    assert np.array_equal(before[group == 0], after[group == 0])
    assert not np.allclose(before[group != 0], after[group != 0])  # the others' models did learn from them


def test_the_judged_raters_own_answers_train_none_of_the_models_that_judge_them(conn, monkeypatch):
    """What the answer check predicts for a rater (the honest model's chance of each of their answers) is
    the same whatever that rater answered: their answers are in none of the fits that predict them
    (docs/researcher/catch-trials.md: a rater's answers are predicted from the other groups). Temperature
    calibration, one scale fitted on every rater's held-out answers, is held fixed here."""
    study_id = positioned_study(conn, "left-out", POSITIONS, random_state=5)
    rng = random.Random(11)
    screens = {f"person-{n}": [tuple(rng.sample(range(N_ITEMS), 3)) for _ in range(QUESTIONS)] for n in range(8)}

    def nearer(head, a, b):
        return a if abs(POSITIONS[a] - POSITIONS[head]) < abs(POSITIONS[b] - POSITIONS[head]) else b

    def log_of(judged_rule):
        log = []
        for rater, rows in screens.items():
            for screen in rows:
                pick = judged_rule(*screen) if rater == "person-0" else nearer(*screen)
                log.append(logged(len(log), rater, "triplet", screen, pick))
        return log

    seen = []
    monkeypatch.setattr(engine_checks, "calibrate_temperature", lambda z, chose: 1.0)
    monkeypatch.setattr(engine_checks, "judge_triplets",
                        lambda p_first, *args, **kwargs: seen.append(np.array(p_first)) or engine_checks.Verdict(
                            1.0, "", None, len(p_first)))
    look = answer_check_looks(QUESTIONS)[-1]
    study = get_study(conn, study_id)
    rater_checks.judge(study, log_of(nearer), {"person-0": look}, {})
    rater_checks.judge(study, log_of(lambda h, a, b: ({a, b} - {nearer(h, a, b)}).pop()), {"person-0": look}, {})
    careful, contrary = seen
    assert len(careful) == QUESTIONS
    assert np.array_equal(careful, contrary)


# ------------------------------------------------------------------ ratings judged (issue 40)
def rating_log(careful: int, bots: int, answers: int, seed: int) -> list[Answer]:
    """Rating answers of ``careful`` raters (1-5 from the pair's distance on 30 items at known 1-D
    places, with noise and a lapse now and then) and ``bots`` raters answering at random, interleaved."""
    rng = random.Random(seed)
    places = [rng.random() for _ in range(30)]
    log = []
    raters = [f"careful-{n}" for n in range(careful)] + [f"bot-{n}" for n in range(bots)]
    for _ in range(answers):
        for rater in raters:
            i, j = rng.sample(range(30), 2)
            if rater.startswith("bot") or rng.random() < 0.1:
                value = rng.randint(1, 5)
            else:
                value = min(5, max(1, round(5 - 4 * abs(places[i] - places[j]) + rng.gauss(0, 0.5))))
            log.append(Answer(id=f"{len(log) + 1}-0", qid=f"q{len(log)}", rater=rater, kind="rating", head=i, a=j,
                              b=-1, choice=-1, algorithm="random_pairs", fallback=False, issued_at=0.0,
                              answered_at=0.0, response_ms=2000, value=float(value)))
    return log


def test_rating_answers_are_judged_careful_raters_pass_and_random_ones_are_flagged_in_a_crowd_of_bots(conn):
    """The answer check judges ratings (JUDGE_RATINGS): with a third of the crowd answering at random and
    none of them flagged yet, careful raters are not flagged (the rating model is fitted again without the
    raters its first fit finds item-blind: fitted on everyone, it flagged most of these careful raters)
    and every random rater is."""
    items = [Item(id=f"p{i}", kind="color", color="#203040") for i in range(30)]
    study_id = create_study(conn, StudyConfig.from_dict({"name": "Rated", "question_kind": "rating",
                                                         "random_state": 3}), items, study_id="rated")
    log = rating_log(careful=40, bots=20, answers=QUESTIONS, seed=4)
    look = answer_check_looks(QUESTIONS)[-1]
    due = {rater: look for rater in {a.rater for a in log}}
    verdicts = rater_checks.judge(get_study(conn, study_id), log, due, {})
    alpha = engine_checks.look_alpha(look[0], Attention().false_flag_rate)
    careful = [v for r, v in verdicts.items() if r.startswith("careful")]
    bots = [v for r, v in verdicts.items() if r.startswith("bot")]
    assert len(careful) == 40 and len(bots) == 20
    assert not [v for v in careful if v.p < alpha], sorted(v.p for v in careful)[:3]
    assert all(v.p < alpha for v in bots), sorted(v.p for v in bots)[-3:]


def test_the_finish_page_waits_for_a_verdict_even_before_any_check_ran_then_marks_the_code_unconfirmed(conn,
                                                                                                     monkeypatch):
    """A rater who reached a look of the answer check waits for its verdict even when no check has run for
    the study yet (the first pass's check still running in the worker's fit process, or no worker at all:
    a bot answers 40 questions in seconds), at most ANSWER_CHECK_WAIT_SECONDS; then the code comes marked
    as shown before the check (CHECK_LATE). Before, a study whose check never ran paid without a word."""
    from workers.jobs import fits
    from workers.store.raters import (
        ANSWER_CHECK_WAIT_SECONDS,
        CHECK_LATE,
        CHECKED_AT_FIELD,
        answer_check_pending,
        answer_check_state,
    )

    study_id = study(conn)
    conn.hset(keys.rater_stats(study_id), mapping={"fast-bot:answers": QUESTIONS, "fast-bot:last_answer_at": 100.0})
    assert conn.hget(keys.engine_stats(study_id), CHECKED_AT_FIELD) is None  # no check ran for the study
    assert answer_check_pending(conn, study_id, "fast-bot", 101.0)
    assert answer_check_state(conn, study_id, "fast-bot", 101.0 + ANSWER_CHECK_WAIT_SECONDS) == CHECK_LATE
    handed = []
    monkeypatch.setattr(fits, "run_beside", lambda key, fn, *args: handed.append(key) or True)
    rater_checks.after_pass(conn, study_id, {"applied": 3})
    assert handed and answer_check_pending(conn, study_id, "fast-bot", 101.0)
    conn.hset(keys.rater_stats(study_id), "fast-bot:looks", QUESTIONS)  # the verdict on the last look is in
    assert not answer_check_pending(conn, study_id, "fast-bot", 101.0)
