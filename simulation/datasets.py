"""Loaders for the real data sets benchmarks and tests use, read with the standard library.

Data live outside the repository (``../shared/data`` next to it by default); pass
``data_dir`` to read them from elsewhere. Must never import Flask, Redis, RQ, ``workers`` or ``webapp``.
"""
from __future__ import annotations

import csv
import io
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np


def default_data_dir() -> Path:
    """``PROXIMA_DATA_DIR`` where set, else ``../shared/data`` relative to the repository root."""
    given = os.environ.get("PROXIMA_DATA_DIR")
    return Path(given) if given else Path(__file__).resolve().parents[1].parent / "shared" / "data"


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


def load_alien_eggs(data_dir: str | os.PathLike | None = None) -> AlienEggs:
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


@dataclass(frozen=True)
class Material:
    """Material-appearance triplets (Lagunas et al. 2019), one row per individual response.

    ``names`` the 100 material names (line i = item i); ``train`` / ``test`` int ndarrays of
    shape (n_responses, 3), rows ``(anchor, closer, farther)`` as one worker answered (a
    triplet asked to 4 workers who split 3:1 gives 3 rows one way and 1 the other).
    """

    names: list
    train: np.ndarray
    test: np.ndarray

    @property
    def n_items(self) -> int:
        return len(self.names)


def _material_split(path: Path) -> np.ndarray:
    import json

    with open(path, encoding="utf-8") as fh:
        data = json.load(fh)
    rows = []
    for (r, a, b), (n_a, n_b) in zip(data["answers"], data["agreement"], strict=True):
        rows += [(r, a, b)] * int(n_a) + [(r, b, a)] * int(n_b)
    return np.array(rows, dtype=np.int64).reshape(-1, 3)


def load_material(data_dir: str | os.PathLike | None = None) -> Material:
    """The material triplets: train 92,892 and test 11,800 responses over 100 items."""
    folder = Path(data_dir or default_data_dir()) / "material"
    names_path = folder / "material_names.txt"
    if not names_path.exists():
        raise FileNotFoundError(f"material data not found at {folder}")
    names = [line.strip() for line in names_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    train = _material_split(folder / "answers_processed_train.json")
    test = _material_split(folder / "answers_processed_test.json")
    return Material(names, train, test)


@dataclass(frozen=True)
class Food100Screen:
    """One Food-100 screen as a worker saw it: the ``probe`` (item index) on top, the ``grid`` of N dishes
    (item indices, in the order shown), the K ``picks`` "most similar to the probe" (in no order), whether it
    was a catch screen, the ``worker`` (the data set's worker id) and the ``timer_ms`` it was on screen."""

    probe: int
    grid: tuple
    picks: tuple
    is_catch: bool
    worker: int
    timer_ms: int


@dataclass(frozen=True)
class Food100:
    """Food-100's probe + grid screens (Wilber, Kwak & Belongie, HCOMP 2014): ``dishes`` the 100 image file
    names (line i = item i, sorted), ``screens`` every screen of the 37 runs (N in {2, 4, 8, 12, 16} dishes,
    K in {1, 2, 4} picks), in file and HIT order. A screen of N and K implies K x (N - K) triplets (probe;
    picked, not picked): the pick_k question kind's reading (``engine.kinds``)."""

    dishes: list
    screens: tuple

    @property
    def n_items(self) -> int:
        return len(self.dishes)


def load_food100(data_dir: str | os.PathLike | None = None) -> Food100:
    """The Food-100 screens: 19,150 of them (3,830 catch screens) by 243 workers over 100 dishes."""
    import json

    path = Path(data_dir or default_data_dir()) / "food100" / "food100_grids.zip"
    if not path.exists():
        raise FileNotFoundError(f"Food-100 screens not found at {path}")
    with zipfile.ZipFile(path) as zf:
        runs = [json.loads(zf.read(name)) for name in sorted(zf.namelist()) if name.endswith(".json")]
    raw = [(hit, s) for run in runs for hit in run for s in hit["HIT_screens"]]
    dishes = sorted({Path(x).name for _, s in raw for x in (s["probe"], *s["images"])})
    index = {d: i for i, d in enumerate(dishes)}

    def of(x: str) -> int:
        return index[Path(x).name]

    screens = tuple(Food100Screen(of(s["probe"]), tuple(of(x) for x in s["images"]),
                                  tuple(of(x) for x in s["near_answer"]), bool(s["is_catchtrial"]),
                                  int(hit["worker_id"]), int(s["timer"])) for hit, s in raw)
    return Food100(dishes, screens)
