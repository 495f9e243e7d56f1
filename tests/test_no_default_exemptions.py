"""Issue 17 item 11: no client address is exempt from the rate limits unless configured, so a reverse
proxy on the same host (every client then looks like loopback) does not switch the limits off."""
from __future__ import annotations

from helpers import SECRET, colour_items

from webapp import create_app
from workers.store.config import StudyConfig
from workers.store.studies import create_study


def make_app(redis_url, tmp_path, monkeypatch, **settings):
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    return create_app({"TESTING": True, "REDIS_URL": redis_url, "SECRET_KEY": SECRET, "ANSWER_BURST_PER_RATER": 3,
                       # buckets that do not refill during the test, however slow the machine
                       "ANSWER_RATE_PER_RATER": 0.01, "ANSWER_RATE_PER_ADDRESS": 0.01,
                       **settings})


def question_statuses(client, n):
    return [client.get("/api/studies/colours/questions/next").status_code for _ in range(n)]


def test_item11_loopback_is_limited_by_default(conn, redis_url, tmp_path, monkeypatch):
    create_study(conn, StudyConfig(name="Colours", algorithms=({"algorithm": "random_triplets"},)), colour_items(),
                 study_id="colours")
    app = make_app(redis_url, tmp_path, monkeypatch)
    assert not app.config["RATE_LIMIT_EXEMPT_ADDRESSES"]
    client = app.test_client()  # its requests come from 127.0.0.1
    client.get("/s/colours?rater=r-local")
    statuses = question_statuses(client, 5)
    assert statuses[:3] == [200, 200, 200] and statuses[3:] == [429, 429]


def test_item11_a_proxy_on_the_same_host_does_not_make_every_client_exempt(conn, redis_url, tmp_path, monkeypatch):
    create_study(conn, StudyConfig(name="Colours", algorithms=({"algorithm": "random_triplets"},)), colour_items(),
                 study_id="colours")
    app = make_app(redis_url, tmp_path, monkeypatch, ANSWER_BURST_PER_ADDRESS=4)
    # two clients behind a local proxy (TRUSTED_PROXIES unset): both arrive as 127.0.0.1
    first, second = app.test_client(), app.test_client()
    for client, rater in ((first, "r-one"), (second, "r-two")):
        client.get("/s/colours?rater=" + rater, headers={"X-Forwarded-For": "203.0.113.9"})
    codes = question_statuses(first, 2) + question_statuses(second, 3)
    assert codes == [200, 200, 200, 200, 429]  # the address's bucket of 4 is shared


def test_item11_exemptions_are_taken_from_the_environment(conn, redis_url, tmp_path, monkeypatch):
    create_study(conn, StudyConfig(name="Colours", algorithms=({"algorithm": "random_triplets"},)), colour_items(),
                 study_id="colours")
    monkeypatch.setenv("PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES", "127.0.0.1, ::1")
    app = make_app(redis_url, tmp_path, monkeypatch)
    client = app.test_client()
    client.get("/s/colours?rater=r-sim")
    assert question_statuses(client, 6) == [200] * 6
    monkeypatch.setenv("PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES", '["10.1.2.3"]')  # a JSON list works too
    other = make_app(redis_url, tmp_path, monkeypatch).test_client()
    other.get("/s/colours?rater=r-sim2")
    assert 429 in question_statuses(other, 6)
