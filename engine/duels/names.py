"""Candidate duels' old names: what the planner's learned state and its steps were called when they were
one class's attributes and methods, kept on :class:`~.planner.CandidateDuels` (:func:`with_old_names`)
for the code, benchmarks and tests outside this package that use them. Each reads (and sets) what a part
of the planner's :class:`~.parts.Parts` now owns (:class:`~.answers.Duels` ``duels``,
:class:`~.parts.Shortlist` ``short``, :class:`~.embedding.Embedding` ``fit``,
:class:`~.parts.KeptResults` ``kept``), or calls the module function that took over the step.

Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from ..utils import call_through, read_through  # (their home; still importable from here)
from . import dims, questions, refits, results, scores, shortlists

T = TypeVar("T", bound=type)


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

    call.__doc__ = f":func:`{fn.__module__}.{name}` over the planner's parts"
    return call


#: old name -> what it reads or calls now
OLD_NAMES: dict[str, Any] = {
    # the parts themselves
    "_duels": read_through("duels"), "_short": read_through("short"), "_fit": read_through("fit"),
    "prior_": read_through("prior"), "rng_": read_through("rng"),
    # the answers and duel counts (Duels)
    "triplets_": read_through("duels.triplets", settable=False),
    "pending_": read_through("duels.pending", settable=False),
    "asked_": read_through("duels.asked", settable=False),
    "answered_": read_through("duels.answered", settable=False),
    "_codes": read_through("duels.codes", settable=False),
    "n_answers_": read_through("duels.n_answers"), "n_issued_": read_through("duels.n_issued"),
    "_duel_table": call_through("duels.table"),
    # the shortlists and eliminations (Shortlist)
    "cands_": read_through("short.cands"),
    "eliminated_": read_through("short.eliminated", settable=False),
    "eliminated_log_": read_through("short.log", settable=False),
    "_filled": read_through("short.filled"),
    "_eliminate": call_through("short.eliminate"), "_elimination_log": call_through("short.elimination_log"),
    "_heads_to_refill": call_through("short.heads_to_refill"),
    # the fits (Embedding)
    **{f"{name}_": read_through(f"fit.{name}") for name in (
        "embedding", "embeddings", "dim_scores", "dim_compare", "fresh_dims", "coin", "kappa", "fit_job",
        "fitted_on", "fitted_triplets", "n_fits")},
    "_rows": read_through("fit.rows"), "_rows_of": read_through("fit.rows_of"),
    # the results kept between looks (KeptResults)
    "_certified_rows": read_through("kept.certified"), "_ranked_rows_kept": read_through("kept.ranked"),
    # the dimensions (engine.duels.dims)
    "_dims": on_parts(dims.dims_of), "_map_only": on_parts(dims.map_only), "_score_dims": on_parts(dims.score_dims),
    "_dims_to_refit": on_parts(dims.dims_to_refit), "_best_dim_index": on_parts(dims.best_dim_index),
    "_duel_trust": on_parts(dims.duel_trust), "_coin_flips": on_parts(dims.coin_flips, params=False),
    "_update_coin": on_parts(dims.update_coin),
    "chosen_dim_": property(on_parts(dims.chosen_dim), doc=":func:`engine.duels.dims.chosen_dim`"),
    # the one scoring (engine.duels.scores)
    "_matrices": on_parts(scores.matrices, params=False), "_scores": on_parts(scores.scores),
    "_batch_scores": on_parts(scores.batch_scores), "_certified": on_parts(scores.certified),
    "_ranking": on_parts(scores.ranking), "_estimate_kappa": on_parts(scores.estimate_kappa, params=False),
    # the shortlists' rebuilds (engine.duels.shortlists)
    "_target_size": on_parts(shortlists.target_size), "_old_leaders": on_parts(shortlists.old_leaders),
    "_shortlists_from_fit": on_parts(shortlists.shortlists_from_fit),
    # the refit scheduler (engine.duels.refits)
    "_needs_refit": on_parts(refits.needs_refit), "_grown": on_parts(refits.grown),
    "_start_fit": on_parts(refits.start_fit),
    # question choice (engine.duels.questions)
    "_drop": on_parts(questions.drop, params=False), "_exploring_question": on_parts(questions.exploring_question),
    "_sampled_ranks": on_parts(questions.sampled_ranks),
    # results (engine.duels.results)
    "_n_certified": on_parts(results.n_certified),
}


def with_old_names(cls: T) -> T:
    """Class decorator: :data:`OLD_NAMES` as attributes of ``cls`` (properties and methods)."""
    for name, attr in OLD_NAMES.items():
        if isinstance(attr, Callable) and not isinstance(attr, property):
            attr.__name__, attr.__qualname__ = name, f"{cls.__qualname__}.{name}"
        setattr(cls, name, attr)
    return cls
