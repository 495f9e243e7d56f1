"""What the answers say about one item, for the dashboard's map (a click on an item): its nearest neighbours as
a learner has them now, and for each the answers that support or contradict it: for kinds that imply anchored
triplets (triplets, odd-one-out, rank) how many implied triplets judged the two closer than a third item and
how many judged a third item closer; for ratings the pairs the item was rated in, with their ratings.

Reads the answer log (the newest ``MAX_ANSWERS_READ`` answers) and the learner's stored state; must never
import Flask.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING

import numpy as np

from workers.jobs.learners import Learner
from workers.store import engine_state, keys
from workers.store.answers import CATCH_ALGORITHM, LOG_CHUNK, REPEAT_ALGORITHM, Answer

if TYPE_CHECKING:
    from redis import Redis

    from workers.store.studies import Study

#: How many of a learner's nearest neighbours the panel lists.
NEIGHBOURS = 5
#: Other items listed beside the neighbours: those the answers put closest to the item.
OTHERS = 5
#: At most this many of the newest answers are read for one click (the panel says when there were more): reading
#: the log costs about 20 µs an answer (2 s for 100,000 on the shared 2-core machine), a click should answer in
#: well under a second.
MAX_ANSWERS_READ = 20_000


def _newest_answers_showing(conn: Redis, study_id: str, item: int, limit: int):
    """(answers read, the answers among them that show ``item``, newest first): at most ``limit`` of the
    study's newest answers are read; only those showing the item are parsed (unreadable ones are skipped:
    the log keeps them)."""
    key, end, read, showing = keys.answers(study_id), "+", 0, []
    mark = f" {item} ".encode()
    while read < limit:
        want = min(LOG_CHUNK, limit - read)
        batch = conn.xrevrange(key, max=end, count=want)
        for entry_id, fields in batch:
            shown = fields.get(b"shown") or b" ".join(fields.get(name, b"") for name in (b"head", b"a", b"b"))
            if mark not in b" " + shown + b" ":
                continue
            try:
                showing.append(Answer.from_stream(entry_id, fields))
            except (KeyError, ValueError):
                continue
        read += len(batch)
        if len(batch) < want:
            break
        end = "(" + batch[-1][0].decode()
    return read, showing


def _learner(conn: Redis, study: Study, label: str) -> Learner | None:
    """The learner ``label`` as its stored state has it (None before it has state)."""
    state = engine_state.load(conn, study.id, label)
    return None if state is None else Learner.from_state(study.config.get_algorithm(label), study.config, state)


def _neighbours(learner: Learner | None, item: int) -> list[int]:
    """The learner's current nearest neighbours of ``item``, nearest first (none before it has state)."""
    if learner is None:
        return []
    graph = learner.graph(NEIGHBOURS)
    neighbors = np.asarray(graph.neighbors)
    if item >= len(neighbors):
        return []
    row = neighbors[item][:NEIGHBOURS].astype(int).tolist()
    guessed = learner.guessed(graph)[item]  # an edge no answer has touched is no neighbour yet (as the map's arrows)
    return [j for slot, j in enumerate(row) if j >= 0 and j != item and not guessed[slot]]


def _teaches(learner: Learner, answer: Answer) -> bool:
    """Whether ``learner`` learns from ``answer`` (its own answers, imported ones, the triplets other learners'
    answers imply where it takes them), as an update pass feeds it (``Learner.observe``)."""
    if learner.engine_answers([answer]):
        return True
    return bool(learner.entry.takes_triplets and learner.study_triplets([answer]))


def item_evidence(conn: Redis, study: Study, label: str, item: int, max_answers: int = MAX_ANSWERS_READ) -> dict:
    """The evidence panel of ``item`` for the learner ``label`` (JSON-safe): ``neighbours`` (the learner's,
    nearest first) and ``others`` (items the answers put closest that are not among them), each
    ``{"item", "neighbour", "closer", "farther"}`` for triplet-implying answers (``closer``: implied triplets
    judging the two closer than a third item, either one the anchor; ``farther``: a third item judged closer)
    and ``{"item", "neighbour", "ratings", "mean"}`` for ratings; ``answers``: those showing the item that the
    learner learns from (all learnable ones before it has state), among the ``read`` answers read
    (``all_read`` False when the log holds more)."""
    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study.id))}
    closer: Counter = Counter()
    farther: Counter = Counter()
    ratings: dict[int, list[float]] = defaultdict(list)
    about = 0
    read, showing = _newest_answers_showing(conn, study.id, item, max_answers)
    learner = _learner(conn, study, label)
    for answer in showing:
        if (item not in answer.shown or answer.rater in excluded or answer.skipped or answer.heldout
                or answer.algorithm in (CATCH_ALGORITHM, REPEAT_ALGORITHM)):
            continue
        if learner is not None and not _teaches(learner, answer):
            continue  # another learner's answer (each learner of a study learns from its own questions)
        about += 1
        if answer.value is not None:  # a rated pair (the item and the other shown)
            other = [j for j in answer.shown[:2] if j != item]
            if other:
                ratings[other[0]].append(float(answer.value))
            continue
        for head, x, y, winner in answer.triplets():
            near, far = winner, (y if winner == x else x)
            if head == item:
                closer[near] += 1
                farther[far] += 1
            elif near == item:
                closer[head] += 1  # the item was judged close to the anchor
            elif far == item:
                farther[head] += 1
    neighbours = _neighbours(learner, item)
    rated = bool(ratings)
    if rated:
        def row(j: int) -> dict:
            values = ratings.get(j, [])
            return {"item": j, "neighbour": j in neighbours, "ratings": len(values),
                    "mean": round(sum(values) / len(values), 3) if values else None}
        ranked = sorted(ratings, key=lambda j: (-sum(ratings[j]) / len(ratings[j]), -len(ratings[j]), j))
    else:
        def row(j: int) -> dict:
            return {"item": j, "neighbour": j in neighbours, "closer": closer[j], "farther": farther[j]}
        # the answers' own ranking: most often judged closer, net of the times judged farther
        ranked = sorted(set(closer) | set(farther), key=lambda j: (-(closer[j] - farther[j]), -closer[j], j))
    others = [j for j in ranked if j != item and j not in neighbours][:OTHERS]
    total = int(conn.xlen(keys.answers(study.id)))
    return {"item": item, "algorithm": label, "evidence": "ratings" if rated else "triplets",
            "neighbours": [row(j) for j in neighbours], "others": [row(j) for j in others],
            "answers": about, "read": read, "all_read": read >= total}
