"""Simulated raters: answer distance, same-or-different, triplet, odd-one-out and rank questions from a known
metric.

Tests, benchmarks and budget planning drive the very planners that serve real raters
with these oracles. Conventions: items are ``0..n_items-1``; ``distances`` is an
ndarray of shape (n_items, n_items), symmetric with a zero diagonal; a triplet
question ``(x, p1, p2)`` asks "is x more similar to p1 or to p2?" and is answered
by the winner (p1 or p2). Also data generators (the ANNTri paper's clustered points), the
human noise model's setting (fitted to people by :mod:`simulation.noise`), and :func:`run`, the
planner-driving loop that records error curves. Imports the engine, never Flask, Redis, RQ,
``workers`` or ``webapp``.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from numpy.typing import ArrayLike
from scipy.spatial.distance import cdist

from engine.graph import NeighborGraph, Planner
from engine.random_triplets import candidate_pairs
from engine.truth import check_distance_matrix, neighbor_error, point_distances
from engine.utils import RandomState, check_random_state, check_triplets


class FittedNoise(Protocol):
    """What an oracle built ``from_noise`` reads of a fitted noise model (:class:`simulation.noise.HumanNoise`
    is one): its lapse, and its scale transferred to other distances."""

    @property
    def lapse(self) -> float: ...

    def scale_for(self, distances: ArrayLike, unit: str = "range") -> float: ...


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


#: The human noise model fitted to the alien-egg crowds (:func:`simulation.noise.alien_egg_noise`, a test refits it from
#: the data): the logistic scale in units of the largest distance (a truth scaled to [0, 1]: it transfers
#: as a share of the distance range) and the lapse rate. The one noise setting of every simulation (the
#: simulated crowd, ``proxima plan``, the benchmarks) where a truth has no answers of its own.
HUMAN_SCALE = 0.075
HUMAN_LAPSE = 0.03


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
    :func:`simulation.noise.fit_gap_noise` / :func:`simulation.noise.fit_human_noise`."""
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
      one time in ten (λ and the scale fitted to real crowds by :func:`simulation.noise.fit_human_noise`).
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
    (:func:`simulation.noise.fit_human_noise`) carry over (:meth:`from_noise`); that a lapse picks uniformly among
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
    def from_noise(cls, noise: FittedNoise, distances: ArrayLike, unit: str = "range",
                   random_state: RandomState = None) -> OddOneOutOracle:
        """A rater answering like the people ``noise`` was fitted to, on ``distances`` (s transferred
        by :meth:`simulation.noise.HumanNoise.scale_for`)."""
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
    s and λ fitted to people's triplets (:func:`simulation.noise.fit_human_noise`) carry over (:meth:`from_noise`);
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
    def from_noise(cls, noise: FittedNoise, distances: ArrayLike, n_select: int = 2, unit: str = "range",
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


class PickOracle(RankOracle):
    """A simulated rater answering pick-k screens ``(head, (r1, ..., rn))`` ("pick the ``n_select``
    references most like the head", in no order: Wilber et al.'s grid, HCOMP 2014): :class:`RankOracle`'s
    choices, handed back in the order the references were shown, so nothing of its own order is left in
    them. ``answer(screens)`` gives rows ``(head, (r1, ..., rn), (s1, ..., sk))``, the shape
    ``PickScreens.observe`` takes.
    """

    def picks(self, heads: ArrayLike, references: ArrayLike) -> np.ndarray:
        """The picks (in the order shown) of screens with the same number of references: ``heads`` shape
        (m,), ``references`` shape (m, n); returns shape (m, n_select)."""
        chosen = super().picks(heads, references)
        R = np.asarray(references, np.int64).reshape(len(chosen), -1)
        shown = (R[:, :, None] == chosen[:, None, :]).any(axis=2)
        return R[shown].reshape(chosen.shape)


#: The share of a truth's item pairs a simulated same-or-different rater calls the same when no threshold is
#: given: its threshold is this quantile of the truth's distances (a stated assumption, not a measurement).
SAME_SHARE = 0.1


class SameDifferentOracle(_KnownDistances):
    """A simulated rater answering "are ``i`` and ``j`` the same, or different?" from a distance matrix: the
    same when their distance is under ``threshold``, with the human model's noise around it
    (:func:`human_agree_probability` on the gap ``threshold − d(i, j)``: the logistic ``scale`` and a lapse
    rate, a lapse answering at random). ``threshold`` defaults to the :data:`SAME_SHARE` quantile of the
    distances between distinct items. ``same(pairs)`` gives the answers; ``answer(pairs)`` gives them as a pair
    planner observes them, rows ``(i, j, distance)``: 0.0 for "the same", 1.0 for "different" (the
    same_different kind's ``sample`` of its values 1 and 0; its ``value_of`` reads the value back), so
    :func:`run` drives a pair planner with it as with :class:`DistanceMatrixOracle`.
    """

    def __init__(self, distances: ArrayLike, scale: float = 0.0, lapse: float = 0.0,
                 threshold: float | None = None, random_state: RandomState = None) -> None:
        self.distances = check_distance_matrix(distances)
        self.scale, self.lapse = _check_scale_lapse(scale, lapse)
        if threshold is None:
            off = self.distances[~np.eye(self.n_items, dtype=bool)]
            threshold = float(np.quantile(off, SAME_SHARE)) if off.size else 0.0
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be a finite distance, got {threshold}")
        self.threshold = float(threshold)
        self.rng = check_random_state(random_state)

    def same(self, pairs: Iterable[Sequence[int]]) -> np.ndarray:
        """Boolean ndarray of shape (len(pairs),): True where the pair is called the same."""
        idx = _as_index_array(pairs, 2, self.n_items)
        gap = self.threshold - self.distances[idx[:, 0], idx[:, 1]]
        return self.rng.random(len(idx)) < human_agree_probability(gap, self.scale, self.lapse)

    def answer(self, pairs: Iterable[Sequence[int]]) -> list[tuple[int, int, float]]:
        pairs = [(int(i), int(j)) for i, j in pairs]
        return [(i, j, 0.0 if s else 1.0) for (i, j), s in zip(pairs, self.same(pairs).tolist(), strict=True)]


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


def random_triplet_questions(n_items: int, m: int, rng: np.random.Generator) -> np.ndarray:
    """``m`` uniformly random questions ``(x, a, b)`` of three distinct items, shape (m, 3)."""
    x = rng.integers(n_items, size=m)
    a, b = candidate_pairs(rng, n_items, x, m)
    return np.column_stack([x, a, b])


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
