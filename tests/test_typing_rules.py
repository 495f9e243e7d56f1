"""Every function that takes a Redis connection says so: ``conn: Redis`` (AST check over workers/ and
webapp/), so a reader and a type checker know what ``conn`` is without reading the callers."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def untyped_conn(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [arg.lineno for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            for arg in node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            if arg.arg == "conn" and arg.annotation is None]


def test_every_conn_parameter_is_annotated():
    offences = [f"{path.relative_to(ROOT)}:{line}" for package in ("workers", "webapp")
                for path in sorted((ROOT / package).rglob("*.py")) for line in untyped_conn(path)]
    assert not offences, "untyped conn parameters:\n" + "\n".join(offences)


def test_the_check_finds_an_untyped_conn(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def a(conn, x: int) -> None: ...\n\ndef b(conn: 'Redis') -> None: ...\n")
    assert untyped_conn(sample) == [1]
