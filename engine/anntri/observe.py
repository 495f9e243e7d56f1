"""ANNTri's answers: noisy distance samples ``(i, j, value)`` applied to the estimates and bounds,
as functions over a planner's :class:`.estimates.Estimates` and :class:`.rounds.Rounds`.

Short batches in Python scalars (the overlay's pairs in :mod:`engine.anntri.overlay`), long ones
vectorised; stored bounds (symmetric planners) or derived ones (head-based). Numpy only; must
never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..bounds import UNIT_INTERVAL_BOUNDS
from .checks import check_pairs, small_rows
from .estimates import interval_step, outward, outward_one
from .rounds import Params, Rounds, drop_stale_active

if TYPE_CHECKING:
    from .estimates import Estimates


def observe_general(est: Estimates, rounds: Rounds, p: Params, answers: Iterable[Sequence[float]] | np.ndarray) -> None:
    """A planner's ``observe`` off the scalar overlay: validates the batch, applies it or raises."""
    scalar = est.bound not in UNIT_INTERVAL_BOUNDS
    rows = small_rows(answers, p.n_items, 3, "answers") if scalar else None
    if rows is None:
        observe_arrays(est, rounds, p, answers)
        return
    if not rows:
        return
    if est.derived:
        observe_derived(est, rounds, rows)
        return
    est.sync()
    n = p.n_items
    cache = rounds.active
    dirty = est.dirty if p.triangle else None
    for a, b, v in rows:
        i, j = (a, b) if a < b else (b, a)
        observe_pair(est, rounds, i, j, v)
        drop_stale_active(cache, i, j)
        if dirty is not None:
            dirty[i * n + j] = None
    rounds.n_samples += len(rows)


def observe_pair(est: Estimates, rounds: Rounds, i: int, j: int, v: float) -> None:
    """One answer ``v`` for the pair (i, j), i < j, of a planner with stored bounds, in Python
    scalars, straight into the arrays (both mirrored entries): every short batch outside the
    overlay (the overlay's own pairs are updated in place by ``ScalarOverlay.observe``); the
    estimates are in sync."""
    mean, count, pending = est.mean, est.count, est.pending
    upper, lower = est.upper, est.lower
    T = int(count[i, j])
    T1 = T + 1
    m1, hi, lo, failed = interval_step(float(mean[i, j]), T, v, est.radius_lookup(T1)[T1],
                                       float(upper[i, j]), float(lower[i, j]))
    if failed:
        rounds.active.pop(i, None)
        rounds.active.pop(j, None)
    if upper.dtype == np.float32:
        hi, lo = outward_one(hi, lo)
    pend = max(int(pending[i, j]) - 1, 0)
    mean[i, j] = mean[j, i] = m1
    count[i, j] = count[j, i] = T1
    upper[i, j] = upper[j, i] = hi
    lower[i, j] = lower[j, i] = lo
    pending[i, j] = pending[j, i] = pend
    est.touched.add(i)
    est.touched.add(j)


def observe_derived(est: Estimates, rounds: Rounds, rows: list[tuple]) -> None:
    """The scalar ``observe`` of head-based estimates (bounds derived from mean and count)."""
    if est.mean.dtype == np.float32 and any(v != 0.0 and v != 1.0 for _, _, v in rows):
        est.upgrade_mean()
    mean, count, pending = est.mean, est.count, est.pending
    exact = mean.dtype == np.float32
    cache = rounds.active
    touched = est.touched
    for i, j, v in rows:
        T = int(count[i, j])
        T1 = T + 1
        m = float(mean[i, j])
        if exact:  # k / T read back exactly (see estimates.exact_mean)
            k = round(m * T)
            m_old = k / T if T else 0.0
            m1 = (k + v) / T1
        else:
            m_old = m
            m1 = (m * T + v) / T1
        if est.tighten(i, j, m_old, T, m1, T1):
            cache.pop(i, None)
            cache.pop(j, None)
        mean[i, j] = m1
        count[i, j] = T1
        pending[i, j] = max(int(pending[i, j]) - 1, 0)
        touched.add(i)
        drop_stale_active(cache, i, j)
    rounds.n_samples += len(rows)


def observe_arrays(est: Estimates, rounds: Rounds, p: Params, answers: Iterable[Sequence[float]] | np.ndarray) -> None:
    """The vectorised ``observe`` for long batches (and the bounded bounds)."""
    a, b, arr = check_pairs(answers, p.n_items, 3, "answers")
    if len(arr) == 0:
        return
    values = arr[:, 2]
    if not np.all(np.isfinite(values)):
        raise ValueError("answers: values must be finite numbers")
    if est.bound in UNIT_INTERVAL_BOUNDS and (values.min() < 0 or values.max() > 1):
        raise ValueError(f"answers: bound={est.bound!r} needs values in [0, 1]")
    n = p.n_items
    # Symmetric: one entry per unordered pair, mirrored; head-based: row i only.
    i, j = (np.minimum(a, b), np.maximum(a, b)) if p.symmetric else (a, b)
    keys = i * n + j
    if len(keys) > 1 and len(set(keys.tolist())) < len(keys):
        keys, inverse, adds = np.unique(keys, return_inverse=True, return_counts=True)
        sums = np.bincount(inverse, weights=values)
        i, j = keys // n, keys % n
    else:
        sums = values
        adds = np.ones(len(keys), dtype=np.int64)
    if est.derived:
        observe_arrays_derived(est, i, j, sums, adds, values)
    else:
        observe_arrays_stored(est, p, i, j, sums, adds)
    rounds.n_samples += int(adds.sum())
    if rounds.active:
        for r in set(i.tolist()) | set(j.tolist()):
            rounds.active.pop(r, None)


def observe_arrays_stored(est: Estimates, p: Params, i: np.ndarray, j: np.ndarray, sums: np.ndarray,
                          adds: np.ndarray) -> None:
    """The vectorised update of a planner with stored bounds (distinct pairs i < j, mirrored)."""
    n = p.n_items
    est.sync()
    flat = np.concatenate([i * n + j, j * n + i])  # both mirrored entries at once
    m = len(i)
    mean_f, count_f = est.mean.reshape(-1), est.count.reshape(-1)
    upper_f, lower_f = est.upper.reshape(-1), est.lower.reshape(-1)
    pending_f = est.pending.reshape(-1)
    T_old = count_f[flat[:m]].astype(np.int64)
    T_new = T_old + adds
    mean = (mean_f[flat[:m]] * T_old + sums) / T_new
    conf_lo, conf_hi = est.confidence(mean, T_new)
    conf_lo = np.maximum(conf_lo, 0.0)
    hi = np.minimum(upper_f[flat[:m]], conf_hi)
    lo = np.maximum(lower_f[flat[:m]], conf_lo)
    crossed = lo > hi  # the confidence event failed somewhere: fall back to today's interval
    if crossed.any():
        hi = np.where(crossed, conf_hi, hi)
        lo = np.where(crossed, np.minimum(conf_lo, conf_hi), lo)
    pend = np.maximum(pending_f[flat[:m]] - adds, 0)
    hi, lo = outward(hi, lo, upper_f.dtype)
    est.touched.update(i.tolist())
    est.touched.update(j.tolist())
    for half in (flat[:m], flat[m:]):
        mean_f[half] = mean
        count_f[half] = T_new
        upper_f[half] = hi
        lower_f[half] = lo
        pending_f[half] = pend
    if p.triangle:
        est.dirty.update(dict.fromkeys((i * n + j).tolist()))


def observe_arrays_derived(est: Estimates, i: np.ndarray, j: np.ndarray, sums: np.ndarray, adds: np.ndarray,
                           values: np.ndarray) -> None:
    """The vectorised ``observe`` of head-based estimates (distinct pairs (head i, arm j))."""
    if est.mean.dtype == np.float32 and not np.all((values == 0.0) | (values == 1.0)):
        est.upgrade_mean()
    n = est.n_items
    flat = i * n + j
    mean_f, count_f = est.mean.reshape(-1), est.count.reshape(-1)
    pending_f = est.pending.reshape(-1)
    T_old = count_f[flat].astype(np.int64)
    T_new = T_old + adds
    if mean_f.dtype == np.float32:
        k = np.round(mean_f[flat].astype(np.float64) * T_old)
        m_old = np.where(T_old > 0, k / np.maximum(T_old, 1), 0.0)
        mean = (k + sums) / T_new
    else:
        m_old = mean_f[flat]
        mean = (m_old * T_old + sums) / T_new
    est.tighten_many(i, j, m_old, T_old, mean, T_new)
    mean_f[flat] = mean
    count_f[flat] = T_new
    pending_f[flat] = np.maximum(pending_f[flat] - adds, 0)
    est.touched.update(i.tolist())

