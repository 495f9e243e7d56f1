"""Candidate duels' state I/O: ``to_state``/``from_state`` as plain arrays + JSON values, one version.

Never saved: the fitter, ``pool``, the duel counts (rebuilt from the triplets) and the caches (rows of
the fit, results kept between looks), which follow from the saved state. Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import Self

import numpy as np

from ..utils import counters_state, generator_state, load_counters, planner_from_state
from .answers import Duels
from .priors import FeaturePrior
from .shortlists import Shortlist


class StateIO:
    """Mixin of :class:`~engine.duels.planner.CandidateDuels`: its state out and back."""

    #: the one state version that loads (no release wrote another). 6: the duel counts are no longer
    #: saved (they follow from the triplets; at 50,000 items the sorted table was 18 MB, changed all
    #: through by every pass's inserts, so it went whole into every pass's journal entry) and the
    #: eliminations are a log in the order they happened, so a pass adds rows at its end; the partial
    #: fits of a refit (always empty since refits run whole, in one call or beside the passes) are gone
    VERSION = 6
    #: the counters the state keeps (as whole numbers, last)
    _COUNTERS = ("fitted_on", "n_fits", "n_answers", "n_issued")

    def to_state(self) -> dict:
        duels, short = self._duels.to_state(), self._short.to_state()
        return {
            "class": type(self).__name__,
            "version": self.VERSION,
            "n_items": self.n_items,
            "params": self.get_params(),
            "rng": generator_state(self.rng_),
            "triplets": duels["triplets"],
            "pending": duels["pending"],
            "eliminated": short["eliminated"],
            "asked": duels["asked"],
            "answered": duels["answered"],
            "cands": short["cands"],
            "embedding": None if self.embedding_ is None else self.embedding_.copy(),
            "embeddings": {str(d): X.copy() for d, X in self.embeddings_.items()},
            "dim_scores": self.dim_scores_.copy(),
            "dim_compare": self.dim_compare_.copy(),
            "fresh_dims": self.fresh_dims_.copy(),
            "fitted_triplets": int(self.fitted_triplets_),
            "kappa": None if self.kappa_ is None else float(self.kappa_),
            "coin": bool(self.coin_),
            "fit_job": None if self.fit_job_ is None else {**self.fit_job_, "dims": list(self.fit_job_["dims"])},
            **counters_state(self, self._COUNTERS),
            # the features' space only where there are features (a state without them is as before)
            **({} if self.prior_ is None else {"prior": self.prior_.to_state()}),
        }

    @classmethod
    def from_state(cls, state: dict) -> Self:
        p = planner_from_state(cls, state)
        p._duels = Duels.from_state(p.n_items, state)
        p._short = Shortlist.from_state(p.n_items, p.shortlist, state)
        p.embedding_ = None if state["embedding"] is None else np.array(state["embedding"], np.float64)
        p.embeddings_ = {int(d): np.array(X, np.float64) for d, X in state["embeddings"].items()}
        p.dim_scores_ = np.array(state["dim_scores"], np.float64).reshape(2, -1)
        # a state saved before the comparison tally existed starts it empty (the choice reads
        # dim_scores_ until a refit fits several dimensions again)
        compare = state.get("dim_compare")
        p.dim_compare_ = (np.zeros_like(p.dim_scores_) if compare is None
                          else np.array(compare, np.float64).reshape(2, -1))
        p.fresh_dims_ = np.array(state["fresh_dims"], bool)
        p.fitted_triplets_ = int(state["fitted_triplets"])
        p.kappa_ = None if state["kappa"] is None else float(state["kappa"])
        job = state["fit_job"]
        p.fit_job_ = None if job is None else {**{k: int(v) for k, v in job.items() if k != "dims"},
                                               "dims": [int(i) for i in job["dims"]]}
        p.coin_ = bool(state["coin"])
        prior = state.get("prior")
        p.prior_ = None if prior is None else FeaturePrior.from_state(prior)
        load_counters(p, cls._COUNTERS, state)
        return p
