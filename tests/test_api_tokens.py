"""Researcher API tokens: hashed at rest, shown once, read-only or read-write, one study or all; a
program reaches every researcher JSON route with ``Authorization: Bearer`` and no session or CSRF
token; made, listed and revoked on the account page and with ``proxima token``."""
from __future__ import annotations

import re
import time

import pytest
from click.testing import CliRunner
from helpers import RESEARCHER, RESEARCHER_PASSWORD, colour_items, csrf_token_of

from webapp.accounts import create_user, remove_user
from webapp.api_tokens import create_token, list_tokens, revoke_token, verify_token
from webapp.cli import main
from workers.store.config import StudyConfig
from workers.store.studies import create_study


@pytest.fixture
def account(conn):
    create_user(conn, "alice", "correct horse battery")
    return "alice"


@pytest.fixture
def two_studies(conn, study_id):
    config = StudyConfig.from_dict({"name": "Other", "algorithms": [{"algorithm": "random_triplets"}]})
    create_study(conn, config, colour_items(6), study_id="other")
    return study_id, "other"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def every_stored_value(conn) -> bytes:
    out = []
    for key in conn.scan_iter():
        kind = conn.type(key)
        if kind == b"hash":
            out.extend(v for kv in conn.hgetall(key).items() for v in kv)
        elif kind == b"string":
            out.append(conn.get(key))
        elif kind == b"set":
            out.extend(conn.smembers(key))
        out.append(key)
    return b"\n".join(out)


# ------------------------------------------------------------------------------------------------ the store
def test_a_token_is_kept_only_as_a_hash_and_verifies_until_revoked(conn, account, study_id):
    token, record = create_token(conn, account, "laptop", study=None, access="read")
    secret = token.split("_", 2)[2]
    assert re.fullmatch(r"prx_[0-9a-f]{12}_[A-Za-z0-9_-]{43}", token)
    assert secret.encode() not in every_stored_value(conn)  # neither the token nor its secret is stored
    assert verify_token(conn, token)["owner"] == account
    assert verify_token(conn, token[:-1] + ("A" if token[-1] != "A" else "B")) is None  # one character off
    assert [t["id"] for t in list_tokens(conn, account)] == [record["id"]]
    assert "secret_hash" not in list_tokens(conn)[0]
    revoke_token(conn, record["id"])
    assert verify_token(conn, token) is None and list_tokens(conn) == []


def test_a_removed_accounts_tokens_stop_working(conn, account):
    token, _ = create_token(conn, account, "laptop")
    remove_user(conn, account)
    assert verify_token(conn, token) is None


def test_a_token_stops_working_when_it_expires(client, conn, account, study_id):
    token, record = create_token(conn, account, "a week", expires_days=7)
    assert 7 * 86400 - 60 < record["expires_at"] - record["created_at"] <= 7 * 86400 + 1
    assert client.get(f"/api/studies/{study_id}/stats", headers=bearer(token)).status_code == 200
    conn.hset(f"proxima:api-token:{record['id']}", "expires_at", f"{time.time() - 1:.3f}")  # a week later
    assert verify_token(conn, token) is None
    refused = client.get(f"/api/studies/{study_id}/stats", headers=bearer(token))
    assert refused.status_code == 401 and "has expired" in refused.get_json()["error"]["message"]
    assert create_token(conn, account, "forever")[1]["expires_at"] is None


def test_tokens_for_unknown_studies_or_accounts_are_refused_in_words(conn, account):
    from webapp.api_tokens import TokenError

    with pytest.raises(TokenError, match="there is no study 'nope'"):
        create_token(conn, account, "x", study="nope")
    with pytest.raises(TokenError, match="there is no account 'bob'"):
        create_token(conn, "bob", "x")
    with pytest.raises(TokenError, match="give the token a name"):
        create_token(conn, account, "  ")
    with pytest.raises(TokenError, match="a token expires after 1 to 3650 days, not 0"):
        create_token(conn, account, "x", expires_days=0)


# ------------------------------------------------------------------------------------------------ the API
def test_a_read_only_token_reads_every_researcher_route_without_a_session(client, conn, account, study_id):
    token, _ = create_token(conn, account, "laptop")
    assert client.get_cookie("session") is None
    for path in (f"/api/studies/{study_id}/stats", f"/api/studies/{study_id}/raters", "/api/studies",
                 f"/api/studies/{study_id}", f"/api/studies/{study_id}/export/answers",
                 f"/api/studies/{study_id}/export/triplets", f"/api/studies/{study_id}/export/graph",
                 f"/api/studies/{study_id}/graph-layout"):
        response = client.get(path, headers=bearer(token))
        response.get_data()  # read the streamed exports to their end
        assert response.status_code == 200, path
    assert client.get(f"/api/studies/{study_id}/stats").status_code == 401  # the header is what let it in
    refused = client.post(f"/api/studies/{study_id}/status", json={"action": "pause"}, headers=bearer(token))
    assert refused.status_code == 403
    assert refused.get_json()["error"] == {"code": "read_only_token", "message": (
        "this API token is read-only; changing a study needs a read-write token")}


def test_a_read_write_token_changes_a_study_without_a_csrf_token(client, conn, account, study_id):
    token, _ = create_token(conn, account, "pipeline", access="write")
    response = client.post(f"/api/studies/{study_id}/status", json={"action": "pause"}, headers=bearer(token))
    assert response.status_code == 200 and response.get_json() == {"status": "paused"}
    assert conn.hget(f"proxima:{{{study_id}}}:study", "status") == b"paused"
    again = client.post(f"/api/studies/{study_id}/status", json={"action": "pause"}, headers=bearer(token))
    assert again.status_code == 409 and "the study is paused; it cannot pause" in again.get_json()["error"]["message"]


def test_a_session_still_needs_its_csrf_token_to_change_a_study(researcher_client, study_id):
    researcher_client.environ_base.pop("HTTP_X_CSRFTOKEN")
    response = researcher_client.post(f"/api/studies/{study_id}/status", json={"action": "pause"})
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "csrf_failed"


def test_a_study_token_sees_only_its_study(client, conn, account, two_studies):
    mine, other = two_studies
    token, _ = create_token(conn, account, "one study", study=mine)
    assert client.get(f"/api/studies/{mine}/stats", headers=bearer(token)).status_code == 200
    refused = client.get(f"/api/studies/{other}/stats", headers=bearer(token))
    assert refused.status_code == 403 and refused.get_json()["error"]["message"].startswith(
        f"this API token reads only study '{mine}', not '{other}'")
    listed = client.get("/api/studies", headers=bearer(token)).get_json()["studies"]
    assert [s["id"] for s in listed] == [mine]
    every = create_token(conn, account, "all")[0]
    assert sorted(s["id"] for s in client.get("/api/studies", headers=bearer(every)).get_json()["studies"]) == sorted(
        two_studies)


def test_a_bad_or_revoked_token_is_refused_in_words(client, conn, account, study_id):
    token, record = create_token(conn, account, "laptop")
    revoke_token(conn, record["id"])
    for sent in (token, "prx_nonsense", "Basic abc"):
        response = client.get(f"/api/studies/{study_id}/stats", headers=bearer(sent))
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="proxima"'
        error = response.get_json()["error"]
        assert error["code"] == "invalid_api_token" and "revoked" in error["message"]


def test_a_token_opens_no_dashboard_page(client, conn, account, study_id):
    token, _ = create_token(conn, account, "laptop")
    response = client.get(f"/studies/{study_id}", headers=bearer(token))
    assert response.status_code == 302 and "/login" in response.headers["Location"]


# ------------------------------------------------------------------------------------------------ the account page
def test_the_account_page_makes_shows_once_lists_and_revokes_tokens(researcher_client, conn, study_id):
    page = researcher_client.get("/account").get_data(as_text=True)
    assert 'id="no-tokens"' in page and f'<option value="{study_id}">' in page
    made = researcher_client.post("/account/tokens", data={"name": "laptop analysis", "study": study_id,
                                                           "access": "read", "expires_days": "30",
                                                           "csrf_token": csrf_token_of(page)})
    assert made.status_code == 200
    html = made.get_data(as_text=True)
    token = re.search(r'id="new-token-value">([^<]+)<', html).group(1)
    assert "shown only once" in html and ", expires 20" in html
    # it works, for its study only and read-only
    anonymous = researcher_client.application.test_client()
    assert anonymous.get(f"/api/studies/{study_id}/stats", headers=bearer(token)).status_code == 200
    record = verify_token(conn, token)
    assert record == {**record, "owner": RESEARCHER, "study": study_id, "access": "read", "name": "laptop analysis"}
    # listed without its secret, never shown again
    page = researcher_client.get("/account").get_data(as_text=True)
    assert f'id="token-{record["id"]}"' in page and token not in page and "laptop analysis" in page
    revoked = researcher_client.post(f"/account/tokens/{record['id']}/revoke", data={"csrf_token": csrf_token_of(page)})
    assert revoked.status_code == 302
    assert "is revoked" in researcher_client.get("/account").get_data(as_text=True)
    assert anonymous.get(f"/api/studies/{study_id}/stats", headers=bearer(token)).status_code == 401


def test_the_account_page_says_why_no_token_was_made(researcher_client):
    page = researcher_client.get("/account").get_data(as_text=True)
    response = researcher_client.post("/account/tokens", data={"name": " ", "csrf_token": csrf_token_of(page)})
    assert response.status_code == 400
    assert "No token was made: give the token a name" in response.get_data(as_text=True)


def test_one_researcher_cannot_revoke_anothers_token(researcher_client, conn):
    create_user(conn, "bob", "another long password")
    _, record = create_token(conn, "bob", "bob's laptop")
    page = researcher_client.get("/account").get_data(as_text=True)
    assert "bob&#39;s laptop" not in page and "bob's laptop" not in page
    response = researcher_client.post(f"/account/tokens/{record['id']}/revoke",
                                      data={"csrf_token": csrf_token_of(page)})
    assert response.status_code == 404 and list_tokens(conn, "bob")


# ------------------------------------------------------------------------------------------------ the CLI
def test_the_cli_creates_lists_and_revokes_tokens(conn, redis_url, monkeypatch, app, study_id):
    monkeypatch.setenv("REDIS_URL", redis_url)
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    runner = CliRunner()
    made = runner.invoke(main, ["token", "create", "--user", RESEARCHER, "--name", "cluster job", "--study", study_id,
                                "--write", "--expires-days", "30"])
    assert made.exit_code == 0, made.output
    token = re.search(r"^(prx_\S+)$", made.output, re.M).group(1)
    assert f"(read-write, study {study_id}, expires 20" in made.output
    assert app.test_client().post(f"/api/studies/{study_id}/status", json={"action": "pause"},
                                  headers=bearer(token)).status_code == 200
    listed = runner.invoke(main, ["token", "list"])
    token_id = token.split("_")[1]
    assert listed.exit_code == 0 and token_id in listed.output and "cluster job" in listed.output
    assert "\texpires 20" in listed.output
    assert token not in listed.output
    gone = runner.invoke(main, ["token", "revoke", token_id])
    assert gone.exit_code == 0 and f"Revoked token {token_id}" in gone.output
    assert verify_token(conn, token) is None
    again = runner.invoke(main, ["token", "revoke", token_id])
    assert again.exit_code != 0 and f"there is no token '{token_id}'" in again.output
    bad = runner.invoke(main, ["token", "create", "--user", RESEARCHER, "--name", "x", "--study", "nope"])
    assert bad.exit_code != 0 and "there is no study 'nope'" in bad.output


def test_an_address_sending_invalid_tokens_is_refused_past_its_burst_even_with_a_valid_one(client, conn, account,
                                                                                         study_id, app):
    """A guesser gets 401 for its first tries, then 429 with a Retry-After, and no token of its address is
    checked until the bucket has room: not even a valid one (else guessing would go on at full speed)."""
    app.config.update(TOKEN_FAILURE_RATE_PER_ADDRESS=0.01, TOKEN_FAILURE_BURST_PER_ADDRESS=5,
                      RATE_LIMIT_EXEMPT_ADDRESSES=())
    token, _ = create_token(conn, account, "ci", access="read")
    url = f"/api/studies/{study_id}/stats"
    bad = {"Authorization": "Bearer prx_0123456789ab_" + "x" * 43}
    codes = [client.get(url, headers=bad).status_code for _ in range(5)]
    assert codes == [401] * 5
    refused = client.get(url, headers=bad)
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
    assert refused.get_json()["error"]["code"] == "too_many_invalid_tokens"
    assert "too many invalid API tokens" in refused.get_json()["error"]["message"]
    assert client.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 429
    # another address is not held up, and the blocked one is let through once the block expires
    assert client.get(url, headers={"Authorization": f"Bearer {token}"},
                      environ_base={"REMOTE_ADDR": "10.9.8.7"}).status_code == 200
    from workers.store import keys

    conn.delete(keys.token_blocked("127.0.0.1"))
    assert client.get(url, headers={"Authorization": f"Bearer {token}"}).status_code == 200
