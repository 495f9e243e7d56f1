"""Every pair's estimate, kept up to date as ratings come: each pair's ratings (as the average rater would
have given them) pooled with the fitted space's distance, and each item's shortlist of likeliest neighbours.
Derived from the log and the fit, never saved. Numpy only; must never import Flask, Redis, RQ, ``webapp``
or ``workers``.

Between refits only the pairs a batch of ratings touches change, so a batch costs O(its ratings) and the
rows it touches (their shortlists), not O(n_items²): at 1,000 items the n x n estimates remade on every
call were most of a live study's pass (benchmarks/rating_pass_cost.py).
"""
from __future__ import annotations

import numpy as np

from .log import UNKNOWN_RATER, RatingLog
from .model import PRIOR_NOISE, RatingFit

#: before the first fit, the spread of pair means around the ratings' mean (distance units: 0.7
#: points of a 1-9 scale)
PRIOR_PAIR_SD = 0.09


def corrected(log: RatingLog, fit: RatingFit | None, start: int, stop: int) -> np.ndarray:
    """Ratings ``start:stop`` of the log as the average rater would have given them (by ``fit``'s raters)."""
    values = log.values[start:stop]
    if fit is None:
        return values
    raters = log.raters[start:stop]
    return fit.corrected(values, np.where(raters == UNKNOWN_RATER, len(fit.offsets), raters))


class PairEstimates:
    """Per pair (all ``(n_items, n_items)``, symmetric): ``counts`` and ``sums`` of its ratings as the
    average rater's, and the Gaussian ``mean`` and ``var`` of its distance: the space's distance (before a
    fit, the mean of all ratings) as a prior of precision ``prior_prec``, times its ratings' likelihood.
    Diagonal of ``mean``: inf.

    Built from the whole log on first use after :meth:`clear` (a new fit re-reads every rating with the
    raters' new offsets and slopes); :meth:`add` then takes each new batch: after a fit, only the pairs it
    touches are recomputed (the arithmetic of a rebuild: the estimates depend on how the ratings were
    batched only by the rounding of each pair's sum); before one, the prior moves with every rating and
    the estimates are remade when next asked for."""

    def __init__(self, n_items: int) -> None:
        self.n_items = int(n_items)
        self.clear()

    def clear(self) -> None:
        self.built = False
        self._fit: RatingFit | None = None
        self.counts = self.sums = self.mean = self.var = None
        self._prior_term = self._prior_prec = None  # prior mean x its precision, and its precision
        self._noise2 = PRIOR_NOISE**2
        self._stale = True  # mean and var not yet made from counts and sums
        self._shortlist: np.ndarray | None = None  # (n_items, s) candidates of each item
        self._dirty: np.ndarray | None = None  # (n_items,) rows whose shortlist may have changed

    # ------------------------------------------------------------------ building
    def build(self, log: RatingLog, fit: RatingFit | None, fitted_on: int, dim: int) -> None:
        """Counts and sums from every rating of ``log``, and the prior from ``fit`` (``fitted_on``: the
        ratings it was fitted to; ``dim`` its space's dimensions)."""
        n = self.n_items
        self.counts, self.sums = np.zeros((n, n)), np.zeros((n, n))
        self.built = True
        self._fit = fit
        self._add_stats(log, 0, len(log))
        if fit is not None:
            noise = fit.estimated.noise
            # the space is less sure of items it has placed with few ratings
            per_item = np.bincount(log.pairs[:fitted_on].ravel(), minlength=n) + 1.0
            item_var = noise**2 * (dim + 1) / per_item
            spread2 = fit.estimated.residual**2 + 0.5 * (item_var[:, None] + item_var[None, :])
            self._noise2 = noise**2
            self._prior_term = fit.space() / spread2
            self._prior_prec = 1.0 / spread2
        self._stale = True

    def _prior_before_fit(self, log: RatingLog) -> None:
        n = self.n_items
        values = log.values
        prior = np.full((n, n), float(values.mean()) if len(values) else 0.5)
        spread2 = np.full((n, n), PRIOR_PAIR_SD**2)
        self._noise2 = PRIOR_NOISE**2
        self._prior_term = prior / spread2
        self._prior_prec = 1.0 / spread2

    def _add_stats(self, log: RatingLog, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Add ratings ``start:stop`` to counts and sums; returns the flat positions they touched (both
        halves) and the rows. Each position gets its batch's sum in log order, added once."""
        n = self.n_items
        p = log.pairs[start:stop]
        z = corrected(log, self._fit, start, stop)
        codes = np.concatenate([p[:, 0] * n + p[:, 1], p[:, 1] * n + p[:, 0]])
        touched, inv = np.unique(codes, return_inverse=True)
        self.counts.ravel()[touched] += np.bincount(inv, minlength=len(touched))
        self.sums.ravel()[touched] += np.bincount(inv, weights=np.concatenate([z, z]), minlength=len(touched))
        return touched, np.unique(p)

    def add(self, log: RatingLog, start: int, stop: int) -> None:
        """Take ratings ``start:stop`` of the log (after :meth:`build`; a no-op before)."""
        if not self.built or stop <= start:
            return
        touched, rows = self._add_stats(log, start, stop)
        if self._fit is None or self._stale:
            self._stale = True  # before a fit the prior is the mean of every rating: remade when asked
            return
        mean, precision = self._combine(touched)
        self.mean.ravel()[touched] = mean
        self.var.ravel()[touched] = 1.0 / precision
        if self._dirty is not None:
            self._dirty[rows] = True

    # ------------------------------------------------------------------ reading
    def _combine(self, at: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(mean, precision) of the pairs at flat positions ``at`` (all pairs, (n, n), if None)."""
        if at is None:
            prior_term, prior_prec, counts, sums = self._prior_term, self._prior_prec, self.counts, self.sums
        else:
            prior_term, prior_prec = self._prior_term.ravel()[at], self._prior_prec.ravel()[at]
            counts, sums = self.counts.ravel()[at], self.sums.ravel()[at]
        precision = prior_prec + counts / self._noise2
        mean = (prior_term + sums / self._noise2) / precision
        return mean, precision

    def base(self, log: RatingLog) -> tuple[np.ndarray, np.ndarray]:
        """(mean, precision), new arrays, without the diagonal's inf (what the triplets move)."""
        if self._fit is None:
            self._prior_before_fit(log)
        return self._combine()

    def current(self, log: RatingLog) -> tuple[np.ndarray, np.ndarray]:
        """(mean, var), the estimates' own arrays (read-only views: they change as ratings come)."""
        if self._stale:
            mean, precision = self.base(log)
            np.fill_diagonal(mean, np.inf)
            self.mean, self.var = mean, 1.0 / precision
            self._stale = False
            self._dirty = np.ones(self.n_items, bool)
        return _read_only(self.mean), _read_only(self.var)

    def shortlist(self, log: RatingLog, s: int) -> np.ndarray:
        """(n_items, s): each item's ``s`` nearest by the current means (``np.argpartition``'s choice among
        ties), remade only for the rows whose means changed since the last call."""
        mean, _ = self.current(log)
        if self._shortlist is None or self._shortlist.shape[1] != s:
            self._shortlist = np.empty((self.n_items, s), np.int64)
            self._dirty[:] = True
        rows = np.flatnonzero(self._dirty)
        if len(rows) == self.n_items:
            self._shortlist[:] = np.argpartition(mean, s - 1, axis=1)[:, :s]
        elif len(rows):
            self._shortlist[rows] = np.argpartition(mean[rows], s - 1, axis=1)[:, :s]
        self._dirty[:] = False
        return self._shortlist


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view
