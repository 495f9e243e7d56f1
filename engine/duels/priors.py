"""Candidate duels' feature prior: the items' features (:mod:`engine.features`) give the first
shortlists and the first embedding, feed every refit as a learned map the answers can overrule, and
keep a share of each shortlist while they predict the answers better than chance.

Owned by :class:`~engine.duels.planner.CandidateDuels` as ``prior_`` (None without features); it holds
its own data and state. Numpy/scipy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from ..features import PRIOR_STIFFNESS, feature_neighbors, feature_space, triplet_agreement

#: answers per item before the first refit of a study with features (until then: the features' shortlists)
FIRST_FIT = 1.0
#: what an item's offset from where its features map it costs in a refit (``PRIOR_STIFFNESS``, read
#: here so a test or a benchmark can patch it for duels alone)
STIFFNESS = PRIOR_STIFFNESS
#: share of a rebuilt shortlist's new candidates taken from the items nearest in the features (while
#: they are trusted): the features know neighbours a low-dimensional fit folds away
SHARE = 0.34
#: the features are trusted until ``TRUST_AFTER`` answers per item have been scored, then while they
#: predict the answers no refit had seen better than chance (.5) by ``TRUST_SE`` standard errors: pure
#: noise falls out after the first refit, weak features stay once enough answers show them better than chance
TRUST_AFTER = 1.0
TRUST_SE = 2.0
#: spread of the first embedding (the features' leading components, the first of unit spread)
START_SCALE = 1.0


class FeaturePrior:
    """The features of a study's items in the space the learner reads them in (``space_``, float32
    (n_items, p), see :func:`engine.features.feature_space`) and how well they predicted the answers
    that arrived after each refit (``scores_``: [predicted right, scored])."""

    VERSION = 1

    def __init__(self, space: np.ndarray) -> None:
        self.space_ = np.asarray(space, np.float32)
        self.scores_ = np.zeros(2)
        self._near: np.ndarray | None = None  # feature neighbours, computed once (never saved)

    @classmethod
    def from_features(cls, features: ArrayLike, n_items: int) -> Self:
        return cls(feature_space(features, n_items))

    @property
    def n_items(self) -> int:
        return len(self.space_)

    def points(self) -> np.ndarray:
        """The space as float64 (what the fits read)."""
        return self.space_.astype(np.float64)

    def neighbors(self, k: int) -> np.ndarray:
        """Each item's k nearest in the features, nearest first (computed once for the widest k asked)."""
        k = int(min(k, self.n_items - 1))
        if self._near is None or self._near.shape[1] < k:
            self._near = feature_neighbors(self.space_, max(k, 16))
        return self._near[:, :k]

    def start(self, dim: int) -> np.ndarray:
        """The first embedding in ``dim`` dimensions: the leading components (zeros past the last)."""
        X = np.zeros((self.n_items, dim))
        p = min(dim, self.space_.shape[1])
        X[:, :p] = self.space_[:, :p] * START_SCALE
        return X

    def score(self, fresh: np.ndarray) -> None:
        """Score the features on answers no refit had seen (rows (i, j, k))."""
        self.scores_ += triplet_agreement(self.space_, fresh)

    @property
    def agreement(self) -> float:
        """Share of the scored answers the features predicted (nan before any)."""
        right, seen = self.scores_
        return float(right / seen) if seen > 0 else float("nan")

    @property
    def trusted(self) -> bool:
        """Whether the features count (in the fits, the shortlists and the warm-up): until ``TRUST_AFTER``
        answers per item were scored, then while they predict fresh answers better than chance by
        ``TRUST_SE`` standard errors."""
        seen = self.scores_[1]
        if seen < TRUST_AFTER * self.n_items:
            return True
        return bool(self.agreement - 0.5 > TRUST_SE * 0.5 / math.sqrt(seen))

    def mix(self, near: np.ndarray, share: float = SHARE) -> np.ndarray:
        """Rows of nearest items in the fit (n_items, k) with the features' nearest woven in: every
        1/``share``-th place holds the next feature neighbour; an item already in the row is padding
        (``n_items``, which callers skip)."""
        n, k = near.shape
        extra = max(1, math.ceil(share * k))
        feats = self.neighbors(extra)
        width = k + feats.shape[1]
        step = max(2, round(1.0 / share))
        at_feature = (np.arange(width) % step) == step - 1
        at_feature[np.flatnonzero(at_feature)[feats.shape[1]:]] = False
        while at_feature.sum() < feats.shape[1]:  # (a short row: the rest of the feature neighbours at its end)
            at_feature[np.flatnonzero(~at_feature)[-1]] = True
        out = np.empty((n, width), np.int64)
        out[:, at_feature] = feats
        out[:, ~at_feature] = near
        # later copies of an item become padding (a stable sort keeps each item's first place first)
        order = np.argsort(out, axis=1, kind="stable")
        srt = np.take_along_axis(out, order, axis=1)
        dup = np.zeros_like(out, dtype=bool)
        np.put_along_axis(dup, order[:, 1:], srt[:, 1:] == srt[:, :-1], axis=1)
        return np.where(dup, n, out)

    def to_state(self) -> dict:
        return {"version": self.VERSION, "space": self.space_.copy(), "scores": self.scores_.copy()}

    @classmethod
    def from_state(cls, state: dict) -> Self:
        if state.get("version") != cls.VERSION:
            raise ValueError(f"feature prior state of version {state.get('version')}, not {cls.VERSION}")
        prior = cls(np.asarray(state["space"], np.float32))
        prior.scores_ = np.array(state["scores"], np.float64).reshape(2)
        return prior
