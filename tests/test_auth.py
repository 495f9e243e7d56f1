"""Researcher access: login/logout, CSRF, rate limiting, accounts on the CLI, and a walk over
the URL map proving that every route outside the rater/public allow-list refuses strangers."""
from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from click.testing import CliRunner
from helpers import (
    RESEARCHER,
    RESEARCHER_PASSWORD,
    Serve,
    answer,
    csrf_token_of,
    fetch_question,
    http_log_in,
    log_in,
    wait_for,
)
from werkzeug.routing import FloatConverter, IntegerConverter

from webapp import accounts, create_app
from webapp.cli import main

# Every rule an anonymous client may use. Rater pages live under /s/<study_id> and
# /media/<study_id>/ on the raters blueprint; anything else must refuse strangers.
PUBLIC_RULES = {
    "/static/<path:filename>",
    "/login",
    "/logout",
    "/api/health",
    "/api/studies/<study_id>/questions/next",
    "/api/studies/<study_id>/answers",
    "/metrics",  # its own check (a researcher, a bearer token or an allowed address): tests/test_metrics.py
}
RATER_PREFIXES = ("/s/<study_id>", "/media/<study_id>/")


def is_public_rule(rule) -> bool:
    if rule.rule in PUBLIC_RULES:
        return True
    return rule.rule.startswith(RATER_PREFIXES) and rule.endpoint.startswith("raters.")


def example_url(rule) -> str:
    values = {}
    for name, converter in rule._converters.items():
        values[name] = 0 if isinstance(converter, IntegerConverter | FloatConverter) else "colours"
    built = rule.build(values)
    assert built is not None, f"cannot build an example URL for {rule.rule}"
    return built[1]


def assert_refused(response, url: str, method: str) -> None:
    where = f"{method} {url}"
    if url.startswith("/api/"):
        assert response.status_code == 401, where
        assert response.get_json()["error"]["code"] == "login_required", where
    else:
        assert response.status_code == 302, where
        assert urlsplit(response.headers["Location"]).path == "/login", where


@pytest.fixture
def account(conn):
    accounts.create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    return RESEARCHER


# --- the URL map -------------------------------------------------------------------------


def test_every_route_outside_the_allow_list_refuses_anonymous_and_rater_clients(app, conn, study_id):
    rater = app.test_client()
    fetch_question(rater)  # a rater session (rater_id in the cookie) is not a login
    checked = 0
    for rule in app.url_map.iter_rules():
        if is_public_rule(rule):
            continue
        url = example_url(rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            for client in (app.test_client(), rater):
                assert_refused(client.open(url, method=method), url, method)
                checked += 1
    assert checked >= 8  # the dashboard, exports and stats at least


def test_the_allow_list_is_reachable_without_a_login(app, client, conn, study_id):
    public = [r.rule for r in app.url_map.iter_rules() if is_public_rule(r)]
    assert {"/s/<study_id>", "/media/<study_id>/<int:index>"} | PUBLIC_RULES <= set(public)
    assert client.get("/api/health").status_code == 200
    assert client.get("/s/colours").status_code == 200
    assert client.get("/login").status_code == 200
    assert client.get("/static/css/proxima.css").status_code == 200
    assert answer(client, fetch_question(client)).status_code == 201


def test_a_route_added_later_without_a_decorator_is_protected(conn, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    app = create_app({"TESTING": True, "REDIS_URL": redis_url})
    app.add_url_rule("/reports", "reports", lambda: "secret report", methods=["GET", "POST"])
    app.add_url_rule("/api/reports", "api_reports", lambda: {"secret": 1}, methods=["GET", "DELETE"])
    client = app.test_client()
    for url, method in (("/reports", "GET"), ("/reports", "POST"), ("/api/reports", "GET"),
                        ("/api/reports", "DELETE")):
        response = client.open(url, method=method)
        assert_refused(response, url, method)
        assert b"secret" not in response.data


def test_rater_routes_never_return_researcher_data(app, conn, study_id, researcher_client):
    for rater_id in ("p-secret-one", "p-secret-two"):
        rater = app.test_client()
        rater.get(f"/s/{study_id}?PROLIFIC_PID={rater_id}")
        assert answer(rater, fetch_question(rater)).status_code == 201
    stranger = app.test_client()
    page = stranger.get(f"/s/{study_id}").get_data(as_text=True)
    for secret in ("p-secret", "answers.csv", "answers.jsonl", "/stats", f'"/studies/{study_id}', "csrf-token",
                   "Log out"):
        assert secret not in page
    question = stranger.get(f"/api/studies/{study_id}/questions/next")
    posted = answer(stranger, question.get_json()["question"])
    assert posted.status_code == 201
    for response in (question, posted):
        keys = set(_all_keys(response.get_json()))
        assert not keys & {"position", "features", "stats", "answers", "raters", "engine", "pool_depth",
                           "fallback_rate", "neighbours", "neighbors"}
        assert "p-secret" not in response.get_data(as_text=True)
    # what the researcher sees is not there for the stranger
    assert researcher_client.get(f"/api/studies/{study_id}/stats").get_json()["answers"] == 3
    assert stranger.get(f"/api/studies/{study_id}/stats").status_code == 401


def _all_keys(value):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from _all_keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _all_keys(inner)


# --- login and logout ----------------------------------------------------------------------


def test_login_then_logout(client, account):
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"] == "/login?next=/"
    response = log_in(client, next="/")
    assert response.status_code == 302 and response.headers["Location"] == "/"
    cookie = response.headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and "Secure" not in cookie  # plain http here
    page = client.get("/").get_data(as_text=True)
    assert 'name="csrf-token"' in page and "Log out" in page
    response = client.post("/logout", data={"csrf_token": csrf_token_of(page)})
    assert response.status_code == 302 and response.headers["Location"] == "/login"
    assert "logged out" in client.get("/login").get_data(as_text=True)
    assert client.get("/").status_code == 302
    assert client.get("/api/studies/colours/stats").status_code == 401


def test_session_cookie_is_secure_over_https(client):
    response = client.get("/login", base_url="https://proxima.example")
    cookie = response.headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie


def test_secure_cookie_can_be_forced_for_a_tls_proxy(conn, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    monkeypatch.setenv("PROXIMA_SESSION_COOKIE_SECURE", "true")
    app = create_app({"TESTING": True, "REDIS_URL": redis_url})
    assert "Secure" in app.test_client().get("/login").headers["Set-Cookie"]


def test_wrong_password_and_unknown_account_get_the_same_answer(client, account):
    wrong = log_in(client, password="not the password")
    unknown = log_in(client, name="nobody", password="not the password")
    assert wrong.status_code == unknown.status_code == 401
    message = re.compile(r'id="login-error"[^>]*>([^<]*)<')
    assert message.search(wrong.get_data(as_text=True)).group(1) == "Wrong account name or password."
    assert message.search(unknown.get_data(as_text=True)).group(1) == "Wrong account name or password."
    assert client.get("/").status_code == 302


def test_login_starts_a_fresh_session(client, account):
    with client.session_transaction() as session:
        session["rater_id"] = "anon-before"
        session["planted"] = "by someone else"
    log_in(client)
    with client.session_transaction() as session:
        assert session["researcher"] == RESEARCHER
        assert "rater_id" not in session and "planted" not in session


@pytest.mark.parametrize("target,expected", [
    ("/studies/colours", "/studies/colours"),
    ("/studies/colours/answers.csv?x=1", "/studies/colours/answers.csv?x=1"),
    ("https://evil.example/", "/"),
    ("//evil.example/", "/"),
    ("/\\evil.example", "/"),
    ("/\t/evil.example", "/"),
    ("javascript:alert(1)", "/"),
])
def test_login_only_redirects_to_local_paths(client, account, target, expected):
    response = log_in(client, next=target)
    assert response.status_code == 302 and response.headers["Location"] == expected


def test_anonymous_pages_redirect_to_login_with_the_page_to_come_back_to(client, account, study_id):
    response = client.get(f"/studies/{study_id}/answers.csv?from=mail")
    query = parse_qs(urlsplit(response.headers["Location"]).query)
    assert query["next"] == [f"/studies/{study_id}/answers.csv?from=mail"]
    assert log_in(client, next=query["next"][0]).headers["Location"] == query["next"][0]
    assert client.get(query["next"][0]).status_code == 200


def test_a_changed_password_or_removed_account_ends_its_sessions(app, conn, account):
    client = app.test_client()
    log_in(client)
    assert client.get("/").status_code == 200
    accounts.set_password(conn, RESEARCHER, "another long password")
    assert client.get("/").status_code == 302
    assert log_in(client, password="another long password").status_code == 302
    accounts.remove_user(conn, RESEARCHER)
    assert client.get("/api/studies/colours/stats").status_code == 401


def test_a_login_expires(app, client, account):
    log_in(client)
    with client.session_transaction() as session:
        session["login_at"] -= app.config["LOGIN_SESSION_SECONDS"] + 1
    assert client.get("/").status_code == 302


# --- rate limiting ------------------------------------------------------------------------


def test_five_failures_lock_the_account_for_this_address_for_fifteen_minutes(app, conn, client, account):
    assert app.config["LOGIN_MAX_FAILURES"] == 5 and app.config["LOGIN_FAILURE_WINDOW_SECONDS"] == 900
    for _ in range(5):
        assert log_in(client, password="wrong password").status_code == 401
    response = log_in(client)  # the right password, but too late
    assert response.status_code == 429
    assert "Too many failed logins" in response.get_data(as_text=True)
    assert "Wait 15 minutes" in response.get_data(as_text=True)
    assert client.get("/").status_code == 302
    [key] = conn.keys("proxima:login-failures:*")
    assert 0 < conn.ttl(key) <= 900
    # another address is not locked out
    elsewhere = app.test_client()
    elsewhere.environ_base["REMOTE_ADDR"] = "192.0.2.7"
    assert log_in(elsewhere).status_code == 302
    # when the window ends, the account opens again
    conn.delete(key)
    assert log_in(client).status_code == 302


def test_locking_reveals_nothing_about_whether_the_account_exists(client, account):
    for name in (RESEARCHER, "nobody"):
        for _ in range(5):
            log_in(client, name=name, password="wrong password")
    known = log_in(client, name=RESEARCHER, password="wrong password")
    unknown = log_in(client, name="nobody", password="wrong password")
    assert known.status_code == unknown.status_code == 429
    assert known.get_data(as_text=True).replace(RESEARCHER, "X") == unknown.get_data(as_text=True).replace(
        "nobody", "X")


def test_a_successful_login_resets_the_failure_count(app, client, account):
    for _ in range(4):
        log_in(client, password="wrong password")
    assert log_in(client).status_code == 302
    client = app.test_client()  # same address, not logged in
    for _ in range(4):
        assert log_in(client, password="wrong password").status_code == 401
    assert log_in(client).status_code == 302


# --- CSRF ---------------------------------------------------------------------------------


def test_production_config_has_csrf_and_secure_cookie_settings(conn, redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    app = create_app({"REDIS_URL": redis_url})
    assert "csrf" in app.extensions and app.config["WTF_CSRF_ENABLED"] is True
    assert app.config["SESSION_COOKIE_HTTPONLY"] is True and app.config["SESSION_COOKIE_SAMESITE"] == "Lax"
    assert app.config["SESSION_COOKIE_SECURE"] == "auto"


@pytest.fixture
def probe_app(app):
    """The test app with one researcher JSON route and one form route that change state."""
    def json_probe(study_id):
        return {"changed": study_id}

    def form_probe():
        return "changed"

    app.add_url_rule("/api/studies/<study_id>/probe", "json_probe", json_probe, methods=["POST"])
    app.add_url_rule("/probe", "form_probe", form_probe, methods=["POST"])
    return app


def test_researcher_posts_need_the_csrf_token(probe_app, conn, account):
    client = probe_app.test_client()
    log_in(client)
    token = csrf_token_of(client.get("/").get_data(as_text=True))
    refused = client.post("/api/studies/colours/probe", json={})
    assert refused.status_code == 400 and refused.get_json()["error"]["code"] == "csrf_failed"
    forged = client.post("/api/studies/colours/probe", json={}, headers={"X-CSRFToken": "forged"})
    assert forged.status_code == 400
    accepted = client.post("/api/studies/colours/probe", json={}, headers={"X-CSRFToken": token})
    assert accepted.status_code == 200 and accepted.get_json() == {"changed": "colours"}
    assert client.post("/probe").status_code == 400
    assert client.post("/probe", data={"csrf_token": token}).get_data(as_text=True) == "changed"


def test_a_token_from_another_session_is_refused(probe_app, conn, account):
    alice, mallory = probe_app.test_client(), probe_app.test_client()
    log_in(alice)
    log_in(mallory)
    mallorys_token = csrf_token_of(mallory.get("/").get_data(as_text=True))
    assert alice.post("/api/studies/colours/probe", headers={"X-CSRFToken": mallorys_token}).status_code == 400


def test_login_and_logout_need_the_csrf_token(client, account):
    response = client.post("/login", data={"username": RESEARCHER, "password": RESEARCHER_PASSWORD})
    assert response.status_code == 400 and "expired" in response.get_data(as_text=True)
    assert client.get("/").status_code == 302
    log_in(client)
    assert client.post("/logout").status_code == 400
    assert client.get("/").status_code == 200


def test_researcher_client_sends_the_token_and_raters_need_none(probe_app, researcher_client, study_id):
    assert researcher_client.post("/api/studies/colours/probe", json={}).status_code == 200
    rater = probe_app.test_client()
    assert answer(rater, fetch_question(rater)).status_code == 201  # exempt: signed single-use question tokens


# --- accounts on the CLI ------------------------------------------------------------------


def test_user_add_asks_twice_and_the_account_can_log_in(cli, client, conn):
    result = cli("user", "add", "Alice", input="a long password\na long password\n")
    assert result.exit_code == 0, result.output
    assert "Created account alice." in result.output
    assert "a long password" not in result.output
    stored = conn.hget("proxima:user:alice", "password_hash").decode()
    assert stored.startswith(("scrypt:", "pbkdf2:")) and "a long password" not in stored
    assert conn.smembers("proxima:users") == {b"alice"}
    assert log_in(client, name="alice", password="a long password").status_code == 302


def test_user_add_with_generated_or_stdin_password(cli, conn):
    result = cli("user", "add", "bob", "--generate")
    assert result.exit_code == 0
    password = re.search(r"Password: (\S+)", result.output).group(1)
    assert len(password) >= 10 and accounts.verify_password(conn, "bob", password) is not None
    assert cli("user", "add", "carol", "--password-stdin", input="from standard input\n").exit_code == 0
    assert accounts.verify_password(conn, "carol", "from standard input") is not None


@pytest.mark.parametrize("args,input,message", [
    (["user", "add", "erin", "--password-stdin"], "short\n", "too weak: use at least 10 characters"),
    (["user", "add", "alice", "--password-stdin"], "an existing account\n", "already exists"),
    (["user", "add", "bad name!", "--generate"], None, "not valid"),
    (["user", "add", "dave", "--generate", "--password-stdin"], None, "not both"),
    (["user", "remove", "nobody"], None, "there is no account 'nobody'"),
    (["user", "passwd", "nobody", "--generate"], None, "there is no account 'nobody'"),
    (["user", "passwd", "alice", "--password-stdin"], "short\n", "too weak"),
])
def test_user_commands_explain_bad_input(cli, conn, args, input, message):
    accounts.create_user(conn, "alice", "a long password")
    result = CliRunner().invoke(main, args, input=input)
    assert result.exit_code != 0
    assert message in result.output
    assert accounts.verify_password(conn, "alice", "a long password") is not None


def test_user_passwd_remove_and_list(cli, app, conn):
    accounts.create_user(conn, "alice", "a long password")
    accounts.create_user(conn, "bob", "another long password")
    listing = cli("user", "list").stdout.splitlines()
    assert [line.split("\t")[0] for line in listing] == ["alice", "bob"]
    client = app.test_client()
    log_in(client, name="alice", password="a long password")
    assert client.get("/").status_code == 200
    result = cli("user", "passwd", "alice", input="a new long password\na new long password\n")
    assert result.exit_code == 0 and "sessions are logged out" in result.output
    assert client.get("/").status_code == 302
    assert log_in(client, name="alice", password="a long password").status_code == 401
    assert log_in(client, name="alice", password="a new long password").status_code == 302
    assert cli("user", "remove", "alice").exit_code == 0
    assert client.get("/").status_code == 302
    assert [line.split("\t")[0] for line in cli("user", "list").stdout.splitlines()] == ["bob"]


# --- the first account --------------------------------------------------------------------


def test_the_first_account_is_created_once(conn):
    password = accounts.ensure_first_account(conn)
    assert password and len(password) >= 10
    assert accounts.verify_password(conn, "admin", password) is not None
    assert accounts.ensure_first_account(conn) is None


def test_serve_on_a_fresh_instance_prints_a_one_time_admin_password(redis_url, conn, tmp_path):
    serve = Serve(tmp_path / "instance", "--workers", "0", redis_url=redis_url)
    base = serve.base
    try:
        seen = wait_for(lambda: "change it with: proxima user passwd admin" in serve.output() and serve.output(),
                        what="serve printing the first account's password")
        password = re.search(r"one-time password: (\S+)", seen).group(1)
        serve.wait_healthy()
        assert requests.get(f"{base}/", timeout=5, allow_redirects=False).status_code == 302
        researcher = http_log_in(base, "admin", password)
        assert "Studies" in researcher.get(f"{base}/", timeout=5).text
    finally:
        returncode = serve.stop()
    output = serve.output()
    assert returncode == 0, output
    assert output.count("one-time password") == 1  # printed once
    assert accounts.ensure_first_account(conn) is None

def test_a_generated_password_never_starts_with_a_dash(monkeypatch):
    """Given on a command line (``proxima user passwd``, a login script), a password starting with "-" is read as
    an option: one the platform makes never does, even when the random bytes begin that way."""
    import secrets

    from webapp import accounts

    drawn = iter(["-startsWithDash", "-again", "fine-password"])
    monkeypatch.setattr(secrets, "token_urlsafe", lambda n: next(drawn))
    assert accounts.generate_password() == "fine-password"
