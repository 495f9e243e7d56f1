"""The proxima CLI: clear errors and non-zero exits for bad input; create and export studies."""
from __future__ import annotations

import csv
import io

import pytest
from click.testing import CliRunner
from helpers import answer, fetch_question

from engine.registry import DEFAULT_NN_ALGORITHM
from webapp.cli import main
from workers.store.studies import get_items, get_study


@pytest.fixture
def texts(tmp_path):
    (tmp_path / "study.yaml").write_text("name: Sentences\npool_size: 5\n")
    (tmp_path / "items.csv").write_text("id,text\ns1,The cat sat.\ns2,A dog ran.\ns3,Cars are fast.\ns4,Kittens nap.\n")
    return tmp_path


def test_create_from_csv_and_export(cli, conn, texts):
    result = cli("create", str(texts / "study.yaml"), "--items", str(texts / "items.csv"), "--id", "sentences")
    assert result.exit_code == 0, result.output
    assert "Created study sentences with 4 items" in result.output
    assert get_study(conn, "sentences").config.pool_size == 5
    assert [i.text for i in get_items(conn, "sentences")][0] == "The cat sat."
    result = cli("export", "sentences")
    assert result.exit_code == 0
    assert result.stdout.startswith("study,answer_id,answered_at,rater")


def test_export_writes_answers_to_a_file(cli, client, conn, study_id, tmp_path):
    for _ in range(3):
        assert answer(client, fetch_question(client)).status_code == 201
    out = tmp_path / "answers.csv"
    result = cli("export", study_id, "--format", "csv", "-o", str(out))
    assert result.exit_code == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 3 and {r["kind"] for r in rows} == {"triplet"}


@pytest.mark.parametrize("args,message", [
    (["create", "missing.yaml", "--items", "x.csv"], "config file missing.yaml does not exist"),
    (["create", "{dir}/study.yaml", "--items", "{dir}/nowhere"], "does not exist"),
    (["create", "{dir}/bad.yaml", "--items", "{dir}/items.csv"], "unknown field(s) colour"),
    (["create", "{dir}/study.yaml", "--items", "{dir}/empty"], "holds no media files"),
    (["export", "no-such-study"], "there is no study with id 'no-such-study'"),
])
def test_bad_input_prints_a_clear_error_and_exits_non_zero(cli, texts, args, message):
    (texts / "bad.yaml").write_text("name: x\ncolour: red\n")
    (texts / "empty").mkdir()
    result = cli(*[a.format(dir=texts) for a in args])
    assert result.exit_code != 0
    assert message in result.output


def test_worker_without_any_redis_says_so(tmp_path, monkeypatch):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    result = CliRunner().invoke(main, ["worker", "--burst"])
    assert result.exit_code != 0 and "set REDIS_URL" in result.output


def test_without_redis_url_commands_use_the_instance_redis_and_its_data_persists(tmp_path, monkeypatch, texts):
    monkeypatch.delenv("REDIS_URL", raising=False)
    monkeypatch.setenv("PROXIMA_INSTANCE_PATH", str(tmp_path / "instance"))
    runner = CliRunner()
    result = runner.invoke(main, ["create", str(texts / "study.yaml"), "--items", str(texts / "items.csv"),
                                  "--id", "kept"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "instance" / "redis" / "proxima.aof").exists()
    # a second, fresh embedded server replays the AOF
    result = runner.invoke(main, ["studies"])
    row = f"kept\trunning\t{DEFAULT_NN_ALGORITHM}\t4 items\t0 answers\tSentences"
    assert result.exit_code == 0 and row in result.output


def test_rebuild_excluding_a_rater_replays_the_log_without_them(cli, app, conn, study_id):
    import numpy as np

    from workers.jobs.update_pass import apply_new_answers
    from workers.store import engine_state, keys

    careful, careless = app.test_client(), app.test_client()
    for client, n in ((careful, 6), (careless, 4)):
        question = fetch_question(client)
        for _ in range(n):
            response = answer(client, question)
            question = response.get_json()["next"]
    apply_new_answers(conn, study_id)
    assert engine_state.load(conn, study_id, "random_triplets")["n_answers"] == 10
    raters = {r.decode() for r in conn.smembers(keys.raters(study_id))}
    with careless.session_transaction() as session:
        careless_id = session["rater_id"]
    assert careless_id in raters

    result = cli("rebuild", study_id, "--exclude-rater", careless_id)
    assert result.exit_code == 0, result.output
    assert "Replayed 6 answers (4 excluded from 1 rater(s))" in result.output
    state = engine_state.load(conn, study_id, "random_triplets")
    assert state["n_answers"] == 6 and int(np.sum(state["wins"])) == 6
    # later updates keep leaving the excluded rater out
    response = answer(careless, question)
    assert response.status_code == 201
    apply_new_answers(conn, study_id)
    assert engine_state.load(conn, study_id, "random_triplets")["n_answers"] == 6
    triplets = cli("export", study_id, "--what", "triplets").stdout.strip().splitlines()
    assert len(triplets) == 6
    # a plain rebuild reproduces the same state
    before = engine_state.load(conn, study_id, "random_triplets")
    assert "did not change" in cli("rebuild", study_id).output
    np.testing.assert_array_equal(engine_state.load(conn, study_id, "random_triplets")["wins"], before["wins"])


def test_triplet_export_is_cblearn_list_order(cli, client, conn, study_id, tmp_path):
    import numpy as np

    from workers.store.answers import read_answers

    question = fetch_question(client)
    for _ in range(5):
        question = answer(client, question, choice=question["candidates"][1]["handle"]).get_json()["next"]
    out = tmp_path / "triplets.csv"
    assert cli("export", study_id, "--what", "triplets", "-o", str(out)).exit_code == 0
    triplets = np.loadtxt(out, delimiter=",", dtype=int, ndmin=2)
    logged = read_answers(conn, study_id)
    assert triplets.tolist() == [[a.head, a.b, a.a] for a in logged]  # i closer to j (chosen) than to k


def test_rebuild_of_unknown_study_fails_clearly(cli):
    result = cli("rebuild", "nope")
    assert result.exit_code != 0 and "there is no study with id 'nope'" in result.output


@pytest.mark.parametrize("option, expected", [([], 1), (["--blas-threads", "2"], 2)])
def test_the_worker_runs_its_jobs_with_capped_blas_threads(cli, monkeypatch, option, expected):
    import numpy  # noqa: F401  (loads the BLAS library whose threads the worker caps)
    from rq import SimpleWorker
    from threadpoolctl import threadpool_info

    seen: list[list[int]] = []

    def work(self, **kwargs):
        seen.append([pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"])
        return True

    monkeypatch.setattr(SimpleWorker, "work", work)
    result = cli("worker", "--burst", *option)
    assert result.exit_code == 0, result.output
    assert seen and seen[0] and set(seen[0]) == {expected}


def test_the_worker_refuses_a_negative_thread_count(cli):
    result = CliRunner().invoke(main, ["worker", "--burst", "--blas-threads", "-1"])
    assert result.exit_code != 0 and "--blas-threads" in result.output
