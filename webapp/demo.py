"""The demo study: colour swatches generated locally, whose true similarity is known.

Twenty hues at fixed saturation and lightness; an item's ground-truth position is its
point on the hue circle, so the dashboard can say how many learned nearest neighbours
are the true ones.
"""
from __future__ import annotations

import colorsys
import math
import random

from workers.config import StudyConfig
from workers.studies import Item, StudyNotFound, create_study, get_study

DEMO_STUDY_ID = "demo-colours"
DEMO_INSTRUCTIONS = (
    "Welcome, and thank you for helping! Each screen shows one colour on top and two colours below it. "
    "Click the one of the two lower colours that looks more similar to the colour on top, or press ← for "
    "the left one and → for the right one. There are no right or wrong answers: go with your first "
    "impression. Answer as many questions as you like."
)


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


def ensure_demo_study(conn) -> str:
    """Create the demo study once; later calls find it and leave its answers alone."""
    try:
        get_study(conn, DEMO_STUDY_ID)
        return DEMO_STUDY_ID
    except StudyNotFound:
        pass
    config = StudyConfig(name="Demo: which colours look alike?", instructions=DEMO_INSTRUCTIONS, pool_size=40,
                         random_state=0)
    return create_study(conn, config, demo_items(), study_id=DEMO_STUDY_ID)
