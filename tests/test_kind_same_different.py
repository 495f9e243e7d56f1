"""The same_different question kind (two items, "the same or different?": value 1 the same, 0 different)
through the platform: no rating scale served or checked, values other than 0 and 1 refused in words, the
update job feeding a pair learner same as near and different as far, catch trials (an item against its
copy is "the same"), validation repeats, the simulated rater and the simulated crowd; and the pair-shape
defects the kind exposed (a pair planner's zero-sample edges, random's rounds caption)."""
from __future__ import annotations

import random

import numpy as np
import pytest
from click.testing import CliRunner
from helpers import colour_items, fetch_question, index_of, post_answer, run_worker
from scipy.spatial.distance import cdist

from engine.graph import NeighborGraph
from engine.heldout import model_distances
from engine.kinds import DIFFERENT, SAME, AnswerError, get_kind
from engine.planners import make_planner
from engine.registry import default_algorithm
from simulation.crowd import Rater, Truth, noise_model, study_config
from webapp.cli import main
from workers.jobs.learners import Learner
from workers.store import engine_state
from workers.store.answers import Answer, read_answers
from workers.store.config import StudyConfig, load_config_file
from workers.store.questions import repeat_question
from workers.store.raters import replay_rater_stats
from workers.store.studies import create_study

N = 12
KIND = get_kind("same_different")
OWN = KIND.check_settings(None)  # its own settings (none), what the platform gives its methods
SCALE = get_kind("rating").check_settings(None)  # the rating kind's default 1-5 scale, never a same_different's


def _config(study_id: str, **config) -> StudyConfig:
    base = {"name": study_id, "random_state": 0, "pool_size": 12, "attention": {"rate": 0}, "heldout_share": 0,
            "question_kind": "same_different"}
    return StudyConfig.from_dict({**base, **config})


def _careful(question) -> int:
    """A careful rater's answer in a colour_items study (item i at position i): the same within 2 places."""
    i, j = (index_of(item) for item in question["items"])
    return SAME if abs(i - j) <= 2 else DIFFERENT


# ------------------------------------------------------------------------------------------ the entry
def test_the_entry_asks_pairs_without_the_rating_scale_and_pair_planners_ask_it():
    assert KIND.asks == "pair" and KIND.widget == "same" and KIND.answered_by == "value" and not KIND.on_scale
    assert KIND.settings_schema() is None and KIND.items_needed({}) == 2 and OWN == {}
    config = _config("s", rating={"min": 0, "max": 100, "step": 1, "widget": "slider"})
    assert config.settings_of(KIND) == {} and default_algorithm("same_different") == "pooled"
    assert config.settings_of("rating")["max"] == 100  # a scale given beside it is the rating kind's alone
    assert [a.algorithm for a in config.algorithms] == ["pooled"]
    for name in ("anntri", "ann", "random", "pooled"):
        StudyConfig.from_dict({"name": "s", "question_kind": "same_different", "algorithm": name})
    screen = KIND.screen((3, 7), {})
    assert screen == {"kind": "same_different", "items": [3, 7]}
    assert KIND.repeat_screen(screen, random.Random(0))["items"] == [7, 3]
    assert KIND.texts({})[0] == "Are these two the same, or different?"


def test_values_are_1_or_0_checked_in_words_and_never_on_the_rating_scale():
    assert KIND.check_value(1, OWN) == SAME and KIND.check_value(0, OWN) == DIFFERENT
    assert KIND.check_value(1.0, OWN) == 1 and KIND.check_value(0.0, OWN) == 0
    assert KIND.check_value(0, SCALE) == DIFFERENT  # even handed a scale, its values are its own
    for value, words in [(3, "1 (the same) or 0 (different); got 3"), (5, "got 5"), (0.5, "got 0.5"),
                         (True, "got True"), ("same", "got 'same'"), (None, "got no 'value'")]:
        with pytest.raises(AnswerError, match=words.replace("(", r"\(").replace(")", r"\)")):
            KIND.check_value(value, OWN)
    # a rating's value is still checked on the scale, by the rating kind
    with pytest.raises(AnswerError, match="outside the scale 1 to 5"):
        get_kind("rating").check_value(0, SCALE)
    assert get_kind("rating").check_value(5, SCALE) == 5


def test_the_same_is_a_small_distance_and_different_a_large_one_whatever_the_scale():
    """The direction the issue found backwards: value 1 read on the 1-5 scale was 'very different'."""
    assert KIND.sample(SAME, OWN) == 0.0 and KIND.sample(DIFFERENT, OWN) == 1.0
    slider = get_kind("rating").check_settings({"min": 0, "max": 100, "widget": "slider"})
    assert KIND.sample(SAME, slider) == 0.0 and KIND.sample(SAME, SCALE) == 0.0
    assert KIND.sample(None, OWN) is None and get_kind("triplet").sample(None, {}) is None
    assert get_kind("rating").sample(5, SCALE) == 0.0 and get_kind("rating").sample(1, SCALE) == 1.0


# ------------------------------------------------------------------------------------------ a study
@pytest.mark.parametrize("algorithm", ["pooled", "anntri"])
def test_a_same_different_study_serves_pairs_takes_0_and_1_and_learns_same_as_near(client, conn, algorithm):
    study_id = f"sd-{algorithm}"
    config = _config(study_id, algorithms=[{"algorithm": algorithm}])
    study = create_study(conn, config, colour_items(N), study_id=study_id)
    question = fetch_question(client, study)
    assert question["kind"] == "same_different" and question["widget"] == "same" and len(question["items"]) == 2
    assert "scale" not in question and question["prompt"] == "Are these two the same, or different?"
    for body, code, words in [
        ({"value": 3}, "value_out_of_range", "1 (the same) or 0 (different); got 3"),
        ({"value": -1}, "value_out_of_range", "got -1"),
        ({"choice": question["items"][0]["handle"]}, "malformed_answer", "needs 'value', 1 (the same) or 0"),
    ]:
        response = post_answer(client, study, question, **body)
        assert response.status_code == 400, body
        error = response.get_json()["error"]
        assert error["code"] == code and words in error["message"], error
    sent = []
    for _ in range(60):
        value = _careful(question)
        sent.append(([index_of(item) for item in question["items"]], value))
        response = post_answer(client, study, question, value=value, response_ms=3000)
        assert response.status_code == 201, response.get_json()
        question = response.get_json()["next"]
    run_worker(conn)
    log = read_answers(conn, study)
    assert [(list(a.shown), a.value) for a in log] == sent and all(not a.picks for a in log)
    assert {a.value for a in log} == {SAME, DIFFERENT}
    learner = Learner.from_state(config.algorithms[0], config, engine_state.load(conn, study, algorithm))
    assert learner.progress()["answers"] == 60
    distance = model_distances(learner.planner)
    pairs = np.array([shown for shown, _ in sent])
    learned = distance(pairs[:, 0], pairs[:, 1])
    same = np.array([v == SAME for _, v in sent])
    # the pairs called the same are nearer, in the learner's model, than every pair called different
    assert np.nanmax(learned[same]) < np.nanmin(learned[~same])


def test_catch_trials_show_an_item_against_its_copy_and_a_far_pair(client, conn):
    study = create_study(conn, _config("sdc", attention={"rate": 0.3, "answer_check": False}),
                         colour_items(N), study_id="sdc")
    for rater, careful in (("careful", True), ("careless", False)):
        rater_client = client.application.test_client()
        rater_client.get(f"/s/{study}?PROLIFIC_PID={rater}")
        question = fetch_question(rater_client, study)
        for _ in range(24):
            value = _careful(question) if careful else 1 - _careful(question)  # careless: always wrong
            response = post_answer(rater_client, study, question, value=value, response_ms=3000)
            assert response.status_code == 201, response.get_json()
            question = response.get_json()["next"]
    log = read_answers(conn, study)
    catches = {r: [a for a in log if a.rater.endswith(r) and a.algorithm == "catch"] for r in ("careful", "careless")}
    assert catches["careful"] and all("catch_pass" in a.flags for a in catches["careful"])
    assert catches["careless"] and all("catch_fail" in a.flags for a in catches["careless"])
    # an alike check shows one item twice (its copy) and expects "the same"; an unlike one a far pair
    shown = [a.shown for a in catches["careful"]]
    assert any(i == j for i, j in shown) and all(i == j or abs(i - j) > 2 for i, j in shown)
    # a replay of the log judges them alike
    flags, _ = replay_rater_stats(log, _config("sdc", attention={"rate": 0.3, "answer_check": False}),
                                  [{"id": f"c{i}", "position": [float(i)]} for i in range(N)])
    assert all(flags[a.id].endswith("catch_pass") for a in catches["careful"])
    assert all(flags[a.id].endswith("catch_fail") for a in catches["careless"])


def test_a_repeat_reverses_the_pair_and_agrees_on_the_same_value():
    config = _config("r", attention={"rate": 0, "validation_repeats": 2})
    screen = {"qid": "q", "kind": "same_different", "items": [2, 9]}
    again = repeat_question(screen, KIND.repeat_answer(None, SAME))
    assert again["items"] == [9, 2] and again["repeat_of"] == SAME and again["qid"].startswith("v")

    def logged(n, algorithm, shown, value):
        return Answer(id=f"{n}-0", qid=f"q{n}", rater="r", kind="same_different", head=shown[0], a=shown[1], b=-1,
                      choice=-1, algorithm=algorithm, fallback=False, issued_at=0.0, answered_at=10.0 + 5 * n,
                      response_ms=3000, shown=tuple(shown), picks=(), value=value)

    log = [logged(1, "pooled", [2, 9], SAME), logged(2, "repeat", [9, 2], SAME),
           logged(3, "pooled", [4, 11], DIFFERENT), logged(4, "repeat", [11, 4], SAME)]
    flags, fields = replay_rater_stats(log, config, [])
    assert flags["2-0"] == "repeat_agree" and flags["4-0"] == "repeat_disagree"


# ------------------------------------------------------------------------------------------ simulation
def test_the_simulated_rater_says_the_same_under_its_threshold_with_the_human_noise():
    X = np.arange(20, dtype=float)[:, None]
    D = cdist(X, X) / 19
    exact = KIND.simulated_rater(D, 0.0, 0.0, {}, random_state=0)
    assert exact.threshold == pytest.approx(np.quantile(D[~np.eye(20, dtype=bool)], 0.1))
    answers = exact.answer([(0, 1), (0, 0), (0, 19), (3, 10)])
    assert [KIND.value_of(o) for o in answers] == [SAME, SAME, DIFFERENT, DIFFERENT]
    # answered as a pair planner observes them: the kind's distance sample of each value
    assert [d for _, _, d in answers] == [KIND.sample(KIND.value_of(o), OWN) for o in answers] == [0, 0, 1, 1]
    # a pair planner driven by it straight (as simulation.oracles.run drives one) finds each item's partner
    X = np.array([0.0, 1.0, 10.0, 11.0, 20.0, 21.0, 30.0, 31.0])[:, None]
    pairs = KIND.simulated_rater(cdist(X, X), 0.5, 0.03, {}, random_state=2)
    planner = make_planner("random", 8, question_kind="same_different", random_state=0)
    for _ in range(60):
        planner.observe(pairs.answer(planner.next_questions(20)))
    assert planner.neighbor_graph(k=1).neighbors[:, 0].tolist() == [1, 0, 3, 2, 5, 4, 7, 6]
    lapsing = KIND.simulated_rater(D, 0.0, 0.4, {}, random_state=1)
    far = np.array([KIND.value_of(o) for o in lapsing.answer([(0, 19)] * 4000)])
    assert far.mean() == pytest.approx(0.2, abs=0.03)  # a lapse answers at random: "same" on half of them


def test_the_simulated_crowd_answers_values_and_simulate_setup_writes_a_study(tmp_path):
    D = np.array([[0.0, 0.05, 0.9], [0.05, 0.0, 0.9], [0.9, 0.9, 0.0]])
    truth = Truth(["a", "b", "c"], D, source="test")
    exact = Rater(truth, noise_model(truth, noise=0.0, lapse=0.0)[0], careless=False, rng=random.Random(1))

    def question(x, y):
        return {"kind": "same_different", "items": [{"handle": x, "id": x}, {"handle": y, "id": y}]}

    assert exact.answer(question("a", "b")) == {"value": SAME}
    assert exact.answer(question("a", "c")) == {"value": DIFFERENT}
    assert exact.answer(question("c", "c")) == {"value": SAME}  # an item against its copy
    careless = Rater(truth, noise_model(truth, noise=0.0, lapse=0.0)[0], careless=True, rng=random.Random(2))
    values = [careless.answer(question("a", "c"))["value"] for _ in range(2000)]
    assert np.mean(values) == pytest.approx(0.5, abs=0.05)
    assert "rating" not in study_config("s", kind="same_different")
    result = CliRunner().invoke(main, ["simulate-setup", "clusters:3x4", "--out", str(tmp_path / "sd"),
                                       "--kind", "same_different"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    config = load_config_file(tmp_path / "sd" / "study.yaml")
    assert config.question_kind == "same_different" and config.algorithms[0].algorithm == "pooled"
    # ANNTri's samples are 0 or 1 here: the noise scale of 0/1 samples, not a fine slider's
    result = CliRunner().invoke(main, ["simulate-setup", "clusters:3x4", "--out", str(tmp_path / "sda"),
                                       "--kind", "same_different", "--algorithm", "anntri"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert load_config_file(tmp_path / "sda" / "study.yaml").algorithms[0].params["sigma"] == 0.5


# ------------------------------------------------------------------------------------------ pair shapes
def test_a_pair_planner_whose_graph_counts_no_samples_keeps_its_edges(monkeypatch):
    """A graph built by NeighborGraph.from_neighbors fills zero samples: only an entry that counts samples
    (``counts_samples``) has its untouched edges read as guesses (the exports, the map and the dashboard leave
    those out), so a pair planner added as the docs say exports its edges."""
    from dataclasses import replace

    from workers.jobs import learners

    config = _config("g", algorithms=[{"algorithm": "pooled"}])
    learner = Learner.new(config.algorithms[0], config, 4)
    graph = NeighborGraph.from_neighbors([[1], [0], [3], [2]])
    assert learner.entry.counts_samples and learner.guessed(graph).all()
    uncounted = {**learners.ALGORITHMS, "pooled": replace(learners.ALGORITHMS["pooled"], counts_samples=False)}
    monkeypatch.setattr(learners, "ALGORITHMS", uncounted)
    assert not learner.entry.counts_samples and not learner.guessed(graph).any()


def test_random_pairs_get_no_rounds_caption_they_can_never_draw(researcher_client, conn):
    """Random works in no rounds (its entry's ``rounds``): its plot is its answers, and so is its caption."""
    config = _config("cap", algorithms=[{"algorithm": "random", "label": "random"},
                                        {"algorithm": "anntri", "label": "anntri"}])
    study = create_study(conn, config, colour_items(N), study_id="cap")
    page = researcher_client.get(f"/studies/{study}?tab=learning").get_data(as_text=True)
    captions = {label: page.split(f'class="alg-plot" data-label="{label}"', 1)[1].split("</figcaption>", 1)[0]
                for label in ("random", "anntri")}
    assert "rounds certified" not in captions["random"] and "answers" in captions["random"]
    assert "rounds certified / open / waiting" in captions["anntri"]


def test_proxima_simulate_runs_a_same_different_study_through_a_served_api(start_serve, redis_url, conn, tmp_path,
                                                                            monkeypatch):
    """``proxima simulate-setup --kind same_different --create`` then ``proxima simulate``: simulated raters
    answer every pair with 1 or 0 over HTTP, and none is refused."""
    import re

    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    runner = CliRunner()
    result = runner.invoke(main, ["simulate-setup", "clusters:3x4", "--out", str(tmp_path / "sd"), "--kind",
                                  "same_different", "--create", "sd-sim"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    oracle = re.search(r"--oracle (\S+)", result.output).group(1)
    # (the crowd answers faster than people, all from one address: exempt from the per-session rate limit)
    base = start_serve(env={"PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES": "127.0.0.1"})
    result = runner.invoke(main, ["simulate", "sd-sim", "--url", base, "--oracle", oracle, "--raters", "3",
                                  "--think", "0", "--answers", "60", "--careless", "0.3", "--seed", "4"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Answers accepted: 60" in result.output and "Errors: none" in result.output, result.output
    log = read_answers(conn, "sd-sim")
    assert len(log) == 60 and {a.kind for a in log} == {"same_different"} and {a.value for a in log} <= {0, 1}


def test_a_backups_check_takes_different_as_0_and_refuses_other_values_in_words():
    """A restore checks each answer as the live path would: a same_different 0 is no rating off a 1-5 scale."""
    from workers.store.answers import answer_problem

    def logged(value):
        return Answer(id="1-0", qid="q1", rater="r", kind="same_different", head=2, a=9, b=-1, choice=-1,
                      algorithm="pooled", fallback=False, issued_at=0.0, answered_at=1.0, response_ms=900,
                      shown=(2, 9), picks=(), value=value)

    config = _config("s")  # its rating scale the default 1-5, on which 0 would be off the scale
    assert answer_problem(logged(DIFFERENT), N, config) is None
    assert answer_problem(logged(SAME), N, config) is None
    assert "1 (the same) or 0 (different); got 3" in answer_problem(logged(3), N, config)
