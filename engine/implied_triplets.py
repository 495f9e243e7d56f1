"""The anchored triplets ``(head, x, y, winner)`` an answer to a screen of several items implies: what
the question kinds (:mod:`engine.kinds`) export and the screen planners (:mod:`engine.screens`) feed a
triplet learner. Plain Python; must never import numpy or another module of the engine.
"""
from __future__ import annotations

from collections.abc import Sequence


def odd_one_out_triplets(a: int, b: int, c: int, odd: int) -> list[tuple[int, int, int, int]]:
    """The anchored triplets an odd-one-out answer implies: with x, y the two left (in the order
    shown), (x; y, odd) won by y and (y; x, odd) won by x."""
    x, y = (int(v) for v in (a, b, c) if v != odd)
    o = int(odd)
    return [(x, y, o, y), (y, x, o, x)]


def rank_triplets(head: int, references: Sequence[int], picks: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """The anchored triplets a rank answer implies: for each pick s_t (most alike first),
    (head; s_t, s_u) for each later pick s_u, then (head; s_t, x) for each unpicked reference x
    (in the order shown), each won by s_t."""
    h = int(head)
    sel = [int(s) for s in picks]
    chosen = set(sel)
    rest = [int(r) for r in references if int(r) not in chosen]
    out = []
    for t, s in enumerate(sel):
        out.extend((h, s, u, s) for u in sel[t + 1:])
        out.extend((h, s, x, s) for x in rest)
    return out


def pick_triplets(head: int, references: Sequence[int], picks: Sequence[int]) -> list[tuple[int, int, int, int]]:
    """The anchored triplets a pick-k answer implies (the picks unordered, Wilber et al.'s grid): for each
    pick s (in the order given) and each unpicked reference x (in the order shown), (head; s, x) won by s;
    none between two picks. A screen of n references and k picks gives k (n - k)."""
    h = int(head)
    sel = [int(s) for s in picks]
    chosen = set(sel)
    rest = [int(r) for r in references if int(r) not in chosen]
    return [(h, s, x, s) for s in sel for x in rest]
