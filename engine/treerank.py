"""Similarity TreeRank (Clémençon & Vogel, LOD 2019): ROC-optimal symmetric similarity trees.

Learns which pairs of items are alike from pairs labelled +1 (alike) / -1 (not alike), over
item features: :class:`SimilarityTreeRank` (one oriented tree), :class:`RankingForest` (bagged
trees, mean rank), ROC analysis (:func:`roc_curve`, :func:`auc`, :func:`tpr_at_fpr`) and pair
labels from item labels or crowd ratings. Numpy/scipy only; must never import Flask, Redis, RQ,
scikit-learn or anything from ``webapp``/``workers``.

Conventions used throughout (documented once, referred to elsewhere):

- a *pair* is a row of ``X1`` (m, p) with the same row of ``X2``; ``y`` (m,) holds +1 (alike) or
  -1 (not alike). With item features ``X`` (n, p), ``pairs`` (m, 2) holds item indices.
- the *symmetric features* of a pair are ``f(x, x') = ((x + x')/√2, |x - x'|/√2)``, shape (2p,):
  feature ``k < p`` is the scaled sum of item feature ``k``, feature ``p + k`` the scaled absolute
  difference. ``f(x, x') == f(x', x)`` bit for bit, hence every score is exactly symmetric.
- master-tree nodes are numbered in creation order (breadth first), the root being 0; a node at
  depth ``j`` and position ``k`` (0 = leftmost at that depth) covers the rank interval
  ``[k / 2**j, (k + 1) / 2**j)``. The *left* child of a split holds the pairs its LeafRank rule
  calls alike. A leaf's score is ``2**max_depth * (1 - k / 2**j)`` (paper, eq. 4): leaves ordered
  left (most similar) to right.
- a *LeafRank rule* is a small axis-aligned tree over the symmetric features: an inner node
  sends a pair left when ``f[feature] <= threshold``; a rule leaf says alike or not.
- sentinel ``NO_NODE = -1`` (no child, no rule).
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from numpy.typing import ArrayLike
from scipy.stats import rankdata

from .utils import MaxFeatures, RandomState, StateMixin, check_int, check_random_state, json_seed, store_params

__all__ = [
    "NO_NODE",
    "GroundTruthTree",
    "RankingForest",
    "SimilarityTreeRank",
    "auc",
    "pairs_from_labels",
    "pairs_from_ratings",
    "roc_curve",
    "symmetric_features",
    "tpr_at_fpr",
]

NO_NODE = -1
STATE_VERSION = 1
SCHEMA_VERSION = 1
KIND_TREE = "similarity_treerank"
KIND_FOREST = "ranking_forest"

_INV_SQRT2 = 1.0 / math.sqrt(2.0)
#: most bins (distinct thresholds + 1) a symmetric feature is cut into; codes fit in uint8
MAX_BINS = 256
#: bin edges are computed on at most this many pairs (a random subset when there are more)
EDGE_SAMPLE = 200_000
#: elements of the (pairs, features) temporaries built at once when scoring or binning
CHUNK_ELEMENTS = 1 << 21
#: pairs_from_labels enumerates every pair (instead of rejection sampling) below this many
ENUMERATE_PAIRS = 2_000_000


# ----------------------------------------------------------------------------------------
# validation at the public boundary
# ----------------------------------------------------------------------------------------
def _check_features(X, name: str = "X") -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (rows, features), got shape {X.shape}")
    if X.shape[1] < 1:
        raise ValueError(f"{name} needs at least one feature")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return X


def _check_pair_labels(y, m: int) -> np.ndarray:
    """Boolean ``alike`` array of shape (m,) from labels in {+1, -1}."""
    y = np.asarray(y)
    if y.ndim != 1 or y.shape[0] != m:
        raise ValueError(f"y must have shape ({m},), got {y.shape}")
    if y.dtype == bool or not np.issubdtype(y.dtype, np.number):
        raise ValueError("y must hold +1 (alike) and -1 (not alike)")
    if not np.isin(y, (-1, 1)).all():
        raise ValueError("y must hold only +1 (alike) and -1 (not alike)")
    return y > 0


def _check_pairs_of(X1, X2) -> tuple[np.ndarray, np.ndarray]:
    X1 = _check_features(X1, "X1")
    X2 = _check_features(X2, "X2")
    if X1.shape != X2.shape:
        raise ValueError(f"X1 and X2 must have the same shape, got {X1.shape} and {X2.shape}")
    return X1, X2


def _check_training_pairs(X1, X2, y) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X1, X2, alike) of the pairs a model is fitted on: both alike and not-alike ones needed."""
    X1, X2 = _check_pairs_of(X1, X2)
    alike = _check_pair_labels(y, X1.shape[0])
    if alike.all() or not alike.any():
        raise ValueError("fit needs both alike (+1) and not-alike (-1) pairs")
    return X1, X2, alike


def _check_index_pairs(pairs, n_items: int) -> np.ndarray:
    pairs = np.asarray(pairs)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (m, 2), got {pairs.shape}")
    if pairs.size and not np.issubdtype(pairs.dtype, np.integer):
        raise ValueError("pairs must hold integer item indices")
    pairs = pairs.astype(np.int64, copy=False)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n_items):
        raise ValueError(f"pair indices must lie in [0, {n_items})")
    return pairs


def _check_scores(scores, y) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"scores must be 1-D, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise ValueError("scores contain NaN or infinite values")
    alike = _check_pair_labels(y, s.shape[0])
    if alike.all() or not alike.any():
        raise ValueError("ROC analysis needs both alike (+1) and not-alike (-1) pairs")
    return s, alike


# ----------------------------------------------------------------------------------------
# symmetric features, ROC analysis
# ----------------------------------------------------------------------------------------
def symmetric_features(X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
    """ndarray of shape (m, 2p): ``((x + x')/√2, |x - x'|/√2)`` for every pair (module docstring)."""
    X1, X2 = _check_pairs_of(X1, X2)
    return _sym(X1, X2)


def _sym(X1: np.ndarray, X2: np.ndarray) -> np.ndarray:
    # the same two elementwise operations in either order give bit-identical results
    # (IEEE addition commutes; a - b == -(b - a) exactly), which makes scores exactly symmetric
    return np.concatenate([(X1 + X2) * _INV_SQRT2, np.abs(X1 - X2) * _INV_SQRT2], axis=-1)


def roc_curve(scores: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """ROC knots ``(fpr, tpr)`` of ``scores`` (higher = more alike) against ``y`` in {+1, -1}.

    One knot per distinct score, from (0, 0) to (1, 1); tied scores give one straight segment
    (the ROC curve of the paper, where jumps are joined by line segments).
    """
    s, alike = _check_scores(scores, y)
    order = np.argsort(-s, kind="stable")
    s_sorted, pos = s[order], alike[order]
    ends = np.r_[np.flatnonzero(s_sorted[1:] != s_sorted[:-1]), s.size - 1]
    tp = np.cumsum(pos)[ends]
    fp = ends + 1 - tp
    n_pos = int(alike.sum())
    n_neg = s.size - n_pos
    return np.r_[0.0, fp / n_neg], np.r_[0.0, tp / n_pos]


def auc(scores: ArrayLike, y: ArrayLike) -> float:
    """Area under the ROC curve: P(score of an alike pair > score of a not-alike pair), ties half."""
    s, alike = _check_scores(scores, y)
    ranks = rankdata(s)  # mid-ranks: a tie counts one half
    n_pos = int(alike.sum())
    n_neg = s.size - n_pos
    return float((ranks[alike].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def tpr_at_fpr(scores: ArrayLike, y: ArrayLike, fpr: float = 0.1) -> float:
    """True positive rate of the ROC curve at false positive rate ``fpr`` (interpolated on the
    segment that crosses ``fpr``: the best test of level ``fpr`` that may randomise on a tie)."""
    if not 0.0 <= float(fpr) <= 1.0:
        raise ValueError(f"fpr must lie in [0, 1], got {fpr}")
    fprs, tprs = roc_curve(scores, y)
    return _roc_at(fprs, tprs, float(fpr))


def _roc_at(fprs: np.ndarray, tprs: np.ndarray, alpha: float) -> float:
    i = int(np.searchsorted(fprs, alpha, side="right")) - 1  # last knot with fpr <= alpha
    if fprs[i] == alpha or i == fprs.size - 1:
        return float(tprs[i])
    w = (alpha - fprs[i]) / (fprs[i + 1] - fprs[i])
    return float(tprs[i] + w * (tprs[i + 1] - tprs[i]))


# ----------------------------------------------------------------------------------------
# pair labels
# ----------------------------------------------------------------------------------------
def pairs_from_labels(labels: ArrayLike, n_pairs: int | None = None, random_state: RandomState = None,
                      balanced: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Pairs of distinct items and their labels: +1 when the two items share a label, else -1.

    Parameters
    ----------
    labels : array-like of shape (n_items,), any sortable values (the class of each item).
    n_pairs : int or None. ``None`` gives every pair ``i < j`` (n(n-1)/2 rows); an int gives that
        many distinct pairs drawn uniformly without replacement (all of them if there are fewer).
    random_state : None, int or numpy Generator (which pairs are drawn).
    balanced : bool. Draw (up to) half alike and half not-alike pairs, each uniformly among its
        kind; with ``n_pairs=None`` every alike pair and as many not-alike ones.

    Returns ``(pairs, y)``: int64 ndarray of shape (m, 2) with ``pairs[:, 0] < pairs[:, 1]`` in
    lexicographic order, int64 ndarray of shape (m,) with values in {+1, -1}.
    """
    labels = np.asarray(labels)
    if labels.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {labels.shape}")
    n = labels.shape[0]
    if n < 2:
        raise ValueError("pairs need at least two items")
    check_int("n_pairs", n_pairs, 1, allow_none=True)
    _, codes = np.unique(labels, return_inverse=True)
    codes = codes.ravel()
    rng = check_random_state(random_state)
    total = n * (n - 1) // 2
    sizes = np.bincount(codes)
    n_alike = int((sizes * (sizes - 1) // 2).sum())
    if not balanced:
        want_pos, want_neg = None, total if n_pairs is None else min(n_pairs, total)
    elif n_pairs is None:
        want_pos, want_neg = n_alike, min(total - n_alike, n_alike)
    else:
        want_neg = min(total - n_alike, n_pairs - min(n_alike, n_pairs // 2))
        want_pos = min(n_alike, n_pairs - want_neg)

    if total <= ENUMERATE_PAIRS or (want_pos is None and 2 * want_neg > total):
        i, j = np.triu_indices(n, 1)
        keys = i.astype(np.int64) * n + j
        if want_pos is None:
            chosen = keys if want_neg == total else rng.choice(keys, want_neg, replace=False)
        else:
            same = codes[i] == codes[j]
            chosen = np.r_[rng.choice(keys[same], want_pos, replace=False),
                           rng.choice(keys[~same], want_neg, replace=False)]
    else:  # many items: draw candidate pairs of the wanted kind until there are enough distinct ones
        order = np.argsort(codes, kind="stable")
        starts = np.r_[0, np.cumsum(sizes)[:-1]]

        def any_pairs(k):
            a, b = rng.integers(0, n, size=k), rng.integers(0, n - 1, size=k)
            b = b + (b >= a)
            return np.minimum(a, b) * n + np.maximum(a, b)

        def alike_pairs(k):
            weights = sizes * (sizes - 1) / 2.0
            c = rng.choice(sizes.size, size=k, p=weights / weights.sum())
            a, b = rng.integers(0, sizes[c]), rng.integers(0, sizes[c] - 1)
            b = b + (b >= a)
            a, b = order[starts[c] + a], order[starts[c] + b]
            return np.minimum(a, b) * n + np.maximum(a, b)

        def other_pairs(k):
            keys = any_pairs(k)
            return keys[codes[keys // n] != codes[keys % n]]

        parts = []
        for sampler, want, population in ((any_pairs if want_pos is None else other_pairs, want_neg, total - n_alike),
                                          (alike_pairs, want_pos or 0, n_alike)):
            if want == 0:
                continue
            if want == population and sampler is alike_pairs:  # every alike pair, class by class
                for c in np.flatnonzero(sizes > 1):
                    members = np.sort(order[starts[c]:starts[c] + sizes[c]])
                    a, b = np.triu_indices(members.size, 1)
                    parts.append(members[a] * n + members[b])
                continue
            found = np.empty(0, np.int64)
            while found.size < want:
                found = np.unique(np.r_[found, sampler(max(2 * (want - found.size), 1024))])
            parts.append(rng.choice(found, want, replace=False))
        chosen = np.concatenate(parts)
    chosen = np.sort(chosen)
    pairs = np.column_stack([chosen // n, chosen % n]).astype(np.int64)
    y = np.where(codes[pairs[:, 0]] == codes[pairs[:, 1]], 1, -1).astype(np.int64)
    return pairs, y


def pairs_from_ratings(pairs: ArrayLike, ratings: ArrayLike, threshold: float, higher_is_alike: bool = True,
                       pool: bool = True) -> np.ndarray:
    """Labels in {+1, -1} for rated pairs: alike when the rating is at least ``threshold``.

    ``pairs`` (m, 2) item indices and ``ratings`` (m,) one crowd rating per row. With ``pool``
    every row of the same unordered pair gets the label of the pair's mean rating (raters
    disagree; the pair has one truth). ``higher_is_alike=False`` is for distance-like ratings
    (e.g. Proxima's noisy distance samples in [0, 1]): alike when the rating is at most
    ``threshold``. Returns int64 ndarray of shape (m,) aligned with the rows of ``pairs``.
    """
    pairs = np.asarray(pairs)
    ratings = np.asarray(ratings, dtype=np.float64)
    if pairs.ndim != 2 or pairs.shape[1] != 2:
        raise ValueError(f"pairs must have shape (m, 2), got {pairs.shape}")
    if ratings.shape != (pairs.shape[0],):
        raise ValueError(f"ratings must have shape ({pairs.shape[0]},), got {ratings.shape}")
    if not np.isfinite(ratings).all():
        raise ValueError("ratings contain NaN or infinite values")
    if not np.isfinite(threshold):
        raise ValueError("threshold must be a finite number")
    values = ratings
    if pool and pairs.shape[0]:
        pairs = _check_index_pairs(pairs, int(pairs.max()) + 1)
        lo, hi = pairs.min(axis=1), pairs.max(axis=1)
        keys = lo * (int(hi.max()) + 1) + hi
        _, inverse = np.unique(keys, return_inverse=True)
        inverse = inverse.ravel()
        sums = np.bincount(inverse, weights=ratings)
        counts = np.bincount(inverse)
        values = (sums / counts)[inverse]
    alike = values >= threshold if higher_is_alike else values <= threshold
    return np.where(alike, 1, -1).astype(np.int64)


# ----------------------------------------------------------------------------------------
# binning: thresholds a LeafRank split may use
# ----------------------------------------------------------------------------------------
def _bin_edges(F: np.ndarray, max_bins: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Per symmetric feature, sorted candidate thresholds (at most ``max_bins - 1``).

    A feature with few distinct values gets every midpoint (exact CART); otherwise quantiles.
    """
    if F.shape[0] > EDGE_SAMPLE:
        F = F[np.sort(rng.choice(F.shape[0], EDGE_SAMPLE, replace=False))]
    edges = []
    for col in np.sort(F, axis=0).T:
        u = col[np.r_[True, col[1:] != col[:-1]]]
        if u.size <= max_bins:
            e = u[:-1] + (u[1:] - u[:-1]) * 0.5
        else:
            q = np.linspace(0, col.size - 1, max_bins + 1)[1:-1]
            e = col[np.round(q).astype(np.int64)]
        edges.append(np.unique(e))
    return edges


def _bin_codes(F: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """uint8 ndarray like F: code ``c`` means ``edges[c-1] < f <= edges[c]`` (so ``f <= edges[t]``
    exactly when ``code <= t``, which makes training splits and scoring agree)."""
    codes = np.empty(F.shape, dtype=np.uint8)
    for j, e in enumerate(edges):
        codes[:, j] = np.searchsorted(e, F[:, j], side="left")
    return codes


# ----------------------------------------------------------------------------------------
# LeafRank: a cost-sensitive classification tree on the symmetric features of one cell
# ----------------------------------------------------------------------------------------
def _split_search(codes: np.ndarray, alike: np.ndarray, feats: np.ndarray, n_edges: np.ndarray,
                  w_pos: float, w_neg: float, min_leaf: int, last: bool):
    """Best split ``(feature, threshold index)`` of one LeafRank node, or None.

    Positives weigh ``w_pos``, negatives ``w_neg``. ``last`` (children will be rule leaves):
    maximise the cost-sensitive gain ``max(0, w_pos a+ - w_neg a-)`` summed over the children,
    which is exactly the AUC increment of step (3) of the algorithm. Otherwise minimise the
    weighted Gini impurity (a greedy surrogate that still rewards splits whose children keep the
    same sign). ``codes`` (n, k) are the node's bin codes of the features ``feats``.
    """
    n = codes.shape[0]
    n_pos = int(alike.sum())
    n_neg = n - n_pos
    n_bins = int(n_edges[feats].max()) + 1 if feats.size else 1
    if n_bins < 2:
        return None
    best = None
    block = max(1, CHUNK_ELEMENTS // max(n, 1))
    if last:
        parent = max(0.0, w_pos * n_pos - w_neg * n_neg)
    else:
        parent = _gini(w_pos * n_pos, w_neg * n_neg)
    tol = 1e-12 * (w_pos * n_pos + w_neg * n_neg)
    for start in range(0, feats.size, block):
        fb = feats[start:start + block]
        kb = fb.size
        flat = codes[:, start:start + kb].astype(np.intp) + (np.arange(kb, dtype=np.intp) * n_bins)[None, :]
        cpos = np.bincount(flat[alike].ravel(), minlength=kb * n_bins).reshape(kb, n_bins)
        cneg = np.bincount(flat[~alike].ravel(), minlength=kb * n_bins).reshape(kb, n_bins)
        lpos = np.cumsum(cpos, axis=1)[:, :-1].astype(np.float64)
        lneg = np.cumsum(cneg, axis=1)[:, :-1].astype(np.float64)
        rpos, rneg = n_pos - lpos, n_neg - lneg
        n_left = lpos + lneg
        valid = (n_left >= min_leaf) & (n - n_left >= min_leaf)
        valid &= np.arange(n_bins - 1)[None, :] < n_edges[fb][:, None]
        if not valid.any():
            continue
        if last:
            value = (np.maximum(0.0, w_pos * lpos - w_neg * lneg)
                     + np.maximum(0.0, w_pos * rpos - w_neg * rneg))
            value = np.where(valid, value, -np.inf)
            flat_best = int(np.argmax(value))
            gain = value.flat[flat_best] - parent
        else:
            value = _gini(w_pos * lpos, w_neg * lneg) + _gini(w_pos * rpos, w_neg * rneg)
            value = np.where(valid, value, np.inf)
            flat_best = int(np.argmin(value))
            gain = parent - value.flat[flat_best]
        if gain > tol and (best is None or gain > best[0]):
            j, t = divmod(flat_best, n_bins - 1)
            best = (gain, int(fb[j]), t)
    return None if best is None else best[1:]


def _gini(wp, wn):
    """Weighted Gini impurity times node weight: ``2 wp wn / (wp + wn)`` (0 for an empty node)."""
    total = wp + wn
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 2.0 * wp * wn / np.where(total > 0, total, 1.0), 0.0)


class _Rules:
    """Every LeafRank rule of one master tree, as flat arrays (one global numbering)."""

    def __init__(self):
        self.feature: list[int] = []
        self.threshold: list[float] = []
        self.left: list[int] = []
        self.right: list[int] = []
        self.alike: list[bool] = []

    def add(self, feature=NO_NODE, threshold=0.0, left=NO_NODE, right=NO_NODE, alike=False) -> int:
        self.feature.append(int(feature))
        self.threshold.append(float(threshold))
        self.left.append(int(left))
        self.right.append(int(right))
        self.alike.append(bool(alike))
        return len(self.feature) - 1


def _leafrank(codes: np.ndarray, edges: list[np.ndarray], n_edges: np.ndarray, alike: np.ndarray,
              rows: np.ndarray, depth: int, min_leaf: int, n_feats: int, rng: np.random.Generator,
              rules: _Rules):
    """Grow one LeafRank rule on the cell ``rows``; returns (rule root, boolean "alike" per row)
    or None when no rule beats predicting one class for the whole cell."""
    a = alike[rows]
    n_pos = int(a.sum())
    n_neg = rows.size - n_pos
    w_pos, w_neg = n_neg / rows.size, n_pos / rows.size  # (1 - p) and p, p = positive share
    d = codes.shape[1]
    # grow breadth first; a node's members are positions into rows
    nodes = [{"members": np.arange(rows.size), "depth": 0}]
    frontier = [0]
    while frontier:
        nxt = []
        for v in frontier:
            node = nodes[v]
            if node["depth"] >= depth or node["members"].size < 2 * min_leaf:
                continue
            m = node["members"]
            am = a[m]
            if am.all() or not am.any():
                continue
            feats = np.arange(d) if n_feats >= d else np.sort(rng.choice(d, n_feats, replace=False))
            found = _split_search(codes[rows[m][:, None], feats[None, :]], am, feats, n_edges, w_pos, w_neg, min_leaf,
                                  last=node["depth"] == depth - 1)
            if found is None:
                continue
            j, t = found
            go_left = codes[rows[m], j] <= t
            node["split"] = (j, float(edges[j][t]))
            node["children"] = (len(nodes), len(nodes) + 1)
            nodes.append({"members": m[go_left], "depth": node["depth"] + 1})
            nodes.append({"members": m[~go_left], "depth": node["depth"] + 1})
            nxt.extend(node["children"])
        frontier = nxt
    # label the rule leaves: alike when they hold more than their share of positives
    row_alike = np.zeros(rows.size, dtype=bool)
    any_alike = False
    for node in nodes:
        if "split" in node:
            continue
        m = node["members"]
        k = int(a[m].sum())
        node["alike"] = w_pos * k - w_neg * (m.size - k) > 1e-12 * rows.size
        if node["alike"]:
            row_alike[m] = True
            any_alike = True
    if not any_alike:
        return None
    _collapse(nodes, 0)
    return _emit(nodes, 0, rules), row_alike


def _collapse(nodes: list[dict], v: int) -> None:
    """Merge sibling rule leaves that say the same thing (the rule predicts exactly as before)."""
    node = nodes[v]
    if "split" not in node:
        return
    lc, rc = node["children"]
    _collapse(nodes, lc)
    _collapse(nodes, rc)
    left, right = nodes[lc], nodes[rc]
    if "split" not in left and "split" not in right and left["alike"] == right["alike"]:
        node["alike"] = left["alike"]
        del node["split"], node["children"]


def _emit(nodes: list[dict], v: int, rules: _Rules) -> int:
    node = nodes[v]
    if "split" not in node:
        return rules.add(alike=node["alike"])
    me = rules.add(feature=node["split"][0], threshold=node["split"][1])
    lc, rc = node["children"]
    rules.left[me] = _emit(nodes, lc, rules)
    rules.right[me] = _emit(nodes, rc, rules)
    return me


def _resolve_max_features(max_features, d: int) -> int:
    if max_features is None:
        return d
    if isinstance(max_features, str):
        if max_features == "sqrt":
            return max(1, int(math.sqrt(d)))
        if max_features == "log2":
            return max(1, int(math.log2(d)))
        raise ValueError(f"max_features must be None, 'sqrt', 'log2', an int or a float in (0, 1], "
                         f"not {max_features!r}")
    if isinstance(max_features, (numbers.Integral, np.integer)) and not isinstance(max_features, bool):
        if max_features < 1:
            raise ValueError(f"max_features must be >= 1, got {max_features}")
        return min(int(max_features), d)
    if isinstance(max_features, numbers.Real) and not isinstance(max_features, bool) and 0 < max_features <= 1:
        return max(1, int(max_features * d))
    raise ValueError(f"max_features must be None, 'sqrt', 'log2', an int or a float in (0, 1], not {max_features!r}")


def _check_max_features(value):
    _resolve_max_features(value, 1)
    return value


# ----------------------------------------------------------------------------------------
# one similarity tree
# ----------------------------------------------------------------------------------------
class SimilarityTreeRank(StateMixin):
    """A similarity ranking tree (Similarity TreeRank, Clémençon & Vogel 2019, §3.1).

    Each cell of the master tree is split by a LeafRank rule grown on the symmetric features of
    the cell's pairs with positives weighted ``1 - p`` and negatives ``p`` (``p`` the cell's share
    of alike pairs). The rule's last level chooses the threshold that maximises the empirical AUC
    increment exactly (so with ``leafrank_depth=1`` step (3) is solved over all axis-aligned
    thresholds); upper levels use the weighted Gini impurity, which looks past splits whose two
    halves would get the same label. A rule leaf is "alike" when its weighted positives exceed its
    weighted negatives; those pairs go left.

    Parameters
    ----------
    max_depth : int >= 1, depth D of the master tree (at most 2**D leaves).
    leafrank_depth : int >= 1, depth of each LeafRank rule (1: one threshold per split).
    min_samples_leaf : int >= 1, fewest training pairs in a LeafRank leaf (hence in a cell).
    max_features : None, 'sqrt', 'log2', int or float in (0, 1]: symmetric features drawn at
        random for each LeafRank node (None: all 2p).
    max_bins : int in [2, 256]: thresholds per symmetric feature are every midpoint between its
        distinct training values when there are at most ``max_bins`` of them, else quantiles.
    random_state : None, int or numpy Generator (feature draws, subsampling for bin edges).

    Attributes (after ``fit``)
    --------------------------
    n_features_in_ : p. ``n_leaves_`` : leaves of the master tree.
    node_left_, node_right_ : int ndarray (n_nodes,), children (``NO_NODE`` at leaves); left = alike.
    node_depth_, node_position_ : int ndarray (n_nodes,), depth j and position k of each node.
    node_rule_ : int ndarray (n_nodes,), root of the node's LeafRank rule (``NO_NODE`` at leaves).
    node_n_alike_, node_n_other_ : int ndarray (n_nodes,), training pairs +1 / -1 in the cell.
    rule_feature_, rule_threshold_, rule_left_, rule_right_, rule_alike_ : the LeafRank rules.
    """

    def __init__(self, max_depth: int = 4, leafrank_depth: int = 2, min_samples_leaf: int = 5,
                 max_features: MaxFeatures = None, max_bins: int = MAX_BINS, random_state: RandomState = None) -> None:
        store_params(self, locals())

    # -- parameters ----------------------------------------------------------------------
    def _check_params(self) -> None:
        check_int("max_depth", self.max_depth, 1)
        if self.max_depth > 30:
            raise ValueError(f"max_depth must be <= 30 (scores are 2**max_depth), got {self.max_depth}")
        check_int("leafrank_depth", self.leafrank_depth, 1)
        check_int("min_samples_leaf", self.min_samples_leaf, 1)
        _check_max_features(self.max_features)
        check_int("max_bins", self.max_bins, 2)
        if self.max_bins > MAX_BINS:
            raise ValueError(f"max_bins must be <= {MAX_BINS}, got {self.max_bins}")

    def _params(self) -> dict:
        mf = self.max_features
        if isinstance(mf, (numbers.Integral, np.integer)):
            mf = int(mf)
        elif isinstance(mf, numbers.Real):
            mf = float(mf)
        return {"max_depth": int(self.max_depth), "leafrank_depth": int(self.leafrank_depth),
                "min_samples_leaf": int(self.min_samples_leaf), "max_features": mf,
                "max_bins": int(self.max_bins),
                "random_state": json_seed(self.random_state)}

    def get_params(self) -> dict:
        return self._params() | {"random_state": self.random_state}

    # -- fitting -------------------------------------------------------------------------
    def fit(self, X1: ArrayLike, X2: ArrayLike, y: ArrayLike) -> SimilarityTreeRank:
        """Grow the tree on row-aligned pairs ``X1``, ``X2`` (m, p) labelled ``y`` (m,) in {+1, -1}."""
        self._check_params()
        X1, X2, alike = _check_training_pairs(X1, X2, y)
        rng = check_random_state(self.random_state)
        F = _sym(X1, X2)
        edges = _bin_edges(F, self.max_bins, rng)
        codes = _bin_codes(F, edges)
        self._grow(codes, edges, alike, np.arange(F.shape[0]), X1.shape[1], rng)
        return self

    def fit_pairs(self, X: ArrayLike, pairs: ArrayLike, y: ArrayLike) -> SimilarityTreeRank:
        """Fit on item features ``X`` (n, p) and item-index ``pairs`` (m, 2) labelled ``y``."""
        X = _check_features(X)
        pairs = _check_index_pairs(pairs, X.shape[0])
        return self.fit(X[pairs[:, 0]], X[pairs[:, 1]], y)

    def _grow(self, codes, edges, alike, rows, n_features, rng) -> None:
        d = codes.shape[1]
        n_edges = np.array([e.size for e in edges], dtype=np.int64)
        n_feats = _resolve_max_features(self.max_features, d)
        rules = _Rules()
        left, right, depth, position, rule, n_alike, n_other = [], [], [], [], [], [], []

        def new_node(r, j, k):
            left.append(NO_NODE)
            right.append(NO_NODE)
            depth.append(j)
            position.append(k)
            rule.append(NO_NODE)
            na = int(alike[r].sum())
            n_alike.append(na)
            n_other.append(int(r.size) - na)
            return len(left) - 1

        frontier = [(new_node(rows, 0, 0), rows)]
        while frontier:
            nxt = []
            for v, r in frontier:
                if depth[v] >= self.max_depth or n_alike[v] == 0 or n_other[v] == 0:
                    continue
                if r.size < 2 * self.min_samples_leaf:
                    continue
                found = _leafrank(codes, edges, n_edges, alike, r, self.leafrank_depth, self.min_samples_leaf,
                                  n_feats, rng, rules)
                if found is None:
                    continue
                root, row_alike = found
                rule[v] = root
                j, k = depth[v] + 1, 2 * position[v]
                lv = new_node(r[row_alike], j, k)
                rv = new_node(r[~row_alike], j, k + 1)
                left[v], right[v] = lv, rv
                nxt.append((lv, r[row_alike]))
                nxt.append((rv, r[~row_alike]))
            frontier = nxt
        self.n_features_in_ = int(n_features)
        self.node_left_ = np.array(left, dtype=np.int64)
        self.node_right_ = np.array(right, dtype=np.int64)
        self.node_depth_ = np.array(depth, dtype=np.int64)
        self.node_position_ = np.array(position, dtype=np.int64)
        self.node_rule_ = np.array(rule, dtype=np.int64)
        self.node_n_alike_ = np.array(n_alike, dtype=np.int64)
        self.node_n_other_ = np.array(n_other, dtype=np.int64)
        self.rule_feature_ = np.array(rules.feature, dtype=np.int64)
        self.rule_threshold_ = np.array(rules.threshold, dtype=np.float64)
        self.rule_left_ = np.array(rules.left, dtype=np.int64)
        self.rule_right_ = np.array(rules.right, dtype=np.int64)
        self.rule_alike_ = np.array(rules.alike, dtype=bool)
        self._finish()

    def _finish(self) -> None:
        """Derived arrays: leaf scores, leaves in rank order, and each leaf's mid-rank."""
        leaves = np.flatnonzero(self.node_left_ == NO_NODE)
        j, k = self.node_depth_[leaves], self.node_position_[leaves]
        score = np.zeros(self.node_left_.size, dtype=np.float64)
        score[leaves] = np.ldexp(1.0, self.max_depth - j) * ((1 << j) - k)  # 2^D (1 - k / 2^j)
        self.node_score_ = score
        self.leaves_ = leaves[np.argsort(-score[leaves], kind="stable")]  # left to right
        counts = (self.node_n_alike_ + self.node_n_other_)[self.leaves_].astype(np.float64)
        mid = (np.cumsum(counts) - 0.5 * counts) / counts.sum()
        self.node_mid_rank_ = np.full(self.node_left_.size, np.nan)
        self.node_mid_rank_[self.leaves_] = mid
        self.n_leaves_ = int(leaves.size)

    def _check_fitted(self) -> None:
        if not hasattr(self, "node_left_"):
            raise ValueError("this SimilarityTreeRank is not fitted yet; call fit first")

    # -- scoring -------------------------------------------------------------------------
    def _apply_features(self, F: np.ndarray) -> np.ndarray:
        """Master leaf of each pair, from symmetric features F (m, 2p)."""
        node = np.zeros(F.shape[0], dtype=np.int64)
        for _ in range(self.max_depth):
            rows = np.flatnonzero(self.node_left_[node] != NO_NODE)
            if rows.size == 0:
                break
            at = node[rows]
            r = self.node_rule_[at]
            for _ in range(self.leafrank_depth):
                inner = np.flatnonzero(self.rule_left_[r] != NO_NODE)
                if inner.size == 0:
                    break
                ri = r[inner]
                go_left = F[rows[inner], self.rule_feature_[ri]] <= self.rule_threshold_[ri]
                r[inner] = np.where(go_left, self.rule_left_[ri], self.rule_right_[ri])
            node[rows] = np.where(self.rule_alike_[r], self.node_left_[at], self.node_right_[at])
        return node

    def _check_X(self, X1, X2) -> tuple[np.ndarray, np.ndarray]:
        self._check_fitted()
        X1, X2 = _check_pairs_of(X1, X2)
        if X1.shape[1] != self.n_features_in_:
            raise ValueError(f"pairs have {X1.shape[1]} features, the tree was fitted on {self.n_features_in_}")
        return X1, X2

    def apply(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """Master-tree leaf (node id) of every pair: int ndarray of shape (m,)."""
        X1, X2 = self._check_X(X1, X2)
        return _by_chunks(X1, X2, self._apply_features)

    def score(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """Similarity of every pair, ndarray of shape (m,): ``2**D - leaf rank`` (higher = more alike).

        Exactly symmetric: ``score(X1, X2) == score(X2, X1)``.
        """
        X1, X2 = self._check_X(X1, X2)
        return _by_chunks(X1, X2, lambda F: self.node_score_[self._apply_features(F)])

    def score_matrix(self, XA: ArrayLike, XB: ArrayLike) -> np.ndarray:
        """Scores of all pairs (a, b), ndarray of shape (len(XA), len(XB))."""
        return _matrix(self, XA, XB, lambda F: self.node_score_[self._apply_features(F)])

    def mid_rank(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """Share of training pairs ranked above each pair's leaf plus half its leaf's share, in (0, 1)."""
        X1, X2 = self._check_X(X1, X2)
        return _by_chunks(X1, X2, lambda F: self.node_mid_rank_[self._apply_features(F)])

    def training_roc(self) -> tuple[np.ndarray, np.ndarray]:
        """The ROC knots ``(fpr, tpr)`` on the training pairs (one knot per leaf, the paper's
        (α_D,k, β_D,k)), from (0, 0) to (1, 1)."""
        self._check_fitted()
        pos = self.node_n_alike_[self.leaves_]
        neg = self.node_n_other_[self.leaves_]
        return (np.r_[0.0, np.cumsum(neg) / max(neg.sum(), 1)],
                np.r_[0.0, np.cumsum(pos) / max(pos.sum(), 1)])

    # -- state and export ----------------------------------------------------------------
    STATE_VERSIONS = (STATE_VERSION,)
    _FITTED_ATTRIBUTE = "node_left_"
    _ARRAYS = {"node_left": np.int64, "node_right": np.int64, "node_depth": np.int64,
               "node_position": np.int64, "node_rule": np.int64, "node_n_alike": np.int64,
               "node_n_other": np.int64, "rule_feature": np.int64, "rule_threshold": np.float64,
               "rule_left": np.int64, "rule_right": np.int64, "rule_alike": bool}

    def _fitted_state(self) -> dict:
        """JSON-safe (plain lists and scalars): ``n_features`` and the node / rule arrays named
        like the attributes without the trailing underscore."""
        return {"n_features": int(self.n_features_in_),
                **{name: getattr(self, name + "_").tolist() for name in self._ARRAYS}}

    def _load_fitted(self, state: dict) -> None:
        self.n_features_in_ = int(state["n_features"])
        for name, dtype in self._ARRAYS.items():
            setattr(self, name + "_", np.asarray(state[name], dtype=dtype).reshape(-1))
        self._validate_structure()
        self._finish()

    def _validate_structure(self) -> None:
        n = self.node_left_.size
        if n == 0 or any(getattr(self, a).size != n for a in (
                "node_right_", "node_depth_", "node_position_", "node_rule_", "node_n_alike_", "node_n_other_")):
            raise ValueError("node arrays disagree in length")
        r = self.rule_feature_.size
        if any(getattr(self, a).size != r for a in ("rule_threshold_", "rule_left_", "rule_right_", "rule_alike_")):
            raise ValueError("rule arrays disagree in length")
        inner = self.node_left_ != NO_NODE
        for arr, size in ((self.node_left_[inner], n), (self.node_right_[inner], n), (self.node_rule_[inner], r)):
            if arr.size and (arr.min() < 0 or arr.max() >= size):
                raise ValueError("a node refers to a missing node or rule")
        if (self.node_depth_ > self.max_depth).any():
            raise ValueError("a node is deeper than max_depth")
        rule_inner = self.rule_left_ != NO_NODE
        for arr in (self.rule_left_[rule_inner], self.rule_right_[rule_inner]):
            if arr.size and (arr.min() < 0 or arr.max() >= r):
                raise ValueError("a rule node refers to a missing rule node")
        f = self.rule_feature_[rule_inner]
        if f.size and (f.min() < 0 or f.max() >= 2 * self.n_features_in_):
            raise ValueError("a rule uses a feature the tree does not have")

    def to_json(self) -> dict:
        """The researcher's export (``schema_version`` 1, ``kind`` "similarity_treerank"): parameters,
        the symmetric feature map, and one tree with its nodes (each split's LeafRank rule as a small
        tree on the symmetric features) and its leaves in rank order. ``json.dumps`` it as is."""
        self._check_fitted()
        return {"schema_version": SCHEMA_VERSION, "kind": KIND_TREE, "params": self._params(),
                **_feature_doc(self.n_features_in_), "trees": [_tree_doc(self)]}

    @classmethod
    def from_json(cls, doc: dict) -> SimilarityTreeRank:
        """Rebuild a tree from :meth:`to_json` output (scores exactly as the exported tree)."""
        _check_doc(doc, KIND_TREE)
        if len(doc["trees"]) != 1:
            raise ValueError("a similarity_treerank document holds exactly one tree")
        return _tree_from_doc(cls(**doc["params"]), doc["trees"][0], int(doc["n_features"]))


def _by_chunks(X1: np.ndarray, X2: np.ndarray, score_features) -> np.ndarray:
    """``score_features`` of the symmetric features of every pair, a bounded block of rows at a time."""
    rows = max(1, CHUNK_ELEMENTS // (2 * X1.shape[1]))
    if X1.shape[0] <= rows:
        return score_features(_sym(X1, X2))
    return np.concatenate([score_features(_sym(X1[i:i + rows], X2[i:i + rows]))
                           for i in range(0, X1.shape[0], rows)])


def _matrix(model, XA, XB, score_features) -> np.ndarray:
    model._check_fitted()
    XA = _check_features(XA, "XA")
    XB = _check_features(XB, "XB")
    p = model.n_features_in_
    if XA.shape[1] != p or XB.shape[1] != p:
        raise ValueError(f"items must have {p} features, got {XA.shape[1]} and {XB.shape[1]}")
    a, b = XA.shape[0], XB.shape[0]
    out = np.empty((a, b), dtype=np.float64)
    rows = max(1, CHUNK_ELEMENTS // max(1, b * 2 * p))
    for start in range(0, a, rows):
        xa = XA[start:start + rows]
        F = _sym(np.repeat(xa, b, axis=0), np.tile(XB, (xa.shape[0], 1)))
        out[start:start + xa.shape[0]] = score_features(F).reshape(xa.shape[0], b)
    return out


# ----------------------------------------------------------------------------------------
# JSON export (schema_version 1)
# ----------------------------------------------------------------------------------------
def _feature_doc(p: int) -> dict:
    return {"n_features": int(p),
            "symmetric_features": {
                "size": 2 * int(p),
                "definition": "f[k] = (x[k] + x'[k]) / sqrt(2) for k < n_features; "
                              "f[n_features + k] = |x[k] - x'[k]| / sqrt(2)",
                "rule": "a LeafRank node sends a pair to 'left' when f[feature] <= threshold"}}


def _rule_doc(tree: SimilarityTreeRank, root: int, p: int) -> list[dict]:
    out, index, stack = [], {}, [root]
    order = []
    while stack:  # pre-order, local ids 0.. in that order
        v = stack.pop()
        index[v] = len(order)
        order.append(v)
        if tree.rule_left_[v] != NO_NODE:
            stack.append(int(tree.rule_right_[v]))
            stack.append(int(tree.rule_left_[v]))
    for v in order:
        if tree.rule_left_[v] == NO_NODE:
            out.append({"id": index[v], "alike": bool(tree.rule_alike_[v])})
        else:
            f = int(tree.rule_feature_[v])
            out.append({"id": index[v], "feature": f, "transform": "sum" if f < p else "absdiff",
                        "item_feature": f % p, "threshold": float(tree.rule_threshold_[v]),
                        "left": index[int(tree.rule_left_[v])], "right": index[int(tree.rule_right_[v])]})
    return out


def _tree_doc(tree: SimilarityTreeRank) -> dict:
    p = tree.n_features_in_
    parent = np.full(tree.node_left_.size, NO_NODE)
    inner = np.flatnonzero(tree.node_left_ != NO_NODE)
    parent[tree.node_left_[inner]] = inner
    parent[tree.node_right_[inner]] = inner
    rank = {int(v): i for i, v in enumerate(tree.leaves_)}
    nodes = []
    for v in range(tree.node_left_.size):
        entry = {"id": v, "parent": None if parent[v] == NO_NODE else int(parent[v]),
                 "depth": int(tree.node_depth_[v]), "position": int(tree.node_position_[v]),
                 "n_alike": int(tree.node_n_alike_[v]), "n_not_alike": int(tree.node_n_other_[v])}
        if tree.node_left_[v] != NO_NODE:
            entry["alike_child"] = int(tree.node_left_[v])
            entry["other_child"] = int(tree.node_right_[v])
            entry["leafrank"] = _rule_doc(tree, int(tree.node_rule_[v]), p)
        else:
            entry["rank"] = rank[v]
            entry["score"] = float(tree.node_score_[v])
        nodes.append(entry)
    leaves = [{"node": int(v), "rank": i, "score": float(tree.node_score_[v]),
               "n_alike": int(tree.node_n_alike_[v]), "n_not_alike": int(tree.node_n_other_[v]),
               "mid_rank": float(tree.node_mid_rank_[v])} for i, v in enumerate(tree.leaves_)]
    fpr, tpr = tree.training_roc()
    return {"n_nodes": int(tree.node_left_.size), "n_leaves": tree.n_leaves_, "nodes": nodes, "leaves": leaves,
            "training_roc": {"fpr": fpr.tolist(), "tpr": tpr.tolist(),
                             "auc": float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) * 0.5))}}


def _check_doc(doc: dict, kind: str) -> None:
    if doc.get("kind") != kind:
        raise ValueError(f"not a {kind} document (kind={doc.get('kind')!r})")
    version = doc.get("schema_version")
    if not isinstance(version, int) or version < 1 or version > SCHEMA_VERSION:
        raise ValueError(f"unsupported schema_version {version!r} (this code reads 1..{SCHEMA_VERSION})")


def _tree_from_doc(tree: SimilarityTreeRank, doc: dict, p: int) -> SimilarityTreeRank:
    tree._check_params()
    nodes = sorted(doc["nodes"], key=lambda e: e["id"])
    if [e["id"] for e in nodes] != list(range(len(nodes))):
        raise ValueError("node ids must be 0..n_nodes-1")
    n = len(nodes)
    arrays = {name: np.full(n, NO_NODE, np.int64) for name in
              ("node_left", "node_right", "node_depth", "node_position", "node_rule", "node_n_alike", "node_n_other")}
    rules = _Rules()
    for e in nodes:
        v = e["id"]
        arrays["node_depth"][v] = e["depth"]
        arrays["node_position"][v] = e["position"]
        arrays["node_n_alike"][v] = e["n_alike"]
        arrays["node_n_other"][v] = e["n_not_alike"]
        if "leafrank" in e:
            arrays["node_left"][v] = e["alike_child"]
            arrays["node_right"][v] = e["other_child"]
            base = len(rules.feature)
            for r in sorted(e["leafrank"], key=lambda x: x["id"]):
                if "feature" in r:
                    rules.add(r["feature"], r["threshold"], base + r["left"], base + r["right"])
                else:
                    rules.add(alike=r["alike"])
            arrays["node_rule"][v] = base
    tree.n_features_in_ = p
    for name, value in arrays.items():
        setattr(tree, name + "_", value)
    tree.rule_feature_ = np.array(rules.feature, np.int64)
    tree.rule_threshold_ = np.array(rules.threshold, np.float64)
    tree.rule_left_ = np.array(rules.left, np.int64)
    tree.rule_right_ = np.array(rules.right, np.int64)
    tree.rule_alike_ = np.array(rules.alike, bool)
    tree._validate_structure()
    tree._finish()
    return tree


# ----------------------------------------------------------------------------------------
# ranking forest
# ----------------------------------------------------------------------------------------
class RankingForest(StateMixin):
    """Bagged similarity TreeRank trees aggregated by mean rank (Clémençon, Depecker & Vayatis 2013).

    Each tree is grown on its own sample of the training pairs (``max_samples`` of them, drawn
    with replacement when ``bootstrap``) with its own integer seed. A tree ranks a pair by the
    mid-rank of its leaf among that tree's training pairs (share ranked above plus half its own
    leaf's share), which puts trees with differently sized leaves on one scale; the forest score
    is ``1 - mean mid-rank`` in (0, 1), higher = more alike, exactly symmetric.

    Parameters as :class:`SimilarityTreeRank`, plus ``n_trees`` (int >= 1), ``max_samples``
    (None: as many as the training pairs; float in (0, 1]: that share; int: that many) and
    ``bootstrap`` (bool). ``estimators_`` holds the fitted trees, ``tree_seeds_`` their seeds.
    """

    def __init__(self, n_trees: int = 20, max_depth: int = 4, leafrank_depth: int = 2, min_samples_leaf: int = 5,
                 max_features: MaxFeatures = None, max_samples: int | float | None = None, bootstrap: bool = True,
                 max_bins: int = MAX_BINS, random_state: RandomState = None) -> None:
        store_params(self, locals())

    def _tree_params(self) -> dict:
        return {"max_depth": self.max_depth, "leafrank_depth": self.leafrank_depth,
                "min_samples_leaf": self.min_samples_leaf, "max_features": self.max_features,
                "max_bins": self.max_bins}

    def _check_params(self) -> None:
        check_int("n_trees", self.n_trees, 1)
        SimilarityTreeRank(**self._tree_params())._check_params()
        if not isinstance(self.bootstrap, bool):
            raise ValueError(f"bootstrap must be True or False, not {self.bootstrap!r}")
        ms = self.max_samples
        if ms is None:
            return
        if isinstance(ms, (numbers.Integral, np.integer)) and not isinstance(ms, bool):
            check_int("max_samples", ms, 1)
        elif not (isinstance(ms, numbers.Real) and not isinstance(ms, bool) and 0 < ms <= 1):
            raise ValueError(f"max_samples must be None, an int >= 1 or a float in (0, 1], not {ms!r}")

    def _params(self) -> dict:
        ms = self.max_samples
        return {"n_trees": int(self.n_trees), **SimilarityTreeRank(**self._tree_params())._params(),
                "max_samples": ms if ms is None or isinstance(ms, float) else int(ms),
                "bootstrap": bool(self.bootstrap),
                "random_state": json_seed(self.random_state)}

    def _n_samples(self, m: int) -> int:
        ms = self.max_samples
        if ms is None:
            return m
        if isinstance(ms, (numbers.Integral, np.integer)):
            return min(int(ms), m) if not self.bootstrap else int(ms)
        return max(1, int(round(ms * m)))

    def fit(self, X1: ArrayLike, X2: ArrayLike, y: ArrayLike) -> RankingForest:
        """Grow ``n_trees`` trees on row-aligned pairs (see :meth:`SimilarityTreeRank.fit`)."""
        self._check_params()
        X1, X2, alike = _check_training_pairs(X1, X2, y)
        rng = check_random_state(self.random_state)
        self.tree_seeds_ = rng.integers(0, 2**31 - 1, size=self.n_trees, dtype=np.int64)
        m = X1.shape[0]
        F = _sym(X1, X2)
        # one binning for every tree: thresholds come from all training pairs
        edges = _bin_edges(F, self.max_bins, np.random.default_rng(int(self.tree_seeds_[0])))
        codes = _bin_codes(F, edges)
        del F
        k = self._n_samples(m)
        self.estimators_ = []
        for seed in self.tree_seeds_:
            trng = np.random.default_rng(int(seed))
            rows = trng.integers(0, m, size=k) if self.bootstrap else np.sort(trng.choice(m, k, replace=False))
            tree = SimilarityTreeRank(**self._tree_params(), random_state=int(seed))
            tree._grow(codes, edges, alike, rows, X1.shape[1], trng)
            self.estimators_.append(tree)
        self.n_features_in_ = int(X1.shape[1])
        return self

    def fit_pairs(self, X: ArrayLike, pairs: ArrayLike, y: ArrayLike) -> RankingForest:
        """Fit on item features ``X`` (n, p) and item-index ``pairs`` (m, 2) labelled ``y``."""
        X = _check_features(X)
        pairs = _check_index_pairs(pairs, X.shape[0])
        return self.fit(X[pairs[:, 0]], X[pairs[:, 1]], y)

    def _check_fitted(self) -> None:
        if not hasattr(self, "estimators_"):
            raise ValueError("this RankingForest is not fitted yet; call fit first")

    def _score_features(self, F: np.ndarray) -> np.ndarray:
        total = np.zeros(F.shape[0], dtype=np.float64)
        for tree in self.estimators_:  # fixed order: identical sums for (x, x') and (x', x)
            total += tree.node_mid_rank_[tree._apply_features(F)]
        return 1.0 - total / len(self.estimators_)

    def score(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """Similarity of every pair, ndarray of shape (m,) in (0, 1): 1 - mean mid-rank over trees.

        Exactly symmetric: ``score(X1, X2) == score(X2, X1)``.
        """
        self._check_fitted()
        X1, X2 = _check_pairs_of(X1, X2)
        if X1.shape[1] != self.n_features_in_:
            raise ValueError(f"pairs have {X1.shape[1]} features, the forest was fitted on {self.n_features_in_}")
        return _by_chunks(X1, X2, self._score_features)

    def score_matrix(self, XA: ArrayLike, XB: ArrayLike) -> np.ndarray:
        """Scores of all pairs (a, b), ndarray of shape (len(XA), len(XB))."""
        return _matrix(self, XA, XB, self._score_features)

    @property
    def n_leaves_(self) -> list[int]:
        self._check_fitted()
        return [t.n_leaves_ for t in self.estimators_]

    STATE_VERSIONS = (STATE_VERSION,)
    _FITTED_ATTRIBUTE = "estimators_"

    def _fitted_state(self) -> dict:
        """JSON-safe: ``n_features``, ``tree_seeds`` and ``trees`` (each a :meth:`SimilarityTreeRank.to_state`)."""
        return {"n_features": int(self.n_features_in_), "tree_seeds": [int(s) for s in self.tree_seeds_],
                "trees": [t.to_state() for t in self.estimators_]}

    def _load_fitted(self, state: dict) -> None:
        self.n_features_in_ = int(state["n_features"])
        self.tree_seeds_ = np.asarray(state["tree_seeds"], dtype=np.int64).reshape(-1)
        self.estimators_ = [SimilarityTreeRank.from_state(t) for t in state["trees"]]
        if len(self.estimators_) != self.n_trees or self.tree_seeds_.size != self.n_trees:
            raise ValueError("the state's trees disagree with n_trees")
        if any(t.n_features_in_ != self.n_features_in_ for t in self.estimators_):
            raise ValueError("a tree of the state has another number of features")

    def to_json(self) -> dict:
        """The researcher's export (``schema_version`` 1, ``kind`` "ranking_forest"): as
        :meth:`SimilarityTreeRank.to_json` with one entry per tree (plus its ``seed``) in ``trees``
        and ``aggregation`` "mean_rank" (forest score = 1 - mean over trees of the pair's leaf
        ``mid_rank``)."""
        self._check_fitted()
        trees = [{"tree": i, "seed": int(s), **_tree_doc(t)}
                 for i, (s, t) in enumerate(zip(self.tree_seeds_, self.estimators_, strict=True))]
        return {"schema_version": SCHEMA_VERSION, "kind": KIND_FOREST, "params": self._params(),
                "aggregation": "mean_rank", **_feature_doc(self.n_features_in_), "trees": trees}

    @classmethod
    def from_json(cls, doc: dict) -> RankingForest:
        """Rebuild a forest from :meth:`to_json` output (scores exactly as the exported forest)."""
        _check_doc(doc, KIND_FOREST)
        forest = cls(**doc["params"])
        forest._check_params()
        if len(doc["trees"]) != forest.n_trees:
            raise ValueError("the document's trees disagree with n_trees")
        p = int(doc["n_features"])
        forest.n_features_in_ = p
        forest.tree_seeds_ = np.array([int(t["seed"]) for t in doc["trees"]], dtype=np.int64)
        forest.estimators_ = [
            _tree_from_doc(SimilarityTreeRank(**forest._tree_params(), random_state=int(t["seed"])), t, p)
            for t in doc["trees"]]
        return forest


# ----------------------------------------------------------------------------------------
# the paper's synthetic ground truth (§4 and appendix 6.4)
# ----------------------------------------------------------------------------------------
class GroundTruthTree:
    """A random ranking tree of depth ``depth`` over the symmetric-feature box [0, 1]^(2p), with
    known optimal ROC: the paper's synthetic setting (Clémençon & Vogel 2019, appendix 6.4).

    Cells ``l = 0..L`` (L = 2**depth - 1, left to right) come from splitting a uniformly chosen
    variable at a uniform value within the current cell. Alike pairs fall in cell l with
    probability ∝ δ^(l/L), other pairs ∝ δ^(-l/L), uniformly within the cell, so the likelihood
    ratio decreases with l and ranking by -l is optimal. A point (u, v) of the box (u sums,
    v >= 0 differences) is the pair x = (u + v)/√2, x' = (u - v)/√2 (order drawn at random),
    whose symmetric features are (u, v) again.
    """

    def __init__(self, n_features: int = 3, depth: int = 3, delta: float = 0.01,
                 random_state: RandomState = None) -> None:
        self.n_features = check_int("n_features", n_features, 1)
        self.depth = check_int("depth", depth, 1)
        if not 0.0 < delta < 1.0:
            raise ValueError(f"delta must lie in (0, 1), got {delta}")
        self.delta = float(delta)
        rng = check_random_state(random_state)
        d = 2 * self.n_features
        cells = [(np.zeros(d), np.ones(d))]
        for _ in range(self.depth):
            nxt = []
            for lo, hi in cells:  # heap order: left child then right child keeps cells left to right
                j = int(rng.integers(d))
                t = rng.uniform(lo[j], hi[j])
                lhi, rlo = hi.copy(), lo.copy()
                lhi[j], rlo[j] = t, t
                nxt += [(lo, lhi), (rlo, hi)]
            cells = nxt
        self.lower_ = np.array([c[0] for c in cells])
        self.upper_ = np.array([c[1] for c in cells])
        L = len(cells) - 1
        exponent = np.arange(L + 1) / L
        pos = self.delta ** exponent
        neg = self.delta ** (-exponent)
        self.alike_mass_ = pos / pos.sum()
        self.other_mass_ = neg / neg.sum()

    def optimal_roc(self) -> tuple[np.ndarray, np.ndarray]:
        """ROC* knots (fpr, tpr): cells taken in decreasing likelihood ratio."""
        return np.r_[0.0, np.cumsum(self.other_mass_)], np.r_[0.0, np.cumsum(self.alike_mass_)]

    def optimal_auc(self) -> float:
        fpr, tpr = self.optimal_roc()
        return float(np.sum(np.diff(fpr) * (tpr[1:] + tpr[:-1]) * 0.5))

    def sample(self, m: int, alike_share: float = 0.5,
               random_state: RandomState = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(X1, X2, y)``: m pairs, each alike with probability ``alike_share``."""
        rng = check_random_state(random_state)
        y = np.where(rng.random(m) < alike_share, 1, -1).astype(np.int64)
        cell = np.where(y > 0, rng.choice(self.alike_mass_.size, m, p=self.alike_mass_),
                        rng.choice(self.other_mass_.size, m, p=self.other_mass_))
        lo, hi = self.lower_[cell], self.upper_[cell]
        f = lo + rng.random(lo.shape) * (hi - lo)
        q = self.n_features
        u, v = f[:, :q], f[:, q:]
        a, b = (u + v) * _INV_SQRT2, (u - v) * _INV_SQRT2
        swap = rng.random(m) < 0.5
        X1 = np.where(swap[:, None], b, a)
        X2 = np.where(swap[:, None], a, b)
        return X1, X2, y

    def cell(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """Ground-truth cell of every pair (0 = most alike), from its symmetric features."""
        F = symmetric_features(X1, X2)
        inside = ((F[:, None, :] >= self.lower_[None]) & (F[:, None, :] <= self.upper_[None])).all(axis=2)
        return np.argmax(inside, axis=1)

    def optimal_score(self, X1: ArrayLike, X2: ArrayLike) -> np.ndarray:
        """An optimal similarity: minus the ground-truth cell."""
        return -self.cell(X1, X2).astype(np.float64)
