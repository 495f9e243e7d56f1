"""``proxima train`` and ``predict``: models fitted offline on what a study collected
(SMERF, TreeRank, ranking forests, SimForest). Never imports Flask; numpy is imported inside
the commands so ``--help`` stays fast.
"""
from __future__ import annotations

from pathlib import Path

import click

from workers.store.studies import StudyError, StudyNotFound

from .connection import redis_connection

#: The models ``proxima train`` fits (workers.results.models.MODELS; listed here so --help needs no numpy).
MODEL_NAMES = ("smerf", "treerank", "ranking_forest", "simforest")


def _parse_params(pairs: tuple[str, ...]) -> dict:
    import yaml

    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise click.BadParameter(f"{pair!r} is not NAME=VALUE (e.g. n_trees=50)", param_hint="--param")
        try:
            params[name.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise click.BadParameter(f"{pair!r}: cannot read the value {value!r}", param_hint="--param") from None
    return params


@click.command()
@click.argument("study_id")
@click.option("--model", "name", required=True, type=click.Choice(MODEL_NAMES),
              help="smerf: a distance over item features; treerank / ranking_forest: which pairs of items are alike; "
              "simforest: item classes from the crowd's similarities.")
@click.option("--algorithm", default=None, metavar="LABEL",
              help="The distance algorithm whose estimates to learn from (default: the study's first).")
@click.option("--threshold", type=click.FloatRange(0, 1), default=None,
              help="treerank/ranking_forest: call a pair alike when its crowd distance is at most this (default: "
              "pairs of items with the same label are alike).")
@click.option("--param", "params", multiple=True, metavar="NAME=VALUE",
              help="A parameter of the model, e.g. --param n_trees=100 (repeatable).")
@click.option("--seed", type=int, default=None, help="Random seed (default: the study's random_state, else 0).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Also write the model's JSON export to this file.")
def train(study_id: str, name: str, algorithm: str | None, threshold: float | None, params: tuple[str, ...],
          seed: int | None, output: Path | None) -> None:
    """Fit a model on what a study collected, report held-out figures and store it (export it with
    'proxima export STUDY --what model --model NAME'; predict with 'proxima predict')."""
    import json

    from workers.results.models import ModelError, model_export
    from workers.results.models import train as fit

    parsed = _parse_params(params)
    with redis_connection() as conn:
        try:
            meta = fit(conn, study_id, name, algorithm=algorithm, params=parsed, threshold=threshold,
                       random_state=seed)
        except (ModelError, StudyError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
        except ValueError as exc:  # the estimator refused a parameter value
            raise click.ClickException(f"{name}: {exc}") from None
        if output is not None:
            output.write_text(json.dumps(model_export(conn, study_id, name)), encoding="utf-8")
    summary = meta["summary"]
    click.echo(f"Trained {name} on study {study_id}.")
    for key, value in summary.items():
        if key == "feature_importances":
            click.echo("  feature importances:")
            for row in value:
                click.echo(f"    {row['feature']:<24} {row['importance']:.4f}")
        elif isinstance(value, float):
            click.echo(f"  {key.replace('_', ' ')}: {value:.4f}")
        elif isinstance(value, list):
            click.echo(f"  {key.replace('_', ' ')}: {', '.join(map(str, value))}")
        elif value is not None:
            click.echo(f"  {key.replace('_', ' ')}: {value}")
    if output is not None:
        click.echo(f"Wrote {output}", err=True)


@click.command()
@click.argument("study_id")
@click.option("--model", "name", required=True, type=click.Choice(["smerf", "treerank", "ranking_forest"]),
              help="A model trained with 'proxima train'.")
@click.option("--items", "items_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="A CSV of new items: 'text' (and 'id') plus the same feature columns as the study's items.")
@click.option("--k", default=5, show_default=True, type=click.IntRange(min=1),
              help="How many of the study's items to list per new item, nearest first.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write the CSV to this file instead of standard output.")
def predict(study_id: str, name: str, items_path: Path, k: int, output: Path | None) -> None:
    """For new items (by their features), the study's items a trained model puts nearest: a CSV of
    new_item, item, rank and the predicted distance (smerf) or similarity score (treerank)."""
    import csv
    import io

    import numpy as np

    from workers.results.models import ModelError, predict_for_items
    from workers.store.studies import items_from_csv

    try:
        new_items = items_from_csv(items_path)
    except StudyError as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        try:
            new_ids, study_ids, values = predict_for_items(conn, study_id, name, new_items)
        except (ModelError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
    column = "distance" if name == "smerf" else "score"
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["new_item", "item", "rank", column])
    for row, new_id in enumerate(new_ids):
        order = np.argsort(values[row] if name == "smerf" else -values[row], kind="stable")[:k]
        for rank, j in enumerate(order.tolist(), start=1):
            writer.writerow([new_id, study_ids[j], rank, f"{float(values[row, j]):.6g}"])
    if output is None:
        click.echo(buf.getvalue(), nl=False)
    else:
        output.write_text(buf.getvalue(), encoding="utf-8")
        click.echo(f"Wrote {output}", err=True)
