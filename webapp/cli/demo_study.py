"""The demo study: colour swatches generated locally, whose true similarity is known.

Twenty hues at fixed saturation and lightness; an item's ground-truth position is its
point on the hue circle, so the dashboard can say how many learned nearest neighbours
are the true ones. Created by ``proxima serve --demo``; the tests use its items.
"""
from __future__ import annotations

import colorsys
import math
import random
from typing import TYPE_CHECKING

from workers.store.config import StudyConfig
from workers.store.studies import Item, StudyNotFound, create_study, get_study

if TYPE_CHECKING:
    from redis import Redis


DEMO_STUDY_ID = "demo-colours"
DEMO_INSTRUCTIONS = (
    "Welcome, and thank you for helping! Each screen shows one colour on top and two colours below it. "
    "Click the one of the two lower colours that looks more similar to the colour on top, or press ← for "
    "the left one and → for the right one. There are no right or wrong answers: go with your first "
    "impression. There are twenty questions, then a completion code."
)


DEMO_CONSENT = (
    "**Demo consent.** This page is where a real study asks for consent: who runs it, what is stored (your "
    "answers and response times, under a random id), and how to withdraw. Choose *I agree* to try the demo."
)
DEMO_QUESTIONS_PER_RATER = 20


def demo_items(n_items: int = 20, seed: int = 7) -> list[Item]:
    rng = random.Random(seed)
    hues = sorted(rng.uniform(0.0, 1.0) for _ in range(n_items))
    items = []
    for index, hue in enumerate(hues):
        r, g, b = colorsys.hls_to_rgb(hue, 0.5, 0.75)
        colour = f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"
        angle = 2 * math.pi * hue
        items.append(Item(id=f"hue-{round(hue * 360):03d}-{index:02d}", kind="color", color=colour,
                          position=(round(math.cos(angle), 6), round(math.sin(angle), 6))))
    return items


def ensure_demo_study(conn: Redis) -> str:
    """Create the demo study once; later calls find it and leave its answers alone."""
    try:
        get_study(conn, DEMO_STUDY_ID)
        return DEMO_STUDY_ID
    except StudyNotFound:
        pass
    items = demo_items()
    # what a real paid study shows a rater: consent, a practice question, a question limit and a code
    config = StudyConfig.from_dict({
        "name": "Demo: which colours look alike?", "instructions": DEMO_INSTRUCTIONS, "pool_size": 40,
        "random_state": 0, "consent": DEMO_CONSENT,
        "practice": [{"head": items[0].id, "candidates": [items[1].id, items[10].id], "answer": items[1].id,
                      "explanation": "The neighbouring hue is the closer colour."}],
        "limits": {"max_questions_per_rater": DEMO_QUESTIONS_PER_RATER},
        "completion": {"message": "This was the demo. In a paid study raters copy this code into Prolific or "
                                  "MTurk (or are sent back to Prolific by themselves), and you check it with "
                                  "`proxima verify-code`.",
                       "debrief_question": "Was anything unclear?"}})
    return create_study(conn, config, items, study_id=DEMO_STUDY_ID)
