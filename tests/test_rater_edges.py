"""Issue 17's option and minor items: "accept late answers" (item 7), a long URL on /api/ in the
JSON error shape, a rating a hair off a step stored on the step, and ``anon-``-shaped participant ids
that must not share one rater (the one-session rule)."""
from __future__ import annotations

import pytest
from helpers import NO_CHECKS, answer, colour_items, fetch_question

from workers.store.answers import read_answers
from workers.store.config import ConfigError, StudyConfig
from workers.store.studies import create_study, set_status


def make_study(conn, study_id="edges", **fields):
    config = StudyConfig.from_dict({"name": "Edges", "algorithm": "random_triplets", "pool_size": 8,
                                    **NO_CHECKS, **fields})
    return create_study(conn, config, colour_items(), study_id=study_id)


# ---------------------------------------------------------------------------- accept late answers
def test_late_answers_are_refused_by_default(client, conn):
    make_study(conn, limits={"max_outstanding": 2})
    assert StudyConfig.from_dict({"name": "x"}).accept_late_answers is False
    client.get("/s/edges?rater=r-late")
    question = fetch_question(client, "edges")
    set_status(conn, "edges", "paused")
    response = answer(client, question, study_id="edges")
    assert response.status_code == 409
    assert response.get_json()["error"]["code"] == "study_closed"
    assert "not taking answers" in response.get_json()["error"]["message"]
    assert read_answers(conn, "edges") == []


def test_accept_late_answers_keeps_them_marked_late(client, conn):
    make_study(conn, accept_late_answers=True, limits={"max_outstanding": 3})
    client.get("/s/edges?rater=r-late")
    held = [fetch_question(client, "edges") for _ in range(3)]
    assert answer(client, held[0], study_id="edges").status_code == 201  # on time
    for status, question in zip(("paused", "closed"), held[1:], strict=True):
        set_status(conn, "edges", status)
        response = answer(client, question, study_id="edges")
        assert response.status_code == 201, response.get_json()
        assert response.get_json()["next"] is None  # no new question from a study that is not running
    stored = read_answers(conn, "edges")
    assert [a.late for a in stored] == [False, True, True]
    assert [a.flags for a in stored] == ["", "late", "late"]
    # a late answer is still answered once
    assert answer(client, held[1], study_id="edges").status_code == 409
    # and no new question is handed out
    assert client.get("/api/studies/edges/questions/next").status_code == 409


def test_accept_late_answers_must_be_a_boolean(conn):
    with pytest.raises(ConfigError, match="accept_late_answers"):
        StudyConfig.from_dict({"name": "x", "accept_late_answers": "yes"})
    config = StudyConfig.from_dict({"name": "x", "accept_late_answers": True})
    assert StudyConfig.from_stored(config.to_dict()).accept_late_answers is True


# ---------------------------------------------------------------------------- a long URL
@pytest.mark.parametrize("length", [5000, 8000])
def test_a_long_api_url_gets_the_json_error_shape(client, conn, length):
    make_study(conn)
    response = client.get("/api/studies/edges/questions/next?pad=" + "x" * length)
    assert response.status_code == 414
    error = response.get_json()["error"]
    assert error["code"] == "request_uri_too_long" and "at most 4096" in error["message"]
    # pages keep their HTML error
    page = client.get("/s/edges?pad=" + "x" * length)
    assert page.status_code == 414 and page.mimetype == "text/html"
    # an ordinary URL is untouched
    assert client.get("/api/studies/edges/questions/next?pad=" + "x" * 3000).status_code in (200, 409)


# ---------------------------------------------------------------------------- ratings on the step
@pytest.mark.parametrize(("sent", "stored", "scale"), [
    (3.0000004, 3.0, {"min": 1, "max": 5, "step": 1}),
    (2.9999996, 3.0, {"min": 1, "max": 5, "step": 1}),
    (0.30000001, 0.3, {"min": 0, "max": 1, "step": 0.1, "widget": "slider"}),
    (0.4567, 0.4567, {"min": 0, "max": 1, "step": None, "widget": "slider"}),
])
def test_a_rating_within_1e_6_of_a_step_is_stored_on_the_step(client, conn, sent, stored, scale):
    config = StudyConfig.from_dict({"name": "Ratings", "algorithm": "random", "question_kind": "rating",
                                    "pool_size": 8, "rating": scale})
    create_study(conn, config, colour_items(), study_id="ratings")
    client.get("/s/ratings?rater=r-rate")
    question = fetch_question(client, "ratings")
    response = client.post("/api/studies/ratings/answers", json={"token": question["token"], "value": sent})
    assert response.status_code == 201, response.get_json()
    [answer_] = read_answers(conn, "ratings")
    assert answer_.value == stored


# ---------------------------------------------------------------------------- anon-shaped ids
def test_anon_shaped_participant_ids_do_not_share_one_rater(app, conn):
    make_study(conn)
    first, second = app.test_client(), app.test_client()
    raters = []
    for client in (first, second):
        client.get("/s/edges?PROLIFIC_PID=anon-0123456789abcdef")
        assert answer(client, fetch_question(client, "edges"), study_id="edges").status_code == 201
        raters.append(read_answers(conn, "edges")[-1].rater)
    # each browser got an anonymous id of its own: the shared id was not taken, so two sessions can
    # neither pose as one rater (skipping the one-session rule) nor pool their answers
    assert raters[0] != raters[1]
    assert "anon-0123456789abcdef" not in raters
    # the same browser keeps its own id
    first.get("/s/edges?PROLIFIC_PID=anon-0123456789abcdef")
    assert answer(first, fetch_question(first, "edges"), study_id="edges").status_code == 201
    assert read_answers(conn, "edges")[-1].rater == raters[0]


def test_the_study_page_carries_only_the_widgets_its_kinds_need(client, conn):
    """A joining rater's page renders and loads the widgets of the kinds the study asks (and its practice
    shows), not every kind's."""
    triplets = create_study(conn, StudyConfig(name="Triplets", random_state=0), colour_items(12), study_id="tw")
    page = client.get(f"/s/{triplets}?rater=w1").get_data(as_text=True)
    assert "js/widgets/pick.js" in page and "js/widgets/rating.js" not in page and "js/widgets/grid.js" not in page
    mixed = create_study(conn, StudyConfig.from_dict({
        "name": "Mixed", "random_state": 0,
        "algorithms": [{"algorithm": "duels"}, {"algorithm": "pooled", "question_kind": "rating"}]}),
        colour_items(12), study_id="mw")
    page = client.get(f"/s/{mixed}?rater=w2").get_data(as_text=True)
    assert "js/widgets/pick.js" in page and "js/widgets/rating.js" in page and "js/widgets/odd.js" not in page


def test_joining_raters_share_one_rendered_page_and_an_edit_shows_at_once(app, conn):
    """A joining rater's page is rendered once per process and reused (raters.JOINING_PAGE_SECONDS); an edit
    of the study is a new config and shows on the next page; a rater who has answered gets their own."""
    from workers.store.studies import update_config

    study_id = create_study(conn, StudyConfig(name="Joining", random_state=0, instructions="First words."),
                            colour_items(12), study_id="joining")
    first, second = app.test_client(), app.test_client()
    page = first.get(f"/s/{study_id}?rater=j1").get_data(as_text=True)
    assert "First words." in page and second.get(f"/s/{study_id}?rater=j2").get_data(as_text=True) == page
    update_config(conn, study_id, instructions="Second words.")
    edited = app.test_client().get(f"/s/{study_id}?rater=j3").get_data(as_text=True)
    assert "Second words." in edited and "First words." not in edited
    assert answer(first, fetch_question(first, study_id), study_id=study_id).status_code == 201  # (its first candidate)
    again = first.get(f"/s/{study_id}").get_data(as_text=True)
    assert 'data-answered="1"' in again and again != edited


def test_every_raters_counters_are_read_in_chunks_and_whole(conn, monkeypatch):
    # a study of many raters: its counters are read a chunk at a time (an HGETALL of them held Redis, and every
    # rater's answer, for ~100 ms at 10,000 raters: benchmarks/health_cost.py), and every field arrives once
    from workers.store import keys, raters
    from workers.store.raters import read_rater_stats

    study = "many-raters"
    fields = {keys.rater_field(f"r{n}", name): n + len(name) for n in range(400)
              for name in ("answers", "catch", "flagged")}
    conn.hset(keys.rater_stats(study), mapping=fields)
    conn.hset(keys.rater_stats(study), "not-a-rater-field", 1)  # a field of no rater is left out
    calls = []
    scan = conn.hscan

    def counted(*args, **kwargs):
        calls.append(kwargs.get("count"))
        return scan(*args, **kwargs)

    monkeypatch.setattr(conn, "hscan", counted)
    got = read_rater_stats(conn, study)
    assert got == {f"r{n}": {name: str(n + len(name)) for name in ("answers", "catch", "flagged")} for n in range(400)}
    assert len(calls) > 1 and set(calls) == {raters.RATER_STATS_CHUNK}
