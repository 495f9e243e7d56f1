"""Candidate duels' parts and parameters: what the module functions (refits, dimensions, shortlists,
scoring, question choice, results) work on.

:class:`Parts` holds what one planner learned, each part owning its arrays and its part of the state:
the answers and duel counts (:class:`~.answers.Duels`), the shortlists and eliminations
(:class:`~.shortlists.Shortlist`), the fits (:class:`~.embedding.Embedding`), the results kept between
looks (:class:`~.scores.KeptResults`), the features' prior (:class:`~.priors.FeaturePrior`, or None) and
the random generator. :class:`Params` is what the functions read of the planner's parameters and its
driving (``pool``, ``fitter``), as they are at the call. Numpy only; must never import Flask, Redis,
RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from .answers import Duels
from .embedding import Embedding
from .priors import FeaturePrior
from .scores import KeptResults
from .shortlists import Shortlist


class Params(NamedTuple):
    """A planner's parameters (:class:`~.planner.CandidateDuels` documents them) and how it is driven."""

    n_items: int
    shortlist: int
    min_shortlist: int
    shrink_at: float
    warmup: float | str
    explore: float
    refit_growth: float
    dim: int | str
    delta: float
    explore_pairs: int
    pool: bool
    fitter: Any


@dataclass
class Parts:
    """What one planner learned: ``duels``, ``short``, ``fit``, ``kept``, ``prior`` (None without
    features) and ``rng`` (the planner's one random stream)."""

    duels: Duels
    short: Shortlist
    fit: Embedding
    kept: KeptResults
    prior: FeaturePrior | None
    rng: np.random.Generator
