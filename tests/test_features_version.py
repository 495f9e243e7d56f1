"""A process's copy of a study's features is keyed by a digest of the features set last, not only by the item
count: features replaced with the same items (``proxima features``, the form's built-in features) are read
again at once, and features set again unchanged are not."""
from __future__ import annotations

import numpy as np

from workers.jobs import predicted
from workers.jobs.predicted import study_features
from workers.store import studies
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study, features_version, get_study, set_features

N = 8


def _study(conn) -> str:
    items = [Item(id=f"t{i}", kind="text", text=f"item {i}") for i in range(N)]
    return create_study(conn, StudyConfig.from_dict({"name": "versions"}), items, study_id="versions")


def _rows(scale: float) -> dict[str, dict[str, float]]:
    return {f"t{i}": {"x": scale * i, "y": float(i % 3)} for i in range(N)}


def test_features_replaced_without_adding_items_are_read_again(conn):
    predicted._CACHE.clear()
    sid = _study(conn)
    assert study_features(conn, get_study(conn, sid)) is None  # none yet
    set_features(conn, sid, _rows(1.0))
    first = study_features(conn, get_study(conn, sid))
    assert first is not None and first.raw[:, 0].tolist() == [float(i) for i in range(N)]
    assert study_features(conn, get_study(conn, sid)) is first  # nothing changed: this process's copy
    set_features(conn, sid, _rows(10.0))  # the same items, other features
    second = study_features(conn, get_study(conn, sid))
    assert second is not first
    assert second.raw[:, 0].tolist() == [10.0 * i for i in range(N)]


def test_the_same_features_set_again_keep_their_version(conn):
    sid = _study(conn)
    set_features(conn, sid, _rows(1.0))
    source, version = features_version(conn, sid)
    assert source == studies.FEATURES_FROM_FILE and len(version) == 16
    set_features(conn, sid, _rows(1.0))
    assert features_version(conn, sid) == (studies.FEATURES_FROM_FILE, version)
    set_features(conn, sid, _rows(2.0), source=f"{studies.FEATURES_BUILTIN}-v1")
    source, other = features_version(conn, sid)
    assert source == "builtin-v1" and other != version


def test_a_study_whose_features_came_with_its_items_has_no_version(conn):
    rng = np.random.default_rng(0)
    items = [Item(id=f"t{i}", kind="text", text=f"item {i}", features={"x": float(rng.normal())}) for i in range(N)]
    sid = create_study(conn, StudyConfig.from_dict({"name": "csv"}), items, study_id="csv")
    assert features_version(conn, sid) == (None, None)
    assert study_features(conn, get_study(conn, sid)) is not None
