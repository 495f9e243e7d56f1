"""The data package: one folder or zip a lab can deposit, described by a Frictionless datapackage.json
(validated here with the ``frictionless`` package), pseudonymous unless recruitment ids are asked
for, with every exclusion and its reason, the platform's version and commit and the seeds; it
round-trips through ``proxima.read_export``; made by ``proxima export --package`` and the dashboard."""
from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from frictionless import validate
from helpers import answer, closer_candidate, colour_items, fetch_question, run_worker

import proxima
from proxima.readers import table
from webapp.cli import main
from webapp.stats import study_stats
from workers.results.exports import export, nn_graph
from workers.results.package import write_package_folder, write_package_zip
from workers.store import keys
from workers.store.answers import read_answers
from workers.store.config import StudyConfig
from workers.store.queue import enqueue_rebuild
from workers.store.studies import create_study, get_study, set_features

STUDY = "pkg"
RATERS = ("p-alpha", "p-bravo", "p-charlie", "p-delta")
CONSENT = "## Consent\n\nWe keep your answers for research; you may stop at any time."
INSTRUCTIONS = "Pick the colour that looks more like the one on top."


def rater_client(app, rater):
    import re

    client = app.test_client()
    page = client.get(f"/s/{STUDY}?PROLIFIC_PID={rater}&STUDY_ID=s&SESSION_ID={rater}").get_data(as_text=True)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    assert client.post(f"/s/{STUDY}/consent", data={"decision": "agree", "csrf_token": csrf}).status_code == 302
    return client


@pytest.fixture
def study(app, conn):
    """A study of 10 colours with three learners (graph, embedding, forest), catch trials and consent,
    answered by four recruited raters (one careless, then excluded by the researcher)."""
    config = StudyConfig.from_dict({
        "name": "Colours package", "instructions": INSTRUCTIONS, "consent": CONSENT, "random_state": 7,
        "pool_size": 8, "attention": {"rate": 0.2},
        "algorithms": [{"algorithm": "random_triplets"}, {"algorithm": "embedding"},
                       {"algorithm": "comparison_forest"}]})
    create_study(conn, config, colour_items(), study_id=STUDY)
    set_features(conn, STUDY, {f"c{i}": {"brightness": i / 10, "warmth": 1.5 - i} for i in range(10)})
    run_worker(conn)
    rng = np.random.default_rng(3)
    for rater in RATERS:
        client = rater_client(app, rater)
        question = fetch_question(client, STUDY)
        for _ in range(18):
            careless = rater == "p-delta"
            choice = (question["candidates"][int(rng.integers(2))]["handle"] if careless
                      else closer_candidate(question))
            body = answer(client, question, choice, study_id=STUDY).get_json()
            question = body.get("next")
            if not question:
                break
        run_worker(conn)
    conn.sadd(keys.excluded_raters(STUDY), "p-delta")
    enqueue_rebuild(conn, STUDY, ["p-delta"])
    run_worker(conn)
    return STUDY


def make(conn, tmp_path, name="package", **options):
    with_status = {"status": study_stats(conn, get_study(conn, STUDY)), **options}
    write_package_folder(conn, STUDY, tmp_path / name, **with_status)
    return tmp_path / name


def test_the_package_validates_with_frictionless_and_every_csv_has_a_table_schema(conn, study, tmp_path):
    folder = make(conn, tmp_path)
    report = validate(str(folder / "datapackage.json"))
    assert report.valid, report.flatten(["rowNumber", "fieldNumber", "type", "note"])[:10]
    descriptor = json.loads((folder / "datapackage.json").read_text())
    csvs = sorted(str(p.relative_to(folder)) for p in folder.rglob("*.csv"))
    described = {r["path"]: r for r in descriptor["resources"]}
    assert csvs and set(csvs) <= set(described)
    for path in csvs:
        header = (folder / path).read_text().splitlines()[0].split(",")
        assert [f["name"] for f in described[path]["schema"]["fields"]] == header, path
    assert {"items.csv", "answers.csv", "raters.csv", "triplets.csv", "exclusions.csv", "study.json",
            "consent.md", "instructions.md", "status.json", "graphs/random_triplets.csv",
            "forests/comparison_forest.json"} <= set(described)
    assert (folder / "consent.md").read_text() == CONSENT
    assert (folder / "instructions.md").read_text() == INSTRUCTIONS
    # the command-line validator a depositor runs agrees
    frictionless = Path(sys.executable).parent / "frictionless"
    result = subprocess.run([str(frictionless), "validate", str(folder / "datapackage.json")], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:]


def test_a_broken_table_fails_validation(conn, study, tmp_path):
    # the check above can fail: a text in an integer column is caught
    folder = make(conn, tmp_path)
    lines = (folder / "triplets.csv").read_text().splitlines()
    lines[1] = "x,1,2"
    (folder / "triplets.csv").write_text("\n".join(lines) + "\n")
    assert not validate(str(folder / "datapackage.json")).valid


def test_raters_are_pseudonymous_unless_recruitment_ids_are_asked_for(conn, study, tmp_path):
    folder = make(conn, tmp_path)
    assert not [(r, p) for r in RATERS for p in folder.rglob("*") if p.is_file() and r.encode() in p.read_bytes()]
    answers = table((folder / "answers.csv").read_text())
    assert sorted(answers["rater"].unique()) == ["R0001", "R0002", "R0003", "R0004"]
    raters = table((folder / "raters.csv").read_text())
    assert "completion_code" not in raters.columns
    assert set(raters["rater"]) == set(answers["rater"])
    named = make(conn, tmp_path, "named", rater_ids=True)
    assert set(table((named / "answers.csv").read_text())["rater"]) == set(RATERS)
    assert "completion_code" in table((named / "raters.csv").read_text()).columns
    assert json.loads((named / "datapackage.json").read_text())["proxima"]["rater_ids"] == "recruitment"


def test_every_exclusion_is_listed_with_its_reason(conn, study, tmp_path):
    folder = make(conn, tmp_path, rater_ids=True)
    exclusions = table((folder / "exclusions.csv").read_text())
    delta = exclusions[(exclusions["what"] == "rater") & (exclusions["rater"] == "p-delta")]
    assert len(delta) == 1 and delta.iloc[0]["reason"].startswith("excluded by the researcher")
    catch_ids = {a.id for a in read_answers(conn, STUDY) if a.algorithm == "catch"}
    assert catch_ids, "the study asked no attention checks: the test would check nothing"
    listed = exclusions[exclusions["reason"].str.startswith("attention check")]
    assert set(listed["answer_id"]) == catch_ids
    # the triplets leave out what the exclusions say is left out
    triplets = np.loadtxt(folder / "triplets.csv", delimiter=",", skiprows=1, dtype=int, ndmin=2)
    learnt = [a for a in read_answers(conn, STUDY) if a.rater != "p-delta" and a.algorithm != "catch"]
    assert len(triplets) == len(learnt)


def test_the_package_names_the_platform_version_commit_and_seeds(conn, study, tmp_path):
    info = json.loads((make(conn, tmp_path) / "datapackage.json").read_text())["proxima"]
    assert info["platform"]["version"] == version("proxima-similarity")
    root = Path(__file__).resolve().parents[1]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert info["platform"]["commit"] == head
    assert info["seeds"]["random_state"] == 7
    assert info["seeds"]["learners"] == {"random_triplets": 7, "embedding": 8, "comparison_forest": 9}


@pytest.mark.parametrize("form", ["folder", "zip"])
def test_read_export_round_trips_the_package(conn, study, tmp_path, form):
    if form == "zip":
        path = tmp_path / "package.zip"
        with path.open("wb") as fh:
            write_package_zip(conn, STUDY, fh, rater_ids=True, status=study_stats(conn, get_study(conn, STUDY)))
    else:
        path = make(conn, tmp_path, rater_ids=True)
    package = proxima.read_export(path)
    answers = package.answers()
    server = table("".join(export(conn, STUDY, "answers", "csv").chunks))
    assert answers.equals(server) and len(answers) == len(read_answers(conn, STUDY))
    served = "".join(export(conn, STUDY, "triplets", "csv").chunks)
    assert np.array_equal(package.triplets(), np.loadtxt(io.StringIO(served), delimiter=",", dtype=int, ndmin=2))
    graph, doc = package.graph(), nn_graph(conn, STUDY)
    assert list(graph.nodes) == doc["items"] and graph.graph["algorithm"] == doc["algorithm"]
    assert sorted((e["source"], e["target"], e["estimate"]) for e in doc["edges"]) == sorted(
        (u, v, d["estimate"]) for u, v, d in graph.edges(data=True))
    assert package.graph("comparison_forest").number_of_nodes() == 10
    embedding = package.embedding()
    server_embedding = json.loads("".join(export(conn, STUDY, "embedding", "json").chunks))
    assert embedding.to_numpy().tolist() == server_embedding["coordinates"]
    assert list(embedding.index) == server_embedding["items"]
    assert package.config == get_study(conn, STUDY).config.to_dict()
    assert package.status()["answers"] == len(answers)
    items = package.items()
    assert list(items["id"]) == [f"c{i}" for i in range(10)]
    assert items["feature:brightness"].tolist() == [i / 10 for i in range(10)]
    assert items["feature:warmth"].tolist() == [1.5 - i for i in range(10)]
    raters = package.raters().set_index("rater")
    assert raters.loc["p-delta", "excluded"] and raters["answers"].sum() == len(answers)
    with pytest.raises(proxima.ProximaError, match="has no algorithm 'nope'"):
        package.graph("nope")


def test_read_export_says_what_is_wrong_with_a_path(tmp_path):
    with pytest.raises(proxima.ProximaError, match="there is no data package"):
        proxima.read_export(tmp_path / "missing")
    with pytest.raises(proxima.ProximaError, match="has no datapackage.json"):
        proxima.read_export(tmp_path)
    (tmp_path / "x.zip").write_bytes(b"not a zip")
    with pytest.raises(proxima.ProximaError, match="neither a folder nor a zip"):
        proxima.read_export(tmp_path / "x.zip")


def test_the_cli_writes_a_package_folder_or_zip(conn, study, tmp_path, redis_url, monkeypatch):
    monkeypatch.setenv("REDIS_URL", redis_url)
    runner = CliRunner()
    result = runner.invoke(main, ["export", STUDY, "--package", "-o", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    assert validate(str(tmp_path / "out" / "datapackage.json")).valid
    result = runner.invoke(main, ["export", STUDY, "--package", "--rater-ids", "-o", str(tmp_path / "out.zip")])
    assert result.exit_code == 0, result.output
    assert set(proxima.read_export(tmp_path / "out.zip").answers()["rater"]) == set(RATERS)
    again = runner.invoke(main, ["export", STUDY, "--package", "-o", str(tmp_path / "out")])
    assert again.exit_code != 0 and "is not empty" in again.output
    missing = runner.invoke(main, ["export", STUDY, "--package"])
    assert missing.exit_code != 0 and "--package needs -o" in missing.output
    unknown = runner.invoke(main, ["export", "nope", "--package", "-o", str(tmp_path / "n.zip")])
    assert unknown.exit_code != 0 and "nope" in unknown.output and not (tmp_path / "n.zip").exists()


def test_the_dashboard_downloads_the_package(researcher_client, conn, study):
    # built by a worker (tests/test_package_job.py has the build's life), then downloaded
    for rater_ids in ("0", "1"):
        built = researcher_client.post(f"/studies/{STUDY}/package/build", data={"rater_ids": rater_ids})
        assert built.status_code == 302
    run_worker(conn)
    page = researcher_client.get(f"/studies/{STUDY}?tab=downloads").get_data(as_text=True)
    assert f'href="/studies/{STUDY}/package.zip"' in page
    response = researcher_client.get(f"/studies/{STUDY}/package.zip")
    assert response.status_code == 200 and response.mimetype == "application/zip"
    assert f'filename={STUDY}-data-package.zip' in response.headers["Content-Disposition"]
    names = zipfile.ZipFile(io.BytesIO(response.data)).namelist()
    assert f"{STUDY}-data-package/datapackage.json" in names
    with_ids = researcher_client.get(f"/studies/{STUDY}/package.zip?rater_ids=1")
    assert f"filename={STUDY}-data-package-with-rater-ids.zip" in with_ids.headers["Content-Disposition"]
    assert b"p-alpha" in b"".join(zipfile.ZipFile(io.BytesIO(with_ids.data)).read(n) for n in names)
