"""Random and hostile input to the JSON API never gives a 500, always gets the JSON error shape and
never stores an answer: property tests (hypothesis) for the answer body parser and the token
verifier, and the API fuzzed from its OpenAPI description (docs/openapi.yaml) with schemathesis."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import schemathesis
from helpers import SECRET, fetch_question
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import content_type_conformance, response_schema_conformance, status_code_conformance

from webapp.errors import ApiError
from webapp.questions_answers import parse_answer_body
from webapp.tokens import sign_question, verify_question
from workers.store.answers import count_answers

OPENAPI = Path(__file__).resolve().parent.parent / "docs" / "openapi.yaml"
FUZZ = settings(max_examples=60, deadline=None, database=None, derandomize=True,
                suppress_health_check=list(HealthCheck))

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=12)
answer_like = st.fixed_dictionaries({}, optional={
    "token": json_values, "choice": json_values, "value": json_values, "response_ms": json_values,
}) | json_values


def assert_error_shape(response, where: str = "") -> str:
    assert response.status_code < 500, f"{where}: {response.status_code} {response.get_data(as_text=True)[:300]}"
    assert response.mimetype == "application/json", where
    body = response.get_json()
    assert isinstance(body, dict) and set(body) == {"error"}, f"{where}: {body}"
    assert isinstance(body["error"]["code"], str) and body["error"]["message"], f"{where}: {body}"
    return body["error"]["code"]


# ---------------------------------------------------------------- the parser and the verifier


@FUZZ
@given(body=answer_like)
def test_the_answer_parser_accepts_or_refuses_with_a_400(body):
    try:
        token, choice, value, response_ms, skip = parse_answer_body(body)
    except ApiError as exc:
        assert exc.status == 400 and exc.code == "malformed_answer"
        return
    assert isinstance(body, dict)
    assert choice is None or all(type(c) in (int, str) for c in choice)  # handles (indices are refused later)
    assert value is None or (type(value) in (int, float))
    assert response_ms is None or 0 <= response_ms <= 24 * 3600 * 1000
    assert type(skip) is bool and not (skip and (choice is not None or value is not None))


@FUZZ
@given(token=json_values | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_the_token_verifier_refuses_anything_it_did_not_sign(token):
    with pytest.raises(ApiError) as refused:
        verify_question(SECRET, token, max_age=900)
    assert refused.value.status == 400 and refused.value.code == "invalid_token"


@FUZZ
@given(payload=st.dictionaries(st.text(max_size=5), json_scalars, max_size=4), flip=st.integers(0, 200))
def test_a_token_with_any_changed_character_is_refused(payload, flip):
    token = sign_question(SECRET, payload)
    assert verify_question(SECRET, token, max_age=900) == payload
    i = flip % len(token)
    changed = token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1:]
    try:
        result = verify_question(SECRET, changed, max_age=900)
    except ApiError as exc:
        assert exc.status in (400, 410)
    else:
        # base64 padding bits: a few characters decode to the same bytes; then the payload is the signed one
        assert result == payload


# ---------------------------------------------------------------- through the app


def test_random_answer_bodies_never_give_500_and_never_store(app, conn, study_id):
    client = app.test_client()
    fetch_question(client)
    url = f"/api/studies/{study_id}/answers"

    @FUZZ
    @given(body=answer_like, content_type=st.sampled_from(
        ["application/json", "application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded",
         "multipart/form-data; boundary=x", "application/xml", ""]))
    def post(body, content_type):
        raw = json.dumps(body)
        response = client.post(url, data=raw, content_type=content_type or None)
        assert_error_shape(response, f"{content_type} {raw[:80]}")
        assert count_answers(conn, study_id) == 0

    post()


def test_random_bytes_never_give_500_and_never_store(app, conn, study_id):
    client = app.test_client()
    fetch_question(client)

    @FUZZ
    @given(data=st.binary(max_size=300) | st.sampled_from([
        b"[" * 30_000, b'{"a":' * 10_000, b"NaN", b'{"token": "x", "value": Infinity}', b"\xff\xfe{}",
        b'{"token": "x", "choice": 1' + b"0" * 5000 + b"}", b"\x00" * 100]))
    def post(data):
        response = client.post(f"/api/studies/{study_id}/answers", data=data, content_type="application/json")
        code = assert_error_shape(response, repr(data[:60]))
        assert code in {"malformed_json", "malformed_answer", "invalid_token"}
        assert count_answers(conn, study_id) == 0

    post()


def test_a_real_token_with_random_fields_is_stored_only_when_the_answer_is_valid(app, conn, study_id):
    client = app.test_client()
    stored = []

    @settings(max_examples=40, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def post(data):
        question = fetch_question(client)
        offered = {c["handle"] for c in question["candidates"]}
        choices = st.sampled_from(sorted(offered)) | st.integers(-2, 12) | json_values
        extra = data.draw(st.fixed_dictionaries({}, optional={"choice": choices, "value": json_values,
                                                              "response_ms": json_values}))
        before = count_answers(conn, study_id)
        response = client.post(f"/api/studies/{study_id}/answers", json={**extra, "token": question["token"]})
        if response.status_code == 201:
            choice, ms = extra.get("choice"), extra.get("response_ms")
            assert type(choice) is str and choice in offered
            assert ms is None or (type(ms) in (int, float) and 0 <= ms <= 86_400_000)
            assert count_answers(conn, study_id) == before + 1
            stored.append(choice)
        else:
            assert_error_shape(response, json.dumps(extra)[:100])
            assert count_answers(conn, study_id) == before

    post()
    assert stored, "no generated answer was valid: the property above was never exercised"


# ---------------------------------------------------------------- schemathesis on the OpenAPI description


@pytest.fixture
def schema():
    return schemathesis.openapi.from_path(OPENAPI)


def test_the_openapi_description_names_every_json_route(app, schema):
    described = {(op.ok().method.upper(), op.ok().path) for op in schema.get_all_operations()}
    routes = set()
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/"):
            path = rule.rule.replace("<", "{").replace(">", "}")
            routes |= {(m, path) for m in rule.methods - {"HEAD", "OPTIONS"}}
    assert routes == described


def test_fuzzing_the_api_from_its_openapi_description(app, schema, conn, study_id, researcher_client, caplog):
    session_cookie = researcher_client.get_cookie("session").value
    rater = app.test_client()
    fetch_question(rater)  # a question is out; its token is not what the fuzzer sends
    seen = {}
    caplog.set_level(logging.ERROR)

    def check(case, response, where):
        status = response.status_code
        seen.setdefault(where, set()).add(status)
        assert status < 500, f"{where}: {status} {response.content[:300]!r}"
        if status >= 400:
            body = json.loads(response.content)
            assert set(body) == {"error"} and body["error"]["code"] and body["error"]["message"], f"{where}: {body}"
        if case.path_parameters and case.path_parameters.get("study_id") == study_id and status < 400:
            case.validate_response(response, checks=[status_code_conformance, content_type_conformance,
                                                     response_schema_conformance])

    def fuzz(operation):
        strategies = [operation.as_strategy(path_parameters={"study_id": study_id}),
                      operation.as_strategy(generation_mode=schemathesis.GenerationMode.NEGATIVE,
                                            path_parameters={"study_id": study_id}),
                      operation.as_strategy()]
        researcher_route = bool(operation.definition.raw.get("security"))

        @settings(max_examples=40, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        @given(case=st.one_of(strategies), logged_in=st.booleans())
        def run(case, logged_in):
            cookies = {"session": session_cookie} if logged_in else None
            response = case.call(app=app, cookies=cookies)
            check(case, response, operation.label)
            if researcher_route and not logged_in:
                # refused: no such study, an invalid token, or (past 20 invalid tokens from one address) any token
                if response.status_code == 429:
                    assert json.loads(response.content)["error"]["code"] == "too_many_invalid_tokens"
                else:
                    assert response.status_code in (401, 404), operation.label

        run()

    for result in schema.get_all_operations():
        fuzz(result.ok())
    assert count_answers(conn, study_id) == 0
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "the app logged an unhandled error"
    # the fuzzer reached the real study on every route (not only 404s for made-up ids)
    assert all(statuses & {200, 201, 400, 401, 409, 415} for statuses in seen.values()), seen

