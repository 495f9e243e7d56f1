"""Candidate duels: a triplet-native nearest-neighbour learner for crowd studies.

Each head's shortlisted candidates are asked against each other ("is h more like a or b?") and
the neighbour is the Condorcet winner of those duels; shortlists come from an ordinal embedding
fitted on all answers. Where single duels turn out to be coin flips (people cannot tell near items
apart: the fit predicts fresh answers barely better than chance), most questions go instead to
placing items in the embedding (uncertain pairs near each item, as the active embedding asks) and
the neighbour is read mostly from the fit. Numpy only; must never import Flask, Redis, RQ,
``webapp`` or ``workers``.
"""
from __future__ import annotations

import heapq
import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from .continuum import continuum_start
from .graph import NO_NEIGHBOR, NeighborGraph
from .random_triplets import candidate_pairs
from .utils import (
    RandomState,
    check_n_items,
    check_random_state,
    check_state,
    check_triplets,
    generator_from_state,
    generator_state,
    store_params,
)

#: weight (in duels) of the shortlist order in a candidate's score, until repeated duels have
#: weighed the embedding's own prediction (``kappa_``)
PRIOR_DUELS = 1.0
#: the same weight in the per-pair average (Borda) that takes over as a head's pairs fill up
BORDA_PRIOR_DUELS = 2.0
#: prequential accuracy of the embedding under which single duels are not read at face value,
#: and over which they fully are (see ``CandidateDuels._duel_trust``)
TRUST_ACCURACY = (0.62, 0.67)
#: ... measured from this many answers per item on (before, the warm-up's random triplets,
#: easier to predict than duels, dominate it)
TRUST_FROM = 10.0
#: where single duels are coin flips (the prequential accuracy gate below ``TRUST_ACCURACY[0]`` from
#: ``TRUST_FROM`` answers per item on): the share of questions asked to place items in the embedding
#: (the active embedding's rule over ``COIN_PAIRS`` random pairs) instead of duels, ...
COIN_EXPLORE = 0.9
COIN_PAIRS = 50
#: ... an exploring pair's weight halves where its nearer item ranks n / COIN_NEAR from the head ...
COIN_NEAR = 20.0
#: ... and the refit cadence there (answers grown by this share since the last fit)
COIN_REFIT = 0.1
#: prequential accuracy from which the coin-flip regime ends (it is entered below TRUST_ACCURACY[0]);
#: a margin above it (.645: stay until the fit predicts clearly better) cost recorded answers with
#: lapse 0.1 ~.06 hit@3 at 20 answers per item (6 seeds), without a gain on the alien eggs
COIN_LEAVE = 0.62
#: weights the estimate of ``kappa_`` chooses from (a geometric grid, in duels)
KAPPA_GRID = tuple(2.0**k for k in range(-1, 13))
#: share of a refreshed shortlist kept for the dueled leaders of the previous one
KEEP_SHARE = 0.5
#: how many extra asks a pair at the bottom of the ranking waits for, against the top pair
FOCUS = 2.0
#: embedding dimensions ``dim="auto"`` keeps fitted side by side (warm started). Dimension 1 is a
#: continuum (morphs, a scale): fitted with the human noise model (``embedding.FIT_LAPSE``; t-STE's
#: heavy tails need more room than a line) from the order of the items along the smallest map
#: (:func:`continuum_start`); it is listed last, so it is chosen only where it predicts fresh
#: answers ``AUTO_MARGIN`` standard errors better than every other dimension (the alien eggs)
AUTO_DIMS = (2, 4, 8, 1)
#: weight of older refits in the prequential score of each dimension (per refit)
AUTO_DECAY = 0.7
#: standard errors (of the best accuracy) a larger dimension must beat a smaller one by
AUTO_MARGIN = 1.0
#: refits that fit every dimension before only the leading one is refitted each time ...
AUTO_SETTLE = 4
#: ... and the others again every this many refits (a fit in 8 dimensions costs ~5x one in 2)
AUTO_RECHECK = 4
#: L-BFGS iterations a refit of one dimension may take
FIT_MAX_ITER = 300
#: most entries (rows x items, 16 bytes each) of the fit's rows kept for exploring questions between refits
ROW_CACHE_ENTRIES = 1_000_000
#: items up to which an exploring question ranks the pair from the head's whole row of the fit (cached);
#: above, from ``RANK_SAMPLE`` reference items (O(RANK_SAMPLE) per question, not O(n log n))
EXACT_RANK_ITEMS = 5000
RANK_SAMPLE = 1024
#: How many likely neighbours :meth:`CandidateDuels.screen_candidates` gives a screen planner at most
SCREEN_CANDIDATES = 16
#: heads scored together by the whole-array paths (graph, certificates, kept leaders): arrays of
#: BATCH_HEADS x shortlist^2, a few MB, however many items a study has
BATCH_HEADS = 2048
#: Where near duels are coin flips, screens show references from the head's this many nearest (0: never)
SCREEN_SPREAD = 24

_TRIU: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def _triu(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(iu, ju, 1e-6 (iu + ju)) of ``np.triu_indices(m, 1)``, computed once per m (read only)."""
    out = _TRIU.get(m)
    if out is None:
        iu, ju = np.triu_indices(m, 1)
        tie = 1e-6 * (iu + ju)
        for a in (iu, ju, tie):
            a.flags.writeable = False
        out = _TRIU[m] = (iu, ju, tie)
    return out


def _embedding_module():
    """The ordinal-embedding fitter, or None where it is not installed (shortlists then come
    from the heads' own win rates)."""
    try:
        from . import embedding
    except ImportError:
        return None
    return embedding if hasattr(embedding, "fit_embedding") else None


def _radius(n: np.ndarray, delta: float, n_pairs: int) -> np.ndarray:
    """Anytime Hoeffding radius for a win share after n duels.

    A union bound over time steps (sum 1/t^2 = pi^2/6) and over a head's candidate pairs makes
    it hold for all pairs and all times with probability 1 - delta. Lapses (coin-flip answers)
    only pull P(b beats a) towards 1/2 without changing its side, so the bound stays sound.
    """
    n = np.maximum(np.asarray(n, dtype=np.float64), 1.0)
    return np.sqrt(np.log(math.pi**2 * n_pairs * n**2 / (3.0 * delta)) / (2.0 * n))


def _kernel_of(dim: int) -> str:
    """The embedding kernel duels fits in ``dim`` dimensions: t-STE, the human model on a line."""
    return "human" if dim == 1 else "tste"


def _log_kernel(X: np.ndarray, h, c) -> np.ndarray:
    """log of the fit's kernel between rows h and c of X: t-STE (alpha = max(dim - 1, 1)); on a
    line (the human model, see ``AUTO_DIMS``) minus the distance, so that a difference of two is
    the logit of the model's answer before lapses."""
    d = ((X[c] - X[h]) ** 2).sum(axis=-1)
    if X.shape[1] == 1:
        return -np.sqrt(d)
    alpha = float(max(X.shape[1] - 1, 1))
    return -(alpha + 1.0) / 2.0 * np.log1p(d / alpha)


def _with_lapses(X: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The fit's P(answer) from its kernel's: on a line the human model's lapses are added."""
    if X.shape[1] != 1:
        return p
    lapse = _embedding_module().FIT_LAPSE
    return 0.5 * lapse + (1.0 - lapse) * p


def _pair_preference(X: np.ndarray, h, a, b) -> np.ndarray:
    """P(h closer to a than to b) under the fit X, for arrays of heads and pairs."""
    return _with_lapses(X, 1.0 / (1.0 + np.exp(np.clip(_log_kernel(X, h, b) - _log_kernel(X, h, a),
                                                       -700, 700))))


@dataclass(frozen=True)
class FitTask:
    """One stage of a refit of duels' embedding: a pure function of these fields, so it can run
    anywhere (inline in a call, a thread, another process) and give the same arrays.

    ``triplets`` (T, 3) rows (i, j, k), i closer to j than to k: the answers the refit started with;
    ``dims`` the dimensions to fit, in order; ``inits`` warm starts per dimension (missing: a small
    random start); ``maps`` the maps a line (dimension 1) starts from when the stage fits none
    (see :func:`continuum_start`); ``seed`` the refit's. ``key`` identifies the stage (its refit's
    seed, triplets and dimensions), so a result is only ever applied to its own refit.
    """

    n_items: int
    triplets: np.ndarray
    dims: tuple[int, ...]
    inits: dict
    maps: dict
    seed: int

    @property
    def key(self) -> tuple[int, int, tuple[int, ...]]:
        return (int(self.seed), int(len(self.triplets)), tuple(int(d) for d in self.dims))

    def run(self) -> dict[int, np.ndarray]:
        return run_fit(self)


def run_fit(task: FitTask) -> dict[int, np.ndarray]:
    """Fit every dimension of ``task`` to convergence (or ``FIT_MAX_ITER`` iterations): {dim: X}.

    A line starts from the order of the items along the smallest map (fitted earlier in the same
    stage, else from ``task.maps``): items cannot pass each other on a line, so a warm start would
    keep an early fit's folds."""
    emb = _embedding_module()
    fitted: dict[int, np.ndarray] = {}
    for d in task.dims:
        init = task.inits.get(d)
        if d == 1 and task.n_items > 2:
            maps = {**task.maps, **fitted}
            lead = next((maps[e] for e in sorted(maps) if e != 1), None)
            init = init if lead is None else continuum_start(lead)
        X = emb.fit_embedding(task.triplets, task.n_items, dim=d, kernel=_kernel_of(d), init=init,
                              random_state=task.seed, max_iter=FIT_MAX_ITER)
        fitted[d] = np.asarray(X, np.float64)
    return fitted


def _share_scores(W: np.ndarray, N: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Share of all its duels each candidate won, smoothed towards its shortlist place by
    ``PRIOR_DUELS`` pseudo-duels (3/4 for the first candidate down to 1/4 for the last).

    W, N (..., w, w) as :meth:`CandidateDuels._matrices`; valid (..., w) marks the candidates
    (padding at the end of each row). Used until repeated duels have weighed the embedding
    (``kappa_``): with at most a duel per pair, the share of all duels (the leaders having met
    the strongest challengers, see the schedule) ranked the candidates better than the average
    over opponents (Borda), in which every untried pair sits at the prior (recorded answers at
    25 answers per item: hit@3 .71 -> .81).
    """
    m = valid.sum(axis=-1, keepdims=True)
    r = np.arange(valid.shape[-1]) / np.maximum(m - 1, 1)
    prior = np.where(m > 1, 0.75 - 0.5 * r, 1.0)
    wins, played = W.sum(axis=-1), N.sum(axis=-1)
    return np.where(valid, (wins + PRIOR_DUELS * prior) / (played + PRIOR_DUELS), 0.0)


def _early_scores(W: np.ndarray, N: np.ndarray, valid: np.ndarray, trust: float = 1.0) -> np.ndarray:
    """Scores before ``kappa_`` where duels are answered consistently: :func:`_share_scores`
    while few of the candidates' pairs have met, turning into the per-pair average (Borda, pairs
    smoothed to the shortlist order by ``BORDA_PRIOR_DUELS``) as the pairs fill up (the share
    weighs ``trust`` x (1 - the share of pairs dueled))."""
    m = valid.sum(axis=-1, keepdims=True)
    w = valid.shape[-1]
    r = np.arange(w) / np.maximum(m - 1, 1)
    prior = 0.5 + 0.25 * (r[..., None, :] - r[..., :, None])
    both = valid[..., :, None] & valid[..., None, :] & ~np.eye(w, dtype=bool)
    P = np.where(both, (W + BORDA_PRIOR_DUELS * prior) / (N + BORDA_PRIOR_DUELS), 0.0)
    borda = P.sum(axis=-1) / np.maximum(m - 1, 1)
    covered = ((N > 0) & both).sum(axis=(-2, -1)) / np.maximum(m[..., 0] * (m[..., 0] - 1), 1)
    lam = trust * np.clip(1.0 - covered, 0.0, 1.0)[..., None]
    share = _share_scores(W, N, valid)
    return np.where(valid & (m > 1), lam * share + (1.0 - lam) * borda, np.where(valid, 1.0, 0.0))


@dataclass(frozen=True)
class _HeadRows:
    """Results per head kept between looks (:meth:`CandidateDuels._refreshed`): what all rows depend
    on (``key``), the shortlists and duel counts they were read from, and the rows themselves."""

    key: tuple
    cands: np.ndarray
    duels: np.ndarray
    rows: tuple


class CandidateDuels:
    """Adaptive nearest-neighbour learner asking each head's shortlisted candidates in duels.

    Parameters
    ----------
    n_items : int
    random_state : None, int or numpy Generator
    shortlist : int, default 12
        Candidates per head at the start (m); it shrinks as answers per item grow.
    min_shortlist : int, default 6
        Smallest shortlist the shrinking reaches.
    shrink_at : float, default 100
        Answers per item after which the shortlist shrinks like sqrt(shrink_at / answers).
    warmup : float, default 3
        Random-triplet answers per head before its duels start (they seed the embedding).
    explore : float, default 0.1
        Share of later questions asked as random triplets (keeps the embedding global). Where
        duels are coin flips (see ``_update_coin``) ``COIN_EXPLORE`` of the questions place items
        in the embedding instead.
    refit_growth : float, default 0.25
        Refit the embedding when answers have grown by this share since the last fit (at most
        ``COIN_REFIT`` where duels are coin flips).
    dim : int or "auto", default "auto"
        Embedding dimension. ``"auto"`` fits every dimension of ``AUTO_DIMS`` (warm started)
        and takes the shortlists from the one that best predicted the answers that arrived
        since the previous fit (answers no fit had seen: an honest, prequential test; older
        refits count ``AUTO_DECAY`` times less per refit; a larger dimension must beat a smaller
        one by ``AUTO_MARGIN`` standard errors). The right dimension depends on the
        items (the 1-D alien eggs want 2, four-dimensional data wants 4 to 8, and a shortlist
        from too few dimensions misses the true neighbour).
    explore_pairs : int, default 0
        Random pairs an exploring question is chosen from (the one the fit is least sure of, near
        the head); 0 asks random triplets (``COIN_PAIRS`` where duels are coin flips).
    delta : float, default 0.05
        Failure probability of the elimination bounds (per head).
    fit_work : int, default 1_000_000
        Kept so that stored study configurations load; no longer read. It bounded the embedding
        work of one call of a live pool, a refit going on over later calls: in a study of 1,000
        items that left the shortlists thousands of answers behind, and live studies learned a
        tenth of what the same answers teach offline. Refits now run beside the passes (``fitter``).

    Attributes
    ----------
    pool : bool, default False
        How the caller drives the learner. False (a caller that observes the answers before
        asking again, e.g. a script or an outside harness): a call gives each head at most one
        question, so asking for many at once (``next_questions(1000)`` on 85 items) returns one
        adaptive question per head to come back for after observing. True (a live pool, which
        must hold questions for every rater at once; the worker's ``Learner`` and ``proxima plan``
        set it through ``engine.registry.drive_as_pool``): the whole budget. On recorded answers of
        85 items asked 1,000 at a time, hit@3 at 25 answers per item: .78 against .30
        (``benchmarks/duels_batches.py``). Not a parameter and not saved.
    fitter : object with ``fit(task: FitTask) -> future``, or None (default)
        Where a live pool's refits run. None: to the end inside the call that starts them (the
        same fits, at the same answers, as offline). Set (the worker: a process beside its update
        passes): each stage of a refit (the leading dimension, then the others) is handed over as
        a :class:`FitTask`, and its result (a ``concurrent.futures.Future``-like object whose
        ``done()`` / ``result()`` give :func:`run_fit`'s dict) is taken by the first call after it
        is ready; calls in between plan from the previous fit's shortlists and the duel counts.
        Not saved: a restored planner hands the refit under way (``fit_job_``, saved) over again.
    """

    VERSION = 5

    def __init__(self, n_items: int, random_state: RandomState = None, shortlist: int = 12, min_shortlist: int = 6,
                 shrink_at: float = 100.0, warmup: float = 3.0, explore: float = 0.1,
                 refit_growth: float = 0.25, dim: int | str = "auto", delta: float = 0.05,
                 fit_work: int = 1_000_000, explore_pairs: int = 0) -> None:
        store_params(self, locals())
        self.n_items = check_n_items(n_items)
        self._check_params()
        self.pool = False
        self.fitter = None
        # the stage of the refit handed to ``fitter``: (its FitTask key, its future); never saved
        self._fit_running: tuple | None = None
        self.rng_ = check_random_state(random_state)
        n = self.n_items
        self.triplets_ = np.empty((0, 3), np.int64)  # (i, j, k): i closer to j than to k
        self._buffer: list[tuple[int, int, int]] = []
        # duel counts keyed by (h, a, b) with a < b: [wins of a, answers]
        self.duels_: dict[tuple[int, int, int], list[int]] = {}
        # the same counts as sorted arrays, for vectorised look-ups: code (h * n + a) * n + b
        self._codes = np.empty(0, np.int64)
        self._wins = np.empty(0, np.int64)
        self._counts = np.empty(0, np.int64)
        self.pending_: dict[tuple[int, int, int], int] = {}
        self.eliminated_: dict[int, set[int]] = {}
        self.asked_ = np.zeros(n, np.int64)  # answers + pending per head (scheduling load)
        self.answered_ = np.zeros(n, np.int64)
        self.cands_ = np.full((n, self.shortlist), NO_NEIGHBOR, np.int64)
        self.embedding_ = None
        self.embeddings_: dict[int, np.ndarray] = {}  # dim -> warm fit
        # per dim: decayed [answers predicted right, answers predicted] by fits that had not seen them
        self.dim_scores_ = np.zeros((2, len(self._dims())))
        self.fresh_dims_ = np.zeros(len(self._dims()), bool)  # refitted at the last refit
        self.coin_ = False  # single duels are coin flips here (see _update_coin)
        self.kappa_: float | None = None  # weight of the embedding prior, once repeats have weighed it
        self.fit_job_: dict | None = None  # the refit under way (see _continue_fit)
        self.fit_partial_: dict[int, np.ndarray] = {}  # dim -> its fit so far in that refit
        self.fitted_on_ = 0
        self.fitted_triplets_ = 0
        self.n_fits_ = 0
        self.n_answers_ = 0
        self.n_issued_ = 0
        # per head, the fit's log kernel row and ranks for exploring questions (never saved: they
        # follow from embedding_, and are dropped when it changes)
        self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._rows_of: np.ndarray | None = None
        self._rank_ref: np.ndarray | None = None
        self._rank_ref_of: np.ndarray | None = None
        # per head, results read from its shortlist and duels alone, kept between looks and redone only
        # for the heads whose shortlist or duels changed (never saved): certificates, rankings
        self._certified_rows: _HeadRows | None = None
        self._ranked_rows_kept: _HeadRows | None = None

    # ------------------------------------------------------------------ validation
    def _check_params(self) -> None:
        def integer(name, lo):
            v = getattr(self, name)
            if not isinstance(v, (numbers.Integral, np.integer)) or isinstance(v, bool) or v < lo:
                raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")

        def real(name, lo, hi, lo_open=False, hi_open=False):
            v = getattr(self, name)
            if not isinstance(v, numbers.Real) or isinstance(v, bool) or not np.isfinite(v):
                raise ValueError(f"{name} must be a number, got {v!r}")
            if v < lo or (lo_open and v == lo) or v > hi or (hi_open and v == hi):
                raise ValueError(f"{name} must lie in {'(' if lo_open else '['}{lo}, {hi}"
                                 f"{')' if hi_open else ']'}, got {v!r}")

        integer("shortlist", 2)
        integer("fit_work", 1)
        integer("explore_pairs", 0)
        integer("min_shortlist", 2)
        if self.dim != "auto":
            integer("dim", 1)
        if self.min_shortlist > self.shortlist:
            raise ValueError(f"min_shortlist ({self.min_shortlist}) must not exceed shortlist ({self.shortlist})")
        real("shrink_at", 0, np.inf, lo_open=True)
        real("warmup", 0, np.inf)
        real("explore", 0, 1)
        real("refit_growth", 0, np.inf, lo_open=True)
        real("delta", 0, 1, lo_open=True, hi_open=True)

    # ------------------------------------------------------------------ answers
    def observe(self, answers: Iterable[Sequence[int]] | np.ndarray) -> None:
        """Apply ``(head, a, b, winner)`` rows; any triplet is accepted (issued or not): it feeds
        the embedding, and counts as a duel of a and b for that head."""
        arr = check_triplets(answers, self.n_items, "triplet answer", width=4)
        for h, a, b, w in arr.tolist():
            lo, hi = (a, b) if a < b else (b, a)
            key = (h, lo, hi)
            rec = self.duels_.get(key)
            if rec is None:
                rec = self.duels_[key] = [0, 0]
            rec[0] += w == lo
            rec[1] += 1
            self._buffer.append((h, w, hi if w == lo else lo))
            left = self.pending_.get(key, 0)
            if left:
                # the answer settles a pending question: its load is already counted
                if left == 1:
                    del self.pending_[key]
                else:
                    self.pending_[key] = left - 1
            else:
                self.asked_[h] += 1
            self.answered_[h] += 1
        self.n_answers_ += len(arr)
        if len(arr):
            lo, hi = np.minimum(arr[:, 1], arr[:, 2]), np.maximum(arr[:, 1], arr[:, 2])
            self._index_add(self._code(arr[:, 0], lo, hi), (arr[:, 3] == lo).astype(np.int64))

    def _code(self, h, a, b):
        n = self.n_items
        return (np.asarray(h, np.int64) * n + a) * n + b

    def _index_add(self, codes: np.ndarray, wins: np.ndarray) -> None:
        """Add answered duels (their codes, 1 where the smaller item won) to the sorted arrays."""
        u, inv = np.unique(codes, return_inverse=True)
        w = np.bincount(inv, wins, len(u)).astype(np.int64)
        c = np.bincount(inv, minlength=len(u)).astype(np.int64)
        pos = np.searchsorted(self._codes, u)
        found = pos < len(self._codes)
        found[found] = self._codes[pos[found]] == u[found]
        self._wins[pos[found]] += w[found]
        self._counts[pos[found]] += c[found]
        new = ~found
        self._codes = np.insert(self._codes, pos[new], u[new])
        self._wins = np.insert(self._wins, pos[new], w[new])
        self._counts = np.insert(self._counts, pos[new], c[new])

    def _reindex(self) -> None:
        """Rebuild the sorted arrays from ``duels_``."""
        rec = np.array([(*k, *v) for k, v in self.duels_.items()], np.int64).reshape(-1, 5)
        codes = self._code(rec[:, 0], rec[:, 1], rec[:, 2])
        order = np.argsort(codes, kind="stable")
        self._codes, self._wins, self._counts = codes[order], rec[order, 3], rec[order, 4]

    def forget(self, questions: Iterable[Sequence[int]]) -> int:
        """Release issued questions that will never be answered; returns how many were pending."""
        released = 0
        for q in questions:
            if len(q) != 3:
                raise ValueError(f"questions to forget must be (head, a, b), got {tuple(q)!r}")
            h, a, b = (int(x) for x in q)
            key = (h, min(a, b), max(a, b))
            left = self.pending_.get(key, 0)
            if not left:
                continue
            if left == 1:
                del self.pending_[key]
            else:
                self.pending_[key] = left - 1
            self.asked_[h] -= 1
            released += 1
        return released

    def _all_triplets(self) -> np.ndarray:
        if self._buffer:
            self.triplets_ = np.concatenate([self.triplets_, np.asarray(self._buffer, np.int64)])
            self._buffer = []
        return self.triplets_

    # ------------------------------------------------------------------ shortlists
    def _target_size(self) -> int:
        per_item = self.n_answers_ / self.n_items
        m = self.shortlist * math.sqrt(self.shrink_at / max(self.shrink_at, per_item))
        return int(min(self.shortlist, max(self.min_shortlist, round(m)), self.n_items - 1))

    def _dims(self) -> tuple[int, ...]:
        return AUTO_DIMS if self.dim == "auto" else (int(self.dim),)

    def _start_fit(self, emb, trip: np.ndarray) -> None:
        """Begin a refit: score the dimensions refitted last time on the answers that arrived
        since (no fit has seen them) and choose which to refit warm (every dimension at first and
        every ``AUTO_RECHECK``-th refit, else only the leading one)."""
        dims = self._dims()
        fresh = trip[self.fitted_triplets_:]
        if len(dims) > 1 and len(fresh) and self.fresh_dims_.any():
            scored = self.fresh_dims_
            self.dim_scores_[:, scored] *= AUTO_DECAY
            for i in np.flatnonzero(scored):
                self.dim_scores_[0, i] += emb.triplet_accuracy(self.embeddings_[dims[i]], fresh) * len(fresh)
                self.dim_scores_[1, i] += len(fresh)
        self._update_coin()
        every = self.n_fits_ < AUTO_SETTLE or self.n_fits_ % AUTO_RECHECK == 0
        best = self._best_dim_index()
        # the leading dimension first: its fit gives the shortlists as soon as it is done; then the
        # others from the cheapest up, the line right after the smallest map it starts from, so that
        # in a live pool, where a refit of the leading one that falls due cuts the others short, the
        # cheap ones are scored too
        maps = [d for d in dims if d != 1]
        after = min(maps) + 0.5 if maps else 0

        def cost(i: int) -> float:
            return after if dims[i] == 1 else dims[i]

        rest = sorted((i for i in range(len(dims)) if i != best), key=cost) if every else []
        todo = [best] + rest
        self.fit_job_ = {"dims": [int(i) for i in todo], "triplets": int(len(trip)),
                         "answers": int(self.n_answers_), "seed": int(self.rng_.integers(2**31 - 1)),
                         "iterations": 0}

    def _fit_task(self, dims: list[int]) -> FitTask:
        """The refit under way's next stage: the dimensions ``dims`` (indices into ``_dims()``)."""
        job = self.fit_job_
        ds = self._dims()
        want = tuple(int(ds[i]) for i in dims)
        inits = {d: self.fit_partial_.get(d, self.embeddings_.get(d)) for d in want}
        maps = {d: X for d, X in self.embeddings_.items() if d != 1}
        return FitTask(self.n_items, self.triplets_[: job["triplets"]], want,
                       {d: X for d, X in inits.items() if X is not None}, maps, int(job["seed"]))

    def _take_fit(self, task: FitTask, fitted: dict[int, np.ndarray]) -> bool:
        """Put a finished stage in place; True when it held the leading dimension (the shortlists
        are rebuilt from it then, while the other dimensions of a refit that checks them all go on)."""
        job = self.fit_job_
        ds = self._dims()
        publish = False
        for d in task.dims:
            i = ds.index(d)
            if i in job["dims"]:
                job["dims"].remove(i)
            self.fit_partial_.pop(d, None)
            # a finished dimension is used at once (the leading one gives the shortlists); the
            # others only count in the choice of dimension once the whole refit is done
            self.embeddings_[d] = np.asarray(fitted[d], np.float64)
            job["fitted"] = job.get("fitted", 0) | (1 << i)
            if not job.get("published"):
                job["published"] = 1
                publish = True
        job["iterations"] = 0
        return publish

    def _continue_fit(self, emb) -> bool:
        """Take the refit under way as far as this call can; True when its leading dimension (the
        chosen one, fitted first) was finished in this call.

        Without a ``fitter`` (a script, ``proxima plan``, a replay) the refit runs to its end inside
        the call. With one (a live worker) each stage of the refit (the leading dimension, then the
        others) is handed to it and runs beside the update passes; a call takes a stage's result
        when it is ready, and otherwise plans from what is already known (the previous fit's
        shortlists, the duel counts). A stage is a pure function of its :class:`FitTask`, so where
        it ran changes only when its result arrives."""
        job = self.fit_job_
        if self.fitter is None or not self.pool:
            task = self._fit_task(list(job["dims"]))
            publish = self._take_fit(task, run_fit(task))
            self._end_fit()
            return publish or not job.get("published")
        lead = not job.get("published")
        task = self._fit_task(job["dims"][:1] if lead else list(job["dims"]))
        running = self._fit_running
        if running is None or running[0] != task.key:
            # (a planner restored from its state hands its refit over again: the fitter may have it)
            running = self._fit_running = (task.key, self.fitter.fit(task))
        if not running[1].done():
            return False
        fitted = running[1].result()  # a failed fit raises here: the pass fails and says why
        self._fit_running = None
        publish = self._take_fit(task, fitted)
        if job["dims"]:
            # the other dimensions go on beside the passes; the shortlists come from the leading one now
            task = self._fit_task(list(job["dims"]))
            self._fit_running = (task.key, self.fitter.fit(task))
            return publish
        self._end_fit()
        return publish or not job.get("published")

    def _end_fit(self) -> None:
        """Close the refit under way: the dimensions it finished are scored on the answers that
        arrive next; those it did not finish (a new refit of the leading dimension fell due first)
        keep their previous fit, unscored."""
        job = self.fit_job_
        dims = self._dims()
        fitted = job.get("fitted", 0)
        self.fresh_dims_ = np.array([bool(fitted >> i & 1) for i in range(len(dims))])
        self.fit_partial_ = {}
        self.fitted_triplets_ = job["triplets"]
        self.fitted_on_ = job["answers"]
        self.fit_job_ = None

    def _best_dim_index(self, line: bool = True) -> int:
        """The dimension whose fits best predicted fresh answers; the first of ``AUTO_DIMS`` within
        ``AUTO_MARGIN`` standard errors of the best (a larger one must earn its place: on the alien
        eggs 2, 4 and 8 dimensions score within a point of each other and the 2-D fit places the
        eggs best; the line, listed last, must beat them all). ``line=False`` leaves the line out
        (the regime gates: how well near duels are predicted is read from the t-STE fits)."""
        right, seen = self.dim_scores_
        acc = np.where(seen > 0, right / np.maximum(seen, 1e-300), -np.inf)
        dims = self._dims()
        if not line and len(dims) > 1 and 1 in dims:
            acc[dims.index(1)] = -np.inf
        best = int(np.argmax(acc))
        if AUTO_MARGIN <= 0 or seen[best] <= 0:
            return best
        se = math.sqrt(max(acc[best] * (1.0 - acc[best]), 0.0) / seen[best])
        return int(np.flatnonzero(acc >= acc[best] - AUTO_MARGIN * se)[0])

    @property
    def chosen_dim_(self) -> int:
        return self._dims()[self._best_dim_index()]

    def _refresh(self) -> None:
        """Refit the embedding (warm start) and rebuild every head's shortlist."""
        trip = self._all_triplets()
        emb = _embedding_module()
        if emb is not None and len(trip):
            job = self.fit_job_
            if job is not None and self.coin_ and job.get("published") and self._grown(job["answers"]):
                # where duels are coin flips only the leading dimension's shortlists matter: when it is
                # due again, the others wait for a later refit (they take long in 8 dimensions)
                self._end_fit()
            if self.fit_job_ is None:
                self._start_fit(emb, trip)
            answers_fitted = self.fit_job_["answers"]
            if not self._continue_fit(emb):
                # the refit goes on at the next call; the shortlists stay those of the last fit (or,
                # once its leading dimension is done, of that one while the others finish)
                return
            self.embedding_ = self.embeddings_[self.chosen_dim_]
            self._estimate_kappa()
            self._shortlists_from_fit(answers_fitted)
            return
        # no embedding fitter (or no answer yet): rank candidates by their smoothed win rate as this
        # head's answers (a weak, head-local signal; the duels sharpen it). n x n: only without scipy
        answers_fitted = self.n_answers_
        n = self.n_items
        wins = np.zeros((n, n))
        shown = np.zeros((n, n))
        if len(trip):
            np.add.at(wins, (trip[:, 0], trip[:, 1]), 1.0)
            np.add.at(shown, (trip[:, 0], trip[:, 1]), 1.0)
            np.add.at(shown, (trip[:, 0], trip[:, 2]), 1.0)
        D = -(wins + 1.0) / (shown + 2.0)
        np.fill_diagonal(D, np.inf)
        m = self._target_size()
        order = self._neighbours_of_neighbours(np.argsort(D, axis=1, kind="stable"))
        cands = np.full((self.n_items, self.shortlist), NO_NEIGHBOR, np.int64)
        # the dueled leaders survive a refit, so evidence is not thrown away (and stay first: no fit
        # to order the shortlist by)
        keeps = self._old_leaders(m)
        for h in range(self.n_items):
            chosen = self._fill_shortlist(h, keeps[h], order[h], m)
            cands[h, : len(chosen)] = chosen
        self.cands_ = cands
        self.fitted_on_ = answers_fitted
        self.n_fits_ += 1

    def _old_leaders(self, m: int) -> list[list[int]]:
        """Per head, the dueled leaders of its shortlist that survive a refit (``KEEP_SHARE`` of m)."""
        return [[int(c) for c in row if c >= 0] for row in self._old_leader_rows(m)]

    def _eliminated_codes(self) -> np.ndarray:
        """Sorted codes h * n + c of every candidate c eliminated for a head h."""
        n = self.n_items
        codes = [h * n + c for h, gone in self.eliminated_.items() for c in gone]
        return np.unique(np.asarray(codes, np.int64))

    def _old_leader_rows(self, m: int) -> np.ndarray:
        """:meth:`_old_leaders` as rows (n_items, ceil(m KEEP_SHARE)), ``NO_NEIGHBOR`` padding: per head,
        the candidates of its shortlist that are not eliminated and have duels, best score first (ties
        in shortlist order). Whole-array operations: at 50,000 items a loop over the heads took seconds."""
        n, width = self.n_items, self.cands_.shape[1]
        heads = np.arange(n)[:, None]
        rows = self.cands_
        valid = rows >= 0
        gone = self._eliminated_codes()
        if len(gone):
            valid &= ~np.isin(heads * n + rows, gone)
        # the shortlist without its eliminated candidates, in its order, the padding at the end
        order = np.argsort(~valid, axis=1, kind="stable")
        olds = np.where(np.take_along_axis(valid, order, axis=1), np.take_along_axis(rows, order, axis=1),
                        NO_NEIGHBOR)
        score, counts = self._batch_scores(olds)
        ok = (olds >= 0) & (counts > 0)
        rank = np.argsort(np.where(ok, -score, np.inf), axis=1, kind="stable")
        ranked_ok = np.take_along_axis(ok, rank, axis=1)
        take = ranked_ok & (np.cumsum(ranked_ok, axis=1) <= math.ceil(m * KEEP_SHARE))
        ranked = np.where(take, np.take_along_axis(olds, rank, axis=1), NO_NEIGHBOR)
        # (taken entries come first in each row: they are the first ``ok`` ones of the ranking)
        return ranked[:, : max(1, min(width, math.ceil(m * KEEP_SHARE)))]

    def _fill_shortlist(self, h: int, keep: list[int], order: np.ndarray, m: int) -> list[int]:
        """h's dueled leaders ``keep``, then items of ``order`` (nearest first) up to m: neither h, nor
        one eliminated for h, nor one already chosen (nor past the last item: a k-d tree's padding)."""
        gone = self.eliminated_.get(h, ())
        chosen = list(keep)
        for c in order:
            if len(chosen) >= m:
                break
            c = int(c)
            if c != h and c not in gone and c not in chosen and c < self.n_items:
                chosen.append(c)
        return chosen

    def _shortlists_from_fit(self, answers_fitted: int) -> None:
        """Every head's shortlist from the fit: its dueled leaders, then its nearest items in the
        fit, in order of nearness. The nearest items come from a k-d tree over the fit (no n x n
        array: at 50,000 items in 4 dimensions a rebuild takes about a second)."""
        from scipy.spatial import cKDTree

        X = self.embedding_
        n = self.n_items
        m = self._target_size()
        keeps = self._old_leader_rows(m)
        sq = (X**2).sum(axis=1)
        gone = self._eliminated_codes()
        # enough nearest items (the head itself comes first) for the head with most eliminated candidates
        k = min(n, m + 1 + max((len(g) for g in self.eliminated_.values()), default=0))
        _, near = cKDTree(X).query(X, k=k)
        near = np.asarray(near, np.int64).reshape(n, k)
        heads = np.arange(n)[:, None]
        # fill each head's kept leaders up to m with its nearest items in the fit: neither the head, nor
        # one eliminated for it, nor a kept leader (nor past the last item: a k-d tree's padding)
        fill = (near != heads) & (near < n)
        if len(gone):
            fill &= ~np.isin(heads * n + np.minimum(near, n - 1), gone)
        kept = keeps >= 0
        if kept.any():
            codes = np.unique((heads * n + keeps)[kept])
            fill &= ~np.isin(heads * n + np.minimum(near, n - 1), codes)
        need = m - kept.sum(axis=1)
        fill &= np.cumsum(fill, axis=1) <= need[:, None]
        picked = np.concatenate([np.where(kept, keeps, NO_NEIGHBOR), np.where(fill, near, NO_NEIGHBOR)], axis=1)
        # shortlist order = nearness in the fit (the prior of the duel scores), ties to the smaller index;
        # the padding last
        safe = np.maximum(picked, 0)
        d = sq[:, None] + sq[safe] - 2.0 * np.einsum("hcd,hd->hc", X[safe], X)
        d = np.where(picked >= 0, d, np.inf)
        key = np.where(picked >= 0, picked, n)
        order = np.lexsort((key, d), axis=1)
        picked = np.take_along_axis(picked, order, axis=1)[:, : self.shortlist]
        cands = np.full((n, self.shortlist), NO_NEIGHBOR, np.int64)
        cands[:, : picked.shape[1]] = picked
        self.cands_ = cands
        self.fitted_on_ = answers_fitted
        self.n_fits_ += 1

    def _neighbours_of_neighbours(self, order: np.ndarray, r: int = 3) -> np.ndarray:
        """Candidate order without an embedding: the current leaders' leaders and the heads that
        lead with h first (near items share near items), then the win-rate order."""
        n = self.n_items
        leaders = [list(self._ranking(h)[0][:r]) for h in range(n)]
        met: list[set[int]] = [set() for _ in range(n)]  # candidates h has seen in a duel
        for h, a, b in self.duels_:
            met[h].add(a)
            met[h].add(b)
        reverse: list[list[int]] = [[] for _ in range(n)]
        for g in range(n):
            for c in leaders[g]:
                reverse[int(c)].append(g)
        out = np.empty_like(order)
        for h in range(n):
            pool = []
            for c in leaders[h]:
                pool.extend(int(x) for x in leaders[int(c)])
            pool.extend(reverse[h])
            seen, first = set(), []
            for c in pool:
                if c != h and c not in seen:
                    seen.add(c)
                    first.append(c)
            # unmet items first, so a shortlist that lost its best keeps discovering new ones
            first = [c for c in first if c not in met[h]] + [c for c in first if c in met[h]]
            rest = [int(c) for c in order[h] if int(c) not in seen]
            rest = [c for c in rest if c not in met[h]] + [c for c in rest if c in met[h]]
            out[h] = np.asarray(first + rest, np.int64)[: order.shape[1]]
        return out

    def _matrices(self, h: int, cands: np.ndarray, pending: bool = False):
        """W[i, j] = duels candidate i won against j for head h; N = answered (+ pending) duels.
        (:meth:`next_questions` adds the pending ones itself, from :meth:`_pending_by_head`.)"""
        c = np.asarray(cands, np.int64)
        m = len(c)
        lo, hi = np.minimum(c[:, None], c[None, :]), np.maximum(c[:, None], c[None, :])
        codes = self._code(h, lo, hi)
        pos = np.minimum(np.searchsorted(self._codes, codes), max(len(self._codes) - 1, 0))
        if len(self._codes):
            hit = (self._codes[pos] == codes) & (lo != hi)
            N = np.where(hit, self._counts[pos], 0).astype(np.float64)
            wins_lo = np.where(hit, self._wins[pos], 0).astype(np.float64)
        else:
            N = np.zeros((m, m))
            wins_lo = np.zeros((m, m))
        W = np.where(c[:, None] < c[None, :], wins_lo, N - wins_lo)
        if pending and self.pending_:
            for i in range(m):
                for j in range(i + 1, m):
                    p = self.pending_.get((h, int(lo[i, j]), int(hi[i, j])), 0)
                    N[i, j] += p
                    N[j, i] += p
        return W, N

    def _scores(self, h: int, cands: np.ndarray, W: np.ndarray | None = None, N: np.ndarray | None = None):
        """Smoothed win share of each candidate in its duels with the others (W, N: its
        :meth:`_matrices`, looked up when not given): :meth:`_score_matrices` of one head."""
        c = np.asarray(cands, np.int64)
        if W is None:
            W, N = self._matrices(h, c)
        score, counts = self._score_matrices(np.array([h]), c[None, :], W[None], N[None], np.ones((1, len(c)), bool))
        return score[0], counts[0]

    def _batch_matrices(self, heads: np.ndarray, rows: np.ndarray):
        """:meth:`_matrices` of many heads at once: rows (len(heads), w) of candidates, the padding
        (``NO_NEIGHBOR``) at the end of each row; returns W, N (len(heads), w, w), zero where the
        padding is, and the mask of candidates (len(heads), w)."""
        valid = rows >= 0
        c = np.where(valid, rows, 0)
        both = valid[:, :, None] & valid[:, None, :]
        lo, hi = np.minimum(c[:, :, None], c[:, None, :]), np.maximum(c[:, :, None], c[:, None, :])
        codes = self._code(heads[:, None, None], lo, hi)
        if len(self._codes):
            pos = np.minimum(np.searchsorted(self._codes, codes), len(self._codes) - 1)
            hit = (self._codes[pos] == codes) & (lo != hi) & both
            N = np.where(hit, self._counts[pos], 0).astype(np.float64)
            wins_lo = np.where(hit, self._wins[pos], 0).astype(np.float64)
        else:
            N = np.zeros(codes.shape)
            wins_lo = np.zeros(codes.shape)
        W = np.where(c[:, :, None] < c[:, None, :], wins_lo, N - wins_lo)
        return W, N, valid

    def _score_matrices(self, heads: np.ndarray, rows: np.ndarray, W: np.ndarray, N: np.ndarray,
                        valid: np.ndarray):
        """Each candidate's smoothed win share in its duels with the others, for many heads at once
        (the one scoring of the planner: questions, rankings, the graph and kept leaders all use it);
        W, N, valid as :meth:`_batch_matrices` gives them; returns scores and duel counts (len(heads), w).

        Before ``kappa_``, where duels are answered consistently (trust > 0): :func:`_early_scores`.
        Once repeats have weighed the embedding: per pair, the share of i beating j smoothed towards
        the embedding's prediction (its own kernel, so the fit's calibration carries over) with
        ``kappa_`` pseudo-duels, averaged over opponents (Borda on the preference matrix): unlike a
        share of all duels it does not depend on whom the schedule paired i with. kappa_ is large
        where repeated duels scatter around the fit's predictions only as much as coin flips do (the
        fit, pooling every answer, is then the better judge: items on a line people can hardly tell
        apart up close), small where they disagree with it systematically (a per-item ranking no
        embedding holds). Before that, the prior is a lean to the earlier candidate of the
        shortlist (nearer in the fit), from 1/2 up to 3/4 for first against last."""
        w = rows.shape[1]
        c = np.where(valid, rows, 0)
        m = valid.sum(axis=1)
        both = valid[:, :, None] & valid[:, None, :]
        X = self.embedding_
        trust = self._duel_trust() if self.kappa_ is None else 0.0
        if trust > 0:
            N = np.where(both, N, 0.0)
            return _early_scores(np.where(both, W, 0.0), N, valid, trust), N.sum(axis=2)
        if X is None or self.kappa_ is None:
            r = np.arange(w)[None, :] / np.maximum(m[:, None] - 1, 1)
            prior = 0.5 + 0.25 * (r[:, None, :] - r[:, :, None])
        else:
            lk = _log_kernel(X, heads[:, None], c)
            prior = _with_lapses(X, 1.0 / (1.0 + np.exp(np.clip(lk[:, None, :] - lk[:, :, None], -700, 700))))
        kappa = BORDA_PRIOR_DUELS if self.kappa_ is None else self.kappa_
        P = np.where(both, (W + kappa * prior) / (N + kappa), 0.0)
        P[:, np.arange(w), np.arange(w)] = 0.0
        score = np.where(m[:, None] > 1, P.sum(axis=2) / np.maximum(m[:, None] - 1, 1), 1.0)
        return score, N.sum(axis=2)

    def _batch_scores(self, rows: np.ndarray, heads: np.ndarray | None = None):
        """:meth:`_score_matrices` of the heads' rows of candidates (all heads: ``rows`` (n_items, w),
        the padding at the end of each row), in chunks of ``BATCH_HEADS`` (bounded memory)."""
        heads = np.arange(len(rows)) if heads is None else np.asarray(heads, np.int64)
        score, counts = np.zeros(rows.shape), np.zeros(rows.shape)
        for at in range(0, len(rows), BATCH_HEADS):
            part = slice(at, at + BATCH_HEADS)
            W, N, valid = self._batch_matrices(heads[part], rows[part])
            score[part], counts[part] = self._score_matrices(heads[part], rows[part], W, N, valid)
        return score, counts

    def _batch_certified(self, heads: np.ndarray, W: np.ndarray, N: np.ndarray, valid: np.ndarray) -> np.ndarray:
        """:meth:`_certified` of many heads at once (W, N, valid as :meth:`_batch_matrices`)."""
        m = valid.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(N > 0, W / np.maximum(N, 1), 0.5)
        pairs = np.maximum(1, m * (m - 1) // 2)[:, None, None]
        sure = (share - _radius(N, self.delta, pairs) > 0.5) & (N > 0)
        flags = (m >= 2) & (sure.sum(axis=2).max(axis=1, initial=0) == m - 1)
        for i in np.flatnonzero(m == 1):
            flags[i] = bool(self.eliminated_.get(int(heads[i])))
        return flags

    def _ranked_rows(self, heads: np.ndarray):
        """The heads' shortlists best first (duel score, then shortlist order), ``NO_NEIGHBOR`` padding
        last, with each one's score and duels, and whether each head is certified (:meth:`_certified`)."""
        rows = self.cands_[heads]
        W, N, valid = self._batch_matrices(heads, rows)
        score, counts = self._score_matrices(heads, rows, W, N, valid)
        order = np.argsort(np.where(valid, -score, np.inf), axis=1, kind="stable")
        ranked = np.where(np.take_along_axis(valid, order, axis=1), np.take_along_axis(rows, order, axis=1),
                          NO_NEIGHBOR)
        return (ranked, np.take_along_axis(score, order, axis=1),
                np.take_along_axis(counts, order, axis=1).astype(np.int64), self._batch_certified(heads, W, N, valid))

    def _duel_trust(self) -> float:
        """How far to read single duels at face value, in [0, 1]: from the prequential accuracy of
        the chosen embedding dimension (answers no fit had seen), 0 at ``TRUST_ACCURACY[0]`` or
        below, 1 at ``TRUST_ACCURACY[1]`` or above; 0 before ``TRUST_FROM`` answers per item. On recorded
        answers of 85 items it is ~.68-.78 from 20 answers per item on; on the alien eggs, whose
        near duels are coin flips and whose embedding judges better, ~.57."""
        right, seen = self.dim_scores_[:, self._best_dim_index(line=False)]
        if seen < self.n_items or self.n_answers_ < TRUST_FROM * self.n_items:
            return 0.0
        lo, hi = TRUST_ACCURACY
        return float(np.clip((right / seen - lo) / (hi - lo), 0.0, 1.0))

    def _coin_flips(self) -> bool:
        """True where single duels are answered like coin flips (see :meth:`_update_coin`): only the
        embedding, pooling every answer about an item, can place such items, and questions go to
        placing them."""
        return self.coin_

    def _update_coin(self) -> None:
        """From ``TRUST_FROM`` answers per item on, enter the coin-flip regime when the chosen
        dimension predicted the fresh answers no better than ``TRUST_ACCURACY[0]`` (the alien eggs,
        ~.55-.62; recorded answers of 85 items ~.63-.78 from 15 answers per item on, ~.58-.66 with
        a lapse rate of 0.1), and leave it from ``COIN_LEAVE`` on. Decided when a refit starts (the
        scores change only then), so a replay in the same batches decides the same."""
        right, seen = self.dim_scores_[:, self._best_dim_index(line=False)]
        if seen < self.n_items or self.n_answers_ < TRUST_FROM * self.n_items:
            return
        acc = right / seen
        if self.coin_ and self.chosen_dim_ == 1 and len(self._dims()) > 1:
            return  # a line places the items best: the regime for items people can hardly tell apart up close
        self.coin_ = bool(acc < (COIN_LEAVE if self.coin_ else TRUST_ACCURACY[0]))

    def _estimate_kappa(self) -> None:
        """Empirical-Bayes weight of the embedding prior: the kappa of ``KAPPA_GRID`` maximising
        the beta-binomial likelihood of the pairs dueled at least twice, each pair's win share
        drawn from Beta(kappa p, kappa (1 - p)) around the fit's prediction p."""
        if self.embedding_ is None or not len(self._codes):
            return
        rec = self._duel_table()
        rec = rec[rec[:, 4] >= 2]
        if len(rec) < 20:
            return
        from scipy.special import betaln

        p = _pair_preference(self.embedding_, rec[:, 0], rec[:, 1], rec[:, 2])
        p = np.clip(p, 1e-6, 1 - 1e-6)
        w, n = rec[:, 3].astype(np.float64), rec[:, 4].astype(np.float64)
        best = None
        for kappa in KAPPA_GRID:
            a, b = kappa * p, kappa * (1 - p)
            ll = float(np.sum(betaln(w + a, n - w + b) - betaln(a, b)))
            if best is None or ll > best[0] + 1e-9:
                best = (ll, kappa)
        self.kappa_ = float(best[1])

    def _alive(self, h: int):
        """Shortlist of h without eliminated candidates, plus its duel matrices and whether h is
        certified (:meth:`_certified`); eliminates candidates beaten with confidence (anytime
        bound) on the way."""
        cands = self.cands_[h][self.cands_[h] >= 0]
        W, N = self._matrices(h, cands)
        m = len(cands)
        if m > 1:
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.where(N > 0, W / np.maximum(N, 1), 0.5)  # share[i, j] = P^(i beats j)
            beaten = (share - _radius(N, self.delta, max(1, m * (m - 1) // 2)) > 0.5) & (N > 0)
            lost = beaten.any(axis=0)  # some alive j beats candidate i with confidence
            if lost.any():
                gone = self.eliminated_.setdefault(h, set())
                gone.update(int(c) for c in cands[lost])
                self.cands_[h, : m] = np.concatenate([cands[~lost], np.full(int(lost.sum()), NO_NEIGHBOR)])
                keep = ~lost
                cands, W, N = cands[keep], W[np.ix_(keep, keep)], N[np.ix_(keep, keep)]
            else:  # the same candidates: _certified's matrix is this one
                return cands, W, N, bool(beaten.sum(axis=1).max() == m - 1)
        return cands, W, N, self._certified(h, cands, W, N)

    def _certified(self, h: int, cands, W, N) -> bool:
        m = len(cands)
        if m == 0:
            return False
        if m == 1:
            return bool(self.eliminated_.get(h))
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(N > 0, W / np.maximum(N, 1), 0.5)
        sure = (share - _radius(N, self.delta, max(1, m * (m - 1) // 2)) > 0.5) & (N > 0)
        return bool(sure.sum(axis=1).max() == m - 1)

    def _pending_by_head(self) -> dict[int, list[tuple[int, int]]]:
        """The pending questions' pairs (a < b) per head, once per pair and issue."""
        out: dict[int, list[tuple[int, int]]] = {}
        for (h, a, b), k in self.pending_.items():
            out.setdefault(h, []).extend([(a, b)] * k)
        return out

    def _add_pending(self, h: int, cands: np.ndarray, N: np.ndarray, pairs: list | None) -> np.ndarray:
        """N plus the pending duels of pairs of cands (``pairs`` from :meth:`_pending_by_head`)."""
        Np = N.copy()
        if pairs:
            at = {int(c): i for i, c in enumerate(cands)}
            for a, b in pairs:
                i, j = at.get(a), at.get(b)
                if i is not None and j is not None:
                    Np[i, j] += 1
                    Np[j, i] += 1
        return Np

    # ------------------------------------------------------------------ planning
    def _needs_refit(self) -> bool:
        if self.fit_job_ is not None:
            return True
        if self.n_fits_ == 0:
            return self.n_answers_ >= self.warmup * self.n_items or self.warmup == 0
        return self._grown(self.fitted_on_)

    def _grown(self, fitted_on: int) -> bool:
        """Answers have grown enough since a fit on ``fitted_on`` answers to refit."""
        growth = min(self.refit_growth, COIN_REFIT) if self._coin_flips() else self.refit_growth
        return self.n_answers_ >= fitted_on * (1.0 + growth) + 1

    def _random_question(self, h: int, taken: set) -> tuple[int, int, int]:
        n = self.n_items
        for _ in range(8):
            a, b = (int(x) for x in self.rng_.choice(n - 1, size=2, replace=False))
            a, b = a + (a >= h), b + (b >= h)
            if (h, min(a, b), max(a, b)) not in taken:
                break
        return (h, a, b)

    def _exploring_question(self, h: int, taken: set) -> tuple[int, int, int]:
        """Of ``explore_pairs`` random pairs, the one the fit is least sure of, weighted towards
        pairs holding a plausible neighbour: p (1 - p) / (1 + r / r0), r the nearer one's rank
        from h in the fit, r0 = n / ``COIN_NEAR`` (the active embedding's rule); on a line, the one
        the fit is least sure of among those with an item on either side of h."""
        n, c = self.n_items, self.explore_pairs or COIN_PAIRS
        X = self.embedding_
        a, b = candidate_pairs(self.rng_, n, h, c)
        if n > EXACT_RANK_ITEMS:
            # a large study: the pair's kernels only, and each item's rank from h estimated from a
            # sample of the items (a whole row and its sort cost O(n log n) per question: ~4 ms at
            # 50,000 items, seconds for a pass that plans thousands of questions)
            lk_a, lk_b = _log_kernel(X, h, a), _log_kernel(X, h, b)
            rank_a, rank_b = self._sampled_ranks(X, h, lk_a), self._sampled_ranks(X, h, lk_b)
        else:
            if self._rows_of is not X or (len(self._rows) + 1) * n > ROW_CACHE_ENTRIES:
                # the row and ranks change only with the fit: kept until embedding_ is replaced
                self._rows, self._rows_of = {}, X
            row = self._rows.get(h)
            if row is None:
                lk = _log_kernel(X, h, np.arange(n))
                lk[h] = np.inf
                rank = np.empty(n, np.int64)
                rank[np.argsort(-lk, kind="stable")] = np.arange(n)
                lk.flags.writeable = rank.flags.writeable = False
                row = self._rows[h] = (lk, rank)
            lk, rank = row
            lk_a, lk_b, rank_a, rank_b = lk[a], lk[b], rank[a], rank[b]
        p = 1.0 / (1.0 + np.exp(np.minimum(np.maximum(lk_b - lk_a, -700.0), 700.0)))  # np.clip, cheaper
        if X.shape[1] == 1:
            # on a line only a pair on both sides of h says where h lies (the answer's odds then move
            # with h's place, whatever the pair's spread; a pair on one side tells only which of the
            # two is nearer): the most uncertain of those (on the alien eggs hit@3 at 50 / 100 / 200
            # answers per item .30 / .46 / .68 against .29 / .40 / .60 with the weight to near items;
            # choosing among 100 or 200 random pairs did worse, .36 / .30 at 100)
            side = X[:, 0] - X[h, 0]
            score = p * (1.0 - p) * ((side[a] > 0) != (side[b] > 0))
        else:
            score = p * (1.0 - p) / (1.0 + np.minimum(rank_a, rank_b) / max(1.0, n / COIN_NEAR))
        j = int(np.argmax(score))  # the first of the stable order below, unless taken
        x, y = int(a[j]), int(b[j])
        if score[j] == score[j] and (h, min(x, y), max(x, y)) not in taken:
            return (h, x, y)
        for j in np.argsort(-score, kind="stable"):
            x, y = int(a[j]), int(b[j])
            if (h, min(x, y), max(x, y)) not in taken:
                return (h, x, y)
        return (h, int(a[0]), int(b[0]))

    def _sampled_ranks(self, X: np.ndarray, h: int, lk: np.ndarray) -> np.ndarray:
        """Estimated ranks from h (0: nearest) of items whose log-kernels from h are ``lk``: the share
        of ``RANK_SAMPLE`` reference items (drawn once per fit, a fixed seed: the planner's own random
        stream is not touched) nearer to h, times n. Its error (n / RANK_SAMPLE items, ~50 at 50,000)
        is far below the weight's scale, n / ``COIN_NEAR``."""
        if self._rank_ref_of is not X:
            gen = np.random.default_rng([self.n_items, int(self.n_fits_)])
            self._rank_ref = np.sort(gen.choice(self.n_items, size=min(RANK_SAMPLE, self.n_items), replace=False))
            self._rank_ref_of = X
        ref = self._rank_ref[self._rank_ref != h]
        near = np.sort(-_log_kernel(X, h, ref))  # ascending: nearest first
        # (+1: h itself ranks 0 in the exact row, its nearest other item 1)
        return 1.0 + np.searchsorted(near, -lk, side="left") * (self.n_items - 1) / max(len(ref), 1)

    def settle_fit(self) -> bool:
        """Take the refit under way as far as it goes without planning a question (a pass with nothing
        to plan: a refit that finished beside the passes is put in place, shortlists and all); with a
        fitter, also hand over a refit that is due (a study whose raters stopped still gets the refit
        its last answers call for). True when a fit (or a stage of one) was put in place."""
        beside = self.fitter is not None and self.pool
        if self.fit_job_ is None and not (beside and self._needs_refit()):
            return False

        def stage():
            job = self.fit_job_
            return self.n_fits_, None if job is None else (job["seed"], len(job["dims"]))

        before = stage()
        self._refresh()
        # put in place: a new fit, or a stage of the refit under way (the others' dimensions), or its end
        return self.n_fits_ != before[0] or (before[1] is not None and stage()[1] != before[1])

    def fit_ready(self) -> bool | None:
        """None: no refit handed to a fitter; False: one runs beside the calls; True: its result waits
        for the next call (or :meth:`settle_fit`)."""
        running = self._fit_running
        if running is None or running[1] is None or self.fit_job_ is None or self.fitter is None or not self.pool:
            return None
        return bool(running[1].done())

    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        """Up to ``budget`` distinct questions, least-asked heads first (outside a pool at most one per
        head, see ``pool``); counted as pending."""
        if isinstance(budget, bool) or not isinstance(budget, (numbers.Integral, np.integer)):
            raise ValueError(f"budget must be an integer, got {budget!r}")
        budget = int(budget)
        if budget <= 0:
            return []
        if self._needs_refit():
            self._refresh()
        n = self.n_items
        draw = self.rng_.permutation(n)
        # heads by (questions asked, tie), fed into the heap only when they come next: the same order
        # as a heap of every head, without a Python tuple per item (at 50,000 items that took ~70 ms)
        loads = self.asked_.copy()
        queue = np.lexsort((draw, loads))
        fed = 0
        heap: list[tuple[int, int, int]] = []
        out: list[tuple[int, int, int]] = []
        taken: set = set()
        cache: dict[int, tuple] = {}
        pending = self._pending_by_head()
        parked = []  # heads with nothing new to ask in this call (certified or all pairs taken)
        trust = self._duel_trust() if self.kappa_ is None else 0.0
        coin = self._coin_flips()
        explore, pairs = (COIN_EXPLORE, self.explore_pairs or COIN_PAIRS) if coin else (self.explore,
                                                                                    self.explore_pairs)
        once = not self.pool  # one question per head in this call
        while len(out) < budget and (heap or fed < n):
            while fed < n and (not heap or (int(loads[queue[fed]]), int(draw[queue[fed]])) < heap[0][:2]):
                g = int(queue[fed])
                heapq.heappush(heap, (int(loads[g]), int(draw[g]), g))
                fed += 1
            load, t, h = heapq.heappop(heap)
            warm = self.n_fits_ == 0 or self.answered_[h] < self.warmup
            if warm or self.rng_.random() < explore:
                if warm or not pairs or self.embedding_ is None:
                    q = self._random_question(h, taken)
                else:
                    q = self._exploring_question(h, taken)
            else:
                if h not in cache:
                    cands, W, N, certified = self._alive(h)
                    Np = self._add_pending(h, cands, N, pending.get(h))
                    score, _ = self._scores(h, cands, W, N)
                    m = len(cands)
                    pos = np.empty(m)
                    pos[np.lexsort((np.arange(m), -score))] = np.arange(m)
                    order = None
                    if not certified and m >= 2:
                        iu, ju, tie = _triu(m)
                        pi, pj = pos[iu], pos[ju]
                        if trust > 0.5:
                            order = FOCUS * (np.minimum(pi, pj) * m + np.maximum(pi, pj)) / (m * m)
                        else:
                            order = FOCUS * (pi + pj) / (2 * max(m - 1, 1))
                    cache[h] = (cands, Np, order, certified)
                cands, Np, order, certified = cache[h]
                m = len(cands)
                if certified or m < 2:
                    parked.append(h)
                    continue
                # unasked pairs before any repeat (a repeat can only sharpen one pair, a new pair
                # also tells how the pair ranks against the rest; on recorded data a repeat says
                # nothing new); among them, and then among repeats, the least-asked, where pairs
                # of the current leaders count as less asked (FOCUS): the leader against each
                # challenger in turn (best first), then the runner-up against the rest, ...;
                # ties to the pair nearest the head
                iu, ju, tie = _triu(m)
                # (the same sum, in the same order, for every trust: the pair order part per head)
                key = Np[iu, ju] * (1.0 + FOCUS) + order + tie
                q = None
                for idx in np.argsort(key, kind="stable"):
                    a, b = int(cands[iu[idx]]), int(cands[ju[idx]])
                    if (h, min(a, b), max(a, b)) not in taken:
                        Np[iu[idx], ju[idx]] += 1
                        q = (h, a, b)
                        break
                if q is None:
                    parked.append(h)
                    continue
            key3 = (q[0], min(q[1], q[2]), max(q[1], q[2]))
            taken.add(key3)
            self.pending_[key3] = self.pending_.get(key3, 0) + 1
            pending.setdefault(h, []).append(key3[1:])
            self.asked_[h] += 1
            out.append(q)
            if not once:
                heapq.heappush(heap, (load + 1, t, h))
        self.n_issued_ += len(out)
        return out

    # ------------------------------------------------------------------ screens
    def refresh_if_due(self) -> None:
        """Refit and rebuild the shortlists if the answers call for it (what :meth:`next_questions`
        does first); screen planners (``engine.screens``) that choose their own questions call it."""
        if self._needs_refit():
            self._refresh()

    def screen_candidates(self, h: int) -> tuple[np.ndarray, bool]:
        """h's likeliest neighbours, best first, for a screen showing several at once: its alive
        shortlist by duel score, then the nearest items of the fit outside it (up to
        ``SCREEN_CANDIDATES`` in all); and whether h is certified. Empty while h is warming up
        (no fit yet, or fewer than ``warmup`` answers for it): a screen then shows random items."""
        h = int(h)
        if self.n_fits_ == 0 or self.answered_[h] < self.warmup:
            return np.empty(0, np.int64), False
        X = self.embedding_
        if SCREEN_SPREAD and X is not None and (self.coin_ or X.shape[1] == 1):
            # near duels are coin flips (items people can hardly tell apart up close): a screen of the
            # head's nearest says little, one spread over its wider neighbourhood places it
            lk = _log_kernel(X, h, np.arange(self.n_items))
            lk[h] = -np.inf
            span = min(SCREEN_SPREAD, self.n_items - 1)
            near = np.argpartition(-lk, span - 1)[:span]
            near = near[np.lexsort((near, -lk[near]))]
            return near[self.rng_.permutation(span)].astype(np.int64), False
        _, _, _, certified = self._alive(h)
        ranked, _, _ = self._ranking(h)
        out = [int(c) for c in ranked]
        if X is not None and len(out) < SCREEN_CANDIDATES:
            lk = _log_kernel(X, h, np.arange(self.n_items))
            lk[h] = -np.inf
            gone = self.eliminated_.get(h, ())
            want = SCREEN_CANDIDATES + len(out) + len(gone) + 1
            near = np.argpartition(-lk, min(want, self.n_items - 1))[:want]
            for c in near[np.lexsort((near, -lk[near]))]:
                c = int(c)
                if len(out) >= SCREEN_CANDIDATES:
                    break
                if c != h and c not in out and c not in gone:
                    out.append(c)
        return np.asarray(out, np.int64), bool(certified)

    # ------------------------------------------------------------------ results
    def _ranking(self, h: int):
        """h's candidates best first (duel score, then shortlist order), with score and duels: the row
        of :meth:`_ranked_rows` (so one head's ranking is the graph's, to the last bit)."""
        ranked, score, counts, _ = self._ranked_rows(np.array([h]))
        keep = ranked[0] >= 0
        return ranked[0][keep], score[0][keep], counts[0][keep]

    def candidates(self, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Item ``h``'s candidates for nearest neighbour, best first: (items, smoothed share of the duels
        each won, duels that showed each). Its shortlist once the embedding is fitted; before that the
        items ``h``'s answers chose most often (their win share among the triplets that showed them, as
        :meth:`neighbor_graph` ranks them then)."""
        h = int(h)
        if not 0 <= h < self.n_items:
            raise ValueError(f"item {h} is not one of the {self.n_items} items")
        cands, score, counts = self._ranking(h)
        if len(cands) or self.embedding_ is not None:
            return cands, score, counts
        early = self._win_shares().get(h)
        if early is None:
            return np.empty(0, np.int64), np.empty(0), np.empty(0, np.int64)
        seen, share, shown = early
        order = np.lexsort((seen, -share))
        return seen[order].astype(np.int64), share[order], shown[order].astype(np.int64)

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """Top-k by the duel ranking inside the shortlist, then embedding order; ``estimates``
        1 - smoothed win share, ``samples`` duels behind the edge, ``certified`` by elimination."""
        if isinstance(k, bool) or not isinstance(k, (numbers.Integral, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        k = int(k)
        n = self.n_items
        nb = np.full((n, k), NO_NEIGHBOR, np.int64)
        est = np.full((n, k), np.nan)
        cnt = np.zeros((n, k), np.int64)
        cert = np.zeros(n, bool)
        X = self.embedding_
        r = min(k, self.cands_.shape[1])
        trust = self._duel_trust() if self.kappa_ is None else 0.0
        kept = self._ranked_rows_kept = self._refreshed(
            self._ranked_rows_kept, (self.n_fits_, id(self.embedding_), self.kappa_, trust), self._ranked_rows)
        ranked, score, counts, flags = kept.rows
        top = ranked[:, :r] >= 0
        nb[:, :r] = ranked[:, :r]
        est[:, :r] = np.where(top, 1.0 - score[:, :r], np.nan)
        cnt[:, :r] = np.where(top, counts[:, :r], 0)
        cert[:] = flags
        short = (self.cands_ >= 0).sum(axis=1) < k
        if X is None:
            # before the first fit: the items each head's answers chose most often (smoothed win share
            # among the triplets that showed them), so the graph is anytime
            early = self._win_shares() if short.any() else {}
            for h in np.flatnonzero((self.cands_ < 0).all(axis=1)):
                if int(h) in early:
                    seen, share, shown = early[int(h)]
                    top = np.lexsort((seen, -share))[:k]
                    nb[h, : len(top)] = seen[top]
                    est[h, : len(top)] = 1.0 - share[top]
                    cnt[h, : len(top)] = shown[top]
        else:
            # fewer candidates than k: the rest in the fit's order of nearness
            for h in np.flatnonzero(short):
                picked = [int(c) for c in nb[h] if c >= 0]
                d = ((X - X[h]) ** 2).sum(axis=1)
                d[h] = np.inf
                for c in np.argsort(d, kind="stable"):
                    if len(picked) >= k:
                        break
                    if int(c) not in picked and c != h:
                        picked.append(int(c))
                nb[h, : len(picked)] = picked
        return NeighborGraph.from_neighbors(nb, estimates=est, samples=cnt, certified=cert)

    def _win_shares(self) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per head h with answers: (items its triplets showed, smoothed share of them each won,
        triplets that showed each), from the answers' (h, item) pairs (no n x n array)."""
        n = self.n_items
        trip = self._all_triplets()
        if not len(trip):
            return {}
        shown_codes = np.concatenate([trip[:, 0] * n + trip[:, 1], trip[:, 0] * n + trip[:, 2]])
        codes, shown = np.unique(shown_codes, return_counts=True)
        won = np.searchsorted(codes, trip[:, 0] * n + trip[:, 1])
        wins = np.bincount(won, minlength=len(codes)).astype(np.float64)
        heads, items = np.divmod(codes, n)
        share = (wins + 1.0) / (shown + 2.0)
        bounds = np.flatnonzero(np.diff(heads)) + 1
        return {int(h[0]): (i, sh, c) for h, i, sh, c in zip(np.split(heads, bounds), np.split(items, bounds),
                                                             np.split(share, bounds), np.split(shown, bounds),
                                                             strict=True)}

    def result(self) -> NeighborGraph:
        """The learned 1-NN graph."""
        return self.neighbor_graph(1)

    def current_neighbors(self) -> np.ndarray:
        return self.neighbor_graph(1).neighbors[:, 0]

    def _head_duels(self) -> np.ndarray:
        """Answered duels per head: a head whose count and shortlist are as before has the same inputs
        to its certificate and its ranking (an answer only ever adds a duel)."""
        n = self.n_items
        if not len(self._codes):
            return np.zeros(n, np.int64)
        return np.bincount(self._codes // (n * n), weights=self._counts, minlength=n).astype(np.int64)

    def _refreshed(self, kept: _HeadRows | None, key: tuple, compute) -> _HeadRows:
        """``kept`` brought up to date: the rows of the heads whose shortlist or duels changed since it
        was made redone by ``compute(heads) -> tuple of arrays (len(heads), ...)``, in chunks of
        ``BATCH_HEADS``; every row when ``key`` (what all heads' results depend on) changed. A pass of a
        live study changes a few hundred heads: at 50,000 items redoing every head took seconds."""
        duels = self._head_duels()
        if kept is None or kept.key != key or kept.cands.shape != self.cands_.shape:
            heads, rows = np.arange(self.n_items), None
        else:
            heads = np.flatnonzero((kept.cands != self.cands_).any(axis=1) | (kept.duels != duels))
            rows = kept.rows
        for at in range(0, len(heads), BATCH_HEADS):
            part = heads[at: at + BATCH_HEADS]
            values = compute(part)
            if rows is None:
                rows = tuple(np.empty((self.n_items, *v.shape[1:]), v.dtype) for v in values)
            for row, v in zip(rows, values, strict=True):
                row[part] = v
        if rows is None:  # (no items at all)
            rows = tuple(v[:0] for v in compute(np.arange(0)))
        return _HeadRows(key, self.cands_.copy(), duels, rows)

    def _n_certified(self) -> int:
        """Heads whose neighbour is certified inside their shortlist (kept between looks: the dashboard
        summary and every pass's ``done`` ask; only heads whose shortlist or duels changed are redone)."""
        def certified(heads: np.ndarray) -> tuple[np.ndarray]:
            return (self._batch_certified(heads, *self._batch_matrices(heads, self.cands_[heads])),)

        self._certified_rows = self._refreshed(self._certified_rows, (), certified)
        return int(self._certified_rows.rows[0].sum())

    @property
    def done(self) -> bool:
        """True once every head's neighbour is certified inside its shortlist."""
        return self.n_fits_ > 0 and self._n_certified() == self.n_items

    def progress(self) -> dict:
        certified = self._n_certified() if self.n_fits_ else 0
        return {
            "answers": int(self.n_answers_),
            "questions_issued": int(self.n_issued_),
            "done": certified == self.n_items,
            "items_certified": int(certified),
            "pending": int(sum(self.pending_.values())),
            "embedding_fits": int(self.n_fits_),
            "embedding_dim": int(self.chosen_dim_) if self.embeddings_ else None,
            "shortlist_size": float(np.mean((self.cands_ >= 0).sum(axis=1))),
        }

    # ------------------------------------------------------------------ state
    def get_params(self) -> dict:
        return {"shortlist": self.shortlist, "min_shortlist": self.min_shortlist,
                "shrink_at": self.shrink_at, "warmup": self.warmup, "explore": self.explore,
                "refit_growth": self.refit_growth, "dim": self.dim, "delta": self.delta,
                "fit_work": self.fit_work, "explore_pairs": self.explore_pairs}

    def _duel_table(self) -> np.ndarray:
        """Rows (h, a, b, wins of a, answers), a < b, sorted (as ``sorted(duels_)``)."""
        n = self.n_items
        h, rest = np.divmod(self._codes, n * n)
        a, b = np.divmod(rest, n)
        return np.column_stack([h, a, b, self._wins, self._counts]).astype(np.int64).reshape(-1, 5)

    def to_state(self) -> dict:
        def table(d: dict, width: int) -> np.ndarray:
            if not d:
                return np.empty((0, width), np.int64)
            return np.array([(*k, *(v if isinstance(v, list) else [v])) for k, v in sorted(d.items())], np.int64)

        elim = sorted((h, c) for h, s in self.eliminated_.items() for c in s)
        return {
            "class": type(self).__name__,
            "version": self.VERSION,
            "n_items": self.n_items,
            "params": self.get_params(),
            "rng": generator_state(self.rng_),
            "triplets": self._all_triplets().copy(),
            "duels": self._duel_table(),
            "pending": table(self.pending_, 4),
            "eliminated": np.array(elim, np.int64).reshape(-1, 2),
            "asked": self.asked_.copy(),
            "answered": self.answered_.copy(),
            "cands": self.cands_.copy(),
            "embedding": None if self.embedding_ is None else self.embedding_.copy(),
            "embeddings": {str(d): X.copy() for d, X in self.embeddings_.items()},
            "dim_scores": self.dim_scores_.copy(),
            "fresh_dims": self.fresh_dims_.copy(),
            "fitted_triplets": int(self.fitted_triplets_),
            "kappa": None if self.kappa_ is None else float(self.kappa_),
            "coin": bool(self.coin_),
            "fit_job": None if self.fit_job_ is None else {**self.fit_job_, "dims": list(self.fit_job_["dims"])},
            "fit_partial": {str(d): X.copy() for d, X in self.fit_partial_.items()},
            "fitted_on": int(self.fitted_on_),
            "n_fits": int(self.n_fits_),
            "n_answers": int(self.n_answers_),
            "n_issued": int(self.n_issued_),
        }

    @classmethod
    def from_state(cls, state: dict) -> CandidateDuels:
        check_state(state, cls.__name__, (cls.VERSION,))
        p = cls(int(state["n_items"]), **state["params"])
        p.rng_ = generator_from_state(state["rng"])
        p.triplets_ = np.array(state["triplets"], np.int64).reshape(-1, 3)
        p.duels_ = {(int(r[0]), int(r[1]), int(r[2])): [int(r[3]), int(r[4])]
                    for r in np.asarray(state["duels"], np.int64).reshape(-1, 5)}
        p._reindex()
        p.pending_ = {(int(r[0]), int(r[1]), int(r[2])): int(r[3])
                      for r in np.asarray(state["pending"], np.int64).reshape(-1, 4)}
        for h, c in np.asarray(state["eliminated"], np.int64).reshape(-1, 2).tolist():
            p.eliminated_.setdefault(h, set()).add(c)
        p.asked_ = np.array(state["asked"], np.int64)
        p.answered_ = np.array(state["answered"], np.int64)
        p.cands_ = np.array(state["cands"], np.int64)
        p.embedding_ = None if state["embedding"] is None else np.array(state["embedding"], np.float64)
        p.embeddings_ = {int(d): np.array(X, np.float64) for d, X in state["embeddings"].items()}
        p.dim_scores_ = np.array(state["dim_scores"], np.float64).reshape(2, -1)
        p.fresh_dims_ = np.array(state["fresh_dims"], bool)
        p.fitted_triplets_ = int(state["fitted_triplets"])
        p.kappa_ = None if state["kappa"] is None else float(state["kappa"])
        job = state["fit_job"]
        p.fit_job_ = None if job is None else {**{k: int(v) for k, v in job.items() if k != "dims"},
                                               "dims": [int(i) for i in job["dims"]]}
        p.fit_partial_ = {int(d): np.array(X, np.float64) for d, X in state["fit_partial"].items()}
        p.coin_ = bool(state["coin"])
        p.fitted_on_ = int(state["fitted_on"])
        p.n_fits_ = int(state["n_fits"])
        p.n_answers_ = int(state["n_answers"])
        p.n_issued_ = int(state["n_issued"])
        return p
