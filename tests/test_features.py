"""Item features: numeric columns of an items CSV, a features file for any study, the feature matrix."""
from __future__ import annotations

import pytest

from workers.store.config import StudyConfig
from workers.store.studies import (
    Item,
    StudyError,
    create_study,
    feature_matrix,
    features_from_csv_text,
    get_items,
    items_from_csv,
    items_from_csv_text,
    set_features,
)


def test_extra_csv_columns_are_numeric_features_in_column_order():
    items = items_from_csv_text("id,text,size,label,weight\na,cat,1.5,animal,3\nb,car,10,thing,-2e3\n,dog,0,,1\n")
    assert [i.features for i in items] == [{"size": 1.5, "weight": 3.0}, {"size": 10.0, "weight": -2000.0},
                                           {"size": 0.0, "weight": 1.0}]
    assert [i.label for i in items] == ["animal", "thing", None]
    names, rows = feature_matrix(items)
    assert names == ["size", "weight"] and rows == [[1.5, 3.0], [10.0, -2000.0], [0.0, 1.0]]


def test_csv_without_extra_columns_has_no_features_and_says_how_to_add_them():
    items = items_from_csv_text("text\none\ntwo\nthree\n")
    assert all(i.features is None for i in items)
    with pytest.raises(StudyError, match="no features.*numeric feature columns"):
        feature_matrix(items)


@pytest.mark.parametrize("text,words", [
    ("text,size\na,1\nb,big\n", ["row 3", "'size'", "'big'", "not a number"]),
    ("text,size\na,1\nb,\n", ["row 3", "'size'", "not a number"]),
    ("text,size\na,nan\n", ["row 2", "not a number"]),
    ("text,size\na,1,2\n", ["row 2", "more cells"]),
    ("text,size,size\na,1,2\n", ["more than once", "size"]),
    ("text,,x\na,1,2\n", ["column 2 has no name"]),
    ("text\n", ["no items"]),
])
def test_bad_feature_cells_are_refused_with_row_and_column(text, words):
    with pytest.raises(StudyError) as err:
        items_from_csv_text(text, "items.csv")
    for word in words:
        assert word in str(err.value)


def test_items_from_csv_file_reads_features_and_refuses_non_utf8(tmp_path):
    path = tmp_path / "items.csv"
    path.write_text("text,f1\nx,1\ny,2\nz,3\n")
    assert [i.features for i in items_from_csv(path)] == [{"f1": 1.0}, {"f1": 2.0}, {"f1": 3.0}]
    path.write_bytes(b"text\n\xff\xfe\n")
    with pytest.raises(StudyError, match="not UTF-8"):
        items_from_csv(path)


def test_item_features_must_be_finite_and_survive_storage(conn):
    with pytest.raises(StudyError, match="finite"):
        Item(id="a", kind="text", text="a", features={"x": float("inf")})
    items = items_from_csv_text("text,x,y\na,1,2\nb,3,4\nc,5,6\n")
    sid = create_study(conn, StudyConfig(name="F"), items, study_id="feat")
    assert get_items(conn, sid) == items


def test_a_features_file_sets_every_item_or_nothing(conn):
    items = [Item(id=f"c{i}", kind="color", color="#102030") for i in range(3)]
    sid = create_study(conn, StudyConfig(name="F"), items, study_id="feat")
    partial = features_from_csv_text("id,hue\nc0,0.1\nc1,0.2\n")
    with pytest.raises(StudyError, match="missing for 1 item.*c2"):
        set_features(conn, sid, partial)
    assert all(i.features is None for i in get_items(conn, sid))
    with pytest.raises(StudyError, match="no item.*zz"):
        set_features(conn, sid, {**partial, "c2": {"hue": 0.3}, "zz": {"hue": 1.0}})
    assert set_features(conn, sid, {**partial, "c2": {"hue": 0.3}}) == 3
    names, rows = feature_matrix(get_items(conn, sid))
    assert names == ["hue"] and rows == [[0.1], [0.2], [0.3]]
    assert [i.color for i in get_items(conn, sid)] == ["#102030"] * 3


@pytest.mark.parametrize("text,words", [
    ("name,hue\nc0,1\n", ["'id' column"]),
    ("id\nc0\n", ["at least one numeric feature column"]),
    ("id,hue\nc0,1\nc0,2\n", ["row 3", "twice"]),
    ("id,hue\n,1\n", ["row 2", "'id' cell is empty"]),
    ("id,hue\nc0,red\n", ["row 2", "'hue'", "not a number"]),
])
def test_bad_features_files_are_refused(text, words):
    with pytest.raises(StudyError) as err:
        features_from_csv_text(text, "features.csv")
    for word in words:
        assert word in str(err.value)
