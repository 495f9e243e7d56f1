"""Attention checks cannot be told apart on the wire: over more than a thousand questions of a real
study with catch trials and validation repeats on, nothing the browser receives (token length, media
URLs, the payload's shape) separates a catch trial or a repeat from an ordinary question."""
from __future__ import annotations

import random
import re

from helpers import SECRET, closer_candidate, run_worker

from webapp.tokens import verify_question
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study

RATERS, QUESTIONS_PER_RATER, N_ITEMS = 24, 50, 40
MEDIA_URL = re.compile(r"^/media/wire/[0-9]+$")


def make_study(conn) -> str:
    items = [Item(id=f"img{i:02d}", kind="image", media_type="image/png", position=(float(i), float(i % 7)))
             for i in range(N_ITEMS)]
    media = {i: b"\x89PNG fake image %d" % i for i in range(N_ITEMS)}
    config = StudyConfig.from_dict({
        "name": "Wire", "algorithm": "random_triplets", "pool_size": 16, "random_state": 0,
        "limits": {"max_questions_per_rater": QUESTIONS_PER_RATER},
        "attention": {"rate": 0.15, "validation_repeats": 10}})
    return create_study(conn, config, items, media=media, study_id="wire")


def category(question: dict) -> str:
    inside = verify_question(SECRET, question["token"], 3600)["q"]
    if inside.get("repeat_of") is not None:
        return "repeat"
    return "catch" if inside.get("catch") else "ordinary"


def shape(doc) -> object:
    """The payload's structure: its keys and the types of its values, recursively (not the values)."""
    if isinstance(doc, dict):
        return tuple(sorted((k, shape(v)) for k, v in doc.items()))
    if isinstance(doc, list):
        return ("list", len(doc), tuple(shape(v) for v in doc))
    return type(doc).__name__


def urls(question: dict) -> list[str]:
    return [item["url"] for item in [question["head"], *question["candidates"]]]


def test_catch_trials_and_repeats_look_like_every_other_question_over_a_thousand_questions(client, conn):
    make_study(conn)
    rng = random.Random(7)
    seen: dict[str, list[dict]] = {"ordinary": [], "catch": [], "repeat": []}
    for r in range(RATERS):
        client.get(f"/s/wire?rater=r-wire-{r}")
        response = client.get("/api/studies/wire/questions/next")
        question = response.get_json()["question"]
        while question is not None:
            seen[category(question)].append(question)
            # a careful rater with a lapse now and then: the closer candidate by position, else at random
            choice = closer_candidate(question) if rng.random() < 0.9 else rng.choice(question["candidates"])["index"]
            body = client.post("/api/studies/wire/answers",
                               json={"token": question["token"], "choice": choice}).get_json()
            question = body["next"]
        if r % 4 == 0:
            run_worker(conn)  # refill the pool now and then, as a worker would
    assert sum(map(len, seen.values())) >= 1000
    assert len(seen["catch"]) >= 50 and len(seen["repeat"]) >= 50

    ordinary = seen["ordinary"]
    # the token: one length for every question
    assert {len(q["token"]) for qs in seen.values() for q in qs} == {len(ordinary[0]["token"])}
    # the payload: the same keys and value types
    shapes = {shape({k: v for k, v in q.items()}) for q in ordinary}
    for name in ("catch", "repeat"):
        assert {shape(q) for q in seen[name]} <= shapes, name
    # media URLs: one route and the lengths ordinary questions have; three distinct items, as always
    ordinary_lengths = {len(u) for q in ordinary for u in urls(q)}
    for name, questions in seen.items():
        for q in questions:
            assert all(MEDIA_URL.match(u) for u in urls(q)), name
            assert len(set(urls(q))) == 3, (name, urls(q))  # a repeated URL would link a candidate to the head
            assert {len(u) for u in urls(q)} <= ordinary_lengths, name
    # candidate order: the expected answer is left as often as right (within chance)
    for name in ("catch", "repeat"):
        expected_left = [expected_side(q) == 0 for q in seen[name]]
        share = sum(expected_left) / len(expected_left)
        assert 0.3 < share < 0.7, (name, share)


def expected_side(question: dict) -> int:
    inside = verify_question(SECRET, question["token"], 3600)["q"]
    expected = inside.get("repeat_of", inside.get("expect", inside.get("head")))
    return [c["index"] for c in question["candidates"]].index(expected)
