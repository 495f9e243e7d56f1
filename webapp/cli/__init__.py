"""The ``proxima`` command (``[project.scripts]`` in pyproject.toml points at :func:`main`).

This file only wires the commands into one click group; each command lives in the module named
after it (``serve.py``: serve, demo, worker, sweep; ``studies.py``; ``backup.py``; ``models.py``;
``plan.py``; ``simulate.py``; ``users.py``; ``tokens.py``). Beside them: what ``proxima serve`` starts and watches
(``supervise.py``, ``embedded.py``, ``demo_study.py``); ``proxima simulate`` and ``proxima plan`` drive the
simulated raters of the ``simulation`` package. Every command prints a clear message and exits non-zero on
bad input. Never imports Flask (tests/test_import_rules.py).
"""
from __future__ import annotations

from pathlib import Path

import click

from . import backup, models, plan, serve, simulate, studies, tokens, users
from .connection import use_instance

INSTANCE_HELP = ("The instance folder to act on (its Redis, secret key, backups); default PROXIMA_INSTANCE_PATH, "
                 "else instance/ beside the code. Give the folder your 'proxima serve' uses.")


def _instance_option() -> click.Option:
    """``--instance PATH`` after a command's name too (``proxima export STUDY --instance PATH``)."""
    return click.Option(["--instance"], type=click.Path(file_okay=False, path_type=Path), metavar="PATH",
                        expose_value=False, is_eager=True, help=INSTANCE_HELP,
                        callback=lambda ctx, param, value: use_instance(value))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--instance", "instance", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="PATH",
              help=INSTANCE_HELP)
def main(instance: Path | None = None) -> None:
    """Proxima: learn which items people find most alike, asking as few questions as possible.

    Every command says on standard error which Redis or instance folder it acts on."""
    use_instance(instance)


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
    command.params.append(_instance_option())
    main.add_command(command)

__all__ = ["main"]
