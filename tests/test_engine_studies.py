"""Studies that learn through the live platform: ANNTri with rating and triplet-derived questions,
comparison forests, mixed studies sharing raters, budgets, pool pruning and the graph exports.

Simulated raters answer through the JSON API from a known 1-D truth; the queued RQ jobs run in
this process (SimpleWorker), exactly the code a worker process runs.
"""
from __future__ import annotations

import io
import json
import random

import networkx as nx
import numpy as np
import pytest
from helpers import NO_CHECKS, fetch_question, index_of, run_worker, wire_body

from workers.jobs.learners import Learner
from workers.jobs.update_pass import apply_new_answers
from workers.results.exports import export, import_triplets, nn_graph
from workers.store import engine_state, keys
from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.queue import get_queue
from workers.store.studies import Item, create_study, get_study

# three tight pairs on a line: every item's nearest neighbour is its pair-mate
POSITIONS = [0.0, 0.05, 1.0, 1.05, 2.0, 2.05]
TRUE_NN = [1, 0, 3, 2, 5, 4]


def line_items(positions=POSITIONS):
    return [Item(id=f"p{i}", kind="text", text=f"point {i}", position=(x,), label="ab"[i % 2])
            for i, x in enumerate(positions)]


def distance(i, j, positions=POSITIONS):
    return abs(positions[i] - positions[j]) / (max(positions) - min(positions))


def truthful(rng, noise=0.0, positions=POSITIONS):
    """A rater who answers from the truth: ratings with Gaussian noise, triplets by the closer item."""
    def distance(i, j):
        return abs(positions[i] - positions[j]) / (max(positions) - min(positions))

    def respond(q):
        if q["kind"] == "rating":
            i, j = (index_of(item) for item in q["items"])
            scale = q["scale"]
            similarity = 1.0 - distance(i, j) + rng.normal(0, noise)
            value = scale["min"] + float(np.clip(similarity, 0, 1)) * (scale["max"] - scale["min"])
            step = scale["step"]
            if step:
                value = scale["min"] + round((value - scale["min"]) / step) * step
            return {"value": value}
        head = index_of(q["head"])
        a, b = (index_of(c) for c in q["candidates"])
        return {"choice": a if distance(head, a) < distance(head, b) else b}
    return respond


def drive(app, conn, study_id, respond, max_answers, raters=3, update_every=None):
    """Raters answer in turn until the study is complete or ``max_answers``; returns answers sent.

    An update runs as soon as the web side queues one (as an idle worker would: the job's own
    body, without RQ's per-job bookkeeping), or only every ``update_every`` answers."""
    queue = get_queue(conn)
    clients = [app.test_client() for _ in range(raters)]
    pending = [None] * raters
    sent = 0
    while sent < max_answers:
        for r, client in enumerate(clients):
            question = pending[r]
            if question is None:
                response = client.get(f"/api/studies/{study_id}/questions/next")
                if response.status_code == 409:
                    assert response.get_json()["error"]["code"] == "study_complete"
                    return sent
                question = response.get_json()["question"]
            response = client.post(f"/api/studies/{study_id}/answers",
                                   json=wire_body(question, {"token": question["token"], **respond(question)}))
            assert response.status_code == 201, response.get_json()
            pending[r] = response.get_json()["next"]
            sent += 1
        if (queue.count if update_every is None else sent % update_every < raters):
            queue.empty()
            conn.delete(keys.update_scheduled(study_id))
            apply_new_answers(conn, study_id)
    return sent


def make_study(conn, study_id, **config):
    return create_study(conn, StudyConfig.from_dict({**NO_CHECKS, "name": study_id, "random_state": 1, "pool_size": 6,
                                                     **config}), line_items(), study_id=study_id)


def learned_neighbors(conn, study_id, algorithm=None):
    doc = nn_graph(conn, study_id, algorithm)
    nn = [None] * len(doc["items"])
    for edge in doc["edges"]:
        if edge["rank"] == 1:
            nn[edge["source_index"]] = edge["target_index"]
    return nn, doc


def test_anntri_rating_study_learns_and_certifies_the_exact_graph(app, conn):
    sid = make_study(conn, "rated", question_kind="rating",
                     rating={"min": 0, "max": 100, "step": None, "widget": "slider"},
                     algorithms=[{"algorithm": "anntri", "params": {"sigma": 0.1, "delta": 0.1}}])
    sent = drive(app, conn, sid, truthful(np.random.default_rng(0), noise=0.05), max_answers=1500)
    run_worker(conn)
    nn, doc = learned_neighbors(conn, sid)
    assert nn == TRUE_NN
    assert all(edge["certified"] for edge in doc["edges"])
    assert sent < 1500  # the study said it was complete before the cap
    assert all(edge["lower"] <= edge["estimate"] <= edge["upper"] for edge in doc["edges"])
    # no answer lost or double-counted: the engine's samples equal the log's answers
    state = engine_state.load(conn, sid, "anntri")
    assert int(state["count"].sum()) // 2 == len(read_answers(conn, sid)) == sent
    stats = app.test_client().get(f"/api/studies/{sid}/questions/next").get_json()
    assert stats["error"]["code"] == "study_complete"


def test_anntri_triplet_derived_study_learns_the_exact_graph(app, conn):
    sid = make_study(conn, "derived", algorithms=[{"algorithm": "anntri", "params": {"bound": "kl"}}])
    # a busy worker's pace: a pass every 12 answers (4 rounds of the 3 raters), not after each round: ~2,700
    # answers either way, and 1,000 passes were half the test's time (the idle worker's pace: the rating test)
    sent = drive(app, conn, sid, truthful(np.random.default_rng(1)), max_answers=3000, update_every=12)
    run_worker(conn)
    nn, doc = learned_neighbors(conn, sid)
    assert nn == TRUE_NN and all(edge["certified"] for edge in doc["edges"])
    logged = read_answers(conn, sid)
    assert len(logged) == sent
    for a in logged:  # each answer is the triplet for the pair (head, probe) with a third item
        assert a.kind == "triplet" and a.probe in (a.a, a.b) and a.head not in (a.a, a.b)


def test_forest_study_builds_every_tree_then_stops_asking(app, conn):
    sid = make_study(conn, "forest", algorithms=[{"algorithm": "comparison_forest",
                                                  "params": {"n_trees": 3, "supervised": True}}])
    drive(app, conn, sid, truthful(np.random.default_rng(2)), max_answers=2000)
    run_worker(conn)
    progress = json.loads(conn.hget(keys.engine_stats(sid), "summary"))["comparison_forest"]["progress"]
    assert progress["trees_built"] == 3 and progress["done"]
    doc = json.loads("".join(export(conn, sid, "forest", "json").chunks))
    assert doc["kind"] == "comparison_forest" and len(doc["trees"]) == 3 and doc["items"][0] == "p0"
    for tree in doc["trees"]:  # supervised pivots: every split separates the two labels' items
        for node in tree["nodes"]:
            if node.get("pivots"):
                assert node["pivots"][0] % 2 != node["pivots"][1] % 2


def test_a_mixed_study_splits_questions_by_share(app, conn, researcher_client):
    sid = make_study(conn, "mixed", algorithms=[{"algorithm": "anntri", "share": 3, "question_kind": "rating"},
                                                {"algorithm": "random", "share": 1}])
    apply_new_answers(conn, sid)
    client = app.test_client()
    kinds = {"anntri": 0, "random": 0}
    for _ in range(400):
        q = fetch_question(client, sid)
        token_question = q["kind"]
        kinds["anntri" if token_question == "rating" else "random"] += 1
    assert abs(kinds["anntri"] / 400 - 0.75) < 0.09  # 4 standard deviations
    stats = researcher_client.get(f"/api/studies/{sid}/stats").get_json()
    by_label = {a["label"]: a for a in stats["algorithms"]}
    assert by_label["anntri"]["questions_served"] == kinds["anntri"]
    assert by_label["random"]["questions_served"] == kinds["random"]


def test_answers_are_routed_to_the_algorithm_that_asked(app, conn):
    sid = make_study(conn, "routed", algorithms=[{"algorithm": "anntri", "question_kind": "rating"},
                                                 {"algorithm": "random_triplets"}])
    drive(app, conn, sid, truthful(np.random.default_rng(3)), max_answers=60)
    run_worker(conn)
    logged = read_answers(conn, sid)
    ratings = sum(a.kind == "rating" for a in logged)
    anntri_state = engine_state.load(conn, sid, "anntri")
    triplet_state = engine_state.load(conn, sid, "random_triplets")
    assert int(anntri_state["count"].sum()) // 2 == ratings
    assert triplet_state["n_answers"] == len(logged) - ratings
    assert {a.algorithm for a in logged} == {"anntri", "random_triplets"}


def test_rating_answers_are_checked_against_the_scale(app, conn):
    sid = make_study(conn, "scale", question_kind="rating", rating={"min": 1, "max": 5, "step": 1})
    client = app.test_client()
    q = fetch_question(client, sid)
    assert q["kind"] == "rating" and q["scale"]["widget"] == "buttons" and len(q["items"]) == 2
    post = lambda body: client.post(f"/api/studies/{sid}/answers", json={"token": q["token"], **body})  # noqa: E731
    for body, code in (({"value": 6}, "value_out_of_range"), ({"value": 2.5}, "value_out_of_range"),
                       ({}, "malformed_answer"), ({"choice": q["items"][0]["handle"]}, "malformed_answer"),
                       ({"value": "3"}, "malformed_answer")):
        response = post(body)
        assert response.status_code == 400 and response.get_json()["error"]["code"] == code
    assert read_answers(conn, sid) == []
    assert post({"value": 4}).status_code == 201
    [logged] = read_answers(conn, sid)
    assert logged.kind == "rating" and logged.value == 4.0 and logged.b == -1


def test_pooled_questions_of_a_closed_round_are_taken_back_and_fallbacks_are_rare(app, conn):
    positions = [x + d for x in range(6) for d in (0.0, 0.05)]
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "pruned", "question_kind": "rating", "pool_size": 30,
                                    "rating": {"min": 0, "max": 100, "step": None, "widget": "slider"},
                                    "algorithms": [{"algorithm": "anntri", "params": {"sigma": 0.02}}]})
    sid = create_study(conn, config, line_items(positions), study_id="pruned")
    apply_new_answers(conn, sid)
    respond = truthful(np.random.default_rng(4), positions=positions)
    client = app.test_client()
    pruned, q = 0, fetch_question(client, sid)
    for _ in range(40):
        for _ in range(4):
            if q is None:  # every round closed: the study is complete
                break
            sent = wire_body(q, {"token": q["token"], **respond(q)})
            response = client.post(f"/api/studies/{sid}/answers", json=sent)
            assert response.status_code == 201
            q = response.get_json()["next"]
        pruned += apply_new_answers(conn, sid)["pruned"]
        state = engine_state.load(conn, sid, "anntri")
        pooled = [json.loads(q) for q in conn.lrange(keys.pool(sid, "anntri"), 0, -1)]
        # only questions of open rounds (or of rounds closed by their sample cap) remain
        assert all(state["status"][q["items"][0]] in (1, 3) for q in pooled)
    assert pruned > 0
    # the pool is refilled with the open rounds' least-asked arms, so random fallbacks are rare
    # (a few can occur when the last open rounds have nothing undecided left to plan)
    served = int(conn.hget(keys.counters(sid), "questions_served"))
    assert int(conn.hget(keys.counters(sid), "fallback_served") or 0) <= 0.05 * served
    # a pruned question was never handed out, so its pair is free to be asked again (not pending)
    outstanding = [json.loads(b) for b in conn.hvals(keys.issued_questions(sid))]
    planned_outstanding = sum(not q["fallback"] for q in outstanding)  # fallbacks were never the planner's
    assert int(state["pending"].sum()) // 2 == len(pooled) + planned_outstanding


def test_budget_ends_an_algorithm_and_then_the_study(app, conn):
    sid = make_study(conn, "budget", algorithms=[{"algorithm": "random_triplets", "budget": 10}])
    sent = drive(app, conn, sid, truthful(np.random.default_rng(5)), max_answers=100, raters=1, update_every=1)
    assert 10 <= sent <= 10 + 6  # a fallback or two may be served while the update is catching up
    response = app.test_client().get(f"/api/studies/{sid}/questions/next")
    assert response.status_code == 409 and response.get_json()["error"]["code"] == "study_complete"


def test_graph_exports_round_trip_through_networkx_and_csv(app, conn, researcher_client):
    sid = make_study(conn, "exports", question_kind="rating",
                     rating={"min": 0, "max": 100, "step": None, "widget": "slider"},
                     algorithms=[{"algorithm": "anntri", "params": {"sigma": 0.1, "k": 2}}])
    drive(app, conn, sid, truthful(np.random.default_rng(6), noise=0.02), max_answers=200)
    run_worker(conn)
    doc = json.loads(researcher_client.get(f"/studies/{sid}/export/graph.json").get_data(as_text=True))
    assert doc["k"] == 2 and doc["items"] == [f"p{i}" for i in range(6)]
    graphml = researcher_client.get(f"/studies/{sid}/export/graph.graphml").get_data()
    g = nx.read_graphml(io.BytesIO(graphml))
    assert sorted(g.nodes) == doc["items"]
    assert sorted(g.edges) == sorted((e["source"], e["target"]) for e in doc["edges"])
    first = next(e for e in doc["edges"] if e["rank"] == 1)
    attrs = g.edges[first["source"], first["target"]]
    assert attrs["rank"] == 1 and attrs["samples"] == first["samples"] and attrs["certified"] == first["certified"]
    rows = researcher_client.get(f"/studies/{sid}/export/graph.csv").get_data(as_text=True).splitlines()
    # 6 items x k = 2, less the edges no answer has touched yet (docs/exports.md: "no data yet")
    assert rows[0].startswith("source,target") and len(rows) == 1 + len(doc["edges"]) <= 1 + 12
    assert len(doc["edges"]) >= 6 and all(e["samples"] > 0 for e in doc["edges"])
    assert researcher_client.get(f"/studies/{sid}/export/forest.json").status_code == 404  # no forest here
    assert researcher_client.get(f"/studies/{sid}/export/graph.xlsx").status_code == 404


def test_list_order_triplets_import_and_export_round_trip(conn, study_id):
    rng = random.Random(0)
    triplets = [tuple(rng.sample(range(10), 3)) for _ in range(25)]
    text = "".join(f"{i},{j},{k}\n" for i, j, k in triplets)
    assert import_triplets(conn, study_id, text, source="t.csv") == 25
    exported = "".join(export(conn, study_id, "triplets", "csv").chunks)
    assert [tuple(r) for r in np.loadtxt(io.StringIO(exported), delimiter=",", dtype=int, ndmin=2)] == triplets
    run_worker(conn)  # the random-triplet learner uses imported triplets
    assert engine_state.load(conn, study_id, "random_triplets")["n_answers"] == 25
    for bad, words in (("1,2\n", "line 1"), ("0,1,1\n", "three different"), ("0,1,99\n", "0..9"),
                       ("a,b,c\n", "whole numbers")):
        with pytest.raises(ValueError, match=words):
            import_triplets(conn, study_id, bad, source="bad.csv")
    assert len(read_answers(conn, study_id)) == 25  # all or nothing


def test_a_built_forest_routes_items_added_later(app, conn, redis_url, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from webapp.cli import main

    sid = make_study(conn, "growing", algorithms=[{"algorithm": "comparison_forest", "params": {"n_trees": 4}}])
    drive(app, conn, sid, truthful(np.random.default_rng(7)), max_answers=2000)
    # two new items, each next to an existing one: 0.02 (by p0/p1) and 2.03 (by p4/p5)
    positions = POSITIONS + [0.02, 2.03]
    (tmp_path / "new.csv").write_text("id,text\nnew-a,close to p0\nnew-b,close to p4\n")
    monkeypatch.setenv("REDIS_URL", redis_url)
    result = CliRunner().invoke(main, ["add-items", sid, "--items", str(tmp_path / "new.csv")])
    assert result.exit_code == 0, result.output
    assert "Added 2 items to study growing (8 items now)" in result.output
    drive(app, conn, sid, truthful(np.random.default_rng(8), positions=positions), max_answers=500)
    run_worker(conn)
    progress = json.loads(conn.hget(keys.engine_stats(sid), "summary"))["comparison_forest"]["progress"]
    assert progress["added_items"] == 2 and progress["added_items_routed"] == 2
    nn, _ = learned_neighbors(conn, sid)
    assert nn[6] in (0, 1) and nn[7] in (4, 5)
    logged = [a for a in read_answers(conn, sid) if a.head >= 6]
    assert logged and all(a.algorithm == "comparison_forest" for a in logged)


def test_items_cannot_be_added_to_a_fixed_item_study(conn):
    from workers.store.studies import StudyError, add_items

    sid = make_study(conn, "fixed", algorithms=[{"algorithm": "anntri"}])
    with pytest.raises(StudyError, match="anntri learn"):
        add_items(conn, sid, [Item(id="x", kind="text", text="x")])


def test_a_seeded_study_plans_the_same_triplet_derived_questions_again():
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "seeded", "random_state": 7, "algorithm": "anntri"})
    plans = []
    for _ in range(2):
        learner = Learner.new(config.algorithms[0], config, 12)
        plans.append([(q["head"], sorted(q["candidates"]), q["probe"]) for q in learner.plan(20, 12)])
    assert plans[0] == plans[1]
    thirds = {tuple(sorted(c)) for _, c, _ in plans[0]}
    assert len(thirds) > 1


def test_a_live_duels_learner_fills_its_pool():
    """A pool holds questions for every rater at once: the live learner puts duels in pool mode
    (the whole budget, not one question per head and call), whether new or restored."""
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "pool", "random_state": 3, "algorithm": "duels"})
    learner = Learner.new(config.algorithms[0], config, 12)
    assert learner.planner.pool is True
    assert len(learner.plan(40, 12)) == 40  # more than one per item
    again = Learner.from_state(config.algorithms[0], config, learner.planner.to_state())
    assert again.planner.pool is True


def test_least_asked_repeats_come_from_every_undecided_arm_of_the_open_rounds():
    """Once every question of the open rounds is pending, the worker's refill asks the open rounds'
    undecided arms again: the planner's ``repeat_questions`` (engine.graph.RoundPlanner)."""
    from engine.anntri import ANNTri

    planner = ANNTri(10, window=1, random_state=0)
    first = planner.next_questions(100)  # the open round's whole first layer, all pending
    j = first[0][0]
    assert planner.next_questions(10) == []
    repeats = planner.repeat_questions(9)
    assert sorted(a for _, a in repeats) == sorted(a for a in range(10) if a != j)
    assert all(r == j for r, _ in repeats)


def test_every_triplet_learner_of_the_table_runs_live(app, conn):
    """Each triplet-asking graph learner of engine.registry runs a study end to end: its questions
    are served, its answers applied, its state saved and restored, its graph exported."""
    from engine.registry import ALGORITHMS

    # (a learner asking the questions another chooses, ``delegates``, runs only beside it: tests/test_learned_split.py)
    names = [n for n, e in ALGORITHMS.items() if e.yields_graph and "triplet" in e.question_kinds and not e.delegates]
    assert "duels" in names
    for name in names:
        sid = make_study(conn, f"live-{name}".replace("_", "-"), algorithms=[{"algorithm": name}])
        drive(app, conn, sid, truthful(np.random.default_rng(8)), max_answers=80)
        run_worker(conn)
        state = engine_state.load(conn, sid, name)
        assert state is not None
        config = get_study(conn, sid).config
        learner = Learner.from_state(config.algorithms[0], config, state)
        assert set(("answers", "questions_issued", "done", "items_certified")) <= set(learner.progress())
        assert learner.progress()["answers"] > 0
        nn, doc = learned_neighbors(conn, sid, name)
        assert len(doc["items"]) == len(POSITIONS)
        assert sum(x is not None for x in nn) >= len(POSITIONS) // 2


def test_questions_of_a_round_closed_by_its_cap_stay_in_the_pool():
    """A refill can close a round by its sample cap (the cap counts issued questions): those
    pooled questions are the round's whole remaining budget, so they are not stale; a
    certified round's are."""
    from engine import anntri

    config = StudyConfig.from_dict({**NO_CHECKS, "name": "capped", "question_kind": "rating",
                                    "rating": {"min": 0, "max": 100, "step": None, "widget": "slider"},
                                    "algorithms": [{"algorithm": "anntri",
                                                    "params": {"window": 1, "max_samples_per_round": 6}}]})
    learner = Learner.new(config.algorithms[0], config, 12)
    pooled = learner.plan(6, 12)
    assert len(pooled) == 6
    head = pooled[0]["items"][0]
    assert learner.planner.status_[head] == anntri.ROUND_CAPPED
    assert learner.stale(pooled) == []
    learner.planner.status_[head] = anntri.ROUND_CERTIFIED
    assert learner.stale(pooled) == pooled
