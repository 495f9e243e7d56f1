"""``proxima simulate`` and ``simulate-setup``: a simulated crowd answering a running server over
HTTP from a known truth (the crowd itself is :mod:`simulation.crowd`). Never imports Flask.
"""
from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import click
import redis

from engine.kinds import KINDS, QUESTION_KINDS
from engine.registry import DEFAULT_NN_ALGORITHM, DEFAULT_RATING_ALGORITHM, default_algorithm
from workers.store.config import ALGORITHM_TABLE

from .connection import instance_path, running_web_url, say
from .embedded import running_url
from .studies import create

if TYPE_CHECKING:
    from redis import Redis


#: Algorithms a simulated study can run: the graph learners (label-driven forests need real labels).
SIMULATED_ALGORITHMS = tuple(name for name, entry in ALGORITHM_TABLE.items() if entry.yields_graph)


def _simulation_redis():
    """The Redis of the simulated server (REDIS_URL or the running embedded one), or None.

    Never starts a temporary server: an empty Redis would not hold the study being simulated.
    """
    url = os.environ.get("REDIS_URL") or running_url(instance_path())
    if not url:
        return None
    conn = redis.Redis.from_url(url)
    try:
        conn.ping()
    except (redis.RedisError, OSError):
        return None
    return conn


#: Where ``simulate`` goes when no serve runs for the instance folder (``proxima serve``'s default port).
DEFAULT_URL = "http://127.0.0.1:5000"


def _serve_url() -> str:
    """The web server of the ``proxima serve`` running for the instance folder, else DEFAULT_URL; says which."""
    inst = instance_path()
    url = running_web_url(inst)
    if url:
        say(f"Server: {url} (the running 'proxima serve' of instance folder {inst})")
        return url
    say(f"Server: {DEFAULT_URL} (no 'proxima serve' runs for instance folder {inst}; --url names another)")
    return DEFAULT_URL


def _wait_until_applied(conn: Redis, study_id: str, timeout: float) -> dict | None:
    """Study stats once the workers have applied every logged answer (or at the timeout)."""
    from workers.store.studies import get_study

    from ..stats import study_stats

    deadline = time.monotonic() + timeout
    while True:
        stats = study_stats(conn, get_study(conn, study_id))
        if stats["engine"]["answers_applied"] >= stats["answers"] or time.monotonic() >= deadline:
            return stats
        time.sleep(0.25)


@click.command()
@click.argument("study_id")
@click.option("--url", default=None,
              help="Base URL of the running server (default: that of the 'proxima serve' running for the instance "
                   f"folder, else {DEFAULT_URL}).")
@click.option("--oracle", "oracle_spec", required=True, metavar="SPEC",
              help="The truth raters answer from: points:FILE.csv (columns id,x1,x2,...), matrix:FILE.csv "
                   "(header row of ids, then an n x n distance matrix), or eggs[:DATA_DIR] (alien eggs).")
@click.option("--raters", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="Simulated raters answering at once (one thread and cookie session each).")
@click.option("--noise", type=click.FloatRange(min=0), default=None,
              help="Triplets: the logistic scale of the human noise model (simulation.oracles), as a share of the "
                   "largest distance (0: raters answer the truth, but for lapses); ratings: Gaussian sigma on the "
                   "similarity. Default: fitted to the answers for eggs, the alien-egg fit (0.075) otherwise; "
                   "ratings 0.1.")
@click.option("--ratings", "rating_model", type=click.Choice(["gaussian", "realistic"]), default="gaussian",
              show_default=True,
              help="How simulated raters rate: 'gaussian' (--noise sigma on the similarity) or 'realistic' "
                   "(as noisy as people: each rater's own offset and slope, one rating's SD 2.2 points of a "
                   "1-9 scale; simulation.ratings).")
@click.option("--lapse", type=click.FloatRange(0, 1), default=None,
              help="Share of triplet answers given at random (the human lapse rate). Default: the fitted "
                   "human rate (0.03 without answers of the truth's own).")
@click.option("--careless", type=click.FloatRange(0, 1), default=0.0, show_default=True,
              help="Share of raters who answer uniformly at random (the first ones: PREFIX-0, PREFIX-1, ...).")
@click.option("--prefix", default=None, metavar="PREFIX",
              help="Rater ids are PREFIX-0, PREFIX-1, ... (default: 'sim-' and 6 random hex digits, new on every "
                   "run, so a second run is a new crowd rather than the first one's raters coming back).")
@click.option("--think", type=click.FloatRange(min=0), default=2.0, show_default=True,
              help="Mean think time per question in seconds (log-normal; 0 for benchmarks).")
@click.option("--answers", "max_answers", type=click.IntRange(min=1), default=None,
              help="Stop after this many accepted answers in total.")
@click.option("--duration", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Stop after this many seconds.")
@click.option("--seed", type=int, default=None, help="Seed of the raters' noise and think times.")
@click.option("--progress-every", default=5.0, show_default=True, type=click.FloatRange(min=0.1),
              help="Seconds between progress lines.")
@click.option("--log", "log_path", type=click.Path(dir_okay=False, writable=True, path_type=Path), default=None,
              help="Write every accepted answer (answer id, rater, items, choice/value) as JSON lines.")
@click.option("--wait", default=60.0, show_default=True, type=click.FloatRange(min=0),
              help="Seconds to wait for the workers to apply the last answers before scoring the graph.")
@click.option("--no-accuracy", is_flag=True, help="Do not score the learned graph at the end.")
def simulate(study_id: str, url: str | None, oracle_spec: str, raters: int, noise: float | None, rating_model: str,
             lapse: float | None, careless: float, think: float, max_answers: int | None, duration: float | None,
             seed: int | None, progress_every: float, log_path: Path | None, wait: float, no_accuracy: bool,
             prefix: str | None = None) -> None:
    """Simulated raters answering STUDY_ID on a running server, as real HTTP clients, from a known truth.

    Each rater opens the rater link as PREFIX-<n> (agreeing to its consent form if it has one), then asks
    for questions and answers them from
    the truth with noise (a --careless share answers at random), until --answers, --duration
    or the study is complete. Prints progress, answers/s, HTTP latency p50/p95, errors by
    code and, when the server's Redis is reachable (REDIS_URL or 'proxima serve' on this
    instance folder), the learned graph's accuracy: the share of items whose nearest
    neighbour is a true nearest neighbour (ties count as correct).

    To make a study that matches a truth, see 'proxima simulate-setup'.
    """
    import secrets

    import requests

    from simulation import crowd as sim
    from workers.store.answers import RATER_ID_PATTERN

    prefix = prefix if prefix is not None else f"sim-{secrets.token_hex(3)}"
    if not RATER_ID_PATTERN.match(f"{prefix}-{raters - 1}") or prefix.startswith("anon-"):
        raise click.BadParameter(f"{prefix!r} does not make rater ids: use letters, digits and _.:@- (at most "
                                 "120 characters, starting with a letter or digit)", param_hint="'--prefix'")

    try:
        truth = sim.load_truth(oracle_spec)
        model, noise_text = sim.noise_model(truth, noise, lapse)
        if rating_model == "realistic":
            import dataclasses

            from simulation.ratings import RatingNoise

            model = dataclasses.replace(model, realistic_ratings=RatingNoise())
            noise_text = noise_text.split("; ratings")[0] + "; ratings realistic (simulation.ratings defaults)"
    except sim.SimulationError as exc:
        raise click.ClickException(str(exc)) from None
    if url:
        say(f"Server: {url} (--url)")
    base = (url or _serve_url()).rstrip("/")
    try:
        requests.get(f"{base}/api/health", timeout=5).raise_for_status()
    except requests.RequestException as exc:
        raise click.ClickException(f"cannot reach a Proxima server at {base} ({exc.__class__.__name__}); "
                                   "start one with 'proxima serve' or pass --url") from None
    conn = _simulation_redis()
    ids: list[str] = []
    if conn is not None:
        from workers.store.studies import get_items

        try:
            ids = [item.id for item in get_items(conn, study_id)]
        except redis.RedisError:
            ids = []
        unknown = [i for i in ids if i not in truth.index]
        if unknown:
            raise click.ClickException(
                f"{len(unknown)} item(s) of study {study_id} are not in the truth ({truth.source}), e.g. "
                f"{', '.join(unknown[:5])}; simulate a study created from the same items")
    click.echo(f"Simulating {raters} rater(s) on {base}/s/{study_id}: truth {truth.source} ({truth.n_items} items), "
               f"noise {noise_text}, careless share {careless:g}, think time {think:g} s; rater ids "
               f"{prefix}-0 to {prefix}-{raters - 1}")
    # the wire names shown items by handles only: the simulated people read them with the server's secret key
    identify = sim.payload_id
    if ids:
        from webapp import instance_config
        from webapp.handles import identifier

        identify = identifier(instance_config()["SECRET_KEY"], study_id, ids)
    crowd = sim.Crowd(base, study_id, truth, model, raters=raters, careless=careless, think=think,
                      max_answers=max_answers, duration=duration, seed=seed, rater_prefix=prefix,
                      identify=identify)
    try:
        report = crowd.run(progress=lambda r, s: click.echo(sim.progress_line(r, s)), every=progress_every)
    except sim.SimulationError as exc:
        raise click.ClickException(str(exc)) from None
    for line in sim.summary_lines(report):
        click.echo(line)
    if report.errors.get("rate_limited"):
        click.echo("note: the server rate-limited this crowd (it answers faster than people, all from one address); "
                   "start the server with PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES set to this machine's address "
                   "(e.g. 127.0.0.1) to simulate without limits", err=True)
    if log_path is not None:
        sim.write_log(report, log_path)
        click.echo(f"Wrote {report.answers} accepted answers to {log_path}")
    if no_accuracy:
        return
    if conn is None:
        click.echo("Accuracy: skipped (the server's Redis is not reachable: set REDIS_URL, or run beside "
                   "'proxima serve' with the same PROXIMA_INSTANCE_PATH)")
        return
    from workers.results.exports import ExportError, nn_graph

    stats = _wait_until_applied(conn, study_id, wait)
    if stats["engine"]["answers_applied"] < stats["answers"]:
        click.echo(f"warning: after {wait:g} s the workers have applied {stats['engine']['answers_applied']} of "
                   f"{stats['answers']} answers; scoring the graph as it is", err=True)
    try:
        graph = nn_graph(conn, study_id)
        score = sim.graph_accuracy(graph, truth)
    except (ExportError, sim.SimulationError) as exc:
        click.echo(f"Accuracy: skipped ({exc})")
        return
    click.echo(f"Learned graph ({graph['algorithm']}, k={score['k']}): nearest-neighbour accuracy "
               f"{score['accuracy']:.3f} over {score['items']} items"
               + (f", k-NN accuracy {score['knn_accuracy']:.3f}" if score["k"] > 1 else "")
               + f", certified {score['certified']:.0%}")


@click.command("simulate-setup")
@click.argument("source", metavar="TRUTH")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Folder to write items.csv, truth.csv and study.yaml into.")
@click.option("--kind", type=click.Choice(list(QUESTION_KINDS)), default="rating", show_default=True,
              help="Question kind of the study: " + "; ".join(f"{k.name}: {k.description}" for k in KINDS.values())
              + ".")
@click.option("--n-reference", type=int, default=None,
              help="References of a rank screen (3 to 12; default 8).")
@click.option("--n-select", type=int, default=None,
              help="References a rater picks on a rank screen, most similar first (default 2).")
@click.option("--algorithm", type=click.Choice(list(SIMULATED_ALGORITHMS)), default=None,
              help=f"Algorithm of the study (default {DEFAULT_NN_ALGORITHM} for triplets, "
                   f"{DEFAULT_RATING_ALGORITHM} for ratings): " + "; ".join(
                  f"{name}: {ALGORITHM_TABLE[name].description}" for name in SIMULATED_ALGORITHMS) + ".")
@click.option("--sigma", type=click.FloatRange(min=0, min_open=True), default=None,
              help="ANNTri's sigma parameter written into the config (default 0.1 for ratings, 0.5 for "
                   "triplet-derived 0/1 samples).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the clusters and of the study.")
@click.option("--create", "create_id", default=None, metavar="ID",
              help="Also create the study with this id (like 'proxima create').")
@click.pass_context
def simulate_setup(ctx: click.Context, source: str, out_dir: Path, kind: str, n_reference: int | None,
                   n_select: int | None, algorithm: str | None, sigma: float | None, seed: int,
                   create_id: str | None) -> None:
    """Write a truth and a matching study (items.csv, truth.csv, study.yaml) for 'proxima simulate'.

    TRUTH is clusters[:CxS] (the ANNTri paper's circle clusters, default 10x10), eggs[:DATA_DIR],
    points:FILE.csv or matrix:FILE.csv. Then run, for example:

    \b
      proxima create OUT/study.yaml --items OUT/items.csv --id my-sim
      proxima simulate my-sim --oracle points:OUT/truth.csv --raters 20
    """
    from simulation.crowd import SimulationError, write_setup

    algorithm = algorithm or default_algorithm(kind)
    if kind not in ALGORITHM_TABLE[algorithm].question_kinds:
        only = " or ".join(ALGORITHM_TABLE[algorithm].question_kinds)
        raise click.ClickException(f"{algorithm} asks {only} questions only; use --kind {only}")
    given = {"n_reference": n_reference, "n_select": n_select}
    settings = {k: v for k, v in given.items() if v is not None}
    unknown = [k for k in settings if k not in KINDS[kind].settings]
    if unknown:
        raise click.ClickException(f"--{unknown[0].replace('_', '-')} is a setting of "
                                   f"{' or '.join(k.name for k in KINDS.values() if unknown[0] in k.settings)} "
                                   f"studies, not of {kind} studies")
    try:
        written = write_setup(source, out_dir, kind=kind, algorithm=algorithm, sigma=sigma, seed=seed,
                              settings=settings)
    except (SimulationError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"Wrote {written['items']}, {written['truth']} and {written['config']} ({written['n_items']} items).")
    if create_id:
        ctx.invoke(create, config_file=written["config"], items_path=written["items"], study_id=create_id,
                   simulated=True)
    study = create_id or "STUDY"
    if not create_id:
        click.echo(f"Create the study: proxima create {written['config']} --items {written['items']} --id my-sim")
        study = "my-sim"
    click.echo(f"Simulate raters:  proxima simulate {study} --oracle {written['oracle']} --raters 20")
