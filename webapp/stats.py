"""Numbers the dashboard shows about a study, read from Redis in one round trip, and the raters table.

Pure Python on purpose: the stats route is polled every few seconds by every open dashboard. It
only reads: for studies whose items have known positions (demo and simulated studies), the error
curve against the answers applied is recorded by the update pass (``workers.store.truth``).
Must never import the engine.
"""
from __future__ import annotations

import json
import time
from statistics import median
from typing import TYPE_CHECKING

from rq.exceptions import NoSuchJobError
from rq.job import Job

from workers.store import health, keys, questions
from workers.store.config import ALGORITHM_TABLE
from workers.store.heldout import curves as heldout_curves
from workers.store.heldout import kinds_scored
from workers.store.queue import REBUILD_STATUS_FIELD
from workers.store.studies import Study
from workers.store.truth import TRUTH_FIELD, error_curves, truth_known

if TYPE_CHECKING:
    from redis import Redis


#: The response-time histogram covers this many of the latest answers.
RECENT_ANSWERS = 2000
#: A rater counts as active when they were given a question this recently.
ACTIVE_SECONDS = 300
LATENCY_POINTS = 200


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def histogram(values: list[float], bins: int = 20, top: float | None = None) -> dict:
    """Equal-width bins from 0 to ``top`` (default: the 99th percentile), the last bin also
    counting everything above. ``{"edges": [bins + 1 floats], "counts": [bins ints]}``."""
    if not values:
        return {"edges": [], "counts": []}
    top = top or _percentile(values, 0.99) or max(values) or 1.0
    width = top / bins
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, max(0, int(v // width)))] += 1
    return {"edges": [round(i * width, 3) for i in range(bins + 1)], "counts": counts}


#: RQ job states as the dashboard words them.
_REBUILD_STATES = {"queued": "queued", "deferred": "queued", "scheduled": "queued", "started": "running",
                   "finished": "finished", "failed": "failed", "stopped": "failed", "canceled": "failed"}


def _rebuild_status(conn: Redis, raw: str | None) -> dict | None:
    """The latest rebuild (queued, running, finished with its figures, or failed), or None if none was asked for."""
    if not raw:
        return None
    status = json.loads(raw)
    if status.get("state") == "queued":  # the job writes "finished" itself; ask RQ how far it got
        try:
            state = Job.fetch(status["job_id"], connection=conn).get_status()
            status["state"] = _REBUILD_STATES.get(getattr(state, "value", str(state)), "queued")
        except NoSuchJobError:
            status["state"] = "lost"  # the job expired unrun (no worker?) or was deleted
    status["message"] = rebuild_message(status)
    return status


def rebuild_message(status: dict) -> str:
    """What the dashboard says about a rebuild, or the forget of a rater that comes before one."""
    raters = ", ".join(status.get("raters") or []) or "the excluded raters"
    state = status.get("state")
    if status.get("action") == "forget":  # the forget job itself (workers.store.deletion.request_forget)
        return {"queued": "Forgetting a rater: queued, waiting for a worker (their session is refused already).",
                "running": "Forgetting a rater: taking their answers out of the answer log.",
                "failed": "Forgetting the rater failed; see the worker's log. Their session stays refused; "
                          "forget them again to finish.",
                "lost": "Forgetting a rater was queued but no worker ran it; is a worker running ('proxima "
                        "worker')? Forget them again to queue it anew."}.get(state, "Forgetting a rater.")
    if "forgotten_answers" in status:  # the rebuild after a forget
        marked = status.get("models_marked") or []
        done = (f"Rater forgotten: {status['forgotten_answers']} answer(s) taken out of the log"
                + (f"; models trained with their answers are marked so: {', '.join(marked)}" if marked else "")
                + ". ")
        return done + rebuild_message({k: v for k, v in status.items() if k != "forgotten_answers"})
    if state == "queued":
        return f"Rebuild queued (excluding {raters}): waiting for a worker."
    if state == "running":
        return f"Rebuild running (excluding {raters}): replaying the answer log."
    if state == "failed":
        return "The rebuild failed; see the worker's log. Excluding the rater again queues a new one."
    if state == "lost":
        return "The rebuild was queued but no worker ran it; is a worker running ('proxima worker')?"
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(status.get("finished_at") or 0))
    return (f"Rebuild finished at {when}: {status.get('answers_replayed', 0)} answers replayed, "
            f"{status.get('answers_excluded', 0)} excluded (raters: "
            f"{', '.join(status.get('excluded_raters') or []) or 'none'}); "
            f"{status.get('neighbours_changed', 0)} nearest neighbours changed.")


#: The Overview lists what failed or died in the last day, at most this many of them.
INCIDENT_SECONDS = 86400
INCIDENTS_SHOWN = 10


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts))


def split_sentence(split: dict | None) -> str:
    """What the Overview says of the split of rater time a ``split: learner`` study's learner set (``split``:
    ``questions.split_in_force``; None: none set yet)."""
    if split is None:
        return ("The pooled learner sets the split of the raters' time between ratings and triplets after its "
                "first update pass; until then the configured shares hold.")
    seconds, measured = split["seconds"], split.get("measured", {})
    kinds = list(split["time_shares"])  # the learner's own kind first (``Algorithm.splits_time``)
    how = ", ".join(f"{seconds[kind]:.1f} s per {kind}" for kind in kinds)
    if all(measured.get(kind) for kind in kinds):
        how = f"measured {how}"
    else:
        how += "; " + " and ".join(f"{kind}s take the usual time until 20 are timed" for kind in kinds
                                   if not measured.get(kind))
    shares = ", ".join(f"{label} {100 * share:.0f}%" for label, share in split["shares"].items())
    text = (f"The learner asks {kinds[0]}s {100 * split['time_shares'][kinds[0]]:.0f}% of rater time ({how}), since "
            f"{_utc(split['since'])}; of the questions: {shares}.")
    if split.get("phase") == "explore":
        text += " Half the time each until it has a fit and 5 answers of each kind per item."
    return text


def split_status(conn: Redis, study: Study) -> dict | None:
    """The split in force of a ``split: learner`` study (``questions.split_in_force``, with ``sentence``); None for
    a study of fixed shares."""
    if study.config.split != "learner":
        return None
    split = questions.split_in_force(conn, study.id, study.config)
    return {**(split or {}), "set": split is not None, "sentence": split_sentence(split)}


def study_stats(conn: Redis, study: Study) -> dict:
    labels = [a.label for a in study.config.algorithms]
    with conn.pipeline(transaction=False) as pipe:
        pipe.xlen(keys.answers(study.id))
        pipe.scard(keys.raters(study.id))
        pipe.hgetall(keys.counters(study.id))
        pipe.zcard(keys.issued(study.id))
        pipe.hgetall(keys.answers_per_minute(study.id))
        pipe.hgetall(keys.engine_stats(study.id))
        pipe.lrange(keys.refresh_latencies(study.id), 0, -1)
        pipe.smembers(keys.finished(study.id))
        pipe.hlen(keys.poisoned(study.id))
        pipe.zcount(keys.active_raters(study.id), time.time() - ACTIVE_SECONDS, "+inf")
        pipe.xrevrange(keys.answers(study.id), count=RECENT_ANSWERS)
        pipe.llen(keys.heldout(study.id))
        for label in labels:
            pipe.llen(keys.pool(study.id, label))
        replies = pipe.execute()
    n_answers, n_raters, counters, issued, per_minute, engine, latencies, finished, n_poisoned = replies[:9]
    n_active, recent, n_heldout = replies[9:12]
    depths = dict(zip(labels, replies[12:], strict=True))
    response_ms = [float(f[b"response_ms"]) for _, f in recent if f.get(b"response_ms")]
    counters = {k.decode(): int(v) for k, v in counters.items()}
    served = counters.get("questions_served", 0)
    fallback = counters.get("fallback_served", 0)
    engine = {k.decode(): v.decode() for k, v in engine.items()}
    summaries = json.loads(engine.pop("summary")) if "summary" in engine else {}
    features = json.loads(engine.pop(keys.FEATURES_FIELD)) if keys.FEATURES_FIELD in engine else None
    features_job = json.loads(engine.pop(keys.FEATURES_JOB_FIELD)) if keys.FEATURES_JOB_FIELD in engine else None
    rebuild = _rebuild_status(conn, engine.pop(REBUILD_STATUS_FIELD, None))
    known = truth_known(engine.pop(TRUTH_FIELD, None), study.n_items)
    curves = error_curves(engine)
    held, held_kinds = heldout_curves(engine), kinds_scored(engine)
    latencies = [float(x) for x in latencies]
    finished = {f.decode() for f in finished}
    algorithms = []
    for alg in study.config.algorithms:
        label = alg.label
        a_served = counters.get(keys.counter_field("questions_served", label), 0)
        a_fallback = counters.get(f"fallback_served:{label}", 0)
        progress = (summaries.get(label) or {}).get("progress")
        neighbors = (summaries.get(label) or {}).get("neighbors")
        error = None
        curve = curves.get(label)
        if known and curve and ALGORITHM_TABLE[alg.algorithm].yields_graph:
            # the update pass appends a point with every summary it writes: the last one is the current error
            error = {"share_wrong": curve[-1][1], "answers_applied": curve[-1][0], "curve": curve}
        entry = ALGORITHM_TABLE[alg.algorithm]
        # planners that work in rounds certify each item's neighbour (engine.graph.Progress)
        certified = progress["items_certified"] / study.n_items if progress and entry.rounds and study.n_items \
            else None
        algorithms.append({
            "label": label, "algorithm": alg.algorithm, "question_kind": alg.question_kind, "share": alg.share,
            "budget": alg.budget, "answers": counters.get(keys.counter_field("answers", label), 0),
            "questions_served": a_served,
            "fallback_served": a_fallback, "fallback_rate": a_fallback / a_served if a_served else 0.0,
            "pool_depth": int(depths[label]), "finished": label in finished,
            "progress": progress, "share_certified": certified, "rounds": entry.rounds,
            "neighbors": neighbors, "truth_error": error,
            # items added after the learner was built: neighbours predicted from features (workers.jobs.predicted)
            "predicted": (summaries.get(label) or {}).get("predicted"),
            "heldout": _heldout(held.get(label), held_kinds.get(alg.question_kind) or {}),
        })
    # answers to the learners' own questions: attention checks and validation repeats left out
    learner_answers = sum(a["answers"] for a in algorithms)
    budget = study.config.limits.answer_budget
    complete = bool(labels) and finished >= set(labels)
    state = study.status
    if study.status == "running" and budget and int(n_answers) >= budget:
        state = "budget reached"
    elif study.status == "running" and complete:
        state = "complete"
    learning = health.learning_status(conn, study.id)
    learning["problem"] = health.describe(learning)
    # what failed or died lately (this study's and the processes every study shares), newest first
    learning["incidents"] = health.incidents(conn, since=time.time() - INCIDENT_SECONDS, study_id=study.id
                                             )[:INCIDENTS_SHOWN]
    return {
        "state": state,
        "learning": learning,
        "learner_answers": learner_answers,
        "answers_per_item": learner_answers / study.n_items if study.n_items else 0.0,
        "study": {"id": study.id, "name": study.config.name, "status": study.status,
                  "algorithm": study.config.algorithm, "n_items": study.n_items,
                  "complete": complete, "truth_known": known},
        "rebuild": rebuild,
        "features": None if features is None and features_job is None else {
            **(features or {}), "job": features_job,
            "sentence": features_sentence(features or {}, summaries, features_job)},
        # questions kept out of training to score the learners' models (workers.jobs.heldout)
        "heldout": {"share": study.config.heldout_share, "answers": int(n_heldout)},
        "answers": int(n_answers),
        "raters": int(n_raters),
        "questions_served": served,
        "fallback_served": fallback,
        "fallback_rate": fallback / served if served else 0.0,
        "pool_depth": sum(int(d) for d in depths.values()),
        "questions_outstanding": int(issued),
        "answers_set_aside": int(n_poisoned),
        "active_raters": int(n_active),
        "response_ms": {"recent_answers": len(response_ms),
                        "median": median(response_ms) if response_ms else None,
                        "histogram": histogram(response_ms)},
        "answers_per_minute": sorted([int(m) * 60, int(c)] for m, c in per_minute.items()),
        "algorithms": algorithms,
        # the split of rater time the pooled learner set (a study of ``split: learner``; None: fixed shares)
        "split": split_status(conn, study),
        "engine": {
            "updates": int(engine.get("updates", 0)),
            "answers_applied": int(engine.get("answers_applied", 0)),
            "active_raters": int(engine.get("active_raters", 0)),
            "last_latency_ms": float(engine["last_latency_ms"]) if "last_latency_ms" in engine else None,
            "latency_ms_p50": _percentile(latencies, 0.5),
            "latency_ms_p95": _percentile(latencies, 0.95),
            "latencies_ms": latencies[:LATENCY_POINTS][::-1],  # oldest first
            "last_batch": int(engine.get("last_batch", 0)),
            # the study's keys in Redis and its learners' states in a worker (written with the summary; None
            # until an update pass has measured them, rather than a "0.0 MB" nothing measured)
            "memory_redis_bytes": _int(engine.get("memory_redis_bytes")) or None,
            "memory_engine_bytes": _int(engine.get("memory_engine_bytes")) or None,
            "last_update_at": float(engine["last_update_at"]) if "last_update_at" in engine else None,
        },
    }


#: What the Learning tab says of built-in features (``workers.jobs.builtin_features``), before anything else.
BUILTIN_SENTENCE = ("The item features are Proxima's built-in image statistics (colour, texture, shape), computed "
                    "from the pixels alone: weak features that see how an image looks, not what it shows. The "
                    "learner tests them against the answers and drops them if they predict nothing; your own "
                    "features (proxima features STUDY FILE) replace them.")


def features_sentence(features: dict, summaries: dict, job: dict | None = None) -> str:
    """What the Learning tab says of the study's item features: built-in ones are weak (and the job computing
    them, while it runs or if it failed), how many items added later have neighbours predicted from them (and
    how), how often the features alone make the rater's pick on the held-out answers, and each learner's own live
    score of them (duels: how often an item's feature neighbour beat another)."""
    parts = []
    state = (job or {}).get("state")
    if state in ("queued", "running", "rebuilding"):
        done = f" ({job.get('done', 0):,} of {job['total']:,} images)" if job.get("total") else ""
        parts.append(f"Built-in image features are being computed{done}; the learners start from them once they "
                     "are (a rebuild from the answers so far).")
    elif state == "failed":
        parts.append(f"Built-in image features could not be computed: {job.get('error')}.")
    if str(features.get("source") or "").startswith("builtin"):
        parts.append(BUILTIN_SENTENCE)
    if not features:
        return " ".join(parts)
    added = int(features.get("items_added") or 0)
    if added:
        how = {p["by"] for s in summaries.values() if (p := (s or {}).get("predicted"))}
        through = ("through the map the learner learned from the answers" if how == {"learned map"} else
                   "in the standardised features" if how == {"features"} else
                   "through a learner's learned map where it has one, else in the standardised features")
        parts.append(f"{added:,} item(s) added after the learners were built have neighbours predicted from their "
                     f"features ({through}), marked “predicted”: no rater has been asked about them.")
    held = features.get("heldout")
    if held:
        parts.append(f"The features alone make the rater's pick in {100 * held['agreement']:.0f}% of "
                     f"{held['answers']:,} held-out answers (chance: 50% for triplets).")
    for label, own in sorted((features.get("learners") or {}).items()):
        if "share" in own:  # the rating learner: tested on the ratings at each refit
            held = own["share"]
            said = ("no fit has tested them yet" if held is None else
                    f"the features' distances predict the ratings, so their map holds {100 * held:.0f}% of the "
                    "space's spread in its last fit" if own.get("used") else
                    "the features' distances did not predict the ratings in its last fit, which left them out")
            parts.append(f"{label}: {said}.")
            continue
        share = own.get("agreement")
        said = ("no answer has tested them yet" if share is None else
                f"an item's feature neighbour beat another item in {100 * share:.0f}% of the answers that pit them")
        parts.append(f"{label}: {said}; it {'still uses' if own.get('used') else 'has dropped'} the features.")
    return " ".join(parts) or "The items have features; no answer has tested them yet."


def _heldout(curve: list | None, kind: dict) -> dict | None:
    """An algorithm's held-out score: the latest point of its curve (answers applied, score, held-out answers
    scored), the curve, how its kind is scored and the ceiling its validation repeats set (None: none yet)."""
    if not curve:
        return None
    applied, score, scored = curve[-1]
    return {"metric": kind.get("metric", "agreement"), "score": score, "answers_applied": applied,
            "answers_scored": scored, "curve": curve, "ceiling": kind.get("ceiling"),
            "repeats": kind.get("repeats", 0), "self_agreement": kind.get("agreement")}


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0
