"""Proxima's engine: question planners and learners on plain numpy/scipy arrays.

Nothing in this package may import Flask, Redis, RQ or anything from ``webapp``
or ``workers``; engine objects take numbers, return numbers and serialise to
plain arrays plus JSON scalars (``to_state`` / ``from_state``).
"""
