"""How well a learner's current model predicts answers it never saw: held-out questions scored.

A study keeps a share of uniformly random questions out of training; their answers are scored here against
each learner's model of the distances between items. A choice (triplet, odd-one-out, rank) is scored by
whether the model makes the rater's first pick, a rating by the correlation of the model's distances with
the rated ones. The ceiling any model can reach follows from how often raters agree with themselves on a
repeated question. Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .kinds import QuestionKind
from .registry import distance_model

#: A function giving the model's distance of each pair ``(heads[t], others[t])`` (NaN: the model says nothing
#: of that pair), both int arrays of one length.
Distances = Callable[[np.ndarray, np.ndarray], np.ndarray]


def model_distances(planner: Any) -> Distances | None:
    """The pair distances a planner's current model gives (``engine.registry.distance_model``: its estimates
    of every pair, its fitted coordinates, the mean of each pair's samples (NaN for a pair never sampled; in
    triplet studies the head-based share of third items that beat the candidate), 1 - its smoothed win
    rates, else an item's rank among the head's nearest), None for a planner with no model of them."""
    found = distance_model(planner)
    if found is None:
        return None
    what, model = found
    if what == "estimates":
        mean = np.asarray(model, np.float64)
        return lambda h, o: mean[h, o]
    if what == "coordinates":
        X = np.asarray(model, np.float64)
        return lambda h, o: np.linalg.norm(X[h] - X[o], axis=1)
    if what == "samples":
        sampled_mean, count = model
        return lambda h, o: np.where(np.asarray(count[h, o]) > 0, np.asarray(sampled_mean[h, o], np.float64), np.nan)
    if what == "win_rates":
        # the smoothed win rate (TripletWinRates.win_rate) of the pairs asked only: no n x n copy
        wins, shown = model
        return lambda h, o: 1.0 - (np.asarray(wins[h, o], np.float64) + 1.0) / (np.asarray(shown[h, o]) + 2.0)
    neighbors = np.asarray(model)

    def ranked(h: np.ndarray, o: np.ndarray) -> np.ndarray:
        hit = neighbors[h] == np.asarray(o)[:, None]
        return np.where(hit.any(axis=1), hit.argmax(axis=1), np.nan)
    return ranked


def _offered(kind: QuestionKind, shown: Sequence[int]) -> list[int]:
    """The items a rater picks among: the candidates of a headed screen, else every item shown."""
    return list(shown[1:]) if kind.headed else list(shown)


def choice_agreement(distances: Distances, kind: QuestionKind, screens: Sequence[tuple[Sequence[int], Sequence[int]]]
                     ) -> np.ndarray:
    """For each answered screen ``(shown, picks)`` of ``kind``: 1 if the model makes the rater's first pick,
    0 if it makes another, a share where it ties (between the picks it cannot tell apart).

    The model's pick is the offered item whose choice implies the anchored triplets (``kind.triplets``)
    the model agrees with most: a triplet's or a grid's nearest candidate, an odd-one-out's item left out
    of the closest pair. A triplet the model has no distance for counts half."""
    out = np.empty(len(screens))
    for t, (shown, picks) in enumerate(screens):
        offered = _offered(kind, shown)
        scores = []
        for p in offered:
            implied = kind.triplets(list(shown), [p])
            if not implied:
                scores.append(0.0)
                continue
            rows = np.asarray(implied, np.int64)
            loser = np.where(rows[:, 3] == rows[:, 1], rows[:, 2], rows[:, 1])
            d_win = distances(rows[:, 0], rows[:, 3])
            d_lose = distances(rows[:, 0], loser)
            agree = np.where(np.isnan(d_win) | np.isnan(d_lose), 0.5,
                             np.where(d_win < d_lose, 1.0, np.where(d_win == d_lose, 0.5, 0.0)))
            scores.append(float(agree.mean()))
        scores_a = np.asarray(scores)
        best = np.flatnonzero(scores_a >= scores_a.max() - 1e-12)
        out[t] = (picks[0] in [offered[b] for b in best]) / len(best)
    return out


def rating_correlation(distances: Distances, pairs: np.ndarray, values: np.ndarray) -> float:
    """Pearson's correlation between the model's distances of ``pairs`` (T, 2) and the rated distances
    ``values`` (T,): NaN below 3 ratings. A pair the model has no distance for gets its mean distance
    (it predicts nothing), and a model that predicts one distance for every pair correlates 0."""
    pairs = np.asarray(pairs, np.int64).reshape(-1, 2)
    values = np.asarray(values, np.float64)
    if len(values) < 3:
        return math.nan
    d = np.asarray(distances(pairs[:, 0], pairs[:, 1]), np.float64)
    known = np.isfinite(d)
    d = np.where(known, d, d[known].mean() if known.any() else 0.0)
    if np.std(d) <= 1e-12 or np.std(values) <= 1e-12:
        return 0.0
    return float(np.corrcoef(d, values)[0, 1])


def choice_ceiling(agreement: float, choices: float) -> float:
    """The most any model can agree with one answer to a screen of ``choices`` offered items, given the
    share ``agreement`` of repeated screens a rater answered alike.

    A screen whose most likely pick has probability p is answered alike twice with probability at least
    p² + (1 - p)² / (m - 1) (m = ``choices``), so p is at most (1 + sqrt(1 - m + m(m - 1)·agreement)) / m;
    that bound is concave in the agreement, so over screens of differing difficulty the mean agreement's
    bound still bounds the mean p, and no model predicts an answer more often than its most likely pick.
    Within-rater agreement is at least the agreement between raters, so the line is an upper bound."""
    m = max(2.0, float(choices))
    inside = 1.0 - m + m * (m - 1.0) * float(agreement)
    return min(1.0, max(1.0 / m, (1.0 + math.sqrt(max(inside, 0.0))) / m))


def offered_count(kind: QuestionKind, shown: Sequence[int]) -> int:
    """How many items a rater picks among on a screen of ``kind`` showing ``shown``."""
    return len(_offered(kind, shown))
