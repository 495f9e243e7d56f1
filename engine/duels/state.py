"""Candidate duels' state I/O: the state as plain arrays + JSON values, one version, from the planner's
parameters and its parts' own state parts, and back.

Never saved: the fitter, ``pool``, the duel counts (rebuilt from the triplets) and the caches (rows of
the fit, results kept between looks), which follow from the saved state. Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import Any

from ..utils import counters_state, generator_state, load_counters, planner_from_state
from .answers import Duels
from .embedding import Embedding
from .priors import FeaturePrior
from .shortlists import Shortlist

#: the one state version that loads (no release wrote another). 6: the duel counts are no longer
#: saved (they follow from the triplets; at 50,000 items the sorted table was 18 MB, changed all
#: through by every pass's inserts, so it went whole into every pass's journal entry) and the
#: eliminations are a log in the order they happened, so a pass adds rows at its end; the partial
#: fits of a refit (always empty since refits run whole, in one call or beside the passes) are gone
VERSION = 6
#: the counters the state keeps (as whole numbers, last)
COUNTERS = ("fitted_on", "n_fits", "n_answers", "n_issued")


def planner_state(p: Any) -> dict:
    """The state of planner ``p``: its class, version, parameters and generator, then its parts' state
    parts (keys in the order every version-6 state has them), the counters and the features' space."""
    duels, short = p._duels.to_state(), p._short.to_state()
    return {
        "class": type(p).__name__,
        "version": VERSION,
        "n_items": p.n_items,
        "params": p.get_params(),
        "rng": generator_state(p.rng_),
        "triplets": duels["triplets"],
        "pending": duels["pending"],
        "eliminated": short["eliminated"],
        "asked": duels["asked"],
        "answered": duels["answered"],
        "cands": short["cands"],
        **p._fit.to_state(),
        **counters_state(p, COUNTERS),
        # the features' space only where there are features (a state without them is as before)
        **({} if p.prior_ is None else {"prior": p.prior_.to_state()}),
    }


def planner_of_state(cls: Any, state: dict) -> Any:
    """A planner of class ``cls`` (whose ``VERSION`` is :data:`VERSION`) as ``state`` left it."""
    p = planner_from_state(cls, state)
    p._duels = Duels.from_state(p.n_items, state)
    p._short = Shortlist.from_state(p.n_items, p.shortlist, state)
    prior = state.get("prior")
    p.prior_ = None if prior is None else FeaturePrior.from_state(prior)
    p._fit = Embedding.from_state(len(p._dims()), state)
    load_counters(p, COUNTERS, state)
    return p
