"""Benchmark — do bots that never look at the items get a completion code? (issues 26, 40)

Starts ``proxima serve`` in a scratch instance folder and creates, for each question kind (triplet, rating,
odd-one-out, rank 8-rank-2) and each way a study can know its items, a study of the alien-egg items as
images (one small PNG each; default settings but ``max_questions_per_rater`` and ``min_answers_for_code``:
QUESTIONS):

- ``positions``: each item's ``position`` is its known smoothness, as a researcher who generated the eggs
  would give it;
- ``labels``: only a label, the eggs cut into LABEL_BINS bins of smoothness (a label cut from a continuum:
  the hard case for catch trials, whose like and unlike items by label need not be far apart; images, so
  catch trials of an item with its copy, as labels alone state no margin);
- ``labels + feature``: the label and the smoothness it was cut by as a numeric feature (label catch trials
  kept where the feature gives the margin: trials no comparison of the files answers);
- ``no labels``: neither (a folder of images): catch trials of an item with its copy (webapp.catches).

Over HTTP like a browser, simulated careful raters (simulation.crowd.Rater: the human noise model fitted to
the alien-egg crowds, lapse CAREFUL_LAPSE, a copy seen as one but for a lapse; ratings Gaussian; they read
the handles of what they are shown with the server's secret key, as a person reads the pictures) and
bots answer in turn, so the study's model is learned from everyone (bots included). The item-blind bots:
always the first item shown, always the last, uniformly random, lowest handle, random + memory of its own
answers, random + reading the token's length, 80/20 first. Four more fetch the media they are sent and
answer at random unless two shown items look like one: ``media sizes`` by sizes within 1% (what the
padding hides), ``media bytes`` by their first SAME_BYTES bytes, ``media pixels`` by their decoded pixels
(Pillow, exactly equal), ``media header`` by their size in pixels and first SAME_BYTES coded bytes after
the header: programs that compare files without judging how alike two pictures look, which the images
served as a variant per handle (webapp.handles.varied) leave with nothing to find. Prints, per
kind, the share of runs shown a code per study type, and the share flagged.
Offline tables then measure, against the answers per rater (10, 20, 40, 80), the triplet answer check
(engine.rater_checks, the same code), the catch-trial rule and both together.

    python benchmarks/bots.py                          # 20 runs of each bot, 60 careful raters per study
    python benchmarks/bots.py --quick                  # 5 runs each, 15 careful raters
    python benchmarks/bots.py --kinds rank --types labels,"no labels" --skip-offline
"""
from __future__ import annotations

import argparse
import io
import math
import random
import re
import struct
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import redis
import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from load_setup import start_server, stop_server  # noqa: E402

from engine import rater_checks  # noqa: E402
from simulation.crowd import Rater, eggs_truth, noise_model  # noqa: E402
from webapp.catches import schedule_pass_rate  # noqa: E402
from webapp.handles import identifier  # noqa: E402
from workers.store import keys  # noqa: E402
from workers.store.config import StudyConfig  # noqa: E402
from workers.store.raters import CATCH_PENDING, CROWD_FLAGGED, CROWD_JUDGED  # noqa: E402
from workers.store.studies import Item, create_study  # noqa: E402

QUESTIONS = 40
#: The careful raters' lapse rate (issue 26's goal: the human model with lapse about 0.1; the egg crowds'
#: own fit is 0.03).
CAREFUL_LAPSE = 0.1
CODE = re.compile(r'id="completion-code">([A-Z0-9]+)<')
BOTS = ("always first", "always last", "random", "lowest handle", "random + memory", "random + lengths",
        "80/20 first", "media sizes", "media bytes", "media pixels", "media header")
#: Bots that fetch the media they are shown and compare them; "media bytes" compares this many first bytes,
#: "media header" this many first coded bytes after the format's header.
MEDIA_BOTS = ("media sizes", "media bytes", "media pixels", "media header")
SAME_BYTES = 128
KINDS = ("triplet", "rating", "odd_one_out", "rank")
STUDY_TYPES = ("positions", "labels", "labels + feature", "no labels")
#: The ``labels`` study's labels: the eggs cut into this many bins of equal size by smoothness.
LABEL_BINS = 10


class Bot:
    """A rater that never looks at the items as a person does: ``kind`` one of BOTS. Screens: "first"/"last"
    pick the items shown first/last (a grid's first k or last k), "lowest handle" the lowest handles (the
    wire's only names), "80/20 first" the first 80% of the time; the media bots answer a screen where two
    items look like one (``_same``) as a catch trial of a copy expects, any other at random. Ratings: first =
    the scale's lowest step, last = its highest, lowest handle = a step from the handles, 80/20 = the lowest
    step 80% of the time, the media bots the top step for a pair that looks like one item, else random."""

    def __init__(self, kind: str, rng: random.Random):
        self.kind, self.rng, self.memory = kind, rng, {}
        self.session: requests.Session | None = None  # set by run_rater: the media bots fetch with it
        self.base = ""

    def _media(self, item: dict) -> bytes:
        return self.session.get(self.base + item["url"]).content if "url" in item else b""

    def _same(self, x: bytes, y: bytes) -> bool:
        """Whether two media look like one item to this bot: sizes within 1% ("media sizes", what the padding
        hides), the same first SAME_BYTES bytes ("media bytes": files of one folder share a header, not their
        data), the same decoded pixels ("media pixels": Pillow, exactly), or the same size in pixels and the
        same first SAME_BYTES coded bytes after the header ("media header": a PNG's image data, a JPEG's scan).
        None of them looks at the pictures; what served variants (webapp.handles.varied) leave them."""
        if self.kind == "media sizes":
            return abs(len(x) - len(y)) <= 0.01 * max(len(x), len(y))
        if self.kind == "media pixels":
            a, b = _decoded(x), _decoded(y)
            return a is not None and a == b
        if self.kind == "media header":
            a, b = _decoded(x, pixels=False), _decoded(y, pixels=False)
            return (a is not None and a == b and len(_coded(x)) >= SAME_BYTES
                    and _coded(x)[:SAME_BYTES] == _coded(y)[:SAME_BYTES])
        return len(x) >= SAME_BYTES and x[:SAME_BYTES] == y[:SAME_BYTES]

    def _copy_picks(self, q: dict, shown: list[dict], k: int) -> list[str] | None:
        """The answer a look finds for a screen showing an item twice (a headed kind's copy of its head
        first, the item left over of an odd one out), None when no two items look like one."""
        data = [self._media(c) for c in shown]
        if "head" in q:
            anchor = self._media(q["head"])
            same = [n for n in range(len(shown)) if self._same(anchor, data[n])]
            if same:
                rest = [n for n in range(len(shown)) if n not in same]
                return [shown[n]["handle"] for n in (same + self.rng.sample(rest, len(rest)))[:k]]
            return None
        for n in range(len(shown)):
            for m in range(n + 1, len(shown)):
                if self._same(data[n], data[m]):
                    return [shown[next(j for j in range(len(shown)) if j not in (n, m))]["handle"]]
        return None

    def answer(self, q: dict) -> dict:
        if "scale" in q:
            return self.rating(q)
        head = q["head"]["handle"] if "head" in q else None
        shown = q.get("candidates", q.get("items", []))
        offered = [c["handle"] for c in shown]
        k = int(q.get("select", 1))
        key = (head, frozenset(offered))
        copied = self._copy_picks(q, shown, k) if self.kind in MEDIA_BOTS else None
        if self.kind == "random + memory" and key in self.memory:
            picks = self.memory[key]
        elif copied is not None:
            picks = copied
        else:
            drawn = self.rng.sample(offered, k)
            picks = {"always first": offered[:k], "always last": offered[::-1][:k],
                     "lowest handle": sorted(offered)[:k],
                     "80/20 first": offered[:k] if self.rng.random() < 0.8 else drawn}.get(self.kind, drawn)
            if self.kind == "random + lengths" and len(q["token"]) % 2:
                picks = offered[:k]  # anything it can read: a token's length picks the side when it is odd
            self.memory[key] = picks
        return {"choice": picks[0]} if "select" not in q else {"picks": list(picks)}

    def rating(self, q: dict) -> dict:
        scale = q["scale"]
        steps = [scale["min"] + k * scale["step"] for k in range(int(round((scale["max"] - scale["min"])
                                                                           / scale["step"])) + 1)]
        i, j = (item["handle"] for item in q["items"])
        key = frozenset((i, j))
        if self.kind == "random + memory" and key in self.memory:
            return {"value": self.memory[key]}
        if self.kind in MEDIA_BOTS and self._same(*(self._media(item) for item in q["items"])):
            return {"value": steps[-1]}
        value = {"always first": steps[0], "always last": steps[-1], "lowest handle": steps[min(i, j) < max(i, j)],
                 "80/20 first": steps[0] if self.rng.random() < 0.8 else self.rng.choice(steps)
                 }.get(self.kind, self.rng.choice(steps))
        if self.kind == "random + lengths":
            value = steps[len(q["token"]) % len(steps)]
        self.memory[key] = value
        return {"value": value}


def _decoded(data: bytes, pixels: bool = True) -> tuple | None:
    """(mode, size in pixels, the decoded pixels) of an image (without the pixels: ``pixels`` False); None
    when Pillow cannot read it."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as image:
            return (image.mode, image.size, image.tobytes() if pixels else None)
    except (UnidentifiedImageError, OSError, ValueError):
        return None


def _coded(data: bytes) -> bytes:
    """The coded image data after a file's header: a PNG's IDAT chunks, a JPEG's bytes after its (first) start
    of scan; the file itself for another format."""
    if data.startswith(b"\x89PNG"):
        out, at = [], 8
        while at + 8 <= len(data):
            length, kind = int.from_bytes(data[at:at + 4], "big"), data[at + 4:at + 8]
            if kind == b"IDAT":
                out.append(data[at + 8:at + 8 + length])
            if kind == b"IEND":
                break
            at += 12 + length
        return b"".join(out)
    if data.startswith(b"\xff\xd8"):
        sos = data.find(b"\xff\xda")
        return data[sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big"):] if sos >= 0 else data
    return data


def run_rater(base: str, study_id: str, name: str, answerer, think: float) -> dict:
    """One rater session from the study link to the finish page; returns answers given and the code."""
    session = requests.Session()
    if isinstance(answerer, Bot):
        answerer.session, answerer.base = session, base
    session.get(f"{base}/s/{study_id}", params={"PROLIFIC_PID": name, "STUDY_ID": "bench", "SESSION_ID": name})
    response = session.get(f"{base}/api/studies/{study_id}/questions/next")
    question = response.json().get("question") if response.status_code == 200 else None
    answers = 0
    while question is not None:
        time.sleep(think)
        body = {"token": question["token"], **answerer.answer(question), "response_ms": 1500}
        reply = session.post(f"{base}/api/studies/{study_id}/answers", json=body)
        if reply.status_code != 201:
            break
        answers += 1
        question = reply.json().get("next")
    code = None
    for _ in range(60):  # the finish page waits for the answer check of the last answers
        page = session.get(f"{base}/s/{study_id}/done")
        if 'id="checking"' not in page.text:
            found = CODE.search(page.text)
            code = found.group(1) if found else None
            break
        time.sleep(1)
    return {"answers": answers, "code": code}


def egg_png(n: int) -> bytes:
    """A small grey PNG of its own for egg ``n`` (16 x 16 pixels drawn from ``n``): a folder of images."""
    rng = random.Random(n)
    rows = b"".join(b"\x00" + bytes(rng.randrange(256) for _ in range(16)) for _ in range(16))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def egg_items(truth, study_type: str) -> list[Item]:
    """The egg items as a study of ``study_type`` (STUDY_TYPES) holds them: images (``egg_png``)."""
    rank = np.argsort(np.argsort(truth.points[:, 0]))
    return [Item(id=i, kind="image", media_type="image/png",
                 position=(float(p[0]),) if study_type == "positions" else None,
                 label=f"bin {r * LABEL_BINS // len(rank)}" if study_type.startswith("labels") else None,
                 features={"smoothness": float(p[0])} if study_type == "labels + feature" else None)
            for i, p, r in zip(truth.ids, truth.points, rank, strict=True)]


def study_config(kind: str, study_type: str, seed: int) -> dict:
    """The config of the benchmark's study of ``kind`` and ``study_type``: defaults but QUESTIONS per rater."""
    return {"name": f"Bots {kind} {study_type}", "question_kind": kind, "random_state": seed,
            "limits": {"max_questions_per_rater": QUESTIONS, "min_answers_for_code": QUESTIONS}}


def chance_of_at_least(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p): how often ``k`` or more of ``n`` runs are paid at a stated rate ``p``."""
    return sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1))


def live(base: str, conn: redis.Redis, kind: str, study_type: str, runs: int, careful: int, think: float,
         seed: int, secret: str, bot_kinds: tuple[str, ...] = BOTS) -> dict:
    truth = eggs_truth()
    noise, _ = noise_model(truth, lapse=CAREFUL_LAPSE)
    config = study_config(kind, study_type, seed)
    slug = study_type.replace(" + ", "-").replace(" ", "-")
    study_id = create_study(conn, StudyConfig.from_dict(config), egg_items(truth, study_type),
                            media={n: egg_png(n) for n in range(truth.n_items)},
                            study_id=f"bots-{kind.replace('_', '-')}-{slug}")
    identify = identifier(secret, study_id, truth.ids)  # a careful person sees the pictures
    rng = random.Random(seed)
    jobs = [("careful", f"careful-{n}") for n in range(careful)]
    bots = [(b, f"{b.replace(' ', '').replace('/', '').replace('+', '-')}-{n}") for n in range(runs) for b in bot_kinds]
    rng.shuffle(bots)
    # careful raters first (a quarter of them), then everyone mixed
    head, rest = jobs[: careful // 4], jobs[careful // 4:] + bots
    rng.shuffle(rest)
    results = {}

    def one(job):
        who, name = job
        r = random.Random(zlib.crc32(name.encode()) + seed)
        answerer = Rater(truth, noise, False, r, identify) if who == "careful" else Bot(who, r)
        return who, name, run_rater(base, study_id, name, answerer, think)

    with ThreadPoolExecutor(6) as pool:
        for batch in (head, rest):
            for who, name, result in pool.map(one, batch):
                results[name] = (who, result)
    time.sleep(3)
    table = {}
    config = StudyConfig.from_dict(config)
    for name, (who, result) in results.items():
        stats = conn.hmget(keys.rater_stats(study_id), [keys.rater_field(name, f) for f in
                                                        ("flagged", "answer_flagged", "catch", "catch_failed",
                                                         CROWD_FLAGGED, CATCH_PENDING, CROWD_JUDGED)])
        flagged, by_check, by_crowd = (v not in (None, b"0", b"") for v in (stats[0], stats[1], stats[4]))
        awaiting = int(stats[5] or 0) > 0 and not int(stats[6] or 0) and not flagged
        row = table.setdefault(who, {"runs": 0, "code": 0, "flagged": 0, "paid": 0, "by catch trials": 0,
                                     "by the answer check": 0, "by the crowd": 0, "awaiting the crowd": 0,
                                     "catch trials": {}})
        served = (int(stats[2] or 0), int(stats[3] or 0))  # catch trials judged, missed (what the rule read)
        row["catch trials"][served] = row["catch trials"].get(served, 0) + 1
        row["runs"] += 1
        row["code"] += result["code"] is not None
        row["flagged"] += flagged
        row["paid"] += result["code"] is not None and not flagged  # what a researcher approves at the end
        row["by catch trials"] += config.catch_failing(int(stats[2] or 0), int(stats[3] or 0))
        row["by the answer check"] += by_check
        row["by the crowd"] += by_crowd
        row["awaiting the crowd"] += awaiting
    return table


def offline(kind: str, trials: int, seed: int) -> dict:
    """Flag shares against answers per rater m (the study's max_questions_per_rater), on random questions
    of the egg items: a reference of 40 careful raters x 40 answers, then each judged rater alone (engine
    code only): (who, m, "answer check" | "catch trials" | "either") -> share flagged. A rater's m
    questions hold the catch trials the study's schedule gives (StudyConfig.catch_every, a random place
    per block), drawn from the egg items' catch comparisons (webapp.catches), candidates in random order."""
    from simulation.oracles import TripletOracle
    from webapp.catches import choose_comparisons
    from workers.store.config import StudyConfig

    truth = eggs_truth()
    noise, _ = noise_model(truth, lapse=CAREFUL_LAPSE)
    n = truth.n_items
    rng = np.random.default_rng(seed)
    oracle = TripletOracle(truth.distances, noise=noise.logistic_scale, model="human", lapse=noise.lapse,
                           random_state=seed)
    comparisons = np.array([c[:3] for c in choose_comparisons([{"position": [float(p[0])]} for p in truth.points],
                                                             random.Random(seed))])

    def questions(m):
        rows = []
        while len(rows) < m:
            h, a, b = rng.choice(n, 3, replace=False)
            rows.append((h, a, b))
        return np.array(rows)

    def honest(q):
        return np.array([int(oracle(h, a, b) == a) for h, a, b in q])

    ref_q = questions(1600)
    ref = np.column_stack([ref_q, honest(ref_q)])
    x = rater_checks.fit_triplet_embedding(ref, n, seed=seed)
    z_ref = rater_checks.held_out_triplet_margins(ref, rng.integers(0, 4, len(ref)), np.ones(len(ref), bool), n)
    scale = rater_checks.calibrate_temperature(z_ref, ref[:, 3])
    answerers = {"careful": honest, "random": lambda q: rng.integers(0, 2, len(q)),
                 "always left": lambda q: np.ones(len(q), int), "lowest index": lambda q: (q[:, 1] < q[:, 2]) * 1,
                 "80/20 left": lambda q: (rng.random(len(q)) < 0.8) * 1}
    out = {}
    for m in (10, 20, 40, 80):
        config = StudyConfig.from_dict({"name": "bots", "limits": {"max_questions_per_rater": m}})
        every = config.catch_every
        look = len([k for k in (10, 20, 40, 80) if k <= m])
        alpha = rater_checks.look_alpha(look, 0.01)
        for who, answer in answerers.items():
            counts = {"answer check": 0, "catch trials": 0, "either": 0}
            for t in range(trials):
                # the schedule: one catch trial per block of `every` questions, at a random place
                places = [b + rng.integers(every) for b in range(0, m, every)]
                n_catch = sum(p < m for p in places)
                q = questions(m - n_catch)
                h, a, b = q.T
                zz = ((x[h] - x[b]) ** 2).sum(1) - ((x[h] - x[a]) ** 2).sum(1)
                p = rater_checks.LAPSE / 2 + (1 - rater_checks.LAPSE) / (1 + np.exp(-np.clip(scale * zz, -30, 30)))
                verdict = rater_checks.judge_triplets(p, answer(q), (a < b) * 1, seed=t,
                                                      simulations=max(2000, int(4 / alpha)))
                c = comparisons[rng.integers(len(comparisons), size=n_catch)]
                swap = rng.random(n_catch) < 0.5
                cq = np.column_stack([c[:, 0], np.where(swap, c[:, 2], c[:, 1]), np.where(swap, c[:, 1], c[:, 2])])
                missed = int(np.sum(answer(cq) != (~swap) * 1)) if n_catch else 0
                by_answers, by_catches = verdict.p < alpha, config.catch_failing(n_catch, missed)
                counts["answer check"] += by_answers
                counts["catch trials"] += by_catches
                counts["either"] += by_answers or by_catches
            for name, count in counts.items():
                out[(who, m, name)] = count / trials
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--careful", type=int, default=60)
    parser.add_argument("--think", type=float, default=0.0, help="seconds between answers")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default=",".join(KINDS), help="comma-separated question kinds")
    parser.add_argument("--types", default=",".join(STUDY_TYPES), help="comma-separated study types")
    parser.add_argument("--bots", default=",".join(BOTS), help="comma-separated bot types (of BOTS)")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-offline", action="store_true")
    a = parser.parse_args()
    if a.quick:
        a.runs, a.careful = 5, 15
    kinds, types, bot_kinds = a.kinds.split(","), a.types.split(","), tuple(a.bots.split(","))
    unknown = set(bot_kinds) - set(BOTS)
    if unknown:
        parser.error(f"unknown bot type(s) {sorted(unknown)}: choose among {', '.join(BOTS)}")
    if not a.skip_live:
        with tempfile.TemporaryDirectory() as tmp:
            proc, base, redis_url = start_server(Path(tmp), web_workers=2, workers=1)
            try:
                conn = redis.Redis.from_url(redis_url)
                secret = (Path(tmp) / "secret_key").read_text().strip()
                for kind in kinds:
                    started = time.monotonic()
                    tables = {t: live(base, conn, kind, t, a.runs, a.careful, a.think, a.seed, secret, bot_kinds)
                              for t in types}
                    print(f"\n{kind} studies, {QUESTIONS} questions per rater, {a.runs} runs of each bot, "
                          f"{a.careful} careful raters per study ({time.monotonic() - started:.0f} s): shown a code "
                          "(flagged)")
                    print("| rater | " + " | ".join(types) + " |\n|---|" + "---|" * len(types))
                    for who in ("careful", *bot_kinds):
                        cells = []
                        for t in types:
                            r = tables[t].get(who)
                            cells.append(f"{r['code'] / r['runs']:.0%} ({r['flagged'] / r['runs']:.0%})" if r else "")
                        print(f"| {who} | " + " | ".join(cells) + " |")
                    for t in types:
                        config = StudyConfig.from_dict(study_config(kind, t, a.seed))
                        stated = schedule_pass_rate(config, config.catch_rates[1])
                        r = tables[t].get("random")
                        print(f"{t}: the catch rule passes a rater answering at random {stated:.2%} of the time "
                              f"({config.catch_trials[1]} catch trials, {config.catch_misses_allowed} missed allowed, "
                              f"{config.catch_rates[1]:.3g} passed per trial at random)" + (
                                  f"; random bots paid {r['paid']} of {r['runs']}: {r['paid']} or more happen "
                                  f"{chance_of_at_least(r['paid'], r['runs'], stated):.1%} of the time at that rate"
                                  if r else ""))
                        r = tables[t]["careful"]
                        print(f"careful raters flagged, {t}: {r['by catch trials']} by catch trials, "
                              f"{r['by the answer check']} by the answer check, of {r['runs']}")
                        print(f"{t}, every rater:"
                              " runs, shown a code, flagged, paid (a code and not flagged), flagged by the catch rule, "
                              "by the answer check, by the crowd, awaiting the crowd")
                        for who in ("careful", *bot_kinds):
                            r = tables[t].get(who)
                            if r:
                                print(f"  {who}: " + ", ".join(str(r[k]) for k in (
                                    "runs", "code", "flagged", "paid", "by catch trials", "by the answer check",
                                    "by the crowd", "awaiting the crowd")))
                                print("    catch trials judged/missed: runs " + ", ".join(
                                    f"{c}/{m}: {k}" for (c, m), k in sorted(r["catch trials"].items())))
                                judged = sum(c * k for (c, _), k in r["catch trials"].items())
                                missed = sum(m * k for (_, m), k in r["catch trials"].items())
                                if judged:  # a bot that tells a copy passes more than the kind's random rate
                                    print(f"    catch trials passed: {judged - missed} of {judged} "
                                          f"({1 - missed / judged:.1%}; at random {config.catch_rates[1]:.1%})")
                    sys.stdout.flush()
            finally:
                stop_server(proc)
    if a.skip_offline:
        return
    trials = 50 if a.quick else 200
    out = offline("triplet", trials, a.seed)
    for name in ("answer check", "catch trials", "either"):
        print(f"\n{name}, triplets of the egg items, {trials} raters each: share flagged by answers per rater")
        print("| rater | 10 answers | 20 | 40 | 80 |\n|---|---|---|---|---|")
        for who in dict.fromkeys(k for k, _, _ in out):
            print(f"| {who} | " + " | ".join(f"{out[(who, m, name)]:.1%}" for m in (10, 20, 40, 80)) + " |")


if __name__ == "__main__":
    main()
