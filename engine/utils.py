"""Small helpers shared by every engine module: random state and state (de)serialisation.

Must never import Flask, Redis or anything outside numpy/scipy.
"""
from __future__ import annotations

import numbers

import numpy as np


def check_random_state(seed) -> np.random.Generator:
    """Turn ``seed`` into a ``numpy.random.Generator``.

    ``None`` gives fresh OS entropy, an int a reproducible generator, and a
    Generator is returned as it is (shared, like scikit-learn does).
    """
    if seed is None or isinstance(seed, (numbers.Integral, np.integer)):
        return np.random.default_rng(seed)
    if isinstance(seed, np.random.Generator):
        return seed
    raise ValueError(f"random_state must be None, an int or a numpy Generator, not {seed!r}")


def generator_state(rng: np.random.Generator) -> dict:
    """JSON-safe snapshot of a PCG64 generator, so a restored planner draws the same numbers."""
    state = rng.bit_generator.state
    if state["bit_generator"] != "PCG64":
        raise ValueError("only PCG64 generators can be saved")
    return {
        "bit_generator": "PCG64",
        "state": {"state": str(state["state"]["state"]), "inc": str(state["state"]["inc"])},
        "has_uint32": int(state["has_uint32"]),
        "uinteger": int(state["uinteger"]),
    }


def generator_from_state(saved: dict) -> np.random.Generator:
    """Inverse of :func:`generator_state`."""
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = {
        "bit_generator": "PCG64",
        "state": {"state": int(saved["state"]["state"]), "inc": int(saved["state"]["inc"])},
        "has_uint32": int(saved["has_uint32"]),
        "uinteger": int(saved["uinteger"]),
    }
    return rng


def check_int(name: str, value, minimum: int = 1, allow_none: bool = False) -> int | None:
    """``value`` as an int if it is an integer (not a bool) >= ``minimum`` (or None when
    ``allow_none``); ValueError naming ``name`` otherwise. The one integer check of the engine."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise ValueError(f"{name} must be an integer{' or None' if allow_none else ''}, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_n_items(n_items) -> int:
    if not isinstance(n_items, (numbers.Integral, np.integer)) or isinstance(n_items, bool):
        raise ValueError(f"n_items must be an integer, not {n_items!r}")
    if n_items < 3:
        raise ValueError(f"a study needs at least 3 items, got n_items={n_items}")
    return int(n_items)


# Counter-based randomness shared by the forests: a node's draws are a pure function of its tree's
# seed and its path, never of the order in which answers arrived.
GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def mix64(z) -> np.ndarray:
    """SplitMix64 finaliser, vectorised: a counter-based hash giving independent 64-bit words."""
    z = np.asarray(z, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = z + GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        return z ^ (z >> np.uint64(31))


def child_keys(keys: np.ndarray, side: int) -> np.ndarray:
    """The keys of the children on ``side`` (0 or 1) of nodes with ``keys``."""
    with np.errstate(over="ignore"):
        return mix64(np.asarray(keys, dtype=np.uint64) * np.uint64(2) + np.uint64(side + 1))


def group_starts(sorted_keys: np.ndarray) -> np.ndarray:
    """Indices where a new run of equal values starts in a sorted array."""
    if sorted_keys.size == 0:
        return np.empty(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
