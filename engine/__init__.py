"""Proxima's engine: question planners and learners on plain numpy/scipy arrays.

Nothing in this package may import Flask, Redis, RQ or anything from ``webapp``
or ``workers``; engine objects take numbers, return numbers and serialise to
plain arrays plus JSON scalars (``to_state`` / ``from_state``).
"""

#: What ``from engine import ...`` gives besides the subpackages: the public way to build a planner
#: (``make_planner(name, n, question_kind=..., features=X, random_state=s)``) and to restore one.
PUBLIC = {"make_planner": "planners", "restore_planner": "planners"}


def __getattr__(name: str) -> object:
    """``engine.make_planner`` and ``engine.restore_planner`` (loaded when first asked for: a web process
    imports ``engine.kinds`` and must not load numpy through this package)."""
    if name in PUBLIC:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{PUBLIC[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
