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
from ..graph import NO_NEIGHBOR

#: answers per item before the first refit of a study with features (until then: the features' shortlists)
FIRST_FIT = 1.0
#: what an item's offset from where its features map it costs in a refit (``PRIOR_STIFFNESS``, read
#: here so a test or a benchmark can patch it for duels alone)
STIFFNESS = PRIOR_STIFFNESS
#: share of a rebuilt shortlist's new candidates taken from the items nearest in the features (while
#: they are trusted): the features know neighbours a low-dimensional fit folds away
SHARE = 0.34
#: the features are judged on the answers that pit one of the head's ``TEST_NEAR`` nearest in the features
#: against an item outside them (the first shortlists hold such pairs, and so do later ones): trusted
#: until ``TEST_MIN`` such answers are scored, then while the feature neighbour wins more often than
#: chance (.5) by ``TRUST_SE`` standard errors. Pure noise falls out at the first refit
TEST_NEAR = 16
TEST_MIN = 100
TRUST_SE = 1.0
#: share of the first shortlists given to random items: the features are judged at the first refit
#: by how often their neighbours beat them (duels among feature neighbours alone tell little)
RANDOM_SHARE = 0.34
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
        self.tests_ = np.zeros(2)  # the same on the answers of a feature neighbour against another item
        self.dropped_ = False  # found to predict nothing: the learner goes on as one without features
        # each item's nearest in the features (computed once, saved: at 50,000 items it takes ~30 s)
        self._near: np.ndarray | None = None

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

    def first_shortlists(self, m: int, width: int, rng: np.random.Generator) -> np.ndarray:
        """Shortlists (n_items, width) before any answer: each item's ``1 - RANDOM_SHARE`` of m nearest
        in the features and random other items up to m, a random one second, fifth, ... (a head's first
        duel, its first two candidates, tests its nearest against a random item), ``NO_NEIGHBOR`` padding."""
        n = self.n_items
        m = int(min(m, n - 1, width))
        k = m - int(RANDOM_SHARE * m) if n - 1 > m else m
        near = self.neighbors(k)
        out = np.full((n, width), NO_NEIGHBOR, np.int64)
        out[:, :k] = near
        gen = np.random.default_rng(int(rng.integers(2**31 - 1)))
        for c in range(k, m):
            # a random item that is neither the head nor already on its list (redrawn where it is)
            col = gen.integers(n, size=n)
            while True:
                bad = (col == np.arange(n)) | (out[:, :c] == col[:, None]).any(axis=1)
                if not bad.any():
                    break
                col[bad] = gen.integers(n, size=int(bad.sum()))
            out[:, c] = col
        if m > k:
            rand_at = np.arange(1, m, 3)[: m - k]
            order = np.concatenate([rand_at, np.setdiff1d(np.arange(m), rand_at)])
            out[:, order] = out[:, np.concatenate([np.arange(k, m), np.arange(k)])]
        return out

    def start(self, dim: int) -> np.ndarray:
        """The first embedding in ``dim`` dimensions: the leading components (zeros past the last)."""
        X = np.zeros((self.n_items, dim))
        p = min(dim, self.space_.shape[1])
        X[:, :p] = self.space_[:, :p] * START_SCALE
        return X

    def score(self, fresh: np.ndarray) -> None:
        """Score the features on answers no refit had seen (rows (i, j, k)): every answer (``scores_``),
        and those of one of the head's ``TEST_NEAR`` feature neighbours against another item (``tests_``)."""
        fresh = np.asarray(fresh, np.int64).reshape(-1, 3)
        self.scores_ += triplet_agreement(self.space_, fresh)
        if len(fresh):
            near = self.neighbors(TEST_NEAR)[fresh[:, 0]]
            won = (near == fresh[:, 1:2]).any(axis=1)
            lost = (near == fresh[:, 2:3]).any(axis=1)
            test = won != lost
            self.tests_ += (int(won[test].sum()), int(test.sum()))

    @property
    def agreement(self) -> float:
        """Share of the scored answers the features predicted (nan before any)."""
        right, seen = self.scores_
        return float(right / seen) if seen > 0 else float("nan")

    @property
    def test_share(self) -> float | None:
        """How often a feature neighbour beat another item in the answers scored (None before any)."""
        right, seen = self.tests_
        return float(right / seen) if seen > 0 else None

    @property
    def trusted(self) -> bool:
        """Whether the features count (in the fits, the shortlists and the warm-up): until ``TEST_MIN``
        answers of a feature neighbour against another item were scored, then while the neighbour wins
        more often than chance by ``TRUST_SE`` standard errors."""
        if self.dropped_:
            return False
        right, seen = self.tests_
        if seen < TEST_MIN:
            return True
        return bool(right / seen - 0.5 > TRUST_SE * 0.5 / math.sqrt(seen))

    def learned_map(self, X: np.ndarray) -> np.ndarray:
        """The map W (p, dim) the fits learned from the features to fitted coordinates ``X`` (n_items, dim):
        X = Z W + E read back as its least-squares map (as ``engine.embedding.fit_embedding`` splits a start)."""
        return np.linalg.lstsq(self.points(), np.asarray(X, np.float64), rcond=None)[0]

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
        return {"version": self.VERSION, "space": self.space_.copy(), "scores": self.scores_.copy(),
                "tests": self.tests_.copy(), "dropped": bool(self.dropped_),
                "near": None if self._near is None else self._near.astype(np.int32)}

    @classmethod
    def from_state(cls, state: dict) -> Self:
        if state.get("version") != cls.VERSION:
            raise ValueError(f"feature prior state of version {state.get('version')}, not {cls.VERSION}")
        prior = cls(np.asarray(state["space"], np.float32))
        prior.scores_ = np.array(state["scores"], np.float64).reshape(2)
        prior.tests_ = np.array(state["tests"], np.float64).reshape(2)
        prior.dropped_ = bool(state["dropped"])
        near = state.get("near")
        prior._near = None if near is None else np.array(near, np.int64).reshape(len(prior.space_), -1)
        return prior
