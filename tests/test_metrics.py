"""Prometheus /metrics (issue 18): scraped from a real `proxima serve` with two web processes, every
request counted once whichever process served it, study figures read from Redis, never public."""
from __future__ import annotations

import time

import pytest
import redis
import requests
from helpers import LOOPBACK, SECRET, http_log_in, serving_on_own_redis
from prometheus_client.parser import text_string_to_metric_families

from webapp import create_app
from webapp.accounts import create_user
from workers.store.config import StudyConfig
from workers.store.queue import schedule_update
from workers.store.studies import Item, create_study

TOKEN = "scrape-token-for-the-test"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    inst = tmp_path_factory.mktemp("metrics-instance")
    with serving_on_own_redis(inst, env={"PROXIMA_METRICS_TOKEN": TOKEN}) as (serve, url):
        conn = redis.Redis.from_url(url)
        yield {"base": serve.base, "conn": conn}
        conn.close()


def scrape(base: str, **headers) -> requests.Response:
    return requests.get(f"{base}/metrics", headers=headers, timeout=10)


def samples(text: str) -> dict:
    """{(sample name, frozenset of labels): value} of an exposition."""
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_a_scrape_of_a_real_serve_counts_every_request_once_and_reads_the_study_from_redis(served):
    base, conn = served["base"], served["conn"]
    config = StudyConfig.from_dict({"name": "Metered", "pool_size": 5, "random_state": 0,
                                    "algorithms": [{"algorithm": "random_triplets"}]})
    create_study(conn, config, [Item(id=f"t{i}", kind="text", text=f"text {i}") for i in range(8)], study_id="metered")
    schedule_update(conn, "metered")
    before = samples(scrape(base, Authorization=f"Bearer {TOKEN}").text)
    answered = 0
    for _rater in range(3):  # three sessions: connections land on both web processes
        session = requests.Session()
        for _ in range(8):
            question = session.get(f"{base}/api/studies/metered/questions/next", timeout=10).json()["question"]
            response = session.post(f"{base}/api/studies/metered/answers", timeout=10, json={
                "token": question["token"], "choice": question["candidates"][0]["handle"]})
            assert response.status_code == 201, response.text
            answered += 1
        session.close()
    time.sleep(1.5)  # each process adds its durations to Redis once a second
    response = scrape(base, Authorization=f"Bearer {TOKEN}")
    assert response.status_code == 200 and response.headers["Content-Type"].startswith("text/plain; version=")
    after = samples(response.text)
    study = frozenset({("study", "metered")})
    assert after[("proxima_answers_accepted_total", study)] == answered
    assert after[("proxima_questions_served_total", study)] >= answered
    assert ("proxima_fallback_ratio", study) in after and ("proxima_engine_lag_seconds", study) in after
    assert after[("proxima_pool_depth", frozenset({("study", "metered"), ("algorithm", "random_triplets")}))] >= 0
    assert after[("proxima_raters", study)] == 3

    def count(name, endpoint, where):
        return where.get((name, frozenset({("endpoint", endpoint)})), 0)

    posted = count("proxima_request_duration_seconds_count", "api.post_answer", after) - \
        count("proxima_request_duration_seconds_count", "api.post_answer", before)
    assert posted == answered  # each answer request once, whichever process served it
    inf = frozenset({("endpoint", "api.post_answer"), ("le", "+Inf")})
    assert after[("proxima_request_duration_seconds_bucket", inf)] == \
        count("proxima_request_duration_seconds_count", "api.post_answer", after)
    assert count("proxima_request_duration_seconds_sum", "api.post_answer", after) > 0


def test_metrics_are_not_public_but_a_token_or_a_researcher_may_scrape(served):
    base, conn = served["base"], served["conn"]
    refused = scrape(base)
    assert refused.status_code == 401 and "PROXIMA_METRICS_TOKEN" in refused.text
    assert "proxima_" not in refused.text
    assert scrape(base, Authorization="Bearer wrong-token").status_code == 401
    assert scrape(base, Authorization=f"Basic {TOKEN}").status_code == 401
    create_user(conn, "operator", "a long operator password")
    session = http_log_in(base, "operator", "a long operator password")
    assert session.get(f"{base}/metrics", timeout=10).status_code == 200


def test_allowed_addresses_may_scrape_and_others_may_not(redis_url, conn, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    settings = {"TESTING": True, "REDIS_URL": redis_url, "SECRET_KEY": SECRET, "RATE_LIMIT_EXEMPT_ADDRESSES": LOOPBACK}
    allowed = create_app({**settings, "METRICS_ALLOWED_ADDRESSES": "10.0.0.0/8, 127.0.0.1"}).test_client()
    response = allowed.get("/metrics")
    assert response.status_code == 200 and b"proxima_request_duration_seconds" in response.data
    other = create_app({**settings, "METRICS_ALLOWED_ADDRESSES": "10.0.0.0/8"}).test_client()
    assert other.get("/metrics").status_code == 401
    assert create_app(settings).test_client().get("/metrics").status_code == 401  # nothing allowed by default
