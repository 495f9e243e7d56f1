"""The ratings a rating learner has taken: pairs, distances and who gave them (raters as codes), and the
triplets it has taken, each with its own state round trip. Numpy only; must never import Flask, Redis, RQ,
``webapp`` or ``workers``.
"""
from __future__ import annotations

import json
import numbers
from collections.abc import Hashable, Sequence

import numpy as np

#: code of a rating whose rater is not named
UNKNOWN_RATER = -1


def rater_key(rater: Hashable) -> str | int | None:
    """The JSON-safe key a rater id is kept under: strings and whole numbers as they are, anything else
    (a tuple, a float) by its text."""
    if rater is None or isinstance(rater, str):
        return rater
    if isinstance(rater, (numbers.Integral, np.integer)) and not isinstance(rater, bool):
        return int(rater)
    return str(rater)


def _encoded(keys: Sequence[str | int]) -> bytes:
    """Rater keys as the state keeps them: UTF-8 text, one JSON value a line (rows are only ever added)."""
    return "".join(json.dumps(k) + "\n" for k in keys).encode()


def _decoded(data: np.ndarray | Sequence[int]) -> list[str | int]:
    """Inverse of :func:`_encoded` (the bytes as an array or, through JSON, a list of numbers)."""
    return [json.loads(line) for line in np.asarray(data, np.uint8).tobytes().decode().splitlines()]


class RatingLog:
    """Every rating taken, in order: ``pairs`` (T, 2) with i < j, ``values`` (T,) distances in [0, 1],
    ``raters`` (T,) codes into ``rater_ids`` (:data:`UNKNOWN_RATER` where none was named).

    The state keeps the rater ids encoded (:func:`_encoded`, ``rater_ids_utf8``) as one uint8 array that only
    grows at its end,
    as the ratings do: a pass's journal entry holds the new raters' ids only, not every id in the state's
    JSON skeleton (1,000 raters: the skeleton walked and encoded every pass was a third of a pass's state
    cost)."""

    def __init__(self) -> None:
        self.rater_ids: list[str | int] = []
        self._codes: dict[str | int, int] = {}
        self._ids = np.empty(0, np.uint8)
        self._ids_size = 0
        self._pairs = np.empty((0, 2), np.int64)
        self._values = np.empty(0, np.float64)
        self._raters = np.empty(0, np.int64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def pairs(self) -> np.ndarray:
        return self._pairs[: self._size]

    @property
    def values(self) -> np.ndarray:
        return self._values[: self._size]

    @property
    def raters(self) -> np.ndarray:
        return self._raters[: self._size]

    @property
    def n_raters(self) -> int:
        return len(self.rater_ids)

    def code(self, rater: Hashable) -> int:
        key = rater_key(rater)
        if key is None:
            return UNKNOWN_RATER
        code = self._codes.get(key)
        if code is None:
            code = self._codes[key] = len(self.rater_ids)
            self.rater_ids.append(key)
            self._append_ids(_encoded([key]))
        return code

    def _append_ids(self, data: bytes) -> None:
        stop = self._ids_size + len(data)
        if stop > len(self._ids):
            self._ids = np.resize(self._ids, max(stop, 2 * len(self._ids), 1024))
        self._ids[self._ids_size: stop] = np.frombuffer(data, np.uint8)
        self._ids_size = stop

    def add(self, pairs: np.ndarray, values: np.ndarray, raters: Sequence[Hashable]) -> tuple[int, int]:
        """Append ratings; returns the (start, stop) of their rows."""
        codes = np.array([self.code(r) for r in raters], np.int64)
        start, stop = self._size, self._size + len(values)
        if stop > len(self._values):
            cap = max(stop, 2 * len(self._values), 64)
            self._pairs = np.resize(self._pairs, (cap, 2))
            self._values = np.resize(self._values, cap)
            self._raters = np.resize(self._raters, cap)
        self._pairs[start:stop] = np.sort(pairs, axis=1)
        self._values[start:stop] = values
        self._raters[start:stop] = codes
        self._size = stop
        return start, stop

    def to_state(self) -> dict:
        """The ratings as views, not copies: rows already taken are never written again (a growth moves
        the log to new arrays), so a state handed out stays as it was; copying the whole log every pass
        cost a live study's worker O(ratings) per pass."""
        return {"pairs": self.pairs, "values": self.values, "raters": self.raters,
                "rater_ids_utf8": self._ids[: self._ids_size]}

    @classmethod
    def from_state(cls, state: dict) -> RatingLog:
        log = cls()
        if "rater_ids_utf8" in state:
            log.rater_ids = _decoded(state["rater_ids_utf8"])
        else:  # a state saved before the ids were encoded lists them
            log.rater_ids = [rater_key(r) for r in state["rater_ids"]]
        log._codes = {r: c for c, r in enumerate(log.rater_ids)}
        log._append_ids(_encoded(log.rater_ids))
        log._pairs = np.asarray(state["pairs"], np.int64).reshape(-1, 2).copy()
        log._values = np.asarray(state["values"], np.float64).copy()
        log._raters = np.asarray(state["raters"], np.int64).copy()
        log._size = len(log._values)
        return log


class TripletLog:
    """Every triplet taken, in order: ``rows`` (S, 3) of ``(h, w, l)``, w judged closer to h than l."""

    def __init__(self) -> None:
        self._rows = np.empty((0, 3), np.int64)
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def rows(self) -> np.ndarray:
        return self._rows[: self._size]

    def add(self, rows: np.ndarray) -> None:
        stop = self._size + len(rows)
        if stop > len(self._rows):
            self._rows = np.resize(self._rows, (max(stop, 2 * len(self._rows), 64), 3))
        self._rows[self._size: stop] = rows
        self._size = stop

    def to_state(self) -> dict:
        return {"triplets": self.rows}  # a view: as the ratings' (RatingLog.to_state)

    @classmethod
    def from_state(cls, state: dict) -> TripletLog:
        """The log a state saved (none in a state saved before triplets were taken)."""
        log = cls()
        log._rows = np.asarray(state.get("triplets", np.empty((0, 3))), np.int64).reshape(-1, 3).copy()
        log._size = len(log._rows)
        return log
