"""JSON export of comparison forests (the researcher's format, docs/forest-schema.md).

The document is stable across versions and carries ``schema_version``; it describes trees,
nodes, pivots and leaf members, not the in-flight votes (resume a build with ``to_state``).
The functions live beside the forest in :mod:`engine.comparison_tree` (so the two modules do
not import each other); this module is the name the exports and docs use for them.
Must never import Flask, Redis, RQ or anything from ``webapp``/``workers``.
"""
from __future__ import annotations

from .comparison_tree import KIND, SCHEMA_VERSION, forest_from_json, forest_to_json

__all__ = ["KIND", "SCHEMA_VERSION", "forest_from_json", "forest_to_json"]
