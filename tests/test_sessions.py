"""Researcher sessions: the login lockout is exact under parallel guesses, logout ends every copy
of the session cookie, and the idle timeout and lifetime end a login server-side."""
from __future__ import annotations

import threading
import time

from helpers import RESEARCHER, RESEARCHER_PASSWORD, csrf_token_of, log_in

from webapp import accounts
from webapp.accounts import create_user
from webapp.storage import get_redis


def make_account(app):
    with app.app_context():
        create_user(get_redis(), RESEARCHER, RESEARCHER_PASSWORD)


def test_item9_lockout_is_exact_under_40_parallel_guesses(app, monkeypatch):
    make_account(app)
    checks, lock = [], threading.Lock()
    real = accounts.verify_password

    def counted(conn, name, password):
        with lock:
            checks.append(password)
        time.sleep(0.02)  # a slow hash widens any gap between checking and counting
        return real(conn, name, password)

    monkeypatch.setattr(accounts, "verify_password", counted)
    clients = [app.test_client() for _ in range(40)]
    tokens = [csrf_token_of(c.get("/login").get_data(as_text=True)) for c in clients]
    statuses, start = [], threading.Barrier(40)

    def guess(client, token, n):
        start.wait()
        response = client.post("/login", data={"username": RESEARCHER, "password": f"wrong guess {n}",
                                               "csrf_token": token})
        with lock:
            statuses.append(response.status_code)

    threads = [threading.Thread(target=guess, args=(c, t, n)) for n, (c, t) in enumerate(zip(clients, tokens,
                                                                                          strict=True))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(checks) == app.config["LOGIN_MAX_FAILURES"] == 5
    assert sorted(statuses) == [401] * 5 + [429] * 35


def test_item9_a_right_password_within_the_limit_clears_the_count(app):
    make_account(app)
    client = app.test_client()
    for _ in range(4):
        assert log_in(client, password="wrong password here").status_code == 401
    assert log_in(client).status_code == 302
    other = app.test_client()
    assert log_in(other, password="wrong password here").status_code == 401  # the count starts again


def test_item10_logout_revokes_a_copied_cookie(app):
    make_account(app)
    client = app.test_client()
    assert log_in(client).status_code == 302
    cookie = client.get_cookie("session").value
    thief = app.test_client()
    thief.set_cookie("session", cookie)
    assert thief.get("/").status_code == 200
    token = csrf_token_of(client.get("/").get_data(as_text=True))
    assert client.post("/logout", data={"csrf_token": token}).status_code == 302
    assert thief.get("/").status_code == 302  # to the login page
    assert thief.get("/api/studies/any/stats").status_code == 401


def test_item10_idle_timeout_ends_the_login(app):
    app.config["LOGIN_IDLE_SECONDS"] = 1
    make_account(app)
    client = app.test_client()
    assert log_in(client).status_code == 302
    assert client.get("/").status_code == 200
    time.sleep(2.1)
    assert client.get("/").status_code == 302


def test_item10_lifetime_ends_the_login_however_active(app):
    make_account(app)
    client = app.test_client()
    assert log_in(client).status_code == 302
    app.config["LOGIN_SESSION_SECONDS"] = 0
    assert client.get("/").status_code == 302
