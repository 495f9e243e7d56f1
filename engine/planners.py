"""The planners of the table, built and restored: a new planner for a study (:func:`make_planner`),
wrapped for the study's question kind, and the planner that saved a state (:func:`restore_planner`).

It sits above the table (:mod:`engine.registry`) and the wrappers (:mod:`engine.adapters`,
:mod:`engine.screens`, :mod:`engine.forest_study`), which restore what they wrap through the table.
Numpy only; must never import Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .adapters import PairTripletAdapter
from .features import check_features
from .forest_study import ForestStudy
from .kinds import KINDS, QUESTION_KINDS, SCREEN_KINDS, SCREEN_PARAMS
from .registry import (
    check_params,
    check_screen_params,
    defaults_for,
    entry_for_state,
    get_algorithm,
)
from .screens import SCREEN_CLASSES
from .utils import RandomState

#: every parameter of a screen kind (taken out of the algorithm's parameters by :func:`make_planner`)
_ALL_SCREEN_PARAMS = frozenset(p for kind in SCREEN_PARAMS.values() for p in kind)
#: a distinct stream of the study seed for the screen planners' own draws
_SCREEN_STREAM = 0x5C2
#: state class of a planner wrapping the table's planner -> the wrapper (which restores what it wraps)
_WRAPPERS = {cls.__name__: cls for cls in (PairTripletAdapter, *SCREEN_CLASSES.values(), ForestStudy)}


def make_planner(name: str, n_items: int, question_kind: str = "triplet", random_state: RandomState = 0,
                 labels: Sequence[Any] | None = None, features: ArrayLike | None = None, **params: Any) -> Any:
    """A new planner of algorithm ``name`` for ``n_items`` items asking ``question_kind``.

    Triplet studies of pair-asking algorithms get a :class:`engine.adapters.PairTripletAdapter`
    (triplets in, ``(head, a, b, winner)`` answers); with ``question_kind="rating"`` they are
    returned as they are (pairs in, ``(i, j, value)`` answers). Odd-one-out and rank studies of a
    triplet learner get its screen planner (:mod:`engine.screens`): ``question_kind="odd_one_out"``
    asks ``(a, b, c)`` and observes ``(a, b, c, odd)``; ``question_kind="rank"`` (``n_reference``
    = 8, ``n_select`` = 2 unless given) asks ``(head, (r1, ..., rn))`` and observes
    ``(head, (r1, ..., rn), (s1, ..., sk))``, s1 the most alike; ``screens="random"`` asks uniformly
    random screens (the default of the learners that ask random triplets, the entry's ``screens``).
    ``labels`` (one per item) is required by label-driven algorithms. ``features`` (n_items, n_features)
    floats, one row per item in item order: what the items already tell, a prior the answers can overrule,
    for the learners whose class declares ``TAKES_FEATURES`` (duels, the embeddings; every question kind,
    since the screen planners wrap the learner); ValueError for the others. Every planner returned has
    ``neighbor_graph(k)`` and the progress keys of :data:`engine.graph.PROGRESS_KEYS` (:class:`engine.graph.Planner`).
    """
    entry = get_algorithm(name)
    if question_kind not in QUESTION_KINDS:
        raise ValueError(f"unknown question kind {question_kind!r}; choose one of {', '.join(QUESTION_KINDS)}")
    if question_kind not in entry.question_kinds:
        kinds = list(entry.question_kinds)
        named = " or ".join(kinds) if len(kinds) < 3 else f"{', '.join(kinds[:-1])} or {kinds[-1]}"
        raise ValueError(f"{name} asks {named} questions, not {question_kind!r}")
    screen = check_screen_params(name, question_kind,
                                 {k: params.pop(k) for k in list(params) if k in _ALL_SCREEN_PARAMS})
    # validated as given, then the study defaults for this question kind fill what is missing
    check_params(name, params)
    params = {**defaults_for(name, question_kind), **params}
    cls = entry.planner_class()
    supervised = params.pop("supervised", False)
    if entry.needs_labels or supervised:
        if labels is None or len(labels) != n_items or any(x is None for x in labels):
            raise ValueError(f"{name} needs a label for every item (labels of length n_items)")
    if entry.takes_labels:
        params["labels"] = list(labels) if (entry.needs_labels or supervised) else None
    if features is not None:
        if not getattr(cls, "TAKES_FEATURES", False):
            raise ValueError(f"{name} does not use item features; duels, the embeddings and pooled (ratings) do")
        params["features"] = check_features(features, int(n_items))
    planner = cls(n_items, random_state=random_state, **params)
    if entry.grows:
        return ForestStudy(planner)
    if entry.adapted(question_kind):
        return PairTripletAdapter(planner, random_state=random_state)
    if question_kind in SCREEN_KINDS:
        # the screens draw from their own stream of the study seed (not the learner's)
        rs = np.random.default_rng([int(random_state), _SCREEN_STREAM]) \
            if isinstance(random_state, numbers.Integral) else random_state
        screens = SCREEN_CLASSES[KINDS[question_kind].screen_planner]
        return screens(planner, random_state=rs, **screen)
    return planner


def takes_features(name: str) -> bool:
    """Whether algorithm ``name`` uses item features (``make_planner(..., features=X)``): its planner class
    declares ``TAKES_FEATURES``."""
    return bool(getattr(get_algorithm(name).planner_class(), "TAKES_FEATURES", False))


def restore_planner(state: Mapping) -> Any:
    """The planner that saved ``state`` (any class of the table's ``state_classes``), wrapped as
    :func:`make_planner` wraps it (a bare forest state of an entry that ``grows`` is given no routes)."""
    entry = entry_for_state(state)
    if state.get("class") in _WRAPPERS:
        return _WRAPPERS[state["class"]].from_state(dict(state))
    planner = entry.planner_class().from_state(dict(state))
    if entry.grows:
        return ForestStudy(planner)
    return planner
