"""The smaller defects of issue 28 (item 7), one test each: files an items folder holds besides its items
are named; ..."""
from __future__ import annotations

import pytest

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x02\x00\x00\x00\x90wS"
       b"\xde\x00\x00\x00\x0cIDATx\x9cc\xf8\xcf\xc0\x00\x00\x03\x01\x01\x00\xc9\xfe\x92\xef\x00\x00\x00\x00"
       b"IEND\xaeB`\x82")


def test_creating_a_study_from_a_folder_names_the_files_it_skipped(cli, tmp_path):
    folder = tmp_path / "items"
    folder.mkdir()
    for i in range(5):
        (folder / f"img{i}.png").write_bytes(PNG)
    (folder / "protocol.pdf").write_bytes(b"%PDF-1.4")
    (folder / "notes.txt").write_text("which images?")
    (folder / ".DS_Store").write_bytes(b"\0")
    (tmp_path / "study.yaml").write_text("name: Pictures\n")
    result = cli("create", str(tmp_path / "study.yaml"), "--items", str(folder), "--id", "pictures")
    assert result.exit_code == 0, result.output
    assert "with 5 items" in result.output
    assert "skipped 2 file(s)" in result.stderr and "notes.txt, protocol.pdf" in result.stderr
    assert ".DS_Store" not in result.stderr


@pytest.mark.parametrize("args, option, words", [
    (["--budgets", "10,abc"], "'--budgets'", "'abc' is not a number"),
    (["--budgets", "0,-5"], "'--budgets'", "positive numbers"),
    (["--algorithms", "duels,nonsense"], "'--algorithms'", "'nonsense'"),
])
def test_a_bad_list_option_is_named_in_the_error(cli, args, option, words, tmp_path):
    result = cli("plan", "--truth", f"points:{points_truth(tmp_path)}", *args)
    assert result.exit_code == 2
    assert f"Invalid value for {option}" in result.output and words in result.output


def points_truth(folder) -> str:
    """A truth of 60 points in 2-D (clusters of 10) as a CSV, so the plan needs no data beside the repository."""
    import numpy as np

    rng = np.random.default_rng(3)
    X = np.repeat(rng.uniform(0, 10, size=(6, 2)), 10, axis=0) + rng.normal(size=(60, 2))
    path = folder / "truth.csv"
    path.write_text("id,x1,x2\n" + "".join(f"p{i},{x:.4f},{y:.4f}\n" for i, (x, y) in enumerate(X)), encoding="utf-8")
    return str(path)


def test_plan_says_how_far_it_is_and_blames_the_time_limit_not_the_budgets(cli, tmp_path):
    result = cli("plan", "--truth", f"points:{points_truth(tmp_path)}", "--algorithms", "random_triplets",
                 "--budgets", "5,20000", "--runs", "2",
                 "--max-seconds", "1", "--jobs", "1", "--target", "0.99")
    assert result.exit_code == 0, result.output
    assert "[1/2] a run of random_triplets ended after" in result.stderr
    assert "[2/2] a run of random_triplets ended after" in result.stderr
    assert "stopped by the time limit" in result.stderr
    assert "before the time limit stopped the runs (random_triplets up to 5 screens per item)" in result.stdout
    assert "raise --max-seconds" in result.stdout and "try larger --budgets" not in result.stdout


# ---------------------------------------------------------------------------- a changed secret key
def rotated_app(redis_url, tmp_path, monkeypatch, key, previous=None):
    from helpers import LOOPBACK

    from webapp import create_app

    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    config = {"TESTING": True, "REDIS_URL": redis_url, "SECRET_KEY": key, "RATE_LIMIT_EXEMPT_ADDRESSES": LOOPBACK}
    if previous is not None:
        config["PREVIOUS_SECRET_KEYS"] = previous
    return create_app(config)


def test_codes_shown_and_questions_held_before_a_key_change_stay_valid(redis_url, conn, tmp_path, monkeypatch, cli):
    from helpers import answer, colour_items, fetch_question

    from workers.store.answers import read_answers
    from workers.store.config import StudyConfig
    from workers.store.studies import create_study

    create_study(conn, StudyConfig.from_dict({"name": "Keys", "algorithm": "random_triplets", "random_state": 0,
                                              "attention": {"rate": 0}, "limits": {"max_questions_per_rater": 3}}),
                 colour_items(), study_id="keys")
    old = rotated_app(redis_url, tmp_path, monkeypatch, "the old key").test_client()
    old.get("/s/keys?PROLIFIC_PID=p-rotate")
    for _ in range(2):
        assert answer(old, fetch_question(old, "keys"), study_id="keys").status_code == 201
    held = fetch_question(old, "keys")  # a question in hand when the key changes
    new = rotated_app(redis_url, tmp_path, monkeypatch, "the new key", previous="the old key").test_client()
    new.set_cookie("session", old.get_cookie("session").value)  # the rater's browser, signed with the old key
    assert answer(new, held, study_id="keys").status_code == 201
    assert {a.rater for a in read_answers(conn, "keys")} == {"p-rotate"}  # the same rater, not a new one
    shown = new.get("/s/keys/done").get_data(as_text=True)
    from webapp.questions_answers import completion_code
    new_code = completion_code("the new key", "keys", "p-rotate")
    assert new_code in shown
    # the rater was shown a code under the old key: it still verifies, and is shown again
    conn.hset("proxima:{keys}:rater-stats", "p-rotate:code_shown", completion_code("the old key", "keys", "p-rotate"))
    old_code = completion_code("the old key", "keys", "p-rotate")
    assert old_code in new.get("/s/keys/done").get_data(as_text=True)
    monkeypatch.setenv("PROXIMA_SECRET_KEY", "the new key")
    assert cli("verify-code", "keys", "p-rotate", old_code).exit_code != 0  # no previous key: refused
    monkeypatch.setenv("PROXIMA_PREVIOUS_SECRET_KEYS", "another old key,the old key")
    result = cli("verify-code", "keys", "p-rotate", old_code)
    assert result.exit_code == 0 and result.stdout.startswith("valid:")
    assert cli("verify-code", "keys", "p-rotate", new_code).exit_code == 0


def test_setting_a_secret_key_keeps_the_one_the_instance_generated(tmp_path, monkeypatch, caplog):
    from webapp import instance_config
    from webapp.questions_answers import completion_code, completion_code_kind

    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    monkeypatch.delenv("PROXIMA_SECRET_KEY", raising=False)
    generated = instance_config()["SECRET_KEY"]  # a first trial: the instance makes its own key
    code = completion_code(generated, "s1", "p-1")
    monkeypatch.setenv("PROXIMA_SECRET_KEY", "a key set by the server guide")
    with caplog.at_level("WARNING", logger="proxima"):
        config = instance_config()
    assert config["SECRET_KEY"] == "a key set by the server guide"
    assert config["PREVIOUS_SECRET_KEYS"] == (generated,) and config["SECRET_KEY_FALLBACKS"] == [generated]
    assert completion_code_kind(config["SECRET_KEY"], "s1", "p-1", code, config["PREVIOUS_SECRET_KEYS"]) == "full"
    assert "completion codes already shown to raters still verify" in caplog.text


# ---------------------------------------------------------------------------- the lapse of a careless pilot
def test_the_lapse_fitted_to_a_pilot_with_careless_raters_is_no_longer_inflated():
    """A pilot of 100 items, 10 answers per item from raters of 20 answers each, the first 10% of them
    careless (every answer at random), the others people-like (logistic noise, lapse .03): the raters
    as a whole lapse on 0.1 + 0.9 x 0.03 = .127 of their answers. The fit took .50 before. It is not
    yet reliably near the truth (benchmarks/pilot_lapse.py: .000 to .195 over seeds), so this holds it
    to what it does reliably: well below the old .50, and not above the truth by more than .1."""
    import numpy as np

    from engine.planning import Scenario, triplets_from_answers
    from simulation.noise import fit_pilot

    rng = np.random.default_rng(5)
    n, per_item, per_rater = 100, 10, 20
    X = rng.normal(size=(n, 2))
    D = np.linalg.norm(X[:, None] - X[None], axis=-1)
    world = Scenario(D / D.max(), 0.075, 0.03)
    questions = np.array([rng.choice(n, 3, replace=False) for _ in range(n * per_item)])
    answers = np.asarray(world.oracle(np.random.default_rng(6)).answer([tuple(q) for q in questions]))
    raters = np.arange(len(questions)) // per_rater
    careless = raters < 0.1 * raters.max()
    answers[careless, 3] = np.where(rng.random(int(careless.sum())) < .5, questions[careless, 1],
                                    questions[careless, 2])
    truth = careless.mean() + (1 - careless.mean()) * 0.03
    fit = fit_pilot(triplets_from_answers(answers), n, replicates=1)
    assert fit.lapses[0] < truth + 0.1, (fit.lapses[0], truth)
