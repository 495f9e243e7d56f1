"""Each learner's memory is stated in the table of algorithms, and a study whose learner would not fit a
worker is refused when it is created, with the number and the learner that fits."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.registry import ALGORITHMS
from workers.store.config import StudyConfig
from workers.store.studies import Item, StudyError, StudyNotFound, create_study, get_study


def _items(n):
    return [Item(id=f"i{i}", kind="text", text=f"item {i}") for i in range(n)]


def test_every_algorithm_states_its_memory():
    for name, entry in ALGORITHMS.items():
        assert entry.memory.bytes(1000, 100_000) > 0, name
    # the n x n learners grow with the square of the items, duels does not
    duels, anntri = ALGORITHMS["duels"].memory, ALGORITHMS["anntri"].memory
    assert anntri.bytes(40_000, 0) / anntri.bytes(20_000, 0) == pytest.approx(4, rel=0.02)
    assert duels.per_pair == 0 and duels.bytes(50_000, 50 * 50_000) < 3e9
    for memory in (duels, anntri):
        assert memory.max_items(memory.bytes(30_000, 3_000_000), 100) == pytest.approx(30_000, rel=1e-3)


def test_a_study_too_big_for_the_worker_is_refused_with_the_number_and_a_learner_that_fits(conn, monkeypatch):
    monkeypatch.setenv("PROXIMA_WORKER_MEMORY_GB", "1")
    config = StudyConfig.from_dict({"name": "big", "question_kind": "triplet", "algorithms": [{"algorithm": "anntri"}]})
    with pytest.raises(StudyError) as err:
        create_study(conn, config, _items(5000), study_id="too-big")
    message = str(err.value)
    need = ALGORITHMS["anntri"].memory.bytes(5000, 500_000)
    assert f"anntri on 5,000 items would need about {need / 1e9:.1f} GB" in message
    assert "0.8 GB" in message and "duels fits" in message
    with pytest.raises(StudyNotFound):
        get_study(conn, "too-big")  # nothing was stored
    # the learner it names fits, and is accepted
    ok = StudyConfig.from_dict({"name": "big", "question_kind": "triplet", "algorithms": [{"algorithm": "duels"}]})
    create_study(conn, ok, _items(5000), study_id="fits")
    assert get_study(conn, "fits").n_items == 5000


def test_proxima_create_refuses_it_too(tmp_path, redis_url):
    (tmp_path / "study.yaml").write_text("name: big\nquestion_kind: triplet\nalgorithms:\n- algorithm: anntri\n")
    (tmp_path / "items.csv").write_text("id,text\n" + "".join(f"i{i},item {i}\n" for i in range(3000)))
    proxima = Path(sys.executable).parent / "proxima"
    out = subprocess.run([str(proxima), "create", str(tmp_path / "study.yaml"), "--items", str(tmp_path / "items.csv")],
                         capture_output=True, text=True, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "REDIS_URL": redis_url, "PROXIMA_WORKER_MEMORY_GB": "0.5"})
    assert out.returncode != 0
    need = ALGORITHMS["anntri"].memory.bytes(3000, 300_000)
    assert f"would need about {need / 1e9:.1f} GB" in out.stderr and "duels fits" in out.stderr
