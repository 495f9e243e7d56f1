"""Odd-one-out and rank screens: the answer conversions, the checks, the screen planners' contract,
learning from each kind, and the simulated raters of each kind."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import in_lockstep
from scipy.spatial.distance import cdist

from engine.graph import PROGRESS_KEYS
from engine.implied_triplets import odd_one_out_triplets, rank_triplets
from engine.kinds import SCREEN_KINDS
from engine.planners import make_planner, restore_planner
from engine.registry import ALGORITHMS, drive_as_pool, fitted_coordinates, warning_for
from engine.screens import OddOneOutScreens, RankScreens, check_odd_one_out, check_rank
from simulation.noise import HumanNoise
from simulation.oracles import OddOneOutOracle, RankOracle, TripletOracle

LEARNERS = [name for name, e in ALGORITHMS.items() if "rank" in e.question_kinds]


# ---------------------------------------------------------------------------------------------- conversions
def test_odd_one_out_conversion_by_hand():
    # 7 is odd: 3 and 9 belong together, so 3 is more like 9 than 7, and 9 more like 3 than 7
    assert odd_one_out_triplets(3, 7, 9, 7) == [(3, 9, 7, 9), (9, 3, 7, 3)]
    # the two left keep the order shown
    assert odd_one_out_triplets(9, 3, 7, 7) == [(9, 3, 7, 3), (3, 9, 7, 9)]
    assert odd_one_out_triplets(5, 1, 2, 5) == [(1, 2, 5, 2), (2, 1, 5, 1)]


def test_rank_conversion_by_hand():
    # head 0, references 1..5 shown as (4, 2, 5, 1, 3); picks 5 (most alike) then 1
    got = rank_triplets(0, (4, 2, 5, 1, 3), (5, 1))
    assert got == [(0, 5, 1, 5), (0, 5, 4, 5), (0, 5, 2, 5), (0, 5, 3, 5),
                   (0, 1, 4, 1), (0, 1, 2, 1), (0, 1, 3, 1)]
    # one pick: it beats every other reference
    assert rank_triplets(9, (1, 2, 3), (2,)) == [(9, 2, 1, 2), (9, 2, 3, 2)]
    # 8-rank-2: 1 + 6 for the first pick, 6 for the second = 13
    assert len(rank_triplets(0, tuple(range(1, 9)), (8, 3))) == 13
    # three picks of four: 3 + 2 + 1 (the later picks) + 1 + 1 + 1 (the unpicked one)
    got = rank_triplets(0, (1, 2, 3, 4), (3, 1, 4))
    assert got == [(0, 3, 1, 3), (0, 3, 4, 3), (0, 3, 2, 3), (0, 1, 4, 1), (0, 1, 2, 1), (0, 4, 2, 4)]


@pytest.mark.parametrize(("row", "message"), [
    ((0, 1, 1, 1), "three different items"),
    ((0, 1, 2, 3), "must be one of the three"),
    ((0, 1, 20, 1), "not an item of this study"),
    ((0, 1, 2.5, 1), "an integer"),
    ((-1, 1, 2, 1), "not an item"),
])
def test_odd_one_out_check(row, message):
    with pytest.raises(ValueError, match=message):
        check_odd_one_out(*row, 10)
    assert check_odd_one_out(np.int64(1), 2, 3, 3, 10) == (1, 2, 3, 3)


@pytest.mark.parametrize(("head", "refs", "picks", "message"), [
    (0, (1, 2), (1,), "3 to 12 references"),
    (0, tuple(range(1, 14)), (1,), "3 to 12 references"),
    (0, (1, 2, 2, 3), (1,), "all be different"),
    (1, (1, 2, 3, 4), (2,), "cannot also be one of its references"),
    (0, (1, 2, 3, 4), (1,), "asks for 2 picks"),
    (0, (1, 2, 3, 4), (1, 1), "picked only once"),
    (0, (1, 2, 3, 4), (1, 7), r"\[7\] is not among the references"),
    (0, (1, 2, 3, 4), "12", "list of item indices"),
    (0, (1, 2, 3, 40), (1, 2), "not an item of this study"),
])
def test_rank_check(head, refs, picks, message):
    with pytest.raises(ValueError, match=message):
        check_rank(head, refs, picks, 20, n_select=2)


def test_rank_check_without_n_select_still_needs_an_unpicked_reference():
    with pytest.raises(ValueError, match="fewer than all 3"):
        check_rank(0, (1, 2, 3), (1, 2, 3), 10)
    assert check_rank(0, [1, 2, 3], [3, 1], 10) == (0, (1, 2, 3), (3, 1))


# ---------------------------------------------------------------------------------------------- planners
def _points(n=40, seed=0):
    """Clusters of four tight points, the clusters far apart: each item's neighbour is in its cluster."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(n // 4, 2)) * 10
    return np.repeat(centres, 4, axis=0) + rng.normal(size=(n, 2)) * 0.3


def _oracle(kind, X, seed=0, scale=0.0, lapse=0.0):
    D = cdist(X, X)
    if kind == "odd_one_out":
        return OddOneOutOracle(D, scale=scale, lapse=lapse, random_state=seed)
    return RankOracle(D, scale=scale, lapse=lapse, n_select=2, random_state=seed)


@pytest.mark.parametrize("name", LEARNERS)
@pytest.mark.parametrize("kind", SCREEN_KINDS)
def test_screen_shapes_and_progress(name, kind):
    X = _points()
    p = make_planner(name, len(X), question_kind=kind, random_state=1)
    assert isinstance(p, OddOneOutScreens if kind == "odd_one_out" else RankScreens)
    qs = p.next_questions(12)
    assert 0 < len(qs) <= 12
    for q in qs:
        if kind == "odd_one_out":
            assert len(q) == 3 and len(set(q)) == 3 and all(isinstance(x, int) for x in q)
        else:
            head, refs = q
            assert isinstance(head, int) and len(refs) == 8 and len(set(refs)) == 8 and head not in refs
    p.observe(_oracle(kind, X).answer(qs))
    prog = p.progress()
    assert set(PROGRESS_KEYS) <= set(prog)
    assert prog["answers"] == len(qs) and prog["questions_issued"] == len(qs)
    # an odd-one-out answer implies 2 triplets, an 8-rank-2 answer 13, a pick-2-of-8 answer 2 x 6
    assert prog["triplets"] == len(qs) * {"odd_one_out": 2, "rank": 13, "pick_k": 12}[kind]
    assert p.neighbor_graph(k=1).neighbors.shape == (len(X), 1)
    assert p.k == 1 and p.done is False


def test_make_planner_validates_screen_parameters():
    with pytest.raises(ValueError, match="n_reference"):
        make_planner("duels", 40, question_kind="rank", n_reference=2)
    with pytest.raises(ValueError, match="n_reference"):
        make_planner("duels", 40, question_kind="rank", n_reference=13)
    with pytest.raises(ValueError, match="n_select .* must be less than n_reference"):
        make_planner("duels", 40, question_kind="rank", n_reference=4, n_select=4)
    with pytest.raises(ValueError, match="not of 'odd_one_out' studies"):
        make_planner("duels", 40, question_kind="odd_one_out", n_reference=8)
    with pytest.raises(ValueError, match="not of 'triplet' studies"):
        make_planner("duels", 40, question_kind="triplet", n_select=2)
    with pytest.raises(ValueError, match="at least 9 items"):
        make_planner("duels", 8, question_kind="rank")
    with pytest.raises(ValueError, match="anntri asks triplet, rating or same_different questions, not 'rank'"):
        make_planner("anntri", 40, question_kind="rank")
    with pytest.raises(ValueError, match="unknown question kind"):
        make_planner("duels", 40, question_kind="grid")
    p = make_planner("duels", 40, question_kind="rank", n_reference=12, n_select=1, random_state=0)
    head, refs = p.next_questions(1)[0]
    assert len(refs) == 12 and (p.n_reference, p.n_select) == (12, 1)
    with pytest.raises(ValueError, match="asks for 1 pick"):
        p.observe([(head, refs, refs[:2])])


def test_defaults_are_8_rank_2_and_adaptive_where_the_learner_is():
    p = make_planner("duels", 40, question_kind="rank", random_state=0)
    assert (p.n_reference, p.n_select, p.screens) == (8, 2, "adaptive")
    assert make_planner("embedding", 40, question_kind="rank", random_state=0).screens == "random"
    assert make_planner("duels", 40, question_kind="odd_one_out", screens="random", random_state=0).screens == "random"


@pytest.mark.parametrize("name", ["duels", "active_embedding", "embedding"])
@pytest.mark.parametrize("kind", SCREEN_KINDS)
def test_state_round_trip_replays_exactly(name, kind):
    X = _points()
    p = make_planner(name, len(X), question_kind=kind, random_state=4)
    oracle = _oracle(kind, X, seed=5, scale=0.5, lapse=0.05)
    for _ in range(6):
        p.observe(oracle.answer(p.next_questions(20)))
    pending = p.next_questions(7)  # issued, not answered: kept in the state
    q = restore_planner(p.to_state())
    assert type(q) is type(p) and q.progress()["pending_screens"] == p.progress()["pending_screens"] == 7
    in_lockstep(p, q, oracle, rounds=3, batch=15)
    late = oracle.answer(pending)
    p.observe(late)
    q.observe(late)
    assert p.progress()["pending_screens"] == q.progress()["pending_screens"] == 0
    assert p.next_questions(9) == q.next_questions(9)
    np.testing.assert_array_equal(p.neighbor_graph(k=2).neighbors, q.neighbor_graph(k=2).neighbors)


@pytest.mark.parametrize("kind", SCREEN_KINDS)
def test_forget_releases_screens(kind):
    X = _points()
    p = make_planner("duels", len(X), question_kind=kind, random_state=2)
    oracle = _oracle(kind, X)
    for _ in range(8):
        p.observe(oracle.answer(p.next_questions(40)))
    inner_pending = p.planner.progress()["pending"]
    qs = p.next_questions(10)
    assert p.progress()["pending_screens"] == 10
    p.forget(qs[:4] + [qs[0]])  # a screen forgotten twice is released once
    assert p.progress()["pending_screens"] == 6
    p.forget(qs[4:])
    assert p.progress()["pending_screens"] == 0
    # the learner's own questions behind odd-one-out screens are released with them
    assert p.planner.progress()["pending"] == inner_pending
    answers_before = p.progress()["answers"]
    p.observe(oracle.answer(qs[:2]))  # a late answer of a forgotten screen still counts, once
    assert p.progress()["answers"] == answers_before + 2


@pytest.mark.parametrize("kind", SCREEN_KINDS)
def test_pool_mode_reaches_the_learner(kind):
    p = make_planner("duels", 40, question_kind=kind, random_state=0)
    assert p.planner.pool is False
    # outside a pool at most one screen per head (odd-one-out: the learner's own rule)
    assert len(p.next_questions(200)) <= 40
    fitter = object()
    assert drive_as_pool(p, fitter) is p
    assert p.pool is True and p.planner.pool is True and p.planner.fitter is fitter and p.fitter is fitter
    p.forget(p.next_questions(0))
    assert len(p.next_questions(200)) == 200


def test_rank_screens_show_the_head_its_shortlist_once_the_fit_knows_it():
    X = _points(40, seed=3)
    D = cdist(X, X)
    p = make_planner("duels", 40, question_kind="rank", random_state=3)
    oracle = _oracle("rank", X)
    for _ in range(6):
        p.observe(oracle.answer(p.next_questions(40)))
    assert p.planner.n_fits_ > 0
    qs = p.next_questions(40)
    # each head's screen holds its 3 cluster-mates (the nearest by far) in nearly every screen
    mates = [len(set(refs) & set(np.argsort(D[h])[1:4].tolist())) for h, refs in qs]
    assert np.mean(np.array(mates) == 3) > 0.9


@pytest.mark.parametrize("name", ["duels", "active_embedding", "embedding", "random_triplets"])
@pytest.mark.parametrize("kind", SCREEN_KINDS)
def test_learns_from_each_kind(name, kind):
    """Noisy raters on 40 clustered items: each learner finds a true top-3 neighbour for most items
    (chance is 3/39) after 15 screens per item."""
    X = _points(40, seed=7)
    D = cdist(X, X)
    oracle = _oracle(kind, X, seed=8, scale=0.3, lapse=0.05)
    p = make_planner(name, 40, question_kind=kind, random_state=9)
    for _ in range(15):
        p.observe(oracle.answer(p.next_questions(40)))
    nb = p.neighbor_graph(k=1).neighbors[:, 0]
    top3 = np.argsort(D + np.diag(np.full(40, np.inf)), axis=1)[:, :3]
    hit3 = np.mean([nb[i] in top3[i] for i in range(40)])
    floor = {"random_triplets": 0.2}.get(name, 0.8)  # random_triplets: win rates of few random screens
    assert hit3 >= floor, hit3


@pytest.mark.parametrize("name", [name for name in LEARNERS if ALGORITHMS[name].coordinates])
@pytest.mark.parametrize("kind", SCREEN_KINDS)
def test_fitted_coordinates_are_found_inside_the_screens(name, kind):
    """A screen study's exported coordinates are its learner's: ``fitted_coordinates`` of the screen
    planner is the wrapped learner's fitted space, once it has one."""
    X = _points()
    p = make_planner(name, len(X), question_kind=kind, random_state=2)
    oracle = _oracle(kind, X, seed=3)
    for _ in range(10):
        p.observe(oracle.answer(p.next_questions(40)))
    p.next_questions(1)  # a learner refits when it plans
    inner = fitted_coordinates(p.planner)
    assert inner is not None and np.shape(inner) == (len(X), np.shape(inner)[1])
    np.testing.assert_array_equal(fitted_coordinates(p), inner)


# ---------------------------------------------------------------------------------------------- oracles
def test_odd_one_out_oracle_follows_the_softmax_with_lapses():
    x = np.array([0.0, 1.0, 3.0])  # pairs: d01 = 1, d02 = 3, d12 = 2
    D = np.abs(x[:, None] - x[None, :])
    s, lapse, m = 0.8, 0.15, 60000
    odd = OddOneOutOracle(D, scale=s, lapse=lapse, random_state=0).odd_ones([(0, 1, 2)] * m)
    # odd = 2 when pair (0, 1) is chosen, 1 for (0, 2), 0 for (1, 2)
    w = np.exp(-np.array([2.0, 3.0, 1.0]) / s)  # pair leaving out item 0, 1, 2
    expected = lapse / 3 + (1 - lapse) * w / w.sum()
    got = np.bincount(odd, minlength=3) / m
    np.testing.assert_allclose(got, expected, atol=0.01)
    # the order shown does not matter
    odd2 = OddOneOutOracle(D, scale=s, lapse=lapse, random_state=1).odd_ones([(2, 0, 1)] * m)
    np.testing.assert_allclose(np.bincount(odd2, minlength=3) / m, expected, atol=0.01)


def test_odd_one_out_oracle_exact_and_two_way_reduces_to_the_triplet_model():
    x = np.array([0.0, 1.0, 3.0, 7.0])
    D = np.abs(x[:, None] - x[None, :])
    assert OddOneOutOracle(D).answer([(0, 1, 3), (2, 3, 1)]) == [(0, 1, 3, 3), (2, 3, 1, 3)]
    # a far third item is never the pair's partner: P(odd = b) ≈ the triplet model's P(a beats b for h)
    x = np.array([0.0, 0.5, 1.0, 1000.0])
    D = np.abs(x[:, None] - x[None, :])
    m, s = 40000, 0.4
    odd = OddOneOutOracle(D, scale=s, random_state=3).odd_ones([(0, 1, 3)] * m)
    assert set(np.unique(odd)) == {3}
    # screens must show three different items
    with pytest.raises(ValueError, match="three different"):
        OddOneOutOracle(D).answer([(0, 0, 1)])


def test_rank_oracle_is_sequential_choice_with_lapses():
    x = np.array([0.0, 1.0, 2.0, 3.0, 4.0])  # head 0, references 1..4 at distances 1..4
    D = np.abs(x[:, None] - x[None, :])
    s, lapse, m = 1.0, 0.2, 60000
    picks = RankOracle(D, scale=s, lapse=lapse, n_select=2, random_state=0).picks(
        np.zeros(m, np.int64), np.tile([4, 2, 3, 1], (m, 1)))
    w = np.exp(-np.array([1.0, 2.0, 3.0, 4.0]) / s)
    first = lapse / 4 + (1 - lapse) * w / w.sum()
    np.testing.assert_allclose(np.bincount(picks[:, 0], minlength=5)[1:] / m, first, atol=0.01)
    # second pick after item 1 was first: a softmax over 2, 3, 4 (plus lapse among them)
    after1 = picks[picks[:, 0] == 1, 1]
    w2 = w[1:]
    second = lapse / 3 + (1 - lapse) * w2 / w2.sum()
    np.testing.assert_allclose(np.bincount(after1, minlength=5)[2:] / len(after1), second, atol=0.015)
    assert np.all(picks[:, 0] != picks[:, 1])
    exact = RankOracle(D, n_select=3).answer([(0, (4, 2, 3, 1)), (4, (0, 1, 2, 3))])
    assert exact == [(0, (4, 2, 3, 1), (1, 2, 3)), (4, (0, 1, 2, 3), (3, 2, 1))]
    with pytest.raises(ValueError, match="cannot take 3 picks"):
        RankOracle(D, n_select=3).answer([(0, (1, 2, 3))])


def test_oracles_from_fitted_human_noise_transfer_the_scale():
    noise = HumanNoise(scale=0.1, lapse=0.05, log_likelihood=0.0, logistic_log_likelihood=0.0, agreement=0.9,
                       median_gap=0.2, n_answers=100)
    D = cdist(*(2 * [_points(12)]))
    o = noise.odd_one_out_oracle(D, random_state=0)
    r = noise.rank_oracle(D, n_select=3, random_state=0)
    t = noise.oracle(D, random_state=0)
    assert o.scale == r.scale == t.noise == pytest.approx(0.1 * D.max())
    assert o.lapse == r.lapse == 0.05 and r.n_select == 3
    assert isinstance(t, TripletOracle)


# ---------------------------------------------------------------------------------------------- registry
def test_algorithms_that_lose_to_random_triplets_say_so():
    for name in ("anntri", "ann", "random"):
        text = warning_for(name, "triplet")
        assert ".24" in text and ".68" in text and "random" in text
    # in rating studies ANNTri and ANN stall on ratings as noisy as people's (random pairs do not)
    for name in ("anntri", "ann"):
        assert ".13" in warning_for(name, "rating") and "pooled" in warning_for(name, "rating")
    assert warning_for("random", "rating") == ""
    for name in ("duels", "embedding", "active_embedding", "random_triplets", "comparison_forest"):
        assert warning_for(name, "triplet") == ""
    assert "rank" not in ALGORITHMS["comparison_forest"].question_kinds


class _RecordingFitter:
    """A fit process stand-in that runs each task at once and records it (a real future's shape)."""

    def __init__(self):
        self.tasks = []

    def fit(self, task):
        from concurrent.futures import Future

        self.tasks.append(task)
        done = Future()
        done.set_result(task.run())
        return done


@pytest.mark.parametrize("kind", SCREEN_KINDS)
def test_duels_refits_go_to_the_fitter_through_the_screens(kind):
    X = _points()
    fitter = _RecordingFitter()
    p = drive_as_pool(make_planner("duels", len(X), question_kind=kind, random_state=6), fitter)
    oracle = _oracle(kind, X, seed=6, scale=0.3)
    for _ in range(12):
        p.observe(oracle.answer(p.next_questions(40)))
    p.settle_fit()
    assert fitter.tasks, "no refit was handed to the fitter"
    assert p.planner.n_fits_ > 0  # the handed-over fits were put in place
