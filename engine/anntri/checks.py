"""Checks of the pair rows ANNTri's planners take (answers ``(i, j, value)``, questions ``(i, j)``).

One validator for long batches (numpy) and one for short lists (plain Python, the fast paths' input).
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

#: Batches of at most this many answers are applied with scalar updates (no numpy dispatch).
SMALL_BATCH = 16


def check_pairs(pairs: ArrayLike, n_items: int, width: int,
                what: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of ``width`` numbers whose first two entries are distinct item indices in range:
    returns the two index columns as int arrays and the rows as a float array."""
    rows = list(pairs) if not isinstance(pairs, np.ndarray) else pairs
    if len(rows) == 0:
        empty = np.empty(0, dtype=np.int64)
        return empty, empty, np.empty((0, width), dtype=np.float64)
    try:
        if isinstance(rows, list) and set(map(len, rows)) == {width}:
            # Much faster than np.asarray on a list of tuples.
            arr = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.float64,
                              count=width * len(rows)).reshape(-1, width)
        else:
            arr = np.asarray(rows, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} must be rows of {width} numbers: {exc}") from None
    if arr.ndim != 2 or arr.shape[1] != width:
        raise ValueError(f"{what} must be rows of {width} numbers, got shape {arr.shape}")
    idx = arr[:, :2]
    with np.errstate(invalid="ignore"):
        as_int = idx.astype(np.int64)
    if not np.array_equal(as_int, idx):  # also catches NaN and ±inf
        raise ValueError(f"{what}: item indices must be integers")
    if as_int.min() < 0 or as_int.max() >= n_items:
        raise ValueError(f"{what}: item indices must lie in 0..{n_items - 1}")
    a, b = as_int[:, 0], as_int[:, 1]
    if np.any(a == b):
        raise ValueError(f"{what}: a pair needs two different items (i == j)")
    return a, b, arr


def small_rows(rows: Sequence, n_items: int, width: int, what: str) -> list[tuple] | None:
    """:func:`check_pairs` for a short list of rows, in plain Python: validated tuples
    ``(i, j[, value])`` with int indices and a float value, or None for long inputs."""
    if not isinstance(rows, (list, tuple)) or len(rows) > SMALL_BATCH:
        return None
    out = []
    for row in rows:
        if len(row) != width:
            raise ValueError(f"{what} must be rows of {width} numbers, got a row of {len(row)}")
        a, b = row[0], row[1]
        if type(a) is not int or type(b) is not int:  # noqa: E721 -- plain ints skip the checks below
            try:
                fa, fb = float(a), float(b)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{what} must be rows of {width} numbers: {exc}") from None
            if not (math.isfinite(fa) and math.isfinite(fb) and fa == math.floor(fa) and fb == math.floor(fb)):
                raise ValueError(f"{what}: item indices must be integers")
            a, b = int(fa), int(fb)
        if not (0 <= a < n_items and 0 <= b < n_items):
            raise ValueError(f"{what}: item indices must lie in 0..{n_items - 1}")
        if a == b:
            raise ValueError(f"{what}: a pair needs two different items (i == j)")
        if width == 3:
            try:
                v = float(row[2])
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{what} must be rows of {width} numbers: {exc}") from None
            if not math.isfinite(v):
                raise ValueError(f"{what}: values must be finite numbers")
            out.append((a, b, v))
        else:
            out.append((a, b))
    return out
