"""Helpers shared by the tests: constants, study items, and one-line client actions.

Test modules import these with ``from helpers import ...`` (pytest puts ``tests/`` on
``sys.path`` because it holds no ``__init__.py``); fixtures stay in ``conftest.py``.
"""
from __future__ import annotations

import re

from rq import SimpleWorker

from workers.store.queue import get_queue
from workers.store.studies import Item

SECRET = "test-secret-key"
#: Rate-limit exemption for tests driving many requests from this machine (nothing is exempt by default).
LOOPBACK = ("127.0.0.1", "::1")

RESEARCHER, RESEARCHER_PASSWORD = "researcher", "a long test password"


def colour_items(n: int = 10) -> list[Item]:
    return [Item(id=f"c{i}", kind="color", color=f"#{(25 * i) % 256:02x}3050", position=(float(i),))
            for i in range(n)]


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


def closer_candidate(question) -> int:
    """The index of the candidate a careful rater picks in a ``colour_items`` study (item i sits at
    position i): the one nearer the head, which is what a catch trial expects."""
    head = question["head"]["index"]
    return min((c["index"] for c in question["candidates"]), key=lambda i: abs(i - head))


def csrf_token_of(html: str) -> str:
    """The CSRF token of a page: the login form's hidden field or the <meta name="csrf-token"> tag."""
    match = re.search(r'name="csrf[-_]token" (?:value|content)="([^"]+)"', html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def log_in(client, name=RESEARCHER, password=RESEARCHER_PASSWORD, **extra):
    token = csrf_token_of(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"username": name, "password": password, "csrf_token": token, **extra})

#: A study config fragment without catch trials, for tests that count questions and answers (studies
#: whose items have positions or labels get catch trials by default; their tests set them themselves).
NO_CHECKS = {"attention": {"rate": 0}}
