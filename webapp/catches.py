"""Attention checks that need a look at the items: near-certain comparisons chosen from the study's data.

A catch trial shows a head with a very similar and a very different item (triplets), or one such
pair (ratings), chosen with a stated margin from what the researcher said about the items: their known
positions (demo and simulated studies), or their labels with numeric features giving the margin (the
value a continuum was cut by). Media items (a folder of images, sounds or videos) without positions or
features show an item with a copy of itself, labelled or not (labels alone state no margin): the head
among its candidates (triplets, a grid's first place), an item against its copy (ratings, the "most
similar" end), two copies and another item (odd-one-out). On the wire every item is named by a handle
new for each question and position and its media bytes are padded (``webapp.handles``), so nothing but
the content says that two shown items are one. Text, HTML and colour items carry their content in the
payload, so a copy of one is readable without looking: those have catch trials by labels alone, and with
neither positions nor labels none. A label alone states no margin, so catch trials by labels alone are judged
by the crowd (``claim_key``; workers/jobs/rater_checks.py): a miss is pending until the other raters' answers
say whether people agree with the comparison, and the comparisons they do not agree with are retired.
Standard library only (web processes load no numpy).
"""
from __future__ import annotations

import json
import math
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from workers.store import keys

from .handles import CONTENT_ON_THE_WIRE, can_vary

if TYPE_CHECKING:
    from redis import Redis

    from workers.store.config import StudyConfig
    from workers.store.studies import Study

#: Seconds a web process keeps a study's comparisons before reading its items again (items are added
#: to a running study rarely; the refresh is timed, not drawn, so it says nothing about the question).
CACHE_SECONDS = 300
#: Heads per study to choose comparisons for, and the most item distances computed for them in all.
MAX_HEADS = 200
MAX_DISTANCES = 400_000
#: A comparison is kept only when the similar item is at most this share of the different one's distance.
MAX_DISTANCE_RATIO = 0.5
#: The different item is drawn from this farthest share of the items.
FAR_SHARE = 0.25
#: A rating check expecting a low rating shows only a pair at least this share of the largest distance
#: found apart: the farthest quarter of a central item is not far in absolute terms, and a careful rater
#: rates such a pair in the middle of the scale (on the egg items, 0.6 of the way: about a third of them).
RATING_FAR_SHARE = 0.85


#: What the comparisons stored for other processes are chosen by: comparisons stored by an older rule (a
#: study of unlabelled images stored none before copies were asked; labelled images had label catches
#: before copies replaced them) are chosen again.
RULES = 4
#: Seconds a web process keeps a crowd-judged study's retired comparisons before reading them again (a
#: comparison retired goes on being shown this long at most).
RETIRED_CACHE_SECONDS = 20

#: Items very unlike the head kept per comparison besides ``different``: enough to fill a grid of the
#: most references a rank screen shows (engine.kinds.MAX_REFERENCES) around the one like item.
OTHERS = 11


class Comparison(NamedTuple):
    """A head, an item very like it and one very unlike it (item indices); ``far``: whether the different
    one is far from the head in absolute terms too (a pair a careful rater rates low), not only against
    the similar one; ``others``: more items very unlike the head (a grid's other references)."""

    head: int
    similar: int
    different: int
    far: bool = True
    others: tuple[int, ...] = ()


#: Label comparisons a crowd-judged study asks (the first of those chosen, drawn in random order): the crowd
#: tells which ones people agree with only from many answers to each (benchmarks/catch_fairness.py measured
#: studies of 100 raters answering 20).
CROWD_COMPARISONS = 20

_cache: dict[str, tuple[float, tuple[float, int], list[Comparison], bool]] = {}
_retired: dict[str, tuple[float, frozenset[str]]] = {}


def claim_key(comparison: Comparison, expect: object) -> str:
    """The key of the claim a crowd-judged catch trial asks (the log's ``claim`` field): the comparison's items
    and, for a pair expected at the unlike end (``expect`` "low"), that it is the unlike pair (a comparison's
    alike and unlike pairs are two claims, judged apart)."""
    key = f"{comparison.head}:{comparison.similar}:{comparison.different}"
    return key + ":unlike" if expect == "low" else key


def judged_by_crowd(conn: Redis, study: Study, now: float | None = None) -> bool:
    """Whether the study's catch trials are judged by the crowd (comparisons by labels alone), from this
    process's copy of its comparisons (:func:`comparisons`)."""
    comparisons(conn, study, now)
    cached = _cache.get(study.id)
    return bool(cached and cached[3])


def retired(conn: Redis, study: Study, now: float | None = None) -> frozenset[str]:
    """The claim keys of the comparisons the crowd retired (``keys.catch_retired``), from this process's copy
    (read again every RETIRED_CACHE_SECONDS)."""
    now = time.time() if now is None else now
    cached = _retired.get(study.id)
    if cached is not None and cached[0] > now:
        return cached[1]
    found = frozenset(m.decode() for m in conn.smembers(keys.catch_retired(study.id)))
    _retired[study.id] = (now + RETIRED_CACHE_SECONDS, found)
    return found


def comparisons(conn: Redis, study: Study, now: float | None = None) -> list[Comparison]:
    """The study's near-certain comparisons, from this process's copy (read again every CACHE_SECONDS,
    and at once for another study of the same id or a changed item count).

    They are chosen once per study and item count, by whichever process needs them first, and kept in
    Redis for every other web process (``keys.catch_comparisons``): choosing them reads every item and
    takes ~0.1 s of CPU at 1,000 items, which raters joining together (a Prolific launch: 500 in 5 s) waited
    for in every process and thread at once. The choice is drawn from the study's own seed, so every
    process and every restart asks the same comparisons."""
    now = time.time() if now is None else now
    cached, version = _cache.get(study.id), (study.created_at, study.n_items)
    if cached is not None and cached[0] > now and cached[1] == version:
        return cached[2]
    with _lock(study.id):  # one thread of this process reads or chooses; the others wait for it
        cached = _cache.get(study.id)
        if cached is not None and cached[0] > now and cached[1] == version:
            return cached[2]
        stored = _stored(conn, study.id, version)
        if stored is None:
            rows = [json.loads(raw) for raw in conn.lrange(keys.items(study.id), 0, -1)]
            stored = _choose_and_store(conn, study, rows)
        found, crowd = stored
        _cache[study.id] = (now + CACHE_SECONDS, version, found, crowd)
        return found


def _choose_and_store(conn: Redis, study: Study, rows: list[dict]) -> tuple[list[Comparison], bool]:
    """Choose the comparisons of the study's items ``rows`` (drawn from the study's own seed) and keep them in
    Redis for every process; returns them and whether they are judged by the crowd (labels alone)."""
    found = choose_comparisons(rows, random.Random(f"{study.id}:{study.created_at}:{len(rows)}"))
    crowd = bool(found) and source_of(rows) == "labels"
    if crowd:
        found = found[:CROWD_COMPARISONS]
    conn.set(keys.catch_comparisons(study.id),
             json.dumps({"version": [study.created_at, study.n_items], "rules": RULES, "crowd": crowd,
                         "comparisons": [list(c) for c in found]}))
    return found, crowd


def prepare(conn: Redis, study: Study) -> str | None:
    """Choose and keep a study's comparisons now, where it is created or its items change (the CLI, the New
    study form), not in its first rater's request: choosing them takes ~0.1 s of CPU at 1,000 items, and a
    launch's first raters waited for it in every thread of the process that chose (the join burst's
    question p99 in ``benchmarks/load.py``). Reads the stored items (their features included). Returns
    :func:`items_catch_warning`'s warning."""
    rows = [json.loads(raw) for raw in conn.lrange(keys.items(study.id), 0, -1)]
    found = _choose_and_store(conn, study, rows)[0] if study.config.catch_every else []
    forget(study.id)
    return _warning(study.config, rows, found) or _unvaried_warning(conn, study, rows, found)


def _unvaried_warning(conn: Redis, study: Study, rows: list[dict], found: list[Comparison]) -> str | None:
    """UNVARIED_IMAGES where the study's catch trials are copies and some of its images cannot be varied per
    handle (read from their headers: ~0.1 ms an image), else None."""
    if not found or source_of(rows) != "copies":
        return None
    images = [i for i, row in enumerate(rows) if row.get("kind") == "image"]
    unvaried = []
    for start in range(0, len(images), 500):
        chunk = images[start:start + 500]
        for i, data in zip(chunk, conn.hmget(keys.media(study.id), [str(i) for i in chunk]), strict=True):
            if data is not None and not can_vary(data, rows[i].get("media_type")):
                unvaried.append(i)
    if not unvaried:
        return None
    examples = ", ".join(str(rows[i].get("id", i)) for i in unvaried[:3]) + (", ..." if len(unvaried) > 3 else "")
    return UNVARIED_IMAGES.format(count=f"{len(unvaried):,}", examples=examples)


_locks: dict[str, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock(study_id: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(study_id, threading.Lock())


def _stored(conn: Redis, study_id: str, version: tuple) -> tuple[list[Comparison], bool] | None:
    """The comparisons another process chose for this version of the study's items and whether they are
    judged by the crowd, None if none did."""
    raw = conn.get(keys.catch_comparisons(study_id))
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
        if tuple(doc["version"]) != tuple(version) or doc.get("rules") != RULES:
            return None
        return ([Comparison(int(h), int(s), int(d), bool(far), tuple(int(o) for o in others))
                 for h, s, d, far, others in doc["comparisons"]], bool(doc.get("crowd")))
    except (ValueError, KeyError, TypeError):
        return None  # written by another version of this code: choose again


def forget(study_id: str | None = None) -> None:
    """Drop this process's copies (all of them without ``study_id``)."""
    if study_id is None:
        _cache.clear()
        _retired.clear()
    else:
        _cache.pop(study_id, None)
        _retired.pop(study_id, None)


def source_of(items: list[dict]) -> str | None:
    """What a study's catch trials are chosen by (``choose_comparisons``): "positions", "features" (labels
    with numeric features), "labels" (labels alone), "copies" (media items), or None (no catch trials)."""
    positions = [item.get("position") for item in items]
    labelled = all(item.get("label") is not None for item in items)
    if len(items) >= 3 and all(p is not None and len(p) == len(positions[0]) for p in positions):
        return "positions"
    if len(items) >= 3 and labelled:
        if _standard_features(items) is not None:
            return "features"
        if not _all_media(items):
            return "labels"
    media = [item for item in items if item.get("kind") is not None and item["kind"] not in CONTENT_ON_THE_WIRE]
    return "copies" if len(media) >= 3 else None


def asks_copies(items: list) -> bool:
    """Whether a study of ``items`` (``workers.store.studies.Item``s or their dicts) has catch trials of copies
    (``source_of``): its images are then served as a variant per handle (``webapp.handles.varied``)."""
    return source_of(_rows(items)) == "copies"


def choose_comparisons(items: list[dict], rng: random.Random) -> list[Comparison]:
    """Comparisons with a stated margin: by the items' positions where every item has one (with their
    labels too where every item has one); by labels only where the researcher's numeric features give
    the margin (every item with the same features: a label catch kept only when its like item is at most
    MAX_DISTANCE_RATIO as far as its unlike ones in the standardised features); else, for media items,
    an item against its copy, labelled or not (a label alone states no margin: labels cut from a continuum,
    the egg items in 10 bins of smoothness, put an item of another label nearer the head than one of its
    own, and careful raters lost their code 12-96% of the time in benchmarks/catch_fairness.py); else
    (text, HTML or colour items) by labels alone; [] when none of these."""
    labels = [item.get("label") for item in items]
    source = source_of(items)
    if source == "positions":
        labelled = all(label is not None for label in labels)
        return _by_position([tuple(map(float, item["position"])) for item in items], rng, labels if labelled else None)
    if source == "features":
        return _by_position(_standard_features(items), rng, labels)
    if source == "labels":
        return _by_label(labels, rng)
    return _copies(items, rng)


def _all_media(items: list[dict]) -> bool:
    """Whether every item is media (an image, sound or video): a copy of one is not readable on the wire."""
    return all(item.get("kind") is not None and item["kind"] not in CONTENT_ON_THE_WIRE for item in items)


def _standard_features(items: list[dict]) -> list[tuple[float, ...]] | None:
    """Every item's numeric features, each feature standardised (mean 0, spread 1; a constant one left
    out), as positions; None unless every item has the same features and one of them varies."""
    names = sorted(items[0].get("features") or {})
    if not names or any(sorted(item.get("features") or {}) != names for item in items):
        return None
    columns = []
    for name in names:
        values = [float(item["features"][name]) for item in items]
        mean = sum(values) / len(values)
        spread = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        if spread > 0 and math.isfinite(spread):
            columns.append([(v - mean) / spread for v in values])
    return [tuple(row) for row in zip(*columns, strict=True)] if columns else None


#: An even draw looks at this many random candidates and takes the one shown least so far (the "power of
#: d choices": uses within a few of the mean, at a cost independent of the number of items).
EVEN_CHOICES = 8


class _Even:
    """Draws of the items catch trials show, each the least shown of EVEN_CHOICES random candidates (ties
    by the study's seeded generator): no item is shown far more often than others, so a program counting
    the items it sees over many screens learns little of which are a catch trial's (the farthest items of a
    line were each the unlike one of 6-9 times the mean when drawn at random)."""

    def __init__(self, rng: random.Random):
        self.rng, self.shown = rng, {}

    def count(self, *items: int) -> None:
        for i in items:
            self.shown[i] = self.shown.get(i, 0) + 1

    def pick(self, candidates: Sequence[int], avoid: set[int] | frozenset = frozenset()) -> int | None:
        """One of ``candidates`` not in ``avoid`` (None if none came up), counted as shown."""
        best, looked = None, 0
        for _ in range(EVEN_CHOICES * 4):  # drawn, not scanned: a candidate list may hold every item
            if not candidates or looked == EVEN_CHOICES:
                break
            j = candidates[self.rng.randrange(len(candidates))]
            if j in avoid:
                continue
            looked += 1
            if best is None or self.shown.get(j, 0) < self.shown.get(best, 0):
                best = j
        if best is not None:
            self.count(best)
        return best

    def sample(self, candidates: Sequence[int], k: int, avoid: set[int] | frozenset = frozenset()) -> list[int]:
        """Up to ``k`` distinct picks of ``candidates`` not in ``avoid``."""
        out: list[int] = []
        for _ in range(3 * k):
            if len(out) == k:
                break
            j = self.pick(candidates, set(avoid) | set(out))
            if j is not None:
                out.append(j)
        return out


def _copies(items: list[dict], rng: random.Random) -> list[Comparison]:
    """Each comparison an item and its copy (``similar`` is ``head``) against other items, all media items
    (kinds whose content is not in the payload): nothing about the items is needed, a copy is as alike
    as two shown items can be. ``far`` is False: a random other item is no pair a careful rater surely
    rates low, so a rating check shows the copy only."""
    media = [i for i, item in enumerate(items)
             if item.get("kind") is not None and item["kind"] not in CONTENT_ON_THE_WIRE]
    if len(media) < 3:
        return []
    found, even, fill = [], _Even(rng), _Even(rng)
    heads = rng.sample(media, min(len(media), MAX_HEADS))
    even.count(*heads, *heads)  # a head is shown twice, as itself and as its copy
    for h in heads:
        different = even.pick(media, {h})
        if different is not None:
            more = fill.sample(media, OTHERS, {h, different})
            found.append(Comparison(h, h, different, far=False, others=tuple(sorted(more))))
    return found


def _by_position(positions: list[tuple[float, ...]], rng: random.Random,
                 labels: list | None = None) -> list[Comparison]:
    """The margin: the like item at most MAX_DISTANCE_RATIO as far from the head as each unlike item is
    from the head, and as far as the unlike item is from the like one (an odd-one-out's two alike must be
    nearer each other than either is to the odd one); with labels too, the like item of the head's label
    and the unlike ones of others."""
    n = len(positions)
    heads = rng.sample(range(n), min(n, MAX_HEADS, max(1, MAX_DISTANCES // n)))
    found, even, fill = [], _Even(rng), _Even(rng)
    even.count(*heads)
    for h in heads:
        others = sorted((math.dist(positions[h], positions[j]), j) for j in range(n) if j != h)
        if labels is not None:
            same = [o for o in others if labels[o[1]] == labels[h]]
            others = [o for o in others if labels[o[1]] != labels[h]]
            if not same or not others:
                continue
            near_distance, similar = same[0]
        else:
            near_distance, similar = others[0]
            others = others[1:]
        if not others:
            continue
        far = others[len(others) - max(1, int(FAR_SHARE * len(others))):]
        distance = dict((j, d) for d, j in far)
        # the unlike item: of the farthest quarter, one meeting the margin from the like one too
        apart = [j for d, j in far if near_distance <= MAX_DISTANCE_RATIO * min(
            d, math.dist(positions[similar], positions[j]))]
        if near_distance <= MAX_DISTANCE_RATIO * far[-1][0] and apart:
            even.count(similar)
            different = even.pick(apart)
            # more unlike items for grids: from the farther half of the head's items, each at least twice as
            # far from the head as the like one
            fillers = [j for d, j in others[len(others) // 2:]
                       if j not in (different, similar) and near_distance <= MAX_DISTANCE_RATIO * d]
            more = tuple(fill.sample(fillers, min(OTHERS, len(fillers))))
            found.append((Comparison(h, similar, different, others=more), distance[different]))
    largest = max((d for _, d in found), default=0.0)
    return [c._replace(far=d >= RATING_FAR_SHARE * largest) for c, d in found]


def _by_label(labels: list, rng: random.Random) -> list[Comparison]:
    groups: dict = {}
    for i, label in enumerate(labels):
        groups.setdefault(label, []).append(i)
    if len(groups) < 2:
        return []
    n = len(labels)
    found, even, fill = [], _Even(rng), _Even(rng)
    heads = rng.sample(range(n), min(n, MAX_HEADS))
    even.count(*heads)
    everyone = range(n)  # items of other labels are drawn from all (not listed: n may be large)
    for h in heads:
        own = groups[labels[h]]
        similar = even.pick(own, {h}) if len(own) > 1 else None
        different = even.pick(everyone, set(own)) if similar is not None else None
        if different is None:
            continue
        more = fill.sample(everyone, OTHERS, {*own, different})
        found.append(Comparison(h, similar, different, others=tuple(sorted(more))))
    return found


#: Kinds of media item served as uploaded in a study of copies (``webapp.handles.varied`` varies images only).
UNVARIED_KINDS = frozenset({"audio", "video"})
#: What a researcher reads of a study that asks no catch trials although its config asks for them.
NO_CATCH_TRIALS = ("no catch trials: its items have neither positions nor labels, and they are text, HTML or "
                   "colours, whose content a page receives as it is, so an item shown with a copy of itself "
                   "is readable without a look; nothing tells a rater who looks from a program that answers "
                   "at random (in benchmarks/bots.py random bots were paid in every such study; the answer "
                   "check catches rule-following bots, not random ones). Items with labels (a CSV's label "
                   "column: items of a label alike, of different labels unlike) or positions have them, and "
                   "so do image, sound and video items (an item against a copy of itself)")
#: ... and what it reads of a study whose catch trials are chosen by labels alone.
LABELS_ALONE = ("catch trials by labels alone (an item of the head's label against items of other labels), judged by "
                "the crowd: a label states no margin (if the labels cut a continuum, an item of another label can be "
                "nearer the head than one of its own), so a miss waits until enough other raters answered the same "
                "comparisons to say whether people agree with them, the comparisons they do not agree with are no "
                "longer shown, and a rater's finish page shows their code marked unconfirmed until then; the "
                "schedule asks more of them (half the questions at 40 questions per rater). Give the value the "
                "labels were cut by as a numeric feature (a column of the items CSV) for catch trials with a margin, "
                "judged at once")
#: ... and one whose catch trials are copies of sound or video items, sent as they were uploaded. Kept: they
#: cost a catch trial's answers, and without them a rater answering at random keeps their code (as in a
#: study of text items); a program that reads the files is the rarer cheat.
COPIES_OF_FILES = ("catch trials of an item against a copy of itself, whose sound and video files are sent as "
                   "they were uploaded: a program that compares their bytes finds the copy without listening or "
                   "watching (images are sent as a variant of their own each time, which no comparison of bytes or "
                   "pixels tells apart). They still catch raters who answer at random or without attention; items "
                   "with positions, or labels with a numeric feature (a column of the items CSV), have catch trials "
                   "no comparison of files answers")
#: ... and one of images whose catch trials are copies where some images cannot be varied per handle
#: (``handles.can_vary``): those are sent as uploaded, so their copies are found by comparing bytes.
UNVARIED_IMAGES = ("catch trials of an item against a copy of itself, but {count} of the study's images ({examples}) "
                   "are sent as they were uploaded (an animation, more than 12 megapixels, 16-bit, CMYK or "
                   "black-and-white pixels, or a file the server cannot read), not as a variant of their own each "
                   "time as the others are: a program that compares their bytes finds their copies. Save them as "
                   "8-bit RGB (or greyscale) PNG or JPEG to have them varied")
#: ... and one whose config turned them off.
CATCHES_OFF = ("no catch trials (attention.rate: 0): random answers are caught by the answer check alone, "
               "which in a triplet study lets most of them through")


def catch_warning(config: StudyConfig, found: list[Comparison]) -> str | None:
    """Why a study asks no catch trials (``found``: its comparisons, :func:`comparisons` or
    :func:`choose_comparisons`), None when it asks them. ``config`` is the study's StudyConfig."""
    if not config.catch_every:
        return CATCHES_OFF
    return None if found else NO_CATCH_TRIALS


def items_catch_warning(config: StudyConfig, items: list) -> str | None:
    """:func:`catch_warning` for items about to be stored (``workers.store.studies.Item``s or their dicts), or
    LABELS_ALONE where their catch trials are chosen by labels alone."""
    rows = _rows(items)
    return _warning(config, rows, choose_comparisons(rows, random.Random(0)) if config.catch_every else [])


def _rows(items: list) -> list[dict]:
    return [item if isinstance(item, dict) else {"position": item.position, "label": item.label, "kind": item.kind,
                                                 "features": item.features}
            for item in items]


def _warning(config: StudyConfig, rows: list[dict], found: list[Comparison]) -> str | None:
    warning = catch_warning(config, found)
    if warning is None and source_of(rows) == "labels":
        return LABELS_ALONE
    if warning is None and source_of(rows) == "copies" and any(row.get("kind") in UNVARIED_KINDS for row in rows):
        return COPIES_OF_FILES
    return warning


def schedule_pass_rate(config: StudyConfig, trial_pass: float) -> float:
    """The share of raters who pass each catch trial with chance ``trial_pass`` that the catch rule leaves
    unflagged over a whole rater's schedule (``config``: the study's StudyConfig; catch trials with a margin or
    copies, ``catch_every``, not a crowd's verdict): the exact rate the rule states. A rater answering the
    planned questions gets one catch trial per block of ``catch_every``, at a uniformly random place
    (lua/next_question.lua), so a last block cut short holds one with its share of the places; then
    ``catch_failing`` on their trials and misses. ``trial_pass`` the kind's random pass rate
    (``config.catch_rates[1]``) gives a random answerer's chance of keeping their code: for 8-rank-2 grids at
    40 questions 5 trials, 1 miss allowed, 2 in 8 per trial: 1.56%."""
    every, n = config.catch_every, config.planned_questions
    if not every:
        return 1.0
    full, left = divmod(n, every)
    # trials: every full block's one, and the short last block's with chance left / every
    counts = {full: 1 - left / every, full + 1: left / every} if left else {full: 1.0}
    passed = 0.0
    for trials, weight in counts.items():
        for missed in range(trials + 1):
            if weight and not config.catch_failing(trials, missed):
                passed += (weight * math.comb(trials, missed) * (1 - trial_pass) ** missed
                           * trial_pass ** (trials - missed))
    return passed


#: The Overview warns when the study's raters miss more than this multiple of the careful miss rate its
#: catch kind states, over at least MISS_WARNING_TRIALS catch trials.
MISS_WARNING_FACTOR = 2
MISS_WARNING_TRIALS = 50


def miss_warning(config: StudyConfig, trials: int, missed: int) -> str | None:
    """What the Overview says of a study whose raters miss its catch trials far more often than careful
    raters miss near-certain ones (``trials``, ``missed``: every rater's together), None otherwise. Either
    many raters answer without looking, or the comparisons are not near-certain: labels cut from a
    continuum (the egg items in 10 bins by smoothness) give catch trials careful raters miss 12-45% of the
    time (benchmarks/catch_fairness.py), and then the catch rule flags careful raters too."""
    careful = config.catch_rates[0]
    if trials < MISS_WARNING_TRIALS or missed <= MISS_WARNING_FACTOR * careful * trials:
        return None
    return (f"a catch-trial miss rate of {missed / trials:.0%}, over {MISS_WARNING_FACTOR} times what careful "
            f"raters miss ({careful:.0%}): many raters answer without looking, or the catch trials are not "
            "near-certain (items of one label that are not alike, items of two labels that are). Look at the "
            "Raters tab before paying; attention.flag_action: mark keeps the codes while you decide")


#: The Overview warns when the crowd clearly contradicts more than this share of the label comparisons answered
#: (retired as agreed with clearly less than a careful rater's agreement), over at least CROWD_WARNING_CLAIMS.
CROWD_WARNING_SHARE = 0.5
CROWD_WARNING_CLAIMS = 10


def crowd_warning(claims: dict[str, int] | None) -> str | None:
    """What the Overview says of a study whose raters contradict most of its label comparisons (``claims``: the
    crowd's counts, ``keys.catch_claims``), None otherwise. Either the labels do not say which items people
    find alike, or many raters answer alike without looking (a crowd of bots picking by one rule agrees among
    itself): then the comparisons that tell careful raters from random ones are the ones retired."""
    if not claims or claims.get("answered", 0) < CROWD_WARNING_CLAIMS:
        return None
    contradicted, answered = claims.get("contradicted", 0), claims["answered"]
    if contradicted <= CROWD_WARNING_SHARE * answered:
        return None
    return (f"label catch trials whose comparisons the raters contradict: {contradicted} of the {answered} "
            "answered are retired as clearly not what people agree with. Either the labels do not say which items "
            "look alike, or many raters answer alike without looking; the catch trials left tell few raters "
            "apart. Look at the Raters tab before paying; attention.flag_action: mark keeps the codes while you "
            "decide")
