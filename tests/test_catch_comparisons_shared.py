"""Catch comparisons are chosen once per study and item count and shared through Redis: every web process
asks the same ones (drawn from the study's own seed), and a process with a cold copy reads them instead of
choosing again (choosing reads every item: ~0.1 s of CPU at 1,000 items, paid by raters joining together)."""
from __future__ import annotations

import json

from helpers import colour_items

from webapp import catches
from workers.store import keys
from workers.store.config import StudyConfig
from workers.store.studies import add_items, create_study, get_study


def test_comparisons_are_chosen_once_and_read_by_every_other_process(conn, monkeypatch):
    study_id = create_study(conn, StudyConfig(name="Shared", random_state=0), colour_items(40), study_id="shared")
    study = get_study(conn, study_id)
    catches.forget()
    first = catches.comparisons(conn, study)
    assert first and conn.exists(keys.catch_comparisons(study_id))
    # another process (a cold copy) reads them and does not choose again
    catches.forget()
    monkeypatch.setattr(catches, "choose_comparisons", lambda *a: (_ for _ in ()).throw(AssertionError("chosen")))
    assert catches.comparisons(conn, study) == first
    monkeypatch.undo()
    # the same study seed chooses the same ones wherever they are chosen again
    conn.delete(keys.catch_comparisons(study_id))
    catches.forget()
    assert catches.comparisons(conn, study) == first


def test_added_items_or_a_stored_copy_of_another_version_choose_again(conn):
    config = StudyConfig.from_dict({"name": "Grown", "random_state": 0,
                                    "algorithms": [{"algorithm": "comparison_forest"}]})  # a study that grows
    study_id = create_study(conn, config, colour_items(30), study_id="grown")
    catches.forget()
    before = catches.comparisons(conn, get_study(conn, study_id))
    add_items(conn, study_id, colour_items(45)[30:])
    catches.forget()
    grown = get_study(conn, study_id)
    after = catches.comparisons(conn, grown)
    stored = json.loads(conn.get(keys.catch_comparisons(study_id)))
    assert stored["version"][1] == grown.n_items == 45 and after != before
    conn.set(keys.catch_comparisons(study_id), json.dumps({"version": "old", "comparisons": [[1, 2]]}))
    catches.forget()
    assert catches.comparisons(conn, grown) == after  # a copy it cannot read is chosen again, the same


def test_a_study_created_from_the_command_line_has_its_comparisons_chosen_before_any_rater(conn, redis_url, tmp_path,
                                                                                          monkeypatch):
    """`proxima create` chooses them (catches.prepare), so no rater's request pays for the choice: the first
    question of a launch read them, as every later one does. prepare's choice is the one a rater's request
    would have made (the study's own seed)."""
    from click.testing import CliRunner

    from webapp.cli import main

    items = tmp_path / "items.csv"
    items.write_text("id,text,label\n" + "".join(f"t{i},word {i},{'ab'[i % 2]}\n" for i in range(12)))
    config = tmp_path / "study.yaml"
    config.write_text("name: Words\nrandom_state: 3\n")
    result = CliRunner().invoke(main, ["create", str(config), "--items", str(items), "--id", "words"],
                                env={"REDIS_URL": redis_url}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "by labels alone" in result.output  # the warning prepare returns is still said
    stored = json.loads(conn.get(keys.catch_comparisons("words")))["comparisons"]
    chosen = [catches.Comparison(h, s, d, far, tuple(others)) for h, s, d, far, others in stored]
    catches.forget()
    monkeypatch.setattr(catches, "choose_comparisons", lambda *a: (_ for _ in ()).throw(AssertionError("chosen")))
    study = get_study(conn, "words")
    assert catches.comparisons(conn, study) == chosen != []
    monkeypatch.undo()
    conn.delete(keys.catch_comparisons("words"))
    catches.forget()
    assert catches.comparisons(conn, study) == chosen


def test_features_set_later_choose_the_catch_trials_again(conn, redis_url, tmp_path):
    """Labels alone on text give label catch trials with no margin; `proxima features` with the value the labels
    were cut by chooses them again, kept only where the features give the margin (and stored for every process)."""
    from click.testing import CliRunner

    from webapp.cli import main

    items = tmp_path / "items.csv"
    items.write_text("id,text,label\n" + "".join(f"t{i},word {i},{'ab'[i // 6]}\n" for i in range(12)))
    config = tmp_path / "study.yaml"
    config.write_text("name: Cut\nrandom_state: 3\n")
    env = {"REDIS_URL": redis_url}
    assert CliRunner().invoke(main, ["create", str(config), "--items", str(items), "--id", "cut"], env=env,
                              catch_exceptions=False).exit_code == 0
    before = json.loads(conn.get(keys.catch_comparisons("cut")))["comparisons"]
    features = tmp_path / "features.csv"
    features.write_text("id,value\n" + "".join(f"t{i},{i}\n" for i in range(12)))
    result = CliRunner().invoke(main, ["features", "cut", str(features)], env=env, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    after = json.loads(conn.get(keys.catch_comparisons("cut")))["comparisons"]
    assert after and after != before
    catches.forget()
    assert catches.source_of([json.loads(r) for r in conn.lrange(keys.items("cut"), 0, -1)]) == "features"
