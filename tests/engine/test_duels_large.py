"""duels at many items: an exploring question reads the pair and a fixed sample of the fit, never a
whole row (O(n log n) per question made a 50,000-item pass plan for seconds), and the sampled ranks
stand in for the exact ones."""
import numpy as np

from engine import duels
from engine.duels import CandidateDuels, questions, scores


def _fitted(n: int, dim: int = 2, seed: int = 0) -> CandidateDuels:
    p = CandidateDuels(n, random_state=seed)
    X = np.random.default_rng(seed).normal(size=(n, dim))
    p.embedding_, p.n_fits_ = X, 1
    return p


def test_sampled_ranks_stand_in_for_the_exact_ones():
    n = 6000
    p = _fitted(n)
    X, h = p.embedding_, 17
    lk = scores._log_kernel(X, h, np.arange(n))
    lk[h] = np.inf
    exact = np.empty(n, np.int64)
    exact[np.argsort(-lk, kind="stable")] = np.arange(n)
    items = np.random.default_rng(1).choice(np.delete(np.arange(n), h), 300, replace=False)
    est = p._sampled_ranks(X, h, lk[items])
    err = np.abs(est - exact[items])
    # the count of a sample of 1,024 has a standard error of at most n / (2 sqrt(1024)) ~ 94 ranks
    assert err.mean() < 100 and err.max() < 400
    near = np.argsort(-lk)[1:6]
    assert np.all(p._sampled_ranks(X, h, lk[near]) < 30)  # the nearest stay near
    # the same sample for every question of one fit; a new fit draws a new one
    again = p._sampled_ranks(X, h, lk[items])
    np.testing.assert_array_equal(est, again)


def test_an_exploring_question_at_many_items_reads_no_whole_row(monkeypatch):
    n = duels.EXACT_RANK_ITEMS + 1000
    p = _fitted(n)
    seen = []
    kernel = scores._log_kernel

    def counting(X, h, c):
        seen.append(np.size(c))
        return kernel(X, h, c)

    monkeypatch.setattr(questions, "_log_kernel", counting)
    qs = [p._exploring_question(h, set()) for h in range(40)]
    assert max(seen) <= duels.RANK_SAMPLE
    assert all(q[0] == h and q[1] != q[2] and h not in q[1:] for h, q in enumerate(qs))
    # below the threshold the exact row is read (and kept), as before
    small = _fitted(500)
    seen.clear()
    small._exploring_question(3, set())
    assert max(seen) == 500


def test_results_kept_between_looks_follow_every_change(monkeypatch):
    from simulation import oracles

    # a certificate that moves with every answer (the real one needs many repeated duels), so a stale
    # memo would show
    monkeypatch.setattr(scores, "batch_certified",
                        lambda s, params, heads, W, N, valid: N.sum(axis=(1, 2)) > 2 * (heads % 9) + 4)
    X = np.random.default_rng(2).normal(size=(60, 2))
    oracle = oracles.TripletOracle.from_points(X, noise=0.02, model="human", lapse=0.0, random_state=3)
    p = CandidateDuels(60, random_state=4)
    seen = set()
    for step in range(80):
        qs = p.next_questions(30)
        p.observe(oracle.answer(qs))
        if step % 3 == 0:
            g = p.neighbor_graph(k=2)
            assert p._n_certified() == int(np.asarray(g.certified).sum())
            p._ranked_rows_kept = None  # every head redone: the rows kept and updated must be these
            again = p.neighbor_graph(k=2)
            np.testing.assert_array_equal(g.neighbors, again.neighbors)
            np.testing.assert_array_equal(g.estimates, again.estimates)
            np.testing.assert_array_equal(g.samples, again.samples)
            np.testing.assert_array_equal(g.certified, again.certified)
        memo = p._n_certified()
        p._certified_rows = None
        fresh = p._n_certified()
        assert memo == fresh
        seen.add(fresh)
    assert len(seen) > 5  # the count moved along the way, so the comparison meant something


def _trained(n: int = 80, seed: int = 5) -> CandidateDuels:
    """A fitted planner whose every third head had each pair of its shortlist answered 40 times more
    (enough for eliminations, and for certificates near their threshold), the others as a crowd left them."""
    from simulation import oracles

    X = np.random.default_rng(seed).normal(size=(n, 2))
    crowd = oracles.TripletOracle.from_points(X, noise=0.05, model="human", lapse=0.05, random_state=seed)
    p = CandidateDuels(n, random_state=seed, shortlist=8, min_shortlist=4)
    for _ in range(40):
        p.observe(crowd.answer(p.next_questions(n)))
    for h in range(0, n, 3):
        c = [int(x) for x in p.cands_[h] if x >= 0]
        p.observe(crowd.answer([(h, a, b) for i, a in enumerate(c) for b in c[i + 1:]] * 40))
    p.observe(crowd.answer(p.next_questions(n)))  # (eliminates the candidates beaten with confidence)
    return p


def test_the_graph_scored_all_heads_at_once_is_the_per_head_ranking(monkeypatch):
    """neighbor_graph scores every head in chunks of whole arrays; it must rank each head's shortlist
    as the per-head scoring does and certify exactly the heads the per-head certificate does."""
    monkeypatch.setattr(scores, "BATCH_HEADS", 7)  # several chunks, one of them partial
    p = _trained()
    assert p.n_fits_ > 0 and p.kappa_ is not None and len(p.eliminated_) > 0
    for kappa in (p.kappa_, None):  # the embedding prior, then the shortlist-order prior
        p.kappa_ = kappa
        p._certified_rows = p._ranked_rows_kept = None
        g = p.neighbor_graph(k=3)
        for h in range(p.n_items):
            cands = p.cands_[h][p.cands_[h] >= 0]
            W, N = p._matrices(h, cands)
            score, counts = p._scores(h, cands, W, N)
            order = np.lexsort((np.arange(len(cands)), -score))
            want = cands[order][:3]
            got = g.neighbors[h][: len(want)]
            # the same order, except where two scores are equal to rounding
            for a, b in zip(got, want, strict=True):
                if a != b:
                    sa, sb = score[cands == a][0], score[cands == b][0]
                    assert abs(sa - sb) < 1e-12, (h, got, want)
            np.testing.assert_allclose(np.sort(g.estimates[h][: len(want)]), np.sort(1.0 - score[order][:3]),
                                       rtol=0, atol=1e-12)
            assert bool(g.certified[h]) == p._certified(h, cands, W, N)
            np.testing.assert_array_equal(p._ranking(h)[0][:3], g.neighbors[h][: len(want)])
        assert p._n_certified() == int(np.asarray(g.certified).sum())
    assert np.asarray(g.certified).any() and not np.asarray(g.certified).all()


def _reference_shortlists(p: CandidateDuels) -> np.ndarray:
    """The shortlists as the per-head loop built them before (the whole-array version must agree)."""
    import math

    from scipy.spatial import cKDTree

    X, n, m = p.embedding_, p.n_items, p._target_size()
    olds = [[int(c) for c in p.cands_[h] if c >= 0 and c not in p.eliminated_.get(h, ())] for h in range(n)]
    old_rows = np.full((n, p.shortlist), -1, np.int64)
    for h, old in enumerate(olds):
        old_rows[h, : len(old)] = old
    scores, counts = p._batch_scores(old_rows)
    keeps = []
    for h, old in enumerate(olds):
        ranked = [old[i] for i in np.argsort(-scores[h, : len(old)], kind="stable") if counts[h, i] > 0]
        keeps.append(ranked[: math.ceil(m * duels.KEEP_SHARE)])
    sq = (X**2).sum(axis=1)
    k = min(n, m + 1 + max((len(g) for g in p.eliminated_.values()), default=0))
    near = np.asarray(cKDTree(X).query(X, k=k)[1], np.int64).reshape(n, k)
    out = np.full((n, p.shortlist), -1, np.int64)
    for h in range(n):
        chosen = list(keeps[h])
        for c in near[h]:
            if len(chosen) >= m:
                break
            if c != h and c not in p.eliminated_.get(h, ()) and c not in chosen and c < n:
                chosen.append(int(c))
        picked = np.asarray(chosen, np.int64)
        d = sq[h] + sq[picked] - 2.0 * X[picked] @ X[h]
        out[h, : len(chosen)] = picked[np.lexsort((picked, d))]
    return out


def test_shortlists_from_a_fit_keep_the_dueled_leaders_and_fill_with_the_nearest():
    import copy

    from simulation import oracles

    X = np.random.default_rng(5).normal(size=(90, 3))
    oracle = oracles.TripletOracle.from_points(X, noise=0.05, model="human", lapse=0.05, random_state=6)
    p = CandidateDuels(90, random_state=7)
    for _ in range(40):
        p.observe(oracle.answer(p.next_questions(45)))
    assert p.n_fits_ > 0 and len(p._codes)
    rng = np.random.default_rng(8)
    for h in rng.choice(90, 30, replace=False):  # eliminations, as duels make them
        row = p.cands_[h][p.cands_[h] >= 0]
        p._eliminate(int(h), rng.choice(row, 3, replace=False))
    p.embedding_ = p.embedding_ + rng.normal(scale=0.3, size=p.embedding_.shape)  # a new fit
    want = _reference_shortlists(copy.deepcopy(p))
    p._shortlists_from_fit(p.n_answers_)
    np.testing.assert_array_equal(p.cands_, want)
    kept = sum(len(r) for r in p._old_leaders(p._target_size()))
    assert kept > 20  # leaders were kept, so the comparison covers them
