"""Simulated crowds: `proxima simulate` drives a real `proxima serve` (gunicorn + RQ worker + Redis)."""
from __future__ import annotations

import json
import re
from collections import defaultdict

import numpy as np
import pytest
import redis
from click.testing import CliRunner
from helpers import EGG_ANSWERS, serving_on_own_redis, shared_data_file, wait_for

from engine.anntri import planner_from_state
from simulation.crowd import (
    Crowd,
    NoiseModel,
    Rater,
    SimulationError,
    Truth,
    graph_accuracy,
    load_truth,
    snap,
    write_setup,
)
from webapp import _secret_key
from webapp.cli import main
from webapp.cli.embedded import free_port
from webapp.handles import identifier, shown_index
from webapp.tokens import verify_question
from workers.store import keys
from workers.store.answers import iter_answers
from workers.store.config import StudyConfig, load_config_file
from workers.store.engine_state import load as load_state
from workers.store.studies import create_study, items_from_csv


# ---------------------------------------------------------------------------- the live server
@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """One `proxima serve` (2 web workers, 1 RQ worker) on its own Redis for the whole module."""
    inst = tmp_path_factory.mktemp("sim-instance")
    with serving_on_own_redis(inst) as (serve, url):
        yield {"base": serve.base, "redis_url": url, "instance": inst}


@pytest.fixture
def live(server, monkeypatch):
    monkeypatch.setenv("REDIS_URL", server["redis_url"])
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(server["instance"]))
    client = redis.Redis.from_url(server["redis_url"])
    yield {**server, "conn": client}
    client.close()


def simulate(*args):
    return CliRunner().invoke(main, ["simulate", *map(str, args)], catch_exceptions=False)


def points_file(tmp_path, points, name="truth.csv"):
    path = tmp_path / name
    rows = ["id,x1"] + [f"p{i},{x}" for i, x in enumerate(points)]
    path.write_text("\n".join(rows) + "\n")
    return path


# Four well-separated pairs on a line: every item's nearest neighbour is its partner.
PAIRS = [0.0, 1.0, 10.0, 11.0, 20.0, 21.0, 30.0, 31.0]


def make_study(conn, study_id, points, kind="triplet", algorithm="anntri", params=None, **config):
    config = StudyConfig.from_dict({"name": study_id, "question_kind": kind,
                                    "algorithms": [{"algorithm": algorithm, "params": params or {}}],
                                    "random_state": 0, **config})
    from workers.store.queue import schedule_update
    from workers.store.studies import Item

    items = [Item(id=f"p{i}", kind="text", text=f"point {i}") for i in range(len(points))]
    create_study(conn, config, items, study_id=study_id)
    schedule_update(conn, study_id)
    return study_id


def engine_samples(conn, study_id, label="anntri") -> int:
    """Distance samples the study's ANNTri engine has applied (from its saved state)."""
    state = load_state(conn, study_id, label)
    return 0 if state is None else planner_from_state(state).progress()["samples"]


def accepted_line(output: str) -> int:
    return int(re.search(r"Answers accepted: (\d+)", output).group(1))


# ---------------------------------------------------------------------------- through the server
def test_every_accepted_answer_is_in_the_log_exactly_once(live, tmp_path):
    study = make_study(live["conn"], "sim-log", PAIRS, params={"delta": 0.2, "sigma": 0.5, "window": 4})
    truth = points_file(tmp_path, PAIRS)
    log = tmp_path / "sent.jsonl"
    result = simulate(study, "--url", live["base"], "--oracle", f"points:{truth}", "--raters", 10, "--think", 0,
                      "--answers", 120, "--seed", 3, "--log", log, "--progress-every", 1, "--wait", 30)
    assert result.exit_code == 0, result.output
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    logged = list(iter_answers(live["conn"], study))
    assert accepted_line(result.output) == len(sent) == len(logged) == 120
    assert sorted(s["answer_id"] for s in sent) == sorted(a.id for a in logged)
    assert len({a.qid for a in logged}) == len(logged)  # no question answered twice
    by_id = {a.id: a for a in logged}
    secret = _secret_key(str(live["instance"]))
    for s in sent:  # what each rater sent is what the log holds
        stored = by_id[s["answer_id"]]
        assert stored.rater == s["rater"] and stored.choice == shown_index(secret, study, s["choice"])
        assert [f"p{i}" for i in stored.items] == s["items"]
    assert "Errors: none" in result.output
    assert re.search(r"nearest-neighbour accuracy \d\.\d{3} over 8 items", result.output), result.output
    # the engine applied every logged answer once, but the held-out ones (never learned from)
    heldout = sum(a.heldout for a in logged)
    assert engine_samples(live["conn"], study) == 120 - heldout


def test_twenty_raters_never_hold_the_same_question_at_once(live, tmp_path):
    study = make_study(live["conn"], "sim-concurrent", PAIRS * 2, params={"delta": 0.1, "sigma": 0.5, "window": 16})
    truth = load_truth(f"points:{points_file(tmp_path, PAIRS * 2)}")
    secret = _secret_key(str(live["instance"]))  # the tokens are sealed: open them as the server does
    # the simulated people read the handles of what they are shown with the server's key
    crowd = Crowd(live["base"], study, truth, NoiseModel(sigma=0.1), raters=20, think=0.005, max_answers=300,
                  seed=1, identify=identifier(secret, study, [f"p{i}" for i in range(len(PAIRS) * 2)]))
    report = crowd.run()
    assert report.answers == 300 and not report.errors, report.errors
    spans = defaultdict(list)
    for rater, token, received, released in report.held:
        qid = verify_question(secret, token, max_age=10**6)["q"]["qid"]
        spans[qid].append((received, released, rater))
    assert len(spans) >= 300
    for qid, held in spans.items():
        held.sort()
        for (_, end, first), (start, _, second) in zip(held, held[1:], strict=False):
            assert start >= end, f"question {qid} was pending at {first} and {second} at once"
    logged = list(iter_answers(live["conn"], study))
    assert len(logged) == 300 and len({a.qid for a in logged}) == 300
    heldout = sum(a.heldout for a in logged)  # never learned from
    wait_for(lambda: engine_samples(live["conn"], study) == 300 - heldout, timeout=30)


def test_a_careless_share_answers_at_random(live, tmp_path):
    points = [0.0, 2.0, 3.0, 7.0, 11.0, 12.0]
    study = make_study(live["conn"], "sim-careless", points, kind="rating",
                       rating={"min": 0, "max": 100, "step": 1, "widget": "slider"})
    truth_file = points_file(tmp_path, points)
    log = tmp_path / "sent.jsonl"
    result = simulate(study, "--url", live["base"], "--oracle", f"points:{truth_file}", "--raters", 10,
                      "--careless", 0.4, "--noise", 0, "--think", 0, "--answers", 150, "--seed", 5, "--log", log,
                      "--no-accuracy", "--prefix", "sim")
    assert result.exit_code == 0, result.output
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    careless = {s["rater"] for s in sent if s["careless"]}
    assert careless <= {"sim-0", "sim-1", "sim-2", "sim-3"} and len(careless) >= 3
    truth = load_truth(f"points:{truth_file}")
    scale = {"min": 0, "max": 100, "step": 1}

    def exact(s):
        i, j = truth.positions(s["items"])
        return snap(100 * (1 - truth.distances[i, j]), scale)

    honest = [s for s in sent if not s["careless"]]
    sloppy = [s for s in sent if s["careless"]]
    assert honest and all(s["value"] == exact(s) for s in honest)
    assert sum(s["value"] != exact(s) for s in sloppy) > 0.8 * len(sloppy)
    logged = {a.id: a for a in iter_answers(live["conn"], study)}
    assert all(logged[s["answer_id"]].kind == "rating" for s in sent)


def test_a_rating_study_runs_until_complete_and_learns_the_exact_graph(live, tmp_path):
    study = make_study(live["conn"], "sim-complete", PAIRS, kind="rating",
                       params={"delta": 0.2, "sigma": 0.05, "window": 8},
                       rating={"min": 0, "max": 1, "step": None, "widget": "slider"})
    truth = points_file(tmp_path, PAIRS)
    result = simulate(study, "--url", live["base"], "--oracle", f"points:{truth}", "--raters", 8, "--think", 0,
                      "--noise", 0.02, "--answers", 30000, "--seed", 2, "--progress-every", 2)
    assert result.exit_code == 0, result.output
    # every rater was sent away, the study's completion among the reasons (under load a rater may have
    # been sent away for another reason first; the reasons are listed in name order). The cap is far
    # above what ANNTri needs (~2,000-4,000 here): raters answer faster than the worker's passes certify,
    # so the answers sent before the completion is seen vary with the machine's load.
    assert re.search(r"the server stopped asking: .*study_complete", result.output), result.output
    assert accepted_line(result.output) < 30000
    assert "nearest-neighbour accuracy 1.000 over 8 items" in result.output
    assert "certified 100%" in result.output


def test_an_unknown_study_is_a_clear_error(live, tmp_path):
    truth = points_file(tmp_path, PAIRS)
    result = simulate("no-such-study", "--url", live["base"], "--oracle", f"points:{truth}", "--answers", 5)
    assert result.exit_code != 0
    assert "no study 'no-such-study'" in result.output


def test_items_the_truth_does_not_know_are_a_clear_error(live, tmp_path):
    study = make_study(live["conn"], "sim-mismatch", PAIRS)
    truth = tmp_path / "other.csv"
    truth.write_text("id,x\na,0\nb,1\nc,2\n")
    result = simulate(study, "--url", live["base"], "--oracle", f"points:{truth}", "--answers", 5)
    assert result.exit_code != 0
    assert "not in the truth" in result.output and "p0" in result.output


# ---------------------------------------------------------------------------- without a server
@pytest.mark.parametrize("spec,message", [
    ("nonsense", "unknown oracle 'nonsense'"),
    ("points", "needs a file: points:FILE.csv"),
    ("points:{dir}/missing.csv", "does not exist"),
    ("points:{dir}/words.csv", "every value must be a number"),
    ("points:{dir}/noid.csv", "header must be id,x1,x2"),
    ("points:{dir}/dupes.csv", "repeated: a"),
    ("matrix:{dir}/ragged.csv", "3 distances for 2 items"),
    ("matrix:{dir}/asym.csv", "must be symmetric"),
    ("matrix:{dir}/short.csv", "must be n x n"),
])
def test_bad_oracle_specs_say_what_is_wrong(tmp_path, spec, message):
    (tmp_path / "words.csv").write_text("id,x1\na,zero\nb,1\nc,2\n")
    (tmp_path / "noid.csv").write_text("x1,x2\n0,1\n1,2\n2,3\n")
    (tmp_path / "dupes.csv").write_text("id,x1\na,0\na,1\nc,2\n")
    (tmp_path / "ragged.csv").write_text("a,b\n0,1,2\n1,0\n")
    (tmp_path / "asym.csv").write_text("a,b,c\n0,1,2\n5,0,1\n2,1,0\n")
    (tmp_path / "short.csv").write_text("a,b,c\n0,1,2\n1,0,1\n")
    result = simulate("any-study", "--oracle", spec.format(dir=tmp_path), "--url", "http://127.0.0.1:9")
    assert result.exit_code != 0
    assert message in result.output, result.output
    assert "Traceback" not in result.output


def test_an_unreachable_server_is_a_clear_error(tmp_path):
    truth = points_file(tmp_path, PAIRS)
    result = simulate("s", "--oracle", f"points:{truth}", "--url", f"http://127.0.0.1:{free_port()}")
    assert result.exit_code != 0 and "cannot reach a Proxima server" in result.output


def test_matrix_and_points_truths_are_scaled_to_unit_distances(tmp_path):
    (tmp_path / "m.csv").write_text(",a,b,c\na,0,2,4\nb,2,0,3\nc,4,3,0\n")
    truth = load_truth(f"matrix:{tmp_path / 'm.csv'}")
    assert truth.ids == ["a", "b", "c"] and truth.distances[0, 2] == 1.0 and truth.distances[0, 1] == 0.5
    truth = load_truth(f"points:{points_file(tmp_path, [0, 3, 4])}")
    assert truth.distances[1, 2] == pytest.approx(0.25)


def test_ratings_snap_to_the_scale_and_higher_means_more_similar():
    assert snap(3.4, {"min": 1, "max": 5, "step": 1}) == 3
    assert snap(7.0, {"min": 1, "max": 5, "step": 1}) == 5
    assert snap(0.37, {"min": 0, "max": 1, "step": 0.25}) == 0.25
    assert snap(0.37, {"min": 0, "max": 1, "step": None}) == 0.37
    truth = Truth(["a", "b", "c"], np.array([[0, 0.2, 1], [0.2, 0, 0.9], [1, 0.9, 0]]), source="test")
    rater = Rater(truth, NoiseModel(), careless=False, rng=__import__("random").Random(0))
    item = {"a": {"handle": 0, "id": "a"}, "b": {"handle": 1, "id": "b"}, "c": {"handle": 2, "id": "c"}}
    scale = {"min": 1, "max": 5, "step": 1}
    assert rater.answer({"kind": "rating", "items": [item["a"], item["b"]], "scale": scale}) == {"value": 4}
    assert rater.answer({"kind": "rating", "items": [item["a"], item["c"]], "scale": scale}) == {"value": 1}
    assert rater.answer({"kind": "triplet", "head": item["a"], "candidates": [item["c"], item["b"]]}) == {"choice": 1}
    with pytest.raises(SimulationError, match="not know"):
        rater.answer({"kind": "triplet", "head": {"handle": 0, "id": "zz"}, "candidates": [item["c"], item["b"]]})


def test_graph_accuracy_counts_ties_in_the_truth_as_correct():
    # b is equally close to a and c: either answer is right
    truth = Truth(["a", "b", "c", "d"], np.array([[0, 1, 2, 5], [1, 0, 1, 4], [2, 1, 0, 3], [5, 4, 3, 0]]) / 5,
                  source="test")
    edge = {"rank": 1, "certified": True}
    graph = {"k": 1, "items": ["a", "b", "c", "d"], "edges": [
        {"source": "a", "target": "b", **edge}, {"source": "b", "target": "c", **edge},
        {"source": "c", "target": "d", **edge}]}  # c's answer is wrong, d has none
    score = graph_accuracy(graph, truth)
    assert score["accuracy"] == 0.5 and score["certified"] == 0.75 and score["knn_accuracy"] == 0.5
    # k = 2: a's two nearest are b and c; b's are a and c (tied); c has one edge only; d has none
    graph = {"k": 2, "items": ["a", "b", "c", "d"], "edges": [
        {"source": "a", "target": "b", "rank": 1}, {"source": "a", "target": "c", "rank": 2},
        {"source": "b", "target": "c", "rank": 1}, {"source": "b", "target": "a", "rank": 2},
        {"source": "c", "target": "b", "rank": 1}]}
    score = graph_accuracy(graph, truth)
    assert score["accuracy"] == 0.75 and score["knn_accuracy"] == 0.5 and score["certified"] == 0


def test_setup_writes_a_study_proxima_create_accepts(tmp_path):
    written = write_setup("clusters:3x4", tmp_path / "out", kind="rating")
    config = load_config_file(written["config"])
    assert config.question_kind == "rating" and config.algorithms[0].algorithm == "anntri"
    items = items_from_csv(written["items"])
    assert len(items) == 12 and items[0].label == "cluster 0"
    truth = load_truth(written["oracle"])
    assert truth.ids == [item.id for item in items]
    result = CliRunner().invoke(main, ["simulate-setup", "clusters:2", "--out", str(tmp_path / "bad")])
    assert result.exit_code != 0 and "clusters:10x10" in result.output


def test_eggs_raters_agree_with_the_truth_about_as_often_as_people():
    shared_data_file(EGG_ANSWERS)
    from simulation.datasets import load_alien_eggs

    truth = load_truth("eggs")
    assert truth.n_items == 300 and truth.ids[0] == "i0002" and truth.logistic_scale > 0
    eggs = load_alien_eggs()
    rater = Rater(truth, NoiseModel(logistic_scale=truth.logistic_scale), careless=False,
                  rng=__import__("random").Random(0))
    D = truth.distances
    agree = 0
    for head, a, b in eggs.triplets:  # the questions people were asked, either way round
        question = {"kind": "triplet", "head": {"handle": head, "id": truth.ids[head]},
                    "candidates": [{"handle": a, "id": truth.ids[a]}, {"handle": b, "id": truth.ids[b]}]}
        choice = rater.answer(question)["choice"]
        other = b if choice == a else a
        agree += D[head, choice] <= D[head, other]
    # people agree with the 1-D truth on 86.2% of these questions
    assert agree / len(eggs.triplets) == pytest.approx(0.862, abs=0.02)


def test_setup_then_simulate_a_triplet_study_from_the_command_line(live, tmp_path):
    runner = CliRunner()
    result = runner.invoke(main, ["simulate-setup", "clusters:3x3", "--out", str(tmp_path / "c"), "--kind", "triplet",
                                  "--create", "sim-setup"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "Created study sim-setup with 9 items" in result.output
    # a study its simulated raters answer: the warnings about paying people are counted, not spelled out
    assert "Warning:" not in result.output and "warning(s) about paying people left out" in result.output
    oracle = re.search(r"--oracle (\S+)", result.output).group(1)
    result = simulate("sim-setup", "--url", live["base"], "--oracle", oracle, "--raters", 5, "--think", 0,
                      "--answers", 40, "--careless", 0.2, "--seed", 4)
    assert result.exit_code == 0, result.output
    assert accepted_line(result.output) == 40 and "Errors: none" in result.output
    assert len(list(iter_answers(live["conn"], "sim-setup"))) == 40
    assert "nearest-neighbour accuracy" in result.output


def test_human_noise_model_lapses_and_defaults():
    import random

    from simulation.crowd import noise_model
    from simulation.oracles import HUMAN_LAPSE, HUMAN_SCALE

    truth = Truth(["a", "b", "c"], np.array([[0.0, 0.1, 1.0], [0.1, 0.0, 0.9], [1.0, 0.9, 0.0]]), source="test")
    model, text = noise_model(truth)
    assert (model.logistic_scale, model.lapse) == (HUMAN_SCALE, HUMAN_LAPSE) and "lapse" in text
    model, _ = noise_model(truth, noise=0.0)
    assert model.lapse == HUMAN_LAPSE and model.logistic_scale == 0.0
    # noise-free distances, every answer a lapse: a coin flip; no lapses: always the truth
    question = {"kind": "triplet", "head": {"handle": 0, "id": "a"},
                "candidates": [{"handle": 1, "id": "b"}, {"handle": 2, "id": "c"}]}
    for lapse, low, high in ((1.0, 0.45, 0.55), (0.0, 1.0, 1.0)):
        rater = Rater(truth, noise_model(truth, noise=0.0, lapse=lapse)[0], careless=False, rng=random.Random(0))
        share = np.mean([rater.answer(question)["choice"] == 1 for _ in range(4000)])
        assert low <= share <= high


def test_simulated_triplets_follow_the_logistic_and_lapse_model_of_engine_oracles():
    """--noise is the human model's logistic scale, not a Gaussian sigma: a gap of one scale is
    won with probability λ/2 + (1 − λ)·σ(1), a near tie about half the time."""
    import random

    from simulation.crowd import noise_model
    from simulation.oracles import TripletOracle

    D = np.array([[0.0, 0.2, 0.3, 0.2001], [0.2, 0.0, 0.5, 0.5], [0.3, 0.5, 0.0, 0.5], [0.2001, 0.5, 0.5, 0.0]])
    truth = Truth(["h", "a", "b", "c"], D, source="test")
    model, text = noise_model(truth, noise=0.1, lapse=0.2)
    assert "logistic scale 0.1000" in text and "lapse 0.200" in text
    rater = Rater(truth, model, careless=False, rng=random.Random(3))
    from engine.kinds import get_kind

    oracle = rater.oracle(get_kind("triplet"))
    assert isinstance(oracle, TripletOracle) and oracle.model == "human"

    def share(a, b, n=6000):
        q = {"kind": "triplet", "head": {"handle": 0, "id": "h"},
             "candidates": [{"handle": 1, "id": a}, {"handle": 2, "id": b}]}
        return np.mean([rater.answer(q)["choice"] == 1 for _ in range(n)])

    expected = 0.1 + 0.8 / (1 + np.exp(-1.0))  # gap 0.1 = one scale
    assert share("a", "b") == pytest.approx(expected, abs=0.025)
    assert share("a", "c") == pytest.approx(0.5, abs=0.025)


def test_human_constants_match_the_alien_egg_fit():
    shared_data_file(EGG_ANSWERS)
    from simulation.oracles import HUMAN_LAPSE, HUMAN_SCALE

    truth = load_truth("eggs")
    assert truth.logistic_scale == pytest.approx(HUMAN_SCALE, abs=0.002)
    assert truth.lapse == pytest.approx(HUMAN_LAPSE, abs=0.002)


@pytest.mark.parametrize("kind, question", [
    ("odd_one_out", {"kind": "odd_one_out", "items": [{"handle": 0, "id": "h"}, {"handle": 1, "id": "a"},
                                                      {"handle": 2, "id": "b"}]}),
    ("rank", {"kind": "rank", "select": 2, "head": {"handle": 0, "id": "h"},
              "candidates": [{"handle": 1, "id": "a"}, {"handle": 2, "id": "b"}, {"handle": 3, "id": "c"}]}),
])
def test_simulated_raters_answer_screens_with_engine_oracles_noise_model(kind, question):
    """A simulated rater answers odd-one-out and grid screens with the engine's simulated rater of the
    kind: without noise the truth (b is the odd one of h, a, b; a then c are nearest h), with lapses
    a random answer about as often as the lapse rate says."""
    import random

    from simulation.crowd import noise_model
    from simulation.oracles import OddOneOutOracle, RankOracle

    D = np.array([[0.0, 0.1, 0.9, 0.3], [0.1, 0.0, 0.9, 0.4], [0.9, 0.9, 0.0, 0.8], [0.3, 0.4, 0.8, 0.0]])
    truth = Truth(["h", "a", "b", "c"], D, source="test")
    exact = Rater(truth, noise_model(truth, noise=0.0, lapse=0.0)[0], careless=False, rng=random.Random(1))
    answer = exact.answer(question)
    assert answer == ({"choice": 2} if kind == "odd_one_out" else {"picks": [1, 3]})
    from engine.kinds import get_kind

    assert isinstance(exact.oracle(get_kind(kind), 2 if kind == "rank" else 1), (OddOneOutOracle, RankOracle))
    lapsing = Rater(truth, noise_model(truth, noise=0.0, lapse=0.3)[0], careless=False, rng=random.Random(2))
    answers = [lapsing.answer(question) for _ in range(3000)]
    first = [a["choice"] if "choice" in a else a["picks"][0] for a in answers]
    # a lapse picks uniformly among the options: right 1 - λ + λ/3 of the time
    assert np.mean([f == (2 if kind == "odd_one_out" else 1) for f in first]) == pytest.approx(0.8, abs=0.03)


# ------------------------------------------------ a second run on a study with consent (issue 28, item 7)
def test_simulate_twice_on_a_study_with_consent_accepts_answers_both_times(live, tmp_path):
    study = make_study(live["conn"], "sim-consent", PAIRS, params={"delta": 0.2, "sigma": 0.5, "window": 4},
                       consent="You agree to take part.", limits={"max_questions_per_rater": 5})
    truth = points_file(tmp_path, PAIRS)
    args = ("--url", live["base"], "--oracle", f"points:{truth}", "--raters", 4, "--think", 0, "--answers", 20,
            "--no-accuracy")
    first = simulate(study, *args)
    second = simulate(study, *args)
    for result in (first, second):
        assert result.exit_code == 0, result.output
        assert accepted_line(result.output) == 20, result.output
        assert "Errors: none" in result.output, result.output
    prefixes = [re.search(r"rater ids (\S+)-0 to", r.output).group(1) for r in (first, second)]
    assert prefixes[0] != prefixes[1] and all(p.startswith("sim-") for p in prefixes)
    third = simulate(study, *args, "--prefix", "pilot2")
    assert third.exit_code == 0 and accepted_line(third.output) == 20 and "Errors: none" in third.output
    raters = {r.decode() for r in live["conn"].smembers(keys.raters(study))}
    assert len(raters) == 12 and {r.rsplit("-", 1)[0] for r in raters} == {*prefixes, "pilot2"}
    bad = simulate(study, *args, "--prefix", "no spaces")
    assert bad.exit_code == 2 and "Invalid value for '--prefix'" in bad.output
