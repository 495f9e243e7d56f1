"""The declared capabilities that replaced the platform's last questions about a shape (``asks``) answer
as the shape did, for every entry of the two tables (a new entry is checked too), and hold of what the
entry's planner or kind does."""
from __future__ import annotations

import dataclasses
import html
import random
import re

import numpy as np
import pytest
from helpers import NO_CHECKS, colour_items
from scipy.spatial.distance import cdist

from engine.adapters import PairTripletAdapter
from engine.kinds import KINDS
from engine.planners import make_planner
from engine.registry import ALGORITHMS
from workers.store.config import StudyConfig
from workers.store.studies import create_study

N = 12
CASES = [(name, kind) for name, entry in ALGORITHMS.items() for kind in entry.question_kinds]
IDS = [f"{n}-{k}" for n, k in CASES]


def _make(name, kind):
    labels = [f"c{i % 3}" for i in range(N)] if ALGORITHMS[name].needs_labels else None
    return make_planner(name, N, question_kind=kind, random_state=0, labels=labels)


# ---------------------------------------------------------------------------- the old shape answers
@pytest.mark.parametrize("name,kind", CASES, ids=IDS)
def test_adapted_answers_as_the_shape_did(name, kind):
    """``adapted`` answers the three shape questions it replaced: the adapter of make_planner, the derived
    defaults of a study config and the window of proxima plan."""
    entry, shape = ALGORITHMS[name], KINDS[kind].asks
    assert entry.adapted(kind) == (entry.pair_over_triplets and shape == "triplet")
    assert entry.adapted(kind) == (shape != entry.asks and entry.pair_over_triplets)
    assert (entry.rounds and entry.adapted(kind)) == (entry.rounds and shape == "triplet")


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_reports_trees_answers_as_the_shape_did(name):
    entry = ALGORITHMS[name]
    assert entry.reports_trees == (entry.asks == "triplet" and entry.learns == "forest")


@pytest.mark.parametrize("name", list(KINDS))
def test_one_triplet_answers_as_the_shape_did(name):
    kind = KINDS[name]
    assert kind.one_triplet == (kind.asks == "triplet" and kind.triplet_derived)


def test_the_capabilities_are_not_all_alike():
    """Each capability is held by some entries and not by others, so the answers above compare something."""
    assert {e.adapted(k) for e in ALGORITHMS.values() for k in e.question_kinds} == {True, False}
    assert {e.reports_trees for e in ALGORITHMS.values()} == {True, False}
    assert {k.one_triplet for k in KINDS.values()} == {True, False}


# ---------------------------------------------------------------------------- what the capabilities say
@pytest.mark.parametrize("name,kind", CASES, ids=IDS)
def test_adapted_planners_are_made_with_the_adapter_and_the_derived_defaults(name, kind):
    entry = ALGORITHMS[name]
    planner = _make(name, kind)
    assert isinstance(planner, PairTripletAdapter) == entry.adapted(kind)
    if entry.adapted(kind):
        assert entry.native_kind(kind) != kind and KINDS[entry.native_kind(kind)].asks == entry.asks
        assert entry.triplet_defaults and all(getattr(planner.planner, k) == v
                                              for k, v in entry.triplet_defaults.items())


ALONE = [(c, i) for c, i in zip(CASES, IDS, strict=True) if not ALGORITHMS[c[0]].delegates]


@pytest.mark.parametrize("name,kind", [c for c, _ in ALONE], ids=[i for _, i in ALONE])
def test_a_study_config_gives_an_adapted_planner_the_derived_defaults(name, kind):
    """A study config writes the entry's ``triplet_defaults`` into the parameters of an adapted planner
    only (what a study keeps whatever later versions choose); a delegating algorithm needs its learner beside
    it, and adapts no planner (the test above)."""
    entry = ALGORITHMS[name]
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Defaults", "algorithm": name, "question_kind": kind})
    assert config.algorithms[0].params == (dict(entry.triplet_defaults) if entry.adapted(kind) else {})


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_a_planner_reports_its_trees_where_its_entry_says_so(name):
    entry = ALGORITHMS[name]
    progress = _make(name, entry.question_kinds[0]).progress()
    assert ({"nodes_built", "nodes_pending", "depth"} <= set(progress)) == entry.reports_trees


@pytest.mark.parametrize("name", list(KINDS))
def test_a_kind_implying_one_triplet_of_its_screen_says_so(name):
    """A simulated rater's answers to random screens imply one triplet of the screen's head and candidates
    exactly where the kind declares ``one_triplet``."""
    kind = KINDS[name]
    settings = kind.check_settings(None)
    X = np.random.default_rng(1).normal(size=(N, 2))
    rater = kind.simulated_rater(cdist(X, X), 0.5, 0.05, settings, random_state=2)
    rng = random.Random(3)
    found = set()
    for _ in range(20):
        screen = kind.random_screen(N, settings, rng)
        shown = kind.shown(screen)
        # a kind answered by a value carries no picks (its rater's observations are values)
        picks = () if kind.answered_by == "value" else kind.picks_of(rater.answer([kind.proposal(screen)])[0])
        implied = kind.triplets(shown, picks)
        found.add(len(shown) == 3 and len(implied) == 1 and implied[0][0] == shown[0]
                  and set(implied[0][1:3]) == set(shown[1:]))
    assert found == {kind.one_triplet}


#: the dashboard's progress caption of an algorithm, by what its entry declares
CAPTIONS = {"trees": "nodes built / pending and depth, per tree", "rounds": "rounds certified / open / waiting",
            "answers": "answers"}


@pytest.mark.parametrize("name", [n for n, e in ALGORITHMS.items() if not e.delegates])
def test_the_dashboard_captions_a_learners_progress_by_its_entry(researcher_client, conn, name):
    """The progress caption of every learner (a delegating one has the learner it asks for instead) is the
    trees' where its entry ``reports_trees`` (the shape's old answer: a forest asking triplets), the rounds'
    where it works in rounds, else its answers."""
    entry = ALGORITHMS[name]
    items = [dataclasses.replace(item, label=f"c{i % 3}") for i, item in enumerate(colour_items(12))]
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Captions", "algorithm": name,
                                    "question_kind": entry.question_kinds[0], "random_state": 0})
    study_id = create_study(conn, config, items, study_id=f"captions-{name.replace('_', '-')}")
    page = researcher_client.get(f"/studies/{study_id}?tab=learning").get_data(as_text=True)
    figure = re.search(r'<figure class="alg-plot"[^>]*>\s*<figcaption>(.*?)</figcaption>', page, re.S)
    caption = " ".join(html.unescape(re.sub(r"<[^>]+>", "", figure.group(1))).split())
    old_trees = entry.asks == "triplet" and entry.learns == "forest"
    expected = "trees" if old_trees else "rounds" if entry.rounds else "answers"
    assert ("trees" if entry.reports_trees else "rounds" if entry.rounds else "answers") == expected
    assert caption.startswith(f"{name}: {CAPTIONS[expected]}"), caption
