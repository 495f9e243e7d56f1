"""Triangle-inequality bounds on unknown distances, kept as a Floyd–Warshall-like fixpoint.

``upper`` and ``lower`` are ndarrays of shape (n_items, n_items), symmetric, zero diagonal,
holding the tightest known bounds U* and L* on every distance (+∞ / 0 when unknown). Through
any third item i (Lemma 3.1 of Mason, Tripathy & Nowak 2019):

    U*[j, k] <= U*[i, j] + U*[i, k]
    L*[j, k] >= max(L*[i, j] - U*[i, k], L*[i, k] - U*[i, j], 0)

Every function here tightens the bounds in place and only ever applies these two rules, so
bounds that contain the true distances keep containing them. Costs: :func:`update_pair`
O(n), :func:`update_pairs` O(m·n) for m pairs in a few vectorised steps, :func:`refresh_row`
O(n²), :func:`full_pass` O(n³) as n vectorised O(n²) pivot steps; nothing loops over
triples (or pairs) in Python. Must never import Flask, Redis or anything
outside numpy.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

#: Rows of the i-axis processed at once by :func:`refresh_row`, to bound temporary memory.
REFRESH_CHUNK = 256
#: Entries (pair ends × n_items) :func:`update_pairs` gathers at once, to bound temporary memory.
UPDATE_CHUNK_ELEMENTS = 1 << 22
#: :func:`update_pairs` handles at most this many pairs of float64 matrices row by row.
SMALL_UPDATE_PAIRS = 8


def _write_row(upper, lower, j, new_upper, new_lower):
    new_upper[j] = 0.0
    new_lower[j] = 0.0
    upper[j, :] = new_upper
    upper[:, j] = new_upper
    lower[j, :] = new_lower
    lower[:, j] = new_lower


def update_pair(upper: np.ndarray, lower: np.ndarray, i: int, j: int) -> None:
    """Propagate new bounds on d(i, j) into rows i and j (and their columns), in O(n).

    Call after ``upper[i, j]``/``lower[i, j]`` (and the mirrored entries) were tightened.
    Only paths through the edge (i, j) can have improved, so only rows i and j change.
    """
    u = upper[i, j]
    lo = lower[i, j]
    for a, b in ((i, j), (j, i)):
        ub = upper[b]
        lb = lower[b]
        new_u = np.minimum(upper[a], u + ub)
        new_l = np.maximum(lower[a], lo - ub)
        np.maximum(new_l, lb - u, out=new_l)
        # Keep the freshly sampled entry itself (u + 0 and lo - 0 are already in).
        _write_row(upper, lower, a, new_u, new_l)


def update_pairs(upper: np.ndarray, lower: np.ndarray, i: ArrayLike, j: ArrayLike) -> None:
    """:func:`update_pair` for many pairs at once, vectorised: rows ``i[t]`` and ``j[t]`` are
    tightened through the edges (i[t], j[t]) in O(m·n) numpy work for m pairs.

    Every candidate bound is computed from the rows as they were before the call (one hop
    per edge; :func:`update_pair` applied in a loop may chain two new edges), so the result
    is sound and at most as tight as the loop; :func:`refresh_row` and :func:`full_pass`
    close the remaining paths.
    """
    i = np.asarray(i, dtype=np.int64).ravel()
    j = np.asarray(j, dtype=np.int64).ravel()
    if len(i) == 0:
        return
    if len(i) <= SMALL_UPDATE_PAIRS and upper.dtype == np.float64 and lower.dtype == np.float64:
        _update_few_pairs(upper, lower, i.tolist(), j.tolist())
        return
    n = upper.shape[0]
    a = np.concatenate([i, j])  # row a gains paths through its partner b
    b = np.concatenate([j, i])
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    u = upper[a, b].astype(np.float64)
    lo = lower[a, b].astype(np.float64)
    starts = np.flatnonzero(np.r_[True, a[1:] != a[:-1]])
    rows = a[starts]
    # Stored in the matrices' dtype: rounding is monotone, so min/max then round equals
    # round then min/max, and float32 matrices need half the temporary memory.
    new_u = upper[rows]
    new_l = lower[rows]
    per_chunk = max(1, UPDATE_CHUNK_ELEMENTS // n)
    e0 = 0
    while e0 < len(a):  # at most per_chunk pair ends at a time, even within one row's group
        e1 = min(e0 + per_chunk, len(a))
        g0 = int(np.searchsorted(starts, e0, side="right")) - 1
        g1 = int(np.searchsorted(starts, e1 - 1, side="right"))
        Ub = upper[b[e0:e1]]  # U*[b, :]
        Lb = lower[b[e0:e1]]
        ue = u[e0:e1, None]
        with np.errstate(invalid="ignore"):
            cand_u = ue + Ub
            cand_l = np.maximum(lo[e0:e1, None] - Ub, Lb - ue)
        seg = np.maximum(starts[g0:g1], e0) - e0
        new_u[g0:g1] = np.minimum(new_u[g0:g1], np.minimum.reduceat(cand_u, seg, axis=0))
        new_l[g0:g1] = np.maximum(new_l[g0:g1], np.maximum.reduceat(cand_l, seg, axis=0))
        e0 = e1
    # Two updated rows meet at (r1, r2) and (r2, r1): keep the tighter of both, symmetric,
    # in tiles of rows (min/max are idempotent, so a tile may read an already-merged one).
    tile = max(1, UPDATE_CHUNK_ELEMENTS // max(len(rows), 1))
    for t0 in range(0, len(rows), tile):
        t1 = min(t0 + tile, len(rows))
        new_u[t0:t1, rows] = np.minimum(new_u[t0:t1][:, rows], new_u[:, rows[t0:t1]].T)
        new_l[t0:t1, rows] = np.maximum(new_l[t0:t1][:, rows], new_l[:, rows[t0:t1]].T)
    _write_rows(upper, lower, rows, new_u, new_l)


def _write_rows(upper: np.ndarray, lower: np.ndarray, rows, new_u: np.ndarray, new_l: np.ndarray) -> None:
    """Store the tightened ``rows`` (``new_u``/``new_l`` of shape (len(rows), n)) into both
    matrices, rows and mirrored columns, with a zero diagonal and lower bounds of at least 0."""
    k = np.arange(len(rows))
    new_u[k, rows] = 0.0
    new_l[k, rows] = 0.0
    np.maximum(new_l, 0.0, out=new_l)
    upper[rows, :] = new_u
    upper[:, rows] = new_u.T
    lower[rows, :] = new_l
    lower[:, rows] = new_l.T


def _update_few_pairs(upper: np.ndarray, lower: np.ndarray, i: list, j: list) -> None:
    """:func:`update_pairs` for a handful of pairs on float64 matrices, row by row: the same
    candidates (one hop per edge, read before any write), the same min/max (exact in
    float64, so their order does not matter) and the same symmetric write-back, without the
    sorting and segment reductions that cost more than the arithmetic for so few rows."""
    partners: dict[int, list[int]] = {}
    for x, y in zip(i, j, strict=True):
        partners.setdefault(x, []).append(y)
        partners.setdefault(y, []).append(x)
    rows = sorted(partners)
    new_u = upper[rows]
    new_l = lower[rows]
    with np.errstate(invalid="ignore"):
        for k, x in enumerate(rows):
            nu, nl = new_u[k], new_l[k]
            for y in partners[x]:
                u = upper[x, y]
                lo = lower[x, y]
                uy = upper[y]
                np.minimum(nu, u + uy, out=nu)
                np.maximum(nl, lo - uy, out=nl)
                np.maximum(nl, lower[y] - u, out=nl)
    cross = new_u[:, rows]
    new_u[:, rows] = np.minimum(cross, cross.T)
    cross = new_l[:, rows]
    new_l[:, rows] = np.maximum(cross, cross.T)
    _write_rows(upper, lower, rows, new_u, new_l)


def refresh_row(upper: np.ndarray, lower: np.ndarray, j: int, chunk: int = REFRESH_CHUNK) -> None:
    """Tighten row j through every third item in one O(n²) sweep (a round opening needs it)."""
    n = upper.shape[0]
    uj = upper[j].copy()
    lj = lower[j].copy()
    new_u = uj.copy()
    new_l = lj.copy()
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        U_blk = upper[start:stop]  # rows i of the chunk: U*[i, :]
        L_blk = lower[start:stop]
        uji = uj[start:stop, None]  # U*[j, i]
        lji = lj[start:stop, None]
        with np.errstate(invalid="ignore"):
            np.minimum(new_u, (uji + U_blk).min(axis=0), out=new_u)
            np.maximum(new_l, (lji - U_blk).max(axis=0), out=new_l)
            np.maximum(new_l, (L_blk - uji).max(axis=0), out=new_l)
    _write_row(upper, lower, j, new_u, new_l)


def full_pass(upper: np.ndarray, lower: np.ndarray) -> None:
    """One Floyd–Warshall sweep over every pivot item: O(n³) work in n vectorised steps.

    After the sweep ``upper`` is closed under the triangle rule (shortest paths); the lower
    bounds get every single-pivot improvement against those closed upper bounds.
    """
    n = upper.shape[0]
    buf = np.empty_like(upper)
    for i in range(n):
        ui = upper[i]
        np.add(ui[:, None], ui[None, :], out=buf)
        np.minimum(upper, buf, out=upper)
    for i in range(n):
        ui = upper[i]
        li = lower[i]
        with np.errstate(invalid="ignore"):
            np.subtract(li[:, None], ui[None, :], out=buf)  # L*[i, j] - U*[i, k] at [j, k]
        np.maximum(lower, buf, out=lower)
        np.maximum(lower, buf.T, out=lower)
    np.fill_diagonal(upper, 0.0)
    np.fill_diagonal(lower, 0.0)
    np.maximum(lower, 0.0, out=lower)


def closure_reference(upper: np.ndarray, lower: np.ndarray, sweeps: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Slow, obviously-correct fixpoint for tests: repeated all-pivot relaxations on copies."""
    U = np.array(upper, dtype=np.float64)
    L = np.array(lower, dtype=np.float64)
    for _ in range(sweeps):
        with np.errstate(invalid="ignore"):
            U = np.minimum(U, (U[:, :, None] + U[:, None, :]).min(axis=0))
            t = (L[:, :, None] - U[:, None, :]).max(axis=0)
            L = np.maximum(L, np.maximum(t, t.T))
    return U, L
