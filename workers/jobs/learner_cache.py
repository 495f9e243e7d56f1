"""A study's learners kept in this worker process's memory between update passes.

A pass reloads a learner only when the version saved with its state is not the one this process
wrote (another worker, a rebuild or a restore replaced it). The cache never decides what is correct:
the pass's WATCH on the cursor and the engine states stays, and a pass that fails (EXEC refused or
any error) drops the study's cached learners (``forget_cached``), so its retry starts from the stored
state. Must never import Flask.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workers.jobs import fits
from workers.jobs.learners import Learner, fresh_learners
from workers.store import engine_state
from workers.store.studies import Study

if TYPE_CHECKING:
    from redis import Redis


#: Studies whose learners this process keeps in memory between passes (least recently used dropped).
CACHED_STUDIES = 4


@dataclass
class Kept:
    """One learner's stored state as this process last committed or read it (see ``engine_state``)."""

    lifted: engine_state.Lifted | None  # None: nothing stored yet (a fresh learner)
    version: str | None
    lineage: str | None  # None: nothing stored, or a state saved before journals (next save is whole)
    seq: int = 0  # the last journal entry committed
    checkpoint_seq: int = 0  # the journal entry the stored checkpoint includes
    journal: tuple[tuple[int, int], ...] = ()  # (seq, array bytes) of the entries after the checkpoint

    @classmethod
    def of(cls, stored: engine_state.Stored) -> Kept:
        return cls(stored.lifted, stored.version if stored.lifted is not None else None, stored.lineage,
                   stored.seq, stored.checkpoint_seq, tuple(stored.journal))


@dataclass
class Cached:
    """A study's learners as this process last saved them: valid while the config is the same and
    every stored state still carries the version this process wrote."""

    config: str
    kept: dict[str, Kept]
    learners: dict[str, Learner]


_cache: OrderedDict[str, Cached] = OrderedDict()


def cached_study(study_id: str) -> Cached | None:
    """The study's learners kept in memory (None: none kept), whether or not still valid."""
    return _cache.get(study_id)


def fits_beside(study_id: str) -> bool | None:
    """Of the study's learners kept in memory: True if a refit that ran beside the passes is ready,
    False if one is still running, None if none is handed over (``planner.fit_ready``)."""
    cached = _cache.get(study_id)
    states = [] if cached is None else [learner.fit_ready() for learner in cached.learners.values()]
    if any(states):
        return True
    return False if any(state is False for state in states) else None


def forget_cached(study_id: str | None = None) -> None:
    """Drop the learners kept for one study (all studies: None)."""
    if study_id is None:
        _cache.clear()
    else:
        _cache.pop(study_id, None)


def remember(study: Study, kept: dict[str, Kept], learners: dict[str, Learner]) -> None:
    """Keep the study's learners, as a pass has just saved them (``kept``: their stored states)."""
    _cache[study.id] = Cached(repr(study.config), kept, learners)
    _cache.move_to_end(study.id)
    while len(_cache) > CACHED_STUDIES:
        _cache.popitem(last=False)


def _cached_learners(conn: Redis, study: Study) -> tuple[dict[str, Learner], dict[str, Kept]] | None:
    """The study's learners from memory, if every stored state is still the one this process saved."""
    cached = _cache.get(study.id)
    if cached is None or cached.config != repr(study.config):
        return None
    for alg in study.config.algorithms:
        version = engine_state.load_version(conn, study.id, alg.label)
        kept = cached.kept.get(alg.label)
        if version is None or kept is None or kept.version != version:
            return None
    for alg in study.config.algorithms:
        cached.learners[alg.label].algorithm = alg
        cached.learners[alg.label].config = study.config
    return cached.learners, dict(cached.kept)


def _load(conn: Redis, study: Study) -> tuple[dict[str, Learner], dict[str, Kept]]:
    algorithms = study.config.algorithms
    stored = {alg.label: engine_state.load_stored(conn, study.id, alg.label) for alg in algorithms}
    fresh = fresh_learners(conn, study, [alg for alg in algorithms if stored[alg.label].lifted is None])
    learners = {alg.label: fresh[alg.label] if alg.label in fresh
                else Learner.from_state(alg, study.config, stored[alg.label].state) for alg in algorithms}
    return learners, {label: Kept.of(s) for label, s in stored.items()}


def load_learners(conn: Redis, study: Study, versions: dict | None = None) -> dict[str, Learner]:
    """Every algorithm's learner from its saved state, or fresh where none is saved yet.

    ``versions``, if given, receives each saved state's version (None for a fresh learner)."""
    learners, kept = _load(conn, study)
    if versions is not None:
        versions.update({label: k.version for label, k in kept.items()})
    return learners


def pass_learners(conn: Redis, study: Study) -> tuple[dict[str, Learner], dict[str, Kept], bool]:
    """(learners, {label: the stored state they equal}, whether they came from memory); their refits
    run in this process's fit pool where it has one (``workers.jobs.fits``)."""
    cached = _cached_learners(conn, study)
    if cached is not None:
        return cached[0], cached[1], True
    _cache.pop(study.id, None)
    learners, kept = _load(conn, study)
    for label, learner in learners.items():
        learner.fit_beside(fits.fitter_for(study.id, label))
    return learners, kept, False
