"""The answer log: accept an answer exactly once, read it back, export it.

The log is a Redis stream per study, the source of truth. Accepting is one Lua script:
it refuses a used or reclaimed question, appends the answer, marks the token used and
flags an update as scheduled — all or nothing — under the study's rules (``AcceptRequest``).
Must never import Flask or the engine.
"""
from __future__ import annotations

import csv
import io
import json
import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, NamedTuple

from engine.kinds import AnswerError, get_kind, kind_of
from workers.store import keys, questions
from workers.store.lua import Script
from workers.store.queue import UPDATE_FLAG_TTL

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Iterator

    from redis import Redis

    from engine.kinds import QuestionKind
    from workers.store.config import StudyConfig


#: Accepting an answer (and issuing the rater's next question): workers/store/lua/accept.lua.
ACCEPT = Script("accept.lua")
#: The self-agreement judgement accept.lua makes after a validation repeat, run alone.
SELF_AGREEMENT = Script("judge_self_agreement.lua")

#: A rater id starts with a letter or digit (so no spreadsheet reads an exported id as a formula).
RATER_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")

ANSWER_FIELDS = ("qid", "rater", "kind", "head", "a", "b", "choice", "value", "probe", "algorithm", "fallback",
                 "issued_at", "answered_at", "response_ms", "flags", "shown", "picks", "heldout", "claim")
NO_ITEM = -1
#: The algorithm label of attention-check answers: kept in the log, never given to an engine.
CATCH_ALGORITHM = "catch"
#: The algorithm label of validation repeats (a triplet the rater answered, asked again with its
#: candidates swapped): kept in the log with a flag below, never given to an engine, so a repeat is
#: never counted as a second piece of evidence.
REPEAT_ALGORITHM = questions.REPEAT_ALGORITHM
#: The flag of a catch trial passed (``catch_fail`` the other).
CATCH_PASS_FLAG = "catch_pass"
REPEAT_AGREE_FLAG = "repeat_agree"
REPEAT_DISAGREE_FLAG = "repeat_disagree"
#: The flag of an answer the rater skipped ("can't decide"): no choice, no value.
SKIPPED_FLAG = "skipped"
#: The flag of an answer taken after its study was paused or closed (``accept_late_answers``).
LATE_FLAG = "late"
#: The question mark (in the question a pool holds and its token carries) and the log field of a held-out
#: question's answer: a uniformly random question whose answer no learner ever learns from, kept to score
#: the learners' models (``workers.jobs.heldout``). The field is written only for held-out answers ("1").
HELDOUT = "heldout"
#: The log field of a catch trial judged by the crowd (a label comparison, ``webapp.catches``): the comparison
#: it asked (its claim key), written only for those; workers/jobs/rater_checks.py judges them.
CLAIM = "claim"


class AnswerRefused(Exception):
    """The answer was not stored; ``code`` says why: ``used``, ``expired``, ``rater_limit`` (the rater
    has answered their maximum), ``budget`` (the study has all the answers it may take), ``rater_stopped``
    or ``stale`` (the caller's copy of the study is out of date: lua/study_guard.lua)."""

    def __init__(self, code: str, answer_id: str | None = None) -> None:
        super().__init__(code)
        self.code = code
        self.answer_id = answer_id


@dataclass(frozen=True)
class Answer:
    """One row of the answer log. ``id`` is the stream id (ms timestamp-sequence).

    Every answer keeps its whole screen: ``shown`` every item, in the order shown (a headed kind's head
    first), and ``picks`` the items chosen, in the order chosen (``engine.kinds``). ``head``, ``a``, ``b``
    and ``choice`` are the first three items shown and the first pick (``NO_ITEM`` where there is none),
    the columns answers had before screens of more items: a triplet answer judged ``head`` closer to
    ``choice`` (one of ``a``, ``b``); a rating rated ``head`` and ``a`` ``value`` on the study's scale.
    ``probe`` is set for triplet-derived distance questions (the j of the pair (head, j)). ``flags`` is
    a comma-separated list of quality flags. Log entries written before ``shown``/``picks`` existed
    get them from ``head``, ``a``, ``b`` and ``choice``. ``heldout``: the answer to a held-out question
    (never given to a learner; scores them).
    """

    id: str
    qid: str
    rater: str
    kind: str
    head: int
    a: int
    b: int
    choice: int
    algorithm: str
    fallback: bool
    issued_at: float
    answered_at: float
    response_ms: int | None
    value: float | None = None
    probe: int | None = None
    flags: str = ""
    shown: tuple[int, ...] = ()
    picks: tuple[int, ...] = ()
    heldout: bool = False
    claim: str = ""

    def __post_init__(self) -> None:
        if not self.shown:
            object.__setattr__(self, "shown", tuple(i for i in (self.head, self.a, self.b) if i != NO_ITEM))
        if not self.picks and self.choice != NO_ITEM:
            object.__setattr__(self, "picks", (self.choice,))

    @property
    def question_kind(self) -> QuestionKind:
        """This answer's entry of the table of question kinds (:class:`engine.kinds.QuestionKind`)."""
        return get_kind(self.kind)

    @property
    def skipped(self) -> bool:
        """The rater chose "can't decide": the log keeps the record, engines learn nothing from it."""
        return SKIPPED_FLAG in self.flags.split(",")

    @property
    def late(self) -> bool:
        """Answered after the study was paused or closed, to a question handed out before."""
        return LATE_FLAG in self.flags.split(",")

    def question(self) -> dict:
        """The question this answers, as the pool held it (what a learner's ``forget`` takes)."""
        common = {"qid": self.qid, "kind": self.kind, "algorithm": self.algorithm, "fallback": self.fallback}
        if not self.question_kind.headed:
            return {**common, "items": list(self.shown)}
        question = {**common, "head": self.shown[0], "candidates": list(self.shown[1:])}
        if len(self.shown) > 3 or len(self.picks) > 1:
            question["select"] = len(self.picks)
        if self.probe is not None:
            question["probe"] = self.probe
        return question

    @property
    def items(self) -> list[int]:
        """Every item shown, in the order shown."""
        return list(self.shown)

    def triplets(self) -> list[tuple[int, int, int, int]]:
        """The anchored triplets ``(head, x, y, winner)`` this answer implies (``engine.kinds``); none
        for a skipped answer or a rating."""
        if self.skipped or not self.picks:
            return []
        return self.question_kind.triplets(self.shown, self.picks)
    @classmethod
    def from_stream(cls, entry_id: bytes, fields: dict) -> Answer:
        f = {k.decode(): v.decode() for k, v in fields.items()}
        return cls(
            id=entry_id.decode(), qid=f["qid"], rater=f["rater"], kind=f["kind"], head=int(f["head"]),
            a=int(f["a"]), b=int(f["b"]), choice=int(f["choice"]), algorithm=f["algorithm"],
            fallback=f["fallback"] == "1", issued_at=float(f["issued_at"]), answered_at=float(f["answered_at"]),
            response_ms=int(f["response_ms"]) if f.get("response_ms") not in (None, "") else None,
            value=float(f["value"]) if f.get("value") not in (None, "") else None,
            probe=int(f["probe"]) if f.get("probe") not in (None, "") else None,
            flags=f.get("flags", ""),
            shown=tuple(int(x) for x in f.get("shown", "").split()),
            picks=tuple(int(x) for x in f.get("picks", "").split()),
            heldout=f.get(HELDOUT) == "1",
            claim=f.get(CLAIM, ""),
        )


@dataclass(frozen=True)
class AcceptRequest:
    """What accepting an answer needs besides the answer itself: the study's rules, from its config, and what
    follows in the same script (accept.lua). ``used_ttl``: how long the used-token marker lives;
    ``max_per_rater``, ``budget``: refuse the answer past the rater's most answers (``rater_limit``) or the
    study's (``budget``); ``flag_rule`` (min_checks, max_failure_share, misses allowed;
    ``StudyConfig.catch_rule``): flag the rater once they failed more than that share of at least min_checks
    catch trials and more than the misses allowed (None: leave the flag alone); ``stop_flagged``: refuse a
    flagged rater's answer (``rater_stopped``); ``min_response_ms``: flag ``too_fast`` an answer given
    sooner after the later of its issue and the rater's previous answer; ``require_held``: refuse
    (``expired``) a question the rater no longer holds (dropped for a newer one, or expired; see
    lua/next_question.lua); ``guard``: check the caller's copy of the study and the rater's browser session
    first (lua/study_guard.lua); ``then``: issue the rater's next question (``questions.next_request``);
    ``exclude_flagged``: after a failed catch trial, exclude a rater the flag rule flags (``flag_action:
    exclude``; needs ``flag_rule``); ``repeats_to_judge``, ``min_self_agreement``: after a validation
    repeat, judge the rater's self-agreement once (lua/self_agreement.lua; None: never);
    ``complete_refused``: mark the rater completed when the answer is refused at their or the study's
    limit; ``complete_at``: mark the rater completed once this answer makes their answers this many (a late
    answer's rule; None: never)."""

    used_ttl: int
    max_per_rater: int | None = None
    budget: int | None = None
    flag_rule: tuple[int, float, int] | None = None
    stop_flagged: bool = False
    min_response_ms: int = 0
    require_held: bool = False
    guard: questions.StudyGuard | None = None
    then: questions.NextRequest | None = None
    exclude_flagged: bool = False
    repeats_to_judge: int | None = None
    min_self_agreement: float = 0.0
    complete_refused: bool = False
    complete_at: int | None = None

    def __post_init__(self) -> None:
        if self.exclude_flagged and self.flag_rule is None:
            raise ValueError("exclude_flagged needs the flag_rule it excludes by")

    @classmethod
    def live(cls, config: StudyConfig, kind: QuestionKind, used_ttl: int,
             then: questions.NextRequest | None = None, guard: questions.StudyGuard | None = None,
             late: bool = False) -> AcceptRequest:
        """A rater's answer to a question of ``kind`` in a study of ``config``, as the answer endpoint stores
        it: every rule of the study's limits and attention, the question required held; every answer
        re-checks the flag rule (abandoned catch trials count as failed without an answer); a refusal at a
        limit completes the rater, and so does a ``late`` answer (the study paused or closed) that brings
        their answers to the count a completion code needs."""
        limits, attention = config.limits, config.attention
        return cls(used_ttl=used_ttl, max_per_rater=limits.max_questions_per_rater, budget=limits.answer_budget,
                   flag_rule=config.catch_rule(), stop_flagged=attention.stops_flagged,
                   min_response_ms=config.too_fast_ms(kind), require_held=True, guard=guard, then=then,
                   exclude_flagged=attention.flag_action == "exclude",
                   repeats_to_judge=attention.repeats_to_judge, min_self_agreement=attention.min_self_agreement,
                   complete_refused=True, complete_at=limits.answers_for_code if late else None)

    def args(self) -> dict:
        """accept.lua's arguments for these rules (the answer's own are ``accept_and_issue``'s)."""
        rule = self.flag_rule
        return {
            "used_ttl": int(self.used_ttl), "max_per_rater": int(self.max_per_rater or 0),
            "budget": int(self.budget or 0),
            "min_checks": "" if rule is None else int(rule[0]),
            "failure_limits": "" if rule is None else f"{float(rule[1])!r} {int(rule[2])}",
            "stop_flagged": "1" if self.stop_flagged else "0", "min_response_ms": int(self.min_response_ms or 0),
            "require_held": "1" if self.require_held else "0", "issue_next": "0" if self.then is None else "1",
            "exclude_flagged": "1" if self.exclude_flagged else "0",
            "repeats_to_judge": "" if self.repeats_to_judge is None else int(self.repeats_to_judge),
            "min_self_agreement": repr(float(self.min_self_agreement)),
            "complete_refused": "1" if self.complete_refused else "0", "complete_at": int(self.complete_at or 0),
            **(self.guard or questions.StudyGuard()).args(),
        }


class Accepted(NamedTuple):
    """What ``accept_and_issue`` did: the answer's id, whether an update must be enqueued (this call set the
    study's update flag), the next question (None when none was asked for) and whether the answer completed
    the rater (``AcceptRequest.complete_at``)."""

    answer_id: str
    schedule: bool
    next: questions.NextQuestion | None
    completed: bool


def accept_answer(conn: Redis, study_id: str, question: dict, rater: str, choice: int | None, issued_at: float,
                  response_ms: int | None, used_ttl: int, value: float | None = None,
                  flags: str = "", stats: tuple[str, ...] = (), max_per_rater: int | None = None,
                  budget: int | None = None) -> tuple[str, bool]:
    """Append one answer to the log; returns (answer id, whether an update must be enqueued).

    ``choice`` is the pick (a sequence: the picks in order, for kinds with several), ``value`` a rating's
    value; the whole screen is kept (``Answer.shown``, ``Answer.picks``). Every accepted answer
    counts ``<rater>:answers`` in the rater-stats hash, plus each name in ``stats``. Raises
    AnswerRefused when the question was already answered or was reclaimed after expiry, or the
    rater's ``max_per_rater`` or the study's answer ``budget`` is reached. A question marked
    ``catch`` (attention check) was never pooled or issued: only its token limits its life.
    """
    request = AcceptRequest(used_ttl=used_ttl, max_per_rater=max_per_rater, budget=budget)
    accepted = accept_and_issue(conn, study_id, question, rater, choice, issued_at, response_ms, request,
                                value=value, flags=flags, stats=stats)
    return accepted.answer_id, accepted.schedule


def accept_and_issue(conn: Redis, study_id: str, question: dict, rater: str, choice: int | None, issued_at: float,
                     response_ms: int | None, request: AcceptRequest, value: float | None = None,
                     flags: str = "", stats: tuple[str, ...] = (),
                     ) -> Accepted:
    """``accept_answer`` under the rules of ``request`` (:class:`AcceptRequest`), and what it asks to follow,
    in one atomic step (one round trip: lua/accept.lua): the flag rule, the rater's next question, the
    exclusion of a flagged rater, the self-agreement judgement and the rater's completion.

    Returns :class:`Accepted`. Behind ``request.guard`` a stale copy of the study refuses the answer (``stale``, nothing
    written); a rater id another session holds stores the answer but issues nothing (the next question is
    ``NextQuestion('replaced')``). Enqueueing the update stays with the caller: an RQ job is RQ's to write.
    """
    now = time.time()
    shown = kind_of(question).shown(question)
    picks = [] if choice is None else [int(c) for c in (choice if isinstance(choice, (list, tuple)) else [choice])]
    head, a, b = (shown + [NO_ITEM, NO_ITEM])[:3]
    fields = {
        "qid": question["qid"], "rater": rater, "kind": question["kind"], "head": head,
        "a": a, "b": b, "choice": picks[0] if picks else NO_ITEM, "value": "" if value is None else repr(float(value)),
        "shown": " ".join(map(str, shown)), "picks": " ".join(map(str, picks)),
        "probe": question.get("probe", ""), "algorithm": question.get("algorithm", ""),
        "fallback": 1 if question.get("fallback") else 0, "issued_at": repr(float(issued_at)),
        "answered_at": repr(now), "response_ms": "" if response_ms is None else int(response_ms), "flags": flags,
    }
    if question.get(HELDOUT):
        fields[HELDOUT] = 1
    if question.get(CLAIM):
        fields[CLAIM] = question[CLAIM]
    args = {
        "question_id": question["qid"], "rater": rater, "minute": int(now // 60),
        "update_ttl": UPDATE_FLAG_TTL, "algorithm": fields["algorithm"],
        "unpooled": "1" if question.get("catch") else "0", "stats": ",".join(stats),
        "fields": json.dumps([str(x) for name in ANSWER_FIELDS if name in fields for x in (name, fields[name])]),
        "issued_at": repr(float(issued_at)), "now": repr(now), **request.args(),
    }
    script_keys = {
        "used_token": keys.used_token(study_id, question["qid"]), "issued": keys.issued(study_id),
        "issued_questions": keys.issued_questions(study_id), "answers": keys.answers(study_id),
        "raters": keys.raters(study_id), "per_minute": keys.answers_per_minute(study_id),
        "update_scheduled": keys.update_scheduled(study_id), "counters": keys.counters(study_id),
        "rater_stats": keys.rater_stats(study_id), "outstanding": keys.outstanding(study_id, rater),
        "excluded_raters": keys.excluded_raters(study_id), **questions.StudyGuard().keys(study_id),
    }
    then = request.then
    reply = ACCEPT(conn, keys=script_keys, args=args, more_keys=then.keys if then is not None else (),
                   more_args=then.args if then is not None else ())
    status = reply[0].decode()
    if status == "used":
        raise AnswerRefused("used", reply[1].decode())
    if status != "ok":
        raise AnswerRefused(status)
    if reply[3] == b"replaced":
        following = questions.NextQuestion("replaced")
    else:
        following = questions.parse_next_reply(reply[5:]) if then is not None else None
    return Accepted(reply[1].decode(), bool(int(reply[2])), following, bool(int(reply[4])))


def judge_self_agreement(conn: Redis, study_id: str, rater: str, repeats_to_judge: int | None,
                         min_self_agreement: float) -> bool:
    """lua/self_agreement.lua alone (one round trip), the judgement accept.lua makes after each validation
    repeat: once the rater has answered ``repeats_to_judge`` repeats, flag them if they answered less than
    ``min_self_agreement`` of them as the first time; once. True if this call flagged the rater."""
    if repeats_to_judge is None:
        return False
    return bool(int(SELF_AGREEMENT(conn, keys={"rater_stats": keys.rater_stats(study_id)},
                                   args={"rater": rater, "repeats_to_judge": int(repeats_to_judge),
                                         "min_self_agreement": repr(float(min_self_agreement))})))


def answer_problem(answer: Answer, n_items: int, config: StudyConfig | None = None) -> str | None:
    """Why the live path would never have stored ``answer`` (None when it would): a rater id outside
    the id pattern, an item outside the study, a choice that was not offered, a value its kind never takes (a
    rating off the study's scale: ``config``'s settings of the kind; without one a rating is not judged)."""
    if not RATER_ID_PATTERN.match(answer.rater):
        return f"rater id {answer.rater!r} breaks the rater id pattern"
    try:
        kind = answer.question_kind
    except ValueError:
        return f"unknown question kind {answer.kind!r}"
    if not all(0 <= i < n_items for i in answer.shown):
        return f"an item index outside the study's {n_items} items"
    if len(answer.shown) - len(set(answer.shown)) > (1 if answer.algorithm == CATCH_ALGORITHM else 0):
        # a catch trial may show one item with its copy (webapp.catches: a study of media without labels)
        return "an item shown twice in one question"
    if answer.skipped:
        return None if not answer.picks else "a skipped answer with a choice"
    offered = answer.shown[1:] if kind.headed else answer.shown
    if answer.choice != NO_ITEM and answer.choice not in offered:
        return f"choice {answer.choice} was not one of the offered items {list(offered)}"
    settings = kind.check_settings(None) if config is None else config.settings_of(kind)
    try:
        kind.check_answer(answer.question(), list(answer.picks), answer.value)
        if not kind.on_scale:  # a value of another kind is the kind's own (same_different: 1 or 0)
            kind.check_value(answer.value, settings)
    except AnswerError as exc:
        return str(exc)
    if (tuple(x for x in (answer.head, answer.a, answer.b) if x != NO_ITEM) != answer.shown[:3]
            or (answer.picks[0] if answer.picks else NO_ITEM) != answer.choice):
        return "its head, a, b and choice columns disagree with the screen it records (shown, picks)"
    if answer.probe is not None and answer.probe not in answer.shown[1:]:
        return f"probe {answer.probe} is not one of the offered items"
    # a value on a scale (a kind's settings ``min`` to ``max``) is checked against its ends
    low, high = (float(settings["min"]), float(settings["max"])) if kind.on_scale else (0.0, 0.0)
    if answer.value is not None and config is not None and kind.on_scale and not low <= answer.value <= high:
        return f"rating {answer.value:g} is off the scale {low:g}..{high:g}"
    return None


class LogBatch(NamedTuple):
    """Entries of the answer log read after a cursor (``read_batch``)."""

    answers: list[Answer]
    unreadable: dict[str, str]  # entry id -> why it is no readable answer
    last_id: str  # the id of the last entry read (the cursor given, when none was)


def read_batch(conn: Redis, study_id: str, after: str = "0-0", count: int | None = None,
               strict: bool = False) -> LogBatch:
    """The log's entries with stream id strictly after ``after``, oldest first (at most ``count``).

    An entry that cannot be read as an answer (a missing or malformed field) raises with ``strict``;
    otherwise it is set aside in ``unreadable`` like an answer an engine refuses, so it cannot stop every
    later update of the study (the update pass and a rebuild read so).
    """
    entries = conn.xrange(keys.answers(study_id), min=f"({after}" if after != "0-0" else "-", max="+",
                          count=count)
    answers, unreadable = [], {}
    for entry_id, fields in entries:
        try:
            answers.append(Answer.from_stream(entry_id, fields))
        except (KeyError, ValueError, UnicodeDecodeError) as exc:
            if strict:
                raise
            unreadable[entry_id.decode()] = f"unreadable log entry: {type(exc).__name__}: {exc}"
    return LogBatch(answers, unreadable, entries[-1][0].decode() if entries else after)


def read_answers(conn: Redis, study_id: str, after: str = "0-0", count: int | None = None) -> list[Answer]:
    """Answers with stream id strictly after ``after``, oldest first (an unreadable entry raises)."""
    return read_batch(conn, study_id, after, count, strict=True).answers


def iter_answers(conn: Redis, study_id: str, chunk: int = 5000) -> Iterator[tuple[str, dict]]:
    after = "0-0"
    while True:
        batch = read_answers(conn, study_id, after=after, count=chunk)
        yield from batch
        if len(batch) < chunk:
            return
        after = batch[-1].id


#: Entries one read of the log's newest answers asks Redis for at a time: a long read is many short commands
#: rather than one that holds Redis (one XREVRANGE of 20,000 entries took 17-31 ms, and every rater's request
#: waited meanwhile: the slow log of ``benchmarks/load.py``).
LOG_CHUNK = 1000


def newest_entries(conn: Redis, study_id: str, count: int) -> list[tuple[bytes, dict]]:
    """The log's newest ``count`` entries (stream id, fields), newest first, read ``LOG_CHUNK`` at a time."""
    key, end, out = keys.answers(study_id), "+", []
    while len(out) < count:
        want = min(LOG_CHUNK, count - len(out))
        batch = conn.xrevrange(key, max=end, count=want)
        out.extend(batch)
        if len(batch) < want:
            break
        end = "(" + batch[-1][0].decode()
    return out


def count_answers(conn: Redis, study_id: str) -> int:
    return int(conn.xlen(keys.answers(study_id)))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


CSV_COLUMNS = ("study", "answer_id", "answered_at", "rater", "algorithm", "kind", "head", "head_id", "a", "a_id",
               "b", "b_id", "choice", "choice_id", "value", "probe", "fallback", "flags", "response_ms", "issued_at",
               "question_id", "shown", "shown_ids", "picks", "picks_ids", "heldout")


def answer_rows(answers: Iterable[Answer], item_ids: list[str], study_id: str = "") -> Iterator[dict]:
    """One flat row per answer; item columns absent from a question kind are empty."""
    def item_id(index):
        return "" if index is None or index < 0 else item_ids[index]

    def index_or_blank(index):
        return "" if index is None or index < 0 else index

    for ans in answers:
        yield {
            "study": study_id, "answer_id": ans.id, "answered_at": _iso(ans.answered_at), "rater": ans.rater,
            "algorithm": ans.algorithm, "kind": ans.kind,
            "head": ans.head, "head_id": item_id(ans.head), "a": ans.a, "a_id": item_id(ans.a),
            "b": index_or_blank(ans.b), "b_id": item_id(ans.b),
            "choice": index_or_blank(ans.choice), "choice_id": item_id(ans.choice),
            "value": "" if ans.value is None else ans.value, "probe": index_or_blank(ans.probe),
            "fallback": int(ans.fallback), "flags": ans.flags,
            "response_ms": "" if ans.response_ms is None else ans.response_ms,
            "issued_at": _iso(ans.issued_at), "question_id": ans.qid,
            "shown": " ".join(map(str, ans.shown)), "shown_ids": " ".join(item_ids[i] for i in ans.shown),
            "picks": " ".join(map(str, ans.picks)), "picks_ids": " ".join(item_ids[i] for i in ans.picks),
            "heldout": int(ans.heldout),
        }


def export_csv(answers: Iterable[Answer], item_ids: list[str], study_id: str = "") -> Iterator[str]:
    """Yield the answers as CSV text chunks (header first), for streaming responses and files."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for i, row in enumerate(answer_rows(answers, item_ids, study_id)):
        writer.writerow(row)
        if i % 500 == 499:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def export_jsonl(answers: Iterable[Answer], item_ids: list[str], study_id: str = "") -> Iterator[str]:
    for row in answer_rows(answers, item_ids, study_id):
        yield json.dumps(row) + "\n"


def export_triplets(answers: Iterable[Answer], excluded_raters: Collection[str] = frozenset()) -> Iterator[str]:
    """The anchored triplets every answer implies (a triplet's own, an odd-one-out's two, a grid's
    ordered picks: ``engine.kinds``) in cblearn's ``list-order`` format: CSV rows ``i,j,k`` (item
    indices), meaning i was judged closer to j than to k (attention checks and validation repeats
    left out; ratings imply none). Load with ``numpy.loadtxt(f, delimiter=",", dtype=int, ndmin=2)``.
    """
    def lines() -> Iterator[str]:
        for ans in answers:
            if ans.rater in excluded_raters or ans.algorithm in (CATCH_ALGORITHM, REPEAT_ALGORITHM):
                continue
            for head, x, y, winner in ans.triplets():
                yield f"{head},{winner},{y if winner == x else x}\n"

    return _in_chunks(lines())


def export_odd_one_out(answers: Iterable[Answer], excluded_raters: Collection[str] = frozenset()) -> Iterator[str]:
    """Odd-one-out answers in the layout SPoSE and VICE read: one line ``i j k`` per answer (0-based item
    indices, space-separated, the odd one last; attention checks, repeats and skips left out). The
    item of index i is the i-th of the study's items (``export_item_table``)."""
    def lines() -> Iterator[str]:
        for ans in answers:
            if (ans.rater in excluded_raters or ans.algorithm in (CATCH_ALGORITHM, REPEAT_ALGORITHM) or ans.skipped
                    or not ans.picks):
                continue
            row = ans.question_kind.odd_one_out_row(ans.shown, ans.picks)
            if row is not None:
                yield f"{row[0]} {row[1]} {row[2]}\n"

    return _in_chunks(lines())


def _in_chunks(lines: Iterable[str], size: int = 2000) -> Iterator[str]:
    """Lines of an export joined into chunks of ``size`` (a streamed response's pieces), the last one
    possibly empty: bounded memory for any number of answers."""
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == size:
            yield "".join(chunk)
            chunk = []
    yield "".join(chunk)


def export_item_table(item_ids: list[str], labels: list[str | None] | None = None) -> str:
    """The items as a tab-separated table ``index, id, label`` (header first): what the indices of the
    triplet and odd-one-out exports name."""
    lines = ["index\tid\tlabel"]
    for i, item_id in enumerate(item_ids):
        label = "" if labels is None or labels[i] is None else str(labels[i])
        lines.append(f"{i}\t{item_id}\t{label}")
    return "\n".join(lines) + "\n"

