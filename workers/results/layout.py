"""Where to draw a study's items: by the embedding a learner has fitted where it has one (duels,
embedding learners; its two principal axes), else classical MDS of the distances it has estimated so far;
plus each item's nearest neighbour, its certainty and its candidates with their evidence (bounds, or
duels), and what each item looks like, for the dashboard's map.

Reads engine state through ``engine_state``/``engines``; must never import Flask.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
from scipy.linalg import eigh

from engine.random_triplets import TripletWinRates
from workers.jobs.learners import Learner
from workers.jobs.predicted import predicted_for, study_features
from workers.store import engine_state, keys
from workers.store.studies import Study

if TYPE_CHECKING:
    from numpy.typing import ArrayLike
    from redis import Redis



def _win_rates(learner: Learner) -> TripletWinRates | None:
    """The triplet win rates a learner keeps (random triplets' ``result()``), else None."""
    if learner.learns_graph:  # a distance learner's result is its graph
        return None
    res = learner.planner.result()
    return res if isinstance(res, TripletWinRates) else None

MAX_CANDIDATES = 8
#: At most this many items are drawn (and laid out); the others are only listed on the page.
MAX_DRAWN = 1000
#: Size of an item's picture on the map, as a share of the drawing's width: this at up to
#: FULL_SIZE_ITEMS items, shrinking like 1/sqrt(items) beyond, never below SMALLEST_NODE (32 px of a
#: 912 px wide map; the page draws no picture smaller than 32 px on screen, at any zoom).
LARGEST_NODE = 0.07
SMALLEST_NODE = 0.035
FULL_SIZE_ITEMS = 30
#: Items are moved apart until no two are closer than their size, or than this share of the room each item
#: has (1 / sqrt(items)) where that is less: a map of 1,000 items overlaps at first sight and parts on zooming.
ROOM_SHARE = 0.8
#: A coordinate farther than this many interquartile ranges outside the quartiles (Tukey's "far out") is an
#: outlier: drawn at the edge of the map, marked, so that a few far items do not squeeze the rest together.
FAR_OUT_IQR = 3.0


def classical_mds(distances: np.ndarray, dims: int = 2, fit: np.ndarray | None = None) -> np.ndarray:
    """Torgerson's classical MDS: coordinates of shape (n_items, dims) whose Euclidean distances
    approximate ``distances`` (n_items, n_items), from the top eigenvectors of the double-centred
    squared distances. Dimensions with a non-positive eigenvalue come out as zeros. ``fit`` (boolean,
    n_items): the items the map is made from (default all); the others are placed on it by their distances
    to those (landmark MDS, de Silva and Tenenbaum 2004), so that a few far items do not choose the view."""
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    if n == 0:
        return np.zeros((0, dims))
    fit = np.ones(n, bool) if fit is None or np.count_nonzero(fit) < 3 else np.asarray(fit, bool)
    sq = d[np.ix_(fit, fit)] ** 2
    m = sq.shape[0]
    # double centring, J sq J with J = I - 1/m, in O(m²) instead of two O(m³) products
    b = -0.5 * (sq - sq.mean(axis=0) - sq.mean(axis=1)[:, None] + sq.mean())
    values, vectors = _top_eigen(b, min(dims, m))
    order = np.argsort(values)[::-1]
    values, vectors = np.clip(values[order], 0.0, None), vectors[:, order]
    coords = np.zeros((n, dims))
    coords[fit, : vectors.shape[1]] = vectors * np.sqrt(values)
    if not fit.all():
        scale = np.divide(1.0, np.sqrt(values), out=np.zeros_like(values), where=values > 1e-12)
        others = d[np.ix_(~fit, fit)] ** 2
        coords[~fit, : vectors.shape[1]] = 0.5 * (sq.mean(axis=0) - others) @ vectors * scale
    return coords


#: Above this many items the map's eigenvectors come from Lanczos iterations (ARPACK: a tenth of a second at 1,000
#: items, where a dense solver took from half a second to ten on the shared machine).
LANCZOS_FROM = 200


def _top_eigen(b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest eigenvalues of the symmetric ``b`` and their eigenvectors (deterministic)."""
    m = b.shape[0]
    if m > LANCZOS_FROM and k < m - 1:
        from scipy.sparse.linalg import ArpackNoConvergence, eigsh

        try:  # a seeded start: the double-centred matrix has the constant vector in its null space
            return eigsh(b, k=k, which="LA", v0=np.random.default_rng(0).normal(size=m))
        except ArpackNoConvergence:
            pass
    return eigh(b, subset_by_index=[max(0, m - k), m - 1])


def far_by_distances(distances: np.ndarray) -> np.ndarray:
    """Boolean mask of the items far from the rest by their ``distances`` (n_items, n_items): an item whose
    median distance to the others is more than ``FAR_OUT_IQR`` interquartile ranges above the upper quartile
    of the items' median distances. (It may take an extreme item of the bulk too: left out of the map's fit,
    such an item is still placed by its distances.)"""
    d = np.asarray(distances, dtype=np.float64)
    n = d.shape[0]
    if n < 4:
        return np.zeros(n, bool)
    typical = np.nanmedian(np.where(np.eye(n, dtype=bool), np.nan, d), axis=1)
    q1, q3 = np.percentile(typical, [25, 75])
    return typical > q3 + FAR_OUT_IQR * (q3 - q1) if q3 > q1 else np.zeros(n, bool)


def principal_axes(X: np.ndarray, dims: int = 2, fit: np.ndarray | None = None) -> np.ndarray:
    """``X`` (n_items, d) projected on its ``dims`` principal axes (zeros where d < dims): the view
    of a fitted embedding that keeps the most of its spread. ``fit`` (boolean, n_items): the rows the
    axes are found from (default all), so that a few far items do not choose the view of the rest."""
    X = np.asarray(X, dtype=np.float64)
    basis = X if fit is None or not np.any(fit) else X[np.asarray(fit, bool)]
    centred = X - basis.mean(axis=0) if len(X) else X
    if X.shape[1] > dims:
        _, _, vt = np.linalg.svd(basis - basis.mean(axis=0), full_matrices=False)
        centred = centred @ vt[:dims].T
    out = np.zeros((len(X), dims))
    out[:, : centred.shape[1]] = centred
    return out


def far_out(X: np.ndarray) -> np.ndarray:
    """Boolean mask of the rows of ``X`` (n_items, d) far from the rest: their distance to the coordinate-wise
    median is more than ``FAR_OUT_IQR`` interquartile ranges above the distances' upper quartile."""
    X = np.asarray(X, dtype=np.float64)
    if len(X) < 4:
        return np.zeros(len(X), bool)
    d = np.linalg.norm(X - np.median(X, axis=0), axis=1)
    q1, q3 = np.percentile(d, [25, 75])
    return d > q3 + FAR_OUT_IQR * (q3 - q1) if q3 > q1 else np.zeros(len(X), bool)


def node_size(m: int) -> float:
    """The picture size (share of the drawing's width) for a map of ``m`` items."""
    return float(np.clip(LARGEST_NODE * np.sqrt(FULL_SIZE_ITEMS / max(m, 1)), SMALLEST_NODE, LARGEST_NODE))


def spread_gap(m: int) -> float:
    """How far apart (share of the drawing's width) items are moved on a map of ``m`` items."""
    return min(node_size(m), ROOM_SHARE / np.sqrt(max(m, 1)))


def robust_normalise(coords: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``coords`` (n_items, 2) scaled into [0, 1] (aspect kept) by the range of the items that are not far
    out, with the far-out ones (``FAR_OUT_IQR``, per axis) moved onto that range's edge; returns the scaled
    coordinates and the boolean mask of the items moved (the outliers)."""
    x = np.asarray(coords, dtype=np.float64)
    far = np.zeros(len(x), bool)
    if len(x) >= 4:
        q1, q3 = np.percentile(x, [25, 75], axis=0)
        iqr = q3 - q1
        lo, hi = q1 - FAR_OUT_IQR * iqr, q3 + FAR_OUT_IQR * iqr
        far = (((x < lo) | (x > hi)) & (iqr > 0)).any(axis=1)  # an axis of one value has no outliers
        if far.any() and not far.all():
            inside = x[~far]
            x = np.clip(x, inside.min(axis=0), inside.max(axis=0))
        else:
            far[:] = False
    return _normalise(x), far


def spread_apart(coords: np.ndarray, gap: float, rounds: int = 40, seed: int = 0,
                 bottom: float = 1.0) -> np.ndarray:
    """``coords`` (in [0, 1] x [0, ``bottom``]) moved the least needed so that no two are closer than ``gap``
    where room allows: items the learner places together stay neighbours, but each can be seen and clicked (an
    estimate matrix with few answers puts many items on one point); none is moved below ``bottom`` (the row
    of items waiting for answers lies there). Deterministic."""
    from scipy.spatial import cKDTree

    x = np.asarray(coords, dtype=np.float64).copy()
    if len(x) < 2:
        return x
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        pairs = cKDTree(x).query_pairs(gap * 0.999, output_type="ndarray")
        if not len(pairs):
            break
        i, j = pairs[:, 0], pairs[:, 1]
        d = x[j] - x[i]
        dist = np.hypot(d[:, 0], d[:, 1])
        overlap = (gap - np.minimum(dist, gap)) / 2.0
        same = dist < 1e-9  # items on one point part in a random (seeded) direction
        d[same] = rng.normal(size=(int(same.sum()), 2))
        push = (d / np.hypot(d[:, 0], d[:, 1])[:, None]) * overlap[:, None]
        move = np.zeros_like(x)
        np.add.at(move, i, -push)
        np.add.at(move, j, push)
        x = np.clip(x + move, 0.0, (1.0, bottom))
    return x


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


#: Items no answer has touched yet are drawn in a row at this height (of the [0, 1] drawing).
WAITING_Y = 0.94


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


def drawn_items(n: int, samples_per_item: np.ndarray | None, limit: int = MAX_DRAWN) -> np.ndarray:
    """Indices of the items to draw, ascending: all of them up to ``limit``, else the ``limit`` items
    with the most answers so far (ties: lower index first), where the learner is busiest."""
    if n <= limit:
        return np.arange(n)
    if samples_per_item is None:
        return np.arange(limit)
    counts = np.zeros(n, np.int64)
    counts[: min(n, len(samples_per_item))] = np.asarray(samples_per_item)[:n]
    order = np.lexsort((np.arange(n), -counts))  # most answers first, then by index
    return np.sort(order[:limit])


def graph_layout(conn: Redis, study: Study, label: str, max_drawn: int = MAX_DRAWN) -> dict:
    """One algorithm's current graph for drawing (JSON-safe): at most ``max_drawn`` items
    (``nodes``, with ``positions`` and ``candidates`` in the same order), the neighbour edges
    between drawn items, and the histogram of answers per item over every item.

    Large studies are cut to ``max_drawn`` items so the MDS, the reply and the drawing stay
    small whatever the study's size; the page lists every item anyway."""
    alg = study.config.get_algorithm(label)
    if alg is None:
        raise KeyError(label)
    n = study.n_items
    state = engine_state.load(conn, study.id, label)
    learner = Learner.from_state(alg, study.config, state) if state is not None else None
    planner = learner.planner if learner is not None else None
    # distance learners (the pair planners of engine.anntri) keep bounds on every pair, once started
    has_bounds = learner is not None and learner.learns_graph and planner.initialized
    rates = _win_rates(learner) if learner is not None else None
    samples = None
    if has_bounds:
        samples = planner.count_.sum(axis=1).astype(np.int64)
    elif rates is not None:
        samples = np.asarray(rates.shown).sum(axis=1).astype(np.int64)
    nodes = drawn_items(n, samples, max_drawn)
    m = len(nodes)
    candidates: list[list[dict]] = [[] for _ in range(m)]
    if has_bounds:
        mean, count = planner.mean_, planner.count_
        known = nodes[nodes < mean.shape[0]]  # items added after the engine was built have no row yet
        sub = np.ix_(known, known)
        upper, lower = planner.bounds_of(known)  # the drawn rows only (whole matrices cost O(n²))
        distances = fill_distances(mean[sub], count[sub], lower[:, known], upper[:, known])
        for slot, i in enumerate(known.tolist()):
            est = np.where(count[i] > 0, mean[i], np.nan)
            order = np.lexsort((np.nan_to_num(upper[slot], posinf=np.inf), np.nan_to_num(est, nan=np.inf)))
            order = [j for j in order[: MAX_CANDIDATES + 1].tolist() if j != i][:MAX_CANDIDATES]
            candidates[slot] = [{"item": j, "estimate": _num(est[j]), "lower": _num(lower[slot, j]),
                                 "upper": _num(upper[slot, j]), "samples": int(count[i, j])} for j in order]
    elif rates is not None:
        res = rates
        known = nodes[nodes < np.asarray(res.shown).shape[0]]
        sub = np.ix_(known, known)
        distances = fill_distances(1.0 - np.asarray(res.win_rate, dtype=np.float64)[sub], np.asarray(res.shown)[sub])
    else:
        distances = np.ones((m, m))
        np.fill_diagonal(distances, 0.0)
    if learner is not None and learner.ranks_candidates:  # duels: each item's shortlist and its duels
        for slot, i in enumerate(nodes.tolist()):
            if i < int(planner.n_items):
                candidates[slot] = learner.candidate_evidence(i, MAX_CANDIDATES) or []
    if learner is not None:
        graph = learner.graph()
        # an edge no answer has touched is no neighbour yet
        neighbors = np.where(learner.guessed(graph)[:, 0], -1, graph.neighbors[:, 0]).astype(int)
        certified = np.asarray(graph.certified, bool)
    else:
        neighbors = np.full(n, -1)
        certified = np.zeros(n, bool)
    neighbors = np.concatenate([neighbors[:n], np.full(max(0, n - len(neighbors)), -1)]).astype(int)
    # items added after the learner was built: a neighbour predicted from their features, marked predicted
    grows = learner is not None and len(graph.neighbors) < n
    found = predicted_for(learner, study_features(conn, study)) if grows else None
    predicted = np.zeros(n, bool)
    if found is not None:
        inside = found.items < n
        neighbors[found.items[inside]] = found.neighbors[inside, 0]
        predicted[found.items[inside]] = True
    looks = item_looks(conn, study.id, nodes)
    certified = np.concatenate([certified[:n], np.zeros(max(0, n - len(certified)), bool)])
    distances = _pad(distances, m, fill=float(distances.max()) if distances.size else 1.0)
    slot_of = {int(i): s for s, i in enumerate(nodes.tolist())}
    if learner is not None and not has_bounds:
        # no distance estimates (forests): pull each drawn item towards its drawn neighbour
        for i in nodes.tolist():
            j = int(neighbors[i])
            if j in slot_of:
                a, b = slot_of[i], slot_of[j]
                distances[a, b] = distances[b, a] = min(distances[a, b], 0.3)
    # Items without a single answer have no distances: MDS would stack them on a few points. They
    # wait in a row along the bottom ("no data yet"); the others are placed above it.
    waiting = np.zeros(m, bool)
    if samples is not None:
        counts = np.zeros(n, np.int64)
        counts[: min(n, len(samples))] = np.asarray(samples)[:n]
        waiting = counts[nodes] == 0
    coords = np.zeros((m, 2))
    outliers = np.zeros(m, bool)
    placed = np.flatnonzero(~waiting)
    fitted = learner.fitted_coordinates() if learner is not None else None
    placement = "embedding" if fitted is not None else "mds"
    if len(placed):
        if fitted is not None:
            # the learner's own map: items it has (added items without a row wait with the unanswered)
            rows = nodes[placed]
            inside = rows < len(fitted)
            waiting[placed[~inside]] = True
            placed = placed[inside]
            chosen = fitted[rows[inside]]
            flat = principal_axes(chosen, fit=~far_out(chosen))  # the view of the items that are not far out
        else:
            among = distances[np.ix_(placed, placed)]
            flat = classical_mds(among, fit=~far_by_distances(among))  # made from the items not far out
        scaled, far = robust_normalise(flat)
        outliers[placed] = far
        coords[placed] = scaled * (WAITING_Y - 0.08 if waiting.any() else 1.0)
        # a predicted item (never asked about) is drawn beside the item its features predict as its nearest
        # when that one is drawn and placed; spread_apart then gives it room of its own
        placed_slots = set(placed.tolist())
        beside = [(s, slot_of[int(neighbors[i])]) for s, i in enumerate(nodes.tolist())
                  if predicted[i] and slot_of.get(int(neighbors[i])) in placed_slots]
        for s, t in beside:
            coords[s] = coords[t] + spread_gap(m) * np.array([0.8, -0.8])
            waiting[s] = False
        placed = np.union1d(placed, [s for s, _ in beside]).astype(int)
        # (pushed apart, the placed items stay above the row of those waiting: it lies at WAITING_Y + 0.03)
        coords[placed] = spread_apart(coords[placed], gap=spread_gap(m),
                                      bottom=WAITING_Y - 0.04 if waiting.any() else 1.0)
    if waiting.any():
        row = np.flatnonzero(waiting)
        coords[row, 0] = (np.arange(len(row)) + 0.5) / len(row)
        coords[row, 1] = WAITING_Y + 0.03
    edges = [{"from": i, "to": int(neighbors[i]), "certified": bool(certified[i]), "predicted": bool(predicted[i])}
             for i in nodes.tolist() if neighbors[i] >= 0 and int(neighbors[i]) in slot_of]
    n_edges = int(np.count_nonzero(neighbors >= 0))
    return {
        "algorithm": label, "kind": alg.algorithm, "n_items": n, "max_drawn": max_drawn,
        "placement": placement, "embedding_dim": None if fitted is None else int(fitted.shape[1]),
        "node_size": round(node_size(m), 5),
        "certified": [bool(certified[i]) for i in nodes.tolist()],
        "looks": looks,
        "nodes": nodes.tolist(),
        "positions": [[round(float(x), 5), round(float(y), 5)] for x, y in coords],
        "edges": edges,
        "edges_not_drawn": n_edges - len(edges),
        "no_data": nodes[waiting].tolist(),
        "outliers": nodes[outliers].tolist(),
        "candidates": candidates,
        "samples_histogram": histogram(samples, bins=15) if samples is not None else None,
        # the drawn items added after the learner was built, their neighbour predicted from their features (not
        # measured; ``workers.jobs.predicted``), and how; None when the study has none
        "predicted": None if found is None else {"items": nodes[predicted[nodes]].tolist(), "by": found.by,
                                                  "about": found.about},
    }


def item_looks(conn: Redis, study_id: str, nodes: np.ndarray) -> list[dict]:
    """What each drawn item looks like on the map: ``{"id", "kind"}`` with its ``color``, its
    ``media`` index (image, audio, video) or a short ``text``."""
    with conn.pipeline(transaction=False) as pipe:
        for i in nodes.tolist():
            pipe.lindex(keys.items(study_id), i)
        raws = pipe.execute()
    out = []
    for i, raw in zip(nodes.tolist(), raws, strict=True):
        item = json.loads(raw) if raw else {"id": str(i), "kind": "text"}
        look = {"id": item["id"], "kind": item["kind"]}
        if item["kind"] == "color":
            look["color"] = item["color"]
        elif item["kind"] in ("image", "audio", "video"):
            look["media"] = int(i)
        elif item["kind"] == "text":
            look["text"] = (item.get("text") or "")[:40]
        out.append(look)
    return out


def histogram(values: ArrayLike, bins: int = 20) -> dict:
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
