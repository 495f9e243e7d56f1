"""Catch trials by default: one in every few questions at a random place, and a count of allowed misses
chosen so a careful rater is rarely flagged and a random responder rarely passes. The rates
docs/researcher/catch-trials.md states are measured here on seeded simulated raters."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import EGG_ANSWERS, answer, closer_candidate, colour_items, fetch_question, index_of, shared_data_file

from engine.kinds import get_kind
from simulation.crowd import eggs_truth, noise_model
from simulation.oracles import TripletOracle
from webapp.catches import choose_comparisons
from workers.store import keys
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
    # and as the exact binomial rates docs/researcher/catch-trials.md states
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


# ---------------------------------------------------------------------------- every kind (issue 40)
#: kinds and settings whose catch trials are measured: (kind, its settings section)
MEASURED_KINDS = [("triplet", {}), ("odd_one_out", {}), ("rank", {"n_reference": 8, "n_select": 2}),
                  ("rank", {"n_reference": 8, "n_select": 1}), ("rank", {"n_reference": 12, "n_select": 2}),
                  ("rank", {"n_reference": 4, "n_select": 1})]


def egg_catch_setup():
    shared_data_file(EGG_ANSWERS)
    truth = eggs_truth()
    noise, _ = noise_model(truth, lapse=0.1)
    items = [{"id": i, "position": [float(p[0])]} for i, p in zip(truth.ids, truth.points, strict=True)]
    return truth, noise, items


@pytest.mark.parametrize(("name", "settings"), MEASURED_KINDS)
def test_a_careful_rater_misses_each_kinds_catch_trials_at_most_at_its_stated_rate(name, settings):
    """The human noise model (lapse 0.1) on each kind's catch screens of the egg items' comparisons, judged
    by the kind's own rule: the share missed is at most the rate the kind states (and the schedule plans on).
    A grid passes with the like item among the picks: judged by the first pick only, 8-rank-2 misses 12%."""
    truth, noise, items = egg_catch_setup()
    kind = get_kind(name)
    settings = kind.check_settings(settings)
    oracle = kind.simulated_rater(truth.distances, noise.logistic_scale, noise.lapse, settings, random_state=0)
    found = choose_comparisons(items, random.Random(0))
    rng = random.Random(1)
    missed = trials = 0
    while trials < 6000:
        c = rng.choice(found)
        screen, expect = kind.catch_screen(c.head, c.similar, c.different, c.others, settings, rng)
        picks = kind.picks_of(oracle.answer([kind.proposal_of(kind.shown(screen))])[0])
        missed += not kind.catch_answer_passes(picks, expect)
        trials += 1
    stated, random_pass = kind.catch_rates(settings)
    assert missed / trials <= stated, (missed / trials, stated)
    assert stated < 0.2 and 0 < random_pass < 1


def rater_payload(question: dict, items: list[dict], scale: dict) -> dict:
    """The parts of a screen's payload a simulated rater reads (an item's handle, here its index, and its
    id, which the rater's ``identify`` reads)."""
    def item(i):
        return {"handle": int(i), "id": items[int(i)]["id"]}
    if "head" in question:
        return {"kind": question["kind"], "head": item(question["head"]),
                "candidates": [item(c) for c in question["candidates"]],
                **({"select": question["select"]} if "select" in question else {})}
    return {"kind": question["kind"], "items": [item(i) for i in question["items"]], "scale": scale}


@pytest.mark.parametrize(("name", "settings"), [("rating", {}), *MEASURED_KINDS[:3]])
def test_at_defaults_careful_raters_are_flagged_at_most_1_percent_and_random_ones_pass_at_most_5(name, settings):
    """End to end on the live rules: the catch questions the server builds (catch_question), answered by
    simulation.crowd's careful rater (the human noise model) and by a random one, judged as the answer
    path judges them (catch_passed), over the schedule of a study at defaults (40 questions)."""
    from simulation.crowd import Rater
    from webapp.questions_answers import catch_passed, catch_question

    truth, noise, items = egg_catch_setup()
    study_config = StudyConfig.from_dict({"name": "Fair", "question_kind": name,
                                          "limits": {"max_questions_per_rater": 40},
                                          **({"rank": settings} if settings else {})})
    study = SimpleNamespace(config=study_config)
    found = choose_comparisons(items, random.Random(0))
    scale = {k: study_config.settings_of("rating")[k] for k in ("min", "max", "step")}  # the rating kind's scale
    random.seed(40)  # catch_question draws from the process's generator
    rng = np.random.default_rng(40)
    every, n = study_config.catch_every, study_config.planned_questions
    flagged = {False: 0, True: 0}
    raters = 1500
    for r in range(raters):
        for careless in (False, True):
            rater = Rater(truth, noise, careless, random.Random(2 * r + careless))
            places = np.arange(0, n, every) + rng.integers(every, size=len(range(0, n, every)))
            trials = int(np.count_nonzero(places < n))
            missed = 0
            for _ in range(trials):
                question = catch_question(study, found)
                body = rater.answer(rater_payload(question, items, scale))
                picks = body.get("picks") or ([body["choice"]] if "choice" in body else None)
                missed += not catch_passed(study, question, picks, body.get("value"))
            flagged[careless] += study_config.catch_failing(trials, missed)
    assert flagged[False] / raters <= 0.01, flagged
    assert 1 - flagged[True] / raters <= 0.05, flagged


def test_people_miss_the_egg_triplets_that_meet_the_catch_margin_at_most_at_the_stated_rate():
    """Replayed from people: the alien-egg crowd's own answers to triplets whose candidates meet the catch
    margin (the like one at most half as far from the head) miss the like one at most CATCH_MISS_RATE of
    the time (5.2%)."""
    import csv
    import io
    import zipfile

    with zipfile.ZipFile(shared_data_file(EGG_ANSWERS)) as z:
        name = next(n for n in z.namelist() if n.endswith(".csv"))
        rows = list(csv.DictReader(io.TextIOWrapper(z.open(name), encoding="utf-8")))
    missed = []
    for row in rows:
        h, left, right, pick = (int(row[k][1:]) for k in ("Center", "Left", "Right", "Answer"))
        (near, like), (far, _) = sorted([(abs(left - h), left), (abs(right - h), right)])
        if near <= 0.5 * far:
            missed.append(pick != like)
    assert len(missed) > 5000
    assert 0.03 < sum(missed) / len(missed) <= CATCH_MISS_RATE, sum(missed) / len(missed)


@pytest.mark.parametrize(("action", "code", "excluded"), [("mark", True, False), ("no_code", False, False),
                                                          ("exclude", False, True)])
def test_a_catch_trial_flag_does_what_the_studys_flag_action_says(client, conn, action, code, excluded):
    """A rater missing every catch trial is flagged; ``mark`` still gives the code (a flag of any check
    does only what flag_action says), ``no_code`` withholds it, ``exclude`` also excludes the rater."""
    study_config = StudyConfig.from_dict({
        "name": "Actions", "algorithm": "random_triplets", "pool_size": 8,
        "limits": {"max_questions_per_rater": 6, "min_answers_for_code": 6},
        "attention": {"rate": 0.5, "flag_action": action, "answer_check": False}})
    create_study(conn, study_config, colour_items(), study_id="actions")
    client.get("/s/actions?rater=r-miss")
    question = fetch_question(client, "actions")
    while question is not None:
        far = max((index_of(c) for c in question["candidates"]), key=lambda i: abs(i - index_of(question["head"])))
        reply = answer(client, question, choice=far, study_id="actions")
        assert reply.status_code == 201, reply.get_json()
        question = reply.get_json().get("next")
    stats = {k.decode(): v.decode() for k, v in conn.hgetall(keys.rater_stats("actions")).items()}
    assert int(stats["r-miss:catch_failed"]) == 3 and stats.get("r-miss:flagged") == "1"
    page = client.get("/s/actions/done").get_data(as_text=True)
    assert ('id="completion-code"' in page) is code
    assert bool(conn.sismember(keys.excluded_raters("actions"), "r-miss")) is excluded


def test_a_study_without_catch_trials_is_warned_about_at_create_on_the_form_and_on_the_overview(
        cli, researcher_client, conn, tmp_path):
    """Items with neither positions nor labels whose content is on the page (a CSV of texts without labels;
    a folder of images gets copy catch trials instead) give no catch trials: ``proxima create`` warns, the
    New study form says so before the upload and flashes it after, and the study's Overview says so; a
    labelled study is not warned about."""
    import io

    from workers.store.studies import list_studies

    unlabelled = "id,text\n" + "".join(f"t{i},Item {i}\n" for i in range(8))
    labelled = "id,text,label\n" + "".join(f"t{i},Item {i},{'ab'[i % 2]}\n" for i in range(8))
    (tmp_path / "study.yaml").write_text("name: Plain\nlimits: {max_questions_per_rater: 40}\n")
    for name, text in (("plain.csv", unlabelled), ("labelled.csv", labelled)):
        (tmp_path / name).write_text(text)
    result = cli("create", tmp_path / "study.yaml", "--items", tmp_path / "plain.csv", "--id", "plain")
    assert "Warning: no catch trials: its items have neither positions nor labels" in result.output
    result = cli("create", tmp_path / "study.yaml", "--items", tmp_path / "labelled.csv", "--id", "labelled")
    assert "no catch trials" not in result.output, result.output
    # a folder of images has them without labels (an image with a copy of itself, unreadable on the wire)
    from test_paid_study import PNG

    (tmp_path / "images").mkdir()
    for n in range(4):
        (tmp_path / "images" / f"i{n}.png").write_bytes(PNG)
    result = cli("create", tmp_path / "study.yaml", "--items", tmp_path / "images", "--id", "images")
    assert result.exit_code == 0 and "no catch trials" not in result.output, result.output
    assert 'id="catch-note"' in researcher_client.get("/studies/new").get_data(as_text=True)
    page = researcher_client.post("/studies/new", data={
        "name": "Uploaded", "items": (io.BytesIO(unlabelled.encode()), "items.csv")},
        content_type="multipart/form-data", follow_redirects=True).get_data(as_text=True)
    assert "Note: no catch trials" in page
    uploaded = next(s.id for s in list_studies(conn) if s.config.name == "Uploaded")
    for study_id, warned in (("plain", True), ("labelled", False), ("images", False), (uploaded, True)):
        overview = researcher_client.get(f"/studies/{study_id}").get_data(as_text=True)
        assert ('id="catch-warning"' in overview) is warned, study_id


def test_the_overview_warns_of_catch_trials_missed_far_more_often_than_careful_raters_miss_them(
        researcher_client, conn):
    """Raters missing catch trials at over twice the careful rate (of at least 50) are named on the
    Overview: many raters do not look, or the comparisons (labels) are not near-certain."""
    create_study(conn, config(40), colour_items(), study_id="missed")
    conn.hset(keys.rater_stats("missed"), mapping={"r1:catch": 30, "r1:catch_failed": 3,
                                                   "r2:catch": 30, "r2:catch_failed": 3})
    assert 'id="catch-warning"' not in researcher_client.get("/studies/missed").get_data(as_text=True)
    conn.hset(keys.rater_stats("missed"), mapping={"r2:catch_failed": 6})  # 9 of 60: 15% > 2 x 6%
    page = researcher_client.get("/studies/missed").get_data(as_text=True)
    assert 'id="catch-warning"' in page and "catch-trial miss rate of 15%" in page


def test_comparisons_by_position_keep_the_margin_from_both_alike_items_and_follow_labels_where_given():
    """The like item is at most half as far from the head as the unlike one is from the head and from the
    like item (an odd-one-out's two alike are nearer each other than either to the odd one; a grid's other
    unlike items at least twice as far from the head); with labels too, like is of the head's label and
    unlike of others, even where the nearest item is of another label."""
    rng = random.Random(3)
    places = [(rng.random(), rng.random()) for _ in range(60)]
    labels = ["left" if x < 0.5 else "right" for x, _ in places]
    for with_labels in (False, True):
        items = [{"position": list(p), **({"label": lab} if with_labels else {})}
                 for p, lab in zip(places, labels, strict=True)]
        found = choose_comparisons(items, random.Random(0))
        assert len(found) > 20
        for c in found:
            near = math.dist(places[c.head], places[c.similar])
            assert near <= 0.5 * math.dist(places[c.head], places[c.different])
            assert near <= 0.5 * math.dist(places[c.similar], places[c.different])
            assert all(near <= 0.5 * math.dist(places[c.head], places[o]) for o in c.others)
            if with_labels:
                assert labels[c.similar] == labels[c.head]
                assert all(labels[o] != labels[c.head] for o in (c.different, *c.others))
    # on a line, a far item can be nearer the like one than twice the like one's distance: left out
    line = [0.0, 1.0, 2.1, 2.2, 2.3, 2.4]
    for c in choose_comparisons([{"position": [x]} for x in line], random.Random(0)):
        assert abs(line[c.head] - line[c.similar]) <= 0.5 * abs(line[c.similar] - line[c.different]), c
    # an item whose nearest neighbour is of the other label is compared with one of its own
    items = [{"position": [x], "label": lab} for x, lab in ((0.0, "a"), (0.1, "b"), (0.3, "a"), (5.0, "b"),
                                                             (5.2, "b"), (9.0, "a"), (9.5, "b"))]
    heads = {c.head: c for c in choose_comparisons(items, random.Random(0))}
    assert heads[0].similar == 2
