"""Type hints the code promises, checked on the source (AST):

- every function that takes a Redis connection says so: ``conn: Redis`` (workers/ and webapp/), so a reader
  and a type checker know what ``conn`` is without reading the callers;
- every public function and method (engine/, workers/, webapp/) annotates all its arguments (but
  ``self``/``cls``) and its return. Public: a name without a leading underscore (dunders such as
  ``__init__`` count) defined at module level or in a class whose name has none; nested functions are not."""
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


def _is_public(name: str) -> bool:
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _public_functions(body: list[ast.stmt]) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            found += _public_functions(node.body)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_public(node.name):
            found.append(node)
    return found


def unannotated(path: Path) -> list[str]:
    """``line name: what is missing`` for each public function of ``path`` lacking an annotation."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    offences = []
    for node in _public_functions(tree.body):
        a = node.args
        params = a.posonlyargs + a.args + a.kwonlyargs + [p for p in (a.vararg, a.kwarg) if p is not None]
        missing = [p.arg for p in params if p.annotation is None and p.arg not in ("self", "cls")]
        if node.returns is None:
            missing.append("return")
        if missing:
            offences.append(f"{node.lineno} {node.name}: {', '.join(missing)}")
    return offences


def test_every_public_function_is_annotated():
    offences = [f"{path.relative_to(ROOT)}:{offence}" for package in ("engine", "workers", "webapp")
                for path in sorted((ROOT / package).rglob("*.py")) for offence in unannotated(path)]
    assert not offences, f"{len(offences)} public functions lack annotations:\n" + "\n".join(offences)


def test_the_check_finds_unannotated_public_functions(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def a(x, *args: int, **kw) -> None: ...\n"
        "def b(x: int):\n    def inner(y): ...\n"
        "def _private(x): ...\n"
        "class C:\n    def __init__(self, n): ...\n    def m(self, /, k: int) -> int: ...\n"
        "    @classmethod\n    def make(cls) -> 'C': ...\n    def _helper(self, z): ...\n"
        "class _Hidden:\n    def run(self, q): ...\n")
    assert unannotated(sample) == ["1 a: x, kw", "2 b: return", "6 __init__: n, return"]
