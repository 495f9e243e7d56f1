"""Hostile clients and hostile content: security headers, CSRF on every state-changing route,
rate limits, tokens that are not question tokens, wrong content types and sizes, path traversal,
stored XSS through every researcher-controlled text (escaped in the HTML, inert in a real browser),
cookie flags. tests/test_auth.py covers logins and the login-required walk over the URL map;
tests/test_bad_answers.py the forged/expired/replayed/cross-study answer tokens."""
from __future__ import annotations

import io
import json
import re
import zipfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import (
    RESEARCHER,
    RESEARCHER_PASSWORD,
    SECRET,
    agree_to_consent,
    answer,
    colour_items,
    csrf_token_of,
    fetch_question,
    log_in,
)

from webapp import create_app
from webapp.accounts import create_user
from webapp.auth import CSRF_EXEMPT_ENDPOINTS
from workers.store import keys
from workers.store.answers import count_answers
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study, get_study

ROOT = Path(__file__).resolve().parent.parent
ELSEWHERE = "198.51.100.7"  # a client address that is not exempt from rate limits

# Each would run a script if it reached the page unescaped (or a javascript: link were kept).
XSS = ('<script>window.__xss = "script"</script>', '"><img src=x onerror="window.__xss=\'img\'">',
       "'><svg onload=window.__xss='svg'>", "</textarea><script>window.__xss='textarea'</script>")
MARKDOWN_XSS = ("Read this. <script>window.__xss='md-script'</script> <img src=x onerror=\"window.__xss='md-img'\">\n\n"
                "[a javascript link](javascript:window.__xss='md-link') "
                "[a data link](data:text/html,<script>window.__xss='md-data'</script>)\n\n"
                "</textarea><script>window.__xss='md-textarea'</script>")


# ------------------------------------------------------------------------------ helpers


class PageScan(HTMLParser):
    """Everything in a page that could run script or carry inline style."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.inline_scripts, self.handlers, self.style_attrs, self.style_blocks = [], [], [], 0
        self.script_links, self.tags = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag == "script" and not attrs.get("src"):
            self.inline_scripts.append(attrs)
        if tag == "style":
            self.style_blocks += 1
        for name, value in attrs.items():
            if name.startswith("on"):
                self.handlers.append((tag, name, value))
            if name == "style":
                self.style_attrs.append((tag, value))
            if name in ("href", "src", "action", "formaction", "data") and value and (
                    re.match(r"\s*(javascript|vbscript):", value, re.I)
                    or (re.match(r"\s*data:", value, re.I) and tag not in ("img", "link"))):
                self.script_links.append((tag, name, value))


def scan(html: str) -> PageScan:
    parser = PageScan()
    parser.feed(html)
    return parser


def assert_inert(html: str, where: str) -> None:
    """No inline script, event handler, style attribute/block or script URL; no injected element."""
    page = scan(html)
    assert not page.inline_scripts, (where, page.inline_scripts)
    assert not page.handlers, (where, page.handlers)
    assert not page.style_attrs and not page.style_blocks, (where, page.style_attrs)
    assert not page.script_links, (where, page.script_links)
    assert not [t for t, a in page.tags if t == "svg" and "onload" in a], where
    assert not [a for t, a in page.tags if t == "img" and a.get("src") == "x"], where


def hostile_config(**overrides) -> StudyConfig:
    data = {
        "name": "Study " + XSS[1], "algorithm": "random_triplets", "pool_size": 8, "random_state": 0,
        "instructions": MARKDOWN_XSS, "question": "Which? " + XSS[0], "consent": MARKDOWN_XSS,
        "practice": [{"head": "t0", "candidates": ["t1", "t2"], "answer": "t1", "explanation": XSS[2]}],
        "limits": {"max_questions_per_rater": 3},
        "completion": {"message": MARKDOWN_XSS, "debrief_question": "Anything? " + XSS[3]},
    }
    data.update(overrides)
    return StudyConfig.from_dict(data)


def hostile_items() -> list[Item]:
    items = [Item(id=f"t{i}", kind="text", text=f"{payload} item {i}") for i, payload in enumerate(XSS)]
    items += [Item(id=payload[:40] + f"-{i}", kind="text", text=f"plain {i}") for i, payload in enumerate(XSS)]
    return items


def tiny_png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 30, 60)).save(out, "PNG")
    return out.getvalue()


def fingerprint(conn) -> dict:
    """Every key and its serialized value: equal fingerprints mean nothing changed in Redis.

    Request-duration telemetry is left out: every request, refused ones too, is timed, and a web
    process flushes the timings to Redis whenever its flush interval has passed."""
    telemetry = keys.request_durations().encode()
    return {key: conn.dump(key) for key in conn.scan_iter(count=1000) if key != telemetry}


def limited_app(redis_url, tmp_path, monkeypatch, **config):
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    settings = {"TESTING": True, "REDIS_URL": redis_url, "SECRET_KEY": SECRET, "RATE_LIMIT_EXEMPT_ADDRESSES": []}
    settings.update(config)
    return create_app(settings)


def client_at(app, address: str = ELSEWHERE):
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def error_code(response, status: int) -> str:
    assert response.status_code == status, response.get_data(as_text=True)[:300]
    body = response.get_json()
    assert set(body) == {"error"} and body["error"]["message"]
    return body["error"]["code"]


# ------------------------------------------------------------------------------ headers


def csp_directives(response) -> dict[str, list[str]]:
    policy = response.headers["Content-Security-Policy"]
    return {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}


def test_every_response_carries_the_security_headers(app, client, researcher_client, conn, study_id):
    anonymous = app.test_client()
    responses = {
        "login page": anonymous.get("/login"),
        "rater page": anonymous.get(f"/s/{study_id}"),
        "rater api": anonymous.get(f"/api/studies/{study_id}/questions/next"),
        "refused api": anonymous.get(f"/api/studies/{study_id}/stats"),
        "redirect": anonymous.get("/"),
        "not found": anonymous.get("/nothing/here"),
        "api not found": anonymous.get("/api/nothing"),
        "static": anonymous.get("/static/js/rater.js"),
        "dashboard": researcher_client.get("/"),
        "study dashboard": researcher_client.get(f"/studies/{study_id}"),
        "stats": researcher_client.get(f"/api/studies/{study_id}/stats"),
        "export": researcher_client.get(f"/studies/{study_id}/answers.csv"),
    }
    for where, response in responses.items():
        csp = csp_directives(response)
        assert csp["script-src"] == ["'self'"], where
        assert csp["frame-ancestors"] == ["'none'"] and csp["object-src"] == ["'none'"], where
        assert csp["base-uri"] == ["'none'"] and csp["form-action"] == ["'self'"], where
        assert csp["style-src"] == ["'self'"] and csp["default-src"] == ["'self'"], where
        assert "unsafe" not in response.headers["Content-Security-Policy"], where
        assert response.headers["X-Content-Type-Options"] == "nosniff", where
        assert response.headers["X-Frame-Options"] == "DENY", where
        assert response.headers["Referrer-Policy"] == "same-origin", where
        assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin", where
        assert "camera=()" in response.headers["Permissions-Policy"], where
        assert "Strict-Transport-Security" not in response.headers, where  # plain http
        if where != "static":
            assert response.headers["Cache-Control"] == "no-store", where
    assert "no-store" not in responses["static"].headers.get("Cache-Control", "")


def test_media_is_cacheable_and_sandboxed(app, conn):
    png = b"\x89PNG\r\n\x1a\n" + b"<html><script>alert(1)</script>"  # a polyglot: a PNG signature, then HTML
    items = [Item(id=f"i{i}", kind="image", media_type="image/png") for i in range(3)]
    create_study(conn, StudyConfig(name="Images"), items, {i: png for i in range(3)}, study_id="images")
    rater = app.test_client()
    question = fetch_question(rater, "images")
    response = rater.get(question["head"]["url"])  # by a handle: what a rater's page is given
    assert response.status_code == 200 and response.data == png  # no IEND: a file that does not end as a PNG
    assert response.mimetype == "image/png" and response.headers["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in csp_directives(response) and csp_directives(response)["default-src"] == ["'none'"]
    # cacheable by the rater's browser only: a handle is one question's
    assert response.headers["Cache-Control"].startswith("private")


def test_https_responses_ask_for_https_from_then_on(app):
    response = app.test_client().get("/login", base_url="https://proxima.example")
    assert response.headers["Strict-Transport-Security"].startswith("max-age=")


def test_templates_and_scripts_have_no_inline_code_or_styles():
    for path in sorted((ROOT / "templates").rglob("*.html")):
        page = scan(path.read_text())
        where = path.relative_to(ROOT)
        assert not page.inline_scripts and not page.handlers, where
        assert not page.style_attrs and not page.style_blocks, where
    for path in sorted((ROOT / "static" / "js").glob("*.js")):
        source = path.read_text()
        assert not re.search(r"\beval\s*\(|new Function\s*\(|setAttribute\(\s*[\"']style|document\.write", source), path
        for assignment in re.findall(r"innerHTML\s*=\s*([^;]+);", source):  # only fixed markup
            assert re.fullmatch(r"\"[^\"]*\"|'[^']*'", assignment.strip()), (path, assignment)


# ------------------------------------------------------------------------------ CSRF on every state-changing route

STATE_CHANGING = {"POST", "PUT", "PATCH", "DELETE"}
# Form data that would change something if the CSRF check let the request through.
FORMS = {
    "dashboard.change_status": {"action": "pause"},
    "dashboard.settings": {"name": "Renamed by a forged request", "pool_size": "3"},
    "dashboard.exclude_rater": {"rater": "someone"},
    "raters.consent": {"decision": "agree"},
    "raters.finish": {"debrief": "forged"},
    "auth.logout": {},
    "auth.login": {"username": RESEARCHER, "password": RESEARCHER_PASSWORD},
}


def test_every_state_changing_request_needs_the_csrf_token(app, conn, study_id):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    rater = app.test_client()
    answer(rater, fetch_question(rater))
    client = app.test_client()
    log_in(client)
    token = csrf_token_of(client.get("/").get_data(as_text=True))
    checked = []
    for rule in app.url_map.iter_rules():
        methods = rule.methods & STATE_CHANGING
        if not methods or rule.endpoint in CSRF_EXEMPT_ENDPOINTS:
            continue
        url = rule.build({name: study_id for name in rule.arguments})[1]
        data = dict(FORMS.get(rule.endpoint, {}))
        if rule.endpoint == "dashboard.new_study":
            data = {"name": "Forged", "items": (io.BytesIO(b"text\na\nb\nc\n"), "items.csv")}
        for method in sorted(methods):
            before = fingerprint(conn)
            for headers in ({}, {"X-CSRFToken": "forged"}, {"Origin": "https://evil.example"}):
                form = {k: (io.BytesIO(v[0].getvalue()), v[1]) if isinstance(v, tuple) else v for k, v in data.items()}
                response = client.open(url, method=method, data=form, headers=headers)
                assert response.status_code == 400, (method, url, headers, response.status_code)
                assert fingerprint(conn) == before, (method, url, headers)
            checked.append(rule.endpoint)
            assert client.get("/").status_code == 200  # still logged in: the forged logout did nothing
    assert {"dashboard.change_status", "dashboard.settings", "dashboard.exclude_rater", "dashboard.new_study",
            "auth.logout", "raters.consent"} <= set(checked)
    # the same requests with the page's token go through: the refusals above were the CSRF check
    response = client.post(f"/studies/{study_id}/status", data={**FORMS["dashboard.change_status"],
                                                                "csrf_token": token})
    assert response.status_code == 302 and get_study(conn, study_id).status == "paused"
    client.post(f"/studies/{study_id}/settings", data={**FORMS["dashboard.settings"], "csrf_token": token})
    assert get_study(conn, study_id).config.name == "Renamed by a forged request"


def test_a_session_cookie_or_csrf_token_is_not_a_question_token(app, conn, study_id):
    client = app.test_client()
    fetch_question(client)
    session_value = client.get_cookie("session").value
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    researcher = app.test_client()
    log_in(researcher)
    csrf = csrf_token_of(researcher.get("/").get_data(as_text=True))
    for token in (session_value, csrf, researcher.get_cookie("session").value):
        response = client.post(f"/api/studies/{study_id}/answers", json={"token": token, "choice": 1})
        assert error_code(response, 400) == "invalid_token"
    assert count_answers(conn, study_id) == 0


# ------------------------------------------------------------------------------ rate limits


def test_a_rater_over_the_answer_limit_gets_429_with_retry_after(redis_url, conn, study_id, tmp_path, monkeypatch):
    app = limited_app(redis_url, tmp_path, monkeypatch, ANSWER_RATE_PER_RATER=0.5, ANSWER_BURST_PER_RATER=3)
    client = client_at(app)
    question = fetch_question(client)
    for _ in range(2):
        response = answer(client, question)
        assert response.status_code == 201
        question = response.get_json()["next"]
    refused = answer(client, question)
    assert error_code(refused, 429) == "rate_limited"
    assert 1 <= int(refused.headers["Retry-After"]) <= 2
    assert refused.get_json()["error"]["retry_after"] == int(refused.headers["Retry-After"])
    assert count_answers(conn, study_id) == 2  # the refused answer was not stored ...
    assert error_code(client.get(f"/api/studies/{study_id}/questions/next"), 429) == "rate_limited"
    # ... and another rater (another session) at the same address is not held up
    assert client_at(app).get(f"/api/studies/{study_id}/questions/next").status_code == 200
    # once the bucket has drained, the same token is accepted (the rater page sends it again)
    with client.session_transaction() as session:
        key = keys.rate_rater(study_id, session["rater_id"])
    assert 0 < conn.pttl(key) <= 3 * 2000 + 1
    conn.delete(key)
    assert answer(client, question).status_code == 201
    assert count_answers(conn, study_id) == 3


def test_media_by_handle_are_limited_per_rater_session_and_address(redis_url, conn, tmp_path, monkeypatch):
    """Images of a study of copies are varied per request (a decode and an encode): a client looping on media
    URLs is refused (429) past its media bucket, per rater session and per address, without touching the
    answer buckets; a media request opens no rater session."""
    from PIL import Image

    from webapp.handles import fresh_handle

    media = {}
    for i in range(3):
        out = io.BytesIO()
        Image.new("RGB", (32, 32), (40 * i, 90, 200)).save(out, "PNG")
        media[i] = out.getvalue()
    items = [Item(id=f"img{i}", kind="image", media_type="image/png") for i in range(3)]
    create_study(conn, StudyConfig(name="Pictures", random_state=0), items, media=media, study_id="pictures")
    app = limited_app(redis_url, tmp_path, monkeypatch, MEDIA_RATE_PER_RATER=0.5, MEDIA_BURST_PER_RATER=3,
                      MEDIA_RATE_PER_ADDRESS=0.5, MEDIA_BURST_PER_ADDRESS=5)

    def url():
        return f"/media/pictures/h/{fresh_handle(SECRET, 'pictures', 1)}"

    rater = client_at(app)
    assert rater.get("/api/studies/pictures/questions/next").status_code == 200  # the session
    statuses = [rater.get(url()).status_code for _ in range(4)]
    assert statuses == [200, 200, 200, 429]
    refused = rater.get(url())
    assert error_code(refused, 429) == "rate_limited" and "media" in refused.get_json()["error"]["message"]
    assert 1 <= int(refused.headers["Retry-After"]) <= 2
    # the answer buckets are the rater's own: questions still come
    assert rater.get("/api/studies/pictures/questions/next").status_code == 200
    # the address's bucket (5) is shared by sessionless clients of the address: 3 taken above, 2 left
    statuses = [client_at(app).get(url()).status_code for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert client_at(app, "203.0.113.9").get(url()).status_code == 200
    sessionless = client_at(app, "203.0.113.10")
    sessionless.get(url())
    assert sessionless.get_cookie("session") is None  # no rater session opened by a media request


def test_many_sessions_from_one_address_share_its_limit(redis_url, conn, study_id, tmp_path, monkeypatch):
    app = limited_app(redis_url, tmp_path, monkeypatch, ANSWER_RATE_PER_ADDRESS=0.5, ANSWER_BURST_PER_ADDRESS=4)
    url = f"/api/studies/{study_id}/questions/next"
    statuses = [client_at(app).get(url).status_code for _ in range(6)]  # a fresh session every time
    assert statuses == [200] * 4 + [429] * 2
    assert client_at(app, "203.0.113.9").get(url).status_code == 200
    # a second web process shares the buckets through Redis
    other_process = limited_app(redis_url, tmp_path, monkeypatch, ANSWER_RATE_PER_ADDRESS=0.5,
                                ANSWER_BURST_PER_ADDRESS=4)
    assert client_at(other_process).get(url).status_code == 429
    # a spoofed X-Forwarded-For does not escape the limit unless a proxy is trusted
    spoofed = client_at(app).get(url, headers={"X-Forwarded-For": "192.0.2.55"})
    assert spoofed.status_code == 429


def test_the_default_limits_leave_people_alone_and_limit_local_simulations_unless_exempted(
        redis_url, conn, study_id, tmp_path, monkeypatch):
    # the real defaults: no address exempt (the `app` fixture exempts loopback, so it cannot test this)
    app = limited_app(redis_url, tmp_path, monkeypatch, RATE_LIMIT_EXEMPT_ADDRESSES=())
    assert app.config["ANSWER_RATE_PER_RATER"] >= 2 and app.config["ANSWER_BURST_PER_RATER"] >= 10
    person = client_at(app)
    question = fetch_question(person)
    for _ in range(12):  # twelve answers at machine speed: far faster than anyone clicks
        response = answer(person, question)
        assert response.status_code == 201, response.get_json()
        question = response.get_json()["next"]
    local = app.test_client()  # 127.0.0.1: simulated raters and load tests on the server's machine
    question, statuses = fetch_question(local), []
    for _ in range(40):
        response = answer(local, question)
        statuses.append(response.status_code)
        if response.status_code != 201:
            break
        question = response.get_json()["next"]
    assert 429 in statuses  # loopback is limited by default (docs/operations/security.md: RATE_LIMIT_EXEMPT_ADDRESSES)
    exempt = limited_app(redis_url, tmp_path, monkeypatch, RATE_LIMIT_EXEMPT_ADDRESSES="127.0.0.1,::1")
    local = exempt.test_client()
    question = fetch_question(local)
    for _ in range(40):
        response = answer(local, question)
        assert response.status_code == 201, response.get_json()
        question = response.get_json()["next"]


def test_limits_can_be_switched_off(redis_url, conn, study_id, tmp_path, monkeypatch):
    app = limited_app(redis_url, tmp_path, monkeypatch, ANSWER_RATE_PER_RATER=0, ANSWER_RATE_PER_ADDRESS=0)
    client = client_at(app)
    assert all(client.get(f"/api/studies/{study_id}/questions/next").status_code == 200 for _ in range(30))
    assert not list(conn.scan_iter(match="proxima:*:rate:*"))


def test_login_attempts_from_one_address_are_limited(redis_url, conn, tmp_path, monkeypatch):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    app = limited_app(redis_url, tmp_path, monkeypatch, LOGIN_RATE_PER_ADDRESS=0.01, LOGIN_BURST_PER_ADDRESS=3)
    client = client_at(app)
    for name in ("alice", "bob", "carol"):  # password spraying over account names
        assert log_in(client, name=name, password="guess number one").status_code == 401
    refused = log_in(client)  # the right password, but over the limit
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "Too many login attempts" in refused.get_data(as_text=True)
    assert client.get("/").status_code == 302
    assert log_in(client_at(app, "203.0.113.9")).status_code == 302


def test_a_trusted_proxy_supplies_the_client_address_and_https(redis_url, conn, study_id, tmp_path, monkeypatch):
    app = limited_app(redis_url, tmp_path, monkeypatch, TRUSTED_PROXIES=1, ANSWER_RATE_PER_ADDRESS=0.5,
                      ANSWER_BURST_PER_ADDRESS=1)
    url = f"/api/studies/{study_id}/questions/next"
    proxy = "10.0.0.2"
    first = client_at(app, proxy).get(url, headers={"X-Forwarded-For": "192.0.2.1", "X-Forwarded-Proto": "https"})
    assert first.status_code == 200
    assert "Secure" in first.headers["Set-Cookie"]
    assert client_at(app, proxy).get(url, headers={"X-Forwarded-For": "192.0.2.1"}).status_code == 429
    assert client_at(app, proxy).get(url, headers={"X-Forwarded-For": "192.0.2.2"}).status_code == 200


# ------------------------------------------------------------------------------ cookies


def test_rater_and_researcher_cookies_are_httponly_lax_and_secure_over_https(app, conn, study_id):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    rater = app.test_client()
    cookie = rater.get(f"/s/{study_id}?PROLIFIC_PID=p-1", base_url="https://proxima.example").headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie
    researcher = app.test_client()
    page = researcher.get("/login", base_url="https://proxima.example").get_data(as_text=True)
    response = researcher.post("/login", base_url="https://proxima.example",
                               headers={"Referer": "https://proxima.example/login"},  # CSRF over https
                               data={"username": RESEARCHER, "password": RESEARCHER_PASSWORD,
                                     "csrf_token": csrf_token_of(page)})
    assert response.status_code == 302
    cookie = response.headers["Set-Cookie"]
    assert "Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie


# ------------------------------------------------------------------------------ content types, sizes, paths


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "multipart/form-data; boundary=b",
                                          "application/javascript", None])
def test_answers_in_another_content_type_are_refused(client, conn, study_id, content_type):
    question = fetch_question(client)
    body = json.dumps({"token": question["token"], "choice": question["candidates"][0]["handle"]})
    response = client.post(f"/api/studies/{study_id}/answers", data=body, content_type=content_type)
    assert error_code(response, 415) == "unsupported_media_type"
    assert count_answers(conn, study_id) == 0


def test_enormous_bodies_are_refused_everywhere(app, client, researcher_client, conn, study_id):
    big = "x" * (1 << 20)
    assert client.post("/login", data={"username": big, "password": big}).status_code == 413
    assert researcher_client.post(f"/studies/{study_id}/settings", data={"name": big}).status_code == 413
    # a body without a length (chunked) is cut off at the limit too
    response = client.post(f"/api/studies/{study_id}/answers", input_stream=io.BytesIO(b"[" * (1 << 20)),
                           content_type="application/json", environ_overrides={"wsgi.input_terminated": True})
    assert error_code(response, 413) == "request_entity_too_large"
    assert get_study(conn, study_id).config.name == "Colours"
    assert count_answers(conn, study_id) == 0


@pytest.mark.parametrize("path", [
    "/media/colours/../../etc/passwd", "/media/colours/..%2f..%2fetc%2fpasswd", "/s/colours/media/../../",
    "/s/colours/../../webapp/__init__.py", "/static/../webapp/__init__.py", "/static/%2e%2e/webapp/__init__.py",
    "/static/..%2fwebapp%2f__init__.py", "/static/%2e%2e%2f%2e%2e%2fetc%2fpasswd", "/static//etc/passwd",
    "/static/js/../../webapp/__init__.py", "/static/..\\webapp\\__init__.py", "/media/colours/-1",
    "/media/colours/1e3", "/media/..%2fcolours/0", "/media/colours/99999999999999999999",
    "/media/colours/h/..%2f..%2fetc%2fpasswd", "/media/colours/h/" + "A" * 32, "/media/..%2fcolours/h/" + "A" * 32,
])
def test_path_traversal_in_item_and_static_urls_finds_nothing(client, conn, study_id, path):
    response = client.get(path, follow_redirects=True)  # "//" is redirected to "/" first
    assert response.status_code in (400, 404), (path, response.status_code)
    text = response.get_data(as_text=True)
    assert "create_app" not in text and "root:" not in text


# ------------------------------------------------------------------------------ stored XSS


@pytest.fixture
def hostile_study(conn):
    return create_study(conn, hostile_config(), hostile_items(), study_id="hostile")


def test_researcher_text_is_escaped_on_every_rater_page(app, conn, hostile_study):
    rater = app.test_client()
    consent = rater.get(f"/s/{hostile_study}").get_data(as_text=True)
    assert 'id="consent-text"' in consent
    assert_inert(consent, "consent page")
    assert "&lt;script&gt;" in consent  # shown as text
    rater.post(f"/s/{hostile_study}/consent", data={"decision": "agree",
                                                    "csrf_token": csrf_token_of(consent)})
    page = rater.get(f"/s/{hostile_study}").get_data(as_text=True)
    assert 'id="instructions"' in page
    assert_inert(page, "study page")
    practice = re.search(r"data-practice='([^']*)'", page).group(1)
    assert "<" not in practice and ">" not in practice  # JSON in an attribute: < > ' & escaped
    for _ in range(3):
        question = fetch_question(rater, hostile_study)
        assert any("<script>" in item["text"] or "<img" in item["text"] or "<svg" in item["text"]
                   or "plain" in item["text"] for item in [question["head"], *question["candidates"]])
        assert answer(rater, question, study_id=hostile_study).status_code == 201
    finish = rater.get(f"/s/{hostile_study}/done").get_data(as_text=True)
    assert 'id="completion-code"' in finish and 'id="debrief"' in finish
    assert_inert(finish, "finish page")
    conn.hset(keys.study(hostile_study), "status", "paused")
    closed = app.test_client().get(f"/s/{hostile_study}").get_data(as_text=True)
    assert 'id="closed"' in closed
    assert_inert(closed, "closed page")


def test_researcher_text_is_escaped_on_the_dashboard(researcher_client, conn, hostile_study):
    for url in ("/", f"/studies/{hostile_study}"):
        html = researcher_client.get(url).get_data(as_text=True)
        assert_inert(html, url)
        assert "Study &#34;&gt;&lt;img" in html or "Study &quot;&gt;&lt;img" in html
    page = researcher_client.get(f"/studies/{hostile_study}?tab=settings").get_data(as_text=True)
    assert "&lt;/textarea&gt;" in page  # the instructions stay inside their textarea
    form = researcher_client.post("/studies/new", data={"name": XSS[1], "instructions": XSS[3]})
    assert form.status_code == 400  # no items file: the form comes back with the fields filled in
    assert_inert(form.get_data(as_text=True), "new study form with an error")


def test_markdown_keeps_no_raw_html_and_no_script_links(app, conn, hostile_study):
    from webapp.raters import render_markdown

    html = str(render_markdown(MARKDOWN_XSS))
    assert "<script" not in html and "<img" not in html
    assert not re.search(r'href="\s*(javascript|data|vbscript):', html, re.I)
    assert "a javascript link" in html  # the text survives, without its link
    assert_inert(html, "markdown")


# ------------------------------------------------------------------------------ in a real browser

@pytest.fixture
def hostile_server(conn, start_serve):
    create_study(conn, hostile_config(), hostile_items(), study_id="hostile")
    create_study(conn, StudyConfig(name="Colours", pool_size=10, random_state=1), colour_items(8), study_id="colours")
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    return start_serve()


# Runs before any page script: records CSP violations (the browser also logs them to the console).
WATCH_CSP = """
window.__violations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__violations.push(e.violatedDirective + ' ' + e.blockedURI + ' ' + (e.sample || ''));
});
"""


@pytest.mark.browser
def test_pages_work_under_the_csp_and_hostile_text_stays_text(browser, hostile_server):
    context = browser.new_context()
    context.add_init_script(WATCH_CSP)
    problems = []
    expected_dialogs = []

    def on_dialog(dialog):
        if dialog.message not in expected_dialogs:
            problems.append(f"dialog: {dialog.message}")
        dialog.dismiss()

    def watch(page):
        page.on("console", lambda m: m.type in ("error", "warning") and problems.append(f"console: {m.text}"))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("dialog", on_dialog)
        return page

    def check(page, where):
        assert page.evaluate("window.__xss") is None, where
        assert page.evaluate("window.__violations") == [], (where, page.evaluate("window.__violations"))

    page = watch(context.new_page())
    # the rater's path: consent, instructions, a practice question, three questions, the finish page
    page.goto(f"{hostile_server}/s/hostile?PROLIFIC_PID=p-browser")
    assert "<script>" in page.locator("#consent-text").inner_text()
    check(page, "consent")
    agree_to_consent(page)
    page.wait_for_selector("#instructions")
    assert "a javascript link" in page.locator("#instructions").inner_text()
    assert page.locator("#instructions a").count() == 0
    page.click("#start")
    page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
    page.click("#left")
    page.wait_for_selector("#feedback:not([hidden])")
    assert "<svg onload" in page.locator("#feedback-text").inner_text()
    page.click("#feedback-next")
    shown = []
    for n in range(3):
        page.wait_for_selector("#question:not([hidden]) #left:not([disabled])")
        shown.append(page.locator("#question").inner_text())
        if n == 2:
            with page.expect_navigation():
                page.click("#left")
        else:
            page.click("#left")
            # a function, not an expression string: the CSP forbids the eval a string predicate needs
            page.wait_for_function(f"() => document.getElementById('answered')?.textContent === '{n + 1}'")
        check(page, f"question {n}")
    assert any("<script>" in text or "<img" in text or "<svg" in text for text in shown), shown
    assert "Which? <script>" in shown[0]
    page.wait_for_selector("#completion-code")
    page.fill("#debrief", XSS[0])
    page.click("#debrief-submit")
    page.wait_for_selector("#debrief-thanks")
    check(page, "finish")

    # the researcher's pages: the study list, the hostile study's dashboard, a new study from an upload
    researcher = watch(context.new_page())
    researcher.goto(f"{hostile_server}/studies/hostile")
    researcher.fill("#username", RESEARCHER)
    researcher.fill("#password", RESEARCHER_PASSWORD)
    researcher.click("#login")
    researcher.wait_for_selector("#dashboard")
    researcher.wait_for_selector("#plot-per-minute .uplot canvas")
    assert "Study \"><img" in researcher.locator("h1").inner_text()
    check(researcher, "study dashboard")
    # the study page's sections (tabs) are pages of their own
    researcher.click("#tab-raters")
    researcher.wait_for_selector('#raters-table tr[data-rater="p-browser"]', timeout=20000)
    check(researcher, "study dashboard: raters")
    researcher.click("#tab-settings")
    assert "</textarea><script>" in researcher.locator("#settings-instructions").input_value()
    check(researcher, "study dashboard: settings")
    researcher.goto(f"{hostile_server}/studies/colours?tab=learning")
    researcher.wait_for_selector("#nn-graph g.item")
    check(researcher, "colours dashboard: learning")
    researcher.goto(f"{hostile_server}/studies/colours")
    researcher.wait_for_selector("#plot-per-minute .uplot canvas")
    expected_dialogs.append("Close the study? Raters will get no more questions.")
    researcher.click("#action-close")  # asks first (from dashboard.js: no inline handler); dismissed
    researcher.wait_for_timeout(300)
    assert researcher.locator("#status").inner_text() == "running"
    check(researcher, "colours dashboard")
    researcher.goto(f"{hostile_server}/")
    check(researcher, "study list")
    researcher.goto(f"{hostile_server}/studies/new")
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zf:
        for name in (XSS[1].replace("/", ""), "b", "c"):
            zf.writestr(name + ".png", tiny_png())
    researcher.set_input_files("#items", files=[{"name": "items.zip", "mimeType": "application/zip",
                                                  "buffer": archive.getvalue()}])
    researcher.fill("#name", "Uploaded " + XSS[0])
    researcher.click("#create")
    researcher.wait_for_selector("#dashboard")
    assert "Uploaded <script>" in researcher.locator("h1").inner_text()
    researcher.click("#tab-learning")
    researcher.wait_for_selector("#items img.thumb")  # (the tab is drawn once its page has loaded)
    assert researcher.locator("#items img.thumb").count() == 3
    check(researcher, "uploaded study")
    assert problems == []
    context.close()

