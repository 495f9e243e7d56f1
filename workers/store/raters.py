"""The raters of a study, one row each: what the dashboard's rater table shows and the ``raters``
export holds (answers, response times, attention checks, skips, flags, exclusions, debriefs).
Must never import Flask or the engine.
"""
from __future__ import annotations

import csv
import io
import math
import re
from datetime import UTC, datetime
from statistics import median
from typing import TYPE_CHECKING

from workers.store import keys
from workers.store.answers import (
    CATCH_ALGORITHM,
    REPEAT_AGREE_FLAG,
    REPEAT_ALGORITHM,
    REPEAT_DISAGREE_FLAG,
    Answer,
    newest_entries,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

    from redis import Redis

    from workers.store.config import StudyConfig


#: The answers and median response times are read from at most this many of the latest answers.
RATER_TABLE_ANSWERS = 50000
CSV_COLUMNS = ("rater", "answers", "median_response_ms", "catch", "catch_failed", "too_fast_share", "skipped",
               "repeats", "self_agreement", "answer_check_p", "answer_check_rule", "answer_check_flagged", "flagged",
               "completed", "excluded", "last_answer_at", "completion_code", "debrief", "code_kind",
               "code_before_check", "catch_pending", "crowd_p", "crowd_flagged")


#: The answer check's looks (workers/jobs/rater_checks.py): a rater is judged when their answers reach
#: FIRST_LOOK, twice that, ... (MAX_LOOKS of them).
FIRST_LOOK = 10
MAX_LOOKS = 6
#: engine_stats field: when the answer check last ran (the finish page waits for it only if it runs).
CHECKED_AT_FIELD = "answer_check_at"
#: How long the finish page waits for the answer check of a rater's last answers before giving up.
ANSWER_CHECK_WAIT_SECONDS = 60


def answer_check_looks(answers: int) -> list[tuple[int, int]]:
    """The looks (number, answers judged) a rater with ``answers`` answers has reached."""
    return [(k, FIRST_LOOK * 2 ** (k - 1)) for k in range(1, MAX_LOOKS + 1) if FIRST_LOOK * 2 ** (k - 1) <= answers]


#: Rater-stats fields of catch trials judged by the crowd (labels alone, workers/jobs/rater_checks.py): the
#: misses waiting for the crowd's verdict (counted instead of ``catch_failed``); the verdict (1 once judged);
#: its p-value; and 1 where it flagged the rater.
CATCH_PENDING = "catch_pending"
CROWD_JUDGED = "crowd_judged"
CROWD_P = "crowd_p"
CROWD_FLAGGED = "crowd_flagged"


#: answer_check_state: nothing to wait for; a look still to come, waited for; a look still to come after
#: the wait (a code shown now is shown before the verdict).
CHECK_DONE, CHECK_PENDING, CHECK_LATE = "done", "pending", "late"


def answer_check_state(conn: Redis, study_id: str, rater: str, now: float, answer_check: bool = True) -> str:
    """Where the checks stand on this rater's answers, for the finish page: CHECK_PENDING while the answer
    check (``answer_check``: the study's is on) has a look still to do, or the crowd's verdict on missed catch
    trials judged by the crowd (CATCH_PENDING) is still to come, and the page waits for it
    (ANSWER_CHECK_WAIT_SECONDS after the rater's last answer at most, also before any check ran for the
    study: a worker not started yet or dead must not pay unchecked raters silently); CHECK_LATE when it is
    still to come after the wait (a queue of work in the workers, none running, or a crowd of raters still to
    answer after this one): the code shown now comes before the verdict, and the page says so; CHECK_DONE
    otherwise."""
    answers, looks, last, pending, judged = conn.hmget(
        keys.rater_stats(study_id), [keys.rater_field(rater, n) for n in ("answers", "looks", "last_answer_at",
                                                                         CATCH_PENDING, CROWD_JUDGED)])
    reached = answer_check_looks(_int(answers)) if answer_check else []
    crowd_waiting = _int(pending) > 0 and not _int(judged)
    if (not reached or reached[-1][0] <= _int(looks)) and not crowd_waiting:
        return CHECK_DONE
    return CHECK_LATE if now - float(last or 0) > ANSWER_CHECK_WAIT_SECONDS else CHECK_PENDING


def answer_check_pending(conn: Redis, study_id: str, rater: str, now: float) -> bool:
    """Whether the finish page waits for the answer check's verdict on this rater (``answer_check_state``)."""
    return answer_check_state(conn, study_id, rater, now) == CHECK_PENDING


#: Rater-stats field: the finish page showed this rater's code before the answer check's verdict on their
#: last answers (CHECK_LATE), saying the code is confirmed once they are checked.
CODE_BEFORE_CHECK_FIELD = "code_before_check"


#: Fields of a study's rater counters read per call (HSCAN): a study of 10,000 raters has ~120,000, and one
#: HGETALL of them held Redis, and every rater's answer behind it, for ~100 ms (an HSCAN of 500 for under 1 ms)
RATER_STATS_CHUNK = 500


def read_rater_stats(conn: Redis, study_id: str) -> dict[str, dict[str, str]]:
    """Every rater's counters, ``{rater: {counter: value}}``, read ``RATER_STATS_CHUNK`` fields at a time so that
    answers are accepted in between (a counter that changes meanwhile is read before or after the change)."""
    rows: dict[str, dict[str, str]] = {}
    for field, value in conn.hscan_iter(keys.rater_stats(study_id), count=RATER_STATS_CHUNK):
        rater, name = keys.split_rater_field(field.decode(errors="replace"))
        if rater:
            rows.setdefault(rater, {})[name] = value.decode(errors="replace")
    return rows


def _float(value) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _int(value) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def rater_table(conn: Redis, study_id: str, limit: int = RATER_TABLE_ANSWERS) -> list[dict]:
    """One row per rater: answers, median response time, catch trials and failures, too-fast share,
    skips, validation repeats and self-agreement, flags, exclusion and the debrief answer.

    Counts come from the per-rater counters (``keys.rater_stats``); answers are the larger of that
    counter and the rater's answers among the latest ``limit`` of the log, where the median response
    times come from.
    """
    entries = newest_entries(conn, study_id, limit)
    times: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    last: dict[str, float] = {}
    for entry_id, fields in entries:
        answer = Answer.from_stream(entry_id, fields)
        counts[answer.rater] = counts.get(answer.rater, 0) + 1
        last.setdefault(answer.rater, answer.answered_at)
        if answer.response_ms is not None:
            times.setdefault(answer.rater, []).append(answer.response_ms)
    counters = read_rater_stats(conn, study_id)
    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
    rows = []
    for rater in sorted(set(counts) | set(counters) | excluded):
        c = counters.get(rater, {})
        answers = max(counts.get(rater, 0), _int(c.get("answers")))
        too_fast = _int(c.get("too_fast"))
        rows.append({
            "rater": rater, "answers": answers,
            "median_response_ms": median(times[rater]) if times.get(rater) else None,
            "catch": _int(c.get("catch")), "catch_failed": _int(c.get("catch_failed")),
            # catch trials judged by the crowd (labels alone): misses waiting for its verdict, and the verdict's
            # p-value (None until judged) and flag
            "catch_pending": _int(c.get(CATCH_PENDING)) if not _int(c.get(CROWD_JUDGED)) else 0,
            "crowd_p": _float(c.get(CROWD_P)), "crowd_flagged": c.get(CROWD_FLAGGED) not in (None, "", "0"),
            "too_fast_share": too_fast / answers if answers else 0.0, "skipped": _int(c.get("skipped")),
            # validation repeats answered (skips left out) and the share answered as the first time
            "repeats": _int(c.get("repeats")),
            "self_agreement": _int(c.get("repeat_agreed")) / _int(c.get("repeats")) if _int(c.get("repeats")) else None,
            # the answer check (workers/jobs/rater_checks.py): its latest p-value, the item-blind responder
            # the answers look likeliest from, and whether it flagged the rater
            "answer_check_p": _float(c.get("answer_p")), "answer_check_rule": c.get("answer_rule") or None,
            "answer_check_flagged": c.get("answer_flagged") not in (None, "", "0"),
            "flagged": c.get("flagged") not in (None, "", "0"),
            "completed": c.get("completed") not in (None, "", "0"),
            "excluded": rater in excluded, "last_answer_at": last.get(rater), "debrief": c.get("debrief"),
            # the code the finish page showed (older studies stored only "1": shown, code not kept)
            "completion_code": c.get("code_shown") if c.get("code_shown") not in (None, "", "1") else None,
            # "full", or "partial" for a partial-completion code (the study ran out before the rater finished)
            "code_kind": (c.get("code_kind") or "full") if c.get("code_shown") not in (None, "") else None,
            # the code was shown before the answer check's verdict on the last answers (its wait ran out):
            # a code of a rater flagged since is one to reject
            "code_before_check": c.get(CODE_BEFORE_CHECK_FIELD) not in (None, "", "0"),
        })
    rows.sort(key=lambda r: (-r["flagged"], -r["answers"], rater_order(r["rater"])))
    return rows


def rater_order(rater: str) -> list:
    """A sort key putting rater ids in the order people count them: the numbers inside an id compare as
    numbers (sim-2 before sim-10, R9999 before R10000), the rest as text."""
    parts = re.split(r"(\d+)", rater)
    return [int(part) if i % 2 else part for i, part in enumerate(parts)]


#: The answer flags a replay of the log recomputes (others, e.g. ``skipped`` and ``late``, say what the
#: rater did or when, and are kept).
OUTCOME_FLAGS = frozenset({"catch_pass", "catch_fail", REPEAT_AGREE_FLAG, REPEAT_DISAGREE_FLAG, "too_fast"})
#: Rater-stats fields a replay of the log cannot recompute and keeps: what the rater typed.
KEPT_RATER_FIELDS = frozenset({"debrief"})


def _catch_expected(head: int, other: int, items: list[dict]) -> bool | None:
    """Whether ``other`` is the item an attention check built from the items (webapp/catches.py) showed
    as like ``head``: the same label, or (by known positions) nearer than half the head's items; None
    where the items say neither."""
    if not (0 <= head < len(items) and 0 <= other < len(items)):
        return None
    positions = [item.get("position") for item in items]
    if all(p is not None for p in positions):
        here = [float(x) for x in positions[head]]
        dists = sorted(math.dist(here, [float(x) for x in p]) for j, p in enumerate(positions) if j != head)
        return math.dist(here, [float(x) for x in positions[other]]) <= dists[len(dists) // 2]
    labels = [item.get("label") for item in items]
    if all(label is not None for label in labels):
        return labels[other] == labels[head]
    return None


def _catch_passed(answer: Answer, config: StudyConfig, items: list[dict]) -> bool:
    """The live rule (webapp.questions_answers.catch_passed) from what the log and the items hold: a
    check showing the head among its candidates (or one item twice) expects the head (the alike end of a
    value: a high rating, "same"); one built from the items expects the like item (a value at the alike end
    for a like pair, the unlike end for an unlike one: the kind's ``catch_passes``)."""
    kind = answer.question_kind

    def passes(alike) -> bool:
        return bool(kind.catch_passes(answer.shown, answer.picks, alike, answer.value, config.settings_of(kind)))

    if answer.skipped or not (answer.picks or answer.value is not None):
        return False
    if len(set(answer.shown)) < len(answer.shown):
        # an item with its copy (webapp.catches._copies): alike is the same item
        try:
            return passes(lambda i, j: i == j)
        except ValueError:  # an odd-one-out whose pick was one of the copies
            return False
    if answer.head in (answer.a, answer.b):
        return answer.choice == answer.head
    return passes(lambda i, j: _catch_expected(i, j, items))


def _screen_key(answer: Answer) -> tuple:
    """A rater's question whatever the order its items were shown in (a repeat shuffles them; a headed
    screen keeps its head)."""
    return answer.rater, answer.shown[0] if answer.question_kind.headed else None, frozenset(answer.shown)


def replay_rater_stats(answers: list[Answer], config: StudyConfig,
                       items: list[dict] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """Recompute from the answer log (in log order) what the live path derived as answers arrived:
    each answer's outcome flags (catch passed or failed, repeat agreed or not, too fast) and the
    rater-stats fields (``keys.rater_field``: answers, catch, catch_failed, catch_pending, too_fast, skipped, repeats,
    repeat_agreed, repeat_sources, last_answer_at, flagged, completed). Returns (flags by answer id,
    rater-stats hash). Imported answers (no question id) belong to no rater session and are left out.

    The rules are the live path's: a triplet attention check passes when the item like the head is chosen
    (the head itself in checks that showed it; by the study's ``items``' positions or labels otherwise), a
    rating one in the top quarter of the scale for a like pair and the bottom quarter for an unlike one;
    a repeat agrees when it picks what the rater picked the
    first time they answered that triplet (no first answer in the log: it does not agree); the flag
    rules of ``attention`` are checked after each answer. Completion codes are not in it: the finish
    page shows a code again from these statistics.
    """
    attention, limits = config.attention, config.limits
    stats: dict[str, dict[str, float]] = {}
    first_choice: dict[tuple[str, int, frozenset], int] = {}
    flags_by_id: dict[str, str] = {}
    for answer in answers:
        if not answer.qid:
            continue
        rater = stats.setdefault(answer.rater, dict.fromkeys(
            ("answers", "catch", "catch_failed", CATCH_PENDING, "too_fast", "skipped", "repeats", "repeat_agreed",
             "flagged"), 0))
        previous = rater.get("last_answer_at", 0.0)
        kept = [f for f in answer.flags.split(",") if f and f not in OUTCOME_FLAGS]
        outcome = []
        rater["answers"] += 1
        rater["last_answer_at"] = answer.answered_at
        if answer.skipped:
            rater["skipped"] += 1
        minimum = config.too_fast_ms(answer.question_kind)
        elapsed_ms = (answer.answered_at - max(answer.issued_at, previous)) * 1000
        if minimum and ((answer.response_ms is not None and answer.response_ms < minimum) or elapsed_ms < minimum):
            outcome.append("too_fast")
            rater["too_fast"] += 1
        if answer.algorithm == REPEAT_ALGORITHM:
            if not answer.skipped:
                first = first_choice.get(_screen_key(answer))
                again = answer.question_kind.repeat_answer(answer.picks, answer.value)
                agreed = first is not None and again is not None and again == first
                rater["repeats"] += 1
                rater["repeat_agreed"] += agreed
                outcome.append(REPEAT_AGREE_FLAG if agreed else REPEAT_DISAGREE_FLAG)
                # judged once, at repeats_to_judge, as the live path (lua/self_agreement.lua) does
                if (rater["repeats"] == attention.repeats_to_judge
                        and rater["repeat_agreed"] / rater["repeats"] < attention.min_self_agreement):
                    rater["flagged"] = 1
        elif answer.algorithm == CATCH_ALGORITHM:
            passed = _catch_passed(answer, config, items or [])
            rater["catch"] += 1
            # a miss of a label comparison waits for the crowd's verdict (workers/jobs/rater_checks.py judges
            # the restored log again)
            rater[CATCH_PENDING if answer.claim else "catch_failed"] += not passed
            outcome.append("catch_pass" if passed else "catch_fail")
            every = config.catch_every_of(bool(answer.claim))
            if every:  # the block given its check (next_question.lua), so a restored rater's
                rater["catch_block"] = (rater["answers"] - 1) // every  # schedule goes on

        elif answer.question_kind.repeatable and not answer.skipped:
            answered = answer.question_kind.repeat_answer(answer.picks, answer.value)  # the first pick, a value
            if answered is not None:
                first_choice.setdefault(_screen_key(answer), answered)
        if config.catch_failing(rater["catch"], rater["catch_failed"]):
            rater["flagged"] = 1
        flags_by_id[answer.id] = ",".join(kept + outcome)
    n_answers = len(answers)
    budget_reached = bool(limits.answer_budget) and n_answers >= limits.answer_budget
    fields: dict[str, str] = {}
    for rater, counts in stats.items():
        counts["repeat_sources"] = counts["repeats"]
        done = bool(limits.max_questions_per_rater) and counts["answers"] >= limits.max_questions_per_rater
        counts["completed"] = int(done or budget_reached)
        for name, value in counts.items():
            if not value and name != "catch_block":
                continue  # as the live path, which makes a field when it first counts one
            fields[keys.rater_field(rater, name)] = repr(value) if name == "last_answer_at" else str(int(value))
    return flags_by_id, fields


def _iso(ts: float) -> str:
    """A Unix time as the answers export writes times: ISO 8601 in UTC, to the millisecond."""
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


def _text_cell(text: str | None) -> str:
    """Free text a rater typed, safe to open in a spreadsheet: a leading =, +, -, @ (a formula) gets a '."""
    if not text:
        return ""
    return "'" + text if text[0] in "=+-@\t\r" else text


def export_raters_csv(conn: Redis, study_id: str) -> Iterator[str]:
    """The rater table as CSV (one chunk): yes/no columns as 1/0, empty where unknown; the debrief
    answer is the rater's text, with a ' in front if it would start a spreadsheet formula."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rater_table(conn, study_id):
        cells = {k: ("" if v is None else int(v) if isinstance(v, bool) else v) for k, v in row.items()}
        cells["debrief"] = _text_cell(row["debrief"])
        # the same time format as the answers export (ISO 8601, UTC)
        cells["last_answer_at"] = "" if row["last_answer_at"] is None else _iso(row["last_answer_at"])
        writer.writerow(cells)
    yield buf.getvalue()
