"""Neighbours predicted from item features, for the items added to a study after its learners were built: a
learner of a fixed item set never asks about them, so every summary (and every graph export) gives each one
its nearest items as the learner's learned map from the features places it, else as the standardised
features do, marked predicted, not measured. Also how well the features alone agree with the crowd's
held-out answers. Must never import Flask.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from engine.features import BY_LEARNED_MAP, predicted_neighbors, study_space
from engine.heldout import choice_agreement
from engine.kinds import KINDS
from engine.registry import feature_placement
from workers.store import heldout as stored_heldout
from workers.store.studies import StudyError, feature_matrix, features_version, get_items, initial_item_count

if TYPE_CHECKING:
    from redis import Redis

    from workers.jobs.learners import Learner
    from workers.store.studies import Study

#: How a summary and an export say where a predicted neighbour comes from.
SOURCES = {BY_LEARNED_MAP: "predicted from features through the map the learner learned from the answers, "
                           "not measured",
           "features": "predicted from the items' features (standardised), not measured"}


@dataclass(frozen=True)
class Predicted:
    """The neighbours of the items a learner does not hold (``items``, indices, in order), nearest first
    (``neighbors`` (len(items), k)), and how they were predicted (``by``: a key of :data:`SOURCES`)."""

    items: np.ndarray
    neighbors: np.ndarray
    by: str

    @property
    def about(self) -> str:
        return SOURCES[self.by]


@dataclass(frozen=True)
class StudyFeatures:
    """Every item's raw features (n_items, n_features) and the number of items the learners were built over."""

    raw: np.ndarray
    n_known: int

    @cached_property
    def space(self) -> np.ndarray:
        """Every item in the features' space, fitted on the learners' items (added items read through it);
        computed once per item count in a process (``study_features`` keeps it)."""
        return study_space(self.raw, self.n_known)


#: study id -> ((n_items, created_at, features version), its features or None): read again when items are added
#: or the features replaced (``proxima features``, the New study form's built-in features), else once a process
_CACHE: dict[str, tuple[tuple, StudyFeatures | None]] = {}
CACHED_STUDIES = 16


def study_features(conn: Redis, study: Study) -> StudyFeatures | None:
    """The study's item features (None when its items have none, or not all of them), read once per item count
    and features version (``workers.store.studies.features_version``: a digest of the features set last) by this
    process: one small read of the study's hash when nothing changed."""
    stamp = (study.n_items, study.created_at, features_version(conn, study.id)[1])
    hit = _CACHE.get(study.id)
    if hit is not None and hit[0] == stamp:
        return hit[1]
    items = get_items(conn, study.id)
    n_known = initial_item_count(conn, study.id, len(items))
    try:
        found: StudyFeatures | None = StudyFeatures(np.asarray(feature_matrix(items)[1], np.float64), n_known)
        found.space  # noqa: B018 - read once here: features that cannot be read as a space are none
    except (StudyError, ValueError):
        found = None
    if len(_CACHE) >= CACHED_STUDIES and study.id not in _CACHE:
        _CACHE.clear()
    _CACHE[study.id] = (stamp, found)
    return found


def predicted_for(learner: Learner, features: StudyFeatures | None, k: int = 1) -> Predicted | None:
    """The predicted neighbours of the items ``learner`` does not hold (None when it holds them all, routes
    added items itself (``Algorithm.grows``), or the study has no features)."""
    n_known = int(learner.planner.n_items)
    if features is None or learner.entry.grows or len(features.raw) <= n_known:
        return None
    if n_known != features.n_known:  # (a learner rebuilt over more items than the study first had: none here)
        return None
    neighbors, by = predicted_neighbors(features.space, n_known, k, feature_placement(learner.planner))
    return Predicted(np.arange(n_known, len(features.raw)), neighbors, by)


def add_predicted(conn: Redis, study: Study, learners: dict[str, Learner], summaries: dict[str, dict]) -> dict | None:
    """Give each learner's summary the predicted neighbours of the items it does not hold: its ``neighbors``
    run over every item of the study and ``predicted`` says which are predicted (``items``), how (``by``) and in
    words (``about``). Returns what the dashboard shows of the features (``features_summary``), None for a
    study without features."""
    features = study_features(conn, study)
    if features is None:
        return None
    for label, learner in learners.items():
        found = predicted_for(learner, features)
        summary = summaries.get(label)
        if found is None or summary is None or summary.get("neighbors") is None:
            continue
        summary["neighbors"] = list(summary["neighbors"]) + [int(x) for x in found.neighbors[:, 0]]
        summary["predicted"] = {"items": [int(i) for i in found.items], "by": found.by, "about": found.about}
    return features_summary(conn, study, features, summaries)


def features_summary(conn: Redis, study: Study, features: StudyFeatures, summaries: dict[str, dict]) -> dict:
    """How well the features agree with the crowd: on the held-out answers (the share of picks the nearest in
    the standardised features makes, ties shared; ``engine.heldout.choice_agreement``), and each learner's own
    live score of them where it keeps one (duels' ``feature_agreement``: how often an item's feature neighbour
    beat another item; pooled's ``feature_share``: how much of its space their map holds; ``features_used``:
    whether it still trusts them), and where the features came from
    (``source``)."""
    out: dict = {"items_added": len(features.raw) - features.n_known, "heldout": None, "learners": {},
                 # a file the researcher gave, or the built-in image statistics (weak; workers.jobs.builtin_features)
                 "source": features_version(conn, study.id)[0]}
    documents = [d for d in stored_heldout.latest_answers(conn, study.id) if d.get("picks")
                 and KINDS.get(d["kind"]) is not None and max(d["shown"]) < len(features.raw)]
    if documents:
        Y = features.space.astype(np.float64)

        def distances(h: np.ndarray, o: np.ndarray) -> np.ndarray:
            return np.linalg.norm(Y[h] - Y[o], axis=1)
        agree = []
        for kind_name in sorted({d["kind"] for d in documents}):
            kind = KINDS[kind_name]
            screens = [(d["shown"], d["picks"]) for d in documents if d["kind"] == kind_name]
            agree.extend(choice_agreement(distances, kind, screens).tolist())
        out["heldout"] = {"agreement": round(float(np.mean(agree)), 4), "answers": len(agree)}
    for label, summary in summaries.items():
        progress = summary.get("progress") or {}
        if "feature_agreement" in progress:
            out["learners"][label] = {"agreement": progress["feature_agreement"],
                                      "used": bool(progress.get("features_used"))}
        elif "feature_share" in progress:  # the rating learner: how much of the space the features' map holds
            out["learners"][label] = {"share": progress["feature_share"], "used": bool(progress.get("features_used"))}
    return out
