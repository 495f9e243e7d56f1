"""Benchmark — are catch trials fair to careful people, in every question kind? (issue 40)

For each kind (triplet, rating, odd-one-out, rank 8-rank-2 and 8-rank-1) and each way a study can know its
items (the eggs' known positions; labels: the eggs cut into 3 or 10 bins of smoothness, a label cut from a
continuum being the hard case, as text items (label catches), with the smoothness as a feature (label
catches with a margin in the features) or as images (copies); neither, the eggs as a folder of images: an
item with its copy), the
catch trials the platform builds (webapp.questions_answers.
catch_question on webapp.catches' comparisons) are answered by simulated careful raters (simulation.crowd.
Rater: the human noise model fitted to the alien-egg crowds, lapse CAREFUL_LAPSE) and by raters answering at
random, judged by the live rule (catch_passed), over the catch schedule of a study at defaults with
QUESTIONS questions per rater (StudyConfig.catch_every, catch_failing). Prints per kind the careful
miss rate against the kind's stated one (engine.kinds catch_rates), the share of careful raters flagged and
the share of random raters passing, each beside the rate the rule states over the schedule from the kind's
stated rates per catch trial (webapp.catches.schedule_pass_rate); --kinds runs some kinds' rows only.

Then the same rules on people's own answers (../shared/data): every alien-egg triplet a person answered
whose candidates meet the triplet catch margin (the like one at most half as far from the head as the
other), replayed per person (each person's such answers drawn as their catch trials: the share of the 231
people the rule would flag); and the Food-100 crowd's own catch screens (a grid of N, K picks), passed
when a like item is among the picks (the rank rule) or only when the first is (its stricter form).

Last, label catch trials judged by the crowd (engine.rater_checks), for labels alone on text items, as designed
before it was wired into the server (--crowd-wired runs the server's path): studies of CROWD_RATERS raters (a
CROWD_BOTS share of them answering at random) answer CROWD_HEADS label comparisons in turn. Every CHECK_EVERY
raters the crowd is estimated (judge_claims: careful raters' agreement per comparison and each rater's chance
of being careful, together) and the comparisons it agrees with least are no longer shown (claims_to_retire); at
the study's end each rater's catch answers are tested against the other raters' agreement per comparison
(judge_catch_answers, a parametric bootstrap; flagged below false_flag_rate), the flagged leave the crowd
and the rest are tested again (TRIM_ROUNDS); or (--crowd-delay N, what a live study could do) each rater is
tested once, when N more raters have answered (the last N at the end), the flagged leaving the crowd.

    python benchmarks/catch_fairness.py            # 4000 raters per row
    python benchmarks/catch_fairness.py --raters 1000
    python benchmarks/catch_fairness.py --kinds "rank 8-rank-2,rank 8-rank-1" --crowd-studies 0 --skip-people
    python benchmarks/catch_fairness.py --raters 0 --crowd-studies 4   # the crowd table only
    python benchmarks/catch_fairness.py --raters 0 --crowd-rate 0.5 --crowd-delay 30
    python benchmarks/catch_fairness.py --raters 0 --crowd-wired   # the server's own path

With ``--crowd-wired`` the crowd table runs the server's path: the study's label comparisons as the server keeps
them (webapp.catches: the first CROWD_COMPARISONS chosen), its catch schedule (StudyConfig.crowd_catch_every
at ``attention.rate: auto``, or --crowd-rate), each catch trial drawn among the comparisons not retired
(webapp.questions_answers.crowd_catch_question) and, after each rater, one look of the worker's crowd step
(workers.jobs.rater_checks.crowd_look: retire, then judge the raters due, once: ``attention.crowd_raters``
raters later, or at once where the rater answered every question and the crowd has decided every comparison they
missed, or at the study's end). --crowd-kinds and --crowd-labels run some rows only (to measure one row over
more studies); --crowd-dump writes each rater's verdict (bot, flagged, p) per study as JSON.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import random
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import rater_checks  # noqa: E402
from simulation.crowd import Rater, eggs_truth, noise_model  # noqa: E402
from simulation.datasets import default_data_dir  # noqa: E402
from webapp.catches import choose_comparisons, schedule_pass_rate  # noqa: E402
from webapp.questions_answers import catch_passed, catch_question  # noqa: E402
from workers.store.config import StudyConfig  # noqa: E402

QUESTIONS = 40
CAREFUL_LAPSE = 0.1
KINDS = (("triplet", {}), ("rating", {}), ("odd_one_out", {}), ("rank", {"n_reference": 8, "n_select": 2}),
         ("rank", {"n_reference": 8, "n_select": 1}))


#: How the eggs are known to a study, per row: (name, bins of smoothness as labels or None, item kind or
#: None for text, whether each egg's smoothness is given as a feature).
SOURCES = (("positions", None, None, False), ("3 labels (text)", 3, None, False),
           ("10 labels (text)", 10, None, False), ("10 labels + smoothness feature", 10, None, True),
           ("10 labels (images)", 10, "image", False), ("copies (images, no labels)", None, "image", False))


def egg_items(truth, labels: int | None, kind: str | None = None, feature: bool = False) -> list[dict]:
    """The eggs as a study holds them: with their positions (no labels, kind or feature); with a label,
    the eggs cut into ``labels`` bins of equal size by smoothness, and (``feature``) the smoothness the
    bins were cut by as a numeric feature; of ``kind`` (``"image"``: a folder of images) without
    positions."""
    if labels is None and kind is None:
        return [{"id": i, "position": [float(p[0])]} for i, p in zip(truth.ids, truth.points, strict=True)]
    items = [{"id": i, **({"kind": kind} if kind else {})} for i in truth.ids]
    if labels is not None:
        rank = np.argsort(np.argsort(truth.points[:, 0]))
        for item, r, p in zip(items, rank, truth.points, strict=True):
            item["label"] = f"bin {r * labels // len(rank)}"
            if feature:
                item["features"] = {"smoothness": float(p[0])}
    return items


def payload(question: dict, items: list[dict], scale: dict) -> dict:
    """What the page receives of a screen (the parts a rater's answer reads): each item's handle (here its
    index, so the picks come back as the indices catch_passed reads) and its id (the simulated rater's
    ``identify`` reads it; the wire to raters carries none)."""
    def item(i):
        return {"handle": int(i), "id": items[int(i)]["id"]}
    out = {"kind": question["kind"], "scale": scale}
    if "head" in question:
        out["head"], out["candidates"] = item(question["head"]), [item(c) for c in question["candidates"]]
        if "select" in question:
            out["select"] = question["select"]
    else:
        out["items"] = [item(i) for i in question["items"]]
    return out


def answer_of(body: dict) -> tuple[list[int] | None, float | None]:
    if "value" in body:
        return None, body["value"]
    return (body["picks"] if "picks" in body else [body["choice"]]), None


def simulate(kind: str, settings: dict, items: list[dict], truth, noise, raters: int, seed: int) -> dict:
    config = StudyConfig.from_dict({"name": "fair", "question_kind": kind, **({"rank": settings} if settings else {}),
                                    "limits": {"max_questions_per_rater": QUESTIONS}})
    study = SimpleNamespace(config=config)
    random.seed(seed)  # catch_question draws from the process's generator, as a request does
    found = choose_comparisons(items, random.Random(seed))
    if not found:
        return {}
    scale = {k: config.settings_of("rating")[k] for k in ("min", "max", "step")}  # the rating kind's scale
    every, n = config.catch_every, config.planned_questions
    rng = np.random.default_rng(seed)
    careful_miss, chance = config.catch_rates
    # what the rule states over the schedule, from the kind's stated rates per catch trial
    out = {"every": every, "allowed": config.catch_misses_allowed, "stated": careful_miss,
           "careful flagged": 1 - schedule_pass_rate(config, 1 - careful_miss),
           "random passing": schedule_pass_rate(config, chance)}
    for who, careless in (("careful", False), ("random", True)):
        flagged = misses = trials_all = 0
        for r in range(raters):
            rater = Rater(truth, noise, careless, random.Random(seed * 100003 + r * 2 + careless))
            places = np.arange(0, n, every) + rng.integers(every, size=len(range(0, n, every)))
            trials = int(np.count_nonzero(places < n))
            missed = 0
            for _ in range(trials):
                question = catch_question(study, found)
                picks, value = answer_of(rater.answer(payload(question, items, scale)))
                missed += not catch_passed(study, question, picks, value)
            flagged += config.catch_failing(trials, missed)
            misses, trials_all = misses + missed, trials_all + trials
        out[who] = {"miss": misses / trials_all, "flagged": flagged / raters}
    return out


#: The crowd table: raters per study, the share of them answering at random, label comparisons shown, how
#: often (in raters) the crowd judges, and the looks the flag level is shared by.
CROWD_RATERS = 100
CROWD_BOTS = 0.3
CROWD_HEADS = 20
CHECK_EVERY = 10
TRIM_ROUNDS = 4
#: The crowd table's catch-trial rate (``attention.rate``): "auto", the schedule planned on the kind's stated
#: careful miss rate, or a share of questions (--crowd-rate).
CROWD_RATE: str | float = "auto"
#: When a rater is judged: 0, at the study's end (the flagged leave the crowd and the rest are judged again);
#: N, once, when N more raters have answered (what a live study could do; --crowd-delay).
CROWD_DELAY = 0


def crowd_study(kind: str, settings: dict, items: list[dict], truth, noise, seed: int) -> dict:
    """One study of label catch trials judged by the crowd: per rater, whether a bot ("bot") and flagged
    ("flagged"); "retired": comparisons retired at the end, "claims": comparisons answered (a rating's alike
    and unlike pair each)."""
    config = StudyConfig.from_dict({"name": "fair", "question_kind": kind, **({"rank": settings} if settings else {}),
                                    "limits": {"max_questions_per_rater": QUESTIONS},
                                    "attention": {"rate": CROWD_RATE}})
    study = SimpleNamespace(config=config)
    random.seed(seed)
    found = choose_comparisons(items, random.Random(seed))[:CROWD_HEADS]
    scale = {k: config.settings_of("rating")[k] for k in ("min", "max", "step")}  # the rating kind's scale
    every, n = config.catch_every, config.planned_questions
    careful_miss, chance = config.catch_rates
    if kind == "rating":
        chance = 0.25  # a rating at random lands in the expected quarter of the scale
    threshold = rater_checks.claim_threshold(careful_miss, chance)
    alpha = config.attention.false_flag_rate
    rng = np.random.default_rng(seed)
    bot = np.random.default_rng(seed + 1).random(CROWD_RATERS) < CROWD_BOTS
    claims: list[int] = []
    who: list[int] = []
    agreed: list[int] = []
    flagged = np.zeros(CROWD_RATERS, bool)
    judged = np.zeros(CROWD_RATERS, bool)
    retired: set[int] = set()
    n_claims = 2 * len(found)  # a comparison's alike claim (every kind) and unlike pair (ratings)

    def check(upto: int, final: bool = False) -> None:
        if not claims:
            return
        c, r, a = np.array(claims), np.array(who), np.array(agreed)
        for _ in range(TRIM_ROUNDS if final and not CROWD_DELAY else 1):
            v = rater_checks.judge_claims(c, r, a, ~flagged[r], n_claims, threshold, chance)
            retired.clear()
            retired.update(rater_checks.claims_to_retire(v, threshold))
            if not final and not CROWD_DELAY:
                return
            q = rater_checks.crowd_agreement(v.others_agreed, v.others_answers, chance)
            before = flagged.copy()
            # judged at the study's end, or (CROWD_DELAY) once, CROWD_DELAY raters after their own answers
            due = range(upto) if final or not CROWD_DELAY else range(max(0, upto - CROWD_DELAY))
            for x in due:
                mine = r == x
                if not flagged[x] and not judged[x] and mine.any():
                    judged[x] = bool(CROWD_DELAY)
                    p = rater_checks.judge_catch_answers(q[mine], a[mine], chance, seed=seed * 1000 + x,
                                                         simulations=int(20 / alpha))
                    flagged[x] = p < alpha
            if np.array_equal(before, flagged):
                return

    for x in range(CROWD_RATERS):
        rater = Rater(truth, noise, bool(bot[x]), random.Random(seed * 100003 + x))
        places = np.arange(0, n, every) + rng.integers(every, size=len(range(0, n, every)))
        for _ in range(int(np.count_nonzero(places < n))):
            # a retired comparison is not shown: the trial is another (a rating's pair of another kind)
            question, claim = None, -1
            live = [i for i in range(len(found))
                    if 2 * i + 1 not in retired or (kind == "rating" and 2 * i not in retired)]
            for _ in range(20 if live else 0):
                i = random.choice(live)
                question = catch_question(study, [found[i]])
                claim = 2 * i + (question.get("expect") != "low")
                if claim not in retired:
                    break
            if question is None or claim in retired:
                continue
            picks, value = answer_of(rater.answer(payload(question, items, scale)))
            claims.append(claim)
            who.append(x)
            agreed.append(int(catch_passed(study, question, picks, value)))
        if (x + 1) % CHECK_EVERY == 0:
            check(x + 1)
    check(CROWD_RATERS, final=True)
    return {"bot": bot, "flagged": flagged, "retired": len(retired),
            "claims": len(set(claims) | retired)}


def wired_study(kind: str, settings: dict, items: list[dict], truth, noise, seed: int) -> dict:
    """``crowd_study`` through the server's own functions (see the module's docstring, ``--crowd-wired``)."""
    from webapp.catches import CROWD_COMPARISONS
    from webapp.questions_answers import crowd_catch_question
    from workers.jobs.rater_checks import crowd_look

    config = StudyConfig.from_dict({"name": "fair", "question_kind": kind, **({"rank": settings} if settings else {}),
                                    "limits": {"max_questions_per_rater": QUESTIONS}, "random_state": seed,
                                    "attention": {"rate": CROWD_RATE}})
    study = SimpleNamespace(config=config)
    random.seed(seed)
    found = choose_comparisons(items, random.Random(seed))[:CROWD_COMPARISONS]
    scale = {k: config.settings_of("rating")[k] for k in ("min", "max", "step")}  # the rating kind's scale
    every, n = config.crowd_catch_every, config.planned_questions
    rng = np.random.default_rng(seed)
    bot = np.random.default_rng(seed + 1).random(CROWD_RATERS) < CROWD_BOTS
    claims: list[str] = []
    who: list[str] = []
    agreed: list[int] = []
    counters: dict[str, dict[str, str]] = {}
    retired: frozenset[str] = frozenset()
    asked: set[str] = set()

    p_of: dict[str, float] = {}
    waited: dict[str, int] = {}  # raters who came after a rater with a missed catch trial until their verdict
    now = 0

    def look(final: bool) -> None:
        nonlocal retired
        judgement, claim_keys, rater_ids = crowd_look(config, claims, who, agreed, counters, final, seed)
        retired = frozenset(claim_keys[c] for c in judgement.retire)
        for x, p in judgement.p.items():
            counters[rater_ids[x]]["crowd_judged"] = "1"
            p_of[rater_ids[x]] = p
            if any(not a for r, a in zip(who, agreed, strict=True) if r == rater_ids[x]):
                waited[rater_ids[x]] = now - int(rater_ids[x][1:])
            if x in judgement.flagged:
                counters[rater_ids[x]]["crowd_flagged"] = "1"

    trials_given = 0
    for x in range(CROWD_RATERS):
        name, now = f"r{x}", x
        counters[name] = {"answers": str(n), "completed": "1"}
        rater = Rater(truth, noise, bool(bot[x]), random.Random(seed * 100003 + x))
        places = np.arange(0, n, every) + rng.integers(every, size=len(range(0, n, every)))
        for _ in range(int(np.count_nonzero(places < n))):
            question = crowd_catch_question(study, found, retired)
            if question is None:
                continue
            picks, value = answer_of(rater.answer(payload(question, items, scale)))
            claims.append(question["claim"])
            who.append(name)
            agreed.append(int(catch_passed(study, question, picks, value)))
            asked.add(question["claim"])
            trials_given += 1
        look(final=False)
    look(final=True)
    flagged = np.array([counters[f"r{x}"].get("crowd_flagged") == "1" for x in range(CROWD_RATERS)])
    return {"bot": bot, "flagged": flagged, "retired": len(retired), "claims": len(asked | retired),
            "every": every, "trials": trials_given / CROWD_RATERS,
            "p": [p_of.get(f"r{x}", 1.0) for x in range(CROWD_RATERS)],
            "waited": [waited.get(f"r{x}", -1) for x in range(CROWD_RATERS)]}


def egg_people(data_dir: Path, config: StudyConfig, seed: int) -> dict:
    """The triplet catch rule on people's own egg answers: each person's answers to triplets meeting the
    catch margin, drawn (with replacement) as the catch trials of a study at defaults."""
    with zipfile.ZipFile(data_dir / "alien_eggs" / "responses.csv.zip") as z:
        name = next(n for n in z.namelist() if n.endswith(".csv"))
        rows = list(csv.DictReader(io.TextIOWrapper(z.open(name), encoding="utf-8")))
    per: dict[str, list[int]] = {}
    for row in rows:
        h, left, right, pick = (int(row[k][1:]) for k in ("Center", "Left", "Right", "Answer"))
        near, far = sorted([(abs(left - h), left), (abs(right - h), right)])
        if near[0] <= 0.5 * far[0] and near[1] != far[1]:
            per.setdefault(row["Participant.ID"], []).append(int(pick != near[1]))
    rng = np.random.default_rng(seed)
    trials = config.catch_trials[1]
    people = [v for v in per.values() if len(v) >= 5]
    all_misses = [m for v in people for m in v]
    flagged = []
    for v in people:
        draws = rng.choice(v, size=(200, trials))
        flagged.append(np.mean([config.catch_failing(trials, int(d.sum())) for d in draws]))
    return {"people": len(people), "answers": len(all_misses), "miss": float(np.mean(all_misses)),
            "flagged": float(np.mean(flagged)), "careless people": sum(f > 0.5 for f in flagged)}


def food_people(data_dir: Path) -> dict:
    """The Food-100 crowd's own catch screens: misses by the grid rule (no like item among the picks) and
    by the stricter first-pick rule (the first pick not a like item), per grid size."""
    out: dict = {}
    with zipfile.ZipFile(data_dir / "food100" / "food100_grids.zip") as z:
        for name in z.namelist():
            if not name.endswith(".json"):
                continue
            grid = name.rsplit("/", 1)[-1].split("_")[0]
            for hit in json.loads(z.read(name)):
                for screen in hit["HIT_screens"]:
                    if not screen["is_catchtrial"]:
                        continue
                    like = {screen["images"][i] for i in screen["correct_answer"]}
                    picks = list(screen["near_answer"])
                    row = out.setdefault(grid, [0, 0, 0])
                    row[0] += 1
                    row[1] += not (like & set(picks))
                    row[2] += picks[0] not in like
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--raters", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kinds", default="",
                        help="the first table's rows of these kinds only (comma-separated: triplet, rating, "
                             "odd_one_out, rank 8-rank-2, rank 8-rank-1; default all)")
    parser.add_argument("--skip-people", action="store_true",
                        help="leave out the people's own answers (the egg triplets, Food-100's grids)")
    parser.add_argument("--crowd-studies", type=int, default=4, help="studies per row of the crowd table (0: none)")
    parser.add_argument("--crowd-rate", default="auto", help="the crowd table's attention.rate: auto or a share")
    parser.add_argument("--crowd-delay", type=int, default=0,
                        help="judge each rater once, this many raters later (0: at the study's end)")
    parser.add_argument("--crowd-wired", action="store_true",
                        help="the crowd table through the server's own path (crowd_catch_question, crowd_look)")
    parser.add_argument("--crowd-kinds", default="",
                        help="the crowd table's rows of these kinds only (comma-separated: triplet, rating, "
                             "odd_one_out, rank 8-rank-2, rank 8-rank-1; default all)")
    parser.add_argument("--crowd-labels", default="3,10", help="the crowd table's label counts (3, 10 or both)")
    parser.add_argument("--crowd-dump", default="",
                        help="with --crowd-wired, write each study's raters (bot, flagged, p) to this JSON file")
    a = parser.parse_args()
    global CROWD_RATE, CROWD_DELAY
    CROWD_RATE = a.crowd_rate if a.crowd_rate == "auto" else float(a.crowd_rate)
    CROWD_DELAY = a.crowd_delay
    truth = eggs_truth()
    noise, _ = noise_model(truth, lapse=CAREFUL_LAPSE)
    if a.raters:
        per_kind(a, truth, noise)
    if a.crowd_studies:
        crowd_table(a, truth, noise)


def crowd_table(a, truth, noise) -> None:
    if a.crowd_wired:
        return wired_table(a, truth, noise)
    print(f"\nLabel catch trials judged by the crowd (the design before the server's path): {a.crowd_studies} "
          f"studies per row of {CROWD_RATERS} raters ({CROWD_BOTS:.0%} random), {CROWD_HEADS} label comparisons, "
          f"judged every {CHECK_EVERY} raters, attention.rate {CROWD_RATE}, judged "
          f"{f'{CROWD_DELAY} raters later' if CROWD_DELAY else 'at the end'}\n\n| kind | items known by "
          "| careful flagged | random passing | comparisons retired |\n|---|---|---|---|---|")
    for kind, settings, name, source, labels in crowd_rows(a):
        studies = [crowd_study(kind, settings, egg_items(truth, labels), truth, noise, a.seed + s)
                   for s in range(a.crowd_studies)]
        print(f"| {name} | {source} | {crowd_cells(studies)} |", flush=True)


def crowd_cells(studies: list[dict]) -> str:
    """The table cells "careful flagged | random passing | comparisons retired" summed over crowd studies
    (each a dict of ``bot`` and ``flagged`` per rater, ``retired`` and ``claims``)."""
    careful = sum(int((~r["bot"]).sum()) for r in studies)
    careful_flagged = sum(int(r["flagged"][~r["bot"]].sum()) for r in studies)
    bots = sum(int(r["bot"].sum()) for r in studies)
    bots_passing = sum(int((~r["flagged"][r["bot"]]).sum()) for r in studies)
    retired, claims = sum(r["retired"] for r in studies), sum(r["claims"] for r in studies)
    return (f"{careful_flagged / careful:.2%} ({careful_flagged} of {careful}) | {bots_passing / bots:.2%} "
            f"({bots_passing} of {bots}) | {retired / claims:.0%}")


def wired_table(a, truth, noise) -> None:
    print(f"\nLabel catch trials judged by the crowd, the server's path: {a.crowd_studies} studies per row of "
          f"{CROWD_RATERS} raters ({CROWD_BOTS:.0%} random), {QUESTIONS} questions each, attention.rate {CROWD_RATE}"
          "\n\n| kind | items known by | one in | catch trials per rater | careful flagged | random passing "
          "| comparisons retired |\n|---|---|---|---|---|---|---|")
    dump = {}
    for kind, settings, name, source, labels in crowd_rows(a):
        studies = [wired_study(kind, settings, egg_items(truth, labels), truth, noise, a.seed + s)
                   for s in range(a.crowd_studies)]
        print(f"| {name} | {source} | {studies[-1]['every']} | {np.mean([r['trials'] for r in studies]):.1f} | "
              f"{crowd_cells(studies)} |", flush=True)
        dump[f"{name} | {source}"] = [{"seed": a.seed + s, "bot": r["bot"].tolist(), "flagged": r["flagged"].tolist(),
                                       "p": r["p"], "waited": r["waited"]} for s, r in enumerate(studies)]
    if a.crowd_dump:
        Path(a.crowd_dump).write_text(json.dumps(dump))


def crowd_rows(a) -> list[tuple[str, dict, str, str, int]]:
    """The crowd table's rows (kind, its settings, its name, the items' source, labels) that
    --crowd-kinds and --crowd-labels keep."""
    kinds = {k.strip() for k in a.crowd_kinds.split(",") if k.strip()}
    counts = {int(n) for n in a.crowd_labels.split(",") if n.strip()}
    rows = []
    for kind, settings in KINDS:
        name = kind if kind != "rank" else f"rank {settings['n_reference']}-rank-{settings['n_select']}"
        for labels in (3, 10):
            if (not kinds or name in kinds) and labels in counts:
                rows.append((kind, settings, name, f"{labels} labels (text)", labels))
    return rows


def per_kind(a, truth, noise) -> None:
    print(f"Catch trials at defaults, {QUESTIONS} questions per rater, {a.raters} simulated raters per row "
          f"(human noise model of the egg crowds, lapse {CAREFUL_LAPSE})\n")
    print("| kind | items known by | one in | misses allowed | careful miss (stated) | careful flagged (stated) "
          "| random passing (stated) |\n|---|---|---|---|---|---|---|")
    kinds = {k.strip() for k in a.kinds.split(",") if k.strip()}
    for kind, settings in KINDS:
        name = kind if kind != "rank" else f"rank {settings['n_reference']}-rank-{settings['n_select']}"
        if kinds and name not in kinds:
            continue
        for source, labels, item_kind, feature in SOURCES:
            r = simulate(kind, settings, egg_items(truth, labels, item_kind, feature), truth, noise, a.raters, a.seed)
            if not r:
                continue
            print(f"| {name} | {source} | {r['every']} | {r['allowed']} | {r['careful']['miss']:.1%} "
                  f"({r['stated']:.1%}) | {r['careful']['flagged']:.2%} ({r['careful flagged']:.2%}) | "
                  f"{1 - r['random']['flagged']:.2%} ({r['random passing']:.2%}) |")
    if a.skip_people:
        return
    data_dir = default_data_dir()
    config = StudyConfig.from_dict({"name": "fair", "limits": {"max_questions_per_rater": QUESTIONS}})
    eggs = egg_people(data_dir, config, a.seed)
    print(f"\nPeople's egg triplets meeting the catch margin, as triplet catch trials ({eggs['answers']} answers of "
          f"{eggs['people']} people with 5 or more): missed {eggs['miss']:.1%}; flagged at {QUESTIONS} questions "
          f"(each person's own answers drawn as their trials) {eggs['flagged']:.1%} of people, "
          f"{eggs['careless people']} of them more often than not")
    food = food_people(data_dir)
    print("\nFood-100 people's catch screens (grid of N, K picks)\n\n| grid | screens | missed: no like item "
          "picked (rank rule) | missed: first pick not like |\n|---|---|---|---|")
    for grid in sorted(food, key=lambda g: (int(g[4:].split("force")[0]), g)):
        n, among, first = food[grid]
        print(f"| {grid} | {n} | {among / n:.1%} | {first / n:.1%} |")


if __name__ == "__main__":
    main()
