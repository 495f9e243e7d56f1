"""Candidate duels' planner: the facade that implements ``engine.graph.Planner`` over the parts.

What one planner learned is a :class:`~.parts.Parts`, built on first use (:func:`~.state.start`; ``__init__``
stores the parameters only): the answers and duel counts (:class:`~.answers.Duels`), the shortlists and
eliminations (:class:`~.parts.Shortlist`), the fits (:class:`~.embedding.Embedding`), the results kept
between looks (:class:`~.parts.KeptResults`), the features' prior and the random generator. Refits
(:mod:`.refits`, the pure stages in :mod:`.fits`), dimensions and the regime gates (:mod:`.dims`), the
shortlists' rebuilds (:mod:`.shortlists`), the one scoring (:mod:`.scores`), question choice
(:mod:`.questions`), results (:mod:`.results`) and state I/O (:mod:`.state`) are functions over the parts and
the parameters (:class:`~.parts.Params`); :class:`CandidateDuels` calls them. The old attribute names
(``cands_``, ``embedding_``, ...) read through to the parts (:mod:`.names`). Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from ..features import check_features
from ..graph import NeighborGraph
from ..utils import RandomState, check_n_items, check_triplets, store_params
from . import questions, refits, results
from .names import with_old_names
from .parts import Params, Parts
from .state import VERSION, planner_of_state, planner_state, start

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


@with_old_names
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
    warmup : float or "auto", default "auto"
        Random-triplet answers per head before its duels start (they seed the embedding). ``"auto"``:
        3 up to 1,000 items, more in larger studies (see :func:`~engine.duels.fits.auto_warmup`).
    explore : float, default 0.1
        Share of later questions asked as random triplets (keeps the embedding global). Where
        duels are coin flips (see :func:`~.dims.update_coin`) ``COIN_EXPLORE`` of the questions place items
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
        a :class:`~engine.duels.fits.FitTask`, and its result (a ``concurrent.futures.Future``-like object whose
        ``done()`` / ``result()`` give :func:`~engine.duels.fits.run_fit`'s dict) is taken by the first call after it
        is ready; calls in between plan from the previous fit's shortlists and the duel counts.
        Not saved: a restored planner hands the refit under way (``fit_job_``, saved) over again.
    features : array of shape (n_items, n_features), or None (default)
        What the items already tell (an image embedding, attributes, a generated parameter), as a
        prior the answers can overrule (:mod:`.priors`): they are first tested, each head's first
        questions pitting one of its nearest in the features against a random item (an unbiased test; where
        the features are noise, the random triplets a study without them warms up with). Once the feature
        neighbours are seen to win more often than chance the tests stop and duels start (no further random
        warm-up with ``warmup="auto"``): the first embedding is the features' leading components; every refit
        fits a map from the features to the space people use together with each item's offset from it; a
        share of each rebuilt shortlist comes from the features. Features that fail the test are dropped
        within the warm-up (the study goes on as one without them, the tests its warm-up). The matrix
        itself is kept only until the planner's first use: its space (at most ``FEATURE_COMPONENTS``
        principal components, float32) is, in ``prior_`` and in the state.
    """

    #: ``make_planner(..., features=X)`` passes the items' features (see ``features``)
    TAKES_FEATURES = True
    #: the one state version that loads (see :mod:`.state`)
    VERSION = VERSION
    #: how the caller drives the learner (see ``pool`` and ``fitter`` above): not parameters, not saved
    pool = False
    fitter: Any = None
    #: what the planner learned (:attr:`_s`), None until its first use
    _parts: Parts | None = None

    def __init__(self, n_items: int, random_state: RandomState = None, shortlist: int = 12, min_shortlist: int = 6,
                 shrink_at: float = 100.0, warmup: float | str = "auto", explore: float = 0.1,
                 refit_growth: float = 0.25, dim: int | str = "auto", delta: float = 0.05,
                 fit_work: int = 1_000_000, explore_pairs: int = 0, features: ArrayLike | None = None) -> None:
        store_params(self, locals())
        self.n_items = check_n_items(n_items)
        self._check_params()
        # (a bad matrix is refused here, as when the planner read it at once; it is read at the first use)
        self.features = None if features is None else check_features(features, self.n_items)

    @property
    def _s(self) -> Parts:
        """What the planner learned, started on first use (:func:`~.state.start`: the features matrix is read
        into the prior's space then, and not kept)."""
        if self._parts is None:
            self._parts = start(self._params_now(), self.random_state, self.features)
            self.features = None
        return self._parts

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
        if self.warmup != "auto":
            real("warmup", 0, np.inf)
        real("explore", 0, 1)
        real("refit_growth", 0, np.inf, lo_open=True)
        real("delta", 0, 1, lo_open=True, hi_open=True)

    def _params_now(self) -> Params:
        """The parameters the module functions read, as they are now (``pool`` and ``fitter`` included)."""
        return Params(self.n_items, self.shortlist, self.min_shortlist, self.shrink_at, self.warmup, self.explore,
                      self.refit_growth, self.dim, self.delta, self.explore_pairs, self.pool, self.fitter)

    def get_params(self) -> dict:
        return {"shortlist": self.shortlist, "min_shortlist": self.min_shortlist,
                "shrink_at": self.shrink_at, "warmup": self.warmup, "explore": self.explore,
                "refit_growth": self.refit_growth, "dim": self.dim, "delta": self.delta,
                "fit_work": self.fit_work, "explore_pairs": self.explore_pairs}

    # ------------------------------------------------------------------ state (engine.duels.state)
    def to_state(self) -> dict:
        return planner_state(self._s, self)

    @classmethod
    def from_state(cls, state: dict) -> Self:
        return planner_of_state(cls, state)

    # ------------------------------------------------------------------ answers (engine.duels.answers)
    def observe(self, answers: Iterable[Sequence[int]] | np.ndarray) -> None:
        """Apply ``(head, a, b, winner)`` rows; any triplet is accepted (issued or not): it feeds
        the embedding, and counts as a duel of a and b for that head."""
        self._s.duels.observe(check_triplets(answers, self.n_items, "triplet answer", width=4))

    def forget(self, questions: Iterable[Sequence[int]]) -> int:
        """Release issued questions that will never be answered; returns how many were pending."""
        return self._s.duels.forget(questions)

    # ------------------------------------------------------------------ questions (engine.duels.questions)
    def next_questions(self, budget: int) -> list[tuple[int, int, int]]:
        """Up to ``budget`` distinct questions, least-asked heads first (outside a pool at most one per
        head, see ``pool``); counted as pending (:func:`~.questions.next_questions`)."""
        return questions.next_questions(self._s, self._params_now(), budget)

    def screen_candidates(self, h: int) -> tuple[np.ndarray, bool]:
        """h's likeliest neighbours, best first, for a screen showing several at once, and whether h is
        certified (:func:`~.questions.screen_candidates`)."""
        return questions.screen_candidates(self._s, self._params_now(), h)

    def screen_of_tests(self, h: int, size: int) -> np.ndarray | None:
        """A screen of head h that tests trusted features again, or None (:func:`~.questions.screen_of_tests`)."""
        return questions.screen_of_tests(self._s, self._params_now(), h, size)

    # ------------------------------------------------------------------ refits (engine.duels.refits)
    def settle_fit(self) -> bool:
        """:func:`~.refits.settle_fit`: the refit under way taken as far as it goes without planning a
        question. True when a fit (or a stage of one) was put in place."""
        return refits.settle_fit(self._s, self._params_now())

    def fit_ready(self) -> bool | None:
        """None: no refit handed to a fitter; False: one runs beside the calls; True: its result waits
        for the next call (or :meth:`settle_fit`)."""
        return refits.fit_ready(self._s, self._params_now())

    def refresh_if_due(self) -> None:
        """Refit and rebuild the shortlists if the answers call for it (what :meth:`next_questions`
        does first); screen planners (``engine.screens``) that choose their own questions call it."""
        refits.refresh_if_due(self._s, self._params_now())

    @property
    def warmup_(self) -> float:
        """Random-triplet answers per head before its duels start (:func:`~.refits.warmup_of`)."""
        return refits.warmup_of(self._s, self._params_now())

    # ------------------------------------------------------------------ results (engine.duels.results)
    def candidates(self, h: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Item ``h``'s candidates for nearest neighbour, best first: (items, smoothed share of the duels
        each won, duels that showed each) (:func:`~.results.candidates`)."""
        return results.candidates(self._s, self._params_now(), h)

    def neighbor_graph(self, k: int = 1) -> NeighborGraph:
        """Top-k by the duel ranking inside the shortlist, then embedding order; ``estimates``
        1 - smoothed win share, ``samples`` duels behind the edge, ``certified`` by elimination
        (:func:`~.results.neighbor_graph`)."""
        return results.neighbor_graph(self._s, self._params_now(), k)

    def result(self) -> NeighborGraph:
        """The learned 1-NN graph."""
        return self.neighbor_graph(1)

    def current_neighbors(self) -> np.ndarray:
        return self.neighbor_graph(1).neighbors[:, 0]

    def place_by_features(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Items added to the study later, given in its features' space, placed by the map its fits learned
        from the features (:func:`~.results.place_by_features`); None while it has no such map."""
        return results.place_by_features(self._s, rows)

    @property
    def done(self) -> bool:
        """True once every head's neighbour is certified inside its shortlist."""
        return results.done(self._s, self._params_now())

    def progress(self) -> dict:
        return results.progress(self._s, self._params_now())
