"""Candidate duels: a triplet-native nearest-neighbour learner for crowd studies.

Each head's shortlisted candidates are asked against each other ("is h more like a or b?") and
the neighbour is the Condorcet winner of those duels; shortlists come from an ordinal embedding
fitted on all answers. Where single duels turn out to be coin flips (people cannot tell near items
apart: the fit predicts fresh answers barely better than chance), most questions go instead to
placing items in the embedding (uncertain pairs near each item, as the active embedding asks) and
the neighbour is read mostly from the fit. Numpy only; must never import Flask, Redis, RQ,
``webapp`` or ``workers``.

One module per concern, each with the tuned constants it reads: :mod:`.answers` (answers in, the
duel counts), :mod:`.embedding` (the fits and what refits learned), :mod:`.parts` (the parts one planner
learned, and its parameters as the functions read them), :mod:`.refits` (the refit scheduler and the fitter
hand-over), :mod:`.fits` (the pure stages, :class:`FitTask`), :mod:`.dims` (automatic dimensions, their
prequential scores, the line and the regime gates), :mod:`.shortlists`, :mod:`.scores` (the one scoring,
certificates, results kept between looks), :mod:`.questions` (question choice, exploring questions,
screens), :mod:`.results`, :mod:`.state` (``to_state``/``from_state``), :mod:`.names` (the old attribute
names, read through to the parts) and :mod:`.planner`, whose :class:`CandidateDuels` is a facade calling
those modules' functions over its parts.
A test that changes a constant patches the module that reads it.
"""
from __future__ import annotations

from .dims import AUTO_DIMS, COIN_LEAVE, TRUST_ACCURACY, TRUST_FROM
from .fits import COIN_REFIT, FitTask, run_fit
from .planner import CandidateDuels
from .questions import COIN_EXPLORE, EXACT_RANK_ITEMS, RANK_SAMPLE
from .scores import KAPPA_GRID
from .shortlists import KEEP_SHARE

__all__ = ["AUTO_DIMS", "COIN_EXPLORE", "COIN_LEAVE", "COIN_REFIT", "EXACT_RANK_ITEMS", "KAPPA_GRID", "KEEP_SHARE",
           "RANK_SAMPLE", "TRUST_ACCURACY", "TRUST_FROM", "CandidateDuels", "FitTask", "run_fit"]
