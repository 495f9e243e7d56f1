"""Held-out questions in the worker: what an update pass keeps of the answers it reads (held-out answers and
the validation repeats that set the ceiling), and each learner's model scored on the held-out answers with
every dashboard summary (``workers.jobs.summary``). Which questions are held out is decided where the pools
are filled (``Learner.plan``). Must never import Flask.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.heldout import choice_agreement, choice_ceiling, model_distances, offered_count, rating_correlation
from workers.store import heldout as stored
from workers.store.answers import REPEAT_AGREE_FLAG, REPEAT_ALGORITHM, REPEAT_DISAGREE_FLAG

#: The held-out scores: the share of choices a model makes as the rater did, and for ratings the correlation
#: of its distances with the rated ones.
AGREEMENT, CORRELATION = "agreement", "correlation"

if TYPE_CHECKING:
    from collections.abc import Iterable

    from redis import Redis
    from redis.client import Pipeline

    from workers.jobs.learners import Learner
    from workers.store.answers import Answer
    from workers.store.studies import Study


@dataclass
class Kept:
    """What a pass (or a replay of the log) keeps of the answers it read: the held-out answers as the list
    stores them, and ``{kind: [repeats, agreed, choices summed]}`` of the validation repeats."""

    documents: list[str] = field(default_factory=list)
    repeats: dict[str, list[int]] = field(default_factory=dict)

    def read(self, answers: Iterable[Answer]) -> Kept:
        for a in answers:
            if a.heldout and not a.skipped:
                self.documents.append(stored.answer_document(a.kind, list(a.shown), list(a.picks), a.value))
            elif a.algorithm == REPEAT_ALGORITHM and a.picks:
                flags = a.flags.split(",")
                if REPEAT_AGREE_FLAG in flags or REPEAT_DISAGREE_FLAG in flags:
                    tally = self.repeats.setdefault(a.kind, [0, 0, 0])
                    tally[0] += 1
                    tally[1] += REPEAT_AGREE_FLAG in flags
                    tally[2] += offered_count(a.question_kind, a.shown)
        return self

    def write(self, pipe: Pipeline, study_id: str) -> None:
        """Queue on ``pipe`` (the pass's MULTI) what it read."""
        stored.append_answers(pipe, study_id, self.documents)
        stored.count_repeats(pipe, study_id, self.repeats)

    def replace(self, pipe: Pipeline, study: Study) -> None:
        """Queue on ``pipe`` what a replay of the whole log read, in place of what the passes had kept."""
        kinds = {a.question_kind for a in study.config.algorithms} | set(self.repeats)
        stored.replace_answers(pipe, study.id, self.documents)
        stored.replace_repeats(pipe, study.id, sorted(kinds), self.repeats)


def score(learner: Learner, documents: list[dict]) -> tuple[str, float, int] | None:
    """(metric, score, answers scored) of the learner's current model on the held-out answers of its question
    kind: ``agreement``, the share of choices it makes as the rater did (ties shared), or for ratings
    ``correlation``, Pearson's correlation of its distances with the rated ones (the kind's ``sample`` of each
    value at the study's settings of the kind: a rating's place on its scale, same and different 0 and 1); None
    when there is nothing to score or no model."""
    kind = learner.algorithm.kind
    n = int(learner.planner.n_items)
    # (items added after the learner was built are not in its model)
    mine = [d for d in documents if d["kind"] == kind.name and max(d["shown"]) < n]
    if not mine:
        return None
    distances = model_distances(learner.planner)
    if distances is None:
        return None
    ratings = [d for d in mine if "value" in d]
    if ratings:
        pairs = np.array([d["shown"][:2] for d in ratings], np.int64)
        settings = learner.config.settings_of(kind)
        values = np.array([kind.sample(d["value"], settings) for d in ratings])  # the kind's distance sample
        r = rating_correlation(distances, pairs, values)
        return None if np.isnan(r) else (CORRELATION, r, len(ratings))
    screens = [(d["shown"], d["picks"]) for d in mine if d["picks"]]
    if not screens:
        return None
    return AGREEMENT, float(np.mean(choice_agreement(distances, kind, screens))), len(screens)


def ceilings(tallies: dict[str, list[int]]) -> dict[str, dict]:
    """Per question kind, from its validation repeats: how many, the share answered as the first time, the
    items offered on average and the ceiling of held-out agreement they set (``engine.heldout.choice_ceiling``)."""
    out = {}
    for kind, (n, agreed, choices) in tallies.items():
        if n <= 0:
            continue
        agreement, offered = agreed / n, choices / n
        out[kind] = {"repeats": int(n), "agreement": round(agreement, 4), "choices": round(offered, 2),
                     "ceiling": round(choice_ceiling(agreement, offered), 4)}
    return out


def record_heldout(conn: Redis, pipe: Pipeline, study: Study, learners: dict[str, Learner],
                   summaries: dict[str, dict], read: Kept | None = None) -> None:
    """Queue on ``pipe`` (a MULTI) each learner's point of its held-out curve (answers applied, score,
    held-out answers scored) and, per question kind, its metric and the ceiling its validation repeats set
    (read with ``conn``; ``read``: what the pass writing this summary read, queued in the same MULTI)."""
    documents = stored.latest_answers(conn, study.id)
    tallies = stored.read_tallies(conn, study.id, sorted({a.question_kind for a in study.config.algorithms}))
    if read is not None:
        documents = (documents + [json.loads(d) for d in read.documents])[-stored.SCORED_ANSWERS:]
        for kind, tally in read.repeats.items():
            tallies[kind] = [a + b for a, b in zip(tallies.get(kind, [0, 0, 0]), tally, strict=True)]
    kinds = ceilings(tallies)
    for label, learner in learners.items():
        if not documents or not learner.entry.yields_graph:
            continue
        scored = score(learner, documents)
        if scored is None:
            continue
        metric, value, count = scored
        kinds.setdefault(learner.algorithm.question_kind, {})["metric"] = metric
        progress = (summaries.get(label) or {}).get("progress") or learner.progress()
        stored.append_point(pipe, study.id, label, int(progress["answers"]), value, count)
    if kinds:
        stored.save_kinds(pipe, study.id, kinds)
