"""Features in through the CLI (create --features, features STUDY FILE: CSV, .npy, .npz, Parquet) and on to
the study's learner as a prior."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import index_of

from workers.jobs.learners import fresh_learners
from workers.store.studies import get_items, get_study


@pytest.fixture
def texts(tmp_path):
    (tmp_path / "study.yaml").write_text("name: Sentences\npool_size: 5\n")
    rows = "".join(f"s{i},Sentence {i}.\n" for i in range(8))
    (tmp_path / "items.csv").write_text("id,text\n" + rows)
    return tmp_path


def _features():
    return np.arange(16, dtype=float).reshape(8, 2) ** [1, 2]


def test_create_with_npy_features_reaches_the_duels_learner(cli, conn, texts):
    np.save(texts / "f.npy", _features())
    result = cli("create", str(texts / "study.yaml"), "--items", str(texts / "items.csv"), "--id", "s",
                 "--features", str(texts / "f.npy"))
    assert result.exit_code == 0, result.output
    items = get_items(conn, "s")
    assert items[3].features == {"f0": 6.0, "f1": 49.0}
    learner = next(iter(fresh_learners(conn, get_study(conn, "s")).values()))
    assert learner.planner.prior_ is not None
    # the first shortlists come from the features: item 0's nearest is item 1
    assert learner.planner.cands_[0, 0] == 1


def test_features_command_reads_csv_and_npz(cli, conn, texts):
    assert cli("create", str(texts / "study.yaml"), "--items", str(texts / "items.csv"), "--id", "s").exit_code == 0
    (texts / "f.csv").write_text("id,size,weight\n" + "".join(f"s{i},{i},{i * i % 5}\n" for i in range(8)))
    result = cli("features", "s", str(texts / "f.csv"))
    assert result.exit_code == 0, result.output
    assert "Set 2 feature(s) (size, weight) on 8 items" in result.output
    np.savez(texts / "f.npz", features=_features())
    assert cli("features", "s", str(texts / "f.npz")).exit_code == 0
    assert get_items(conn, "s")[7].features == {"f0": 14.0, "f1": 225.0}


@pytest.mark.parametrize("name,write,words", [
    ("f.npy", lambda p: np.save(p, np.ones((7, 2))), "needs one row per item (8 rows"),
    ("f.npy", lambda p: np.save(p, np.where(np.eye(8, 2) > 0, np.nan, 1.0)), "is not a number"),
    ("f.csv", lambda p: p.write_text("id,a,b\n" + "".join(f"s{i},{i},3\n" for i in range(8))),
     "column 'b' holds one value (3) for every item"),
    ("f.csv", lambda p: p.write_text("id,a\n" + "".join(f"s{i},{i}\n" for i in range(7))), "missing for 1 item"),
    ("f.csv", lambda p: p.write_text("id,a\n" + "".join(f"s{i},{i}\n" for i in range(8)) + "zz,1\n"),
     "has no item(s) zz"),
    ("f.npz", lambda p: np.savez(p, a=np.ones((8, 2)), b=np.ones((8, 2))), "holds the arrays a, b"),
    ("f.parquet", lambda p: p.write_bytes(b"PAR1"), "needs pyarrow"),
])
def test_bad_features_files_are_refused_in_words(cli, texts, name, write, words):
    pytest.importorskip("numpy")
    if name.endswith(".parquet"):
        try:
            import pyarrow  # noqa: F401
            pytest.skip("pyarrow is installed: a Parquet file is read")
        except ImportError:
            pass
    assert cli("create", str(texts / "study.yaml"), "--items", str(texts / "items.csv"), "--id", "s").exit_code == 0
    write(texts / name)
    result = cli("features", "s", str(texts / name))
    assert result.exit_code != 0
    assert words in result.output


def test_create_refuses_features_of_other_items_before_creating(cli, conn, texts):
    (texts / "f.csv").write_text("id,a\n" + "".join(f"s{i},{i}\n" for i in range(7)))
    result = cli("create", str(texts / "study.yaml"), "--items", str(texts / "items.csv"), "--id", "s",
                 "--features", str(texts / "f.csv"))
    assert result.exit_code != 0 and "missing 1 (s7)" in result.output
    assert cli("studies").output.count("\ts\t") == 0


def test_a_duels_study_with_features_runs_its_passes_and_keeps_the_prior_in_its_state(client, conn):
    from helpers import answer, fetch_question, run_worker

    from engine.planners import restore_planner
    from workers.store import engine_state
    from workers.store.config import StudyConfig
    from workers.store.studies import Item, create_study, set_features

    items = [Item(id=f"p{i}", kind="color", color="#203040", position=(float(i),)) for i in range(12)]
    create_study(conn, StudyConfig.from_dict({"name": "Line", "pool_size": 10, "random_state": 0,
                                              "algorithms": [{"algorithm": "duels"}], "attention": {"rate": 0}}),
                 items, study_id="line")
    set_features(conn, "line", {f"p{i}": {"x": float(i), "y": float(i // 4)} for i in range(12)})
    run_worker(conn)
    question = fetch_question(client, "line")
    for step in range(30):
        head, (a, b) = index_of(question["head"]), [index_of(c) for c in question["candidates"]]
        response = answer(client, question, choice=a if abs(a - head) < abs(b - head) else b, study_id="line")
        assert response.status_code == 201, response.get_json()
        question = response.get_json()["next"]
        if step % 10 == 9:
            run_worker(conn)  # (a pass between answers: the learner tests the features, then uses them)
    run_worker(conn)
    state = engine_state.load(conn, "line", "duels")
    planner = restore_planner(state)
    assert planner.n_answers_ >= 30
    assert planner.prior_ is not None and planner.prior_.space_.shape == (12, 2)
    assert planner.progress()["features_used"] is True
