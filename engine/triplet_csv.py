"""Triplets read from CSV text: cblearn's list-order rows ``i,j,k`` (i is closer to j than to k), or a
study's answers export (``proxima export --what answers``), whose answers are turned into the triplets
they imply. ``proxima import-triplets`` and ``proxima plan`` both read triplets here. Cheap to import:
must never import numpy, Flask, Redis, RQ, ``webapp`` or ``workers``.
"""
from __future__ import annotations

import csv
import io

from .kinds import DEFAULT_KIND, get_kind

#: ``algorithm`` of an exported answer that is no new evidence: attention checks and validation repeats
_NO_EVIDENCE = ("catch", "repeat")


def parse_triplets(text: str, n_items: int | None = None, source: str = "file",
                   answers: bool = False) -> list[tuple[int, int, int]]:
    """The triplets ``(i, j, k)`` of ``text``, i closer to j than to k, in the order given.

    ``text`` holds rows ``i,j,k`` of item indices (commas, semicolons or tabs; blank lines and lines
    starting with ``#`` are skipped); with ``answers=True`` it may also be an answers export (a header
    with ``head`` and ``choice``): every answer of a kind that implies triplets gives the triplets it
    implies (a screen's ``shown`` and ``picks``, checked as the kind checks an answer), while skipped
    answers, ratings, attention checks and validation repeats are left out. With ``n_items`` every
    index must lie in ``0..n_items - 1``. ValueError naming ``source`` and the line otherwise.
    """
    lines = text.splitlines()
    first = next((line for line in lines if line.strip() and not line.lstrip().startswith("#")), None)
    if answers and _is_export(first):
        return _export_triplets(text, n_items, source)[0]
    rows = []
    for number, line in enumerate(lines, start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = [p.strip() for p in line.replace(";", ",").replace("\t", ",").split(",")]
        if len(parts) != 3:
            export = " (or an answers export)" if answers else ""
            raise ValueError(f"{source}, line {number}: expected three item indices 'i,j,k'{export}, got {line!r}")
        try:
            i, j, k = (int(p) for p in parts)
        except ValueError:
            raise ValueError(f"{source}, line {number}: item indices must be whole numbers, got {line!r}") from None
        _check(source, f"line {number}", (i, j, k), n_items, line)
        rows.append((i, j, k))
    return rows


def _check(source: str, where: str, triplet: tuple[int, int, int], n_items: int | None, given: str) -> None:
    if n_items is not None and not all(0 <= x < n_items for x in triplet):
        raise ValueError(f"{source}, {where}: item indices must lie in 0..{n_items - 1}, got {given!r}")
    if len(set(triplet)) < 3:
        raise ValueError(f"{source}, {where}: a triplet needs three different items, got {given!r}")


def _is_export(first: str | None) -> bool:
    if first is None:
        return False
    header = next(csv.reader([first]))
    return "head" in header and "choice" in header


def parse_triplet_answers(text: str, n_items: int | None = None,
                          source: str = "file") -> tuple[list[tuple[int, int, int]], list[str] | None]:
    """:func:`parse_triplets` with ``answers=True``, and who gave each triplet: for an answers export with a
    ``rater`` column, the rater of the answer each triplet comes from (one per triplet; a screen's triplets
    share theirs), else None (rows ``i,j,k`` name no raters)."""
    first = next((line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")), None)
    if _is_export(first) and "rater" in next(csv.reader([first])):
        return _export_triplets(text, n_items, source)
    return parse_triplets(text, n_items, source, answers=True), None


def _export_triplets(text: str, n_items: int | None,
                     source: str) -> tuple[list[tuple[int, int, int]], list[str]]:
    """The triplets an answers export's answers imply (see :func:`parse_triplets`), and the rater of each
    (empty where the export has no ``rater`` column)."""
    rows, raters = [], []
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    for row in csv.DictReader(io.StringIO("\n".join(lines))):
        try:
            kind = get_kind(row.get("kind") or DEFAULT_KIND)
        except ValueError:
            continue
        if not kind.triplet_derived or not row.get("choice") or row.get("algorithm") in _NO_EVIDENCE:
            continue
        try:
            if row.get("shown"):  # the whole screen: every triplet the answer implies (engine.kinds)
                shown = [int(x) for x in row["shown"].split()]
                picks = [int(x) for x in row["picks"].split()]
                kind.check_answer(kind.screen(kind.proposal_of(shown), {"n_select": len(picks)}), picks, None)
                answered = kind.triplets(shown, picks)
            else:
                h, a, b, c = (int(row[k]) for k in ("head", "a", "b", "choice"))
                if c not in (a, b):
                    continue
                answered = [(h, a, b, c)]
        except (TypeError, ValueError, KeyError):
            continue
        for h, a, b, winner in answered:
            triplet = (int(h), int(winner), int(b if winner == a else a))
            _check(source, f"answer {row.get('answer_id') or '?'}", triplet, n_items, ",".join(map(str, triplet)))
            rows.append(triplet)
            raters.append(row.get("rater") or "")
    if not rows:
        raise ValueError(f"{source}: no answered triplet questions in this answers export")
    return rows, raters
