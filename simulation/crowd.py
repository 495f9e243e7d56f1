"""Simulated crowds: raters that answer a running Proxima server over HTTP from a known truth.

Each simulated rater is a real HTTP client with its own cookie session, exactly like a
browser, so a simulation exercises the same web processes, pool and workers as real people.
The truth is a set of points, a distance matrix or the alien-egg data with a noise model
fitted to the human answers. Must never import Flask, Redis, the workers or the web app's
modules: it is a client, speaking to a server over HTTP only (tests/test_import_rules.py).
"""
from __future__ import annotations

import csv
import json
import math
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.kinds import QuestionKind, get_kind
from engine.registry import get_algorithm

from .oracles import HUMAN_LAPSE, HUMAN_SCALE

#: spread (sigma of log think time) of the log-normal think time
THINK_SPREAD = 0.5
#: a rater gives up after this many failures in a row (the server is gone or refuses everything)
MAX_CONSECUTIVE_FAILURES = 20
HTTP_TIMEOUT = 30.0
#: 409 codes after which the server has nothing more for a rater (the study or this rater is done)
DONE_CODES = ("study_complete", "study_not_running", "rater_done", "budget_reached", "rater_stopped")
CSRF_FIELD = re.compile(r'name="csrf_token"[^>]*value="([^"]+)"')
ORACLE_HELP = ("points:FILE.csv (columns id,x1,x2,...), matrix:FILE.csv (header row of ids, then an n x n "
               "distance matrix), eggs (the alien-egg 1-D truth, human-fitted noise) or eggs:DATA_DIR")


class SimulationError(ValueError):
    """A truth, noise setting or study the simulator cannot use; the message says what to fix."""


# ---------------------------------------------------------------------------- truth
@dataclass(frozen=True)
class Truth:
    """The known metric simulated raters answer from.

    ``ids`` item ids (as in the study's items), ``distances`` ndarray of shape (n, n),
    symmetric, zero diagonal, scaled so the largest distance is 1. ``logistic_scale`` and
    ``lapse`` are the human noise model fitted to this truth's own answers (alien eggs), the
    scale in the same units, else None. ``points`` is
    ndarray of shape (n, d) when the truth came from points.
    """

    ids: list[str]
    distances: np.ndarray
    source: str
    logistic_scale: float | None = None
    points: np.ndarray | None = None
    lapse: float | None = None
    index: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "index", {item: i for i, item in enumerate(self.ids)})

    @property
    def n_items(self) -> int:
        return len(self.ids)

    def positions(self, item_ids: Iterable[str]) -> list[int]:
        try:
            return [self.index[i] for i in item_ids]
        except KeyError as exc:
            raise SimulationError(f"the study shows item {exc.args[0]!r}, which the truth ({self.source}) does "
                                  "not know: simulate a study created from the same items") from None


def _normalised(distances: np.ndarray, source: str) -> np.ndarray:
    D = np.asarray(distances, dtype=np.float64)
    if D.ndim != 2 or D.shape[0] != D.shape[1]:
        raise SimulationError(f"{source}: a distance matrix must be square, got shape {D.shape}")
    if D.shape[0] < 3:
        raise SimulationError(f"{source}: a truth needs at least 3 items, got {D.shape[0]}")
    if not np.all(np.isfinite(D)) or np.any(D < 0):
        raise SimulationError(f"{source}: distances must be finite and non-negative")
    if not np.allclose(D, D.T):
        raise SimulationError(f"{source}: the distance matrix must be symmetric")
    if not np.allclose(np.diag(D), 0):
        raise SimulationError(f"{source}: the diagonal (an item's distance to itself) must be 0")
    top = float(D.max())
    if top <= 0:
        raise SimulationError(f"{source}: all distances are 0; there is nothing to learn")
    return D / top


def _check_ids(ids: list[str], source: str) -> None:
    if any(not i for i in ids):
        raise SimulationError(f"{source}: every item needs a non-empty id")
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise SimulationError(f"{source}: item ids must be unique; repeated: {', '.join(repeated[:10])}")


def _read_rows(path: Path, what: str) -> list[list[str]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as fh:
            rows = [row for row in csv.reader(fh) if any(cell.strip() for cell in row)]
    except FileNotFoundError:
        raise SimulationError(f"{what} file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise SimulationError(f"cannot read {what} file {path}: {exc}") from None
    if len(rows) < 2:
        raise SimulationError(f"{what} file {path} needs a header row and at least one data row")
    return rows


def _floats(cells: list[str], where: str) -> list[float]:
    try:
        return [float(c) for c in cells]
    except ValueError:
        raise SimulationError(f"{where}: every value must be a number, got {cells}") from None


def points_truth(path: str | Path) -> Truth:
    """Points from a CSV with columns ``id,x1,x2,...`` (any coordinate names after ``id``)."""
    path = Path(path)
    rows = _read_rows(path, "points")
    header = [h.strip() for h in rows[0]]
    if header[0].lower() != "id" or len(header) < 2:
        raise SimulationError(f"{path}: the header must be id,x1,x2,... (an id column, then coordinates)")
    ids, coords = [], []
    for line, row in enumerate(rows[1:], start=2):
        if len(row) != len(header):
            raise SimulationError(f"{path}, row {line}: {len(row)} cells, the header has {len(header)}")
        ids.append(row[0].strip())
        coords.append(_floats(row[1:], f"{path}, row {line}"))
    _check_ids(ids, str(path))
    X = np.asarray(coords, dtype=np.float64)
    from engine.truth import DENSE_ITEMS, PointDistances, diameter

    if len(X) > DENSE_ITEMS:
        # a large study: distances are read when a rater answers (O(n·d) memory, not n x n)
        if len(X) < 3 or not np.all(np.isfinite(X)):
            raise SimulationError(f"{path}: coordinates must be finite numbers")
        top = diameter(X)
        if top <= 0:
            raise SimulationError(f"{path}: all points coincide; there is nothing to learn")
        return Truth(ids, PointDistances(X, top), source=f"points:{path}", points=X)
    diff = X[:, None, :] - X[None, :, :]
    D = np.sqrt((diff**2).sum(axis=-1))
    return Truth(ids, _normalised(D, str(path)), source=f"points:{path}", points=X)


def matrix_truth(path: str | Path) -> Truth:
    """A distance matrix from a CSV: a header row of item ids, then n rows of n distances.

    A leading id column is allowed (an empty first header cell, or one more header cell than
    rows have numbers).
    """
    path = Path(path)
    rows = _read_rows(path, "matrix")
    header = [h.strip() for h in rows[0]]
    body = rows[1:]
    labelled = header[0] == "" or header[0].lower() == "id"
    ids = header[1:] if labelled else header
    matrix = []
    for line, row in enumerate(body, start=2):
        cells = row[1:] if labelled else row
        if len(cells) != len(ids):
            raise SimulationError(f"{path}, row {line}: {len(cells)} distances for {len(ids)} items")
        if labelled and row[0].strip() and row[0].strip() != ids[line - 2]:
            raise SimulationError(f"{path}, row {line}: labelled {row[0].strip()!r}, expected {ids[line - 2]!r}")
        matrix.append(_floats(cells, f"{path}, row {line}"))
    if len(matrix) != len(ids):
        raise SimulationError(f"{path}: {len(ids)} ids in the header but {len(matrix)} rows; the matrix must be n x n")
    _check_ids(ids, str(path))
    return Truth(ids, _normalised(np.asarray(matrix), str(path)), source=f"matrix:{path}")


def eggs_truth(data_dir: str | Path | None = None) -> Truth:
    """The alien eggs: 1-D truth (the smoothness NNNN of ``iNNNN``), human noise fitted to people."""
    from .datasets import load_alien_eggs
    from .noise import fit_human_noise

    try:
        eggs = load_alien_eggs(data_dir)
    except FileNotFoundError as exc:
        raise SimulationError(f"{exc}; pass eggs:DATA_DIR (the folder holding alien_eggs/)") from None
    D = eggs.distances
    fit = fit_human_noise(D, eggs.triplets)
    return Truth(list(eggs.items), D, source=f"eggs:{data_dir}" if data_dir else "eggs",
                 logistic_scale=fit.scale, points=eggs.coordinates.astype(np.float64)[:, None], lapse=fit.lapse)


def load_truth(spec: str) -> Truth:
    """Parse an ``--oracle`` spec (see :data:`ORACLE_HELP`) into a :class:`Truth`."""
    spec = (spec or "").strip()
    kind, _, arg = spec.partition(":")
    if kind == "points" and arg:
        return points_truth(arg)
    if kind == "matrix" and arg:
        return matrix_truth(arg)
    if kind == "eggs":
        return eggs_truth(arg or None)
    if kind in ("points", "matrix"):
        raise SimulationError(f"oracle {spec!r} needs a file: {kind}:FILE.csv")
    raise SimulationError(f"unknown oracle {spec!r}; use {ORACLE_HELP}")


# ---------------------------------------------------------------------------- answers
@dataclass(frozen=True)
class NoiseModel:
    """How a simulated rater turns the truth into answers.

    Triplets: simulation.oracles' "human" model, the one noise model of every simulation here
    (benchmarks, ``proxima plan``, ``proxima simulate``): P(a wins) = λ/2 + (1 − λ) / (1 +
    exp((d(h,a) − d(h,b)) / ``logistic_scale``)) with λ = ``lapse`` (a scale of 0 answers the
    truth exactly, ties to a). Ratings: value = min + (max − min)·(1 − d + N(0, ``sigma``²)),
    clipped and snapped to the step. Distances are the truth's, scaled to [0, 1].
    """

    sigma: float = 0.0
    logistic_scale: float = 0.0
    lapse: float = 0.0
    #: ratings as noisy as people's instead (``simulation.ratings.RatingNoise``, its SDs taken as shares
    #: of its own scale and applied to the question's): each simulated rater draws an offset and a slope
    realistic_ratings: Any = None

    def __post_init__(self) -> None:
        if not (self.sigma >= 0 and math.isfinite(self.sigma)):
            raise SimulationError(f"noise must be a number >= 0, got {self.sigma!r}")
        if not (self.logistic_scale >= 0 and math.isfinite(self.logistic_scale)):
            raise SimulationError(f"the logistic noise scale must be a number >= 0, got {self.logistic_scale!r}")
        if not 0 <= self.lapse <= 1:
            raise SimulationError(f"the lapse rate must lie in [0, 1], got {self.lapse!r}")


#: Gaussian sigma of simulated ratings (on similarity in [0, 1]) when --noise is not given.
RATING_SIGMA = 0.1


def noise_model(truth: Truth, noise: float | None = None, lapse: float | None = None) -> tuple[NoiseModel, str]:
    """The raters' noise for ``truth`` and a one-line description of it.

    Triplets always follow the human model (logistic + lapse). ``noise`` is its logistic scale
    as a share of the largest distance (0: the truth's own answer); without it, the scale fitted
    to the truth's own answers (eggs) or else the alien-egg fit (:data:`HUMAN_SCALE`).
    ``lapse`` is the share of answers given at random; without it, the fitted rate or
    :data:`HUMAN_LAPSE`. Ratings get Gaussian noise of sigma ``noise`` (default
    :data:`RATING_SIGMA`) on the similarity.
    """
    fitted = truth.logistic_scale is not None
    if noise is None:
        scale = truth.logistic_scale if fitted else HUMAN_SCALE
        where = "fitted to this truth's human answers" if fitted else "the alien-egg human fit"
    else:
        scale, where = float(noise), "--noise"
    if lapse is None:
        lapse = truth.lapse if fitted and truth.lapse is not None else HUMAN_LAPSE
        lapse_where = "fitted" if fitted and truth.lapse is not None else "human default"
    else:
        lapse_where = "--lapse"
    sigma = RATING_SIGMA if noise is None else float(noise)
    model = NoiseModel(sigma=sigma, logistic_scale=scale, lapse=lapse)
    return model, (f"triplets human (logistic scale {scale:.4f} [{where}], lapse {model.lapse:.3f} "
                   f"[{lapse_where}]); ratings Gaussian, sigma {sigma:g}")


def snap(value: float, scale: dict) -> float | int:
    """``value`` clipped to [min, max] and rounded to the nearest allowed step."""
    lo, hi = float(scale["min"]), float(scale["max"])
    value = min(max(float(value), lo), hi)
    step = scale.get("step")
    if step:
        n_steps = math.floor((hi - lo) / step + 1e-9)
        value = lo + min(max(round((value - lo) / step), 0), n_steps) * step
        value = round(value, 10)
    if float(value).is_integer() and all(float(scale[k]).is_integer() for k in ("min", "max")) \
            and (not step or float(step).is_integer()):
        return int(value)
    return value


def check_scale(scale: object) -> dict:
    if not isinstance(scale, dict):
        raise SimulationError(f"the rating question has no usable scale: {scale!r}")
    try:
        lo, hi = float(scale["min"]), float(scale["max"])
    except (KeyError, TypeError, ValueError):
        raise SimulationError(f"the rating scale needs numeric min and max: {scale!r}") from None
    if not hi > lo:
        raise SimulationError(f"the rating scale's max must exceed its min: {scale!r}")
    return scale


#: Names a shown item's id from its payload (``item -> id``). The server names shown items by handles new
#: for every question (no id, no index on the wire), so a simulator answering from the truth is given one
#: by a caller that holds the server's secret key: ``webapp.handles.shown_index`` reads a handle's index,
#: and the study's item list its id (``webapp.cli.simulate``, tests and benchmarks build it).
Identify = Callable[[dict], str]


def payload_id(item: dict) -> str:
    """The id a shown item's payload carries (the researcher's preview; the wire to raters carries none)."""
    if "id" not in item:
        raise SimulationError("the server names shown items by handles only: a simulated rater who answers "
                              "from the truth needs the server's secret key and the study's items to read "
                              "them (run the simulator on the server's instance folder)")
    return item["id"]


class Rater:
    """One simulated person: answers questions from the truth (or at random if careless). ``identify``
    names a shown item's id (:data:`Identify`); the answer names items by their ``handle``."""

    def __init__(self, truth: Truth, noise: NoiseModel, careless: bool, rng: random.Random,
                 identify: Identify = payload_id) -> None:
        self.truth = truth
        self.noise = noise
        self.careless = careless
        self.rng = rng
        self.identify = identify
        self._oracles: dict = {}
        self._use_of_scale: tuple[float, float] | None = None  # (offset, slope) of realistic ratings

    def answer(self, question: dict) -> dict:
        """The answer body fields for one question payload: ``value`` for a kind rated on the study's scale
        or answered with another value (the kind's simulated rater), else the picks of the kind's simulated
        rater (``engine.kinds``), sent as ``choice`` for one pick."""
        try:
            kind = get_kind(question.get("kind"))
        except ValueError as exc:
            raise SimulationError(f"the server asked a question the simulator does not know: {exc}") from None
        if kind.on_scale:
            return {"value": self.rating_value(question)}
        if kind.answered_by == "value":
            return {"value": self.screen_value(kind, question)}
        picks = self.screen_picks(kind, question)
        return {"choice": picks[0]} if len(picks) == 1 and "select" not in question else {"picks": list(picks)}

    def screen_picks(self, kind: QuestionKind, question: dict) -> list:
        """The items this rater picks on a screen (their handles, in order): simulation.oracles' human model
        of the kind on the truth, or (careless) a uniformly random answer."""
        shown = [question["head"], *question["candidates"]] if kind.headed else list(question["items"])
        offered = shown[1:] if kind.headed else shown
        k = int(question.get("select", 1))
        if self.careless:
            return [item["handle"] for item in self.rng.sample(offered, k)]
        positions = self.truth.positions([self.identify(item) for item in shown])
        if len(set(positions)) < len(positions):
            return self._copy_picks(kind, shown, positions, offered, k)
        at = {p: item["handle"] for p, item in zip(positions, shown, strict=True)}
        observation = self.oracle(kind, k).answer([kind.proposal_of(positions)])[0]
        return [at[p] for p in kind.picks_of(observation)]

    def _copy_picks(self, kind: QuestionKind, shown: list[dict], positions: list[int], offered: list[dict],
                    k: int) -> list:
        """Picks on a screen showing an item twice (a catch trial's copy): a person sees the same picture
        twice whatever the truth's distances say, so each pick is, with the lapse rate, a uniform pick of
        those left (as the oracles' lapses), else the copy of the head (headed kinds) or the item shown once
        (an odd one out) while it is left, then a uniform one."""
        places = positions[1:] if kind.headed else positions
        want = ({i for i, p in enumerate(places) if p == positions[0]} if kind.headed
                else {i for i, p in enumerate(places) if places.count(p) == 1})
        left, picks = list(range(len(offered))), []
        for _ in range(k):
            target = [i for i in left if i in want]
            pick = (target[0] if target and self.rng.random() >= self.noise.lapse
                    else left[self.rng.randrange(len(left))])
            left.remove(pick)
            picks.append(offered[pick]["handle"])
        return picks

    def screen_value(self, kind: QuestionKind, question: dict) -> Any:
        """The value this rater gives a screen of a kind answered with one (not on the study's scale: same or
        different): the kind's simulated rater on the truth (an item against its copy is at distance 0), a
        careless rater's lapsing every time (a uniformly random answer)."""
        positions = self.truth.positions([self.identify(item) for item in question["items"]])
        rater = self.oracle(kind, lapse=1.0 if self.careless else None)
        return kind.value_of(rater.answer([kind.proposal_of(positions)])[0])

    def oracle(self, kind: QuestionKind, n_select: int = 1, lapse: float | None = None) -> Any:
        """simulation.oracles' human model of ``kind`` on this truth (one per kind, number of picks and lapse
        rate: the noise model's unless given), seeded from the rater's generator."""
        lapse = self.noise.lapse if lapse is None else lapse
        key = (kind.name, n_select, lapse)
        if key not in self._oracles:
            self._oracles[key] = kind.simulated_rater(
                self.truth.distances, self.noise.logistic_scale, lapse, {"n_select": n_select},
                random_state=self.rng.getrandbits(32))
        return self._oracles[key]

    def rating_value(self, question: dict) -> float | int:
        scale = check_scale(question.get("scale"))
        lo, hi = float(scale["min"]), float(scale["max"])
        if self.careless:
            return snap(self.rng.uniform(lo, hi), scale)
        i, j = self.truth.positions([self.identify(item) for item in question["items"]])
        similarity = 1.0 - self.truth.distances[i, j]
        if self.noise.realistic_ratings is not None:
            return snap(self._realistic(similarity, lo, hi), scale)
        if self.noise.sigma > 0:
            similarity += self.rng.gauss(0.0, self.noise.sigma)
        return snap(lo + (hi - lo) * similarity, scale)


    def _realistic(self, similarity: float, lo: float, hi: float) -> float:
        """A rating as people give one (:class:`simulation.ratings.RatingNoise`): this rater's offset and
        slope (drawn once), the noise, all as shares of the scale's span."""
        model = self.noise.realistic_ratings
        unit = (hi - lo) / (model.scale.high - model.scale.low)
        if self._use_of_scale is None:
            self._use_of_scale = (self.rng.gauss(0.0, model.offset_sd * unit),
                                  math.exp(self.rng.gauss(0.0, model.slope_sd)))
        offset, slope = self._use_of_scale
        mid = 0.5 * (lo + hi)
        return mid + offset + slope * (lo + (hi - lo) * similarity - mid) + self.rng.gauss(0.0, model.noise_sd * unit)


def think_seconds(mean: float, rng: random.Random) -> float:
    """A log-normal think time with mean ``mean`` seconds (0: none)."""
    if mean <= 0:
        return 0.0
    return rng.lognormvariate(math.log(mean) - THINK_SPREAD**2 / 2, THINK_SPREAD)


# ---------------------------------------------------------------------------- the crowd
@dataclass
class Sent:
    """One answer the simulator sent and the server accepted."""

    rater: str
    answer_id: str
    token: str
    kind: str
    items: list[str]
    answer: dict
    received_at: float
    answered_at: float
    careless: bool


@dataclass
class Report:
    """What a simulation did. Times are ``time.monotonic()`` seconds."""

    accepted: list[Sent] = field(default_factory=list)
    errors: Counter = field(default_factory=Counter)
    get_ms: list[float] = field(default_factory=list)
    post_ms: list[float] = field(default_factory=list)
    #: (rater, token, received_at, released_at): how long each question was pending at a rater
    held: list[tuple[str, str, float, float]] = field(default_factory=list)
    stop_reason: str = ""
    seconds: float = 0.0
    careless_raters: list[str] = field(default_factory=list)

    @property
    def answers(self) -> int:
        return len(self.accepted)

    @property
    def answers_per_second(self) -> float:
        return self.answers / self.seconds if self.seconds > 0 else 0.0

    def latency_ms(self, q: float) -> float:
        both = self.get_ms + self.post_ms
        return float(np.percentile(both, q)) if both else float("nan")

    def to_dict(self) -> dict:
        return {
            "answers": self.answers, "seconds": self.seconds, "answers_per_second": self.answers_per_second,
            "errors": dict(self.errors), "stop_reason": self.stop_reason,
            "latency_ms": {"p50": self.latency_ms(50), "p95": self.latency_ms(95),
                           "requests": len(self.get_ms) + len(self.post_ms)},
            "careless_raters": self.careless_raters,
        }


class _Budget:
    """At most ``limit`` accepted answers in total: a rater reserves a slot before posting."""

    def __init__(self, limit: int | None):
        self.limit = limit
        self.used = 0
        self.lock = threading.Lock()

    def reserve(self) -> bool:
        with self.lock:
            if self.limit is not None and self.used >= self.limit:
                return False
            self.used += 1
            return True

    def release(self) -> None:
        with self.lock:
            self.used -= 1


class _Failure(Exception):
    def __init__(self, code: str):
        super().__init__(code)
        self.code = code


#: What the rater page's consent form posts to: its presence means the page asks for consent.
CONSENT_FORM = "/consent\""


class Crowd:
    """Simulated raters driving one study of a running server, one thread and HTTP session each."""

    def __init__(self, base_url: str, study_id: str, truth: Truth, noise: NoiseModel, raters: int = 10,
                 careless: float = 0.0, think: float = 0.0, max_answers: int | None = None,
                 duration: float | None = None, seed: int | None = None, rater_prefix: str = "sim",
                 identify: Identify = payload_id) -> None:
        if raters < 1:
            raise SimulationError("need at least one rater")
        if not 0 <= careless <= 1:
            raise SimulationError(f"the careless share must lie in [0, 1], got {careless}")
        if think < 0:
            raise SimulationError("think time must be >= 0 seconds")
        self.base = base_url.rstrip("/")
        self.study_id = study_id
        self.truth = truth
        self.noise = noise
        self.n_raters = raters
        self.careless = careless
        self.think = think
        self.duration = duration
        self.budget = _Budget(max_answers)
        self.seed = seed
        self.rater_prefix = rater_prefix
        self.identify = identify
        self.stop = threading.Event()
        self.report = Report()
        self.lock = threading.Lock()
        self.done_codes: Counter = Counter()
        self.fatal: str | None = None

    # -------------------------------------------------------------- one rater
    def _request(self, session, method: str, url: str, timings: list[float], **kwargs):
        import requests

        started = time.perf_counter()
        try:
            response = session.request(method, url, timeout=HTTP_TIMEOUT, **kwargs)
        except requests.RequestException as exc:
            raise _Failure("connection_error") from exc
        timings.append((time.perf_counter() - started) * 1000.0)
        return response

    @staticmethod
    def _code(response) -> str:
        try:
            return response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            return f"http_{response.status_code}"

    def _error(self, code: str) -> None:
        with self.lock:
            self.report.errors[code] += 1

    def _fetch(self, session) -> dict | None:
        """The next question, or None once the server has nothing more to ask. A study asking for consent
        (again: the first visit's page gave it) is agreed to and asked again, as a person would: not an error."""
        url = f"{self.base}/api/studies/{self.study_id}/questions/next"
        response = self._request(session, "GET", url, self.report.get_ms)
        if response.status_code == 403 and self._code(response) == "consent_required":
            self._consent(session)
            response = self._request(session, "GET", url, self.report.get_ms)
        if response.status_code == 200:
            return response.json()["question"]
        code = self._code(response)
        if response.status_code == 409 and code in DONE_CODES:
            self._done(code)
            return None
        if response.status_code == 404 and code == "unknown_study":
            self.fatal = f"the server has no study '{self.study_id}'"
            self.stop.set()
            return None
        raise _Failure(code)

    def _consent(self, session, page=None) -> None:
        """Agree to the study's consent form (``page``, the consent page if already fetched), as a person
        clicking "I agree" would."""
        if page is None:
            page = self._request(session, "GET", f"{self.base}/s/{self.study_id}", self.report.get_ms)
        found = CSRF_FIELD.search(page.text)
        self._request(session, "POST", f"{self.base}/s/{self.study_id}/consent", self.report.post_ms,
                      data={"decision": "agree", "csrf_token": found.group(1) if found else ""})

    def _done(self, code: str) -> None:
        with self.lock:
            self.done_codes[code] += 1

    def _post(self, session, body: dict):
        url = f"{self.base}/api/studies/{self.study_id}/answers"
        try:
            return self._request(session, "POST", url, self.report.post_ms, json=body)
        except _Failure:
            # The answer may have been stored before the connection broke: sending the same
            # token again is safe (the server keeps the first answer and says so).
            self._error("connection_error")
            return self._request(session, "POST", url, self.report.post_ms, json=body)

    def _rater(self, n: int) -> None:
        import requests

        name = f"{self.rater_prefix}-{n}"
        rng = random.Random(None if self.seed is None else self.seed * 100003 + n)
        careless = n < round(self.careless * self.n_raters)
        if careless:
            with self.lock:
                self.report.careless_raters.append(name)
        person = Rater(self.truth, self.noise, careless, rng, self.identify)
        session = requests.Session()
        question, received, failures = None, 0.0, 0
        try:
            page = self._request(session, "GET", f"{self.base}/s/{self.study_id}",
                                 self.report.get_ms, params={"rater": name})
            if page.status_code == 404:
                self.fatal = f"the server has no study '{self.study_id}'"
                self.stop.set()
                return
            if CONSENT_FORM in page.text:  # the first visit shows the consent form: agree, as people do
                self._consent(session, page)
            while not self.stop.is_set():
                try:
                    if question is None:
                        question = self._fetch(session)
                        received = time.monotonic()
                        if question is None:
                            return
                    if self.stop.wait(think_seconds(self.think, rng)):
                        return
                    if not self.budget.reserve():
                        self.stop.set()
                        return
                    body = {"token": question["token"], **person.answer(question),
                            "response_ms": int((time.monotonic() - received) * 1000)}
                    try:
                        response = self._post(session, body)
                    except _Failure:
                        self.budget.release()
                        raise
                    released = time.monotonic()
                    self.report.held.append((name, question["token"], received, released))
                    if response.status_code == 201:
                        result = response.json()
                        self._accept(name, question, body, result["answer"]["id"], received, released, careless)
                        question, received = result.get("next"), released
                        failures = 0
                        if question is None and (result.get("done") or {}).get("code"):
                            self._done(result["done"]["code"])
                            return
                        continue
                    code = self._code(response)
                    if response.status_code == 409 and code in DONE_CODES:
                        self.budget.release()
                        self._done(code)
                        question = None
                        return
                    error = response.json().get("error", {}) if code != f"http_{response.status_code}" else {}
                    if code == "already_answered" and error.get("answer_id"):
                        # our own earlier attempt went through before the connection broke
                        self._accept(name, question, body, error["answer_id"], received, released, careless)
                    else:
                        self.budget.release()
                        self._error(code)
                        failures += 1
                    question = None
                except _Failure as failure:
                    self._error(failure.code)
                    failures += 1
                    if question is not None:
                        self.report.held.append((name, question["token"], received, time.monotonic()))
                    question = None
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    self._done("gave_up")
                    return
                if failures:
                    self.stop.wait(min(2.0, 0.05 * 2 ** min(failures, 6)))
        except SimulationError as exc:
            self.fatal = str(exc)
            self.stop.set()
        finally:
            if question is not None:
                # a question still in hand when the rater stops stays pending until it expires
                self.report.held.append((name, question["token"], received, math.inf))
            session.close()

    def _accept(self, name, question, body, answer_id, received, answered, careless) -> None:
        shown = [question["head"], *question["candidates"]] if "head" in question else question.get("items", [])
        items = [self.identify(item) for item in shown]
        answer = {k: v for k, v in body.items() if k in ("choice", "picks", "value")}
        sent = Sent(name, str(answer_id), question["token"], question.get("kind", ""), items, answer,
                    received, answered, careless)
        with self.lock:
            self.report.accepted.append(sent)

    # -------------------------------------------------------------- all raters
    def run(self, progress: Callable[[Report, float], None] | None = None, every: float = 5.0) -> Report:
        """Run every rater until the answer budget, the duration or the study is exhausted."""
        threads = [threading.Thread(target=self._rater, args=(n,), name=f"rater-{n}", daemon=True)
                   for n in range(self.n_raters)]
        started = time.monotonic()
        deadline = started + self.duration if self.duration else math.inf
        next_report = started + every
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                now = time.monotonic()
                if now >= deadline and not self.stop.is_set():
                    self.stop.set()
                    self.report.stop_reason = f"duration of {self.duration:g} s reached"
                if progress is not None and now >= next_report:
                    self.report.seconds = now - started
                    progress(self.report, self.report.seconds)
                    next_report = now + every
                time.sleep(0.1)
        except KeyboardInterrupt:
            # Ctrl-C: let every rater finish the request in hand, then report what was done
            self.stop.set()
            self.report.stop_reason = "interrupted"
            for thread in threads:
                thread.join(HTTP_TIMEOUT)
        self.report.seconds = time.monotonic() - started
        if self.fatal:
            raise SimulationError(self.fatal)
        if not self.report.stop_reason:
            if self.budget.limit is not None and self.report.answers >= self.budget.limit:
                self.report.stop_reason = f"{self.budget.limit} answers sent"
            elif self.done_codes:
                reasons = ", ".join(f"{code} ({count} raters)" for code, count in sorted(self.done_codes.items()))
                self.report.stop_reason = f"the server stopped asking: {reasons}"
            else:
                self.report.stop_reason = "every rater stopped"
        return self.report


# ---------------------------------------------------------------------------- results
def graph_accuracy(graph: dict, truth: Truth) -> dict:
    """How well a learned NN graph (``workers.results.exports.nn_graph`` shape) matches the truth.

    ``accuracy``: share of the graph's items whose returned nearest neighbour (lowest rank)
    is a true nearest neighbour (ties in the truth count as correct; an item without an edge
    counts as wrong). ``knn_accuracy``: the same for the whole returned k-NN set (an item with
    fewer than k edges counts as wrong). Both are scored by ``engine.truth.neighbor_wrong``.
    """
    from engine.graph import NO_NEIGHBOR
    from engine.truth import PointDistances, neighbor_wrong

    items = list(graph.get("items") or [])
    if not items:
        raise SimulationError("the learned graph has no items")
    pos = truth.positions(items)
    on_demand = isinstance(truth.distances, PointDistances)
    D = truth.distances if on_demand else np.array(truth.distances, dtype=np.float64)
    # the truth for the scores: the matrix, or (a large study) its points, neighbours by blocks of rows
    given = {"points": truth.distances.points} if on_demand else {"distances": D}
    by_source: dict[str, list[tuple[int, str]]] = {}
    certified = Counter()
    for edge in graph.get("edges", []):
        by_source.setdefault(edge["source"], []).append((int(edge.get("rank", 0)), edge["target"]))
        certified[edge["source"]] += bool(edge.get("certified"))
    k = int(graph.get("k") or 1)
    width = min(k, len(D) - 1)  # a k-NN set of more than the other items cannot be right
    picks = np.full((len(D), width), NO_NEIGHBOR, dtype=np.int64)  # rows of the truth; -1: no edge there
    short = np.zeros(len(D), dtype=bool)  # fewer than k edges: the k-NN set is wrong
    certified_items = 0
    for item, i in zip(items, pos, strict=True):
        edges = sorted(by_source.get(item, []))
        targets = truth.positions([t for _, t in edges[:width]])
        picks[i, :len(targets)] = targets
        short[i] = len(edges) < k
        certified_items += bool(edges) and certified[item] > 0 and certified[item] == len(edges)
    nn_wrong = neighbor_wrong(picks[:, :1], rank=1, **given)[pos]
    knn_wrong = (neighbor_wrong(picks, rank=width, **given) | short)[pos]
    n = len(items)
    return {"items": n, "k": k, "accuracy": int((~nn_wrong).sum()) / n,
            "knn_accuracy": int((~knn_wrong).sum()) / n, "certified": certified_items / n}


def summary_lines(report: Report) -> list[str]:
    errors = ", ".join(f"{code} {count}" for code, count in sorted(report.errors.items())) or "none"
    return [
        f"Stopped: {report.stop_reason}.",
        f"Answers accepted: {report.answers} in {report.seconds:.1f} s ({report.answers_per_second:.1f} answers/s)",
        f"HTTP latency: p50 {report.latency_ms(50):.1f} ms, p95 {report.latency_ms(95):.1f} ms "
        f"over {len(report.get_ms) + len(report.post_ms)} requests",
        f"Errors: {errors}",
    ]


def progress_line(report: Report, seconds: float) -> str:
    errors = ", ".join(f"{code} {count}" for code, count in sorted(report.errors.items())) or "no errors"
    rate = report.answers / seconds if seconds > 0 else 0.0
    return f"[{seconds:6.1f} s] {report.answers} answers, {rate:.1f} answers/s, {errors}"


def write_log(report: Report, path: str | Path) -> None:
    """The accepted answers as JSON lines (one per answer the server accepted)."""
    with Path(path).open("w", encoding="utf-8") as fh:
        for s in report.accepted:
            fh.write(json.dumps({"answer_id": s.answer_id, "rater": s.rater, "kind": s.kind, "items": s.items,
                                 **s.answer, "careless": s.careless, "token": s.token}) + "\n")


# ---------------------------------------------------------------------------- setup
SETUP_SOURCES = "clusters (the ANNTri paper's 10 x 10 circle clusters), eggs, points:FILE.csv or matrix:FILE.csv"


def clusters_truth(n_clusters: int = 10, cluster_size: int = 10, seed: int = 0) -> tuple[Truth, np.ndarray]:
    """The ANNTri paper's circle clusters as a truth; returns (truth, cluster labels)."""
    from .oracles import circle_clusters

    X, labels = circle_clusters(n_clusters, cluster_size, random_state=seed)
    ids = [f"p{c:02d}-{m:02d}" for c in range(n_clusters) for m in range(cluster_size)]
    diff = X[:, None, :] - X[None, :, :]
    D = np.sqrt((diff**2).sum(axis=-1))
    return Truth(ids, _normalised(D, "clusters"), source="clusters", points=X), labels


def setup_truth(source: str, seed: int = 0) -> tuple[Truth, list[str] | None]:
    source = (source or "").strip()
    if source == "clusters" or source.startswith("clusters:"):
        shape = source.partition(":")[2] or "10x10"
        try:
            n_clusters, size = (int(x) for x in shape.lower().split("x"))
        except ValueError:
            raise SimulationError(f"clusters:CxS wants two integers like clusters:10x10, not {source!r}") from None
        try:
            truth, labels = clusters_truth(n_clusters, size, seed)
        except ValueError as exc:
            raise SimulationError(str(exc)) from None
        return truth, [f"cluster {int(c)}" for c in labels]
    if source.startswith(("points", "matrix", "eggs")):
        return load_truth(source), None
    raise SimulationError(f"unknown truth {source!r}; use {SETUP_SOURCES}")


def study_config(name: str, kind: str = "rating", algorithm: str = "anntri", delta: float = 0.1,
                 sigma: float = 0.1, window: int | None = None, pool_size: int = 50, seed: int = 0,
                 scale: dict | None = None, settings: dict | None = None) -> dict:
    """A study config for simulated raters (the schema of ``proxima create``); ``settings`` the kind's
    own (``rank: {n_reference, n_select}``), a rating's ``scale`` its settings too (``rating: {min, max, ...}``)."""
    try:
        entry = get_kind(kind)
    except ValueError as exc:
        raise SimulationError(str(exc)) from None
    params = {"k": 1, "delta": delta, "sigma": sigma}
    if window:
        params["window"] = window
    config: dict = {"name": name, "question_kind": kind}
    if entry.on_scale:
        # a fine slider: a 1-5 scale would round away most of what a simulated rater knows
        settings = {**(scale or {"min": 0, "max": 100, "step": 1, "widget": "slider"}), **(settings or {})}
    if entry.settings:
        config[kind] = entry.check_settings(settings)
    try:
        rounds = get_algorithm(algorithm).rounds
    except ValueError as exc:
        raise SimulationError(str(exc)) from None
    # the planners that work in rounds take the confidence bounds' k, delta, sigma and window
    config["algorithms"] = [{"algorithm": algorithm, "params": params}] if rounds else [{"algorithm": algorithm}]
    config["pool_size"] = pool_size
    config["random_state"] = seed
    return config


def write_setup(source: str, out: str | Path, kind: str = "rating", algorithm: str = "anntri",
                sigma: float | None = None, seed: int = 0, settings: dict | None = None) -> dict:
    """Write ``items.csv`` (id,text[,label]), ``truth.csv`` and ``study.yaml`` for a simulated study.

    Returns the paths and the ``--oracle`` spec that answers from the written truth. ``sigma``
    (ANNTri's noise scale) defaults to 0.1 for ratings and 0.5 for 0/1 samples (triplet-derived, same or
    different).
    """
    import yaml

    truth, labels = setup_truth(source, seed)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    items_path, truth_path, config_path = out / "items.csv", out / "truth.csv", out / "study.yaml"
    with items_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "text", "label"] if labels else ["id", "text"])
        for n, item in enumerate(truth.ids):
            text = f"Item {item}"
            writer.writerow([item, text, labels[n]] if labels else [item, text])
    with truth_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        if truth.points is not None:
            writer.writerow(["id", *(f"x{d + 1}" for d in range(truth.points.shape[1]))])
            for item, row in zip(truth.ids, truth.points, strict=True):
                writer.writerow([item, *(repr(float(x)) for x in row)])
            oracle = truth.source if truth.source.startswith("eggs") else f"points:{truth_path}"
        else:
            writer.writerow(["", *truth.ids])
            for item, row in zip(truth.ids, truth.distances, strict=True):
                writer.writerow([item, *(repr(float(x)) for x in row)])
            oracle = f"matrix:{truth_path}"
    name = f"Simulated {truth.source.split(':')[0]} ({truth.n_items} items)"
    if sigma is None:
        # a rating on a fine slider is a sample of spread ~0.1; 0/1 samples (triplet-derived, same or different) 0.5
        sigma = 0.1 if get_kind(kind).on_scale else 0.5
    config = study_config(name, kind=kind, algorithm=algorithm, sigma=sigma, seed=seed, settings=settings)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return {"items": items_path, "truth": truth_path, "config": config_path, "oracle": oracle,
            "n_items": truth.n_items}
