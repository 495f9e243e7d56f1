"""Held-out questions as stored: the answers to them the update passes have read, each learner's curve of
held-out accuracy against the answers it has applied, and the ceiling that raters' agreement with themselves
on repeated questions sets.

The update pass appends the held-out answers it reads (``keys.heldout``, in the MULTI that moves the cursor)
and counts validation repeats by kind; the summary scores the learners (``workers.jobs.heldout``). The
curves and ceilings live in fields of ``keys.engine_stats``. Light: no numpy (web processes import it).
Must never import Flask.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from workers.store import keys
from workers.store.truth import append_curve_point

if TYPE_CHECKING:
    from redis import Redis
    from redis.client import Pipeline

#: Field prefix (+ algorithm label) of ``keys.engine_stats``: JSON curve ``[[answers applied, score, held-out
#: answers scored], ...]``; the score is the share of held-out choices the model makes as the rater did, or
#: for ratings the correlation of the model's distances with the rated ones.
CURVE_PREFIX = "heldout:"
#: Field of ``keys.engine_stats``: JSON ``{kind: {"metric": "agreement" or "correlation", "repeats": n,
#: "agreement": share, "choices": mean items offered, "ceiling": share}}``: how the kind's held-out answers are
#: scored and, for kinds with validation repeats, the ceiling they set (written with each summary).
KINDS_FIELD = "heldout-kinds"
#: Field prefixes (+ question kind) counting the validation repeats the passes read: answered, answered as
#: the first time, and the items offered summed (a repeat's number of choices).
REPEATS_PREFIX, AGREED_PREFIX, CHOICES_PREFIX = "repeats:", "repeats-agreed:", "repeat-choices:"
#: A curve keeps at most this many points (past it every other point is dropped, as the truth curve does).
CURVE_POINTS = 400
#: The summary scores the latest this many held-out answers (a study of a million answers holds 50,000).
SCORED_ANSWERS = 5000


def answer_document(kind: str, shown: list[int], picks: list[int], value: float | None) -> str:
    """One held-out answer as the list keeps it: its kind, the items shown, the picks, a rating's value (no
    rater, no time: what scoring a model needs)."""
    doc: dict = {"kind": kind, "shown": [int(i) for i in shown], "picks": [int(p) for p in picks]}
    if value is not None:
        doc["value"] = float(value)
    return json.dumps(doc, separators=(",", ":"))


def append_answers(pipe: Pipeline, study_id: str, documents: list[str]) -> None:
    if documents:
        pipe.rpush(keys.heldout(study_id), *documents)


def replace_answers(pipe: Pipeline, study_id: str, documents: list[str]) -> None:
    """The list as a replay of the whole log makes it (a rebuild)."""
    pipe.delete(keys.heldout(study_id))
    append_answers(pipe, study_id, documents)


def latest_answers(conn: Redis, study_id: str, limit: int = SCORED_ANSWERS) -> list[dict]:
    return [json.loads(raw) for raw in conn.lrange(keys.heldout(study_id), -int(limit), -1)]


def count_repeats(pipe: Pipeline, study_id: str, tallies: dict[str, list[int]]) -> None:
    """Add ``{kind: [repeats, agreed, choices summed]}`` to the study's counts of validation repeats."""
    for kind, (n, agreed, choices) in tallies.items():
        for prefix, value in ((REPEATS_PREFIX, n), (AGREED_PREFIX, agreed), (CHOICES_PREFIX, choices)):
            pipe.hincrby(keys.engine_stats(study_id), prefix + kind, int(value))


def replace_repeats(pipe: Pipeline, study_id: str, kinds: list[str], tallies: dict[str, list[int]]) -> None:
    """The counts of validation repeats as a replay of the whole log makes them (a rebuild)."""
    pipe.hdel(keys.engine_stats(study_id), *[p + k for k in kinds for p in (REPEATS_PREFIX, AGREED_PREFIX,
                                                                            CHOICES_PREFIX)])
    count_repeats(pipe, study_id, tallies)


def read_tallies(conn: Redis, study_id: str, kinds: list[str]) -> dict[str, list[int]]:
    """``{kind: [repeats, agreed, choices summed]}`` of the ``kinds`` with validation repeats counted."""
    names = [p + k for k in kinds for p in (REPEATS_PREFIX, AGREED_PREFIX, CHOICES_PREFIX)]
    values = conn.hmget(keys.engine_stats(study_id), names) if names else []
    out = {}
    for index, kind in enumerate(kinds):
        tally = [int(v or 0) for v in values[3 * index: 3 * index + 3]]
        if tally[0]:
            out[kind] = tally
    return out


def append_point(pipe: Pipeline, study_id: str, label: str, applied: int, score: float, scored: int) -> None:
    """Append (answers applied, score, held-out answers scored) to the learner's curve (one point per number
    of answers applied: a later score at the same number replaces it)."""
    append_curve_point(pipe, study_id, CURVE_PREFIX + label, [int(applied), round(float(score), 4), int(scored)],
                       CURVE_POINTS, replace_same_x=True)


def save_kinds(pipe: Pipeline, study_id: str, kinds: dict[str, dict]) -> None:
    pipe.hset(keys.engine_stats(study_id), KINDS_FIELD, json.dumps(kinds, sort_keys=True))


def curves(engine_stats: dict[str, str]) -> dict[str, list]:
    """Algorithm label -> its held-out curve, from the fields of ``keys.engine_stats`` (decoded)."""
    return {name[len(CURVE_PREFIX):]: json.loads(value)
            for name, value in engine_stats.items() if name.startswith(CURVE_PREFIX)}


def kinds_scored(engine_stats: dict[str, str]) -> dict[str, dict]:
    """The ``KINDS_FIELD`` document from the fields of ``keys.engine_stats`` (decoded)."""
    raw = engine_stats.get(KINDS_FIELD)
    return json.loads(raw) if raw else {}
