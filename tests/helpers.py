"""Helpers shared by the tests: constants, study items, one-line client actions, waiting, and
`proxima serve` as a real subprocess.

Test modules import these with ``from helpers import ...`` (pytest puts ``tests/`` on
``sys.path`` because it holds no ``__init__.py``); fixtures stay in ``conftest.py``.
"""
from __future__ import annotations

import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import requests

from webapp import ROOT
from webapp.cli.embedded import EmbeddedRedis, free_port
from webapp.handles import shown_index
from workers.store.queue import get_queue, run_queued_jobs
from workers.store.studies import Item

SECRET = "test-secret-key"
#: Rate-limit exemption for tests driving many requests from this machine (nothing is exempt by default).
LOOPBACK = ("127.0.0.1", "::1")

RESEARCHER, RESEARCHER_PASSWORD = "researcher", "a long test password"

#: Playwright's context options for a phone: its screen, a touch screen, no mouse.
PHONE = {"viewport": {"width": 390, "height": 844}, "has_touch": True, "is_mobile": True}

#: Where browser tests leave screenshots for people to look at.
ARTIFACTS = os.environ.get("PROXIMA_ARTIFACTS") or os.path.join(os.path.dirname(__file__), "..", "artifacts")


def colour_items(n: int = 10) -> list[Item]:
    return [Item(id=f"c{i}", kind="color", color=f"#{(25 * i) % 256:02x}3050", position=(float(i),))
            for i in range(n)]


def positioned_study(conn, study_id: str, positions: list[float], **config) -> str:
    """A random-triplets study of colour items p0, p1, ... at the 1-D ``positions`` (``config`` adds to or
    overrides its config), its first pool filled."""
    from workers.store.config import StudyConfig
    from workers.store.studies import create_study

    items = [Item(id=f"p{i}", kind="color", color="#203040", position=(x,)) for i, x in enumerate(positions)]
    create_study(conn, StudyConfig.from_dict({"name": study_id.title(), "pool_size": 10,
                                              "algorithms": [{"algorithm": "random_triplets"}], **config}),
                 items, study_id=study_id)
    run_worker(conn)
    return study_id


def run_worker(conn) -> int:
    """Run every queued job in this process (``run_queued_jobs``: RQ's SimpleWorker, burst); returns how
    many ran. Its jobs do not linger for answers after their last pass (nothing answers while a test's
    burst worker runs): the same passes, without the 0.1 s wait that a served study's job keeps for a
    crowd's next answer."""
    from workers.jobs import update

    queue = get_queue(conn)
    queued = queue.count
    linger, update.LINGER_SECONDS = update.LINGER_SECONDS, 0.0
    try:
        run_queued_jobs(conn)
    finally:
        update.LINGER_SECONDS = linger
    return queued


def drain(conn) -> int:
    """Apply every pending answer in this process: what the update jobs the web side queued do when a worker
    runs them (``workers.jobs.update.update_study``: clear the study's update flag, take its lock, and
    ``drain_study`` its new answers, the end steps, answer check and summary included), without RQ around
    them (its bookkeeping: a 20-item pair study's live curve of 100 jobs took 2.2 s with the burst worker, 1.7 s
    drained, the same curve) and without the 0.1 s linger for a crowd's next answer. An error of the update is
    raised here, in the test. Any other job queued (a rebuild, a package, a deletion) is left to
    :func:`run_worker`, which then runs the whole queue in order. Returns how many jobs it ran or stood in for."""
    from workers.jobs.lock import study_lock
    from workers.jobs.update import drain_study
    from workers.store import keys
    from workers.store.queue import UPDATE_JOB

    queue = get_queue(conn)
    jobs = [job for job in queue.get_jobs() if job is not None]
    if any(job.func_name != UPDATE_JOB for job in jobs):
        return run_worker(conn)
    queue.empty()
    for study_id in dict.fromkeys(job.args[0] for job in jobs):
        conn.delete(keys.update_scheduled(study_id))
        if conn.exists(keys.study(study_id)):
            with study_lock(conn, study_id) as renew:
                drain_study(conn, study_id, renew=renew, linger=0.0)
    return len(jobs)


def dump_redis(conn) -> dict[bytes, tuple[int, bytes]]:
    """Every key of ``conn``'s database: its DUMP and the milliseconds it has left to live (0: no expiry).
    With :func:`restore_redis`, a study a module's tests only read is built once and put back for each test
    (the ``conn`` fixture empties Redis around every test)."""
    dumped = {}
    for key in conn.scan_iter(count=1000):
        value, ttl = conn.dump(key), conn.pttl(key)
        if value is not None:
            dumped[key] = (max(ttl, 0), value)
    return dumped


def restore_redis(conn, dumped: dict[bytes, tuple[int, bytes]]) -> None:
    """Put back the keys :func:`dump_redis` took (over any of the same name)."""
    with conn.pipeline(transaction=False) as pipe:
        for key, (ttl, value) in dumped.items():
            pipe.restore(key, ttl, value, replace=True)
        pipe.execute()


def fetch_question(client, study_id="colours") -> dict:
    response = client.get(f"/api/studies/{study_id}/questions/next")
    assert response.status_code == 200, response.get_json()
    return response.get_json()["question"]


def index_of(item: dict, secret: str = SECRET) -> int:
    """The item index a shown item's handle names (``webapp.handles.shown_index`` with the test app's
    secret key): what a test answering from the truth needs, which the wire never says."""
    return shown_index(secret, None, item["handle"])


def served_index(instance: Path, handle: str | None) -> int:
    """The item index a handle names on a page of a ``proxima serve`` whose instance folder is ``instance``
    (read with the secret key it keeps there): what a browser test answering from the truth needs."""
    return shown_index((instance / "secret_key").read_text().strip(), None, handle)


def shown(question: dict) -> list[dict]:
    """A question's shown items in display order (a head first)."""
    return [question["head"], *question["candidates"]] if "head" in question else list(question["items"])


def handle_of(question: dict, index: int, secret: str = SECRET) -> str:
    """The handle of the pickable item of ``index`` a question shows (a candidate, or one of its items)."""
    offered = question["candidates"] if "head" in question else question["items"]
    return next(item["handle"] for item in offered if index_of(item, secret) == index)


def wire_body(question: dict, body: dict) -> dict:
    """An answer body written with item indices as the wire takes it: each index of ``choice`` or ``picks``
    that the question offers becomes its handle (others are sent as they are, for the server to refuse)."""
    offered = {index_of(item): item["handle"]
               for item in reversed(question["candidates"] if "head" in question else question["items"])}

    def one(x):
        return offered.get(x, x) if isinstance(x, int) and not isinstance(x, bool) else x
    out = dict(body)
    if "choice" in out:
        out["choice"] = one(out["choice"])
    if isinstance(out.get("picks"), list):
        out["picks"] = [one(x) for x in out["picks"]]
    return out


def post_answer(client, study_id: str, question: dict, **body):
    """Post ``body`` as the answer to ``question`` (item indices in ``choice`` / ``picks`` sent as handles)."""
    return client.post(f"/api/studies/{study_id}/answers", json=wire_body(question, {"token": question["token"],
                                                                                     **body}))


def run_rater(app, study_id: str, name: str, choose, seed: int = 0, conn=None):
    """One rater's whole session through the rater pages and API (as a Prolific participant ``name``),
    answering each question with ``choose(question, rng)`` (an item index); with ``conn``, the pending answers
    applied after every answer (:func:`drain`) and at the end (the study's learners and checks keep up as in a
    live study). Returns their test client (for the finish page)."""
    client, rng = app.test_client(), random.Random(seed)
    client.get(f"/s/{study_id}?PROLIFIC_PID={name}&STUDY_ID=s&SESSION_ID={name}")
    question = client.get(f"/api/studies/{study_id}/questions/next").get_json().get("question")
    while question is not None:
        body = post_answer(client, study_id, question, choice=choose(question, rng)).get_json()
        if "answer" not in body:
            break
        if conn is not None:
            drain(conn)
        question = body.get("next")
    if conn is not None:
        drain(conn)
    return client


def answer(client, question, choice=None, study_id="colours", **extra):
    """Post an answer: ``choice`` a handle, or an item index (sent as the handle of the offered item of it)."""
    if isinstance(choice, int) and not isinstance(choice, bool):
        choice = handle_of(question, choice)
    body = {"token": question["token"],
            "choice": question["candidates"][0]["handle"] if choice is None else choice, **extra}
    return client.post(f"/api/studies/{study_id}/answers", json=body)


def rate_by_position(rater, conn, study_id: str, items: list[Item], answers: int) -> None:
    """``rater`` (a test client) answers up to ``answers`` rating questions as a careful person would on
    items with 1-D positions: 5 for the same place down to 1 for the two ends; its answers are applied after
    each (:func:`drain`)."""
    truth = [item.position[0] for item in items]
    spread = max(truth) - min(truth)
    for _ in range(answers):
        response = rater.get(f"/api/studies/{study_id}/questions/next")
        if response.status_code != 200:
            break
        question = response.get_json()["question"]
        i, j = (index_of(it) for it in question["items"])
        value = round(5 - 4 * abs(truth[i] - truth[j]) / spread)
        rater.post(f"/api/studies/{study_id}/answers", json={"token": question["token"], "value": value})
        drain(conn)


def closer_candidate(question) -> int:
    """The index of the candidate a careful rater picks in a ``colour_items`` study (item i sits at
    position i): the one nearer the head, which is what a catch trial expects."""
    head = index_of(question["head"])
    return min((index_of(c) for c in question["candidates"]), key=lambda i: abs(i - head))


def csrf_token_of(html: str) -> str:
    """The CSRF token of a page: the login form's hidden field or the <meta name="csrf-token"> tag."""
    match = re.search(r'name="csrf[-_]token" (?:value|content)="([^"]+)"', html)
    assert match, "the page carries no CSRF token"
    return match.group(1)


def log_in(client, name=RESEARCHER, password=RESEARCHER_PASSWORD, **extra):
    token = csrf_token_of(client.get("/login").get_data(as_text=True))
    return client.post("/login", data={"username": name, "password": password, "csrf_token": token, **extra})

#: A study config fragment without catch trials and held-out questions, for tests that count questions and
#: answers (studies whose items have positions or labels get catch trials by default, and every study holds
#: a share of random questions out of training; their tests set them themselves).
NO_CHECKS = {"attention": {"rate": 0}, "heldout_share": 0}


# ------------------------------------------------------------------------------------- waiting
def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1, what: str = "condition"):
    """Call ``predicate`` until it returns something true, and return that; fail naming ``what``
    when ``timeout`` seconds pass first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not met within {timeout:.0f} s")


def healthy(base: str) -> bool:
    """Whether a served Proxima at ``base`` answers its health check."""
    try:
        return requests.get(f"{base}/api/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


# ------------------------------------------------------------------------------- proxima serve
class Serve:
    """One ``python -m webapp serve`` subprocess on 127.0.0.1, its output in a log file beside the
    instance folder.

    ``options`` are serve's own (``"--workers", "1"``); without ``redis_url`` serve starts its
    embedded Redis in the instance folder. ``env`` adds variables to this process's environment (a
    value of None removes one); REDIS_URL and PROXIMA_FAULT are never inherited.
    """

    def __init__(self, instance: Path, *options: str, redis_url: str | None = None, port: int | None = None,
                 web_workers: int = 1, env: dict | None = None):
        self.instance, self.port = Path(instance), port or free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = self.instance.parent / f"serve-{self.port}-{time.monotonic_ns()}.log"
        environment = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROXIMA_FAULT")}
        environment["PROXIMA_INSTANCE_PATH"] = str(self.instance)
        if redis_url:
            environment["REDIS_URL"] = redis_url
        for key, value in (env or {}).items():
            if value is None:
                environment.pop(key, None)
            else:
                environment[key] = str(value)
        with self.log.open("w") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "webapp", "serve", "--port", str(self.port),
                                          "--web-workers", str(web_workers), *options], env=environment,
                                         cwd=str(ROOT), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_healthy(self, timeout: float = 60.0) -> None:
        wait_for(lambda: healthy(self.base) or self.proc.poll() is not None, timeout, what="serve healthy")
        assert self.proc.poll() is None, self.output()

    def stop(self) -> int:
        """SIGINT, as Ctrl-C would; SIGKILL if serve has not stopped within a minute. Returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@contextmanager
def serving(instance: Path, *options: str, **kwargs) -> Iterator[Serve]:
    """A healthy :class:`Serve` for the ``with`` block, stopped after it (pass or fail)."""
    serve = Serve(instance, *options, **kwargs)
    try:
        serve.wait_healthy()
        yield serve
    finally:
        serve.stop()


@contextmanager
def serving_on_own_redis(instance: Path, env: dict | None = None) -> Iterator[tuple[Serve, str]]:
    """(serve, its Redis URL): `proxima serve` with two web processes and one RQ worker on an embedded
    Redis of its own, loopback exempt from rate limits (simulated raters answer faster than people)."""
    store = EmbeddedRedis(Path(instance) / "store", appendfsync="everysec")
    url = store.start()
    try:
        with serving(instance, "--workers", "1", redis_url=url, web_workers=2,
                     env={"PROXIMA_RATE_LIMIT_EXEMPT_ADDRESSES": "127.0.0.1", **(env or {})}) as serve:
            yield serve, url
    finally:
        store.stop()


def http_log_in(base: str, name: str, password: str) -> requests.Session:
    """A requests session logged in through a served Proxima's real login form."""
    from urllib.parse import urlsplit

    session = requests.Session()
    token = csrf_token_of(session.get(f"{base}/login", timeout=5).text)
    response = session.post(f"{base}/login", data={"username": name, "password": password, "csrf_token": token},
                            timeout=10)
    assert response.status_code == 200 and urlsplit(response.url).path != "/login", response.text
    return session


def watched_page(browser, url: str, **context_options) -> tuple:
    """(context, page, errors): a page of a fresh browser context (``context_options`` as Playwright's
    ``new_context`` takes them) opened at ``url``; ``errors`` collects the page's uncaught script errors."""
    context = browser.new_context(**context_options)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    return context, page, errors


def agree_to_consent(page) -> None:
    """Agree on a study's consent page and wait for the study page to load: a click on Start before
    its script has run would do nothing (a race a loaded machine loses)."""
    with page.expect_navigation():
        page.click("#consent-agree")


@contextmanager
def researcher_page(browser, base: str, path: str, viewport: dict | None = None) -> Iterator:
    """A page of a fresh browser context at ``base + path``, logged in on the way as RESEARCHER (the
    account must exist); after the ``with`` block no script error may have happened on it."""
    context, page, errors = watched_page(browser, f"{base}{path}", viewport=viewport or {"width": 1280, "height": 1000})
    page.fill("#username", RESEARCHER)
    page.fill("#password", RESEARCHER_PASSWORD)
    page.click("#login")
    yield page
    assert errors == [], errors
    context.close()


# -------------------------------------------------------------------------------------- files
def zip_of(members: dict[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """A zip archive holding ``members`` (name: bytes)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def zip_folder(folder: Path) -> bytes:
    """A zip archive of the files in ``folder`` (by name, sorted), as a researcher would zip them."""
    return zip_of({path.name: path.read_bytes() for path in sorted(Path(folder).iterdir())})


def upload_study(client, items: bytes, filename: str, config: tuple[bytes, str] | None = None, **fields):
    """POST the dashboard's new-study form: an items file, optionally a config file (bytes, name)."""
    data = {"name": "Uploaded", "algorithm": "random_triplets", "question_kind": "triplet", "start": "1",
            "items": (io.BytesIO(items), filename), **fields}
    if config:
        data["config_file"] = (io.BytesIO(config[0]), config[1])
    return client.post("/studies/new", data=data, content_type="multipart/form-data")


def save_load(state: dict) -> dict:
    """A planner state as the platform stores it: arrays through np.save (no pickle), the rest through JSON."""
    arrays, scalars = {}, {}
    for key, value in state.items():
        if isinstance(value, np.ndarray):
            buf = io.BytesIO()
            np.save(buf, value, allow_pickle=False)
            arrays[key] = buf.getvalue()
        else:
            scalars[key] = value
    restored = json.loads(json.dumps(scalars))
    for key, raw in arrays.items():
        restored[key] = np.load(io.BytesIO(raw), allow_pickle=False)
    return restored


def in_lockstep(first, second, oracle, rounds: int, batch: int, graphs: bool = False) -> None:
    """Two planners asked ``batch`` questions ``rounds`` times must ask the same; both then observe the
    one oracle's answers (and, with ``graphs``, build their neighbour graphs, as a pass does)."""
    for _ in range(rounds):
        asked = first.next_questions(batch)
        assert second.next_questions(batch) == asked
        answers = oracle.answer(asked)
        first.observe(answers)
        second.observe(answers)
        if graphs:
            first.neighbor_graph()
            second.neighbor_graph()


# ------------------------------------------------------------------ what a test needs installed
def in_ci() -> bool:
    """Whether the tests run under CI (``CI`` set to anything but empty, 0 or false)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require(available: bool, what: str, install: str) -> None:
    """Stop a test that cannot run without ``what``: under CI a failure naming what to install (CI
    installs it, so its absence is a broken CI machine), elsewhere a skip that says why."""
    if available:
        return
    if in_ci():
        pytest.fail(f"{what} is required under CI and is missing: {install}", pytrace=False)
    pytest.skip(f"{what} is not installed ({install})")


#: The alien-egg crowd's answers among the shared data sets (see :func:`shared_data_file`).
EGG_ANSWERS = "alien_eggs/responses.csv.zip"


def shared_data_file(relative: str) -> Path:
    """A file of the human-collected data sets (``../shared/data`` beside the repository, see
    simulation/datasets.py; they are not part of the repository). A test that needs one and does not
    find it is skipped with the missing path as its reason, under CI too (``-rs`` lists it)."""
    from simulation.datasets import default_data_dir

    path = default_data_dir() / relative
    if not path.exists() and in_ci():
        pytest.fail(f"needs {path} (the human-collected data beside the repository: shared/data/{relative}); "
                    "CI has it beside the clone, or set PROXIMA_DATA_DIR", pytrace=False)
    if not path.exists():
        pytest.skip(f"needs {path} (the human-collected data beside the repository: shared/data/{relative}), "
                    "which this checkout does not have")
    return path
