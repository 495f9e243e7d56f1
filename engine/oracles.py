"""Simulated raters: answer distance, triplet, odd-one-out and rank questions from a known metric.

Tests, benchmarks and budget planning drive the very planners that serve real raters
with these oracles. Conventions: items are ``0..n_items-1``; ``distances`` is an
ndarray of shape (n_items, n_items), symmetric with a zero diagonal; a triplet
question ``(x, p1, p2)`` asks "is x more similar to p1 or to p2?" and is answered
by the winner (p1 or p2). Also data generators (the ANNTri paper's clustered points), a
noise model fitted to human triplets, and :func:`run`, the planner-driving loop that records
error curves. Must never import Flask or Redis.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial.distance import cdist

from .graph import NO_NEIGHBOR, NeighborGraph, Planner  # noqa: F401 (NO_NEIGHBOR re-exported: item without a neighbour)
from .random_triplets import candidate_pairs
from .utils import RandomState, check_random_state, check_triplets

TRIPLET_NOISE_MODELS = ("flip", "logistic", "human")


def _as_index_array(questions: Iterable[Sequence[int]], width: int, n_items: int) -> np.ndarray:
    arr = np.asarray(list(questions), dtype=np.int64)
    if arr.size == 0:
        return np.empty((0, width), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"expected rows of {width} item indices, got shape {arr.shape}")
    if arr.min() < 0 or arr.max() >= n_items:
        raise ValueError(f"item indices must lie in 0..{n_items - 1}")
    return arr


#: The human noise model fitted to the alien-egg crowds (:func:`alien_egg_noise`, a test refits it from
#: the data): the logistic scale in units of the largest distance (a truth scaled to [0, 1]: it transfers
#: as a share of the distance range) and the lapse rate. The one noise setting of every simulation (the
#: simulated crowd, ``proxima plan``, the benchmarks) where a truth has no answers of its own.
HUMAN_SCALE = 0.075
HUMAN_LAPSE = 0.03
#: items from which ``from_points`` oracles compute distances when read (:class:`PointDistances`)
#: instead of holding the n x n matrix (8 bytes per pair: 200 MB at 5,000 items, 20 GB at 50,000)
DENSE_ITEMS = 5000


class PointDistances:
    """The Euclidean distance matrix of ``points`` / ``scale``, computed when read: O(n·d) memory.

    Reads as the matrix does where the oracles and the scores read it: ``D[rows, cols]`` with integer
    arrays that broadcast (or integers), ``D[i]`` (one row), ``shape``, ``len``, ``max()``. Turning
    it into an array (``np.asarray``) builds the dense matrix, refused above ``DENSE_ITEMS``
    items with the size it would take."""

    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, points: ArrayLike, scale: float = 1.0) -> None:
        X = _points(points)
        if X.ndim != 2 or len(X) < 1 or not np.all(np.isfinite(X)):
            raise ValueError(f"points must be a finite array of shape (n_items, d), got shape {X.shape}")
        if not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale}")
        self.points = X / float(scale)
        self.shape = (len(X), len(X))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray | float:
        if not isinstance(key, tuple):
            key = (key, slice(None))
        if len(key) != 2:
            raise IndexError("a distance matrix takes two indices")
        rows, cols = (np.arange(self.shape[0])[k] if isinstance(k, slice) else np.asarray(k, np.int64)
                      for k in key)
        if isinstance(key[0], slice) or isinstance(key[1], slice):  # a block: outer product of the two
            rows, cols = np.atleast_1d(rows)[:, None], np.atleast_1d(cols)[None, :]
            out = self._between(rows, cols)
            return out.reshape(-1) if np.ndim(key[0]) == 0 and not isinstance(key[0], slice) else out
        out = self._between(rows, cols)
        return float(out) if out.ndim == 0 else out

    def _between(self, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        rows, cols = np.broadcast_arrays(rows, cols)
        diff = self.points[rows] - self.points[cols]
        return np.sqrt(np.einsum("...d,...d->...", diff, diff))

    def max(self) -> float:
        """The largest distance (the diameter): over the convex hull's vertices where there is one."""
        return float(diameter(self.points))

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        n = self.shape[0]
        if n > DENSE_ITEMS:
            raise ValueError(f"{n:,} items: the full distance matrix would take {8 * n * n / 2**30:.1f} GiB; "
                             "read the distances you need by index instead")
        return cdist(self.points, self.points).astype(dtype or np.float64)


def diameter(points: ArrayLike) -> float:
    """The largest Euclidean distance between two of ``points`` (n, d), without an n x n array: the
    farthest pair lies on the convex hull, so only its vertices are compared (all points, a block of
    rows at a time, where the hull is degenerate or the dimension too high for one)."""
    X = _points(points)
    cand = X
    if 2 <= X.shape[1] <= 6 and len(X) > X.shape[1] + 1:
        from scipy.spatial import ConvexHull, QhullError

        try:
            cand = X[ConvexHull(X).vertices]
        except QhullError:
            cand = X
    elif X.shape[1] == 1:
        return float(X.max() - X.min())
    top = 0.0
    for start in range(0, len(cand), _POINT_ROWS):
        top = max(top, float(cdist(cand[start:start + _POINT_ROWS], cand).max()))
    return top


def check_distance_matrix(distances: ArrayLike) -> np.ndarray:
    if isinstance(distances, PointDistances):
        return distances  # finite, non-negative and symmetric by construction
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


class _KnownDistances:
    """A simulated rater whose truth is the matrix ``distances`` (set by the subclass)."""

    distances: np.ndarray

    @property
    def n_items(self) -> int:
        return self.distances.shape[0]


class DistanceMatrixOracle(_KnownDistances):
    """Noisy distance samples Q(i, j) = d(i, j) + N(0, noise²) from a known matrix.

    ``clip=(lo, hi)`` clips samples, e.g. to [0, 1] for rating-like answers.
    """

    def __init__(self, distances: ArrayLike, noise: float = 0.0, clip: tuple[float, float] | None = None,
                 random_state: RandomState = None) -> None:
        self.distances = check_distance_matrix(distances)
        if noise < 0:
            raise ValueError("noise must be >= 0")
        self.noise = float(noise)
        self.clip = clip
        self.rng = check_random_state(random_state)

    def sample(self, pairs: Iterable[Sequence[int]]) -> np.ndarray:
        """One noisy sample per (i, j) row of ``pairs``; returns ndarray of shape (len(pairs),)."""
        idx = _as_index_array(pairs, 2, self.n_items)
        values = self.distances[idx[:, 0], idx[:, 1]]
        if self.noise > 0:
            values = values + self.rng.normal(0.0, self.noise, size=len(values))
        if self.clip is not None:
            values = np.clip(values, self.clip[0], self.clip[1])
        return values

    def answer(self, pairs: Iterable[Sequence[int]]) -> list[tuple[int, int, float]]:
        """Samples as ``(i, j, value)`` rows, the shape ``planner.observe`` takes."""
        pairs = [tuple(map(int, p)) for p in pairs]
        return [(i, j, float(v)) for (i, j), v in zip(pairs, self.sample(pairs), strict=False)]


class PointsOracle(DistanceMatrixOracle):
    """Points in R^d; Q(i, j) = ||x_i − x_j|| + Gaussian noise."""

    def __init__(self, points: ArrayLike, noise: float = 0.0, clip: tuple[float, float] | None = None,
                 random_state: RandomState = None) -> None:
        X = np.asarray(points, dtype=np.float64)
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2:
            raise ValueError(f"points must be an array of shape (n_items, d), got {X.shape}")
        self.points = X
        super().__init__(cdist(X, X), noise=noise, clip=clip, random_state=random_state)


def human_agree_probability(gap: ArrayLike, scale: float, lapse: float) -> np.ndarray:
    """The one model of people's triplet answers: P(the answer agrees with the truth) =
    λ/2 + (1 − λ)·σ(gap/s), λ = ``lapse``, s = ``scale``, ``gap`` = d(x, other) − d(x, candidate) (so
    a positive gap means the truth picks the candidate). With s = 0 the logistic part answers
    exactly (a tie agrees). Its log-likelihood: :func:`human_log_likelihood`; fitted by
    :func:`fit_gap_noise` / :func:`fit_human_noise`."""
    gap = np.asarray(gap, dtype=np.float64)
    if scale == 0:
        agree = np.where(gap >= 0, 1.0, 0.0)
    else:
        agree = 1.0 / (1.0 + np.exp(np.clip(-gap / scale, -700, 700)))
    if lapse == 0:
        return agree
    return 0.5 * lapse + (1.0 - lapse) * agree


class TripletOracle(_KnownDistances):
    """A simulated rater answering "is x more similar to p1 or to p2?" from a distance matrix.

    Noise models:
    - ``"flip"``: the true answer, flipped with probability ``noise`` (0 ≤ noise < 0.5);
    - ``"logistic"``: P(p1 wins) = 1 / (1 + exp((d(x,p1) − d(x,p2)) / noise)), so close calls
      are noisier, as people are (``noise`` is the logistic scale, in distance units).
    - ``"human"``: the logistic plus a lapse rate λ = ``lapse``: P(p1 wins) =
      λ/2 + (1 − λ) / (1 + exp((d(x,p1) − d(x,p2)) / noise)) — people answer at random about
      one time in ten (λ and the scale fitted to real crowds by :func:`fit_human_noise`).
    With ``noise=0`` the logistic part answers exactly (ties go to p1); ``lapse`` only applies to
    the human model.
    """

    def __init__(self, distances: ArrayLike, noise: float = 0.0, model: str = "flip",
                 random_state: RandomState = None, lapse: float = 0.0) -> None:
        self.distances = check_distance_matrix(distances)
        if model not in TRIPLET_NOISE_MODELS:
            raise ValueError(f"model must be one of {TRIPLET_NOISE_MODELS}, not {model!r}")
        if noise < 0 or (model == "flip" and noise >= 0.5):
            raise ValueError("noise must be >= 0 (and < 0.5 for the flip model)")
        if not 0.0 <= lapse <= 1.0:
            raise ValueError(f"lapse must lie in [0, 1], got {lapse}")
        if lapse > 0 and model != "human":
            raise ValueError("a lapse rate needs model='human'")
        self.noise = float(noise)
        self.lapse = float(lapse)
        self.model = model
        self.rng = check_random_state(random_state)

    @classmethod
    def from_points(cls, points: ArrayLike, **kwargs: Any) -> TripletOracle:
        return cls(point_distances(points), **kwargs)

    def p1_wins(self, questions: Iterable[Sequence[int]]) -> np.ndarray:
        """Boolean ndarray of shape (len(questions),): True where p1 is judged closer to x."""
        q = _as_index_array(questions, 3, self.n_items)
        d1 = self.distances[q[:, 0], q[:, 1]]
        d2 = self.distances[q[:, 0], q[:, 2]]
        if self.model == "human":
            return self.rng.random(len(q)) < human_agree_probability(d2 - d1, self.noise, self.lapse)
        if self.noise == 0:
            return d1 <= d2
        if self.model == "flip":
            truth = d1 <= d2
            flip = self.rng.random(len(q)) < self.noise
            return truth ^ flip
        return self.rng.random(len(q)) < human_agree_probability(d2 - d1, self.noise, 0.0)

    def __call__(self, x: int, p1: int, p2: int) -> int:
        """The winner of one triplet question."""
        return int(p1) if self.p1_wins([(x, p1, p2)])[0] else int(p2)

    def answer(self, questions: Iterable[Sequence[int]]) -> list[tuple[int, int, int, int]]:
        """Answers as ``(x, p1, p2, winner)`` rows, the shape ``forest.observe`` takes."""
        questions = [tuple(map(int, q)) for q in questions]
        wins = self.p1_wins(questions)
        return [(x, p1, p2, p1 if w else p2) for (x, p1, p2), w in zip(questions, wins, strict=False)]


def _softmax_choice(rng: np.random.Generator, logits: np.ndarray, allowed: np.ndarray, scale: float,
                    lapse: float) -> np.ndarray:
    """Per row, the index chosen among the ``allowed`` columns: with probability ``lapse`` a uniform
    pick, otherwise a softmax over ``logits / scale`` (by the Gumbel-max trick: the largest of
    logits / scale + Gumbel noise); with ``scale == 0`` the largest logit (ties to the first)."""
    m, w = logits.shape
    if scale == 0:
        score = np.where(allowed, logits, -np.inf)
    else:
        score = np.where(allowed, logits / scale + rng.gumbel(size=(m, w)), -np.inf)
    pick = np.argmax(score, axis=1)
    if lapse > 0:
        uniform = np.argmax(np.where(allowed, rng.random((m, w)), -1.0), axis=1)
        pick = np.where(rng.random(m) < lapse, uniform, pick)
    return pick


def _check_scale_lapse(scale: float, lapse: float) -> tuple[float, float]:
    if not np.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be a finite number >= 0, got {scale}")
    if not 0.0 <= lapse <= 1.0:
        raise ValueError(f"lapse must lie in [0, 1], got {lapse}")
    return float(scale), float(lapse)


class OddOneOutOracle(_KnownDistances):
    """A simulated rater answering odd-one-out screens ``(a, b, c)`` ("which is least like the other
    two?") from a distance matrix.

    The model (the human triplet model of :func:`human_agree_probability` on three pairs): with
    probability ``lapse`` λ the rater picks one of the three at random; otherwise it picks the pair
    that belongs together by a softmax over the three pairs' distances,
    P(pair {x, y}) = exp(−d(x, y)/s) / Σ_pairs exp(−d/s), s = ``scale`` (equivalently: the pair of
    smallest distance after adding Gumbel noise of scale s to each, i.e. noisy distances), and the
    odd one is the item not in that pair. With two options the softmax is the logistic σ(gap/s) of
    :class:`TripletOracle`'s "human" model, so s and λ fitted to people's triplets
    (:func:`fit_human_noise`) carry over (:meth:`from_noise`); that a lapse picks uniformly among
    three here is the model's assumption. ``scale=0`` answers exactly (ties to the first pair of
    (b, c), (a, c), (a, b), i.e. the first item shown is the odd one).

    ``answer(screens)`` gives rows ``(a, b, c, odd)``, the shape ``OddOneOutScreens.observe`` takes.
    """

    def __init__(self, distances: ArrayLike, scale: float = 0.0, lapse: float = 0.0,
                 random_state: RandomState = None) -> None:
        self.distances = check_distance_matrix(distances)
        self.scale, self.lapse = _check_scale_lapse(scale, lapse)
        self.rng = check_random_state(random_state)

    @classmethod
    def from_points(cls, points: ArrayLike, **kwargs: Any) -> OddOneOutOracle:
        return cls(point_distances(points), **kwargs)

    @classmethod
    def from_noise(cls, noise: HumanNoise, distances: ArrayLike, unit: str = "range",
                   random_state: RandomState = None) -> OddOneOutOracle:
        """A rater answering like the people ``noise`` was fitted to, on ``distances`` (s transferred
        by :meth:`HumanNoise.scale_for`)."""
        return cls(distances, scale=noise.scale_for(distances, unit), lapse=noise.lapse, random_state=random_state)

    def odd_ones(self, screens: Iterable[Sequence[int]]) -> np.ndarray:
        """The odd one of each screen ``(a, b, c)``, shape (len(screens),)."""
        q = _as_index_array(screens, 3, self.n_items)
        if len(q) == 0:
            return np.empty(0, np.int64)
        if np.any((q[:, 0] == q[:, 1]) | (q[:, 0] == q[:, 2]) | (q[:, 1] == q[:, 2])):
            raise ValueError("an odd-one-out screen shows three different items")
        D = self.distances
        # column t: the pair leaving item t out (t is then the odd one)
        pair = np.column_stack([D[q[:, 1], q[:, 2]], D[q[:, 0], q[:, 2]], D[q[:, 0], q[:, 1]]])
        col = _softmax_choice(self.rng, -pair, np.ones_like(pair, bool), self.scale, self.lapse)
        return q[np.arange(len(q)), col]

    def answer(self, screens: Iterable[Sequence[int]]) -> list[tuple[int, int, int, int]]:
        screens = [tuple(map(int, s)) for s in screens]
        odd = self.odd_ones(screens)
        return [(a, b, c, int(o)) for (a, b, c), o in zip(screens, odd, strict=True)]


class RankOracle(_KnownDistances):
    """A simulated rater answering rank screens ``(head, (r1, ..., rn))`` ("pick the ``n_select``
    references most like the head, most alike first") from a distance matrix.

    The model: sequential choice. Each pick is, with probability ``lapse`` λ, a uniform pick among
    the references not yet picked; otherwise a softmax over their distances to the head,
    P(r) = exp(−d(head, r)/s) / Σ_remaining exp(−d/s), s = ``scale`` (a Plackett–Luce ranking of
    noisy distances). For two references this is exactly :class:`TripletOracle`'s "human" model, so
    s and λ fitted to people's triplets (:func:`fit_human_noise`) carry over (:meth:`from_noise`);
    that λ applies per pick is the model's assumption. ``scale=0`` ranks exactly (ties to the
    reference shown first).

    ``answer(screens)`` gives rows ``(head, (r1, ..., rn), (s1, ..., sk))``, the shape
    ``RankScreens.observe`` takes.
    """

    def __init__(self, distances: ArrayLike, scale: float = 0.0, lapse: float = 0.0, n_select: int = 2,
                 random_state: RandomState = None) -> None:
        self.distances = check_distance_matrix(distances)
        self.scale, self.lapse = _check_scale_lapse(scale, lapse)
        if isinstance(n_select, bool) or not isinstance(n_select, (int, np.integer)) or n_select < 1:
            raise ValueError(f"n_select must be a positive integer, got {n_select!r}")
        self.n_select = int(n_select)
        self.rng = check_random_state(random_state)

    @classmethod
    def from_points(cls, points: ArrayLike, **kwargs: Any) -> RankOracle:
        return cls(point_distances(points), **kwargs)

    @classmethod
    def from_noise(cls, noise: HumanNoise, distances: ArrayLike, n_select: int = 2, unit: str = "range",
                   random_state: RandomState = None) -> RankOracle:
        """A rater answering like the people ``noise`` was fitted to, on ``distances``."""
        return cls(distances, scale=noise.scale_for(distances, unit), lapse=noise.lapse, n_select=n_select,
                   random_state=random_state)

    def picks(self, heads: ArrayLike, references: ArrayLike) -> np.ndarray:
        """The picks (most alike first) of screens with the same number of references: ``heads``
        shape (m,), ``references`` shape (m, n); returns shape (m, n_select)."""
        h = np.asarray(heads, np.int64).reshape(-1)
        R = np.asarray(references, np.int64).reshape(len(h), -1)
        if len(h) == 0:
            return np.empty((0, self.n_select), np.int64)
        if R.min() < 0 or R.max() >= self.n_items or h.min() < 0 or h.max() >= self.n_items:
            raise ValueError(f"item indices must lie in 0..{self.n_items - 1}")
        if self.n_select >= R.shape[1]:
            raise ValueError(f"a screen of {R.shape[1]} references cannot take {self.n_select} picks")
        logits = -self.distances[h[:, None], R]
        left = np.ones(R.shape, bool)
        out = np.empty((len(h), self.n_select), np.int64)
        rows = np.arange(len(h))
        for t in range(self.n_select):
            col = _softmax_choice(self.rng, logits, left, self.scale, self.lapse)
            out[:, t] = R[rows, col]
            left[rows, col] = False
        return out

    def answer(self, screens: Iterable[Sequence[Any]]) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
        screens = [(int(h), tuple(int(r) for r in refs)) for h, refs in screens]
        out: list = [None] * len(screens)
        by_width: dict[int, list[int]] = {}
        for i, (_, refs) in enumerate(screens):
            by_width.setdefault(len(refs), []).append(i)
        for idx in by_width.values():
            P = self.picks([screens[i][0] for i in idx], [screens[i][1] for i in idx])
            for i, p in zip(idx, P.tolist(), strict=True):
                out[i] = (screens[i][0], screens[i][1], tuple(p))
        return out


class TripletDerivedOracle:
    """Distance samples made of triplet answers, as the ANNTri paper's shoe experiment did.

    Q(i, j): draw a uniformly random third item k ∉ {i, j}, ask "is j or k more similar
    to i?"; the sample is 1 if k wins, else 0. Its mean P(k beats j) grows with d(i, j).
    ``triplet`` is any callable ``(x, p1, p2) -> winner`` (a :class:`TripletOracle`, a
    model fitted to human answers, ...).
    """

    def __init__(self, triplet: Callable[[int, int, int], int], n_items: int,
                 random_state: RandomState = None) -> None:
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

    def draw_thirds(self, pairs: ArrayLike) -> np.ndarray:
        """One uniformly random third item per ``(i, j)`` row, vectorised."""
        idx = np.asarray(pairs, dtype=np.int64).reshape(-1, 2)
        k = self.rng.integers(self.n_items - 2, size=len(idx))
        lo, hi = idx.min(axis=1), idx.max(axis=1)
        k += k >= lo
        k += k >= hi
        return k

    def sample(self, pairs: Iterable[Sequence[int]]) -> np.ndarray:
        idx = _as_index_array(pairs, 2, self.n_items)
        thirds = self.draw_thirds(idx)
        if isinstance(self.triplet, TripletOracle):
            questions = np.column_stack([idx, thirds]) if len(idx) else np.empty((0, 3), np.int64)
            return (~self.triplet.p1_wins(questions)).astype(np.float64)
        return np.array(
            [1.0 if self.triplet(int(i), int(j), int(k)) == k else 0.0 for (i, j), k in zip(idx, thirds, strict=False)]
        )

    def answer(self, pairs: Iterable[Sequence[int]]) -> list[tuple[int, int, float]]:
        pairs = [tuple(map(int, p)) for p in pairs]
        return [(i, j, float(v)) for (i, j), v in zip(pairs, self.sample(pairs), strict=False)]


# ---------------------------------------------------------------------------- data sets
class RecordedTriplets:
    """Questions answered from a table holding one recorded answer per triplet.

    This is how a study is judged on real crowd data collected exhaustively (one person's answer
    per triplet): asking the same question again gets the same answer, so a learner that repeats
    questions learns nothing new. The truth is the table's own: item i's nearest neighbour is
    the j that loses the smallest share of the recorded triplets (i; j, ·) (:meth:`loss_share`).

    ``closer[h, a, b]`` (bool, shape (n, n, n)) is True where the answer to "is h more like a or
    b?" was a; only entries with a < b are read (the table is mirrored on construction).
    """

    def __init__(self, closer: ArrayLike) -> None:
        c = np.asarray(closer, dtype=bool)
        if c.ndim != 3 or c.shape[0] != c.shape[1] or c.shape[1] != c.shape[2] or c.shape[0] < 3:
            raise ValueError(f"closer must be an (n, n, n) boolean table with n >= 3, got shape {c.shape}")
        n = c.shape[0]
        upper = np.triu(np.ones((n, n), bool), 1)
        self.closer = np.where(upper[None, :, :], c, ~np.swapaxes(c, 1, 2))

    @classmethod
    def record(cls, oracle: TripletOracle) -> RecordedTriplets:
        """Ask ``oracle`` every triplet (h; a, b), a < b, exactly once."""
        n = oracle.n_items
        closer = np.zeros((n, n, n), bool)
        a, b = np.triu_indices(n, 1)
        for h in range(n):
            keep = (a != h) & (b != h)
            q = np.column_stack([np.full(int(keep.sum()), h), a[keep], b[keep]])
            closer[h, a[keep], b[keep]] = oracle.p1_wins(q)
        return cls(closer)

    @property
    def n_items(self) -> int:
        return self.closer.shape[0]

    def loss_share(self) -> np.ndarray:
        """L[i, j] = share of the triplets (i; j, k), k ∉ {i, j}, recorded as k closer; inf on the
        diagonal. Usable wherever a distance matrix is expected (row-wise: smaller is nearer)."""
        n = self.n_items
        wins = self.closer.sum(axis=2).astype(np.float64)  # (h, j): triplets j won, k over all items
        idx = np.arange(n)
        wins -= self.closer[idx, :, idx]  # k = h is not a triplet ...
        wins -= self.closer[:, idx, idx]  # ... nor k = j (the table's diagonal)
        L = 1.0 - wins / (n - 2)
        np.fill_diagonal(L, np.inf)
        return L

    def p1_wins(self, questions: Iterable[Sequence[int]]) -> np.ndarray:
        q = check_triplets(questions, self.n_items, "triplet question")
        return self.closer[q[:, 0], q[:, 1], q[:, 2]]

    def answer(self, questions: Iterable[Sequence[int]]) -> list[tuple[int, int, int, int]]:
        """Answers as ``(x, p1, p2, winner)`` rows."""
        questions = [tuple(map(int, q)) for q in questions]
        wins = self.p1_wins(questions)
        return [(x, p1, p2, p1 if w else p2) for (x, p1, p2), w in zip(questions, wins, strict=True)]


def circle_clusters(n_clusters: int = 10, cluster_size: int = 10, gap: float = 0.1,
                    random_state: RandomState = None, diameter: float = 1.0,
                    radial: str = "uniform") -> tuple[np.ndarray, np.ndarray]:
    """The ANNTri paper's Fig. 2 data: clusters of points spread around a circle in R².

    Each cluster is a disc of diameter ``diameter``; neighbouring discs are ``gap`` (a share
    of the diameter, 0.1 = 10%) apart at their closest. ``radial="uniform"`` spreads points
    uniformly over each disc; ``"linear"`` draws the distance to the centre uniformly
    (points crowd towards the centre), as the paper's published experiment code does.
    Returns ``(points, labels)`` of shapes (n_clusters·cluster_size, 2) and
    (n_clusters·cluster_size,).
    """
    if n_clusters < 2 or cluster_size < 2:
        raise ValueError("need at least 2 clusters of at least 2 points")
    if radial not in ("uniform", "linear"):
        raise ValueError(f"radial must be 'uniform' or 'linear', not {radial!r}")
    rng = check_random_state(random_state)
    spacing = diameter * (1.0 + gap)  # centre-to-centre distance of neighbouring discs
    radius = spacing / (2.0 * np.sin(np.pi / n_clusters))
    angles = 2.0 * np.pi * np.arange(n_clusters) / n_clusters
    centres = radius * np.column_stack([np.cos(angles), np.sin(angles)])
    u = rng.random((n_clusters, cluster_size))
    r = 0.5 * diameter * (np.sqrt(u) if radial == "uniform" else u)
    theta = 2.0 * np.pi * rng.random((n_clusters, cluster_size))
    offsets = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=-1)
    points = (centres[:, None, :] + offsets).reshape(-1, 2)
    labels = np.repeat(np.arange(n_clusters), cluster_size)
    return points, labels


def hierarchical_clusters(n_items: int, cluster_size: int | None = None, dim: int = 2,
                          shrink: float = 0.3, random_state: RandomState = None) -> tuple[np.ndarray, np.ndarray]:
    """Clusters of ~log2(n) points split recursively along a binary tree (the paper's Thm 4.6).

    A point's position is the sum over tree levels l of ``shrink**l`` times a random unit
    direction of its level-l node, signed by the branch taken, plus jitter of radius
    ``shrink**depth / 2`` inside its leaf cluster; at every level the two sub-clusters are
    farther apart than their own diameters. Scaled to diameter ≈ 1. Returns
    ``(points, leaf_labels)``.
    """
    rng = check_random_state(random_state)
    if cluster_size is None:
        cluster_size = max(2, int(np.ceil(np.log2(n_items))))
    n_leaves = int(np.ceil(n_items / cluster_size))
    depth = max(1, int(np.ceil(np.log2(n_leaves))))
    leaf = np.arange(n_items) % n_leaves
    points = np.zeros((n_items, dim))
    for level in range(depth):
        prefix = leaf >> (depth - level)  # the node each item passes at this level
        bit = (leaf >> (depth - level - 1)) & 1
        dirs = rng.normal(size=(int(prefix.max()) + 1, dim))
        dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
        points += (shrink**level) * np.where(bit[:, None] == 1, 1.0, -1.0) * dirs[prefix]
    jitter = rng.normal(size=(n_items, dim))
    jitter /= np.linalg.norm(jitter, axis=1, keepdims=True)
    jitter *= (0.5 * shrink**depth) * rng.random((n_items, 1)) ** (1.0 / dim)
    points += jitter
    points /= 2.0 * (1.0 + shrink / (1.0 - shrink))
    return points, leaf


# ---------------------------------------------------------------------------- human noise
def fit_logistic_noise(distances: ArrayLike, triplets: Iterable[Sequence[int]]) -> float:
    """Maximum-likelihood logistic scale for triplet answers (``TripletOracle(model="logistic")``).

    ``triplets`` rows ``(i, j, k)`` mean "i is closer to j than to k" as answered by people;
    the model says P(j wins) = 1 / (1 + exp((d(i, j) − d(i, k)) / scale)).
    """
    from scipy.optimize import minimize_scalar

    D = check_distance_matrix(distances)
    t = _as_index_array(triplets, 3, D.shape[0])
    if len(t) == 0:
        raise ValueError("need at least one triplet to fit a noise model")
    diff = D[t[:, 0], t[:, 1]] - D[t[:, 0], t[:, 2]]

    def nll(log_scale):
        z = diff / np.exp(log_scale)
        return float(np.sum(np.logaddexp(0.0, z)))

    span = max(float(np.abs(diff).max()), 1e-12)
    res = minimize_scalar(nll, bounds=(np.log(span) - 12, np.log(span) + 4), method="bounded")
    return float(np.exp(res.x))


@dataclass(frozen=True)
class HumanNoise:
    """A human noise model fitted by :func:`fit_human_noise`.

    P(answer agrees with the truth) = λ/2 + (1 − λ)·σ(gap/s), gap = d(x, loser) − d(x, winner).
    ``scale`` s in the fitted matrix's distance units; ``lapse`` λ; ``log_likelihood`` of the
    answers under the fit and ``logistic_log_likelihood`` under the best plain logistic (λ = 0);
    ``agreement`` the share of answers agreeing with the truth (ties count one half);
    ``median_gap`` the median |d(x,a) − d(x,b)| over random triplets of the fitted matrix (the
    unit :meth:`oracle` can transfer s in); ``n_answers`` how many answers were fitted.
    """

    scale: float
    lapse: float
    log_likelihood: float
    logistic_log_likelihood: float
    agreement: float
    median_gap: float
    n_answers: int

    @property
    def lapse_gain(self) -> float:
        """Log-likelihood the lapse term buys over a plain logistic."""
        return self.log_likelihood - self.logistic_log_likelihood

    def scale_for(self, distances: ArrayLike, unit: str = "range") -> float:
        """s transferred to another distance matrix.

        ``unit="range"``: s is kept as a share of the largest distance (the fitted matrix's
        largest distance is the unit, e.g. alien eggs scaled to [0, 1]); ``"median_gap"``: s is
        kept as a multiple of the median distance gap of random triplets, so the share of close
        calls stays the same whatever the spread of the new data.
        """
        D = check_distance_matrix(distances)
        if unit == "range":
            return self.scale / self.fitted_range * float(D.max())
        if unit == "median_gap":
            return self.scale / self.median_gap * median_triplet_gap(D)
        raise ValueError(f"unit must be 'range' or 'median_gap', not {unit!r}")

    #: the largest distance of the fitted matrix (1 for matrices scaled to [0, 1])
    fitted_range: float = 1.0

    def oracle(self, distances: ArrayLike, unit: str = "range", random_state: RandomState = None) -> TripletOracle:
        """A :class:`TripletOracle` answering like these people on another data set."""
        return TripletOracle(distances, noise=self.scale_for(distances, unit), model="human",
                             lapse=self.lapse, random_state=random_state)

    def odd_one_out_oracle(self, distances: ArrayLike, unit: str = "range",
                           random_state: RandomState = None) -> OddOneOutOracle:
        """An :class:`OddOneOutOracle` answering like these people on another data set."""
        return OddOneOutOracle.from_noise(self, distances, unit=unit, random_state=random_state)

    def rank_oracle(self, distances: ArrayLike, n_select: int = 2, unit: str = "range",
                    random_state: RandomState = None) -> RankOracle:
        """A :class:`RankOracle` answering like these people on another data set."""
        return RankOracle.from_noise(self, distances, n_select=n_select, unit=unit, random_state=random_state)


def random_triplet_questions(n_items: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` uniformly random questions ``(x, a, b)`` of three distinct items, shape (m, 3)."""
    x = rng.integers(n_items, size=m)
    a, b = candidate_pairs(rng, n_items, x, m)
    return np.column_stack([x, a, b])


def median_triplet_gap(distances: ArrayLike, n_samples: int = 100_000) -> float:
    """Median |d(x,a) − d(x,b)| over random distinct triplets (a fixed seed: a property of D)."""
    D = check_distance_matrix(distances)
    x, a, b = random_triplet_questions(D.shape[0], n_samples, np.random.default_rng(0)).T
    return float(np.median(np.abs(D[x, a] - D[x, b])))


def human_log_likelihood(gap: np.ndarray, scale: float, lapse: float) -> float:
    """Log-likelihood of answers whose truth gaps are ``gap`` (d(i, k) − d(i, j) of an answered
    triplet (i, j, k)) under :func:`human_agree_probability` with scale > 0."""
    # log(λ/2 + (1 − λ)σ(z)) computed in log space so confident wrong answers stay finite
    log_sig = -np.logaddexp(0.0, -gap / scale)
    if lapse <= 0:
        return float(log_sig.sum())
    return float(np.logaddexp(np.log(lapse / 2.0), np.log1p(-lapse) + log_sig).sum())


def fit_gap_noise(gaps: ArrayLike, starts: Sequence[float] | None = None, bounds_around: float | None = None
                  ) -> tuple[float, float, float]:
    """Maximum-likelihood (scale, lapse, log-likelihood) of :func:`human_agree_probability` for answers
    whose truth gaps are ``gaps``: L-BFGS over (log s, logit λ) from λ in (0.02, 0.1, 0.3) and each scale
    of ``starts`` (default: the median |gap| and a quarter of it). log s is kept within −12 and +6 of
    log ``bounds_around`` (default: the start's own scale)."""
    from scipy.optimize import minimize

    gap = np.asarray(gaps, dtype=np.float64)
    if starts is None:
        span = max(float(np.median(np.abs(gap))), 1e-12)
        starts, bounds_around = (span, span / 4.0), span if bounds_around is None else bounds_around

    def nll(theta):
        lapse = 1.0 / (1.0 + np.exp(-theta[1]))
        return -human_log_likelihood(gap, float(np.exp(theta[0])), lapse)

    best = None
    for lapse0 in (0.02, 0.1, 0.3):
        for s0 in starts:
            around = s0 if bounds_around is None else bounds_around
            res = minimize(nll, [np.log(s0), np.log(lapse0 / (1 - lapse0))], method="L-BFGS-B",
                           bounds=[(np.log(around) - 12, np.log(around) + 6), (-20, 10)])
            if best is None or res.fun < best.fun:
                best = res
    return float(np.exp(best.x[0])), float(1.0 / (1.0 + np.exp(-best.x[1]))), -float(best.fun)


def fit_human_noise(distances: ArrayLike, triplets: Iterable[Sequence[int]]) -> HumanNoise:
    """Maximum-likelihood scale and lapse rate of people's triplet answers against the truth.

    ``triplets`` rows ``(i, j, k)``: a person judged i closer to j than to k; ``distances`` the
    ground truth. Fits P(agree) = λ/2 + (1 − λ)·σ(gap/s), gap = d(i, k) − d(i, j), over
    (log s, logit λ) by L-BFGS from several starts, and the plain logistic (λ = 0) beside it.
    """
    D = check_distance_matrix(distances)
    t = _as_index_array(triplets, 3, D.shape[0])
    if len(t) == 0:
        raise ValueError("need at least one triplet to fit a noise model")
    gap = D[t[:, 0], t[:, 2]] - D[t[:, 0], t[:, 1]]
    scale0 = fit_logistic_noise(D, t)
    logistic_ll = human_log_likelihood(gap, scale0, 0.0)
    scale, lapse, log_lik = fit_gap_noise(gap, starts=(scale0, scale0 / 4.0))
    if log_lik < logistic_ll:  # the optimiser stopped short of the λ = 0 boundary
        scale, lapse, log_lik = scale0, 0.0, logistic_ll
    agreement = float(np.mean(np.where(gap > 0, 1.0, np.where(gap == 0, 0.5, 0.0))))
    return HumanNoise(scale, lapse, log_lik, logistic_ll, agreement, median_triplet_gap(D),
                      len(t), float(D.max()))


def alien_egg_noise(data_dir: str | os.PathLike | None = None) -> HumanNoise:
    """:func:`fit_human_noise` on the NEXT alien-egg crowds (distances scaled to [0, 1])."""
    from .datasets import load_alien_eggs

    eggs = load_alien_eggs(data_dir)
    return fit_human_noise(eggs.distances, eggs.triplets)


# ---------------------------------------------------------------------------- nearest-neighbour error
#: A chosen neighbour within TIE_TOLERANCE·max(d, 1) of the true k-th nearest distance d is right (ties).
TIE_TOLERANCE = 1e-9
#: Rows of the distance matrix computed at once from points (memory: this many rows of n_items).
_POINT_ROWS = 256


def point_distances(points: ArrayLike, scale: float = 1.0) -> np.ndarray | PointDistances:
    """The distance matrix of ``points`` / ``scale``: dense up to ``DENSE_ITEMS`` items, else read on
    demand (:class:`PointDistances`)."""
    X = _points(points)
    if len(X) > DENSE_ITEMS:
        return PointDistances(X, scale)
    return cdist(X, X) / float(scale) if scale != 1.0 else cdist(X, X)


def _points(points) -> np.ndarray:
    X = np.asarray(points, dtype=np.float64)
    return X[:, None] if X.ndim == 1 else X


def true_kth_distances(distances: ArrayLike | None = None, *, points: ArrayLike | None = None,
                       rank: int = 1) -> np.ndarray:
    """Each item's distance to its true ``rank``-th nearest other item: ndarray of shape (n_items,).

    The truth is ``distances`` (shape (n_items, n_items)) or ``points`` (shape (n_items, d), Euclidean
    distances, computed a few rows at a time so that memory stays linear in n_items). ``rank`` is at
    most n_items − 1.
    """
    if (distances is None) == (points is None):
        raise ValueError("give the truth as either distances or points")
    if distances is not None:
        D = np.array(distances, dtype=np.float64)
        r = max(1, min(int(rank), len(D) - 1))
        np.fill_diagonal(D, np.inf)
        return np.partition(D, r - 1, axis=1)[:, r - 1]
    X = _points(points)
    n = len(X)
    r = max(1, min(int(rank), n - 1))
    out = np.empty(n)
    for start in range(0, n, _POINT_ROWS):
        block = X[start:start + _POINT_ROWS]
        d = np.sqrt(((block[:, None, :] - X[None, :, :]) ** 2).sum(axis=-1))
        d[np.arange(len(block)), np.arange(start, start + len(block))] = np.inf
        out[start:start + len(block)] = np.partition(d, r - 1, axis=1)[:, r - 1]
    return out


def neighbor_wrong(neighbors: ArrayLike, distances: ArrayLike | None = None, tol: float = TIE_TOLERANCE, *,
                   points: ArrayLike | None = None, rank: int | None = None,
                   kth: ArrayLike | None = None) -> np.ndarray:
    """Which items' chosen neighbours are not among their true nearest: bool ndarray of shape (n_items,).

    ``neighbors``: int array of shape (n_items,) or (n_items, k), ``NO_NEIGHBOR`` (-1) where an item
    has none yet (wrong). Row i is right when every chosen neighbour is another item at most as far
    from i as i's true ``rank``-th nearest one (default rank: k, a true k-NN set), ties within
    ``tol``·max(that distance, 1) counting as right. The truth is ``distances`` or ``points`` (as in
    :func:`true_kth_distances`); ``kth``, if given, is :func:`true_kth_distances` of that truth
    computed beforehand (with ``points`` the check then takes time linear in n_items).
    """
    nb = np.asarray(neighbors, dtype=np.int64)
    if nb.ndim == 1:
        nb = nb[:, None]
    n = nb.shape[0]
    if kth is None:
        kth = true_kth_distances(distances, points=points, rank=nb.shape[1] if rank is None else rank)
    kth = np.asarray(kth, dtype=np.float64)
    missing = (nb < 0) | (nb == np.arange(n)[:, None])
    safe = np.where(missing, 0, nb)
    if distances is not None:
        chosen = np.take_along_axis(np.asarray(distances, dtype=np.float64), safe, axis=1)
    else:
        X = _points(points)
        chosen = np.sqrt(((X[:, None, :] - X[safe]) ** 2).sum(axis=-1))
    too_far = chosen > (kth + tol * np.maximum(kth, 1.0))[:, None]
    return np.any(missing | too_far, axis=1)


def neighbor_error(neighbors: ArrayLike, distances: ArrayLike | None = None, tol: float = TIE_TOLERANCE, *,
                   points: ArrayLike | None = None, rank: int | None = None, kth: ArrayLike | None = None) -> float:
    """Share of items whose chosen neighbours are not a true nearest set: the mean of :func:`neighbor_wrong`
    (same arguments); 0 for no items."""
    wrong = neighbor_wrong(neighbors, distances, tol, points=points, rank=rank, kth=kth)
    return float(wrong.mean()) if len(wrong) else 0.0


# ---------------------------------------------------------------------------- driver
class Rater(Protocol):
    """A simulated rater as :func:`run` uses it (every oracle here): answers a batch of questions
    with the rows ``planner.observe`` takes."""

    def answer(self, questions: list[tuple[int, ...]]) -> list[tuple]: ...


class NeighborPlanner(Planner, Protocol):
    """A :class:`engine.graph.Planner` that tells its current nearest neighbours at any time and
    its :class:`engine.graph.NeighborGraph` at the end (ANNTri and its baselines): what :func:`run` drives."""

    def current_neighbors(self) -> np.ndarray: ...

    def result(self) -> NeighborGraph: ...


def timed_step(planner: Planner, answer: Callable[[list[tuple[int, ...]]], list[tuple]],
               budget: int) -> tuple[int, float]:
    """One turn of the planner-driving loop: ``next_questions(budget)``, ``answer`` them (a simulated
    rater), ``observe`` the answers. Returns (questions asked, CPU seconds spent inside the planner,
    process time, so the rater and other programs sharing the machine do not count); asks nothing
    more once the planner returns no question."""
    clock = time.process_time
    t0 = clock()
    questions = planner.next_questions(budget)
    seconds = clock() - t0
    if not questions:
        return 0, seconds
    answers = answer(questions)
    t0 = clock()
    planner.observe(answers)
    return len(questions), seconds + (clock() - t0)


@dataclass
class RunResult:
    """What :func:`run` records. ``queries`` and ``error`` have one entry per checkpoint."""

    queries: np.ndarray
    error: np.ndarray
    total_queries: int
    finished: bool
    engine_seconds: float
    graph: object

    @property
    def queries_per_item(self) -> np.ndarray:
        return self.queries / self.graph.neighbors.shape[0]

    def queries_to_reach(self, error: float) -> float:
        """First checkpoint with error <= ``error`` (NaN if never reached)."""
        hit = np.flatnonzero(self.error <= error + 1e-12)
        return float(self.queries[hit[0]]) if len(hit) else float("nan")


def run(planner: NeighborPlanner, oracle: Rater, budget: int, batch: int | None = None,
        distances: ArrayLike | None = None, checkpoint_growth: float = 1.05) -> RunResult:
    """Drive ``planner`` with ``oracle`` for at most ``budget`` answers; record the error curve.

    Loops ``next_questions(batch)`` → ``oracle.answer`` → ``observe`` until the planner has
    nothing to ask or the budget is spent. The error (:func:`neighbor_error` of
    ``planner.current_neighbors()`` against ``distances``, default ``oracle.distances``) is
    recorded at 0 answers, then whenever the answer count has grown by ``checkpoint_growth``
    (and at least by one question per item), and at the end. ``engine_seconds`` is the CPU
    time spent inside the planner only (process time, so other programs sharing the machine
    do not inflate it). ``batch`` defaults to n_items (a whole SETri layer).
    """
    n = planner.n_items
    D = oracle.distances if distances is None else distances
    batch = n if batch is None else int(batch)
    queries, errors = [], []
    engine = 0.0
    total = 0

    clock = time.process_time

    def record():
        nonlocal engine
        t0 = clock()
        nb = planner.current_neighbors()
        engine += clock() - t0
        queries.append(total)
        errors.append(neighbor_error(nb, D))

    record()
    next_mark = n
    while total < budget:
        asked, seconds = timed_step(planner, oracle.answer, min(batch, budget - total))
        engine += seconds
        if not asked:
            break
        total += asked
        if total >= next_mark:
            record()
            next_mark = max(total * checkpoint_growth, total + n)
    if not queries or queries[-1] != total:
        record()
    t0 = clock()
    graph = planner.result()
    engine += clock() - t0
    return RunResult(np.asarray(queries, dtype=np.int64), np.asarray(errors), total,
                     bool(planner.progress()["done"]), engine, graph)
