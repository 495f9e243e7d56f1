"""A study of ``split: learner`` (issue 41): after each update pass the pooled rating learner sets how the
raters' time is split between ratings and triplets, from each kind's seconds per answer measured on the
study's own answers; the issuing script asks by the shares it stored, the Overview and the stats API say
the split in force. Real Redis, the worker's jobs run by RQ (``run_worker``), raters through the rater API."""
from __future__ import annotations

import random
import time

import numpy as np
import pytest
from helpers import index_of, post_answer, run_worker, shown

from engine.ratings import PooledRatings
from engine.registry import wrapped_learner
from workers.jobs.learned_split import MIN_TIMED, question_shares
from workers.jobs.learner_cache import load_learners
from workers.store import keys, questions
from workers.store.config import ConfigError, StudyConfig
from workers.store.queue import schedule_update
from workers.store.studies import Item, create_study, get_study

N = 24
POSITIONS = np.sort(np.random.default_rng(3).uniform(0, 10, N))
RATING_MS, TRIPLET_MS = 4100, 6000


def _config(split: str | None, triplets: str = "random_triplets") -> dict:
    return {"name": "mixed", "random_state": 4, "pool_size": 12, "attention": {"rate": 0}, "heldout_share": 0,
            **({"split": split} if split else {}),
            "algorithms": [{"algorithm": "pooled", "question_kind": "rating"},
                           {"algorithm": triplets, "question_kind": "triplet"}]}


def _study(conn, split: str | None, triplets: str = "random_triplets") -> str:
    items = [Item(id=f"p{i}", kind="color", color="#203040", position=(float(x),)) for i, x in enumerate(POSITIONS)]
    sid = create_study(conn, StudyConfig.from_dict(_config(split, triplets)), items, study_id="mixed")
    run_worker(conn)
    return sid


def _answer_questions(app, conn, sid: str, answers: int, seed: int, careful: bool = False) -> dict[str, int]:
    """Four raters answer ``answers`` questions in turn: ratings as careful people would (by the items' places,
    with noise), triplets at random (a bot; ``careful``: by the items' places too), each kind in its own time; the
    worker runs every N answers. Returns the answers of each kind."""
    rng = np.random.default_rng(seed)
    random.seed(seed)  # the issuing script's draws (workers.store.questions)
    raters = []
    for r in range(4):
        client = app.test_client()
        client.get(f"/s/{sid}?PROLIFIC_PID=r{r}&STUDY_ID=s&SESSION_ID=r{r}")
        raters.append(client)
    given = {"rating": 0, "triplet": 0}
    for t in range(answers):
        client = raters[t % 4]
        question = client.get(f"/api/studies/{sid}/questions/next").get_json()["question"]
        items = [index_of(item) for item in shown(question)]
        if question["kind"] == "rating":
            i, j = items
            value = int(np.clip(round(5 - 0.45 * abs(POSITIONS[i] - POSITIONS[j]) + rng.normal(0, 0.6)), 1, 5))
            body = post_answer(client, sid, question, value=value, response_ms=RATING_MS).get_json()
        else:
            h, a, b = items
            nearer = a if abs(POSITIONS[h] - POSITIONS[a]) < abs(POSITIONS[h] - POSITIONS[b]) else b
            body = post_answer(client, sid, question, choice=int(nearer if careful else rng.choice(items[1:])),
                               response_ms=TRIPLET_MS).get_json()
        assert "answer" in body, body
        given[question["kind"]] += 1
        if t % N == N - 1:
            schedule_update(conn, sid)
            run_worker(conn)
    schedule_update(conn, sid)
    run_worker(conn)
    return given


def _issued_shares(conn, sid: str, count: int) -> dict[str, float]:
    """The share of each algorithm among ``count`` questions issued now (seeded draws)."""
    study = get_study(conn, sid)
    random.seed(11)
    served = {a.label: 0 for a in study.config.algorithms}
    for t in range(count):
        now = time.time()
        question, _, _ = questions.issue_question(conn, sid, study.config, study.n_items, f"x{t}", now, now + 600)
        served[question["algorithm"]] += 1
    return {label: n / count for label, n in served.items()}


def test_the_learner_moves_a_study_with_random_triplets_towards_ratings(app, conn, researcher_client):
    sid = _study(conn, "learner")
    assert questions.split_in_force(conn, sid, get_study(conn, sid).config) is None  # no answer yet: configured
    _answer_questions(app, conn, sid, 60, seed=0)
    early = questions.split_in_force(conn, sid, get_study(conn, sid).config)
    # too few answers for evidence: half the time each; both kinds timed, so the questions follow the seconds
    assert early["phase"] == "explore" and early["time_shares"] == {"rating": 0.5, "triplet": 0.5}
    assert early["timed"]["rating"] >= MIN_TIMED and early["timed"]["triplet"] >= MIN_TIMED
    assert early["seconds"] == {"rating": RATING_MS / 1000, "triplet": TRIPLET_MS / 1000}
    assert early["shares"]["pooled"] == pytest.approx((0.5 / 4.1) / (0.5 / 4.1 + 0.5 / 6.0))

    given = _answer_questions(app, conn, sid, 540, seed=1)
    config = get_study(conn, sid).config
    split = questions.split_in_force(conn, sid, config)
    assert split["phase"] == "evidence" and split["passes"] > 10
    # the triplets are noise: the learner gives ratings most of the time, and more of the questions still
    assert split["time_shares"]["rating"] > 0.7, split
    assert split["shares"] == pytest.approx(question_shares(config, split["time_shares"], split["seconds"]))
    assert split["shares"]["pooled"] > split["time_shares"]["rating"]
    assert given["rating"] > given["triplet"]
    stored = conn.hget(keys.pool_targets(sid), questions.share_field("pooled"))
    assert float(stored) == pytest.approx(split["shares"]["pooled"])
    # the triplets' pool is sized by the share in force (a few per cent), not the configured half (6 of pool_size 12)
    target = int(conn.hget(keys.pool_targets(sid), "random_triplets"))
    assert target < 0.5 * _config("learner")["pool_size"], target
    # the issuing script asks by the stored shares (2,000 draws: a standard error of .011)
    issued = _issued_shares(conn, sid, 2000)
    assert issued["pooled"] == pytest.approx(split["shares"]["pooled"], abs=0.04)
    # the Overview and the stats API say the split in force
    stats = researcher_client.get(f"/api/studies/{sid}/stats").get_json()
    assert stats["split"]["time_shares"] == split["time_shares"]
    rating = round(100 * split["time_shares"]["rating"])
    sentence = f"The learner asks ratings {rating}% of rater time (measured 4.1 s per rating, 6.0 s per triplet), since"
    assert stats["split"]["sentence"].startswith(sentence)
    page = researcher_client.get(f"/studies/{sid}").get_data(as_text=True)
    assert sentence in page


def test_a_study_of_fixed_shares_keeps_them(app, conn, researcher_client):
    sid = _study(conn, None)
    _answer_questions(app, conn, sid, 240, seed=0)
    config = get_study(conn, sid).config
    assert config.split == "fixed" and questions.split_in_force(conn, sid, config) is None
    fields = {k.decode() for k in conn.hkeys(keys.pool_targets(sid))}
    assert fields == {"pooled", "random_triplets"}  # no share of the learner's stored
    issued = _issued_shares(conn, sid, 2000)
    assert issued["pooled"] == pytest.approx(0.5, abs=0.04)
    stats = researcher_client.get(f"/api/studies/{sid}/stats").get_json()
    assert stats["split"] is None
    assert "The learner asks ratings" not in researcher_client.get(f"/studies/{sid}").get_data(as_text=True)


@pytest.mark.parametrize(("algorithms", "says"), [
    ([{"algorithm": "random", "question_kind": "rating"}, {"algorithm": "random_triplets"}],
     "no algorithm 'pooled' asking rating questions"),
    ([{"algorithm": "pooled", "question_kind": "rating"}], "no algorithm of this study asks triplet questions"),
    ([{"algorithm": "pooled", "question_kind": "rating"}, {"algorithm": "random_triplets"},
      {"algorithm": "random_triplets", "label": "odd", "question_kind": "odd_one_out"}],
     "algorithm 'odd' asks odd_one_out questions"),
    ([{"algorithm": "random", "question_kind": "rating"}, {"algorithm": "pooled_triplets"}],
     "no algorithm 'pooled' asking rating questions"),
])
def test_a_learner_split_it_cannot_apply_is_refused_in_words(algorithms, says):
    with pytest.raises(ConfigError, match=says):
        StudyConfig.from_dict({**_config("learner"), "algorithms": algorithms})


def test_the_split_is_kept_in_the_stored_config():
    config = StudyConfig.from_dict(_config("learner"))
    assert StudyConfig.from_stored(config.to_dict()).split == "learner"
    assert StudyConfig.from_stored({k: v for k, v in config.to_dict().items() if k != "split"}).split == "fixed"
    with pytest.raises(ConfigError, match="'split'"):
        StudyConfig.from_dict(_config("auto"))


# ---------------------------------------------------------------------------- triplets of the pooled learner's choosing
def test_pooled_triplets_pools_the_triplets_the_pooled_learner_proposed(app, conn, monkeypatch):
    proposed: list[tuple[int, int, int]] = []
    original = PooledRatings.next_triplets

    def recording(self, budget: int) -> list[tuple[int, int, int]]:
        out = original(self, budget)
        proposed.extend(out)
        return out

    monkeypatch.setattr(PooledRatings, "next_triplets", recording)
    sid = _study(conn, "learner", "pooled_triplets")
    given = _answer_questions(app, conn, sid, 240, seed=0, careful=True)
    assert given["triplet"] > 40 and given["rating"] > 40
    pool = questions.pooled_questions(conn, sid, "pooled_triplets")
    assert pool and proposed
    asked = [tuple(questions.question_items(q)) for q in pool]
    assert all(len(t) == 3 and t in set(proposed) for t in asked), asked
    learners = load_learners(conn, get_study(conn, sid))
    pooled = wrapped_learner(learners["pooled"].planner)
    # its answers taught the pooled learner (every triplet answered), and the delegate holds no graph of its own
    assert pooled.progress()["triplets"] == given["triplet"]
    assert learners["pooled_triplets"].progress()["answers"] == given["triplet"]
    assert (learners["pooled_triplets"].graph(3).neighbors == -1).all()


def test_a_study_of_pooled_triplets_runs_end_to_end_and_learns(app, conn, researcher_client):
    sid = _study(conn, "learner", "pooled_triplets")
    given = _answer_questions(app, conn, sid, 480, seed=1, careful=True)
    config = get_study(conn, sid).config
    split = questions.split_in_force(conn, sid, config)
    assert split["phase"] == "evidence" and split["triplets"] == given["triplet"] > 0
    assert split["shares"] == pytest.approx(question_shares(config, split["time_shares"], split["seconds"]))
    counters = {k.decode(): int(v) for k, v in conn.hgetall(keys.counters(sid)).items()}
    # its triplets came from its pool as the pooled learner's ratings did (an unlinked delegate plans none: every
    # triplet would be a random fallback), with a fallback now and then where a pool ran dry between passes
    fell_back = {label: counters.get(f"fallback_served:{label}", 0) / counters[f"questions_served:{label}"]
                 for label in ("pooled", "pooled_triplets")}
    assert fell_back["pooled_triplets"] < 0.25 and fell_back["pooled_triplets"] < 2 * fell_back["pooled"] + 0.05
    # the pooled learner's graph finds each item's true nearest among its first three for most items
    pooled = wrapped_learner(load_learners(conn, get_study(conn, sid))["pooled"].planner)
    truth = np.argsort(np.abs(POSITIONS[:, None] - POSITIONS[None, :]) + np.diag(np.full(N, np.inf)), axis=1)[:, 0]
    found = pooled.neighbor_graph(3).neighbors
    hits = np.mean([truth[i] in found[i] for i in range(N)])
    assert hits >= 0.75, hits
    stats = researcher_client.get(f"/api/studies/{sid}/stats").get_json()
    assert stats["split"]["time_shares"] == split["time_shares"]
