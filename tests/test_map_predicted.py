"""The map marks the items added to a running study after its learner was built (never asked about): the layout
names them with how their neighbour was predicted, draws each beside the neighbour its features predict with a
predicted arrow, and the dashboard draws them with a dotted ring and arrow and says so in words."""
from __future__ import annotations

import os
import random
import time

import numpy as np
import pytest
from helpers import ARTIFACTS, NO_CHECKS, RESEARCHER, RESEARCHER_PASSWORD, researcher_page

from webapp.accounts import create_user
from workers.jobs.update_pass import apply_new_answers
from workers.results.layout import graph_layout
from workers.store.answers import accept_answer
from workers.store.config import StudyConfig
from workers.store.questions import issue_question
from workers.store.studies import Item, add_items, create_study, get_study

SIDE = 5  # items on a 5 x 5 grid; their features are their place and a column of noise


def _item(i: int, x: float, y: float, rng: np.random.Generator) -> Item:
    colour = f"#{int(40 + 40 * x):02x}{int(40 + 40 * y):02x}90"
    return Item(id=f"i{i:02d}", kind="color", color=colour, position=(x, y),
                features={"x": x + 0.05 * rng.normal(), "y": y + 0.05 * rng.normal(), "noise": float(rng.normal())})


def predicted_map_study(conn, answers_per_item: int = 12, study_id: str = "grown") -> str:
    """A duels study of 25 grid items with features, answered by their places, then two items added with
    features: "new-a" at (0.5, 0) between i00 and i01, "new-b" at (4, 3.5) between i19 and i24."""
    rng = np.random.default_rng(4)
    items = [_item(i, float(i % SIDE), float(i // SIDE), rng) for i in range(SIDE * SIDE)]
    config = StudyConfig.from_dict({**NO_CHECKS, "name": "Grown", "algorithm": "duels", "random_state": 3,
                                    "pool_size": 30})
    create_study(conn, config, items, study_id=study_id)
    study = get_study(conn, study_id)
    truth = np.array([item.position for item in items])
    pick_rng = random.Random(2)
    apply_new_answers(conn, study_id)
    n = len(items)
    for k in range(answers_per_item * n):
        now = time.time()
        question, _, _ = issue_question(conn, study_id, study.config, n, f"r{k % 10}", now=now, expires_at=now + 600)
        h, (a, b) = question["head"], question["candidates"]
        gap = np.linalg.norm(truth[h] - truth[a]) - np.linalg.norm(truth[h] - truth[b])
        pick = a if pick_rng.random() < 1 / (1 + np.exp(6 * gap)) else b
        accept_answer(conn, study_id, question, f"r{k % 10}", pick, issued_at=now, response_ms=900, used_ttl=3600)
        if k % 60 == 59:
            apply_new_answers(conn, study_id)
    apply_new_answers(conn, study_id)
    add_items(conn, study_id, [
        Item(id="new-a", kind="color", color="#50289a", features={"x": 0.5, "y": 0.0, "noise": 0.0}),
        Item(id="new-b", kind="color", color="#a07890", features={"x": 4.0, "y": 3.5, "noise": 0.0})])
    apply_new_answers(conn, study_id)
    return study_id


def test_the_layout_marks_added_items_predicted_and_draws_them_beside_their_predicted_neighbour(conn):
    sid = predicted_map_study(conn)
    layout = graph_layout(conn, get_study(conn, sid), "duels")
    assert layout["n_items"] == 27 and layout["nodes"] == list(range(27))
    assert layout["predicted"]["items"] == [25, 26]
    assert "not measured" in layout["predicted"]["about"]
    edges = {e["from"]: e for e in layout["edges"]}
    assert edges[25]["predicted"] is True and edges[26]["predicted"] is True
    assert not any(e["predicted"] for e in layout["edges"] if e["from"] < 25)
    # not in the "no data yet" row: each is drawn beside the item its neighbour is
    assert not set(layout["no_data"]) & {25, 26}
    positions = np.array(layout["positions"])
    for added in (25, 26):
        near = edges[added]["to"]
        others = np.linalg.norm(positions[:25] - positions[added], axis=1)
        assert others[near] <= np.sort(others)[2] + 1e-9, (added, near)  # among the 3 nearest drawn to it


def test_a_study_without_added_items_has_no_predicted_items_on_its_map(conn):
    from test_map import duels_study

    duels_study(conn, 12, 5, study_id="plain")
    layout = graph_layout(conn, get_study(conn, "plain"), "duels")
    assert layout["predicted"] is None
    assert not any(e["predicted"] for e in layout["edges"])


@pytest.mark.browser
def test_the_dashboard_map_draws_predicted_items_with_a_dotted_ring_and_says_so(browser, live_server, conn):
    create_user(conn, RESEARCHER, RESEARCHER_PASSWORD)
    sid = predicted_map_study(conn)
    with researcher_page(browser, live_server, f"/studies/{sid}?tab=learning") as page:
        page.wait_for_function("() => document.getElementById('nn-graph')?.dataset.drawn === '27'")
        assert page.locator("#nn-graph g.item.predicted").count() == 2
        assert page.locator("#nn-graph g.item.predicted circle.predicted-ring").count() == 2
        assert page.locator("#nn-graph line.edge.predicted").count() == 2
        assert page.locator("#nn-graph g.item:not(.predicted) circle.predicted-ring").count() == 0
        assert "2 items added after the learner was built, never asked about" in \
            page.locator("#graph-placement").inner_text()
        title = page.locator("#nn-graph g.item[data-index='25'] title").text_content()
        assert "never asked about" in title and "not measured" in title
        page.locator("#nn-graph g.item[data-index='25']").click()
        assert "no rater has been asked about it" in page.locator("#candidates").inner_text()
        os.makedirs(ARTIFACTS, exist_ok=True)
        page.locator(".graph-wrap").screenshot(path=os.path.join(ARTIFACTS, "map-predicted.png"))
