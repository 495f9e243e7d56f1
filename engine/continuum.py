"""A line through the items of a fitted map: the start of a one-dimensional fit (a continuum such as
morphs or a scale), shared by candidate duels' refits and the embedding's model choice. Numpy/scipy
only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import dijkstra
from scipy.spatial import cKDTree

#: items whose nearest neighbours (in the map) make the graph a continuum's order is read from
CONTINUUM_NEIGHBOURS = 10
#: length of a continuum's first start (in units of the human model's logistic scale; the alien eggs
#: span ~13: the fitted scale is 0.075 of their range)
CONTINUUM_SPAN = 10.0


def continuum_start(X: np.ndarray) -> np.ndarray:
    """A line through the items of the fit X (n, d), as a start for a 1-D fit: the items in the order
    of their geodesic distance (along the graph of each item's ``CONTINUUM_NEIGHBOURS`` nearest) from
    one end of the graph (the item farthest from the item farthest from item 0), evenly spaced over
    ``CONTINUUM_SPAN``; items the graph does not reach come last. O(n k log n): a k-d tree and two
    Dijkstra runs, so it is cheap at any study size. Returns shape (n, 1)."""
    n = len(X)
    k = min(CONTINUUM_NEIGHBOURS, n - 1)
    dist, nb = cKDTree(X).query(X, k=k + 1)
    rows = np.repeat(np.arange(n), k)
    graph = csr_matrix((np.maximum(dist[:, 1:].ravel(), 1e-12), (rows, nb[:, 1:].ravel())), shape=(n, n))
    far = 0
    for _ in range(2):
        geo = dijkstra(graph, directed=False, indices=far)
        far = int(np.argmax(np.where(np.isfinite(geo), geo, -1.0)))
    geo = dijkstra(graph, directed=False, indices=far)
    order = np.lexsort((np.arange(n), np.where(np.isfinite(geo), geo, np.inf)))
    line = np.empty(n)
    line[order] = np.linspace(0.0, CONTINUUM_SPAN, n)
    return line[:, None]
