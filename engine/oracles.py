"""Simulated raters: answer distance and triplet questions from a known metric.

Tests, benchmarks and budget planning drive the very planners that serve real raters
with these oracles. Conventions: items are ``0..n_items-1``; ``distances`` is an
ndarray of shape (n_items, n_items), symmetric with a zero diagonal; a triplet
question ``(x, p1, p2)`` asks "is x more similar to p1 or to p2?" and is answered
by the winner (p1 or p2). Must never import Flask or Redis.
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np
from scipy.spatial.distance import cdist

from .utils import check_random_state

TRIPLET_NOISE_MODELS = ("flip", "logistic")


def _as_index_array(questions: Iterable[Sequence[int]], width: int, n_items: int) -> np.ndarray:
    arr = np.asarray(list(questions), dtype=np.int64)
    if arr.size == 0:
        return np.empty((0, width), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"expected rows of {width} item indices, got shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= n_items:
        raise ValueError(f"item indices must lie in 0..{n_items - 1}")
    return arr


def check_distance_matrix(distances) -> np.ndarray:
    D = np.asarray(distances, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise ValueError(f"a distance matrix must be square, got shape {D.shape}")
    if not np.all(np.isfinite(D)):
        raise ValueError("a distance matrix must be finite")
    if np.any(D < 0):
        raise ValueError("distances must be non-negative")
    if not np.allclose(D, D.T):
        raise ValueError("a distance matrix must be symmetric")
    return D


class DistanceMatrixOracle:
    """Noisy distance samples Q(i, j) = d(i, j) + N(0, noise²) from a known matrix.

    ``clip=(lo, hi)`` clips samples, e.g. to [0, 1] for rating-like answers.
    """

    def __init__(self, distances, noise: float = 0.0, clip=None, random_state=None):
        self.distances = check_distance_matrix(distances)
        if noise < 0:
            raise ValueError("noise must be >= 0")
        self.noise = float(noise)
        self.clip = clip
        self.rng = check_random_state(random_state)

    @property
    def n_items(self) -> int:
        return self.distances.shape[0]

    def sample(self, pairs: Iterable[Sequence[int]]) -> np.ndarray:
        """One noisy sample per (i, j) row of ``pairs``; returns ndarray of shape (len(pairs),)."""
        idx = _as_index_array(pairs, 2, self.n_items)
        values = self.distances[idx[:, 0], idx[:, 1]]
        if self.noise > 0:
            values = values + self.rng.normal(0.0, self.noise, size=len(values))
        if self.clip is not None:
            values = np.clip(values, self.clip[0], self.clip[1])
        return values

    def answer(self, pairs):
        """Samples as ``(i, j, value)`` rows, the shape ``planner.observe`` takes."""
        pairs = [tuple(map(int, p)) for p in pairs]
        return [(i, j, float(v)) for (i, j), v in zip(pairs, self.sample(pairs))]


class PointsOracle(DistanceMatrixOracle):
    """Points in R^d; Q(i, j) = ||x_i − x_j|| + Gaussian noise."""

    def __init__(self, points, noise: float = 0.0, clip=None, random_state=None):
        X = np.asarray(points, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2:
            raise ValueError(f"points must be an array of shape (n_items, d), got {X.shape}")
        self.points = X
        super().__init__(cdist(X, X), noise=noise, clip=clip, random_state=random_state)


class TripletOracle:
    """A simulated rater answering "is x more similar to p1 or to p2?" from a distance matrix.

    Noise models:
    - ``"flip"``: the true answer, flipped with probability ``noise`` (0 ≤ noise < 0.5);
    - ``"logistic"``: P(p1 wins) = 1 / (1 + exp((d(x,p1) − d(x,p2)) / noise)), so close calls
      are noisier, as people are (``noise`` is the logistic scale, in distance units).
    With ``noise=0`` both answer exactly; ties go to p1.
    """

    def __init__(self, distances, noise: float = 0.0, model: str = "flip", random_state=None):
        self.distances = check_distance_matrix(distances)
        if model not in TRIPLET_NOISE_MODELS:
            raise ValueError(f"model must be one of {TRIPLET_NOISE_MODELS}, not {model!r}")
        if noise < 0 or (model == "flip" and noise >= 0.5):
            raise ValueError("noise must be >= 0 (and < 0.5 for the flip model)")
        self.noise = float(noise)
        self.model = model
        self.rng = check_random_state(random_state)

    @classmethod
    def from_points(cls, points, **kwargs) -> "TripletOracle":
        X = np.asarray(points, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None]
        return cls(cdist(X, X), **kwargs)

    @property
    def n_items(self) -> int:
        return self.distances.shape[0]

    def p1_wins(self, questions) -> np.ndarray:
        """Boolean ndarray of shape (len(questions),): True where p1 is judged closer to x."""
        q = _as_index_array(questions, 3, self.n_items)
        d1 = self.distances[q[:, 0], q[:, 1]]
        d2 = self.distances[q[:, 0], q[:, 2]]
        if self.noise == 0:
            return d1 <= d2
        if self.model == "flip":
            truth = d1 <= d2
            flip = self.rng.random(len(q)) < self.noise
            return truth ^ flip
        z = np.clip((d1 - d2) / self.noise, -700, 700)
        return self.rng.random(len(q)) < 1.0 / (1.0 + np.exp(z))

    def __call__(self, x: int, p1: int, p2: int) -> int:
        """The winner of one triplet question."""
        return int(p1) if self.p1_wins([(x, p1, p2)])[0] else int(p2)

    def answer(self, questions):
        """Answers as ``(x, p1, p2, winner)`` rows, the shape ``forest.observe`` takes."""
        questions = [tuple(map(int, q)) for q in questions]
        wins = self.p1_wins(questions)
        return [(x, p1, p2, p1 if w else p2) for (x, p1, p2), w in zip(questions, wins)]


class TripletDerivedOracle:
    """Distance samples made of triplet answers, as the ANNTri paper's shoe experiment did.

    Q(i, j): draw a uniformly random third item k ∉ {i, j}, ask "is j or k more similar
    to i?"; the sample is 1 if k wins, else 0. Its mean P(k beats j) grows with d(i, j).
    ``triplet`` is any callable ``(x, p1, p2) -> winner`` (a :class:`TripletOracle`, a
    model fitted to human answers, ...).
    """

    def __init__(self, triplet: Callable[[int, int, int], int], n_items: int, random_state=None):
        self.triplet = triplet
        self.n_items = int(n_items)
        if self.n_items < 3:
            raise ValueError("a triplet-derived oracle needs at least 3 items")
        self.rng = check_random_state(random_state)

    def draw_third(self, i: int, j: int) -> int:
        k = int(self.rng.integers(self.n_items - 2))
        lo, hi = sorted((i, j))
        if k >= lo:
            k += 1
        if k >= hi:
            k += 1
        return k

    def sample(self, pairs) -> np.ndarray:
        idx = _as_index_array(pairs, 2, self.n_items)
        thirds = np.array([self.draw_third(int(i), int(j)) for i, j in idx], dtype=np.int64)
        if isinstance(self.triplet, TripletOracle):
            questions = np.column_stack([idx, thirds]) if len(idx) else np.empty((0, 3), np.int64)
            return (~self.triplet.p1_wins(questions)).astype(np.float64)
        return np.array(
            [1.0 if self.triplet(int(i), int(j), int(k)) == k else 0.0 for (i, j), k in zip(idx, thirds)]
        )

    def answer(self, pairs):
        pairs = [tuple(map(int, p)) for p in pairs]
        return [(i, j, float(v)) for (i, j), v in zip(pairs, self.sample(pairs))]
