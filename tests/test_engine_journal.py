"""Engine state stored as a checkpoint plus a journal of what each pass changed: a delta applied to
the old state gives the new one bit for bit, a pass commits only its changes, checkpoints fold the
journal in without changing the state, a checkpoint never put in place (or of an older lineage)
changes nothing, and a state saved before journals still loads.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest
from test_backup import give_answers

from workers.jobs import checkpoints, learner_cache, update_pass
from workers.store import engine_state, keys
from workers.store.config import StudyConfig
from workers.store.studies import Item, create_study, get_study


@pytest.fixture(autouse=True)
def empty_cache():
    # the question service draws which algorithm asks from Python's random: seeded, every pass's
    # answers reach the same learners on every run (else a pass may leave one learner unchanged)
    random.seed(0)
    learner_cache.forget_cached()
    yield
    learner_cache.forget_cached()


def assert_lifted_equal(a: engine_state.Lifted, b: engine_state.Lifted) -> None:
    assert json.loads(a.skeleton) == json.loads(b.skeleton)
    assert set(a.arrays) == set(b.arrays)
    for path in a.arrays:
        assert a.arrays[path].dtype == b.arrays[path].dtype, path
        assert a.arrays[path].tobytes() == b.arrays[path].tobytes(), path  # bitwise: NaN, -0.0


def assert_states_equal(a: dict, b: dict) -> None:
    assert_lifted_equal(engine_state.Lifted.of(a), engine_state.Lifted.of(b))


@pytest.mark.parametrize("seed", range(12))
def test_a_delta_applied_to_the_old_state_gives_the_new_one_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    old = {"n": 3, "mean": rng.normal(size=(40, 40)), "count": rng.integers(0, 5, (40, 40)),
           "status": rng.integers(0, 3, 40).astype(np.int8), "dirty": np.arange(5),
           "flags": rng.random(40) < 0.5, "nested": {"w": rng.random(7).astype(np.float32)}}
    new = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in old.items()}
    new["nested"] = {"w": old["nested"]["w"].copy()}
    if seed % 2:
        new["mean"].reshape(-1)[rng.choice(1600, 20, replace=False)] = np.nan  # a few elements: sparse
    else:
        new["mean"] = rng.normal(size=(40, 40))  # every element: stored whole
    new["count"][3, :] += 1
    new["mean"][0, 0] = -0.0 if seed % 3 else new["mean"][0, 0]
    new["dirty"] = np.arange(seed)  # shape changes
    new["flags"] = new["flags"].astype(np.int64) if seed % 4 == 0 else new["flags"]  # dtype changes
    new["n"] = 3 + seed % 2
    if seed % 5 == 0:
        del new["status"]
        new["extra"] = np.ones(3)
    a, b = engine_state.Lifted.of(old, copy=True), engine_state.Lifted.of(new, copy=True)
    delta = engine_state.make_delta(a, b, "lineage", 1)
    applied, header = engine_state.apply_delta(a, delta)
    assert header["seq"] == 1 and header["lineage"] == "lineage"
    assert_lifted_equal(applied, b)
    assert_lifted_equal(a, engine_state.Lifted.of(old))  # the old state is left as it was
    assert engine_state.make_delta(b, applied, "lineage", 2) is None  # equal states: no entry


def test_rows_added_at_the_end_of_a_log_travel_alone():
    """A planner's answer log grows by a pass's answers: the entry holds those rows, not the log; a log
    whose old rows changed too (or whose rows changed shape) is sent whole."""
    rng = np.random.default_rng(3)
    log = rng.integers(0, 1000, (20_000, 3))
    grown = np.concatenate([log, rng.integers(0, 1000, (50, 3))])
    edited = grown.copy()
    edited[7, 1] += 1
    old = engine_state.Lifted.of({"log": log, "edited": log, "wider": log}, copy=True)
    new = engine_state.Lifted.of({"log": grown, "edited": edited, "wider": np.zeros((20_050, 4), np.int64)},
                                 copy=True)
    delta = engine_state.make_delta(old, new, "lineage", 1)
    header = engine_state.delta_header(delta)
    assert header["appended"] == ["state.log"] and sorted(header["full"]) == ["state.edited", "state.wider"]
    # the whole arrays, the 50 new rows of the log and the header: the log itself is not sent
    assert engine_state.entry_size(delta) < edited.nbytes + 20_050 * 4 * 8 + 50 * 3 * 8 + 4096
    applied, _ = engine_state.apply_delta(old, delta)
    assert_lifted_equal(applied, new)
    # kept in place (a worker's pass): the same entry and the same state
    kept_delta, kept = engine_state.advance_delta(engine_state.Lifted.of({"log": log, "edited": log, "wider": log},
                                                                         copy=True), new, "lineage", 1)
    assert kept_delta == delta
    assert_lifted_equal(kept, new)


def make_anntri_study(conn, study_id="big", n=300):
    config = StudyConfig.from_dict({
        "name": "Big", "random_state": 5, "pool_size": 20,
        "algorithms": [{"algorithm": "anntri", "params": {"k": 1, "sigma": 0.5}},
                       {"algorithm": "random_triplets", "label": "rt"}]})
    items = [Item(id=f"i{i}", kind="text", text=f"item {i}") for i in range(n)]
    return create_study(conn, config, items, study_id=study_id)


def kept_state(study_id: str, label: str) -> dict:
    return learner_cache.cached_study(study_id).learners[label].to_state()


def test_a_pass_commits_only_what_changed_not_the_whole_state(conn):
    study_id = make_anntri_study(conn)
    update_pass.apply_new_answers(conn, study_id)  # the first save is whole: there is nothing to append to
    whole = engine_state.Lifted.of(engine_state.load(conn, study_id, "anntri")).nbytes
    skeleton = conn.hget(keys.engine(study_id, "anntri"), "skeleton")
    written = int(conn.hget(keys.engine_stats(study_id), "state_bytes_written"))
    assert written >= whole
    for seed in range(3):
        give_answers(conn, study_id, 12, seed=seed)
        update_pass.apply_new_answers(conn, study_id)
        now = int(conn.hget(keys.engine_stats(study_id), "state_bytes_written"))
        assert 0 < now - written < whole / 20  # a pass of a dozen answers writes a few % of the state
        written = now
    assert conn.hget(keys.engine(study_id, "anntri"), "skeleton") == skeleton  # the checkpoint untouched
    assert conn.llen(keys.engine_journal(study_id, "anntri")) == 3
    for label in ("anntri", "rt"):
        assert_states_equal(engine_state.load(conn, study_id, label), kept_state(study_id, label))


def run_passes(conn, study_id: str, passes: int, check=False) -> dict:
    for seed in range(passes):
        give_answers(conn, study_id, 20, seed=seed)  # both learners get some in every pass
        update_pass.apply_new_answers(conn, study_id)
        if check:  # after every pass, checkpoint or not: the stored state is the one kept in memory
            for label in ("anntri", "rt"):
                assert_states_equal(engine_state.load(conn, study_id, label), kept_state(study_id, label))
    return {label: engine_state.load(conn, study_id, label) for label in ("anntri", "rt")}


def test_a_journal_grows_by_one_entry_per_pass_until_a_checkpoint_is_due(conn):
    make_anntri_study(conn, "journal", n=60)
    run_passes(conn, "journal", 8)
    assert conn.llen(keys.engine_journal("journal", "anntri")) == 7  # the first pass saved whole
    assert conn.hget(keys.engine_stats("journal"), "checkpoints") is None


def test_checkpoints_fold_the_journal_in_without_changing_the_state(conn, monkeypatch):
    monkeypatch.setattr(checkpoints, "CHECKPOINT_ENTRIES", 3)
    make_anntri_study(conn, "folded", n=60)
    run_passes(conn, "folded", 8, check=True)
    # both learners were checkpointed (how often depends on journal sizes: the count is not pinned)
    assert int(conn.hget(keys.engine_stats("folded"), "checkpoints")) >= 2
    assert engine_state.load_stored(conn, "folded", "rt").checkpoint_seq > 0
    assert conn.llen(keys.engine_journal("folded", "anntri")) < 3
    assert not conn.exists(keys.engine_checkpoint("folded", "anntri"))
    stored = engine_state.load_stored(conn, "folded", "anntri")
    assert stored.checkpoint_seq > 0 and stored.seq == 7
    # the kept learners go on from the checkpointed state: further passes still come from memory
    before = int(conn.hget(keys.engine_stats("folded"), "passes_from_memory"))
    give_answers(conn, "folded", 5, seed=99)
    update_pass.apply_new_answers(conn, "folded")
    assert int(conn.hget(keys.engine_stats("folded"), "passes_from_memory")) == before + 1
    # and a process without them (another worker) reloads the same state from checkpoint + journal
    kept = {label: kept_state("folded", label) for label in ("anntri", "rt")}
    learner_cache.forget_cached()
    learners = learner_cache.load_learners(conn, get_study(conn, "folded"))
    for label, learner in learners.items():
        assert_states_equal(learner.to_state(), kept[label])


def test_a_checkpoint_written_but_never_put_in_place_changes_nothing(conn):
    study_id = make_anntri_study(conn, n=40)
    run_passes(conn, study_id, 3)
    stored = engine_state.load_stored(conn, study_id, "anntri")
    # a worker killed between writing a checkpoint and putting it in place leaves it behind
    engine_state.write_checkpoint(conn, study_id, "anntri", stored.lifted, stored.lineage, stored.seq, chunk_bytes=500)
    assert len(conn.hkeys(keys.engine_checkpoint(study_id, "anntri"))) > 20  # written in pieces
    assert_lifted_equal(engine_state.load_stored(conn, study_id, "anntri").lifted, stored.lifted)
    learner_cache.forget_cached()
    give_answers(conn, study_id, 5, seed=7)
    update_pass.apply_new_answers(conn, study_id)  # another worker goes on from checkpoint + journal
    after = engine_state.load_stored(conn, study_id, "anntri")
    assert after.seq == stored.seq + 1 and after.lineage == stored.lineage
    # the leftover is of an older point of the journal than a fresh one would be: still valid, it is
    # put in place and the state is the same
    assert engine_state.swap_checkpoint(conn, study_id, "anntri", stored.lineage, stored.seq)
    swapped = engine_state.load_stored(conn, study_id, "anntri")
    assert swapped.checkpoint_seq == stored.seq and swapped.seq == after.seq
    assert swapped.version == after.version  # the same state: kept learners stay valid
    assert_lifted_equal(swapped.lifted, after.lifted)
    assert conn.llen(keys.engine_journal(study_id, "anntri")) == 1


def test_a_checkpoint_of_a_replaced_state_is_discarded(conn):
    study_id = make_anntri_study(conn, n=40)
    run_passes(conn, study_id, 2)
    stored = engine_state.load_stored(conn, study_id, "anntri")
    engine_state.write_checkpoint(conn, study_id, "anntri", stored.lifted, stored.lineage, stored.seq)
    # a rebuild (or restore) replaces the state meanwhile: a new lineage, the journal gone
    replacement = dict(stored.state, n_samples=12345)
    with conn.pipeline(transaction=True) as pipe:
        engine_state.save(pipe, study_id, "anntri", replacement)
        pipe.execute()
    assert not engine_state.swap_checkpoint(conn, study_id, "anntri", stored.lineage, stored.seq)
    assert engine_state.load(conn, study_id, "anntri")["n_samples"] == 12345
    assert not conn.exists(keys.engine_checkpoint(study_id, "anntri"))
    assert not conn.exists(keys.engine_journal(study_id, "anntri"))


def test_a_state_saved_before_journals_still_loads_and_the_next_pass_starts_a_journal(conn):
    study_id = make_anntri_study(conn, n=40)
    run_passes(conn, study_id, 2)
    state = engine_state.load(conn, study_id, "anntri")
    # format 1, as saved before journals: skeleton + one array field each + version, no lineage
    lifted = engine_state.Lifted.of(state)
    fields = {"skeleton": json.dumps({"format": 1, "state": json.loads(lifted.skeleton)}), "version": "old"}
    fields.update({f"array:{p}": engine_state._npy(a) for p, a in lifted.arrays.items()})
    conn.delete(keys.engine(study_id, "anntri"), keys.engine_journal(study_id, "anntri"))
    conn.hset(keys.engine(study_id, "anntri"), mapping=fields)
    learner_cache.forget_cached()
    assert_states_equal(engine_state.load(conn, study_id, "anntri"), state)
    assert engine_state.load_stored(conn, study_id, "anntri").lineage is None
    give_answers(conn, study_id, 20, seed=11)
    update_pass.apply_new_answers(conn, study_id)
    stored = engine_state.load_stored(conn, study_id, "anntri")
    assert stored.lineage is not None and stored.seq == 0  # saved whole once, as a new lineage
    assert stored.state["n_samples"] == state["n_samples"] + sum(
        1 for _, f in conn.xrange(keys.answers(study_id))[-20:] if f[b"algorithm"] == b"anntri")
    give_answers(conn, study_id, 20, seed=12)
    update_pass.apply_new_answers(conn, study_id)
    assert engine_state.load_stored(conn, study_id, "anntri").seq == 1


def test_readers_get_the_state_of_the_last_committed_pass(conn):
    study_id = make_anntri_study(conn, n=40)
    run_passes(conn, study_id, 4)
    study = get_study(conn, study_id)
    learners = learner_cache.load_learners(conn, study)  # what exports, layouts and rebuilds read
    for label, learner in learners.items():
        assert_states_equal(learner.to_state(), kept_state(study_id, label))


def test_advancing_the_kept_state_in_place_gives_the_same_delta_and_state_as_a_copy():
    rng = np.random.default_rng(3)
    old = engine_state.Lifted.of({"mean": rng.random((40, 40)), "count": rng.integers(0, 9, (40, 40)).astype(np.int32),
                                  "order": np.arange(40), "gone": np.zeros(3), "n": 40}, copy=True)
    reference = engine_state.Lifted.of(old.state(), copy=True)
    live_state = {"mean": old.arrays["state.mean"].copy(), "count": old.arrays["state.count"].copy(),
                  "order": rng.permutation(40), "extra": np.ones(5), "n": 41}
    live_state["mean"][3, 4] = np.nan  # bitwise comparison: NaN is a change, and later equal to itself
    live_state["count"][[1, 7], [2, 9]] += 1
    live = engine_state.Lifted.of(live_state)
    mean_before = old.arrays["state.mean"]
    delta, advanced = engine_state.advance_delta(old, live, "L", 1)
    assert delta == engine_state.make_delta(reference, live, "L", 1)
    assert_lifted_equal(advanced, engine_state.apply_delta(reference, delta)[0])
    assert_lifted_equal(advanced, engine_state.Lifted.of(live_state, copy=True))
    # sparse changes went into the kept array itself; nothing is shared with the live state
    assert advanced.arrays["state.mean"] is mean_before
    assert not any(np.shares_memory(advanced.arrays[p], live.arrays[p]) for p in live.arrays)
    assert engine_state.advance_delta(advanced, live, "L", 2)[0] is None


def test_journal_entries_are_deflated_and_uncompressed_ones_still_apply():
    import io
    import zipfile

    old = engine_state.Lifted.of({"mean": np.zeros((60, 60)), "n": 60}, copy=True)
    new_state = {"mean": np.zeros((60, 60)), "n": 60}
    new_state["mean"][np.arange(60), (np.arange(60) * 7) % 60] = 0.5
    new = engine_state.Lifted.of(new_state, copy=True)
    delta = engine_state.make_delta(old, new, "L", 1)
    with zipfile.ZipFile(io.BytesIO(delta)) as zf:
        assert {i.compress_type for i in zf.infolist()} == {zipfile.ZIP_DEFLATED}
    assert len(delta) < engine_state.entry_size(delta)
    with np.load(io.BytesIO(delta)) as z:  # the same entry as np.savez wrote it before compression
        plain = io.BytesIO()
        np.savez(plain, **{k: z[k] for k in z.files})
    for entry in (delta, plain.getvalue()):
        assert_lifted_equal(engine_state.apply_delta(old, entry)[0], new)


def test_a_large_first_save_is_written_in_pieces_outside_the_pass_transaction(conn, monkeypatch):
    monkeypatch.setattr(checkpoints, "CHUNKED_SAVE_BYTES", 0)  # every whole save counts as large
    writes = []
    real = engine_state.write_checkpoint
    monkeypatch.setattr(engine_state, "write_checkpoint",
                        lambda *a, **k: writes.append(a[2]) or real(*a[:6], chunk_bytes=64 * 1024))
    study_id = make_anntri_study(conn, "pieces", n=150)
    states = run_passes(conn, study_id, 3, check=True)
    assert sorted(set(writes)) == ["anntri", "rt"]  # the first pass of each learner
    assert conn.hkeys(keys.engine(study_id, "anntri"))  # in place, with its pieces
    assert any(name.startswith(b"array#") for name in conn.hkeys(keys.engine(study_id, "anntri")))
    assert not conn.exists(keys.engine_checkpoint(study_id, "anntri"))
    assert conn.llen(keys.engine_journal(study_id, "anntri")) == 2  # later passes append to its journal
    learner_cache.forget_cached()
    assert_states_equal(engine_state.load(conn, study_id, "anntri"), states["anntri"])


def _planner_ops(planner, rng, steps):
    """Random questions, answers (some late, some repeated), expiries and repeats on a planner."""
    pending = []
    for _ in range(steps):
        pending += planner.next_questions(int(rng.integers(1, 12)))
        if rng.random() < 0.2:
            pending += planner.repeat_questions(2)
        rng.shuffle(pending)
        take, pending = pending[:int(rng.integers(0, 10))], pending[10:]
        planner.observe([(i, j, float(rng.random() < 0.4)) for i, j in take])
        if pending and rng.random() < 0.3:
            planner.forget(pending[:2])
            pending = pending[2:]


@pytest.mark.parametrize("make", [
    lambda: __import__("engine.anntri", fromlist=["ANN"]).ANN(40, symmetric=False, random_state=1, window=3),
    lambda: __import__("engine.anntri", fromlist=["ANN"]).ANN(30, symmetric=False, bound="kl", window=50,
                                                             random_state=2, max_samples_per_round=60),
    lambda: __import__("engine.anntri", fromlist=["ANNTri"]).ANNTri(30, random_state=3, window=2),
    lambda: __import__("engine.anntri", fromlist=["RandomSampling"]).RandomSampling(20, random_state=4),
], ids=["head-based", "head-based-kl", "symmetric-triangle", "random"])
def test_passes_diffing_only_the_reported_rows_give_the_deltas_of_a_whole_diff(make):
    """The planner reports the rows it changed since its last ``to_state(copy=False)``; a pass diffs
    only those rows against the kept state, with no copy of the planner's arrays, and gets the delta
    and kept state a whole diff of copies gives (an extra state handed out in between loses nothing)."""
    rng = np.random.default_rng(7)
    planner = make()
    planner.next_questions(1)
    kept = engine_state.Lifted.of(planner.to_state(copy=False), copy=True)
    reference = engine_state.Lifted.of(planner.to_state(), copy=True)
    assert kept.marks and not reference.marks
    for step in range(40):
        _planner_ops(planner, rng, int(rng.integers(1, 4)))
        if step % 9 == 4:
            planner.to_state(copy=False)  # handed out and not diffed (e.g. a whole save elsewhere)
        live = engine_state.Lifted.of(planner.to_state(copy=False))
        whole = engine_state.Lifted.of(planner.to_state(), copy=True)
        assert all(not np.shares_memory(live.arrays[p], whole.arrays[p]) for p in whole.arrays)
        delta, kept = engine_state.advance_delta(kept, live, "L", step + 1)
        assert delta == engine_state.make_delta(reference, whole, "L", step + 1)
        assert_lifted_equal(kept, whole)
        if delta is not None:
            reference = engine_state.apply_delta(reference, delta)[0]
        assert_lifted_equal(reference, whole)


def test_rows_written_from_outside_are_reported_through_mark_rows():
    from engine.anntri import ANN

    planner = ANN(12, symmetric=False, random_state=0)
    planner.next_questions(3)
    kept = engine_state.Lifted.of(planner.to_state(copy=False), copy=True)
    planner.pending_[5, 6] += 1  # unreported: a row diff cannot see it ...
    _, unreported = engine_state.advance_delta(kept, engine_state.Lifted.of(planner.to_state(copy=False)), "L", 1)
    assert unreported.arrays["state.pending"][5, 6] == 0
    planner.pending_[5, 6] += 1
    planner.mark_rows([5])  # ... reported, it is in the delta
    kept = engine_state.Lifted.of(planner.to_state(copy=False), copy=True)
    planner.pending_[7, 1] += 3
    planner.mark_rows(7)
    delta, kept = engine_state.advance_delta(kept, engine_state.Lifted.of(planner.to_state(copy=False)), "L", 2)
    assert delta is not None and kept.arrays["state.pending"][7, 1] == 3
    assert_lifted_equal(kept, engine_state.Lifted.of(planner.to_state(), copy=True))


def test_a_duels_pass_entry_holds_what_the_pass_added_not_the_learner():
    """The default learner's state grows by logs (its answers, its eliminations) and changes a few
    elements per answer elsewhere: between two refits a pass's entry is proportional to the pass, and
    its duel counts (rebuilt from the answers on load) are never saved."""
    from engine.duels import CandidateDuels
    from simulation.oracles import TripletOracle

    X = np.random.default_rng(5).normal(size=(120, 3))
    oracle = TripletOracle.from_points(X, noise=0.05, model="human", lapse=0.05, random_state=6)
    # (one question per head a call, so every head's duels are read and its beaten candidates go)
    p = CandidateDuels(120, random_state=7, refit_growth=1.0)
    old = engine_state.Lifted.of(p.to_state(), copy=True)
    quiet = eliminating = 0
    for step in range(40):
        fits = p.n_fits_
        questions = p.next_questions(120)
        if step >= 12:  # a head's shortlist dueled at length: candidates beaten with confidence go
            c = [int(x) for x in p.cands_[step] if x >= 0]
            questions += [(step, a, b) for i, a in enumerate(c) for b in c[i + 1:]] * 40
        batch = len(questions)
        p.observe(oracle.answer(questions))
        state = p.to_state()
        assert "duels" not in state
        new = engine_state.Lifted.of(state, copy=True)
        delta = engine_state.make_delta(old, new, "lineage", 1)
        header = engine_state.delta_header(delta)
        if p.n_fits_ == fits and len(old.arrays["state.triplets"]):
            quiet += 1
            # the logs only grow; what else changed is per-item counts and the few pending questions
            assert {"state.triplets", "state.eliminated"}.isdisjoint(header["full"] + header["sparse"]), header
            assert engine_state.entry_size(delta) < 120 * batch + 3 * 8 * 120 + 8192
            eliminating += "state.eliminated" in header["appended"]
        applied, _ = engine_state.apply_delta(old, delta)
        assert_lifted_equal(applied, new)
        old = new
    assert quiet >= 15 and eliminating >= 3
    restored = CandidateDuels.from_state(state)
    np.testing.assert_array_equal(restored._duel_table(), p._duel_table())
    assert restored.eliminated_ == p.eliminated_
