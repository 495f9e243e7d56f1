"""Loaders for the real data sets benchmarks and tests use, read with the standard library.

Data live outside the repository (``../shared/data`` next to it by default); pass
``data_dir`` to read them from elsewhere. Must never import Flask or Redis.
"""
from __future__ import annotations

import csv
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def default_data_dir() -> Path:
    """``../shared/data`` relative to the repository root."""
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


@dataclass(frozen=True)
class AlienEggs:
    """NEXT "alien egg" triplets with a 1-D ground truth.

    ``items`` the item ids (``iNNNN``), ``coordinates`` ndarray of shape (n_items,) (the
    integer NNNN), ``triplets`` int ndarray of shape (n_answers, 3), rows ``(i, j, k)``
    meaning a person judged i closer to j than to k.
    """

    items: list
    coordinates: np.ndarray
    triplets: np.ndarray

    @property
    def distances(self) -> np.ndarray:
        """Ground-truth |x_i − x_j|, scaled to [0, 1]."""
        x = self.coordinates.astype(np.float64)
        D = np.abs(x[:, None] - x[None, :])
        return D / D.max()


def load_alien_eggs(data_dir=None) -> AlienEggs:
    path = Path(data_dir or default_data_dir()) / "alien_eggs" / "responses.csv.zip"
    if not path.exists():
        raise FileNotFoundError(f"alien-egg responses not found at {path}")
    with zipfile.ZipFile(path) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".csv"))
        rows = list(csv.DictReader(io.TextIOWrapper(zf.open(name), encoding="utf-8")))
    ids = sorted({r[c] for r in rows for c in ("Center", "Left", "Right")}, key=lambda s: int(s[1:]))
    index = {s: i for i, s in enumerate(ids)}
    trip = []
    for r in rows:
        head, left, right, ans = r["Center"], r["Left"], r["Right"], r["Answer"]
        if ans not in (left, right):
            continue
        other = right if ans == left else left
        trip.append((index[head], index[ans], index[other]))
    coords = np.array([int(s[1:]) for s in ids], dtype=np.int64)
    return AlienEggs(ids, coords, np.array(trip, dtype=np.int64))
