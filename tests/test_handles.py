"""Items on the wire by opaque per-question handles, and the catch trials they allow: an item shown with a
copy of itself, in a study of images with neither labels nor positions (webapp.handles, webapp.catches)."""
from __future__ import annotations

import random
import re

import pytest
from helpers import SECRET, index_of, shown

from webapp import handles
from webapp.questions_answers import rater_stats
from webapp.tokens import verify_question
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study

N_ITEMS = 12
PNG_END = b"IEND\xaeB`\x82"
KINDS = ("triplet", "rating", "odd_one_out", "rank")


def png(n: int) -> bytes:
    """Bytes that end as a PNG does (what the padding looks for), one file per item."""
    return b"\x89PNG\r\n\x1a\n" + bytes([n]) * (50 + n) + PNG_END


def image_study(conn, study_id: str, kind: str = "triplet", **config) -> str:
    items = [Item(id=f"img{i}", kind="image", media_type="image/png") for i in range(N_ITEMS)]
    settings = {"name": study_id, "question_kind": kind, "random_state": 0, "heldout_share": 0,
                "limits": {"max_questions_per_rater": 30, "min_answers_for_code": 30},
                "attention": {"answer_check": False}, **config}
    if kind == "rank":
        settings["rank"] = {"n_reference": 5, "n_select": 2}
    return create_study(conn, StudyConfig.from_dict(settings), items, media={i: png(i) for i in range(N_ITEMS)},
                        study_id=study_id)


def inside(question: dict) -> dict:
    return verify_question(SECRET, question["token"], 3600)["q"]


def careful(question: dict) -> dict:
    """A rater who looks: a copy is the item most alike (a headed kind's copy of its head first, the odd one
    the item shown once, a pair of copies rated at the top); any other question at random (seeded)."""
    rng = random.Random(question["token"])
    if "scale" in question:
        i, j = (index_of(item) for item in question["items"])
        return {"value": question["scale"]["max"] if i == j else question["scale"]["min"]}
    offered = question["candidates"] if "head" in question else question["items"]
    indices = [index_of(item) for item in offered]
    if "head" in question:
        first = [n for n, i in enumerate(indices) if i == index_of(question["head"])]
    else:
        first = [n for n, i in enumerate(indices) if indices.count(i) == 1 and len(set(indices)) < len(indices)]
    order = first + [n for n in rng.sample(range(len(offered)), len(offered)) if n not in first]
    picks = [offered[n]["handle"] for n in order[:question.get("select", 1)]]
    return {"picks": picks} if "select" in question else {"choice": picks[0]}


def at_random(question: dict, rng: random.Random) -> dict:
    if "scale" in question:
        scale = question["scale"]
        return {"value": rng.choice([scale["min"], scale["max"]])}
    offered = question["candidates"] if "head" in question else question["items"]
    picks = [item["handle"] for item in rng.sample(offered, question.get("select", 1))]
    return {"picks": picks} if "select" in question else {"choice": picks[0]}


def run(client, study_id: str, rater: str, answerer) -> list[dict]:
    """``rater`` answers every question the study gives them; returns the questions."""
    client.get(f"/s/{study_id}?rater={rater}")
    asked = []
    question = client.get(f"/api/studies/{study_id}/questions/next").get_json().get("question")
    while question is not None:
        asked.append(question)
        reply = client.post(f"/api/studies/{study_id}/answers",
                            json={"token": question["token"], "response_ms": 4000, **answerer(question)})
        assert reply.status_code == 201, reply.get_json()
        question = reply.get_json().get("next")
    return asked


@pytest.fixture
def padding(monkeypatch):
    """The media padding's lengths drawn from a seeded generator (they are secrets.randbelow on a server)."""
    drawn = random.Random(5)
    monkeypatch.setattr(handles.secrets, "randbelow", lambda n: drawn.randrange(n))


def test_an_item_shown_in_two_questions_has_unrelated_handles_and_no_index_or_id(app, conn):
    image_study(conn, "wire")
    client = app.test_client()
    questions = run(client, "wire", "r-wire", careful)
    seen: dict[int, set[str]] = {}
    every = []
    for question in questions:
        for item in shown(question):
            assert set(item) == {"handle", "kind", "url"}, item  # nothing names the item but this question's handle
            assert re.fullmatch(r"/media/wire/h/[A-Za-z0-9_-]{32}", item["url"])
            assert item["url"].endswith(item["handle"])
            seen.setdefault(index_of(item), set()).add(item["handle"])
            every.append(item["handle"])
    assert len(every) == len(set(every))  # no handle is ever given twice, whatever the item
    assert max(len(h) for h in seen.values()) >= 5  # items shown in several questions, each time named anew
    assert not any(re.search(r'"(index|id)"', str(q)) for q in questions)


def test_a_copy_in_a_catch_trial_has_its_own_handle_url_and_byte_size(app, conn, padding):
    image_study(conn, "copies")
    client = app.test_client()
    questions = run(client, "copies", "r-copies", careful)
    catches = [q for q in questions if inside(q).get("catch")]
    assert len(catches) >= 5
    for question in catches:
        head, *candidates = shown(question)
        [copy] = [c for c in candidates if index_of(c) == index_of(head)]
        assert copy["handle"] != head["handle"] and copy["url"] != head["url"]
        a, b = client.get(head["url"]), client.get(copy["url"])
        assert a.status_code == b.status_code == 200 and a.headers["Cache-Control"].startswith("private")
        assert a.data.startswith(png(index_of(head))) and b.data.startswith(png(index_of(head)))
        assert len(a.data) != len(b.data)  # padded after IEND by lengths of their own
    # the researcher's dashboard may ask by index; a rater's page may not
    assert client.get("/media/copies/0").status_code == 404


def test_a_forged_foreign_or_head_handle_is_refused_with_a_clear_400(app, conn):
    image_study(conn, "forge")
    image_study(conn, "other")
    client = app.test_client()
    client.get("/s/forge?rater=r-forge")
    first = client.get("/api/studies/forge/questions/next").get_json()["question"]
    reply = client.post("/api/studies/forge/answers", json={"token": first["token"], **careful(first)})
    second = reply.get_json()["next"]
    elsewhere = app.test_client()
    elsewhere.get("/s/other?rater=r-other")
    foreign = elsewhere.get("/api/studies/other/questions/next").get_json()["question"]
    forged = "A" * 32
    for choice in (forged, first["candidates"][0]["handle"], foreign["candidates"][0]["handle"],
                   second["head"]["handle"], 3):
        reply = client.post("/api/studies/forge/answers", json={"token": second["token"], "choice": choice})
        assert reply.status_code == 400, choice
        error = reply.get_json()["error"]
        assert error["code"] == "item_not_shown" and "handle" in error["message"] and repr(choice) in error["message"]
    # media: a forged handle, or one of another study, is no item
    assert client.get(f"/media/forge/h/{forged}").status_code == 404
    assert client.get(f"/media/forge/h/{foreign['head']['handle']}").status_code == 404
    assert client.get(f"/media/other/h/{foreign['head']['handle']}").status_code == 200
    assert client.post("/api/studies/forge/answers",
                       json={"token": second["token"], **careful(second)}).status_code == 201


@pytest.mark.parametrize("kind", KINDS)
def test_in_an_unlabelled_image_study_a_random_bot_is_flagged_and_a_careful_rater_is_not(app, conn, kind, seeded):
    # 40 questions: the schedule a study at defaults plans to let a random rater through at most 5% of the
    # time; the process's generator (which catch trials draw from) and the bot's are seeded
    study_id = image_study(conn, f"blind-{kind.replace('_', '-')}", kind,
                           limits={"max_questions_per_rater": 40, "min_answers_for_code": 40})
    rng = random.Random(11)
    client = app.test_client()
    run(client, study_id, "r-careful", careful)
    bot = app.test_client()
    run(bot, study_id, "r-bot", lambda q: at_random(q, rng))
    good, bad = rater_stats(conn, study_id, "r-careful"), rater_stats(conn, study_id, "r-bot")
    assert good["catch"] >= 3 and good["catch_failed"] == 0 and not good["flagged"], good
    assert bad["catch"] >= 3 and bad["flagged"], bad


@pytest.mark.parametrize("kind", KINDS)
def test_a_restore_judges_copy_catch_trials_as_they_were_judged_live(app, conn, kind, seeded):
    """The replay of the log (a restore, a rebuild) judges an item shown with its copy from the items alone,
    as the live rule did: every catch answer gets the flag it was logged with."""
    import json

    from workers.store import keys
    from workers.store.answers import read_answers
    from workers.store.raters import replay_rater_stats
    from workers.store.studies import get_study

    study_id = image_study(conn, f"replay-{kind.replace('_', '-')}", kind)
    rng = random.Random(3)
    run(app.test_client(), study_id, "r-careful", careful)
    run(app.test_client(), study_id, "r-bot", lambda q: at_random(q, rng))
    log = read_answers(conn, study_id)
    items = [json.loads(raw) for raw in conn.lrange(keys.items(study_id), 0, -1)]
    flags, _ = replay_rater_stats(log, get_study(conn, study_id).config, items)
    judged = [a for a in log if a.algorithm == "catch"]
    assert judged and any("catch_fail" in a.flags for a in judged) and any("catch_pass" in a.flags for a in judged)
    for a in judged:
        logged = next(f for f in a.flags.split(",") if f.startswith("catch_"))
        assert logged in flags[a.id].split(","), (a, flags[a.id])


@pytest.mark.parametrize("kind", KINDS)
def test_a_backup_of_copy_catch_trials_restores_them_as_logged_and_the_bot_stays_flagged(app, conn, fresh_redis, kind,
                                                                                        seeded):
    """A catch trial showing an item with its copy is an answer the live path stored: a restore keeps it (it
    set every one aside as "an item shown twice in one question", and a bot caught by copies came back
    unflagged), and the rater statistics replayed from the log are the ones the live study had."""
    import redis
    from test_backup import backup_text

    from workers.store.backup import restore_study, set_aside_answers

    study_id = image_study(conn, f"restore-{kind.replace('_', '-')}", kind)
    rng = random.Random(4)
    run(app.test_client(), study_id, "r-careful", careful)
    run(app.test_client(), study_id, "r-bot", lambda q: at_random(q, rng))
    live = {r: rater_stats(conn, study_id, r) for r in ("r-careful", "r-bot")}
    assert live["r-bot"]["flagged"] and not live["r-careful"]["flagged"]
    fresh = redis.Redis.from_url(fresh_redis)
    try:
        report = restore_study(fresh, backup_text(conn, study_id), as_id="restored")
        assert report.set_aside == 0, set_aside_answers(fresh, "restored")[:2]
        for rater, stats in live.items():
            again = rater_stats(fresh, "restored", rater)
            assert (again["catch"], again["catch_failed"], again["flagged"]) == (
                stats["catch"], stats["catch_failed"], stats["flagged"]), (rater, again, stats)
    finally:
        fresh.close()
