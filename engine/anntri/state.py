"""ANNTri's state I/O: ``to_state``/``from_state`` as plain arrays + JSON values, and changed rows.

The state is the planner's parameters and the parts of its :class:`.estimates.Estimates` and
:class:`.rounds.Rounds`. Every writer of the (n, n) arrays records its rows, so
``to_state(copy=False)`` tells a caller which rows changed since an earlier state
(:class:`RowChanges`, defined with the estimates and importable from here). Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numbers
from typing import Self

import numpy as np
from numpy.typing import ArrayLike

from ..utils import check_state, generator_from_state, generator_state
from .estimates import Estimates, RowChanges, RowTracked

__all__ = ["STATE_VERSION", "RowChanges", "RowTracked", "StateIO"]
from .rounds import Rounds

#: 2 added params['stagger'], 3 params['symmetric'], 4 head-based states without ``upper``/``lower``
#: (``tight_*`` instead) and float32 means above FLOAT64_MAX_ITEMS. Only this version loads.
STATE_VERSION = 4

class StateIO:
    """Mixin of the planner (``engine.anntri.planner``): its state out and back, and which rows changed."""

    #: False for the planners whose constructor fixes ``triangle`` (ANN, RandomSampling)
    _takes_triangle = True

    #: the state arrays as planner attributes (benchmarks/anntri_speed.py sums their sizes)
    _ARRAYS = ("mean_", "count_", "pending_", "upper_", "lower_", "order_", "status_",
               "round_issued_", "neighbors_", "refresh_mark_")

    def _start_tracking(self):
        """The results' caches, recomputed where rows changed since (the estimates track the rows
        written: ``Estimates.fold``, :class:`RowChanges`)."""
        self._best_cache = None  # (tick, rows' best) of current_neighbors
        self._sums_cache = None  # (tick, count and pending row sums) of progress

    def mark_rows(self, rows: ArrayLike) -> None:
        """Tell the planner that rows of its (n, n) arrays were written from outside (e.g. a caller
        adding to ``pending_``), so the next ``to_state(copy=False)`` reports them as changed and
        :meth:`current_neighbors` recomputes them. Writers from outside must call it: an unreported
        write is missing from a row-limited diff and from the cached neighbours."""
        if self._est is not None:
            self._est.touched.update(int(r) for r in np.atleast_1d(rows).tolist())

    def _params(self) -> dict:
        rs = self.random_state
        return {
            "n_items": int(self.n_items),
            "k": int(self.k),
            "delta": float(self.delta),
            "sigma": float(self.sigma),
            "bound": str(self.bound),
            "triangle": bool(self.triangle),
            "max_samples_per_round": None if self.max_samples_per_round is None else int(self.max_samples_per_round),
            "window": int(self.window),
            "random_state": int(rs) if isinstance(rs, (numbers.Integral, np.integer)) else None,
            "full_pass_every": None if self.full_pass_every is None else int(self.full_pass_every),
            "lookahead": float(self.lookahead),
            "stagger": bool(self.stagger),
            "symmetric": bool(self.symmetric),
        }

    def to_state(self, copy: bool = True) -> dict:
        """Plain numpy arrays + JSON-safe values (never pickle); see :func:`planner_from_state`.

        Layout: ``{"version", "class", "params": {...constructor arguments},
        "initialized": bool}`` and, once initialized, ``"rng"`` (JSON generator state),
        ``"open_rounds"`` (list of ints), the int scalars ``next_round``, ``n_samples``,
        ``n_issued``, ``rounds_since_full_pass`` and the arrays ``mean``, ``count``,
        ``pending``, ``upper``, ``lower`` (n, n), ``order``, ``status``, ``round_issued``,
        ``refresh_mark`` (n,: questions round j had issued at its row's last refresh),
        ``neighbors`` (n, k) and ``dirty`` (m,): the pairs ``i * n + j`` (i < j) sampled since
        the last triangle step, oldest first. ``params["window"]`` is the live window, changed or
        not since construction. A head-based planner (``symmetric=False``) has no ``upper``/``lower``:
        its bounds follow from ``mean`` and ``count`` except at the pairs ``tight_keys``
        (``i * n + j``, sorted) whose running intersection is tighter, given by ``tight_upper``
        and ``tight_lower``; its ``mean`` is float32 above ``FLOAT64_MAX_ITEMS`` items while every
        answer is 0 or 1 (read back exactly as k / count).

        ``copy=False`` hands out the planner's own arrays (no copy: they change with the planner,
        so use them before the next call), the (n, n) ones as :class:`RowTracked` views whose
        ``row_changes`` tell which rows changed since an earlier such state of this planner.
        """
        state = {
            "version": STATE_VERSION,
            "class": type(self).__name__,
            "params": self._params(),
            "initialized": self._est is not None,
        }
        if state["initialized"]:
            state["rng"] = generator_state(self.rng_)
            est = self._synced  # writes the overlay back
            rounds = self._rounds.to_state()
            state["open_rounds"] = rounds.pop("open_rounds")
            state["dirty"] = est.dirty_state()
            for name in Rounds.SCALARS:
                state[name] = rounds.pop(name)
            arrays = {**est.arrays(), **rounds}
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

    @classmethod
    def from_state(cls, state: dict) -> Self:
        """Rebuild a planner saved by :meth:`to_state` (it continues exactly where it was)."""
        check_state(state, cls.__name__, (STATE_VERSION,))
        params = dict(state["params"])
        if not cls._takes_triangle:
            params.pop("triangle", None)
        planner = cls(**params)
        planner._check_params()
        if state.get("initialized"):
            n, k = planner.n_items, planner.k
            planner._est = Estimates.from_state(state, n, planner.delta, planner.sigma, planner.bound,
                                                planner.symmetric)
            planner._rounds = Rounds.from_state(state, n, k)
            planner.rng_ = generator_from_state(state["rng"])
            planner._start_overlay()
            planner._start_tracking()
        return planner
