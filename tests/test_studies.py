"""Study configs, items from folders and CSVs, and engine-state storage."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from engine.kinds import get_kind
from engine.random_triplets import RandomTriplets
from engine.registry import DEFAULT_NN_ALGORITHM
from workers.store import engine_state
from workers.store.config import ConfigError, StudyConfig, load_config_file
from workers.store.studies import (
    Item,
    StudyError,
    StudyNotFound,
    create_study,
    get_items,
    get_media,
    get_study,
    items_from_csv,
    items_from_folder,
    list_studies,
)


def test_config_defaults_and_round_trip():
    config = StudyConfig.from_dict({"name": "Shoes", "pool_size": 20})
    [alg] = config.algorithms
    default = DEFAULT_NN_ALGORITHM
    assert (alg.label, alg.algorithm, alg.question_kind, alg.share) == (default, default, "triplet", 1.0)
    assert config.pool_size == 20
    assert StudyConfig.from_dict(config.to_dict()) == config
    assert StudyConfig.from_stored(config.to_dict()) == config


@pytest.mark.parametrize("data,words", [
    ({"name": "x", "colour": "red"}, ["unknown field", "colour", "allowed", "algorithms"]),
    ({"name": "x", "algorithm": "magic"}, ["algorithm", "'magic'", "allowed values", "anntri", "comparison_forest"]),
    ({"name": "x", "algorithms": [{"algorithm": "anntri", "params": {"delta": 2}}]}, ["algorithms.0.params.delta"]),
    ({"name": "x", "algorithms": [{"algorithm": "anntri", "params": {"kay": 2}}]},
     ["unknown parameter", "kay", "algorithms.0.params", "window"]),
    ({"name": "x", "algorithms": [{"algorithm": "anntri"}, {"algorithm": "anntri"}]}, ["labels", "distinct"]),
    ({"name": "x", "algorithms": [{"algorithm": "random_triplets", "question_kind": "rating"}]},
     ["algorithms.0.question_kind", "random_triplets asks triplet or", "not rating"]),
    ({"name": "x", "algorithms": [{"algorithm": "anntri", "share": 0}]}, ["algorithms.0.share"]),
    ({"name": "x", "algorithm": "ann", "algorithms": [{"algorithm": "anntri"}]}, ["either", "not both"]),
    ({"name": "x", "rating": {"min": 5, "max": 1}}, ["rating.max", "greater"]),
    ({"name": "x", "rating": {"min": 0, "max": 100, "step": 1}}, ["buttons", "slider"]),
    ({"name": "x", "pool_size": 0}, ["pool_size"]),
    ({"name": "x", "pool_size": "ten"}, ["pool_size", "integer"]),
    ({}, ["name"]),
    (["name"], ["mapping"]),
])
def test_bad_config_names_the_field_and_what_is_allowed(data, words):
    with pytest.raises(ConfigError) as err:
        StudyConfig.from_dict(data)
    for word in words:
        assert word in str(err.value)


def test_a_mixed_config_shares_raters_and_maps_ratings_to_distances():
    config = StudyConfig.from_dict({
        "name": "Compare", "question_kind": "rating",
        "rating": {"min": 0, "max": 100, "step": 1, "widget": "slider"},
        "algorithms": [{"algorithm": "anntri", "share": 3, "params": {"k": 2, "delta": 0.05}},
                       {"algorithm": "random", "label": "baseline", "question_kind": "triplet"}],
    })
    anntri, baseline = config.algorithms
    assert (anntri.question_kind, anntri.params["k"], baseline.label, baseline.question_kind) == \
        ("rating", 2, "baseline", "triplet")
    assert config.shares() == {"anntri": 0.75, "baseline": 0.25}
    rating = anntri.kind  # the kind reads its value on the study's scale, its settings (``rating:``)
    scale = config.settings_of(rating)
    assert scale == {"min": 0, "max": 100, "step": 1, "widget": "slider", "low_label": "very different",
                     "high_label": "very similar", "prompt": "How similar are these two?"} == dict(config.rating)
    assert rating.sample(100, scale) == 0.0 and rating.sample(0, scale) == 1.0
    assert rating.sample(25, scale) == 0.75
    assert rating.check_value(37, scale) == 37.0
    for bad in (101, -1, 2.5, "50", True):
        with pytest.raises(ValueError):
            rating.check_value(bad, scale)
    # stored as a config file gives it, and read back the same
    assert config.to_dict()["rating"] == scale and StudyConfig.from_stored(config.to_dict()) == config


def test_study_checks_k_and_labels_against_its_items(conn):
    items = [Item(id=f"t{i}", kind="text", text=f"text {i}") for i in range(4)]
    too_many = StudyConfig.from_dict({"name": "x", "algorithms": [{"algorithm": "anntri", "params": {"k": 4}}]})
    with pytest.raises(StudyError, match="k can be at most 3"):
        create_study(conn, too_many, items)
    supervised = StudyConfig.from_dict({"name": "x", "algorithms": [
        {"algorithm": "comparison_forest", "params": {"supervised": True}}]})
    with pytest.raises(StudyError, match="label for every item.*t0"):
        create_study(conn, supervised, items)


def test_config_files_yaml_json_and_their_errors(tmp_path):
    (tmp_path / "a.yaml").write_text("name: Shoes\npool_size: 30\n")
    (tmp_path / "b.json").write_text('{"name": "Shoes"}')
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    assert load_config_file(tmp_path / "a.yaml").pool_size == 30
    assert load_config_file(tmp_path / "b.json").name == "Shoes"
    with pytest.raises(ConfigError, match="not valid yaml"):
        load_config_file(tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match="does not exist"):
        load_config_file(tmp_path / "missing.yaml")


def test_items_from_a_folder_of_images_keep_their_bytes(tmp_path, conn):
    for i, colour in enumerate(["red", "green", "blue"]):
        Image.new("RGB", (8, 8), colour).save(tmp_path / f"img{i}.png")
    (tmp_path / "notes.txt").write_text("ignored")
    items, media = items_from_folder(tmp_path)
    assert [item.id for item in items] == ["img0", "img1", "img2"]
    assert all(item.kind == "image" and item.media_type == "image/png" for item in items)
    study_id = create_study(conn, StudyConfig(name="Images"), items, media)
    assert get_media(conn, study_id, 1) == (tmp_path / "img1.png").read_bytes()
    assert get_items(conn, study_id) == items


def test_items_from_csv_and_their_errors(tmp_path):
    good = tmp_path / "texts.csv"
    good.write_text("id,text,label\na,the cat,animal\nb,the dog,animal\n,a car,\n")
    items = items_from_csv(good)
    assert [(i.id, i.text, i.label) for i in items] == [("a", "the cat", "animal"), ("b", "the dog", "animal"),
                                                         ("t3", "a car", None)]
    no_text = tmp_path / "no_text.csv"
    no_text.write_text("id,words\na,b\n")
    with pytest.raises(StudyError, match="'text' column"):
        items_from_csv(no_text)
    empty_cell = tmp_path / "empty.csv"
    empty_cell.write_text("text\nfine\n\"\"\n")
    with pytest.raises(StudyError, match="row 3"):
        items_from_csv(empty_cell)
    with pytest.raises(StudyError, match="does not exist"):
        items_from_folder(tmp_path / "nowhere")


def test_studies_need_three_unique_items_and_a_free_id(conn):
    config = StudyConfig(name="S")
    items = items_from_csv_rows(["a", "b", "c"])
    with pytest.raises(StudyError, match="at least 3"):
        create_study(conn, config, items[:2])
    with pytest.raises(StudyError, match="unique"):
        create_study(conn, config, items + items[:1])
    create_study(conn, config, items, study_id="s1")
    with pytest.raises(StudyError, match="already exists"):
        create_study(conn, config, items, study_id="s1")
    with pytest.raises(StudyError, match="lowercase"):
        create_study(conn, config, items, study_id="../etc")
    assert [s.id for s in list_studies(conn)] == ["s1"]
    assert get_study(conn, "s1").n_items == 3
    with pytest.raises(StudyNotFound):
        get_study(conn, "s2")


def items_from_csv_rows(texts):
    from workers.store.studies import Item

    return [Item(id=t, kind="text", text=t) for t in texts]


def test_engine_state_round_trips_nested_arrays_without_pickle():
    state = {"class": "X", "version": 3, "a": np.arange(6, dtype=np.int32).reshape(2, 3),
             "trees": [{"nodes": np.array([1.5, np.inf]), "seed": 4}], "none": None}
    fields = {k.encode(): v for k, v in engine_state.encode_state(state).items()}
    back = engine_state.decode_state(fields)
    assert back["version"] == 3 and back["none"] is None and back["trees"][0]["seed"] == 4
    np.testing.assert_array_equal(back["a"], state["a"])
    assert back["a"].dtype == np.int32
    np.testing.assert_array_equal(back["trees"][0]["nodes"], state["trees"][0]["nodes"])
    with pytest.raises(ValueError, match="dtype object"):
        engine_state.encode_state({"bad": np.array([object()])})


@settings(max_examples=30, deadline=None)
@given(n_items=st.integers(3, 12), seed=st.integers(0, 2**31), n_answers=st.integers(0, 40))
def test_random_triplets_state_round_trip_gives_identical_next_questions(n_items, seed, n_answers):
    planner = RandomTriplets(n_items, random_state=seed)
    questions = planner.next_questions(n_answers)
    planner.observe([(h, a, b, a if (h + a + b) % 2 else b) for h, a, b in questions])
    fields = {k.encode(): v for k, v in engine_state.encode_state(planner.to_state()).items()}
    restored = RandomTriplets.from_state(engine_state.decode_state(fields))
    assert restored.next_questions(10) == planner.next_questions(10)
    np.testing.assert_array_equal(restored.result().wins, planner.result().wins)
    assert restored.progress() == planner.progress()


def test_random_triplets_questions_are_valid_and_answers_validated():
    planner = RandomTriplets(5, random_state=1)
    for h, a, b in planner.next_questions(200):
        assert len({h, a, b}) == 3 and max(h, a, b) < 5
    before = planner.to_state()
    for bad in ([(0, 1, 2, 3)], [(0, 0, 2, 0)], [(0, 1, 9, 1)], [(0, 1, 2)], [("a", 1, 2, 1)]):
        with pytest.raises(ValueError):
            planner.observe(bad)
    np.testing.assert_array_equal(planner.to_state()["wins"], before["wins"])
    planner.observe([(0, 1, 2, 1), (0, 1, 3, 1), (0, 2, 3, 3)])
    assert planner.result().neighbors[0] == 1
    with pytest.raises(ValueError, match="at least 3 items"):
        RandomTriplets(2)


def test_a_stored_config_with_its_rating_section_loads_unchanged():
    """A config stored before the scale became the rating kind's settings wrote ``rating:`` for every study: it
    loads as the kind's settings and is written back the same; a study without one gets the kind's defaults."""
    new = StudyConfig.from_dict({"name": "Old"})
    stored = {**new.to_dict(), "rating": {"min": 1, "max": 7, "step": 1, "widget": "buttons", "low_label": "apart",
                                          "high_label": "alike", "prompt": "How alike?"}}
    old = StudyConfig.from_stored(stored)
    assert old.to_dict()["rating"] == stored["rating"] == old.settings_of("rating")
    assert old.texts(get_kind("rating"))[0] == "How alike?"
    assert "rating" not in new.to_dict() and new.settings_of("rating")["max"] == 5
    with pytest.raises(ConfigError, match="rating.max"):
        StudyConfig.from_stored({**stored, "rating": {"min": 3, "max": 2, "widget": "slider"}})
