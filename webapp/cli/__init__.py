"""The ``proxima`` command (``[project.scripts]`` in pyproject.toml points at :func:`main`).

This file only wires the commands into one click group; each command lives in the module named
after it (``serve.py``: serve, demo, worker, sweep; ``studies.py``; ``backup.py``; ``models.py``;
``plan.py``; ``simulate.py``; ``users.py``; ``tokens.py``). Beside them: what ``proxima serve`` starts and watches
(``supervise.py``, ``embedded.py``, ``demo_study.py``); ``proxima simulate`` and ``proxima plan`` drive the
simulated raters of the ``simulation`` package. Every command prints a clear message and exits non-zero on
bad input. Never imports Flask (tests/test_import_rules.py).
"""
from __future__ import annotations

import click

from . import backup, models, plan, serve, simulate, studies, tokens, users


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Proxima: learn which items people find most alike, asking as few questions as possible."""


for command in (
    users.user, tokens.token,
    serve.serve, serve.demo, serve.worker, serve.sweep,
    studies.create, studies.add_items_command, studies.features_command, studies.import_triplets_command,
    studies.export, studies.list_studies_command, studies.rebuild, studies.verify_code_command,
    studies.delete_command, studies.forget_rater_command,
    backup.backup, backup.restore,
    models.train, models.predict,
    plan.plan_command,
    simulate.simulate, simulate.simulate_setup,
):
    main.add_command(command)

__all__ = ["main"]
