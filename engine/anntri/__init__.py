"""ANNTri (Mason, Tripathy & Nowak, NeurIPS 2019): nearest-neighbour graphs from noisy distances.

Question planners that choose which pair (i, j) to ask next, learn from noisy distance
samples Q(i, j) and certify every item's k nearest neighbours: :class:`ANNTri` (triangle
bounds on), :class:`ANN` (off) and :class:`RandomSampling` (uniform pairs). Numpy/scipy
only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.

Shapes used throughout (n = ``n_items``):

- ``mean_``, ``upper_``, ``lower_`` : ndarray of shape (n, n), symmetric. ``mean_`` is D̂;
  ``upper_``/``lower_`` are the effective bounds U* = min(U, UΔ), L* = max(L, LΔ). Every
  confidence interval used is anytime-valid, so the stored bounds are the intersection of
  all intervals seen so far, tightened by the triangle inequality (``engine.triangle``).
- ``count_``, ``pending_`` : int ndarray of shape (n, n), symmetric: answers observed and
  questions issued but not yet answered, per pair. With ``symmetric=False`` (head-based
  estimates for triplet-derived samples) none of these matrices is symmetric: row i holds
  head i's samples only.
- Round j finds item j's k nearest neighbours; rounds open in the random order ``order_``.
- A head-based planner stores no ``upper_``/``lower_``: they are computed from ``mean_`` and
  ``count_`` (today's interval), with the pairs whose running intersection is tighter kept in
  its estimates' ``tight``; reading the attributes builds the whole matrices.
- The pair arrays belong to one :class:`engine.anntri.estimates.Estimates` per planner
  (``_est``), the rounds' arrays and counters to one :class:`engine.anntri.rounds.Rounds`
  (``_rounds``), each with its own part of the saved state; ``mean_`` ... ``lower_``,
  ``status_``, ``round_issued_``, ``n_issued_`` ... are planner attributes reading them.

One module per concern: :mod:`.estimates` (intervals and bounds), :mod:`.observe` (answers),
:mod:`.rounds` (the rounds' state; decisions and the window as functions), :mod:`.questions`
(question choice, functions), :mod:`.results`, :mod:`.state` (``to_state``/``from_state``, changed
rows), :mod:`.overlay` (the exact SETri fast path for long duels, in Python scalars) and
:mod:`.planner`, which holds the parameters and the parts.
"""
from __future__ import annotations

from ..utils import RandomState, check_int
from . import questions
from . import rounds as decisions
from .estimates import FLOAT64_MAX_ITEMS
from .planner import _NeighborGraphPlanner
from .rounds import FULL_PASS_MAX_ITEMS, ROUND_CAPPED, ROUND_CERTIFIED, ROUND_OPEN, ROUND_WAITING
from .state import STATE_VERSION, RowChanges, RowTracked

__all__ = ["ANN", "DERIVED_DEFAULTS", "FLOAT64_MAX_ITEMS", "FULL_PASS_MAX_ITEMS", "ROUND_CAPPED",
           "ROUND_CERTIFIED", "ROUND_OPEN", "ROUND_WAITING", "STATE_VERSION", "ANNTri", "RandomSampling",
           "RowChanges", "RowTracked", "planner_from_state"]


class ANNTri(_NeighborGraphPlanner):
    """ANNTri: SETri rounds with triangle-inequality elimination (Mason et al. 2019, Alg. 1–2).

    Parameters
    ----------
    n_items : int, at least 3.
    k : int, neighbours per item (k > 1 uses top-k racing).
    delta : float in (0, 1), overall failure probability.
    sigma : float, sub-Gaussian scale of the answers (0.5 for answers in [0, 1]).
    bound : ``"lil"`` (default, ε = 0.7), ``"hoeffding"``, ``"bernstein"`` or ``"kl"``
        (the last two for answers in [0, 1]); see ``engine.bounds``.
    triangle : bool, use triangle-inequality bounds.
    max_samples_per_round : int or None, questions one round may issue before it returns
        its empirical best, flagged not certified.
    window : int, rounds kept open at once (serve many raters distinct questions).
    random_state : None, int or numpy Generator; fixes the order of the rounds.
    full_pass_every : int or None, rounds between O(n³) triangle passes (0 = never,
        None = automatic: ~20 passes at n = 100, fewer as n grows, none above 1024 items).
    lookahead : float >= 0, default 0 (exact SETri: one layer per decision). With
        ``lookahead > 0`` a round whose fewest-sampled arms have T samples issues up to
        ``1 + floor(lookahead * T)`` layers of them at once (repeated pairs, all pending),
        as budget allows: at most about a ``lookahead`` share of extra samples per round
        (the decision may come up to that many layers late), for up to ~1/lookahead
        times fewer calls in long duels — for harnesses whose per-call cost matters and
        large rater pools, not the paper's algorithm. (It takes the general array path:
        the engine's own time is about that of exact SETri, whose long duels run on
        the scalar fast path.)
    stagger : bool, default False (the window fills at once, as before). With ``True`` at
        most 1 + (rounds closed or past their first layer) rounds are open: a round is past
        its first layer once every arm it has not eliminated has an answer. A round opened
        while the others are still blind has no triangle bounds to prune with and samples
        its whole row, so a full window opened at once costs ~window × n questions before
        anything is known; staggered, each new round starts from the rows already sampled
        and the window still grows to its size as rounds get going (benchmark 2). Not the
        paper's algorithm (the paper has window 1, where it changes nothing).
    symmetric : bool, default True (a distance: Q(i, j) and Q(j, i) estimate the same
        number and are pooled, as in the paper). ``False`` keeps head-based estimates for
        samples that are not symmetric, such as triplet-derived ones ("is i more like j or a
        random k?" depends on which item is the head): an answer ``(i, j, v)`` updates row
        i only (head i's estimate of j), round i reads row i only and nothing is shared by
        symmetry. Needs ``triangle=False`` (such quantities are not a metric, so triangle
        bounds would be invalid); runs on the array paths (no scalar fast path). See
        :data:`DERIVED_DEFAULTS`.
    """


class _WithoutTriangle:
    """A planner with ``triangle=False`` fixed (ANN, RandomSampling); otherwise the parameters of
    :class:`ANNTri`."""

    _takes_triangle = False

    def __init__(self, n_items: int, k: int = 1, delta: float = 0.1, sigma: float = 0.5, bound: str = "lil",
                 max_samples_per_round: int | None = None, window: int = 1, random_state: RandomState = None,
                 full_pass_every: int | None = None, lookahead: float = 0.0, stagger: bool = False,
                 symmetric: bool = True) -> None:
        super().__init__(n_items, k=k, delta=delta, sigma=sigma, bound=bound, triangle=False,
                         max_samples_per_round=max_samples_per_round, window=window,
                         random_state=random_state, full_pass_every=full_pass_every,
                         lookahead=lookahead, stagger=stagger, symmetric=symmetric)


class ANN(_WithoutTriangle, ANNTri):
    """ANNTri without triangle bounds (the paper's ANN baseline), same code path."""


class RandomSampling(_WithoutTriangle, _NeighborGraphPlanner):
    """Uniformly random pairs, same estimates and bounds (no triangle); the paper's Random.

    ``next_questions(budget)`` returns ``budget`` uniform pairs i != j until every item's
    neighbours are certified by the confidence bounds; pending questions are tracked (for
    ``progress``) but do not steer the choice. ``window``, ``max_samples_per_round`` and
    ``lookahead`` and ``stagger`` are accepted for a uniform interface and not used.
    """

    _overlay_capable = False

    def _settle(self):
        pass

    def _check_certified(self) -> None:
        decisions.sweep_uncertified(self._est, self._rounds, self._params_now())

    def next_questions(self, budget: int) -> list[tuple[int, int]]:
        self._ensure_state()
        budget = check_int("budget", budget, minimum=0)
        self._check_certified()
        if self.done or budget == 0:
            return []
        return questions.next_uniform(self._est, self._rounds, self._params_now(), budget, self.rng_)


#: Parameters recommended for triplet-derived distance samples Q(i, j) ("is i more like j or a
#: random k?", 1 if k wins), chosen with ``benchmarks/anntri_derived.py`` (alien eggs, simulated
#: people): head-based estimates (the derived quantity is not symmetric), no triangle bounds
#: (it is not a metric), the KL bound (the tightest for Bernoulli samples; LIL eliminates
#: nothing before ~400 samples per arm) and every round open at once (not staggered: measured
#: best from 500 answers per item on), so the questions spread over all items from the start
#: instead of one round's long duel. ``window`` above ``n_items`` means "all".
DERIVED_DEFAULTS: dict = {"symmetric": False, "triangle": False, "bound": "kl",
                          "window": 100_000, "stagger": False}

_PLANNERS = {cls.__name__: cls for cls in (ANNTri, ANN, RandomSampling)}


def planner_from_state(state: dict) -> ANNTri | RandomSampling:
    """Restore whichever planner (``ANNTri``, ``ANN``, ``RandomSampling``) saved ``state``."""
    name = state.get("class")
    if name not in _PLANNERS:
        raise ValueError(f"unknown planner class {name!r}; expected one of {sorted(_PLANNERS)}")
    return _PLANNERS[name].from_state(state)
