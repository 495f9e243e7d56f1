"""What the engine's two tables share (the algorithms, :mod:`engine.registry`, and the question kinds,
:mod:`engine.kinds`): an entry looked up by its name, and the JSON schema of an entry's parameters given
as schema fragments with defaults. Plain Python; must never import numpy or another module of the engine.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def entry_of(table: Mapping[str, Any], name: Any, what: str) -> Any:
    """The entry of ``name`` in ``table``; ValueError naming the unknown ``what`` and listing the choices."""
    try:
        return table[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {what} {name!r}; choose one of {', '.join(table)}") from None


def without_default(fragment: Mapping[str, Any]) -> dict:
    """A parameter's JSON-schema fragment without its ``default`` (what a given value is checked against)."""
    return {k: v for k, v in fragment.items() if k != "default"}


def object_schema(fragments: Mapping[str, Mapping[str, Any]]) -> dict:
    """The JSON schema of an object of these parameters (name -> fragment with its default), no others."""
    return {"type": "object", "additionalProperties": False,
            "properties": {k: without_default(v) for k, v in fragments.items()}}
