"""A map you can read (issue 28, item 6): the dashboard's graph view places a duels study's items by its
fitted embedding (30 items at 30 distinct places, near where they truly are), lists every item's
candidates with the duels behind them, and says what each item looks like."""
from __future__ import annotations

import dataclasses
import random
import time

import numpy as np
import pytest
from helpers import NO_CHECKS

from engine.kinds import get_kind
from workers.jobs.update_pass import apply_new_answers
from workers.results.layout import graph_layout, node_size, principal_axes, spread_apart, spread_gap
from workers.store.answers import accept_answer, read_answers
from workers.store.config import StudyConfig
from workers.store.questions import StudyComplete, issue_question
from workers.store.studies import Item, create_study, get_study


def grid_items(n: int) -> list[Item]:
    """``n`` colour items at known 2-D places (a jittered grid), their colour from their place."""
    rng = np.random.default_rng(0)
    side = int(np.ceil(np.sqrt(n)))
    out = []
    for i in range(n):
        x, y = (i % side) + rng.uniform(-.3, .3), (i // side) + rng.uniform(-.3, .3)
        colour = f"#{int(40 + 200 * x / side):02x}{int(40 + 200 * y / side):02x}90"
        out.append(Item(id=f"i{i:04d}", kind="color", color=colour, position=(float(x), float(y))))
    return out


def duels_study(conn, n: int, answers_per_item: int, study_id: str = "map") -> str:
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Map", "algorithm": "duels", "random_state": 3,
                                    "pool_size": 40})
    items = grid_items(n)
    create_study(conn, config, items, study_id=study_id)
    study = get_study(conn, study_id)
    truth = np.array([item.position for item in items])
    rng = random.Random(1)
    apply_new_answers(conn, study_id)
    for k in range(answers_per_item * n):
        now = time.time()
        question, _, _ = issue_question(conn, study_id, study.config, n, f"r{k % 25}", now=now, expires_at=now + 600)
        h, (a, b) = question["head"], question["candidates"]
        gap = np.linalg.norm(truth[h] - truth[a]) - np.linalg.norm(truth[h] - truth[b])
        pick = a if rng.random() < 1 / (1 + np.exp(4 * gap)) else b  # near ties answered at random
        accept_answer(conn, study_id, question, f"r{k % 25}", pick, issued_at=now, response_ms=900, used_ttl=3600)
        if k % max(60, n // 2) == max(60, n // 2) - 1:
            apply_new_answers(conn, study_id)
    apply_new_answers(conn, study_id)
    return study_id


def test_a_duels_map_of_30_items_shows_30_distinct_items_where_the_embedding_puts_them(conn):
    duels_study(conn, 30, 25)
    study = get_study(conn, "map")
    layout = graph_layout(conn, study, "duels")
    assert layout["placement"] == "embedding" and layout["embedding_dim"] >= 1
    pos = np.array(layout["positions"])
    assert len(pos) == 30
    gaps = np.linalg.norm(pos[:, None] - pos[None], axis=-1) + np.eye(30)
    assert gaps.min() >= 0.9 * layout["node_size"]  # every item its own place: none drawn over another
    # the map keeps the items' true arrangement: far apart in truth, far apart on the map
    truth = np.array([item.position for item in grid_items(30)])
    true_d = np.linalg.norm(truth[:, None] - truth[None], axis=-1)[np.triu_indices(30, 1)]
    map_d = gaps[np.triu_indices(30, 1)]
    assert np.corrcoef(np.argsort(np.argsort(true_d)), np.argsort(np.argsort(map_d)))[0, 1] > 0.6
    # every item's candidates with the duels behind them; the nearest neighbour drawn is the best one
    assert all(layout["candidates"])
    first = layout["candidates"][0][0]
    assert set(first) == {"item", "win_share", "duels"} and 0 <= first["win_share"] <= 1
    assert sum(c["duels"] for cands in layout["candidates"] for c in cands) > 0
    assert len(layout["edges"]) == 30 and len(layout["certified"]) == 30
    assert {e["from"]: e["to"] for e in layout["edges"]}[0] == first["item"]
    assert layout["looks"][0] == {"id": "i0000", "kind": "color", "color": grid_items(30)[0].color}


def test_spreading_moves_items_off_one_point_and_keeps_distinct_ones_in_place():
    stacked = np.array([[0.5, 0.5]] * 12 + [[0.1, 0.1], [0.9, 0.9]])
    out = spread_apart(stacked, gap=0.05)
    gaps = np.linalg.norm(out[:, None] - out[None], axis=-1) + np.eye(14)
    assert gaps.min() >= 0.05 * 0.95
    assert np.allclose(out[12:], stacked[12:], atol=1e-9)  # items with room are not moved
    assert np.array_equal(spread_apart(stacked, gap=0.05), out)  # deterministic
    # items stacked at the bottom of the placed area are not pushed into the row of items waiting for answers
    low = np.array([[0.5, 0.86]] * 12)
    assert spread_apart(low, gap=0.05)[:, 1].max() > 0.9  # (without a bottom, they are)
    kept = spread_apart(low, gap=0.05, bottom=0.9)
    assert kept[:, 1].max() <= 0.9 and len(np.unique(kept.round(6), axis=0)) == 12


def test_principal_axes_keep_a_flat_embedding_and_pad_a_line():
    rng = np.random.default_rng(0)
    flat = rng.normal(size=(50, 2)) * [3, 1]
    X = np.hstack([flat, np.zeros((50, 2))]) @ np.linalg.qr(rng.normal(size=(4, 4)))[0]
    pa = principal_axes(X)
    d = lambda p: np.linalg.norm(p[:, None] - p[None], axis=-1)  # noqa: E731
    assert np.allclose(d(pa), d(flat), atol=1e-9)
    line = principal_axes(np.arange(5.0)[:, None])
    assert np.allclose(line[:, 1], 0) and np.allclose(line[:, 0], np.arange(5.0) - 2)
    assert node_size(30) > node_size(1000) >= 0.012


def test_answers_per_item_leave_out_catch_trials_and_the_state_says_budget_reached(conn):
    from webapp.stats import study_stats
    from workers.store.studies import update_config

    create_study(conn, StudyConfig.from_dict({**NO_CHECKS, "name": "Counts", "algorithm": "random_triplets",
                                              "limits": {"answer_budget": 4}}), grid_items(10), study_id="counts")
    study = get_study(conn, "counts")
    for _ in range(3):
        now = time.time()
        question, _, _ = issue_question(conn, "counts", study.config, 10, "r1", now=now, expires_at=now + 600)
        accept_answer(conn, "counts", question, "r1", question["candidates"][0], issued_at=now, response_ms=900,
                      used_ttl=3600)
    catch = {"qid": "catch-1", "kind": "triplet", "head": 0, "candidates": [1, 2], "algorithm": "catch", "catch": True}
    accept_answer(conn, "counts", catch, "r1", 1, issued_at=time.time(), response_ms=900, used_ttl=3600)
    stats = study_stats(conn, get_study(conn, "counts"))
    assert stats["answers"] == 4 and stats["learner_answers"] == 3
    assert stats["answers_per_item"] == pytest.approx(0.3)
    assert stats["state"] == "budget reached" and stats["study"]["status"] == "running"
    update_config(conn, "counts", limits={"answer_budget": 100})
    assert study_stats(conn, get_study(conn, "counts"))["state"] == "running"


# ---------------------------------------------------------------- maps that read for every kind (issue 43)

def test_far_outliers_go_to_the_edge_marked_and_leave_the_rest_their_room():
    from workers.results.layout import robust_normalise

    rng = np.random.default_rng(0)
    bulk = rng.normal(size=(60, 2))
    far = np.array([[80.0, 0.0], [0.0, -60.0], [-50.0, 50.0]])
    scaled, outliers = robust_normalise(np.vstack([bulk, far]))
    assert outliers.tolist() == [False] * 60 + [True] * 3
    assert scaled.min() >= 0 and scaled.max() <= 1
    # the bulk fills the map (the far items squeezed it into a corner of a few per cent before)
    assert np.ptp(scaled[:60], axis=0).max() > 0.95
    assert np.percentile(scaled[:60, 0], 75) - np.percentile(scaled[:60, 0], 25) > 0.15
    # each far item on the edge of the bulk's box, on its own side
    assert scaled[60, 0] == scaled[:60, 0].max() and scaled[61, 1] == scaled[:60, 1].min()
    # a map without far items is scaled as before, nothing marked
    plain, none = robust_normalise(bulk)
    assert not none.any() and np.ptp(plain, axis=0).max() == pytest.approx(1.0)
    # a 1-D map (an axis of zeros) is no outlier on its flat axis
    line = np.c_[np.r_[np.arange(20.0), 500.0], np.zeros(21)]
    assert robust_normalise(line)[1].tolist() == [False] * 20 + [True]


def test_a_map_of_many_items_draws_pictures_no_smaller_than_32_px():
    from workers.results.layout import SMALLEST_NODE, spread_gap

    assert SMALLEST_NODE * 912 >= 31.9  # the map's drawing is 912 units across inside its padding
    assert node_size(1000) == SMALLEST_NODE and node_size(30) >= 2 * SMALLEST_NODE
    assert spread_gap(30) == node_size(30) and spread_gap(1000) < node_size(1000)  # parts on zooming


def crafted_answer(conn, study_id: str, kind: str, head: int | None, shown: list[int], choice, value=None,
                   rater: str = "r1", algorithm: str = "random_triplets") -> None:
    """One answer to a question as written here (the issue path is tested elsewhere): never pooled, as an
    attention check's question is not."""
    question = {"qid": f"q{conn.incr('test:qid')}", "kind": kind, "algorithm": algorithm, "catch": True}
    if head is None:
        question["items"] = shown
    else:
        question.update(head=head, candidates=shown)
    accept_answer(conn, study_id, question, rater, choice, issued_at=time.time(), response_ms=900, used_ttl=3600,
                  value=value)


def test_a_click_on_a_triplet_studys_item_counts_the_answers_for_and_against_each_neighbour(conn):
    from workers.results.evidence import item_evidence

    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Evidence", "algorithm": "random_triplets"})
    create_study(conn, config, grid_items(6), study_id="ev")
    for _ in range(3):
        crafted_answer(conn, "ev", "triplet", 0, [1, 2], 1)  # 1 closer to 0 than 2
    crafted_answer(conn, "ev", "triplet", 1, [0, 3], 0)  # 0 closer to 1 than 3: for (0, 1) too
    crafted_answer(conn, "ev", "triplet", 0, [2, 1], 2)  # 2 closer to 0 than 1: against (0, 1)
    crafted_answer(conn, "ev", "triplet", 3, [4, 0], 4)  # 4 closer to 3 than 0: against (0, 3)
    crafted_answer(conn, "ev", "triplet", 4, [5, 3], 5)  # 0 not shown: not about item 0
    crafted_answer(conn, "ev", "triplet", 0, [1, 2], 2, rater="r-excluded")  # an excluded rater's: left out
    conn.sadd("proxima:{ev}:excluded-raters", "r-excluded")
    apply_new_answers(conn, "ev")
    study = get_study(conn, "ev")
    evidence = item_evidence(conn, study, "random_triplets", 0)
    assert evidence["evidence"] == "triplets" and evidence["answers"] == 6 and evidence["all_read"]
    rows = {r["item"]: r for r in evidence["neighbours"] + evidence["others"]}
    assert (rows[1]["closer"], rows[1]["farther"]) == (4, 1)
    assert (rows[2]["closer"], rows[2]["farther"]) == (1, 3)
    assert (rows[3]["closer"], rows[3]["farther"]) == (0, 1)
    # the learner's neighbours first, as the map's arrow has them
    layout = graph_layout(conn, study, "random_triplets")
    arrow = {e["from"]: e["to"] for e in layout["edges"]}
    assert evidence["neighbours"][0]["item"] == arrow[0] and evidence["neighbours"][0]["neighbour"]
    assert not any(r["neighbour"] for r in evidence["others"])
    # reading only the newest answers says so
    assert item_evidence(conn, study, "random_triplets", 0, max_answers=3)["all_read"] is False


def test_a_click_on_a_rank_studys_item_counts_what_its_screens_imply(conn):
    from workers.results.evidence import item_evidence

    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Rank", "question_kind": "rank",
                                    "algorithm": "random_triplets", "rank": {"n_reference": 5, "n_select": 2}})
    create_study(conn, config, grid_items(8), study_id="rk")
    crafted_answer(conn, "rk", "rank", 0, [1, 2, 3, 4, 5], [3, 1])  # 3 most like 0, then 1
    apply_new_answers(conn, "rk")
    evidence = item_evidence(conn, get_study(conn, "rk"), "random_triplets", 0)
    rows = {r["item"]: (r["closer"], r["farther"]) for r in evidence["neighbours"] + evidence["others"]}
    # (0; 3, x) for the four others; (0; 1, x) for the three not picked
    assert rows[3] == (4, 0) and rows[1] == (3, 1) and rows[2] == rows[4] == rows[5] == (0, 2)
    seen_from_3 = item_evidence(conn, get_study(conn, "rk"), "random_triplets", 3)
    assert {r["item"]: (r["closer"], r["farther"]) for r in seen_from_3["neighbours"] + seen_from_3["others"]}[0] == (
        4, 0)


def test_a_click_on_a_rating_studys_item_lists_its_rated_pairs(conn):
    from workers.results.evidence import item_evidence

    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Ratings", "question_kind": "rating", "algorithm": "random"})
    create_study(conn, config, grid_items(5), study_id="rt")
    for pair, value in (((0, 1), 5), ((1, 0), 4), ((0, 2), 1), ((3, 4), 5)):
        crafted_answer(conn, "rt", "rating", None, list(pair), None, value=value, algorithm="random")
    apply_new_answers(conn, "rt")
    evidence = item_evidence(conn, get_study(conn, "rt"), "random", 0)
    assert evidence["evidence"] == "ratings" and evidence["answers"] == 3
    rows = evidence["neighbours"] + evidence["others"]
    assert [(r["item"], r["ratings"], r["mean"]) for r in rows if r["ratings"]] == [(1, 2, 4.5), (2, 1, 1.0)]


def test_the_evidence_route_names_the_item_and_refuses_unknown_ones(researcher_client, conn):
    duels_study(conn, 12, 3, study_id="route")
    ok = researcher_client.get("/api/studies/route/items/4/evidence?algorithm=duels")
    assert ok.status_code == 200 and ok.get_json()["item"] == 4 and ok.get_json()["neighbours"]
    assert researcher_client.get("/api/studies/route/items/12/evidence").status_code == 404
    assert researcher_client.get("/api/studies/route/items/1/evidence?algorithm=nope").get_json()["error"][
        "code"] == "unknown_algorithm"


def kind_pairs():
    from engine.registry import ALGORITHMS

    # (a learner asking the questions another chooses, ``delegates``, runs only beside it: tests/test_learned_split.py)
    return [(name, kind) for name, entry in ALGORITHMS.items() for kind in entry.question_kinds if not entry.delegates]


def careful_answer(question: dict, truth: np.ndarray, select: int):
    """(choice, value) of a rater who answers from the 1-D ``truth`` (positions of the items)."""
    d = lambda i, j: abs(truth[i] - truth[j])  # noqa: E731
    if "head" in question:
        h, cands = question["head"], list(question["candidates"])
        order = sorted(cands, key=lambda j: (d(h, j), j))
        return (order[:select] if select > 1 else order[0]), None
    items = list(question["items"])
    if len(items) == 2 and not get_kind(question["kind"]).on_scale:  # the same (1) within 2 places, else 0
        return None, int(d(*items) <= 2)
    if len(items) == 2:
        return None, 5 - min(4, round(4 * d(*items) / np.ptp(truth)))
    return max(items, key=lambda o: sum(d(o, x) for x in items)), None  # the odd one out


@pytest.mark.parametrize(("algorithm", "kind"), kind_pairs())
def test_every_learner_of_every_kind_has_a_clicks_evidence(conn, algorithm, kind):
    from workers.results.evidence import item_evidence

    settings = {**NO_CHECKS, "name": "Every", "algorithm": algorithm, "question_kind": kind, "random_state": 1,
                "pool_size": 20}
    if kind == "rank":
        settings["rank"] = {"n_reference": 4, "n_select": 2}
    # (a classifying learner needs every item's label)
    items = [dataclasses.replace(item, label="left" if i < 6 else "right") for i, item in enumerate(grid_items(12))]
    create_study(conn, StudyConfig.from_dict(settings), items, study_id="every")
    study = get_study(conn, "every")
    truth = np.arange(12.0)
    apply_new_answers(conn, "every")
    for k in range(120):
        now = time.time()
        try:
            question, _, _ = issue_question(conn, "every", study.config, 12, f"r{k % 6}", now=now,
                                            expires_at=now + 600)
        except StudyComplete:  # a learner that has asked all it asks
            break
        choice, value = careful_answer(question, truth, 2 if kind == "rank" else 1)
        accept_answer(conn, "every", question, f"r{k % 6}", choice, issued_at=now, response_ms=900, used_ttl=3600,
                      value=value)
        if k % 40 == 39:
            apply_new_answers(conn, "every")
    evidence = item_evidence(conn, study, algorithm, 5)
    assert evidence["answers"] > 0
    rows = evidence["neighbours"] + evidence["others"]
    if evidence["evidence"] == "ratings":  # rated pairs: a rating's value, the same (1) or different (0)
        assert get_kind(kind).answered_by == "value" and sum(r["ratings"] for r in rows) > 0
    else:
        assert get_kind(kind).answered_by == "picks" and sum(r["closer"] + r["farther"] for r in rows) > 0
    # the neighbours are the learner's, nearest first: the map's arrow from the item leads to the first
    arrow = {e["from"]: e["to"] for e in graph_layout(conn, study, algorithm)["edges"]}
    if 5 in arrow:
        assert evidence["neighbours"][0]["item"] == arrow[5]


def move_far(conn, study_id: str, item: int) -> None:
    """Put ``item`` far from the rest in the fitted map a duels study's learner stored (as an item seen in few
    answers drifts), through the learner's own state round trip."""
    from engine.registry import wrapped_learner
    from workers.jobs.learners import Learner
    from workers.store import engine_state

    study = get_study(conn, study_id)
    alg = study.config.algorithms[0]
    learner = Learner.from_state(alg, study.config, engine_state.load(conn, study_id, alg.label))
    fitted = wrapped_learner(learner.planner).embedding_
    fitted[item] = fitted.mean(axis=0) + 40 * np.ptp(fitted, axis=0).max()  # far along every axis
    with conn.pipeline() as pipe:
        engine_state.save(pipe, study_id, alg.label, learner.to_state())
        pipe.execute()


def test_a_learners_far_item_is_drawn_at_the_edge_and_the_rest_keep_the_map(conn):
    """A duels study whose fitted map has one item far from the rest (as an item seen in few answers drifts):
    the layout marks it and draws it at the edge, and the others spread over the drawing."""
    duels_study(conn, 30, 25, study_id="far")
    study = get_study(conn, "far")
    assert graph_layout(conn, study, "duels")["outliers"] == []
    move_far(conn, "far", 7)
    layout = graph_layout(conn, study, "duels")
    assert layout["outliers"] == [7]
    pos = np.array(layout["positions"])
    rest = np.delete(pos, 7, axis=0)
    # on the bulk's edge, on either side (the sign of a principal axis is arbitrary) and up to the room the
    # items are spread apart by afterwards
    room = spread_gap(len(pos)) + 1e-9
    assert ((pos[7] >= rest.max(axis=0) - room) | (pos[7] <= rest.min(axis=0) + room)).any()
    # the rest keep the drawing: their middle half spans a fair share of it (without the fence, a few per cent)
    assert (np.percentile(rest, 75, axis=0) - np.percentile(rest, 25, axis=0)).max() > 0.2


def test_a_far_item_does_not_choose_the_view_of_a_higher_dimensional_map():
    from workers.results.layout import far_out

    rng = np.random.default_rng(0)
    flat = rng.normal(size=(50, 2)) * [3, 1]
    X = np.hstack([flat, np.zeros((50, 2))])
    X[0] = [0, 0, 500, 0]  # one item far away along a third axis
    far = far_out(X)
    assert far.tolist() == [True] + [False] * 49
    view = principal_axes(X, fit=~far)
    d = lambda p: np.linalg.norm(p[:, None] - p[None], axis=-1)  # noqa: E731
    assert np.allclose(d(view[1:]), d(flat[1:]), atol=1e-9)  # the rest seen in their own plane
    squeezed = principal_axes(X)  # without: the far item's axis is one of the two shown
    assert np.ptp(squeezed[1:], axis=0).min() < 0.1 * np.ptp(flat[1:], axis=0).min()


def test_mds_is_made_from_the_items_not_far_out_and_places_the_others_by_their_distances():
    from workers.results.layout import classical_mds, far_by_distances

    rng = np.random.default_rng(1)
    flat = rng.normal(size=(40, 2)) * [3, 1]
    X = np.hstack([flat, np.zeros((40, 1))])
    X[0] = [0, 0, 60]  # far from everyone, out of the plane
    d = np.linalg.norm(X[:, None] - X[None], axis=-1)
    dist = lambda p: np.linalg.norm(p[:, None] - p[None], axis=-1)  # noqa: E731
    far = far_by_distances(d)
    # the far item (and at most an extreme or two of the bulk: left out of the fit, they are placed exactly)
    assert far[0] and far.sum() <= 3
    coords = classical_mds(d, fit=~far)
    assert np.allclose(dist(coords[1:]), dist(flat[1:]), atol=1e-8)  # the rest in their own plane
    assert np.isfinite(coords[0]).all()
    squeezed = classical_mds(d)  # without: the far item's axis is one of the two shown
    assert np.ptp(squeezed[1:], axis=0).min() < 0.1 * np.ptp(flat[1:], axis=0).min()
    # an item left out of the fit is placed where its distances put it (landmark MDS)
    held = np.ones(40, bool)
    held[[0, 5]] = False
    placed = classical_mds(d, fit=held)
    assert np.allclose(dist(placed[1:]), dist(flat[1:]), atol=1e-8)


def test_mds_of_many_items_recovers_a_flat_map_as_the_dense_solver_does(monkeypatch):
    from workers.results import layout

    rng = np.random.default_rng(2)
    X = rng.normal(size=(400, 2)) * [2, 1]
    d = np.linalg.norm(X[:, None] - X[None], axis=-1)
    dist = lambda p: np.linalg.norm(p[:, None] - p[None], axis=-1)  # noqa: E731
    lanczos = layout.classical_mds(d)  # 400 items: Lanczos iterations
    assert np.allclose(dist(lanczos), d, atol=1e-8)
    assert np.array_equal(layout.classical_mds(d), lanczos)  # deterministic
    monkeypatch.setattr(layout, "LANCZOS_FROM", 10_000)
    assert np.allclose(np.abs(layout.classical_mds(d)), np.abs(lanczos), atol=1e-8)  # same axes, up to sign


def test_a_clicks_evidence_counts_the_answers_its_learner_learns_from(conn):
    """In a study of two learners each learns from the answers to its own questions: the evidence panel of one
    counts its own (it counted every learnable answer showing the item, the other learner's too)."""
    from workers.results.evidence import item_evidence

    settings = {**NO_CHECKS, "name": "Two", "random_state": 2, "pool_size": 20,
                "algorithms": [{"algorithm": "duels", "share": 0.5}, {"algorithm": "random_triplets", "share": 0.5}]}
    create_study(conn, StudyConfig.from_dict(settings), grid_items(12), study_id="two")
    study = get_study(conn, "two")
    truth = np.arange(12.0)
    apply_new_answers(conn, "two")
    for k in range(240):
        now = time.time()
        question, _, _ = issue_question(conn, "two", study.config, 12, f"r{k % 6}", now=now, expires_at=now + 600)
        choice, _ = careful_answer(question, truth, 1)
        accept_answer(conn, "two", question, f"r{k % 6}", choice, issued_at=now, response_ms=900, used_ttl=3600)
        if k % 40 == 39:
            apply_new_answers(conn, "two")
    apply_new_answers(conn, "two")
    log = [a for a in read_answers(conn, "two") if 5 in a.shown]
    by_learner = {label: sum(a.algorithm == label for a in log) for label in ("duels", "random_triplets")}
    assert min(by_learner.values()) > 0 and sum(by_learner.values()) == len(log), by_learner
    for label, own in by_learner.items():
        assert item_evidence(conn, study, label, 5)["answers"] == own, (label, by_learner)
