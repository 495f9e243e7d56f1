"""Candidate duels' state: a new planner's parts (:func:`start`), and the state as plain arrays + JSON values,
one version, from the planner's parameters and its parts' own state parts, and back.

Never saved: the fitter, ``pool``, the duel counts (rebuilt from the triplets) and the caches (rows of
the fit, results kept between looks), which follow from the saved state. Numpy only; must never import
Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..utils import RandomState, check_random_state, check_state, generator_from_state, generator_state
from .answers import Duels
from .dims import dims_for
from .embedding import Embedding
from .parts import KeptResults, Params, Parts, Shortlist
from .priors import FeaturePrior
from .shortlists import target_size

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

#: the one state version that loads (no release wrote another). 6: the duel counts are no longer
#: saved (they follow from the triplets; at 50,000 items the sorted table was 18 MB, changed all
#: through by every pass's inserts, so it went whole into every pass's journal entry) and the
#: eliminations are a log in the order they happened, so a pass adds rows at its end; the partial
#: fits of a refit (always empty since refits run whole, in one call or beside the passes) are gone
VERSION = 6
#: the counters the state keeps (as whole numbers, last)
COUNTERS = ("fitted_on", "n_fits", "n_answers", "n_issued")


def start(params: Params, random_state: RandomState, features: ArrayLike | None) -> Parts:
    """A new planner's parts: nothing learned, the features (if any) read once into the prior's space, the
    first shortlists each item's nearest in the features (the picks before any fit), the random generator
    of ``random_state``."""
    n = params.n_items
    prior = None if features is None else FeaturePrior.from_features(features, n)
    s = Parts(Duels(n), Shortlist(n, params.shortlist), Embedding(len(dims_for(prior is not None, params.dim))),
              KeptResults(), prior, check_random_state(random_state))
    if prior is not None and n > 1:
        s.short.cands = prior.first_shortlists(target_size(s, params), params.shortlist)
    return s


def counters(s: Parts) -> dict[str, int]:
    """The counters of :data:`COUNTERS`, as the parts keep them."""
    return {"fitted_on": int(s.fit.fitted_on), "n_fits": int(s.fit.n_fits), "n_answers": int(s.duels.n_answers),
            "n_issued": int(s.duels.n_issued)}


def planner_state(s: Parts, p: Any) -> dict:
    """The state of planner ``p`` whose parts are ``s``: its class, version, parameters and generator, then
    its parts' state parts (keys in the order every version-6 state has them), the counters and the
    features' space."""
    duels, short, counted = s.duels.to_state(), s.short.to_state(), counters(s)
    return {
        "class": type(p).__name__,
        "version": VERSION,
        "n_items": p.n_items,
        "params": p.get_params(),
        "rng": generator_state(s.rng),
        "triplets": duels["triplets"],
        "pending": duels["pending"],
        "eliminated": short["eliminated"],
        "asked": duels["asked"],
        "answered": duels["answered"],
        "cands": short["cands"],
        **s.fit.to_state(),
        **{name: counted[name] for name in COUNTERS},
        # the features' space only where there are features (a state without them is as before)
        **({} if s.prior is None else {"prior": s.prior.to_state()}),
    }


def parts_of_state(state: dict, params: Params) -> Parts:
    """The parts ``state`` holds, for a planner of parameters ``params``."""
    n = params.n_items
    prior = None if state.get("prior") is None else FeaturePrior.from_state(state["prior"])
    s = Parts(Duels.from_state(n, state), Shortlist.from_state(n, params.shortlist, state),
              Embedding.from_state(len(dims_for(prior is not None, params.dim)), state), KeptResults(), prior,
              generator_from_state(state["rng"]))
    s.fit.fitted_on, s.fit.n_fits = int(state["fitted_on"]), int(state["n_fits"])
    s.duels.n_answers, s.duels.n_issued = int(state["n_answers"]), int(state["n_issued"])
    return s


def planner_of_state(cls: Any, state: dict) -> Any:
    """A planner of class ``cls`` (whose ``VERSION`` is :data:`VERSION`) as ``state`` left it."""
    check_state(state, cls.__name__, (cls.VERSION,))
    p = cls(int(state["n_items"]), **state["params"])
    p._parts = parts_of_state(state, p._params_now())
    return p
