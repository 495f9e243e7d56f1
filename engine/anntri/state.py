"""ANNTri's state I/O: ``to_state``/``from_state`` as plain arrays + JSON values, and changed rows.

The state is the planner's parameters and the parts of its :class:`.estimates.Estimates` and
:class:`.rounds.Rounds`. Every writer of the (n, n) arrays records its rows, so
``to_state(copy=False)`` tells a caller which rows changed since an earlier state
(:class:`RowChanges`, defined with the estimates and importable from here). Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..utils import generator_from_state, generator_state
from .estimates import Estimates, RowChanges, RowTracked

__all__ = ["PARAM_NAMES", "STATE_VERSION", "RowChanges", "RowTracked", "params_state", "parts_from_state",
           "parts_state"]
from .rounds import Rounds

#: 2 added params['stagger'], 3 params['symmetric'], 4 head-based states without ``upper``/``lower``
#: (``tight_*`` instead) and float32 means above FLOAT64_MAX_ITEMS. Only this version loads.
STATE_VERSION = 4


#: the constructor arguments saved in ``params``, in order
PARAM_NAMES = ("n_items", "k", "delta", "sigma", "bound", "triangle", "max_samples_per_round", "window",
               "random_state", "full_pass_every", "lookahead", "stagger", "symmetric")


def params_state(values: dict) -> dict:
    """The state's ``params``: the constructor arguments as JSON values (a generator seed: None)."""
    rs = values["random_state"]
    msr, fpe = values["max_samples_per_round"], values["full_pass_every"]
    return {
        "n_items": int(values["n_items"]),
        "k": int(values["k"]),
        "delta": float(values["delta"]),
        "sigma": float(values["sigma"]),
        "bound": str(values["bound"]),
        "triangle": bool(values["triangle"]),
        "max_samples_per_round": None if msr is None else int(msr),
        "window": int(values["window"]),
        "random_state": int(rs) if isinstance(rs, (numbers.Integral, np.integer)) else None,
        "full_pass_every": None if fpe is None else int(fpe),
        "lookahead": float(values["lookahead"]),
        "stagger": bool(values["stagger"]),
        "symmetric": bool(values["symmetric"]),
    }


def parts_state(est: Estimates, rounds: Rounds, rng: np.random.Generator, copy: bool) -> dict:
    """The state of an initialized planner's parts, in the layout of ``ANNTri.to_state`` (the
    estimates in sync); ``copy=False`` hands out their own arrays, the (n, n) ones as
    :class:`RowTracked` views labelled with ``est.changes()``."""
    state: dict = {"rng": generator_state(rng)}
    round_part = rounds.to_state()
    state["open_rounds"] = round_part.pop("open_rounds")
    state["dirty"] = est.dirty_state()
    for name in Rounds.SCALARS:
        state[name] = round_part.pop(name)
    arrays = {**est.arrays(), **round_part}
    changes = None if copy else est.changes()
    for name, arr in arrays.items():
        if copy:
            arr = np.array(arr, copy=True)
        elif name in est.SQUARE:
            arr = arr.view(RowTracked)
            arr.row_changes = changes
        state[name] = arr
    if est.derived:
        state.update(est.tight_state())
    return state


def parts_from_state(state: dict, n_items: int, k: int, delta: float, sigma: float, bound: str,
                     symmetric: bool) -> tuple[Estimates, Rounds, np.random.Generator]:
    """The estimates, rounds and generator an initialized planner's state holds (copied)."""
    est = Estimates.from_state(state, n_items, delta, sigma, bound, symmetric)
    return est, Rounds.from_state(state, n_items, k), generator_from_state(state["rng"])
