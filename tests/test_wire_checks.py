"""Attention checks cannot be told apart on the wire: over more than a thousand questions of a real
study with catch trials and validation repeats on, nothing the browser receives (token length, media
URLs, the payload's shape, and the values of every field: expires_in, progress, prompt, item fields,
the expected item's place) separates a catch trial or a repeat from an ordinary question."""
from __future__ import annotations

import random
import re
from collections import Counter

from helpers import SECRET, closer_candidate, index_of, run_worker, wire_body
from scipy import stats

from webapp.tokens import verify_question
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study

RATERS, QUESTIONS_PER_RATER, N_ITEMS = 24, 50, 40
MEDIA_URL = re.compile(r"^/media/wire/h/[A-Za-z0-9_-]{32}$")


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
            choice = closer_candidate(question) if rng.random() < 0.9 else index_of(rng.choice(question["candidates"]))
            body = client.post("/api/studies/wire/answers",
                               json=wire_body(question, {"token": question["token"], "choice": choice})).get_json()
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
    # media URLs: one route by handles of one length; no URL is ever given twice, so none links a candidate
    # to the head or to another question
    for name, questions in seen.items():
        for q in questions:
            assert all(MEDIA_URL.match(u) for u in urls(q)), name
    every = [u for qs in seen.values() for q in qs for u in urls(q)]
    assert len(every) == len(set(every))
    # candidate order: the expected answer is left as often as right (within chance)
    for name in ("catch", "repeat"):
        expected_left = [expected_side(q) == 0 for q in seen[name]]
        share = sum(expected_left) / len(expected_left)
        assert 0.3 < share < 0.7, (name, share)


def fields(doc, path: str = "") -> dict[str, object]:
    """Every scalar of a payload by its path (``candidates.1.url``), the token by its length."""
    if isinstance(doc, dict):
        return {k: v for key, value in doc.items() for k, v in fields(value, f"{path}.{key}".lstrip(".")).items()}
    if isinstance(doc, list):
        return {k: v for n, value in enumerate(doc) for k, v in fields(value, f"{path}.{n}").items()}
    return {path: len(doc) if path == "token" else doc}


#: Fields whose values name items (each screen shows its own): compared as distributions over the items,
#: not as a set of values every question shares.
ITEM_FIELD = re.compile(r"^(head|candidates\.[0-9]+)\.(handle|url)$")


def assert_same_distribution(name: str, path: str, check: list, ordinary: list) -> None:
    """A check's values of one field are values ordinary questions take, in like proportions: numbers by
    a two-sample Kolmogorov-Smirnov test, anything else by a chi-square test of the counts (p >= 0.001:
    over the dozens of fields compared, a field drawn alike fails about once in a thousand runs)."""
    assert set(check) <= set(ordinary), (name, path, set(check) - set(ordinary))
    if len(set(ordinary)) < 2:
        return
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in ordinary + check):
        p = stats.ks_2samp(check, ordinary).pvalue
    else:
        values = sorted(set(ordinary), key=str)
        counts = Counter(ordinary)
        if min(counts.values()) < 5:  # too few of each to test proportions: the value set above is it
            return
        table = [[Counter(check)[v] for v in values], [counts[v] for v in values]]
        p = stats.chi2_contingency(table).pvalue
    assert p >= 0.001, (name, path, p)


def test_every_field_of_a_check_takes_the_values_an_ordinary_question_takes(client, conn):
    """Field by field, value by value: expires_in, progress, kind, widget, prompt, every item's index, id,
    kind and media URL, and the token's length are distributed alike in catch trials, repeats and
    ordinary questions (a catch trial with another expires_in, or drawn from fewer items, fails here)."""
    make_study(conn)
    rng = random.Random(8)
    seen: dict[str, list[dict]] = {"ordinary": [], "catch": [], "repeat": []}
    for r in range(RATERS):
        client.get(f"/s/wire?rater=r-values-{r}")
        question = client.get("/api/studies/wire/questions/next").get_json()["question"]
        while question is not None:
            seen[category(question)].append(question)
            choice = closer_candidate(question) if rng.random() < 0.9 else index_of(rng.choice(question["candidates"]))
            question = client.post("/api/studies/wire/answers",
                                   json=wire_body(question, {"token": question["token"], "choice": choice})
                                   ).get_json()["next"]
        if r % 4 == 0:
            run_worker(conn)
    by_path = {name: [fields(q) for q in questions] for name, questions in seen.items()}
    paths = set().union(*(f.keys() for f in by_path["ordinary"]))
    for name in ("catch", "repeat"):
        assert {p for f in by_path[name] for p in f} == paths, name
        for path in sorted(paths):
            if ITEM_FIELD.match(path):
                continue
            if name == "repeat" and path == "progress.answered":
                # a repeat comes 3-9 answers after a question of the first 60%: its place says "perhaps a
                # repeat", which its items (a screen the rater has seen) say anyway; catch trials' places
                # are uniform in each block and compared
                continue
            assert_same_distribution(name, path, [f[path] for f in by_path[name]],
                                     [f[path] for f in by_path["ordinary"]])
        # item fields: which items a screen shows. The head is any item, as in an ordinary question; the
        # candidates of a catch trial are not (its unlike item is among the head's farthest, so items at
        # the edge of the study's space are shown more often: docs/researcher/catch-trials.md says so), only items
        # shown anyway
        # (by the index each handle names: the wire says only handles, each new)
        for where in ("head", "candidates"):
            def values(questions, where=where):
                return [index_of({"handle": v}) for f in questions for p, v in f.items()
                        if p.startswith(where) and p.endswith(".handle")]
            check, ordinary = values(by_path[name]), values(by_path["ordinary"])
            if where == "head" or name == "repeat":
                assert_same_distribution(name, f"{where}.index", check, ordinary)
            assert set(check) <= set(ordinary), (name, where)


def expected_side(question: dict) -> int:
    inside = verify_question(SECRET, question["token"], 3600)["q"]
    expected = inside.get("repeat_of", inside.get("expect", inside.get("head")))
    return [index_of(c) for c in question["candidates"]].index(expected)
