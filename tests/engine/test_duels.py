"""CandidateDuels: exactness without noise, accuracy under human-like noise, replay, state."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.distance import cdist

from engine import duels
from engine.continuum import CONTINUUM_SPAN, continuum_start
from engine.duels import CandidateDuels
from engine.graph import PROGRESS_KEYS, NeighborGraph
from engine.random_triplets import RandomTriplets
from simulation.oracles import human_agree_probability


def points(n, seed):
    return np.random.default_rng(seed).random((n, 2))


def true_ranks(D):
    Dd = D.copy()
    np.fill_diagonal(Dd, np.inf)
    return (Dd[:, :, None] > Dd[:, None, :]).sum(axis=2)


def answer(D, qs, rng=None, scale=0.0, lapse=0.0):
    q = np.asarray(qs, np.int64).reshape(-1, 3)
    gap = D[q[:, 0], q[:, 1]] - D[q[:, 0], q[:, 2]]
    if rng is None:
        first = gap <= 0
    else:
        p = human_agree_probability(-gap, scale, lapse)  # the simulated raters' one human model
        first = rng.random(len(q)) < p
    return [(h, a, b, a if f else b) for (h, a, b), f in zip(q.tolist(), first, strict=True)]


def drive(planner, D, per_item, batch=None, **noise):
    n = len(D)
    batch = batch or n
    total = 0
    while total < per_item * n:
        qs = planner.next_questions(int(min(batch, per_item * n - total)))
        if not qs:
            break
        planner.observe(answer(D, qs, **noise))
        total += len(qs)
    return total


def test_noise_free_exact_neighbours():
    D = cdist(points(40, 0), points(40, 0))
    p = CandidateDuels(40, random_state=0)
    drive(p, D, 150)
    nb = p.neighbor_graph(1).neighbors[:, 0]
    np.testing.assert_array_equal(true_ranks(D)[np.arange(40), nb], 0)


def test_beats_random_triplets_under_human_noise():
    n, per_item = 60, 40
    D = cdist(points(n, 1), points(n, 1))
    ranks = true_ranks(D)
    hits = {}
    for name, planner in (("duels", CandidateDuels(n, random_state=3)), ("random", RandomTriplets(n, random_state=3))):
        drive(planner, D, per_item, rng=np.random.default_rng(7), scale=0.05, lapse=0.11)
        nb = planner.neighbor_graph(1).neighbors[:, 0]
        hits[name] = float(np.mean((nb >= 0) & (ranks[np.arange(n), np.maximum(nb, 0)] < 3)))
    assert hits["duels"] >= hits["random"] + 0.2, hits


def test_replay_and_state_round_trip():
    n = 30
    D = cdist(points(n, 2), points(n, 2))

    def run(split):
        p = CandidateDuels(n, random_state=5)
        asked = []
        for step in range(12):
            if step == split:
                state = p.to_state()
                for v in state.values():  # plain arrays and JSON scalars only
                    assert v is None or isinstance(v, (np.ndarray, int, float, str, dict))
                p = CandidateDuels.from_state(state)
            qs = p.next_questions(25)
            asked.append(qs)
            p.observe(answer(D, qs, rng=np.random.default_rng(step), scale=0.05, lapse=0.1))
        return asked, p.neighbor_graph(2).neighbors

    a1, nb1 = run(split=None)
    a2, nb2 = run(split=None)
    a3, nb3 = run(split=7)
    assert a1 == a2 == a3
    np.testing.assert_array_equal(nb1, nb2)
    np.testing.assert_array_equal(nb1, nb3)


def test_outside_a_pool_a_call_gives_each_head_one_question_and_finishes_its_refit():
    """A caller asking for many answers per item at once gets one question per head and comes back
    after observing, each time with the refit finished; a pool gets the whole budget (and, with no
    fitter to run refits beside it, finishes them in the call too)."""
    n = 20
    D = cdist(points(n, 3), points(n, 3))
    p = CandidateDuels(n, random_state=0, warmup=1, fit_work=1)
    assert p.pool is False and "pool" not in p.get_params()
    for _ in range(6):
        qs = p.next_questions(10 * n)
        assert sorted(h for h, _, _ in qs) == list(range(n))  # every head once, none twice
        p.observe(answer(D, qs))
        assert p.fit_job_ is None  # a refit started by the call ended in it, whatever fit_work
    assert p.n_fits_ >= 3
    restored = CandidateDuels.from_state(p.to_state())
    assert restored.pool is False  # not saved: whoever drives the planner sets it
    p.pool = True
    assert len(p.next_questions(5 * n)) == 5 * n
    while not p._needs_refit():
        p.observe(answer(D, p.next_questions(5 * n)))
    p.next_questions(n)
    assert p.fit_job_ is None  # no fitter: the pool's refit ends in the call, as offline


def test_a_larger_study_warms_up_longer_on_random_triplets():
    """``warmup="auto"`` (the default) is 3 up to 1,000 items and grows with the log of the items beyond:
    no fit, and only random triplets, until each head has that many answers; a fixed warmup is kept."""
    assert duels.fits.auto_warmup(85) == duels.fits.auto_warmup(1000) == 3.0
    assert duels.fits.auto_warmup(5000) == pytest.approx(6.0)
    assert duels.fits.auto_warmup(50_000) == pytest.approx(10.29, abs=0.01)
    n = 1200
    D = cdist(points(n, 4), points(n, 4))
    auto = CandidateDuels(n, random_state=0, dim=2)
    assert auto.get_params()["warmup"] == "auto" and auto.warmup_ == pytest.approx(3.340, abs=1e-3)
    assert CandidateDuels(n, warmup=3).warmup_ == 3.0
    drive(auto, D, 3.3)  # (a fixed warmup of 3 would have fitted at 3 answers per item)
    assert auto.n_fits_ == 0 and auto.embedding_ is None
    drive(auto, D, 0.05)  # (drive counts from where the planner is)
    auto.next_questions(n)
    assert auto.n_fits_ == 1
    assert CandidateDuels.from_state(auto.to_state()).warmup_ == auto.warmup_


def test_questions_distinct_within_a_call_and_pending_counted():
    n = 20
    p = CandidateDuels(n, random_state=0, warmup=0)
    p.pool = True  # as many as asked for
    D = cdist(points(n, 3), points(n, 3))
    qs = p.next_questions(200)
    keys = [(h, min(a, b), max(a, b)) for h, a, b in qs]
    assert len(keys) == len(set(keys))
    assert all(len({h, a, b}) == 3 for h, a, b in qs)
    heads = np.bincount([q[0] for q in qs], minlength=n)
    assert heads.max() - heads.min() <= 1  # spread over heads
    assert p.progress()["pending"] == len(qs)
    p.observe(answer(D, qs[:50]))
    assert p.progress()["pending"] == len(qs) - 50
    assert p.forget(qs[50:]) == len(qs) - 50
    assert p.progress()["pending"] == 0
    assert p.forget(qs[50:]) == 0  # nothing left to release


def test_answer_to_never_issued_question_is_accepted():
    p = CandidateDuels(10, random_state=0)
    p.observe([(0, 1, 2, 2), (0, 2, 1, 1), (3, 4, 5, 4)])
    prog = p.progress()
    assert prog["answers"] == 3 and prog["pending"] == 0
    assert set(PROGRESS_KEYS) <= set(prog)
    g = p.neighbor_graph(1)
    assert isinstance(g, NeighborGraph) and g.neighbors.shape == (10, 1)
    # both orderings of (a, b) count as the same duel
    assert p._duel_table().tolist() == [[0, 1, 2, 1, 2], [3, 4, 5, 1, 1]]


@pytest.mark.parametrize("rows, msg", [
    ([(0, 1, 2)], "shape"),
    ([(0, 1, 2, 3)], "winner"),
    ([(0, 0, 2, 2)], "different"),
    ([(0, 1, 12, 1)], "indices"),
])
def test_bad_rows(rows, msg):
    with pytest.raises(ValueError, match=msg):
        CandidateDuels(10).observe(rows)


@pytest.mark.parametrize("params, msg", [
    ({"shortlist": 1}, "shortlist"),
    ({"shortlist": 4, "min_shortlist": 6}, "min_shortlist"),
    ({"delta": 0.0}, "delta"),
    ({"explore": 1.5}, "explore"),
    ({"refit_growth": 0}, "refit_growth"),
    ({"warmup": -1}, "warmup"),
    ({"warmup": "soon"}, "warmup"),
])
def test_bad_params(params, msg):
    with pytest.raises(ValueError, match=msg):
        CandidateDuels(10, **params)


def test_bad_calls():
    p = CandidateDuels(10)
    with pytest.raises(ValueError, match="budget"):
        p.next_questions(2.5)
    with pytest.raises(ValueError, match="k must"):
        p.neighbor_graph(0)
    with pytest.raises(ValueError, match="forget"):
        p.forget([(0, 1)])
    with pytest.raises(ValueError, match="state"):
        CandidateDuels.from_state(RandomTriplets(10).to_state())


class _TrueEmbedding:
    """Stands in for engine.embedding: returns the true points, records what it was given."""

    def __init__(self, X):
        self.X, self.calls = X, []

    def fit_embedding(self, triplets, n_items, dim=2, init=None, random_state=None, return_info=False, **kw):
        self.calls.append((len(triplets), n_items, None if init is None else init.copy(), random_state))
        info = {"nit": 1, "nfev": 1, "converged": True}
        return (self.X.copy(), info) if return_info else self.X.copy()


def test_shortlists_follow_the_embedding(monkeypatch):
    from engine.duels import fits

    n = 50
    X = points(n, 4)
    D = cdist(X, X)
    fake = _TrueEmbedding(X)
    monkeypatch.setattr(fits, "_embedding_module", lambda: fake)
    p = CandidateDuels(n, random_state=0, dim=2)
    drive(p, D, 30, rng=np.random.default_rng(0), scale=0.05, lapse=0.11)
    # refits are warm-started from the previous embedding, on every answer so far
    assert len(fake.calls) >= 3 and fake.calls[0][2] is None
    np.testing.assert_array_equal(fake.calls[-1][2], X)
    assert fake.calls[-1][0] <= p.n_answers_ and fake.calls[-1][1] == n
    # the true neighbour is on every head's shortlist and the duels keep nearly all heads'
    # choices among their 3 nearest (under human-like noise exact ties are coin flips)
    ranks = true_ranks(D)
    assert all((ranks[h, p.cands_[h][p.cands_[h] >= 0]] == 0).any() for h in range(n))
    nb = p.neighbor_graph(1).neighbors[:, 0]
    assert np.mean(ranks[np.arange(n), nb] < 3) >= 0.9
    assert p.to_state()["embedding"].shape == (n, 2)


def test_auto_dimension_is_chosen_on_answers_no_fit_had_seen():
    """dim="auto" keeps every dimension warm and takes shortlists from the one that predicted the
    newest answers best: many dimensions for items that need them; the choice survives a state
    round trip, and a version-1 state (one fixed-dimension embedding) still loads."""
    from simulation.oracles import TripletOracle

    n = 60
    X = np.random.default_rng(3).random((n, 8))
    oracle = TripletOracle.from_points(X, random_state=0)
    p = CandidateDuels(n, random_state=0)
    while p.n_answers_ < 60 * n:
        p.observe(oracle.answer(p.next_questions(200)))
    assert set(p.embeddings_) == {1, 2, 4, 8}
    assert p.chosen_dim_ >= 4, p.dim_scores_
    assert p.progress()["embedding_dim"] == p.chosen_dim_
    q = CandidateDuels.from_state(p.to_state())
    assert q.chosen_dim_ == p.chosen_dim_ and q.next_questions(30) == p.next_questions(30)


def test_the_graph_is_anytime_before_the_first_embedding_fit():
    """Before its warm-up is over (no fit yet) a head that has answers already names the item
    its answers chose most; a head without any names none."""
    p = CandidateDuels(6, random_state=0, warmup=100)
    p.observe([(0, 1, 2, 1), (0, 1, 3, 1), (0, 2, 3, 3)])
    assert p.n_fits_ == 0
    g = p.neighbor_graph(1)
    assert g.neighbors[0, 0] == 1 and (g.neighbors[1:, 0] == -1).all()


def test_a_won_duel_counts_in_full_only_where_duels_are_answered_consistently():
    """Before repeats weigh the embedding, a candidate that beat the leader once leads where the
    embedding predicts fresh answers well (share of all duels), not where duels look like coin
    flips (the per-pair average, whose untried pairs sit at the shortlist-order prior)."""
    n = 12
    p = CandidateDuels(n, random_state=0, dim="auto")
    p.cands_[0] = [*range(1, n), -1]
    p.observe([(0, 3, 1, 3)])
    p.n_answers_ = 10 * n
    p.dim_scores_[:] = [[90.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]  # prequential accuracy .9
    assert p._duel_trust() == 1.0
    assert p._ranking(0)[0][0] == 3
    p.dim_scores_[:] = [[55.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]  # .55: near coin flips
    assert p._duel_trust() == 0.0
    assert p._ranking(0)[0][0] == 1
    p.dim_scores_[:] = [[90.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]
    p.n_answers_ = 5 * n  # too early: the warm-up's random triplets dominate the accuracy
    assert p._duel_trust() == 0.0
    rows = np.full((n, n), -1)
    rows[0, : n - 1] = range(1, n)
    p.n_answers_ = 10 * n
    score, _ = p._batch_scores(rows)
    assert int(rows[0, np.argmax(score[0, : n - 1])]) == 3


def test_a_larger_dimension_must_beat_a_smaller_one_by_a_standard_error():
    """dim="auto" takes the smallest dimension whose fits predicted fresh answers within one
    standard error of the best one (the alien eggs: 2, 4 and 8 within a point of each other)."""
    p = CandidateDuels(20, random_state=0)
    p.dim_scores_[:] = [[590.0, 598.0, 580.0, 0.0], [1000.0, 1000.0, 1000.0, 0.0]]  # 4-D ahead by .008 (se .016)
    assert p.chosen_dim_ == 2
    p.dim_scores_[:] = [[600.0, 700.0, 720.0, 0.0], [1000.0, 1000.0, 1000.0, 0.0]]  # 8-D ahead of 4-D by .02
    assert p.chosen_dim_ == 8
    p.dim_scores_[:] = [[0.0, 700.0, 0.0, 0.0], [0.0, 1000.0, 0.0, 0.0]]  # only 4-D scored yet
    assert p.chosen_dim_ == 4


def test_the_dimension_is_chosen_on_refits_that_scored_several_dimensions_on_the_same_answers():
    """The leading dimension is refitted, so scored, at every refit, the others only now and then: a
    refit that fitted the leader alone counts in the regime gates' tally (``dim_scores_``), not in the
    tally the dimension is chosen from (``dim_compare_``), or the leader, scored by its newest fits on
    the newest answers, would look better for being scored later."""
    from engine import embedding as emb
    from engine.duels.dims import AUTO_DECAY

    n = 20
    p = CandidateDuels(n, random_state=0)
    rng = np.random.default_rng(0)
    X = rng.random((n, 2))
    for d in duels.AUTO_DIMS:
        p.embeddings_[d] = np.pad(X, ((0, 0), (0, max(0, d - 2))))[:, :d] if d > 1 else X[:, :1]
    heads = rng.integers(0, n, 200)
    trip = np.array([(h, (h + 1) % n, (h + 2 + rng.integers(n - 3)) % n) for h in heads])
    p.fitted_triplets_ = 0
    p.fresh_dims_ = np.array([True, False, False, False])  # the leader alone was refitted
    p._score_dims(emb, trip)
    assert p.dim_scores_[1, 0] == len(trip) and not p.dim_compare_.any()
    p.fresh_dims_[:] = True  # a refit of every dimension: both tallies, on the same answers
    p._score_dims(emb, trip)
    assert np.array_equal(p.dim_compare_[1], [len(trip)] * 4)
    assert p.dim_scores_[1, 0] == pytest.approx(len(trip) * (1 + AUTO_DECAY))
    # the choice reads the comparison: the 4-D fit, ahead there, is chosen though the leader's own
    # tally (its later fits, on later answers) is higher still
    p.dim_compare_[:] = [[600.0, 700.0, 690.0, 0.0], [1000.0, 1000.0, 1000.0, 0.0]]
    p.dim_scores_[:] = [[900.0, 700.0, 690.0, 0.0], [1000.0, 1000.0, 1000.0, 0.0]]
    assert p.chosen_dim_ == 4
    q = CandidateDuels.from_state(p.to_state())
    assert np.array_equal(q.dim_compare_, p.dim_compare_) and q.chosen_dim_ == 4
    old = p.to_state()
    del old["dim_compare"]  # a state saved before the comparison tally: the choice reads dim_scores_
    assert CandidateDuels.from_state(old).chosen_dim_ == 2


def test_the_line_must_beat_every_other_dimension_and_keeps_the_coin_flip_regime():
    """The line (dimension 1, listed last in AUTO_DIMS) is chosen only where it predicted fresh answers
    a standard error better than every other dimension; the regime gates read the t-STE fits, and
    where the line places the items best the coin-flip regime is not left."""
    assert duels.AUTO_DIMS[-1] == 1
    p = CandidateDuels(20, random_state=0)
    p.n_answers_ = 20 * 20
    p.dim_scores_[:] = [[600.0, 598.0, 590.0, 610.0], [1000.0, 1000.0, 1000.0, 1000.0]]  # ahead by .01 < se
    assert p.chosen_dim_ == 2
    p.dim_scores_[:] = [[600.0, 598.0, 590.0, 640.0], [1000.0, 1000.0, 1000.0, 1000.0]]  # ahead by .04
    assert p.chosen_dim_ == 1 and p._best_dim_index(line=False) == 0
    assert p._duel_trust() == 0.0  # the 2-D fit's .60, not the line's .64
    p.coin_ = True
    p.dim_scores_[:] = [[650.0, 598.0, 590.0, 700.0], [1000.0, 1000.0, 1000.0, 1000.0]]
    p._update_coin()
    assert p.coin_  # the 2-D fit's .65 would leave it, but the line is chosen
    p.dim_scores_[:] = [[650.0, 598.0, 590.0, 600.0], [1000.0, 1000.0, 1000.0, 1000.0]]
    p._update_coin()
    assert not p.coin_


def test_a_line_starts_from_the_order_along_the_leading_fit():
    """continuum_start orders items along a bent curve by geodesic distance from one end (evenly
    spaced), whatever order the items come in; a fixed dim=1 fits the human model on a line."""
    rng = np.random.default_rng(0)
    n = 80
    t = np.sort(rng.random(n)) * 3.0
    curve = np.column_stack([np.cos(t), np.sin(t)]) * (1 + 0.2 * t[:, None])  # a spiral arc: no straight axis
    perm = rng.permutation(n)
    line = continuum_start(curve[perm])[:, 0]
    order = np.argsort(line)
    ranks = np.argsort(perm[order])  # where each item of the curve lands on the line
    assert np.all(np.diff(ranks) > 0) or np.all(np.diff(ranks) < 0)
    assert np.allclose(np.sort(line), np.linspace(0.0, CONTINUUM_SPAN, n))
    from simulation.oracles import TripletOracle

    x = np.linspace(0.0, 1.0, 40)[:, None]
    adjacent = []
    for seed in range(4):  # one seed's share swings .38-.75 with the BLAS and numpy build: judge the mean
        oracle = TripletOracle.from_points(x, random_state=seed)
        p = CandidateDuels(40, random_state=seed, dim=1)
        while p.n_answers_ < 30 * 40:
            p.observe(oracle.answer(p.next_questions(40)))
        nb = p.neighbor_graph(1).neighbors[:, 0]
        assert p.embedding_.shape == (40, 1)
        adjacent.append(np.mean(np.abs(nb - np.arange(40)) == 1))
    # an adjacent item (a random pick: ~5%; seeds 0-3 gave .57 on average with numpy 2.4, .70 for seed 0 on 1.26)
    assert np.mean(adjacent) >= 0.45, adjacent


def test_where_duels_are_coin_flips_most_questions_place_items_in_the_embedding(monkeypatch):
    """From TRUST_FROM answers per item on, where the fit predicts fresh answers no better than
    TRUST_ACCURACY[0], most questions are the active embedding's (uncertain pairs weighted to the
    head's near items) and refits come sooner; elsewhere duels, with ``explore`` random triplets.
    The regime is decided when a refit starts, ends from COIN_LEAVE on and survives a state
    round trip."""
    from engine.duels import COIN_EXPLORE, COIN_LEAVE, COIN_REFIT, TRUST_ACCURACY, TRUST_FROM, questions

    EXPLORING = questions.exploring_question

    n = 60
    D = cdist(points(n, 4), points(n, 4))
    rng = np.random.default_rng(5)
    shares = {}
    for acc in (0.55, 0.9):
        p = CandidateDuels(n, random_state=0)
        drive(p, D, 12, rng=rng, scale=0.05, lapse=0.1)
        assert p.n_answers_ >= TRUST_FROM * n
        p.dim_scores_[0] = acc * p.dim_scores_[1]
        p._update_coin()
        assert p._coin_flips() == (acc < TRUST_ACCURACY[0])
        q = CandidateDuels.from_state(p.to_state())
        assert q.coin_ == p.coin_ and q.next_questions(n) == p.next_questions(n)
        p.fitted_on_ = p.n_answers_  # no refit in this call
        placing = []
        monkeypatch.setattr(questions, "exploring_question", lambda s, params, h, taken, placing=placing:
                            placing.append(h) or EXPLORING(s, params, h, taken))
        qs = p.next_questions(2 * n)
        shares[acc] = len(placing) / len(qs)
        p.fitted_on_ = int(p.n_answers_ / (1.0 + COIN_REFIT)) - 1
        assert p._grown(p.fitted_on_) == (acc < TRUST_ACCURACY[0])
        if p.coin_:  # stays below COIN_LEAVE, ends from it on
            p.dim_scores_[0] = (COIN_LEAVE - 0.01) * p.dim_scores_[1]
            p._update_coin()
            assert p.coin_
            p.dim_scores_[0] = (COIN_LEAVE + 0.01) * p.dim_scores_[1]
            p._update_coin()
            assert not p.coin_
    assert abs(shares[0.55] - COIN_EXPLORE) < 0.1 and shares[0.9] == 0.0, shares


def test_kept_rows_and_pending_index_ask_what_a_fresh_computation_asks(monkeypatch):
    """The fit's rows kept for exploring questions (dropped when the embedding changes, never
    saved) and the per-call index of pending pairs give the questions a planner that recomputes
    them every time gives (rows per question, pending duels looked up pair by pair): answers
    arriving late, questions forgotten, a state round trip midway."""
    from engine.duels import questions, scores
    from engine.duels.scores import _log_kernel

    n = 30
    D = cdist(points(n, 6), points(n, 6))
    ROWS, ADD_PENDING = questions.ROW_CACHE_ENTRIES, questions.add_pending

    def run(keep_rows):
        monkeypatch.setattr(questions, "ROW_CACHE_ENTRIES", ROWS if keep_rows else 0)
        p = CandidateDuels(n, random_state=2, explore=0.4, explore_pairs=8, warmup=1)
        monkeypatch.setattr(questions, "add_pending", ADD_PENDING if keep_rows else (
            lambda h, cands, N, pairs: scores.matrices(p._s, h, cands, pending=True)[1]))
        asked, late = [], []
        for step in range(30):
            if step == 17:
                state = p.to_state()
                assert not any("row" in k for k in state)
                p = CandidateDuels.from_state(state)
            qs = p.next_questions(20)
            asked.append(qs)
            p.observe(answer(D, late, rng=np.random.default_rng(step), scale=0.05, lapse=0.1))
            p.forget(qs[8:10])
            p.observe(answer(D, qs[:8], rng=np.random.default_rng(step + 99), scale=0.05, lapse=0.1))
            late = qs[10:]
            if keep_rows and p._rows:
                assert p._rows_of is p.embedding_
                for h, (lk, rank) in p._rows.items():
                    fresh = _log_kernel(p.embedding_, h, np.arange(n))
                    fresh[h] = np.inf
                    np.testing.assert_array_equal(lk, fresh)
                    np.testing.assert_array_equal(np.argsort(rank), np.argsort(-fresh, kind="stable"))
        return asked, p.to_state()

    (a1, s1), (a2, s2) = run(True), run(False)
    assert s1["n_fits"] > 1
    assert a1 == a2
    for key in ("triplets", "eliminated", "pending", "cands", "embedding", "asked"):
        np.testing.assert_array_equal(s1[key], s2[key])


def test_heads_scored_together_ask_what_heads_scored_one_by_one_ask(monkeypatch):
    """A call scores the shortlists of the heads it is about to ask together (``PLAN_CHUNK``); a
    head's beaten candidates leave when it is asked a duel, as before. The questions, eliminations
    (in order) and state are those of a planner that scores each head alone when it comes up (a
    pool, late answers, a state round trip)."""
    from engine.duels import questions

    n = 40
    D = cdist(points(n, 7), points(n, 7))
    score_heads = questions.score_heads

    def counted(p, chunks):
        """p, its chunks of heads scored together counted in ``chunks``."""
        monkeypatch.setattr(questions, "score_heads",
                            lambda s, params, heads, *a: (chunks.append(len(heads)), score_heads(s, params, heads, *a)))
        p.pool = True
        return p

    def run(chunk):
        monkeypatch.setattr(questions, "PLAN_CHUNK", chunk)
        chunks = []
        p = counted(CandidateDuels(n, random_state=3, warmup=2, shortlist=3, min_shortlist=2, delta=0.9), chunks)
        asked, late = [], []
        for step in range(150):
            if step == 101:
                p = counted(CandidateDuels.from_state(p.to_state()), chunks)
            qs = p.next_questions(40)
            asked.append(qs)
            p.observe(answer(D, late, rng=np.random.default_rng(step), scale=0.002, lapse=0.02))
            p.observe(answer(D, qs[:30], rng=np.random.default_rng(step + 99), scale=0.002, lapse=0.02))
            late = qs[30:]
        return asked, p.to_state(), chunks

    (a1, s1, c1), (a64, s64, c64) = run(1), run(64)
    assert max(c1) == 1 and max(c64) > 8  # (the chunks were really scored together)
    assert s64["n_fits"] > 1 and len(s64["eliminated"]) > 0
    assert a1 == a64
    for key in ("triplets", "eliminated", "pending", "cands", "embedding", "asked"):
        np.testing.assert_array_equal(s1[key], s64[key])


def test_on_a_line_an_exploring_question_has_an_item_on_either_side_of_the_head():
    """Where the fit is a line, an exploring pair straddles the head (only such a pair's answer moves
    with the head's place); in a map, pairs on one side are asked too."""
    n = 60
    p = CandidateDuels(n, random_state=0, dim=1)
    p.embedding_ = np.linspace(0.0, 10.0, n)[:, None]
    heads = range(10, 50)
    for h in heads:
        _, a, b = p._exploring_question(h, set())
        assert (a - h) * (b - h) < 0, (h, a, b)
    q = CandidateDuels(n, random_state=0, dim=2)
    q.embedding_ = np.column_stack([np.linspace(0.0, 10.0, n), np.zeros(n)])
    one_side = sum((a - h) * (b - h) > 0 for h in heads for _, a, b in [q._exploring_question(h, set())])
    assert one_side > 0


def test_a_refit_fits_the_leading_dimension_first_then_the_cheapest_with_the_line_after_its_start():
    """A refit that checks every dimension fits the leading one first, then the others from the cheapest
    up with the line right after the smallest map (its start): in a live pool a refit of the leading
    one falling due cuts the rest short, and the line is cheap."""
    from engine import embedding

    p = CandidateDuels(20, random_state=0)
    p.n_answers_ = 20 * 20
    p.dim_scores_[:] = [[600.0, 700.0, 590.0, 580.0], [1000.0, 1000.0, 1000.0, 1000.0]]  # 4-D leads
    p._start_fit(embedding, np.empty((0, 3), np.int64))
    assert [duels.AUTO_DIMS[i] for i in p.fit_job_["dims"]] == [4, 2, 1, 8]
