"""The answer log: accept an answer exactly once, read it back, export it.

The log is a Redis stream per study, the source of truth. Accepting is one Lua script:
it refuses a used or reclaimed question, appends the answer, marks the token used and
flags an update as scheduled — all or nothing. Must never import Flask or the engine.
"""
from __future__ import annotations

import csv
import io
import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from . import keys
from .queue import UPDATE_FLAG_TTL

# KEYS[1] used-token marker, KEYS[2] issued zset, KEYS[3] issued-questions hash,
# KEYS[4] answers stream, KEYS[5] raters set, KEYS[6] per-minute hash, KEYS[7] update-scheduled flag
# ARGV[1] question id, ARGV[2] used-marker TTL (s), ARGV[3] rater id, ARGV[4] unix minute,
# ARGV[5] update-flag TTL (s), ARGV[6..] stream field/value pairs
# Returns {'ok', answer id, 1 if this call scheduled the update else 0} | {'used', answer id} | {'expired'}
ACCEPT_SCRIPT = """
local prior = redis.call('GET', KEYS[1])
if prior then return {'used', prior} end
if redis.call('ZREM', KEYS[2], ARGV[1]) == 0 then return {'expired'} end
redis.call('HDEL', KEYS[3], ARGV[1])
local fields = {}
for i = 6, #ARGV do fields[#fields + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[4], '*', unpack(fields))
redis.call('SET', KEYS[1], id, 'EX', ARGV[2])
redis.call('SADD', KEYS[5], ARGV[3])
redis.call('HINCRBY', KEYS[6], ARGV[4], 1)
local scheduled = redis.call('SET', KEYS[7], '1', 'NX', 'EX', ARGV[5])
if scheduled then return {'ok', id, 1} end
return {'ok', id, 0}
"""

ANSWER_FIELDS = ("qid", "rater", "kind", "head", "a", "b", "choice", "algorithm", "fallback",
                 "issued_at", "answered_at", "response_ms")


class AnswerRefused(Exception):
    """The answer was not stored; ``code`` says why (``used`` or ``expired``)."""

    def __init__(self, code: str, answer_id: str | None = None):
        super().__init__(code)
        self.code = code
        self.answer_id = answer_id


@dataclass(frozen=True)
class Answer:
    """One row of the answer log. ``id`` is the stream id (ms timestamp-sequence)."""

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

    @classmethod
    def from_stream(cls, entry_id: bytes, fields: dict) -> Answer:
        f = {k.decode(): v.decode() for k, v in fields.items()}
        return cls(
            id=entry_id.decode(), qid=f["qid"], rater=f["rater"], kind=f["kind"], head=int(f["head"]),
            a=int(f["a"]), b=int(f["b"]), choice=int(f["choice"]), algorithm=f["algorithm"],
            fallback=f["fallback"] == "1", issued_at=float(f["issued_at"]), answered_at=float(f["answered_at"]),
            response_ms=int(f["response_ms"]) if f.get("response_ms") not in (None, "") else None,
        )


def accept_answer(conn, study_id: str, question: dict, rater: str, choice: int, issued_at: float,
                  response_ms: int | None, used_ttl: int) -> tuple[str, bool]:
    """Append one answer to the log; returns (answer id, whether an update must be enqueued).

    Raises AnswerRefused when the question was already answered or was reclaimed after expiry.
    """
    now = time.time()
    a, b = question["candidates"]
    fields = {
        "qid": question["qid"], "rater": rater, "kind": question["kind"], "head": question["head"],
        "a": a, "b": b, "choice": int(choice), "algorithm": question.get("algorithm", ""),
        "fallback": 1 if question.get("fallback") else 0, "issued_at": repr(float(issued_at)),
        "answered_at": repr(now), "response_ms": "" if response_ms is None else int(response_ms),
    }
    args = [question["qid"], int(used_ttl), rater, int(now // 60), UPDATE_FLAG_TTL]
    for name in ANSWER_FIELDS:
        args.extend([name, fields[name]])
    script = conn.register_script(ACCEPT_SCRIPT)
    reply = script(keys=[keys.used_token(study_id, question["qid"]), keys.issued(study_id),
                         keys.issued_questions(study_id), keys.answers(study_id), keys.raters(study_id),
                         keys.answers_per_minute(study_id), keys.update_scheduled(study_id)], args=args)
    status = reply[0].decode()
    if status == "used":
        raise AnswerRefused("used", reply[1].decode())
    if status == "expired":
        raise AnswerRefused("expired")
    return reply[1].decode(), bool(int(reply[2]))


def read_answers(conn, study_id: str, after: str = "0-0", count: int | None = None) -> list[Answer]:
    """Answers with stream id strictly after ``after``, oldest first."""
    entries = conn.xrange(keys.answers(study_id), min=f"({after}" if after != "0-0" else "-", max="+",
                          count=count)
    return [Answer.from_stream(entry_id, fields) for entry_id, fields in entries]


def iter_answers(conn, study_id: str, chunk: int = 5000):
    after = "0-0"
    while True:
        batch = read_answers(conn, study_id, after=after, count=chunk)
        yield from batch
        if len(batch) < chunk:
            return
        after = batch[-1].id


def count_answers(conn, study_id: str) -> int:
    return int(conn.xlen(keys.answers(study_id)))


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="milliseconds")


CSV_COLUMNS = ("answer_id", "answered_at", "rater", "kind", "head", "head_id", "a", "a_id", "b", "b_id",
               "choice", "choice_id", "algorithm", "fallback", "response_ms", "issued_at", "question_id")


def answer_rows(answers, item_ids: list[str]):
    for ans in answers:
        yield {
            "answer_id": ans.id, "answered_at": _iso(ans.answered_at), "rater": ans.rater, "kind": ans.kind,
            "head": ans.head, "head_id": item_ids[ans.head], "a": ans.a, "a_id": item_ids[ans.a],
            "b": ans.b, "b_id": item_ids[ans.b], "choice": ans.choice, "choice_id": item_ids[ans.choice],
            "algorithm": ans.algorithm, "fallback": int(ans.fallback),
            "response_ms": "" if ans.response_ms is None else ans.response_ms,
            "issued_at": _iso(ans.issued_at), "question_id": ans.qid,
        }


def export_csv(answers, item_ids: list[str]):
    """Yield the answers as CSV text chunks (header first), for streaming responses and files."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for i, row in enumerate(answer_rows(answers, item_ids)):
        writer.writerow(row)
        if i % 500 == 499:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def export_jsonl(answers, item_ids: list[str]):
    for row in answer_rows(answers, item_ids):
        yield json.dumps(row) + "\n"


def export_triplets(answers, excluded_raters=frozenset()):
    """Triplet answers in cblearn's ``list-order`` format: CSV rows ``i,j,k`` (item indices),
    meaning i was judged closer to j than to k. Load with ``numpy.loadtxt(f, delimiter=",", dtype=int)``.
    """
    buf = io.StringIO()
    for n, ans in enumerate(answers):
        if ans.kind != "triplet" or ans.rater in excluded_raters:
            continue
        other = ans.b if ans.choice == ans.a else ans.a
        buf.write(f"{ans.head},{ans.choice},{other}\n")
        if n % 1000 == 999:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()
