"""Candidate duels' old attribute names: what the planner's learned state was called when it was one
class's attributes, kept as properties that read (and set) the parts that now own it, for the code,
benchmarks and tests that use them: :class:`~.answers.Duels` (``_duels``),
:class:`~.shortlists.Shortlist` (``_short``), :class:`~.embedding.Embedding` (``_fit``) and
:class:`~.scores.KeptResults` (``_kept``).

Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from . import dims, questions, refits, results, scores, shortlists


def read_through(part: str, name: str, settable: bool = True) -> property:
    """A planner attribute that reads (and, if ``settable``, sets) ``name`` of its part ``part``."""
    def get(self: object) -> object:
        return getattr(getattr(self, part), name)

    def put(self: object, value: object) -> None:
        setattr(getattr(self, part), name, value)

    return property(get, put if settable else None, doc=f"``{part}.{name}``")


def on_parts(fn: Callable, params: bool = True) -> Callable:
    """A planner method that calls the module function ``fn`` over its parts (and, if ``params``, its
    parameters as they are now): ``fn(self._s, self._params_now(), *args)``. The function is looked up
    in its module at each call (a test that patches the module's function patches the method too)."""
    module, name = sys.modules[fn.__module__], fn.__name__
    if params:
        def call(self: Any, *args: object, **kwargs: object) -> object:
            return getattr(module, name)(self._s, self._params_now(), *args, **kwargs)
    else:
        def call(self: Any, *args: object, **kwargs: object) -> object:
            return getattr(module, name)(self._s, *args, **kwargs)

    call.__name__ = call.__qualname__ = f"_{name}"
    call.__doc__ = f":func:`{fn.__module__}.{name}` over the planner's parts"
    return call


def call_through(part: str, name: str) -> Callable:
    """A planner method that calls the method ``name`` of its part ``part``."""
    def call(self: object, *args: object) -> object:
        return getattr(getattr(self, part), name)(*args)

    call.__name__ = call.__qualname__ = f"_{name}"
    return call


class PartNames:
    """Mixin of :class:`~engine.duels.planner.CandidateDuels`: the old names, read through to its parts."""

    # the parts themselves (Parts)
    _duels = read_through("_s", "duels")
    _short = read_through("_s", "short")
    _fit = read_through("_s", "fit")
    _kept = read_through("_s", "kept")
    prior_ = read_through("_s", "prior")
    rng_ = read_through("_s", "rng")
    # the answers and duel counts (Duels)
    triplets_ = read_through("_duels", "triplets", settable=False)
    pending_ = read_through("_duels", "pending", settable=False)
    asked_ = read_through("_duels", "asked", settable=False)
    answered_ = read_through("_duels", "answered", settable=False)
    _codes = read_through("_duels", "codes", settable=False)
    n_answers_ = read_through("_duels", "n_answers")
    n_issued_ = read_through("_duels", "n_issued")
    _code = call_through("_duels", "code")
    _all_triplets = call_through("_duels", "all_triplets")
    _duel_table = call_through("_duels", "table")
    _head_duels = call_through("_duels", "per_head")
    # the shortlists and eliminations (Shortlist)
    cands_ = read_through("_short", "cands")
    eliminated_ = read_through("_short", "eliminated", settable=False)
    eliminated_log_ = read_through("_short", "log", settable=False)
    _filled = read_through("_short", "filled")
    _eliminate = call_through("_short", "eliminate")
    _elimination_log = call_through("_short", "elimination_log")
    _eliminated_codes = call_through("_short", "eliminated_codes")
    _fill_shortlist = call_through("_short", "fill")
    _heads_to_refill = call_through("_short", "heads_to_refill")
    # the fits (Embedding)
    embedding_ = read_through("_fit", "embedding")
    embeddings_ = read_through("_fit", "embeddings")
    dim_scores_ = read_through("_fit", "dim_scores")
    dim_compare_ = read_through("_fit", "dim_compare")
    fresh_dims_ = read_through("_fit", "fresh_dims")
    coin_ = read_through("_fit", "coin")
    kappa_ = read_through("_fit", "kappa")
    fit_job_ = read_through("_fit", "fit_job")
    fitted_on_ = read_through("_fit", "fitted_on")
    fitted_triplets_ = read_through("_fit", "fitted_triplets")
    n_fits_ = read_through("_fit", "n_fits")
    _rows = read_through("_fit", "rows")
    _rows_of = read_through("_fit", "rows_of")
    _rank_ref = read_through("_fit", "rank_ref")
    _rank_ref_of = read_through("_fit", "rank_ref_of")
    _fit_running = read_through("_fit", "running")
    # the results kept between looks (KeptResults)
    _certified_rows = read_through("_kept", "certified")
    _ranked_rows_kept = read_through("_kept", "ranked")
    # the dimensions (engine.duels.dims)
    _dims = on_parts(dims.dims_of)
    _map_out = on_parts(dims.map_out, params=False)
    _map_only = on_parts(dims.map_only)
    _score_dims = on_parts(dims.score_dims)
    _dims_to_refit = on_parts(dims.dims_to_refit)
    _best_dim_index = on_parts(dims.best_dim_index)
    _duel_trust = on_parts(dims.duel_trust)
    _coin_flips = on_parts(dims.coin_flips, params=False)
    _update_coin = on_parts(dims.update_coin)
    chosen_dim_ = property(on_parts(dims.chosen_dim), doc=":func:`engine.duels.dims.chosen_dim`")
    # the one scoring (engine.duels.scores)
    _matrices = on_parts(scores.matrices, params=False)
    _scores = on_parts(scores.scores)
    _batch_matrices = on_parts(scores.batch_matrices, params=False)
    _score_matrices = on_parts(scores.score_matrices)
    _batch_scores = on_parts(scores.batch_scores)
    _batch_certified = on_parts(scores.batch_certified)
    _certified = on_parts(scores.certified)
    _ranked_rows = on_parts(scores.ranked_rows)
    _ranking = on_parts(scores.ranking)
    _estimate_kappa = on_parts(scores.estimate_kappa, params=False)
    _refreshed = on_parts(scores.refreshed)
    # the shortlists' rebuilds (engine.duels.shortlists)
    _target_size = on_parts(shortlists.target_size)
    _old_leaders = on_parts(shortlists.old_leaders)
    _old_leader_rows = on_parts(shortlists.old_leader_rows)
    _shortlists_from_fit = on_parts(shortlists.shortlists_from_fit)
    _shortlists_from_win_rates = on_parts(shortlists.shortlists_from_win_rates)
    _neighbours_of_neighbours = on_parts(shortlists.neighbours_of_neighbours)
    # the refit scheduler (engine.duels.refits)
    _started = on_parts(refits.started, params=False)
    warmup_ = property(on_parts(refits.warmup_of), doc=":func:`engine.duels.refits.warmup_of`")
    _needs_refit = on_parts(refits.needs_refit)
    _grown = on_parts(refits.grown)
    _refresh = on_parts(refits.refresh)
    _start_fit = on_parts(refits.start_fit)
    _judge_features = on_parts(refits.judge_features)
    _fit_task = on_parts(refits.fit_task)
    _take_fit = on_parts(refits.take_fit)
    _continue_fit = on_parts(refits.continue_fit)
    _end_fit = on_parts(refits.end_fit)
    # question choice (engine.duels.questions)
    _alive = on_parts(questions.alive)
    _alive_rows = on_parts(questions.alive_rows)
    _drop = on_parts(questions.drop, params=False)
    _score_heads = on_parts(questions.score_heads)
    _random_question = on_parts(questions.random_question)
    _exploring_question = on_parts(questions.exploring_question)
    _sampled_ranks = on_parts(questions.sampled_ranks)
    _pending_by_head = call_through("_duels", "pending_by_head")
    _add_pending = staticmethod(questions.add_pending)
    _pair_order = staticmethod(questions.pair_order)
    # results (engine.duels.results)
    _win_shares = on_parts(results.win_shares)
    _n_certified = on_parts(results.n_certified)
