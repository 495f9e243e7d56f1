"""``proxima create``, ``add-items``, ``features``, ``import-triplets``, ``export``, ``studies``,
``rebuild`` and ``verify-code``: a study's life from the command line.

Never imports Flask (the study and export functions live in workers/; ``verify-code`` reads the
instance's secret key through the web package's configuration).
"""
from __future__ import annotations

import time
from pathlib import Path

import click
import redis

from workers.store.config import ConfigError, load_config_file
from workers.store.studies import StudyError, StudyNotFound

from .connection import instance_path, redis_connection, refuse_beside_other_serves, say
from .models import MODEL_NAMES

#: From this many items ``create`` says what it read and how long storing took.
LARGE_STUDY_ITEMS = 5000
#: From this many images the built-in features say every so many images how far along they are.
BUILTIN_PROGRESS_ITEMS = 1000
#: What ``--builtin-features`` computes, for the commands' help.
BUILTIN_HELP = ("Proxima's built-in image statistics (colour, texture and shape; nothing downloaded): weak features, "
                "which the learner drops if the answers show they predict nothing (about 5 s per 1,000 images)")
#: The feature files ``create --features`` and ``features`` read, by suffix (anything else: CSV).
FEATURE_FILES = "a CSV with an 'id' column and one numeric column per feature, a .npy/.npz array (one row per " \
                "item, in the items' order) or a Parquet file with an 'id' column (needs pyarrow)"


@click.command()
@click.argument("config_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--items", "items_path", required=True, type=click.Path(path_type=Path),
              help="A folder of images/audio/video and/or HTML items (.html), a .zip of them, or a CSV of texts "
                   "with a 'text' column.")
@click.option("--id", "study_id", default=None, help="Study id (default: from the name).")
@click.option("--stylesheet", "stylesheet_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="A CSS file applied to the study's rater pages (after Proxima's own; no @import, no url() but "
                   "data:image/, no script).")
@click.option("--features", "features_path", default=None, type=click.Path(dir_okay=False, path_type=Path),
              help="The items' features: " + FEATURE_FILES + ". Duels and the embeddings start from them "
                   "(a prior the answers overrule).")
@click.option("--builtin-features", "builtin", is_flag=True,
              help="For a folder of images without features: compute " + BUILTIN_HELP + " and use them as the "
                   "items' features.")
def create(config_file: Path, items_path: Path, study_id: str | None, stylesheet_path: Path | None = None,
           features_path: Path | None = None, builtin: bool = False, simulated: bool = False) -> None:
    """Create a study from a YAML/JSON config and a folder of media or a CSV of texts.

    \b
    The config (every field optional but name; the docs' "Study config" reference lists each:
    docs/reference/config.md):
      name: My study
      question_kind: triplet       # or rating, same_different, odd_one_out, rank, pick_k (rating:
                                   #   {min, max, step, ...}, rank and pick_k: {n_reference, n_select})
      algorithm: duels             # the default (ratings: pooled); or algorithms: [{algorithm,
                                   #   question_kind, share, params, budget}]
      instructions: Markdown, ![an example](item:ITEM_ID)
      consent: Markdown shown first
      practice: [{head: ID, candidates: [ID, ID], answer: ID, explanation: ...}]
      limits: {max_questions_per_rater: 50, answer_budget: 20000, min_response_ms: 800}
      attention: {rate: 0.05, stop_flagged: true, validation_repeats: 10, min_self_agreement: 0.6}
      completion: {prolific_redirect_url: https://app.prolific.com/submissions/complete?cc={code},
                   message: Markdown, debrief_question: Anything unclear?}
    The full JSON schema is SCHEMA in workers/store/config.py.
    """
    from webapp import catches
    from workers.store.feature_files import check_features_cover
    from workers.store.queue import schedule_update
    from workers.store.studies import check_stylesheet, config_warnings, create_study, get_study, set_features
    from workers.store.uploads import items_from_path

    if builtin and features_path is not None:
        raise click.UsageError("give --features FILE or --builtin-features, not both")
    try:
        config = load_config_file(config_file)
        items, media = items_from_path(items_path)
        features = None if features_path is None else read_features_file(features_path, [i.id for i in items])
        if features is not None:
            check_features_cover(features, [i.id for i in items], str(features_path))
        if builtin:
            features = _builtin_features(items, media)
        stylesheet = None
        if stylesheet_path is not None:
            try:
                stylesheet = check_stylesheet(str(stylesheet_path), stylesheet_path.read_bytes())
            except OSError as exc:
                raise StudyError(f"cannot read stylesheet {stylesheet_path}: {exc.strerror or exc}") from None
    except (ConfigError, StudyError) as exc:
        raise click.ClickException(str(exc)) from None
    started = time.monotonic()
    if len(items) >= LARGE_STUDY_ITEMS:
        # a large upload takes a while to store: say what was read and that it is being stored
        size = sum(len(b) for b in (media or {}).values())
        of_media = f" ({size / 1e6:,.0f} MB of media)" if size else ""
        click.echo(f"Read {len(items):,} items from {items_path}{of_media}; storing them ...", err=True)
    with redis_connection() as conn:
        try:
            study_id = create_study(conn, config, items, media, study_id=study_id, stylesheet=stylesheet)
            if features is not None:
                set_features(conn, study_id, features, **({"source": builtin_source()} if builtin else {}))
        except StudyError as exc:
            raise click.ClickException(str(exc)) from None
        schedule_update(conn, study_id)
        no_catches = catches.prepare(conn, get_study(conn, study_id))
    if len(items) >= LARGE_STUDY_ITEMS:
        click.echo(f"Stored {len(items):,} items in {time.monotonic() - started:.1f} s.", err=True)
    click.echo(f"Created study {study_id} with {len(items)} items. Rater page: /s/{study_id}")
    if builtin:
        _say_builtin(len(items))
    _say_skipped(items_path)
    warnings = [*config_warnings(config), *([no_catches] if no_catches else [])]
    if simulated and warnings:  # (simulate-setup --create: a study its simulated raters answer)
        click.echo(f"A study for simulated raters: {len(warnings)} warning(s) about paying people left out "
                   "('proxima create' shows them for a real study's config).", err=True)
        return
    for warning in warnings:
        click.echo(f"Warning: {warning}.", err=True)


def _say_skipped(items_path: Path) -> None:
    """Name the files of an items folder that did not become items (a PDF or notes beside the images)."""
    from workers.store.studies import ITEM_EXTENSIONS, skipped_files

    skipped = skipped_files(items_path)
    if skipped:
        shown = ", ".join(skipped[:10]) + (f" and {len(skipped) - 10} more" if len(skipped) > 10 else "")
        click.echo(f"Warning: skipped {len(skipped)} file(s) of {items_path} that are not items: {shown} (items are "
                   f"{', '.join(sorted(ITEM_EXTENSIONS))} files).", err=True)


def builtin_source() -> str:
    """What a study records as the source of built-in features (``workers.jobs.builtin_features.SOURCE``)."""
    from workers.jobs.builtin_features import SOURCE

    return SOURCE


def _builtin_features(items: list, media: dict[int, bytes]) -> dict[str, dict[str, float]]:
    """The built-in image features of items read from a folder (``workers.jobs.builtin_features``), computed
    here, saying how far along it is on standard error for a large folder."""
    from workers.jobs.builtin_features import features_from_media

    started = time.monotonic()

    def progress(done: int, total: int) -> None:
        if total >= BUILTIN_PROGRESS_ITEMS and done % BUILTIN_PROGRESS_ITEMS == 0:
            click.echo(f"Built-in features: {done:,} of {total:,} images ({time.monotonic() - started:.0f} s) ...",
                       err=True)
    return features_from_media(items, media, progress)


def _say_builtin(n_items: int) -> None:
    from engine.image_features import COLUMNS
    from workers.jobs.builtin_features import WEAK

    click.echo(f"Set {len(COLUMNS)} built-in feature(s) on {n_items} items: {WEAK}.")


@click.command("add-items")
@click.argument("study_id")
@click.option("--items", "items_path", required=True, type=click.Path(path_type=Path),
              help="A folder of images/audio/video, or a CSV of texts with a 'text' column (and feature columns).")
@click.option("--features", "features_path", type=click.Path(dir_okay=False, path_type=Path),
              help="The added items' features: a CSV (id + numeric columns) or Parquet file with their rows (the "
                   "study's features file extended by them will do), or a .npy/.npz array of one row per added item "
                   "(or the study's items then the added ones).")
@click.option("--builtin-features", "builtin", is_flag=True,
              help="The added images' built-in features (for a study whose features are the built-in ones).")
def add_items_command(study_id: str, items_path: Path, features_path: Path | None, builtin: bool = False) -> None:
    """Add items to a running study. A comparison-forest study routes each down its built trees; a study of
    other learners (a fixed item set) needs features: each added item gets neighbours predicted from its
    features within one update pass, marked predicted in the exports and on the dashboard."""
    from webapp import catches
    from workers.store.queue import schedule_update
    from workers.store.studies import add_items, attach_features, get_items, get_study
    from workers.store.uploads import items_from_path

    if builtin and features_path is not None:
        raise click.UsageError("give --features FILE or --builtin-features, not both")
    try:
        items, media = items_from_path(items_path)
        added = _builtin_features(items, media) if builtin else None
    except StudyError as exc:
        raise click.ClickException(str(exc)) from None
    with redis_connection() as conn:
        try:
            if added is not None:
                items = attach_features(get_items(conn, study_id), items, added)
            elif features_path is not None:
                existing = get_items(conn, study_id)
                features = _added_features_file(features_path, existing, [item.id for item in items])
                items = attach_features(existing, items, features)
            total = add_items(conn, study_id, items, media)
        except (StudyError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
        schedule_update(conn, study_id)
        catches.prepare(conn, get_study(conn, study_id))  # the catch trials of the new item count, chosen now
    click.echo(f"Added {len(items)} items to study {study_id} ({total} items now).")
    _say_skipped(items_path)


def _added_features_file(path: Path, existing: list, added_ids: list[str]) -> dict[str, dict[str, float]]:
    """Rows of a features file for items being added (``read_features_file``): a .npy/.npz array holds one row
    per added item, or the study's items then the added ones, its columns named as the study's features."""
    if path.suffix.lower() not in (".npy", ".npz"):
        return read_features_file(path, added_ids, columns_vary=False)
    stored_ids = [item.id for item in existing]
    try:
        features = read_features_file(path, added_ids, columns_vary=False)
    except StudyError as first:
        if "shape" not in str(first):
            raise
        try:
            features = read_features_file(path, stored_ids + added_ids, columns_vary=False)
        except StudyError:
            raise StudyError(f"{first}; or one row per item of the study then per added item "
                             f"({len(stored_ids) + len(added_ids)} rows)") from None
    names = set(existing[0].features) if existing and existing[0].features else set()
    columns = set(next(iter(features.values()), {}))
    if names and columns != names:
        # an array's columns are named f0, f1, ...: they match a study whose features came from an array
        raise StudyError(f"{path} is an array, and the study's features are named ({', '.join(sorted(names)[:10])}): "
                         "give the added items' features as a CSV with an 'id' column and those columns")
    return features


def read_features_file(path: Path, item_ids: list[str], columns_vary: bool = True) -> dict[str, dict[str, float]]:
    """Item id -> {feature name: value} from a features file for the items ``item_ids`` (their order is a
    .npy/.npz file's row order): ``workers.store.feature_files.features_from_bytes``, a missing file refused in
    words too."""
    from workers.store.feature_files import features_from_bytes

    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise StudyError(f"features file {path} does not exist") from None
    except OSError as exc:
        raise StudyError(f"cannot read features file {path}: {exc.strerror or exc}") from None
    return features_from_bytes(data, str(path), item_ids, columns_vary)


@click.command("features")
@click.argument("study_id")
@click.argument("features_file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--builtin", is_flag=True, help="Compute " + BUILTIN_HELP + " from the study's images instead of "
                                              "reading a file.")
def features_command(study_id: str, features_file: Path | None, builtin: bool) -> None:
    """Give every item of a study numeric features: a CSV with an 'id' column and one numeric column per
    feature, a .npy/.npz array (one row per item, in the items' order) or a Parquet file with an 'id'
    column (needs pyarrow); or, with --builtin and no file, Proxima's built-in image statistics of a study of
    images. Duels and the embeddings start from them and learn how people weigh them
    (a prior the answers overrule); SMERF and TreeRank learn over them. All items at once, or nothing
    changes. A study that already has answers uses them once rebuilt ('proxima rebuild STUDY')."""
    from webapp import catches
    from workers.store.studies import get_items, get_study, set_features

    if builtin == (features_file is not None):
        raise click.UsageError("give a FEATURES_FILE, or --builtin for built-in image features (not both)")
    with redis_connection() as conn:
        try:
            if builtin:
                from workers.jobs.builtin_features import set_builtin_features

                get_study(conn, study_id)
                n = set_builtin_features(conn, study_id)
            else:
                ids = [item.id for item in get_items(conn, study_id)]
                features = read_features_file(features_file, ids)
                n = set_features(conn, study_id, features)
        except (StudyError, StudyNotFound) as exc:
            raise click.ClickException(str(exc)) from None
        # features can give label catch trials their margin: the study's catch trials are chosen again
        catches.prepare(conn, get_study(conn, study_id))
    if builtin:
        _say_builtin(n)
        return
    names = list(next(iter(features.values())))
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    click.echo(f"Set {len(names)} feature(s) ({shown}) on {n} items of study {study_id}.")


@click.command("import-triplets")
@click.argument("study_id")
@click.argument("triplets_file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--rater", default="import", show_default=True, help="Rater id recorded for the imported answers.")
def import_triplets_command(study_id: str, triplets_file: Path, rater: str) -> None:
    """Append triplets in cblearn's list-order format (CSV rows i,j,k: i closer to j than to k)."""
    from workers.results.exports import import_triplets

    try:
        text = triplets_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise click.ClickException(f"triplets file {triplets_file} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise click.ClickException(f"cannot read {triplets_file}: {exc}") from None
    with redis_connection() as conn:
        try:
            count = import_triplets(conn, study_id, text, source=str(triplets_file), rater=rater)
        except (StudyNotFound, StudyError) as exc:
            raise click.ClickException(str(exc)) from None
    click.echo(f"Imported {count} triplets into study {study_id}.")


@click.command()
@click.argument("study_id")
@click.option("--what", type=click.Choice(["answers", "triplets", "odd_one_out", "items", "raters", "graph", "forest",
                                           "model", "embedding"]),
              default="answers",
              show_default=True, help="answers: one row per answer (every item shown, the picks in order); "
              "triplets: the triplets every answer implies, cblearn list-order; odd_one_out: odd-one-out answers as "
              "SPoSE/VICE read them (rows 'i j k', odd one last, 0-based; zip: with the item table); items: the "
              "item table (index, id, label); raters: one row per "
              "rater (checks, flags, skips, debrief answers); graph: the learned "
              "nearest-neighbour graph; forest: a comparison forest (docs/forest-schema.md) or SimForest; model: a "
              "model made by 'proxima train' (with --model); embedding: an embedding learner's coordinates "
              "(docs/exports.md).")
@click.option("--format", "fmt", type=click.Choice(["csv", "jsonl", "json", "graphml", "txt", "zip", "tsv"]),
              default=None,
              help="answers: csv (default) or jsonl; triplets and raters: csv; odd_one_out: txt (default) or zip; "
              "items: tsv; graph: json (default), csv or graphml; "
              "forest and model: json; embedding: csv (default) or json.")
@click.option("--algorithm", default=None, metavar="LABEL",
              help="Which algorithm's graph, forest or embedding (default: the study's first that has one).")
@click.option("--model", default=None, type=click.Choice(MODEL_NAMES),
              help="Which trained model to export with --what model.")
@click.option("-o", "--output", type=click.Path(writable=True, path_type=Path), default=None,
              help="Write to this file instead of standard output (with --package: a new folder, or a .zip file).")
@click.option("--package", is_flag=True,
              help="Write the whole data package instead (docs/data-package.md): items, answers, raters, exclusions, "
                   "triplets, every graph, embedding and forest, the config, consent and instructions, the platform's "
                   "version and the seeds, described by a Frictionless datapackage.json. Needs -o.")
@click.option("--rater-ids", is_flag=True,
              help="With --package: keep the raters' recruitment ids (Prolific/MTurk); default pseudonymous ids.")
@click.option("--no-media", is_flag=True, help="With --package: leave out the items' media files.")
def export(study_id: str, what: str, fmt: str | None, algorithm: str | None, model: str | None,
           output: Path | None, package: bool = False, rater_ids: bool = False, no_media: bool = False) -> None:
    """Export a study's answers, triplets, learned graph or forest (same code as the dashboard), or its
    whole data package (--package)."""
    from workers.results.exports import ExportError
    from workers.results.exports import export as make_export

    if package:
        _export_package(study_id, output, rater_ids, not no_media)
        return
    if rater_ids or no_media:
        raise click.UsageError("--rater-ids and --no-media go with --package")
    if output is not None and output.is_dir():
        raise click.UsageError(f"-o {output} is a folder; give a file name (a folder is for --package)")
    fmt = fmt or {"answers": "csv", "triplets": "csv", "raters": "csv", "graph": "json", "forest": "json",
                  "model": "json", "embedding": "csv", "odd_one_out": "txt", "items": "tsv"}[what]
    with redis_connection() as conn:
        try:
            if what == "embedding" and fmt in ("csv", "json"):  # said beside it: learner, dimension, fit quality
                from workers.results.exports import describe_fit, embedding_chunks, embedding_document

                doc = embedding_document(conn, study_id, algorithm)
                say(describe_fit(doc))
                chunks = iter(embedding_chunks(doc, fmt))
            else:
                chunks = iter(make_export(conn, study_id, what, fmt, algorithm, model=model).chunks)
            first = next(chunks, "")  # surfaces errors before anything is written
        except (StudyNotFound, ExportError) as exc:
            raise click.ClickException(str(exc)) from None
        if isinstance(first, bytes):  # a zip: to a file only
            if output is None:
                raise click.ClickException(f"a {fmt} export is written to a file: add -o FILE.{fmt}")
            output.write_bytes(first + b"".join(chunks))
            click.echo(f"Wrote {output}", err=True)
        elif output is None:
            click.echo(first, nl=False)
            for chunk in chunks:
                click.echo(chunk, nl=False)
        else:
            with output.open("w", encoding="utf-8", newline="") as fh:
                fh.write(first)
                for chunk in chunks:
                    fh.write(chunk)
            click.echo(f"Wrote {output}", err=True)


def _export_package(study_id: str, output: Path | None, rater_ids: bool, media: bool) -> None:
    from workers.results.exports import ExportError
    from workers.results.package import PackageError, package_filename, write_package_folder, write_package_zip
    from workers.store.studies import get_study

    from ..stats import study_stats

    if output is None:
        raise click.UsageError("--package needs -o: a new folder, or a file name ending in .zip")
    with redis_connection() as conn:
        try:
            status = study_stats(conn, get_study(conn, study_id))
            options = {"rater_ids": rater_ids, "status": status, "media": media}
            if output.suffix.lower() == ".zip":
                with output.open("wb") as fh:
                    write_package_zip(conn, study_id, fh, **options)
            else:
                write_package_folder(conn, study_id, output, **options)
        except (StudyNotFound, ExportError, PackageError) as exc:
            raise click.ClickException(str(exc)) from None
    ids = "recruitment ids" if rater_ids else "pseudonymous rater ids"
    descriptor = (f"{package_filename(study_id)}/datapackage.json (after unzipping)" if output.suffix.lower() == ".zip"
                  else output / "datapackage.json")
    click.echo(f"Wrote the data package of {study_id} to {output} ({ids}); check it with 'frictionless validate "
               f"{descriptor}' and read it with proxima.read_export('{output}').", err=True)


@click.command("studies")
def list_studies_command() -> None:
    """List the studies on this Redis."""
    from workers.jobs.rater_checks import crowd_status, describe_crowd
    from workers.store import health
    from workers.store.answers import count_answers
    from workers.store.studies import FEATURES_BUILTIN, features_version, list_studies

    with redis_connection() as conn:
        for study in list_studies(conn):
            learning = health.learning_status(conn, study.id)
            click.echo(f"{study.id}\t{study.status}\t{study.config.algorithm}\t{study.n_items} items\t"
                       f"{count_answers(conn, study.id)} answers\t{study.config.name}\tlearning: {learning['state']}")
            problem = health.describe(learning)
            if problem:
                click.echo(f"  {problem}")
            crowd = crowd_status(conn, study)
            if crowd is not None:
                click.echo(f"  {describe_crowd(crowd)}")
            if (features_version(conn, study.id)[0] or "").startswith(FEATURES_BUILTIN):
                click.echo("  features: built-in image statistics (weak)")


@click.command()
@click.argument("study_id")
@click.option("--exclude-rater", "exclude", multiple=True, metavar="ID",
              help="Leave this rater's answers out of the engine (repeatable; remembered for later updates).")
def rebuild(study_id: str, exclude: tuple[str, ...]) -> None:
    """Replay the answer log into fresh engine state and report how the learned graph changed."""
    from workers.jobs.rebuild import rebuild_study
    from workers.store import keys

    with redis_connection() as conn:
        try:
            known = {r.decode() for r in conn.smembers(keys.raters(study_id))}
            unknown = sorted(set(exclude) - known)
            report = rebuild_study(conn, study_id, exclude)
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
    for rater in unknown:
        click.echo(f"warning: rater {rater} has no answers in study {study_id}", err=True)
    click.echo(f"Replayed {report.answers_replayed} answers ({report.answers_excluded} excluded from "
               f"{len(report.excluded_raters)} rater(s)) in {report.seconds:.2f} s.")
    if report.answers_set_aside:
        click.echo(f"{report.answers_set_aside} answer(s) could not be used by an engine and were set aside.")
    if not report.changed:
        click.echo("The learned nearest-neighbour graph did not change.")
    else:
        click.echo(f"{len(report.changed)} item(s) changed nearest neighbour:")
        for algorithm, item, before, after in report.changed:
            click.echo(f"  [{algorithm}] {item}: {before or '-'} -> {after or '-'}")


@click.command("verify-code")
@click.argument("study_id")
@click.argument("rater")
@click.argument("code")
def verify_code_command(study_id: str, rater: str, code: str) -> None:
    """Check a rater's completion code (an HMAC of study and rater with this instance's secret key, or one
    of its previous keys, PROXIMA_PREVIOUS_SECRET_KEYS): a full code, or a partial-completion code (the
    study ran out before the rater finished)."""
    from .. import instance_config
    from ..questions_answers import PARTIAL_CODE, completion_code_kind

    # the secret key is all a code needs: no Redis (nor a running server) is required
    refuse_beside_other_serves(instance_path(), would="check the code with the secret key of")
    say(f"Instance folder: {instance_path()} (its secret key makes the codes)")
    config = instance_config()
    kind = completion_code_kind(config["SECRET_KEY"], study_id, rater, code, config["PREVIOUS_SECRET_KEYS"])
    if kind == PARTIAL_CODE:
        click.echo(f"partial: {code.strip().upper()} is rater {rater}'s partial-completion code for study "
                   f"{study_id} (the study ran out of questions before they finished)")
    elif kind:
        click.echo(f"valid: {code.strip().upper()} is rater {rater}'s completion code for study {study_id}")
    else:
        raise click.ClickException(f"invalid: {code!r} is not rater {rater}'s completion code for study {study_id}")


def _operator() -> str:
    """Who ran a command, for an audit line: ``cli:<login name>``."""
    import getpass

    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _rewrite_redis_files(conn: redis.Redis, needles: list[str]) -> None:
    """Rewrite Redis's files after a deletion and say what was asked, done and checked (a failure is said too:
    the deletion itself stands)."""
    from workers.store.persistence import PersistenceError, rewrite_files

    try:
        report = rewrite_files(conn, needles)
    except PersistenceError as exc:
        click.echo(f"Redis's files were not rewritten: {exc}. Until they are, its append-only file still holds "
                   "what was deleted; once Redis is less busy, ask it again (redis-cli BGREWRITEAOF).",
                   err=True)
        return
    for line in report.lines():
        click.echo(line)


@click.command("delete")
@click.argument("study_id")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def delete_command(study_id: str, yes: bool) -> None:
    """Delete a study for good: its items, media, answers, raters, learned state, models and queued jobs,
    then rewrite Redis's files so they hold none of it. Make a backup first ('proxima backup') if you may want
    it again."""
    from workers.store import keys
    from workers.store.deletion import delete_study
    from workers.store.studies import get_study

    with redis_connection() as conn:
        try:
            study = get_study(conn, study_id)
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
        if not yes:
            click.confirm(f"Delete study {study_id} ({study.config.name!r}, {study.n_items} items) and all its "
                          "answers for good?", abort=True)
        try:
            report = delete_study(conn, study_id, by=_operator())
        except StudyNotFound as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"Deleted study {report.study_id} ({report.name!r}): {report.items} items, {report.answers} "
                   f"answers of {report.raters} raters, {report.keys_deleted} Redis keys, {report.jobs_cancelled} "
                   f"queued job(s); {report.tokens_revoked} API token(s) revoked.")
        _rewrite_redis_files(conn, [keys.study_pattern(study_id).rstrip("*")])


@click.command("forget-rater")
@click.argument("study_id")
@click.argument("rater")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option("--backups", "backup_folders", multiple=True, type=click.Path(file_okay=False, path_type=Path),
              help="A folder of backups to look through for the rater (repeatable; default: the instance's "
                   "'backups' folder and the nightly backups' /var/backups/proxima).")
def forget_rater_command(study_id: str, rater: str, yes: bool, backup_folders: tuple[Path, ...]) -> None:
    """Forget a rater (a participant who withdrew): their answers leave the answer log and every record of
    them goes; their browser session is refused from now on; the engines are rebuilt from the other raters'
    answers; models trained on the study are marked; Redis's files are rewritten without them; the backups
    that still hold them are named. An audit line records when and by whom (with a SHA-256 of the rater id,
    not the id)."""
    from workers.jobs.rebuild import rebuild_study
    from workers.store.deletion import AlreadyForgotten, forget_rater

    from .backup import default_backup_folders

    if not yes:
        click.confirm(f"Remove every answer of rater {rater} from study {study_id} for good?", abort=True)
    with redis_connection() as conn:
        try:
            report = forget_rater(conn, study_id, rater, by=_operator(), rebuild=False)
            rebuilt = rebuild_study(conn, study_id)
        except AlreadyForgotten as exc:
            # a rerun (the first was interrupted, or its files rewrite failed): finish what is left to do
            click.echo(f"{exc}; rewriting Redis's files and looking through the backups again.")
            _rewrite_redis_files(conn, [rater])
            _name_backups_holding(backup_folders or default_backup_folders(), study_id, rater)
            return
        except (StudyNotFound, StudyError) as exc:
            raise click.ClickException(str(exc)) from None
        click.echo(f"Forgot rater {rater} of study {study_id}: {report.answers_removed} answer(s) removed "
                   f"(audit line {report.audit_id}); their browser session is refused from now on.")
        click.echo(f"Rebuilt the engines from the {rebuilt.answers_replayed} remaining answer(s) in "
                   f"{rebuilt.seconds:.2f} s; {len(rebuilt.changed)} item(s) changed nearest neighbour.")
        for name in report.models_marked:
            click.echo(f"Model {name} was trained with this rater's answers and is now marked so; retrain it "
                       f"without them: proxima train {study_id} --model {name}")
        _rewrite_redis_files(conn, [rater])
    _name_backups_holding(list(backup_folders) or default_backup_folders(), study_id, rater)


def _name_backups_holding(folders, study_id: str, rater: str) -> None:
    """Say which backup files still hold ``rater``'s answers in the study, and where was looked."""
    from workers.store.backup import backups_holding

    folders = list(folders)
    holding = backups_holding(folders, study_id, rater)
    looked = ", ".join(str(f) for f in folders)
    if holding:
        click.echo(f"{len(holding)} backup file(s) still hold this rater (a restore of one leaves them out and "
                   "says so, but the file itself keeps them until it is deleted or expires):")
        for path, answers in holding:
            click.echo(f"  {path} ({answers} answer(s))")
    else:
        click.echo(f"No backup file in {looked} holds this rater (backups written elsewhere were not looked at).")
