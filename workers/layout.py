"""Where to draw a study's items: classical MDS of the distances a learner has estimated so far,
plus each item's nearest neighbour and candidates with their bounds, for the dashboard's graph.

Reads engine state through ``engine_state``/``engines``; must never import Flask.
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import eigh

from . import engine_state
from .engines import Learner
from .studies import Study

MAX_CANDIDATES = 8


def classical_mds(distances: np.ndarray, dims: int = 2) -> np.ndarray:
    """Torgerson's classical MDS: coordinates of shape (n_items, dims) whose Euclidean distances
    approximate ``distances`` (n_items, n_items), from the top eigenvectors of the double-centred
    squared distances. Dimensions with a non-positive eigenvalue come out as zeros."""
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    if n == 0:
        return np.zeros((0, dims))
    j = np.eye(n) - 1.0 / n
    b = -0.5 * j @ (d ** 2) @ j
    values, vectors = eigh(b, subset_by_index=[max(0, n - dims), n - 1])
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    coords = vectors * np.sqrt(np.clip(values, 0.0, None))
    if coords.shape[1] < dims:
        coords = np.hstack([coords, np.zeros((n, dims - coords.shape[1]))])
    return coords


def fill_distances(mean: np.ndarray, count: np.ndarray, lower: np.ndarray | None = None,
                   upper: np.ndarray | None = None) -> np.ndarray:
    """A full symmetric distance matrix: sample means where a pair has answers, else the midpoint of
    its finite bounds, else the largest known distance (unasked pairs are usually far apart)."""
    mean = np.asarray(mean, dtype=np.float64)
    count = np.asarray(count)
    d = np.where(count > 0, mean, np.nan)
    if lower is not None and upper is not None:
        lo, hi = np.asarray(lower, np.float64), np.asarray(upper, np.float64)
        mid = np.where(np.isfinite(hi) & np.isfinite(lo), (lo + hi) / 2.0, np.nan)
        d = np.where(np.isnan(d), mid, d)
    d = np.fmin(d, d.T)  # either direction's value where only one is known
    known = d[np.isfinite(d)]
    d = np.where(np.isfinite(d), d, known.max() if known.size else 1.0)
    d = (d + d.T) / 2.0
    np.fill_diagonal(d, 0.0)
    return np.clip(d, 0.0, None)


def _normalise(coords: np.ndarray) -> np.ndarray:
    """Coordinates scaled into [0, 1] on both axes (keeping the aspect ratio)."""
    if not len(coords):
        return coords
    lo = coords.min(axis=0)
    span = float((coords.max(axis=0) - lo).max()) or 1.0
    out = (coords - lo) / span
    return out + (1.0 - out.max(axis=0)) / 2.0  # centre the shorter axis


def _pad(d: np.ndarray, n: int, fill: float) -> np.ndarray:
    """``d`` grown to (n, n) for items added after the engine was built (far from everything)."""
    m = d.shape[0]
    if m >= n:
        return d[:n, :n]
    out = np.full((n, n), fill)
    out[:m, :m] = d
    np.fill_diagonal(out, 0.0)
    return out


def _num(x) -> float | None:
    x = float(x)
    return round(x, 6) if np.isfinite(x) else None


def graph_layout(conn, study: Study, label: str) -> dict:
    """Positions, neighbour edges and candidates of one algorithm's current graph (JSON-safe)."""
    alg = study.config.get_algorithm(label)
    if alg is None:
        raise KeyError(label)
    n = study.n_items
    state = engine_state.load(conn, study.id, label)
    learner = Learner.from_state(alg, study.config, state) if state is not None else None
    planner = learner.planner if learner is not None else None
    candidates: list[list[dict]] = [[] for _ in range(n)]
    samples_per_item: list[int] | None = None
    if planner is not None and hasattr(planner, "mean_"):
        mean, count, lower, upper = planner.mean_, planner.count_, planner.lower_, planner.upper_
        distances = fill_distances(mean, count, lower, upper)
        samples_per_item = count.sum(axis=1).astype(int).tolist()
        for i in range(min(n, mean.shape[0])):
            est = np.where(count[i] > 0, mean[i], np.nan)
            order = np.lexsort((np.nan_to_num(upper[i], posinf=np.inf), np.nan_to_num(est, nan=np.inf)))
            order = [j for j in order.tolist() if j != i][:MAX_CANDIDATES]
            candidates[i] = [{"item": j, "estimate": _num(est[j]), "lower": _num(lower[i, j]),
                              "upper": _num(upper[i, j]), "samples": int(count[i, j])} for j in order]
    elif planner is not None and alg.algorithm == "random_triplets":
        res = planner.result()
        win = np.asarray(res.win_rate, dtype=np.float64)
        shown = np.asarray(res.shown)
        distances = fill_distances(1.0 - win, shown)
    else:
        distances = np.ones((n, n))
        np.fill_diagonal(distances, 0.0)
    if learner is not None:
        graph = learner.graph()
        neighbors = graph.neighbors[:, 0].astype(int)
        certified = np.asarray(graph.certified, bool)
        if not hasattr(planner, "mean_"):
            # no distance estimates (forests): pull each item towards its neighbour
            for i, j in enumerate(neighbors.tolist()):
                if j >= 0:
                    distances[i, j] = distances[j, i] = min(distances[i, j], 0.3)
    else:
        neighbors = np.full(n, -1)
        certified = np.zeros(n, bool)
    distances = _pad(distances, n, fill=float(distances.max()) if distances.size else 1.0)
    neighbors = np.concatenate([neighbors[:n], np.full(max(0, n - len(neighbors)), -1)]).astype(int)
    certified = np.concatenate([certified[:n], np.zeros(max(0, n - len(certified)), bool)])
    coords = _normalise(classical_mds(distances))
    return {
        "algorithm": label, "kind": alg.algorithm, "n_items": n,
        "positions": [[round(float(x), 5), round(float(y), 5)] for x, y in coords],
        "edges": [{"from": i, "to": int(j), "certified": bool(certified[i])}
                  for i, j in enumerate(neighbors.tolist()) if j >= 0],
        "candidates": candidates,
        "samples_per_item": samples_per_item,
    }


def histogram(values, bins: int = 20) -> dict:
    """Counts of ``values`` in ``bins`` equal-width bins: {"edges": [bins + 1], "counts": [bins]}."""
    values = np.asarray(values, dtype=np.float64)
    if not values.size:
        return {"edges": [], "counts": []}
    hi = float(values.max())
    lo = float(values.min())
    if hi == lo:
        hi = lo + 1.0
    counts, edges = np.histogram(values, bins=bins, range=(lo, hi))
    return {"edges": [round(float(e), 3) for e in edges], "counts": counts.astype(int).tolist()}
