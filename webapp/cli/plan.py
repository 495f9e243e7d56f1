"""``proxima plan``: a study's budget planned before paying, by simulating every learner on
simulated raters (engine/planning.py plans, simulation/noise.py fits a pilot). Never imports Flask.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from workers.store.studies import StudyNotFound, get_items

from .connection import redis_connection

if TYPE_CHECKING:
    import numpy as np
    from redis import Redis

    from engine import planning


def _pilot_from_study(conn: Redis, study_id: str) -> tuple[np.ndarray, int, dict[str, dict], np.ndarray | None]:
    """(triplets, n_items, params, raters) of a study's triplet answers so far (excluded raters left out), the
    parameters of its algorithms (by algorithm name), so its learners are simulated as they run, and the rater
    of each triplet (None where they cannot be matched), so the pilot's raters are checked one by one."""
    import numpy as np

    from engine.triplet_csv import parse_triplets
    from workers.store import keys
    from workers.store.answers import CATCH_ALGORITHM, REPEAT_ALGORITHM, export_triplets, iter_answers
    from workers.store.studies import get_study

    try:
        study = get_study(conn, study_id)
    except StudyNotFound as exc:
        raise click.ClickException(str(exc)) from None
    excluded = {r.decode() for r in conn.smembers(keys.excluded_raters(study_id))}
    answers = list(iter_answers(conn, study_id))
    text = "".join(export_triplets(answers, excluded))
    # the rater of every triplet the export wrote, in its order (the export's own filter)
    raters = [ans.rater for ans in answers
              if ans.rater not in excluded and ans.algorithm not in (CATCH_ALGORITHM, REPEAT_ALGORITHM)
              for _ in ans.triplets()]
    try:
        params = {}
        for alg in study.config.algorithms:
            params.setdefault(alg.algorithm, dict(alg.params))
        triplets = parse_triplets(text, study.n_items, f"study {study_id}")
        if not triplets:
            raise ValueError(f"study {study_id}: no triplet answers")
    except ValueError:
        raise click.ClickException(f"study {study_id} has no triplet answers yet: run a pilot first") from None
    return (np.asarray(triplets, np.int64), study.n_items, params,
            np.asarray(raters) if len(raters) == len(triplets) else None)


#: The random-question peer a comparison of kinds plans beside each kind's default learner.
PEER = "embedding"
#: What a pilot's plan is worth, as measured against the truth's plan on simulated studies
#: (``benchmarks/pilot_plan.py``, duels to hit@3 .8; benchmarks/README): said under every pilot plan.
PILOT_PLAN_MEASURED = ("the human model's noise assumed, 0.080 of the fitted world's robust range (the alien-egg "
                       "crowds'); measured against the truth (benchmarks/pilot_plan.py, raters of that model), pilot "
                       "plans asked 0.94-1.30x the answers a study needed at 100 items and 0.73-1.01x at 1,000: "
                       "noisier or careless raters the pilot does not show need more")
#: Line colours of ``plan_svg`` (colour-blind-safe, Okabe and Ito's palette).
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")


def plan_svg(p: planning.Plan, metric: str, target: float | None = None, width: int = 640,
             height: int = 400) -> str:
    """The plan's mean curves of ``metric`` as a standalone SVG image: accuracy (0 to 1) against screens
    per item on a log axis, one coloured line and legend entry per learner, ``target`` dashed."""
    from html import escape

    from engine import planning

    left, right, top, bottom = 50, 190, 20, 45
    budgets = [float(b) for b in p.budgets]
    lo, hi = math.log(budgets[0]), math.log(budgets[-1])

    def x(b: float) -> float:
        return left + (0.5 if hi == lo else (math.log(b) - lo) / (hi - lo)) * (width - left - right)

    def y(v: float) -> float:
        return top + (1 - v) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>']
    for v in (0, 0.25, 0.5, 0.75, 1):
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#ddd"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end">{v:g}</text>')
    for b in budgets:
        out.append(f'<text x="{x(b):.1f}" y="{height - bottom + 16}" text-anchor="middle">{b:g}</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 8}" text-anchor="middle">'
               'screens per item</text>')
    out.append(f'<text transform="translate(14 {(top + height - bottom) / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{escape(planning.METRIC_LABELS[metric])} accuracy</text>')
    if target is not None:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(target):.1f}" y2="{y(target):.1f}" '
                   f'stroke="#888" stroke-dasharray="4 4"/>')
    for a, name in enumerate(p.algorithms):
        colour = COLOURS[a % len(COLOURS)]
        mean = p.curve(name, metric).mean(axis=0)
        points = " ".join(f"{x(b):.1f},{y(float(v)):.1f}" for b, v in zip(budgets, mean, strict=True)
                          if math.isfinite(v))
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        ly = top + 10 + 18 * a
        out.append(f'<line x1="{width - right + 12}" x2="{width - right + 32}" y1="{ly}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"/><text x="{width - right + 38}" y="{ly + 4}">'
                   f'{escape(name)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _features_matrix(path: Path, item_ids: list[str]) -> np.ndarray:
    """The (n_items, n_features) array of a features file, rows in the items' order; ClickException in words."""
    import numpy as np

    from workers.store.studies import StudyError

    from .studies import read_features_file

    try:
        by_id = read_features_file(path, item_ids)
    except StudyError as exc:
        raise click.ClickException(str(exc)) from None
    missing = [i for i in item_ids if i not in by_id]
    if missing:
        raise click.ClickException(f"{path} has no features for {len(missing)} item(s), e.g. {missing[0]!r}; give "
                                   "every item a row (ids as the items', or a pilot's item numbers 0, 1, ...)")
    names = list(by_id[item_ids[0]])
    return np.array([[by_id[i][name] for name in names] for i in item_ids], dtype=np.float64)


def _numbers(text: str) -> list[float]:
    """The numbers of a comma-separated list; ValueError naming the first one that is not."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            out.append(float(part))
        except ValueError:
            raise ValueError(f"{part!r} is not a number; budgets are answers per item") from None
    return out


def _study_kinds(study_id: str) -> tuple[str, dict]:
    """The triplet-implying question kinds a study asks (comma-separated) and its grid's size, if any."""
    from workers.store.studies import get_study

    with redis_connection() as conn:
        try:
            config = get_study(conn, study_id).config
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
    kinds = [a.question_kind for a in config.algorithms if a.kind.triplet_derived]
    size = {}
    for name in kinds:
        size.update(config.settings_of(name))
    return ",".join(dict.fromkeys(kinds)), size


@click.command("plan")
@click.option("--truth", "truth_spec", default=None, metavar="SPEC",
              help="Plan from a known truth: points:FILE.csv (columns id,x1,x2,...), matrix:FILE.csv (header row "
                   "of ids, then an n x n distance matrix) or eggs[:DATA_DIR].")
@click.option("--pilot", "pilot_path", default=None, type=click.Path(dir_okay=False, exists=True, path_type=Path),
              help="Plan from a pilot's answers: an answers CSV export (its raters are checked one by one) or a "
                   "triplets export (list-order i,j,k; names no raters).")
@click.option("--study", "study_id", default=None, metavar="ID",
              help="Plan from a running study's answers so far (its pilot) and show the plan on its dashboard.")
@click.option("--items", "n_items", type=click.IntRange(min=4), default=None,
              help="Number of items of a --pilot file (default: the largest index + 1).")
@click.option("--algorithms", default="", metavar="A,B,...",
              help="Learners to simulate (default: every learner of the table a triplet study can run).")
@click.option("--kinds", default=None, metavar="K,K,...",
              help="Question kinds to compare, every learner asking each: triplet, odd_one_out, rank, pick_k "
                   "(budgets are then screens per item; default: a --study's own kinds, else triplet).")
@click.option("--n-reference", type=click.IntRange(3, 12), default=None,
              help="References of a rank or pick_k screen (default 8).")
@click.option("--n-select", type=click.IntRange(1, 11), default=None,
              help="References a rater picks on a rank screen (most similar first) or a pick_k one (default 2).")
@click.option("--seconds", "seconds_spec", default="", metavar="KIND=S,...",
              help="A rater's seconds per screen of a kind (a pilot's median; default: engine/kinds.py's stated "
                   "figures, their sources there), for the raters' hours and --wage.")
@click.option("--wage", type=click.FloatRange(min=0), default=None,
              help="Pay per hour of raters' time: prints what each budget costs by the time its screens take "
                   "(instead of --pay per screen).")
@click.option("--budgets", default="10,20,50,100,200,500", show_default=True, metavar="N,N,...",
              help="Answers (screens) per item at which accuracy is measured.")
@click.option("--runs", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Simulations per learner (seeds; with a pilot each also refits a bootstrap resample).")
@click.option("--noise", type=click.FloatRange(min=0), default=None,
              help="With --truth: the logistic noise scale as a share of the largest distance "
                   "(default: the human fit, as 'proxima simulate').")
@click.option("--lapse", type=click.FloatRange(0, 1), default=None,
              help="With --truth: the share of answers given at random (default: the human fit).")
@click.option("--pay", type=click.FloatRange(min=0), default=None,
              help="Pay per answer, to print what each budget costs.")
@click.option("--currency", default="$", show_default=True, help="Currency sign of --pay.")
@click.option("--target", type=click.FloatRange(0, 1), default=0.9, show_default=True,
              help="Accuracy to reach: prints the answers (and money) each learner needs.")
@click.option("--metric", type=click.Choice(["exact", "hit3"]), default="exact", show_default=True,
              help="Accuracy --target refers to: the exact nearest neighbour, or one of the 3 nearest.")
@click.option("--batch", default=50, show_default=True, type=click.IntRange(1, 100000),
              help="Questions a learner plans at a time (a pool refill of a live study).")
@click.option("--jobs", type=click.IntRange(1, 64), default=None, help="Processes to simulate in (default: the CPUs).")
@click.option("--max-seconds", type=click.FloatRange(min=1), default=300.0, show_default=True,
              help="Bound on the plan's CPU time per process: every run gets an equal share, and a learner "
                   "that needs more stops at the budgets it reached (shown as '-').")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Also write the plan as JSON to this file.")
@click.option("--features", "features_path", type=click.Path(dir_okay=False, exists=True, path_type=Path),
              default=None,
              help="The items' features (as 'proxima features' takes them: CSV with an id column, .npy/.npz rows "
                   "in item order, Parquet): every learner that uses features is planned without and with them. "
                   "With --pilot, ids are the item numbers of the pilot (0, 1, ...).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Also draw the curves (accuracy of --metric against screens per item, one line per learner, "
                   "the --target dashed) into this SVG image.")
def plan_command(truth_spec: str | None, pilot_path: Path | None, study_id: str | None, n_items: int | None,
                 algorithms: str, budgets: str, runs: int, noise: float | None, lapse: float | None, pay: float | None,
                 currency: str, target: float, metric: str, batch: int, jobs: int | None, json_path: Path | None,
                 features_path: Path | None, plot_path: Path | None,
                 max_seconds: float = 300.0, kinds: str | None = None, n_reference: int | None = None,
                 n_select: int | None = None, seconds_spec: str = "", wage: float | None = None) -> None:
    """Plan a study's budget before paying: expected nearest-neighbour accuracy against answers per item.

    Every applicable learner runs in-process on simulated raters (logistic + lapse human noise) that answer
    from a known truth, or from an ordinal embedding fitted to a pilot's answers with the pilot's own noise.
    Prints accuracy (exact and hit@3, mean ± sd over runs) by budget, its cost at --pay, and the answers
    needed to reach --target. For example, after a pilot of ~10 answers per item:

    \b
      proxima plan --study my-study --pay 0.02 --target 0.9
      proxima plan --pilot pilot-answers.csv --runs 5 --metric hit3
    """
    import json

    import numpy as np

    from engine import planning
    from engine.triplet_csv import parse_triplet_answers

    if sum(x is not None for x in (truth_spec, pilot_path, study_id)) != 1:
        raise click.UsageError("give exactly one of --truth, --pilot or --study")
    if pay is not None and wage is not None:
        raise click.UsageError("give --pay (per screen) or --wage (per hour of raters' time), not both")
    size = {k: v for k, v in (("n_reference", n_reference), ("n_select", n_select)) if v is not None}
    if kinds is None and study_id is not None:
        kinds, study_size = _study_kinds(study_id)
        size = {**study_size, **size}
    try:
        wanted = [a.strip() for a in algorithms.split(",") if a.strip()]
        planning.plannable_algorithms(wanted)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--algorithms'") from None
    try:
        kind_list = planning.plannable_kinds([k.strip() for k in (kinds or "").split(",") if k.strip()])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--kinds'") from None
    seconds = {}
    for part in filter(None, (x.strip() for x in seconds_spec.split(","))):
        kind, _, value = part.partition("=")
        try:
            if kind not in kind_list or not value:
                raise ValueError
            seconds[kind] = float(value)
        except ValueError:
            raise click.BadParameter(f"takes KIND=SECONDS for the planned kinds ({', '.join(kind_list)}), "
                                     f"got {part!r}", param_hint="'--seconds'") from None
        if not (math.isfinite(seconds[kind]) and seconds[kind] > 0):  # a cost from negative time is no cost
            raise click.BadParameter(f"a screen takes a positive number of seconds, got {part!r}",
                                     param_hint="'--seconds'")
    for kind in kind_list:  # a screen's size is checked here, so its error names the option that set it
        if size and "n_reference" in planning.get_kind(kind).settings:
            try:
                planning.get_kind(kind).check_settings(size)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="'--n-select'" if n_select is not None
                                         else "'--n-reference'") from None
    if len(kind_list) > 1 and not wanted:
        # comparing kinds: each kind's default learner and the random-question peer, not every learner of
        # every kind (16 lines, minutes of simulation for lines no study of those kinds would choose)
        from engine.registry import default_algorithm

        wanted = list(dict.fromkeys([default_algorithm(k) for k in kind_list] + [PEER]))
        click.echo(f"Comparing {', '.join(kind_list)}: each kind's default learner and the random-question peer "
                   f"({', '.join(wanted)}); name others with --algorithms.", err=True)
    try:
        lines = planning.arms(wanted, kind_list, {k: size for k in kind_list if size and "n_reference" in
                                                  planning.get_kind(k).settings}, seconds)
        names = [line.label for line in lines]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--algorithms'") from None
    try:
        grid = planning.check_budgets(_numbers(budgets))
    except ValueError as exc:
        raise click.BadParameter(f"{exc}, separated by commas (e.g. 10,20,50)", param_hint="'--budgets'") from None
    jobs = jobs or planning.default_jobs()
    started = time.perf_counter()
    params = None
    if truth_spec is not None:
        from simulation.crowd import SimulationError, load_truth
        from simulation.oracles import HUMAN_LAPSE, HUMAN_SCALE

        try:
            truth = load_truth(truth_spec)
        except (SimulationError, OSError) as exc:
            raise click.ClickException(str(exc)) from None
        scale = noise if noise is not None else (truth.logistic_scale or HUMAN_SCALE)
        lapse = lapse if lapse is not None else (truth.lapse if truth.lapse is not None else HUMAN_LAPSE)
        scenarios = [planning.Scenario(truth.distances, scale, lapse)]
        item_ids = list(truth.ids)
        source = (f"{truth.source} (logistic scale {scale:.4f} of the largest distance, lapse {lapse:.3f})")
        spread = "seeds"
    else:
        if noise is not None or lapse is not None:
            raise click.UsageError("--noise and --lapse are for --truth; a pilot's noise is fitted to its answers")
        if study_id is not None:
            with redis_connection() as conn:
                triplets, n, params, raters = _pilot_from_study(conn, study_id)
                item_ids = [item.id for item in get_items(conn, study_id)]
        else:
            try:
                rows, raters = parse_triplet_answers(pilot_path.read_text(encoding="utf-8"), n_items, str(pilot_path))
            except (ValueError, UnicodeDecodeError) as exc:
                raise click.ClickException(str(exc)) from None
            if not rows:
                raise click.ClickException(f"{pilot_path}: no answers")
            # an answers export names its raters (checked one by one); rows i,j,k name none
            triplets = np.asarray(rows, np.int64)
            n = n_items or int(triplets.max()) + 1
            item_ids = [str(i) for i in range(n)]
        from simulation.noise import fit_pilot

        click.echo(f"Fitting an embedding to {len(triplets)} pilot answers ({len(triplets) / n:.1f} per item) and "
                   "checking the raters' noise against the human model ...", err=True)
        try:
            fit = fit_pilot(triplets, n, replicates=runs, raters=raters)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
        scenarios = list(fit.scenarios)
        source = f"{fit.describe()}; {PILOT_PLAN_MEASURED}"
        spread = "seeds and bootstrap resamples of the pilot"
    features = None
    if features_path is not None:
        features = _features_matrix(features_path, item_ids)
        names += [f"{line.label} + features" for line in lines if planning.takes_features(line.algorithm)]
    click.echo(f"Simulating {', '.join(names)} ({runs} runs each, up to {grid[-1]:g} answers per item, "
               f"{jobs} processes; at most about {max_seconds:g} s of CPU per process, --max-seconds) ...", err=True)
    def progress(name: str, done: int, total: int, seconds: float, stopped: bool) -> None:
        note = " (stopped by the time limit before the largest budget)" if stopped else ""
        click.echo(f"  [{done}/{total}] a run of {name} ended after {seconds:.1f} s of CPU{note}; "
                   f"{time.perf_counter() - started:.0f} s so far", err=True)

    result = planning.plan(scenarios, wanted or None, grid, runs=runs, batch=batch, jobs=jobs, source=source,
                           spread=spread, params=params, max_seconds=max_seconds, kinds=kind_list,
                           settings={line.kind: dict(line.settings) for line in lines}, seconds=seconds,
                           progress=progress, features=features)
    for line in planning.format_plan(result, target=target, metric=metric, pay=pay, currency=currency, wage=wage):
        click.echo(line)
    click.echo(f"\nPlanned in {time.perf_counter() - started:.1f} s.", err=True)
    if result.cut_short:
        click.echo(f"Time limit: {', '.join(result.cut_short)} did not reach every budget within --max-seconds "
                   f"{max_seconds:g}; raise it (or lower --budgets, --runs) for the rest.", err=True)
    doc = {**result.to_dict(), "target": target, "metric": metric, "pay": pay, "wage": wage, "currency": currency,
           "created_at": time.time(),
           "reach": {name: result.reach(name, target, metric)[0].__dict__ for name in result.algorithms}}
    if json_path is not None:
        json_path.write_text(json.dumps(doc, indent=1, allow_nan=False), encoding="utf-8")
    if plot_path is not None:
        plot_path.write_text(plan_svg(result, metric, target), encoding="utf-8")
        click.echo(f"The curves are drawn in {plot_path}.", err=True)
    if study_id is not None:
        from workers.store import keys

        with redis_connection() as conn:
            conn.set(keys.plan(study_id), json.dumps(doc, allow_nan=False))
        click.echo(f"The plan is on study {study_id}'s dashboard.", err=True)
