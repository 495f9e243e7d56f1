"""Candidate duels' embedding: the fits of the answers, per dimension, and what their refits have
learned (the prequential scores of the dimensions, the regime, the prior's weight, the refit under
way and its counters), with their part of the state.

:class:`Embedding` owns these; the planner's parts hold one (``Parts.fit``; the refits that fill it are in
:mod:`.refits`, the choice of dimension in :mod:`.dims`). Numpy only; must never import Flask, Redis,
RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numpy as np


class Embedding:
    """The fits of a planner whose automatic dimensions are ``n_dims`` many.

    ``embedding`` (the chosen dimension's fit, or None before any), ``embeddings`` {dim: warm fit},
    per dimension the decayed [answers predicted right, answers predicted] by fits that had not seen
    them (``dim_scores``; ``dim_compare`` the same, of refits that fitted several dimensions only),
    ``fresh_dims`` (refitted at the last refit), ``coin`` (single duels are coin flips here),
    ``kappa`` (weight of the embedding prior, once repeats have weighed it), ``fit_job`` (the refit
    under way), ``fitted_on`` / ``fitted_triplets`` (answers and triplets the last fit saw),
    ``n_fits``. Never saved: per head, the fit's log kernel row and ranks for exploring questions
    (``rows``, ``rows_of``, ``rank_ref``, ``rank_ref_of``: they follow from ``embedding``, and are
    dropped when it changes); ``running``, the stage of the refit handed to a fitter: (its FitTask
    key, its future); ``trust_kept``, the last duel trust and what it was read from
    (:func:`~.dims.duel_trust`)."""

    def __init__(self, n_dims: int) -> None:
        self.embedding: np.ndarray | None = None
        self.embeddings: dict[int, np.ndarray] = {}
        self.dim_scores = np.zeros((2, n_dims))
        self.dim_compare = np.zeros((2, n_dims))
        self.fresh_dims = np.zeros(n_dims, bool)
        self.coin = False
        self.kappa: float | None = None
        self.fit_job: dict | None = None
        self.fitted_on = 0
        self.fitted_triplets = 0
        self.n_fits = 0
        self.rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.rows_of: np.ndarray | None = None
        self.rank_ref: np.ndarray | None = None
        self.rank_ref_of: np.ndarray | None = None
        self.running: tuple | None = None
        self.trust_kept: tuple | None = None

    def to_state(self) -> dict:
        """Their part of the planner's state (``fitted_on`` and ``n_fits`` are saved with the planner's
        counters)."""
        job = self.fit_job
        return {
            "embedding": None if self.embedding is None else self.embedding.copy(),
            "embeddings": {str(d): X.copy() for d, X in self.embeddings.items()},
            "dim_scores": self.dim_scores.copy(),
            "dim_compare": self.dim_compare.copy(),
            "fresh_dims": self.fresh_dims.copy(),
            "fitted_triplets": int(self.fitted_triplets),
            "kappa": None if self.kappa is None else float(self.kappa),
            "coin": bool(self.coin),
            "fit_job": None if job is None else {**job, "dims": list(job["dims"])},
        }

    @classmethod
    def from_state(cls, n_dims: int, state: dict) -> Embedding:
        e = cls(n_dims)
        e.embedding = None if state["embedding"] is None else np.array(state["embedding"], np.float64)
        e.embeddings = {int(d): np.array(X, np.float64) for d, X in state["embeddings"].items()}
        e.dim_scores = np.array(state["dim_scores"], np.float64).reshape(2, -1)
        # a state saved before the comparison tally existed starts it empty (the choice reads
        # dim_scores until a refit fits several dimensions again)
        compare = state.get("dim_compare")
        e.dim_compare = (np.zeros_like(e.dim_scores) if compare is None
                         else np.array(compare, np.float64).reshape(2, -1))
        e.fresh_dims = np.array(state["fresh_dims"], bool)
        e.fitted_triplets = int(state["fitted_triplets"])
        e.kappa = None if state["kappa"] is None else float(state["kappa"])
        job = state["fit_job"]
        e.fit_job = None if job is None else {**{k: int(v) for k, v in job.items() if k != "dims"},
                                              "dims": [int(i) for i in job["dims"]]}
        e.coin = bool(state["coin"])
        return e
