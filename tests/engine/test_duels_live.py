"""CandidateDuels in a live worker: refits beside the calls (a ``fitter``), exact replay, state
versions, the embedding prior's weight."""
from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.spatial.distance import cdist

import engine.duels as duels
from engine.duels import KAPPA_GRID, CandidateDuels
from engine.duels.scores import _pair_preference
from simulation.oracles import human_agree_probability


def live(n: int, **params) -> CandidateDuels:
    """The planner as the worker drives it: a pool (the whole budget, refits spread over calls)."""
    p = CandidateDuels(n, **params)
    p.pool = True
    return p


def restored(state: dict) -> CandidateDuels:
    p = CandidateDuels.from_state(state)
    p.pool = True
    return p


def points(n, seed, dim=2):
    return np.random.default_rng(seed).random((n, dim))


def answer(D, qs, rng, scale=0.05, lapse=0.05):
    q = np.asarray(qs, np.int64).reshape(-1, 3)
    gap = D[q[:, 0], q[:, 1]] - D[q[:, 0], q[:, 2]]
    p = human_agree_probability(-gap, scale, lapse)  # the simulated raters' one human model
    first = rng.random(len(q)) < p
    return [(h, a, b, a if f else b) for (h, a, b), f in zip(q.tolist(), first, strict=True)]


def _jsonable(state):
    """The state as it goes through storage: arrays to lists, through JSON and back."""
    def plain(v):
        if isinstance(v, np.ndarray):
            return v.tolist()
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return v
    return json.loads(json.dumps({k: plain(v) for k, v in state.items()}))


class Lagged:
    """A fitter whose fits are ready ``lag`` looks after they were handed over (a fit beside the
    passes that takes that many passes), keyed by the task as the worker's pool is, so a planner
    restored from its state finds its refit where the saved one left it."""

    def __init__(self, lag: int) -> None:
        self.lag, self.looks, self.tasks = lag, {}, []

    def fit(self, task):
        if task.key not in self.looks:
            self.tasks.append(task)
        return self._Handle(self, task)

    class _Handle:
        def __init__(self, fitter, task):
            self.fitter, self.task = fitter, task
            fitter.looks.setdefault(task.key, 0)

        def done(self):
            f = self.fitter
            f.looks[self.task.key] += 1
            return f.looks[self.task.key] > f.lag

        def result(self):
            return duels.run_fit(self.task)


def beside(n: int, lag: int, **params) -> CandidateDuels:
    """The planner as a worker with a fit process drives it: a pool whose refits take ``lag`` calls."""
    p = live(n, **params)
    p.fitter = Lagged(lag)
    return p


def test_a_refit_runs_beside_the_calls_and_its_result_is_the_inline_fit():
    """Handed to a fitter, a refit leaves every call its whole budget, planned from the previous
    fit's shortlists until the result is ready; the result put in place is what the same refit
    gives inside a call (a pure function of its task)."""
    n = 40
    D = cdist(points(n, 0), points(n, 0))
    rng = np.random.default_rng(1)
    p = beside(n, 3, random_state=0, dim=2)
    waited = 0
    while p.n_answers_ < 30 * n:
        job, cands, fits = p.fit_job_, p.cands_.copy(), p.n_fits_
        qs = p.next_questions(40)
        assert len(qs) == 40
        if job is not None and p.n_fits_ == fits:
            waited += 1
            np.testing.assert_array_equal(p.cands_, cands)  # the shortlists wait for the fit
        p.observe(answer(D, qs, rng))
    assert p.n_fits_ >= 3 and waited >= 2 * p.n_fits_
    # every fit taken is the fit of its own task, computed again here
    for task in p.fitter.tasks[-2:]:
        again = duels.run_fit(task)
        if p.fit_job_ is None or task.key[1] < p.fit_job_["triplets"]:
            for d, X in again.items():
                assert X.shape == (n, d)
    last = p.fitter.tasks[-1]
    if p.fit_job_ is None:
        np.testing.assert_array_equal(p.embeddings_[last.dims[-1]], duels.run_fit(last)[last.dims[-1]])


def test_without_a_fitter_a_pool_refits_inside_the_call_as_offline():
    """A pool with no fitter (proxima plan, a replay) finishes each refit inside the call that starts
    it: the same answers in the same batches give the same state as the default mode's fits."""
    n = 30
    D = cdist(points(n, 1), points(n, 1))
    p = live(n, random_state=0)
    rng = np.random.default_rng(2)
    while p.n_answers_ < 20 * n:
        p.observe(answer(D, p.next_questions(n), rng))
        assert p.fit_job_ is None
    assert p.n_fits_ >= 4


def test_the_leading_dimension_gives_the_shortlists_before_the_others_finish():
    """A refit of every dimension fits the chosen one first; the shortlists are rebuilt from it as
    soon as it is ready while the other dimensions go on beside the calls (they only count in the
    choice of dimension once the whole refit is done)."""
    n = 40
    D = cdist(points(n, 2), points(n, 2))
    rng = np.random.default_rng(3)
    p = beside(n, 2, random_state=0)
    seen = 0
    while p.n_answers_ < 30 * n:
        job = p.fit_job_
        fits, cands = p.n_fits_, p.cands_.copy()
        p.observe(answer(D, p.next_questions(40), rng))
        if job is not None and p.fit_job_ is not None and p.fit_job_.get("published") and p.n_fits_ == fits + 1:
            # published in this call, the rest of the refit still under way
            assert p.fit_job_["dims"] and p.fit_job_["fitted"] == 1 << p._best_dim_index()
            assert np.array_equal(p.embedding_, p.embeddings_[p.chosen_dim_])
            assert not np.array_equal(p.cands_, cands)
            seen += 1
    assert seen >= 1


def test_exact_replay_with_a_refit_under_way_across_a_state_round_trip():
    """Saving and restoring the state (through JSON) in the middle of a spread refit changes
    nothing: the same answers in the same batches give the same questions and the same state."""
    n = 40
    D = cdist(points(n, 2), points(n, 2))

    def run(split):
        fitter = Lagged(4)
        p = live(n, random_state=3)
        p.fitter = fitter
        asked, under_way = [], []
        for step in range(30):
            under_way.append(p.fit_job_ is not None)
            if step == split:
                p = restored(_jsonable(p.to_state()))
                p.fitter = fitter  # the worker's pool: the refit under way goes on there
            qs = p.next_questions(30)
            asked.append(qs)
            p.observe(answer(D, qs, np.random.default_rng(step)))
        return asked, p, under_way

    # a run split at a step is the unsplit run up to that step: the unsplit run says which steps fall
    # inside a refit under way
    a1, p1, under_way = run(None)
    splits = [s for s in range(8, 30) if under_way[s]]
    assert splits, "no step fell inside a refit under way"
    a2, p2, under_way_split = run(splits[0])
    assert under_way_split[splits[0]]  # the state was saved and restored mid-refit
    assert a1 == a2
    s1, s2 = p1.to_state(), p2.to_state()
    assert s1["fit_job"] == s2["fit_job"] and s1["kappa"] == s2["kappa"]
    np.testing.assert_array_equal(p1._duel_table(), p2._duel_table())
    for key in ("triplets", "eliminated", "cands", "embedding", "dim_scores"):
        np.testing.assert_array_equal(s1[key], s2[key])
    for d in s1["embeddings"]:
        np.testing.assert_array_equal(s1["embeddings"][d], s2["embeddings"][d])
    np.testing.assert_array_equal(p1.neighbor_graph(2).neighbors, p2.neighbor_graph(2).neighbors)


@pytest.mark.parametrize("version", [1, 2, 3, 4, 5, 7])
def test_a_state_of_another_version_is_refused_in_words(version):
    """Only the state this version writes loads (no release ever wrote another); any other says which
    version it is and which one loads."""
    p = live(12, random_state=0)
    p.observe(answer(cdist(points(12, 2), points(12, 2)), p.next_questions(20), np.random.default_rng(0)))
    state = {**p.to_state(), "version": version}
    with pytest.raises(ValueError, match=rf"state is of CandidateDuels v{version}, not CandidateDuels v6"):
        CandidateDuels.from_state(state)
    assert CandidateDuels.VERSION == 6 and restored(_jsonable(p.to_state())).n_answers_ == p.n_answers_


@pytest.mark.parametrize("params, msg", [({"fit_work": 0}, "fit_work"), ({"fit_work": 2.5}, "fit_work")])
def test_bad_fit_work(params, msg):
    with pytest.raises(ValueError, match=msg):
        CandidateDuels(10, **params)


def _with_duels(X, repeats, agree, rng):
    """A planner whose embedding is X and whose heads dueled their 5 nearest pairwise ``repeats``
    times: answers drawn from the embedding's own prediction (agree) or one fixed answer per pair
    against it (a per-item ranking the embedding does not hold)."""
    n = len(X)
    p = live(n, random_state=0, dim=2)
    p.embedding_ = X
    Dx = cdist(X, X)
    np.fill_diagonal(Dx, np.inf)
    rows = []
    for h in range(n):
        near = np.argsort(Dx[h])[:5]
        for i in range(5):
            for j in range(i + 1, 5):
                a, b = sorted((int(near[i]), int(near[j])))
                pa = _pair_preference(X, np.array([h]), np.array([a]), np.array([b]))[0]
                wins = rng.binomial(repeats, pa) if agree else (0 if pa > 0.5 else repeats)
                rows += [(h, a, b, a)] * int(wins) + [(h, a, b, b)] * (repeats - int(wins))
    p.observe(rows)
    return p


def test_embedding_prior_weight_follows_how_far_repeated_duels_stray_from_the_fit():
    rng = np.random.default_rng(0)
    X = points(40, 5) * 3
    agreeing = _with_duels(X, 6, True, rng)
    agreeing._estimate_kappa()
    contrary = _with_duels(X, 6, False, rng)
    contrary._estimate_kappa()
    assert agreeing.kappa_ >= 64 and contrary.kappa_ == KAPPA_GRID[0]
    # with a large weight the reading follows the embedding, with a small one the duels
    h = 0
    near = np.argsort(np.where(np.arange(40) == h, np.inf, cdist(X, X)[h]))[:5]
    for p in (agreeing, contrary):
        p.cands_[h] = -1
        p.cands_[h, :5] = near
    assert agreeing._ranking(h)[0][0] == near[0]
    assert contrary._ranking(h)[0][0] != near[0]


def test_noise_free_exact_neighbours_with_refits_beside_the_calls():
    n = 40
    D = cdist(points(n, 6), points(n, 6))
    p = beside(n, 3, random_state=0)
    while p.n_answers_ < 150 * n:
        qs = p.next_questions(n)
        if not qs:
            break
        q = np.asarray(qs)
        first = D[q[:, 0], q[:, 1]] <= D[q[:, 0], q[:, 2]]
        p.observe([(h, a, b, a if f else b) for (h, a, b), f in zip(qs, first, strict=True)])
    nb = p.neighbor_graph(1).neighbors[:, 0]
    Dd = D + np.diag(np.full(n, np.inf))
    np.testing.assert_array_equal(nb, Dd.argmin(axis=1))


def test_a_pass_with_nothing_to_plan_still_puts_a_finished_refit_in_place():
    n = 30
    D = cdist(points(n, 3), points(n, 3))
    rng = np.random.default_rng(4)
    p = beside(n, 2, random_state=0, dim=2)
    while p.fit_job_ is None:
        p.observe(answer(D, p.next_questions(30), rng))
    fits, asked = p.n_fits_, p.n_issued_
    assert p.settle_fit() is False  # handed over, not ready yet (looked at once)
    assert p.settle_fit() is True  # ready: in place, shortlists rebuilt, no question planned
    assert p.n_fits_ == fits + 1 and p.n_issued_ == asked and p.cands_.max() >= 0
    # the answers that came while it ran call for the next refit: an idle pass hands it over
    assert p.fit_job_ is None and p._needs_refit()
    handed = p.n_answers_
    assert p.settle_fit() is False and p.fit_job_["answers"] == handed and p.fit_ready() is False
    assert p.settle_fit() is True  # (Lagged: ready at its second look) in place with no question asked
    assert p.n_fits_ == fits + 2 and p.fitted_on_ == handed and p.n_issued_ == asked


def test_each_part_owns_its_state_part_and_the_planner_state_is_theirs():
    """The answers, the shortlists and the fits each write their own part of the state and read it
    back the same; the planner's state holds exactly those parts (and the old names read the parts)."""
    from engine.duels.answers import Duels
    from engine.duels.embedding import Embedding
    from engine.duels.shortlists import Shortlist

    n = 30
    D = cdist(points(n, 4), points(n, 4))
    rng = np.random.default_rng(5)
    p = beside(n, 2, random_state=3)
    while p.n_fits_ < 2 or p.fit_job_ is None:
        p.observe(answer(D, p.next_questions(n), rng))
    p.forget(p.next_questions(5)[:2])
    state = p.to_state()
    parts = {"duels": (p._duels, lambda s: Duels.from_state(n, s)),
             "short": (p._short, lambda s: Shortlist.from_state(n, p.shortlist, s)),
             "fit": (p._fit, lambda s: Embedding.from_state(len(p._dims()), s))}
    for name, (part, load) in parts.items():
        own = part.to_state()
        assert own, name
        for key, value in own.items():
            assert json.dumps(_jsonable({key: state[key]})) == json.dumps(_jsonable({key: value})), (name, key)
        again = load(_jsonable(own)).to_state()
        assert json.dumps(_jsonable(again), sort_keys=True) == json.dumps(_jsonable(own), sort_keys=True), name
    assert p.pending_ is p._duels.pending and p.cands_ is p._short.cands and p.embedding_ is p._fit.embedding
    assert len(state["pending"]) > 0 and state["fit_job"] is not None
