"""A study's error against a known truth, as stored: for studies whose items have known positions
(demo and simulated studies), the positions with each item's true nearest distance and, per
algorithm, the curve of the share of items whose learned nearest neighbour is wrong against the
answers applied so far.

The update pass writes both (``workers.jobs.truth_curve``); the dashboard only reads them. Both live in
fields of ``keys.engine_stats``. Light: no numpy (web processes import it). Must never import Flask.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from workers.store import keys

if TYPE_CHECKING:
    from redis.client import Pipeline

#: Field of ``keys.engine_stats``: JSON ``{"n_items": n, "points": [[coordinates of item i], ...], "nearest":
#: [distance from item i to its true nearest neighbour, ...]}``, both null when not every item has a
#: position (no truth is known).
TRUTH_FIELD = "truth:neighbors"
#: Field prefix (+ algorithm label): JSON error curve ``[[answers applied, share wrong], ...]``.
TRUTH_ERROR_PREFIX = "truth-error:"
#: An error curve keeps at most this many points; past it every other point is dropped (the curve
#: keeps its whole span, at a coarser step).
TRUTH_ERROR_POINTS = 400
#: Studies with more items than this get no error curve (finding the true neighbours is quadratic).
MAX_TRUTH_ITEMS = 5000

# KEYS[1] = keys.engine_stats(study); ARGV = field, the point (JSON list, answers applied first), most points
# kept, "1" to replace a last point at the same answers applied. Appends the point unless it equals the last
# one; a point with fewer answers than the last one (a rebuild without some raters) starts the curve again;
# past the most points every other point is dropped (the curve keeps its whole span, at a coarser step).
_APPEND_POINT = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
local points = {}
if raw then points = cjson.decode(raw) end
local point = cjson.decode(ARGV[2])
local last = points[#points]
if last and #last == #point then
  local same = true
  for i = 1, #point do if last[i] ~= point[i] then same = false end end
  if same then return 0 end
end
if last and point[1] < last[1] then points = {} end
if ARGV[4] == '1' and last and last[1] == point[1] then table.remove(points) end
table.insert(points, point)
if #points > tonumber(ARGV[3]) then
  local kept = {}
  for i = 1, #points - 1, 2 do table.insert(kept, points[i]) end
  table.insert(kept, points[#points])
  points = kept
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(points))
return 1
"""


def stored_truth(raw: bytes | str | None, n_items: int) -> tuple[bool, list | None, list | None]:
    """(whether ``raw``, the stored ``TRUTH_FIELD``, is up to date for ``n_items`` items, the items'
    positions and each item's distance to its true nearest neighbour: both None when no truth is known)."""
    if not raw:
        return False, None, None
    doc = json.loads(raw)
    if doc.get("n_items") != n_items or "nearest" not in doc:
        return False, None, None
    return True, doc.get("points"), doc.get("nearest")


def truth_known(raw: bytes | str | None, n_items: int) -> bool:
    """Whether the stored ``TRUTH_FIELD`` says the truth of the study's ``n_items`` items is known
    (also from the ``neighbors`` lists that versions before this one stored)."""
    if not raw:
        return False
    doc = json.loads(raw)
    return doc.get("n_items") == n_items and (doc.get("nearest") or doc.get("neighbors")) is not None


def save_truth(pipe: Pipeline, study_id: str, n_items: int, points: list | None, nearest: list | None) -> None:
    pipe.hset(keys.engine_stats(study_id), TRUTH_FIELD,
              json.dumps({"n_items": n_items, "points": points, "nearest": nearest}))


def append_error_point(pipe: Pipeline, study_id: str, label: str, applied: int, wrong: float) -> None:
    """Append (answers applied, share wrong) to the algorithm's error curve unless it is its last point."""
    append_curve_point(pipe, study_id, TRUTH_ERROR_PREFIX + label, [int(applied), round(float(wrong), 4)],
                       TRUTH_ERROR_POINTS)


def append_curve_point(pipe: Pipeline, study_id: str, field: str, point: list, most: int,
                       replace_same_x: bool = False) -> None:
    """Append ``point`` ([answers applied, ...]) to the curve in ``keys.engine_stats`` field ``field``, in
    Redis (one script: the passes of two workers never interleave a read and a write): unless it equals the
    last point; starting again after a rebuild; at most ``most`` points; ``replace_same_x``: a later point at
    the same answers applied replaces the last one. The truth's error curves and the held-out curves."""
    pipe.eval(_APPEND_POINT, 1, keys.engine_stats(study_id), field, json.dumps(point), int(most),
              "1" if replace_same_x else "0")


def error_curves(engine_stats: dict[str, str]) -> dict[str, list]:
    """Algorithm label -> its error curve, from the fields of ``keys.engine_stats`` (decoded)."""
    return {name[len(TRUTH_ERROR_PREFIX):]: json.loads(value)
            for name, value in engine_stats.items() if name.startswith(TRUTH_ERROR_PREFIX)}
