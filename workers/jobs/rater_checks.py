"""The answer check of the update pass: judge each rater's answers against the model learned from the
other raters (engine/rater_checks.py) at fixed looks, and flag the ones that look item-blind.

A rater is judged when their answers reach 10, 20, 40, 80, 160 or 320 (the k-th look allows a share
``false_flag_rate / 2**k`` of honest raters to be flagged, so all looks together flag at most
``false_flag_rate``); each look uses the rater's first that many answers, so a verdict does not depend
on when the pass runs. Flags only ever go on. Must never import Flask.
"""
from __future__ import annotations

import json
import logging
import time
import zlib
from typing import TYPE_CHECKING

import numpy as np

from engine import rater_checks
from workers.jobs import fits
from workers.store import keys
from workers.store.answers import CATCH_ALGORITHM, CATCH_PASS_FLAG, REPEAT_ALGORITHM, Answer, newest_entries
from workers.store.health import _ago
from workers.store.raters import (
    CATCH_PENDING,
    CHECKED_AT_FIELD,
    CROWD_FLAGGED,
    CROWD_JUDGED,
    CROWD_P,
    answer_check_looks,
    read_rater_stats,
)
from workers.store.studies import get_study

if TYPE_CHECKING:
    from redis import Redis

    from workers.store.config import StudyConfig
    from workers.store.studies import Study

log = logging.getLogger(__name__)

#: The reference model is fitted on at most this many of the study's answers (a random sample).
MAX_REFERENCE_ANSWERS = 20000
#: Whether rating answers are judged (on since the rating model is fitted again without the raters its
#: first fit finds item-blind: careful raters flagged at most 1% in benchmarks/bots.py and
#: tests/test_answer_check.py).
JUDGE_RATINGS = True
#: The trimmed fit of ratings: reference raters with at least this many ratings are tested on the first
#: model (with this many simulated answer sets) and left out of the second below this p-value.
RATING_TRIM_ANSWERS = 10
RATING_TRIM_SIMULATIONS = 400
RATING_TRIM_P = 0.01
RATING_TRIM_ROUNDS = 3
#: The log is read up to this many answers (the latest).
MAX_LOG_ANSWERS = 100000


def _fold(rater: str) -> int:
    return zlib.crc32(rater.encode()) % rater_checks.N_FOLDS


def _stats(conn: Redis, study_id: str) -> dict[str, dict[str, str]]:
    return read_rater_stats(conn, study_id)


def _read_log(conn: Redis, study_id: str) -> list[Answer]:
    entries = newest_entries(conn, study_id, MAX_LOG_ANSWERS)
    return [Answer.from_stream(i, f) for i, f in reversed(entries)]


#: A check beside the passes goes on while answers it has not seen keep arriving, at most this many rounds ...
CHECK_ROUNDS = 50
#: ... one this often (a verdict reads the rater's first answers up to a look, so when it runs changes only
#: when the finish page shows the code)
CHECK_EVERY_SECONDS = 5.0


def after_pass(conn: Redis, study_id: str, summary: dict) -> None:
    """The step after each update pass (workers/jobs/steps.py): check the raters when the pass applied answers,
    in the worker's fit process where it has one (a check reads the log and fits models: it must not
    hold the pool refills up), else here."""
    if not summary.get("applied"):
        return
    if not fits.run_beside(("answer-check", study_id), check_study_at, study_id):
        check_raters(conn, study_id)


def settle(conn: Redis, study_id: str, wait: float = 2 * CHECK_EVERY_SECONDS) -> None:
    """At the end of an update job: let a check under way beside the passes finish (``wait`` seconds at
    most), then start one for answers it did not see, so a study's last answers are checked too. A newer
    answer that queues the next job meanwhile ends the wait: that job settles in its turn."""
    key = ("answer-check", study_id)
    deadline = time.monotonic() + wait
    while fits.running_beside(key) and time.monotonic() < deadline:
        if conn.exists(keys.update_scheduled(study_id)):
            return  # newer answers queued the next job: it checks them, and its passes must not wait here
        time.sleep(0.1)
    try:
        if not fits.running_beside(key) and _left_to_judge(conn, study_id):
            after_pass(conn, study_id, {"applied": 1})
    except Exception:  # the update job must not fail on a check
        log.exception("answer check of study %s failed", study_id)


def _unchecked(conn: Redis, study_id: str) -> bool:
    return any(int(c.get("answers") or 0) > int(c.get("checked_answers") or 0)
               for c in _stats(conn, study_id).values())


def _left_to_judge(conn: Redis, study_id: str) -> bool:
    """Answers the checks have not seen, or (a closed study) missed catch trials still waiting for the crowd:
    a closed study's last raters are judged by the crowd there is."""
    if _unchecked(conn, study_id):
        return True
    status = conn.hget(keys.study(study_id), "status")
    return status == b"closed" and crowd_judged(conn, study_id) and crowd_waiting(_stats(conn, study_id))


def check_study_at(redis_url: str, study_id: str) -> None:
    """Check a study's raters from another process (the worker's fit pool), until every answer
    that arrived meanwhile was seen too."""
    import redis

    conn = redis.Redis.from_url(redis_url)
    try:
        for _ in range(CHECK_ROUNDS):
            check_raters(conn, study_id)
            if not _unchecked(conn, study_id):
                return
            time.sleep(CHECK_EVERY_SECONDS)  # one check per study this often, however fast answers come
    finally:
        conn.close()


def check_raters(conn: Redis, study_id: str) -> dict[str, dict]:
    """Judge every rater with a look due; returns {rater: verdict fields} of the raters judged now.
    Never raises: a failed check is logged and the update pass goes on."""
    try:
        return _check(conn, study_id)
    except Exception:  # the update pass must not fail on a check
        log.exception("answer check of study %s failed", study_id)
        return {}


def _check(conn: Redis, study_id: str) -> dict[str, dict]:
    study = get_study(conn, study_id)
    attention = study.config.attention
    stats = _stats(conn, study_id)
    unseen = {r: int(c.get("answers") or 0) for r, c in stats.items()
              if int(c.get("answers") or 0) > int(c.get("checked_answers") or 0)}
    log_answers: list[Answer] | None = None
    if crowd_judged(conn, study_id):
        try:
            closing = study.status == "closed" and crowd_waiting(stats)
            if closing or _crowd_seen(study, stats) != _crowd_looked_at(conn, study_id):
                catches = _catch_answers_counted(conn, study_id)  # before the log: what the look sees at least
                log_answers = _read_log(conn, study_id)
                judge_by_crowd(conn, study, log_answers, stats, catches)
                stats = _stats(conn, study_id)  # its flags leave the flagged out of the answer check's models
        finally:  # a failing look leaves what it waits for where /api/health reads it (crowd_status)
            _keep_waiting(conn, study_id, stats)
    if not unseen:
        return {}
    due = {}
    for rater, answers in unseen.items():
        done = int(stats[rater].get("looks") or 0)
        looks = answer_check_looks(answers)
        if attention.answer_check and looks and looks[-1][0] > done:
            due[rater] = looks[-1]
    if due and log_answers is None:
        log_answers = _read_log(conn, study_id)
    verdicts = judge(study, log_answers, due, stats) if due else {}
    with conn.pipeline(transaction=False) as pipe:
        for rater, answers in unseen.items():
            pipe.hset(keys.rater_stats(study_id), keys.rater_field(rater, "checked_answers"), answers)
        for rater, verdict in verdicts.items():
            look, _ = due[rater]
            alpha = rater_checks.look_alpha(look, attention.false_flag_rate)
            fields = {"looks": look, "answer_p": f"{verdict.p:.6g}", "answer_rule": verdict.likeliest,
                      "answer_n": verdict.n,
                      "answer_agreement": "" if verdict.agreement is None else f"{verdict.agreement:.4f}"}
            if verdict.p < alpha:
                fields["answer_flagged"] = 1
                if attention.flag_action != "mark":
                    fields["flagged"] = 1
                if attention.flag_action == "exclude":
                    pipe.sadd(keys.excluded_raters(study_id), rater)
            pipe.hset(keys.rater_stats(study_id), mapping={keys.rater_field(rater, k): v for k, v in fields.items()})
        for rater in due.keys() - verdicts.keys():
            # a look with nothing to judge (rating answers while JUDGE_RATINGS is off, or only checks and
            # repeats) is done too: the finish page waits for no verdict that will not come
            pipe.hset(keys.rater_stats(study_id), keys.rater_field(rater, "looks"), due[rater][0])
        pipe.hset(keys.engine_stats(study_id), CHECKED_AT_FIELD, time.time())
        pipe.execute()
    return {r: {"p": v.p, "likeliest": v.likeliest, "n": v.n, "agreement": v.agreement} for r, v in verdicts.items()}


def _ordinary(answer: Answer) -> bool:
    """An answer a learner uses: no catch trial, repeat or skip (a catch or repeat can be told apart
    or remembered, so it is no evidence of looking)."""
    return answer.algorithm not in (CATCH_ALGORITHM, REPEAT_ALGORITHM) and not answer.skipped


def judge(study: Study, log_answers: list[Answer], due: dict[str, tuple[int, int]],
          stats: dict[str, dict[str, str]]) -> dict[str, rater_checks.Verdict]:
    """Verdicts of the ``due`` raters ({rater: (look, answers)}): each judged on the ordinary answers among
    their first ``answers`` answers, against models fitted on the other raters' folds (raters flagged
    before are left out of every fit)."""
    position: dict[str, int] = {}
    window: dict[str, list[Answer]] = {r: [] for r in due}
    reference: list[Answer] = []
    flagged = {r for r, c in stats.items() if c.get("flagged") not in (None, "", "0")
               or c.get("answer_flagged") not in (None, "", "0")}
    for answer in log_answers:
        position[answer.rater] = position.get(answer.rater, 0) + 1
        if not _ordinary(answer):
            continue
        if answer.rater in due and position[answer.rater] <= due[answer.rater][1]:
            window[answer.rater].append(answer)
        if answer.rater not in flagged:
            reference.append(answer)
    seed = study.config.random_state or 0
    rng = np.random.default_rng(seed)
    if len(reference) > MAX_REFERENCE_ANSWERS:
        reference = [reference[i] for i in np.sort(rng.choice(len(reference), MAX_REFERENCE_ANSWERS, replace=False))]
    verdicts = {}
    # the model judges binary choices (anchored triplets) and ratings; screens of more items (odd-one-out,
    # grids) imply triplets whose candidates depend on the answer itself, which the random-responder
    # simulation does not model, so they are left to catch trials and repeats
    triplets = [a for a in reference if _one_triplet(a)]
    ratings = [a for a in reference if a.question_kind.on_scale]
    judged_t = {r: [a for a in w if _one_triplet(a)] for r, w in window.items()}
    judged_r = {r: [a for a in w if a.question_kind.on_scale] for r, w in window.items()}
    if any(judged_t.values()):
        verdicts.update(_judge_triplets(study, triplets, {r: w for r, w in judged_t.items()
                                                          if len(w) >= len(judged_r[r]) and w}, due, seed))
    # ratings: the model fitted on everyone flagged 42% of careful raters on the egg ratings
    # (benchmarks/bots.py: random bots not yet flagged pulled it to the middle); the trimmed fit does not
    if JUDGE_RATINGS and any(judged_r.values()):
        verdicts.update(_judge_ratings(study, ratings, {r: w for r, w in judged_r.items()
                                                        if len(w) > len(judged_t[r])}, due, seed))
    return verdicts


def _simulations(look: int, false_flag_rate: float) -> int:
    return int(min(100000, max(rater_checks.SIMULATIONS, 4 / rater_checks.look_alpha(look, false_flag_rate))))


def _one_triplet(answer: Answer) -> bool:
    """An answer implying one triplet of its screen, a head and two candidates as shown (its kind's
    ``one_triplet``)."""
    return answer.question_kind.one_triplet


def triplet_rows(answers: list[Answer]) -> tuple[np.ndarray, np.ndarray]:
    """The answers as ``engine.rater_checks`` triplet rows ``(head, first, second, first_nearer)`` (the
    candidates in the order shown), with ``first_nearer`` read from the triplet the answer implies (its
    kind's ``triplets``: what a pick means is the kind's to say, it need not be the nearer item); and,
    beside them, 1 where the rater picked the first candidate (what an item-blind rater's rule decides)."""
    rows, picked_first = [], []
    for answer in answers:
        head, first, second = answer.shown
        (t_head, x, y, nearer), = answer.triplets()
        if t_head != head or {x, y} != {first, second} or nearer not in (x, y):
            raise ValueError(f"answer {answer.id} ({answer.kind}) implies the triplet {(t_head, x, y, nearer)}, "
                             f"not one of its screen {answer.shown}")
        rows.append((head, first, second, int(nearer == first)))
        picked_first.append(int(answer.picks[0] == first))
    return np.array(rows, dtype=np.int64).reshape(-1, 4), np.array(picked_first, dtype=np.int64)


def _judge_triplets(study: Study, reference: list[Answer], windows: dict[str, list[Answer]],
                    due: dict[str, tuple[int, int]], seed: int) -> dict[str, rater_checks.Verdict]:
    n = study.n_items
    judged = [a for w in windows.values() for a in w]
    rows, picked_first = triplet_rows(reference + judged)
    if len(rows) == 0:
        return {}
    group = np.array([_fold(a.rater) for a in reference + judged])
    in_reference = np.arange(len(rows)) < len(reference)
    z = rater_checks.held_out_triplet_margins(rows, group, in_reference, n, seed=seed)
    scale = rater_checks.calibrate_temperature(z[in_reference], rows[in_reference, 3])
    p_nearer = rater_checks.LAPSE / 2 + (1 - rater_checks.LAPSE) / (1 + np.exp(-np.clip(scale * z, -30, 30)))
    # item-blind raters are modelled by what they click, the honest model by which candidate is nearer:
    # where picking the first candidate says it is the farther one, an honest rater picks it with the
    # chance that the second is nearer
    p_first = np.where(picked_first == rows[:, 3], p_nearer, 1 - p_nearer)
    verdicts, start = {}, len(reference)
    false_flag_rate = study.config.attention.false_flag_rate
    for rater, window in windows.items():
        part = slice(start, start + len(window))
        start += len(window)
        r = rows[part]
        verdicts[rater] = rater_checks.judge_triplets(
            p_first[part], picked_first[part], (r[:, 1] < r[:, 2]).astype(int),
            seed=seed + zlib.crc32(rater.encode()), simulations=_simulations(due[rater][0], false_flag_rate))
    return verdicts


def _rating_model(rows: np.ndarray, group: np.ndarray, in_reference: np.ndarray, n_items: int,
                  seed: int) -> tuple[np.ndarray, float]:
    """(held-out predicted distance of every rating row, the honest spread: the RMS of the reference's
    residuals, lapses included, as a spread too small would make careful raters look item-blind)."""
    predicted = rater_checks.held_out_rating_predictions(rows, group, in_reference, n_items, seed=seed)
    residual = rows[in_reference, 2] - predicted[in_reference]
    return predicted, float(np.sqrt(np.mean(residual ** 2))) if len(residual) else 0.25


def _item_blind_raters(answers: list[Answer], rows: np.ndarray, predicted: np.ndarray, sigma: float,
                       in_reference: np.ndarray, levels: np.ndarray | None, seed: int) -> set[str]:
    """The reference raters (RATING_TRIM_ANSWERS ratings or more) whose ratings look item-blind at
    RATING_TRIM_P on the first model: left out of the second. Random raters not yet flagged shrink the
    model's predictions towards the middle of the scale, and a careful rater whose ratings are then
    farther from them than the simulated careful raters looked item-blind (in benchmarks/bots.py, a
    crowd of 60 careful raters and 140 bots flagged most careful raters)."""
    by_rater: dict[str, list[int]] = {}
    for n, answer in enumerate(answers):
        if in_reference[n]:
            by_rater.setdefault(answer.rater, []).append(n)
    out = set()
    for rater, at in by_rater.items():
        if len(at) >= RATING_TRIM_ANSWERS:
            verdict = rater_checks.judge_ratings(predicted[at], rows[at, 2], sigma, levels=levels,
                                                 seed=seed + zlib.crc32(rater.encode()),
                                                 simulations=RATING_TRIM_SIMULATIONS)
            if verdict.p < RATING_TRIM_P:
                out.add(rater)
    return out


def _judge_ratings(study: Study, reference: list[Answer], windows: dict[str, list[Answer]],
                   due: dict[str, tuple[int, int]], seed: int) -> dict[str, rater_checks.Verdict]:
    judged = [a for w in windows.values() for a in w]
    answers = reference + judged
    if not answers:
        return {}
    # each rating's distance sample on the study's scale (its kind's settings); a rating without a value as
    # the scale's unlike end
    kind = answers[0].question_kind
    settings = study.config.settings_of(kind)
    samples = [kind.sample(a.value, settings) for a in answers]
    rows = np.array([(a.head, a.a, 1.0 if d is None else d) for a, d in zip(answers, samples, strict=True)])
    group = np.array([_fold(a.rater) for a in answers])
    in_reference = np.arange(len(rows)) < len(reference)
    steps = kind.sample_levels(settings)
    levels = None if steps is None else np.array(steps)
    predicted, sigma = _rating_model(rows, group, in_reference, study.n_items, seed)
    # the model of careful raters is fitted again without the raters it finds item-blind (a trimmed fit),
    # until it finds no more (a crowd with many bots needs a round or two more)
    kept = in_reference
    for _ in range(RATING_TRIM_ROUNDS):
        blind = _item_blind_raters(answers, rows, predicted, sigma, kept, levels, seed)
        if not blind:
            break
        kept = kept & np.array([a.rater not in blind for a in answers])
        predicted, sigma = _rating_model(rows, group, kept, study.n_items, seed)
    verdicts, start = {}, len(reference)
    false_flag_rate = study.config.attention.false_flag_rate
    for rater, window in windows.items():
        part = slice(start, start + len(window))
        start += len(window)
        verdicts[rater] = rater_checks.judge_ratings(
            predicted[part], rows[part, 2], sigma, levels=levels, seed=seed + zlib.crc32(rater.encode()),
            simulations=_simulations(due[rater][0], false_flag_rate))
    return verdicts


def crowd_judged(conn: Redis, study_id: str) -> bool:
    """Whether the study's catch trials are judged by the crowd (label comparisons: ``webapp.catches`` says so
    where it keeps them)."""
    raw = conn.get(keys.catch_comparisons(study_id))
    try:
        return bool(raw) and bool(json.loads(raw).get("crowd"))
    except (ValueError, AttributeError):
        return False


def _flagged(counters: dict[str, str]) -> bool:
    return any(counters.get(name) not in (None, "", "0") for name in ("flagged", "answer_flagged", CROWD_FLAGGED))


def _crowd_seen(study: Study, stats: dict[str, dict[str, str]]) -> str:
    """What a look of the crowd depends on besides the log's catch answers: their count and the raters who
    finished (the crowd reads the log only when one of them changed since its last look)."""
    limit = study.config.limits.max_questions_per_rater
    finished = sum(1 for c in stats.values()
                   if int(c.get("completed") or 0) or (limit and int(c.get("answers") or 0) >= limit))
    return f"{sum(int(c.get('catch') or 0) for c in stats.values())}:{finished}"


def _crowd_looked_at(conn: Redis, study_id: str) -> str:
    seen = conn.hget(keys.catch_claims(study_id), "seen")
    return seen.decode() if seen else ""


def crowd_waiting(stats: dict[str, dict[str, str]]) -> bool:
    """Whether a rater's missed catch trials still wait for the crowd's verdict."""
    return any(int(c.get(CATCH_PENDING) or 0) and not int(c.get(CROWD_JUDGED) or 0) and not _flagged(c)
               for c in stats.values())


def crowd_rates(config: StudyConfig) -> tuple[float, float]:
    """(the agreement a comparison must be shown to exceed, the catch kind's random pass rate) of a study's
    ``config`` (``StudyConfig``): the crowd's judgement is planned on the kind's stated rates."""
    careful_miss, chance = config.catch_rates
    return rater_checks.claim_threshold(careful_miss, chance), chance


def crowd_look(config: StudyConfig, claims: list[str], raters: list[str], agreed: list[int],
               counters: dict[str, dict[str, str]], final: bool, seed: int) -> tuple[rater_checks.CrowdJudgement,
                                                                                      list[str], list[str]]:
    """One look of the crowd at catch answers judged by it, in log order (``claims``: each answer's claim key,
    ``raters``, ``agreed``: 1 where it passed), with the raters' stats ``counters`` ({rater: fields}) and the
    study's ``config``: ``engine.rater_checks.judge_crowd``. Returns the judgement with the claim keys and the
    rater ids its integers stand for. benchmarks/catch_fairness.py calls this too."""
    claim_keys = list(dict.fromkeys(claims))
    rater_ids = list(dict.fromkeys(raters))
    claim_of = {k: n for n, k in enumerate(claim_keys)}
    rater_of = {r: n for n, r in enumerate(rater_ids)}
    limit = config.limits.max_questions_per_rater
    c = [counters.get(r, {}) for r in rater_ids]
    flagged = np.array([_flagged(x) for x in c], bool)
    judged = np.array([bool(int(x.get(CROWD_JUDGED) or 0)) for x in c], bool)
    finished = np.array([bool(int(x.get("completed") or 0)) or bool(limit and int(x.get("answers") or 0) >= limit)
                         for x in c], bool)
    seeds = np.array([seed + zlib.crc32(r.encode()) for r in rater_ids], dtype=np.int64)
    threshold, chance = crowd_rates(config)
    judgement = rater_checks.judge_crowd(
        np.array([claim_of[k] for k in claims], dtype=np.int64),
        np.array([rater_of[r] for r in raters], dtype=np.int64),
        np.array(agreed, dtype=np.int64), len(claim_keys), flagged, judged, finished, threshold, chance,
        config.attention.false_flag_rate, config.attention.crowd_raters, final, seeds)
    return judgement, claim_keys, rater_ids


def agreed_of(answers: list[Answer]) -> list[int]:
    """1 for each catch answer that passed (its outcome flag in the log), else 0."""
    return [int(CATCH_PASS_FLAG in a.flags.split(",")) for a in answers]


#: The field of ``keys.catch_claims`` with the time of the earliest missed catch trial still waiting for the
#: crowd's verdict at its last look (0 when none waited: the dashboard reads every field but two as a number).
OLDEST_PENDING_FIELD = "oldest_pending_at"
#: The crowd is "behind" when a rater's catch answers or finish, at least this many seconds old, came after its
#: last look (the check beside the passes looks within seconds of a change: a failing check never does).
CROWD_BEHIND_SECONDS = 120.0


def _catch_answers_counted(conn: Redis, study_id: str) -> int:
    """The catch answers the study has accepted (the answer script counts them per algorithm)."""
    return int(conn.hget(keys.counters(study_id), keys.counter_field("answers", CATCH_ALGORITHM)) or 0)


def _keep_waiting(conn: Redis, study_id: str, stats: dict[str, dict[str, str]]) -> None:
    """Store the raters whose missed catch trials wait for the crowd's verdict (count, and since when: the earliest
    missed catch trial of theirs at the crowd's last look; before any look, or for raters who came to wait
    after it, the earliest last answer of theirs: at least that old) where ``crowd_status`` reads them."""
    waiting = [c for c in stats.values() if int(c.get(CATCH_PENDING) or 0) and not int(c.get(CROWD_JUDGED) or 0)
               and not _flagged(c)]
    since = None
    if waiting:
        claims = conn.hmget(keys.catch_claims(study_id), ["judged_at", OLDEST_PENDING_FIELD])
        looked, oldest = _seconds(_text(claims[0])), _seconds(_text(claims[1]))
        since = oldest if oldest is not None else looked
        if since is None:
            since = min(_seconds(c.get("last_answer_at")) or time.time() for c in waiting)
    conn.hset(keys.crowd_state(study_id), mapping={"awaiting": len(waiting), "awaiting_since": repr(since or 0.0)})


def _text(raw: bytes | None) -> str | None:
    return raw.decode() if raw is not None else None


#: A crowd found behind reads at most this many log entries after its last look to date the earliest catch
#: answer it has not seen (catch trials are one question in 10-20: found in the first hundred).
BEHIND_SCAN_ENTRIES = 2000


def _first_unseen_catch(conn: Redis, study_id: str, after: str) -> float | None:
    """When the earliest catch answer logged after the log entry ``after`` ('' for the log's start) was
    answered; None when none is within BEHIND_SCAN_ENTRIES entries (a forgotten rater's, counted but gone)."""
    start, read = f"({after}" if after else "-", 0
    while read < BEHIND_SCAN_ENTRIES:
        batch = conn.xrange(keys.answers(study_id), min=start, count=200)
        for _, fields in batch:
            if fields.get(b"algorithm") == CATCH_ALGORITHM.encode():
                return float(fields[b"answered_at"])
        if len(batch) < 200:
            return None
        read += len(batch)
        start = "(" + batch[-1][0].decode()
    return None


def crowd_status(conn: Redis, study: Study, now: float | None = None) -> dict | None:
    """The crowd's state of a study whose catch trials it judges (None for any other study), for the places that
    report failures (``/api/health``, ``/metrics``, ``proxima studies``): the comparisons ``confirmed``,
    ``pending`` and ``retired`` at its last look; the raters ``awaiting`` a verdict (a missed catch trial, not
    judged, not flagged) at the last answer check; ``oldest_pending_age`` (s) since the earliest missed catch
    trial still waiting then (None when no one waits; from the crowd's last look, else at least as old as the
    rater's last answer then); ``last_look_age`` (s, None before the first look); ``state`` "behind" when a
    catch answer older than CROWD_BEHIND_SECONDS came after the crowd's last look. Reads no rater's counters
    and no log but the entries after the last look while catch answers came after it (a few round trips at any
    number of raters: ``benchmarks/health_cost.py``)."""
    if not crowd_judged(conn, study.id):
        return None
    now = time.time() if now is None else now
    with conn.pipeline(transaction=False) as pipe:
        pipe.hgetall(keys.catch_claims(study.id))
        pipe.hgetall(keys.crowd_state(study.id))
        pipe.hget(keys.counters(study.id), keys.counter_field("answers", CATCH_ALGORITHM))
        raw_claims, raw_state, counted = pipe.execute()
    claims = {k.decode(): v.decode() for k, v in raw_claims.items()}
    state = {k.decode(): v.decode() for k, v in raw_state.items()}
    looked = _seconds(claims.get("judged_at"))
    waiting = int(state.get("awaiting") or 0)
    oldest = _seconds(state.get("awaiting_since"))
    behind = False
    if int(counted or 0) > int(state.get("catches_seen") or 0):
        first = _first_unseen_catch(conn, study.id, state.get("log_seen", ""))
        behind = first is not None and now - first > CROWD_BEHIND_SECONDS
    return {"state": "behind" if behind else "ok",
            "confirmed": int(claims.get("confirmed") or 0), "pending": int(claims.get("pending") or 0),
            "retired": int(claims.get("retired") or 0), "awaiting": waiting,
            "oldest_pending_age": max(0.0, now - oldest) if waiting and oldest is not None else None,
            "last_look_age": None if looked is None else max(0.0, now - looked)}


def _seconds(raw: str | None) -> float | None:
    """A stored Unix time, None for none (absent, empty or 0)."""
    try:
        return float(raw) or None if raw else None
    except ValueError:
        return None


def describe_crowd(status: dict) -> str:
    """One line for a researcher: the comparisons' standing and the raters waiting (and whether the crowd is
    behind), from ``crowd_status``."""
    line = (f"crowd: {status['confirmed']} comparisons confirmed, {status['pending']} pending, {status['retired']} "
            f"retired; {status['awaiting']} rater(s) awaiting a verdict")
    if status["oldest_pending_age"] is not None:
        line += f" (the oldest for {_ago(status['oldest_pending_age'])})"
    if status["state"] == "behind":
        look = status["last_look_age"]
        last = "never" if look is None else f"{_ago(look)} ago"
        line += (f". The crowd is behind: catch answers wait that its last look ({last}) did not see (is the "
                 "worker's answer check failing? see its log)")
    return line


def judge_by_crowd(conn: Redis, study: Study, log_answers: list[Answer], stats: dict[str, dict[str, str]],
                   catches: int | None = None) -> dict:
    """Catch trials judged by the crowd (labels alone): retire the comparisons people do not agree with (no
    longer shown), count the comparisons for the dashboard and judge the raters due, once each (a flag does
    what the study's ``flag_action`` says, as every flag). ``catches``: the study's count of catch answers read
    before ``log_answers`` (``crowd_status`` compares it with the count then). Returns {rater: p} of the raters
    judged now."""
    answers = [a for a in log_answers if a.algorithm == CATCH_ALGORITHM and a.claim]
    if not answers:
        return {}
    config = study.config
    judgement, claim_keys, rater_ids = crowd_look(
        config, [a.claim for a in answers], [a.rater for a in answers], agreed_of(answers), stats,
        study.status == "closed", config.random_state or 0)
    attention = config.attention
    status = judgement.verdicts.claim
    retired = set(judgement.retire)
    confirmed = [n for n in np.flatnonzero(status == rater_checks.CLAIM_CONFIRMED) if n not in retired]
    counts = {"confirmed": len(confirmed),
              "retired": len(retired), "contradicted": int(np.count_nonzero(status == rater_checks.CLAIM_RETIRED)),
              "answered": len(claim_keys), "judged_at": time.time()}
    counts["pending"] = counts["answered"] - counts["confirmed"] - counts["retired"]
    counts["seen"] = _crowd_seen(study, stats)
    # the earliest missed catch trial of a rater still waiting for a verdict after this look (crowd_status: its age)
    waiting = {r for r, c in stats.items() if int(c.get(CATCH_PENDING) or 0) and not int(c.get(CROWD_JUDGED) or 0)
               and not _flagged(c)} - {rater_ids[x] for x in judgement.p}
    missed = [a.answered_at for a, ok in zip(answers, agreed_of(answers), strict=True) if not ok and a.rater in waiting]
    counts[OLDEST_PENDING_FIELD] = repr(min(missed)) if missed else "0"
    with conn.pipeline(transaction=True) as pipe:
        pipe.delete(keys.catch_retired(study.id))
        if retired:
            pipe.sadd(keys.catch_retired(study.id), *(claim_keys[n] for n in sorted(retired)))
        pipe.hset(keys.catch_claims(study.id), mapping=counts)
        if catches is not None:
            pipe.hset(keys.crowd_state(study.id), mapping={"catches_seen": catches, "log_seen": log_answers[-1].id})
        for x, p in judgement.p.items():
            rater = rater_ids[x]
            fields = {CROWD_JUDGED: 1, CROWD_P: f"{p:.6g}"}
            if x in judgement.flagged:
                fields[CROWD_FLAGGED] = 1
                if attention.flag_action != "mark":
                    fields["flagged"] = 1
                if attention.flag_action == "exclude":
                    pipe.sadd(keys.excluded_raters(study.id), rater)
            pipe.hset(keys.rater_stats(study.id), mapping={keys.rater_field(rater, k): v for k, v in fields.items()})
        pipe.execute()
    return {rater_ids[x]: p for x, p in judgement.p.items()}
