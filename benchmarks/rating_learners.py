"""Benchmark — rating learners on ratings as noisy as people's, at every budget, offline and live.

Truth and raters: :func:`simulation.ratings.realistic_simulator` (its defaults reproduce a table of real
1-9 ratings: one rating SD 2.2 around its pair's mean, pair means SD 0.7, raters' offsets SD 1.0 and
slopes, near-ties). Each asked pair is answered by one simulated rating, mapped to a distance as a
rating study maps its scale, through ``make_planner(name, n, question_kind="rating")``; the learners
that take raters (``Algorithm.takes_raters``) get ``(i, j, d, rater)`` rows, raters taking turns of 100
ratings. hit@3: an item's neighbour is among its 3 highest mean ratings, by the held-out means of 253
other raters up to 100 items (as the real table was judged), by the simulator's own means above.
``random+model`` is uniform random pairs read through the pooled learner's model (``pooled`` with
``explore=1``), ``random`` uniform random pairs read by their own means.

Offline: ``n`` questions per call, the answers observed before the next call, refits inline. Live
(``--live``): what a study's worker does (``drive_as_pool``), ``--batch`` questions per pass, each refit
handed to a fitter whose result is ready only once the crowd has given ``--lag`` x the ratings the fit
was started on since (a modelled fit time, so the figures do not depend on the machine); the graph is read
after the pass that applies the last answers (a refit ready by then is put in place)::

    python benchmarks/rating_learners.py --items 30 --seeds 6
    python benchmarks/rating_learners.py --items 30 --seeds 6 --live --methods pooled
    python benchmarks/rating_learners.py --items 1000 --budgets 25,50,100,200 --seeds 1 --methods pooled,random+model

``--save FILE`` writes each method's hit@3 seed by seed; ``--paired FILE`` (a file saved at another revision)
adds a table of each method less the same method there, seed by seed (the seeds share truth and raters);
``--first-seed`` starts the seeds elsewhere than 0 (a rule chosen on seeds 0-47 checked on 48-95), paired with
the same seeds of the saved file, and ``--budgets`` may be the saved ones' first few::

    python benchmarks/rating_learners.py --items 30 --seeds 48 --methods pooled --save before.json
    python benchmarks/rating_learners.py --items 30 --seeds 48 --methods pooled --paired before.json
    python benchmarks/rating_learners.py --items 30 --seeds 48 --first-seed 48 --budgets 25,50,100,200,400 \
        --methods pooled --paired before.json   # before.json saved with --seeds 96

``--features none,0.7,noise``: the methods that take item features (``pooled``, so ``random+model`` too) run
without them and with each kind: ``noise`` (16 columns of it), or features of the truth's latent points that
agree with its mean ratings on that share of random triplets (the latent points themselves agree .74-.76: 45%
of the pair means' variance is pair-specific). A second table gives each with features less without, seed by
seed::

    python benchmarks/rating_learners.py --items 30 --seeds 24 --methods pooled,random+model --features none,0.7,noise

``--mixed``: one study asking ratings and triplets of the same items, at equal rater time. The budgets are
rater seconds per item, spent on ratings only, triplets only, or both (``--rating-share`` of the time on
ratings); every answer feeds the pooled learner (ratings through ``observe``, triplets through
``observe_triplets``), which chooses both kinds of question. Seconds per screen from the kinds table
(``engine.kinds``: a triplet 2.0 s, the median of the alien-egg answers; a rating 2.0 s, a stated
assumption) unless ``--seconds`` says otherwise. Triplets are answered by the same people
(:class:`simulation.ratings.TripletRater`: their impressions of the two pairs compared, each as noisy as one
rating by default, ``--triplet-noise`` points, and a 10% lapse); ``duels (triplets)`` is the triplet
studies' default learner on the same triplets. A second table gives mixed less each kind alone, seed by
seed (the goal's test: mixed never below the better of the two). ``--mixed-methods`` runs some of the methods
(ratings only and triplets only always, the goal's reference); ``--true-scale`` tells the learner's split the
simulated people's triplet scale once it has measured both kinds, in place of the scale it fits from the
answers (a ceiling for measuring it). ``mixed (learner's split)`` asks each round as the learner's split says
(``PooledRatings.time_shares``); ``mixed (committed split)`` the same until ``engine.ratings.split.SPLIT_COMMIT``
rater seconds per item, then commits to the kind the split favours then (``committed_share``).
``--first-seed`` starts the seeds elsewhere than 0 (to check a rule chosen on seeds 0-11 on others)::

    python benchmarks/rating_learners.py --mixed --items 30 --budgets 50,100,200,400,800 --seeds 4
    python benchmarks/rating_learners.py --mixed --items 300 --budgets 50,100,200,400 --seeds 1
    python benchmarks/rating_learners.py --mixed --items 30 --budgets 50,100,200,400,800 --seeds 12 \
        --mixed-methods "ratings,triplets,mixed (learner's split)" --true-scale
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import HELDOUT_UP_TO, nn_metrics, print_table, truth_distances  # noqa: E402

from engine.graph import RefitsBeside  # noqa: E402
from engine.kinds import KINDS  # noqa: E402
from engine.planners import make_planner, takes_features  # noqa: E402
from engine.ratings.model import TRIPLET_SCALE_PER_NOISE  # noqa: E402
from engine.ratings.split import committed_share  # noqa: E402
from engine.registry import ALGORITHMS, drive_as_pool  # noqa: E402
from simulation.features import features_of_agreement, noise_features  # noqa: E402
from simulation.ratings import (  # noqa: E402
    REAL_RANDOM_TRIPLET_AGREEMENT,
    TripletNoise,
    TripletRater,
    random_triplet_agreement,
    realistic_simulator,
    triplet_noise_for,
)

#: method label -> (algorithm, parameters)
METHODS = {"pooled": ("pooled", {}), "random+model": ("pooled", {"explore": 1.0}),
           "random": ("random", {}), "anntri": ("anntri", {}), "ann": ("ann", {})}


class Crowd:
    """Ratings given so far (the clock a live study's fits are measured against)."""

    answers = 0


class LaggedFitter:
    """A fit process beside the passes: the fit is computed at once and is ready once the crowd has
    given ``lag`` x the fit's ratings more ratings."""

    def __init__(self, crowd: Crowd, lag: float) -> None:
        self.crowd, self.lag, self.fits = crowd, lag, 0

    def fit(self, task):
        self.fits += 1
        return _Ready(self.crowd, self.crowd.answers + self.lag * len(task.values), task.run())


class _Ready:
    def __init__(self, crowd, at, result):
        self.crowd, self.at, self._result = crowd, at, result

    def done(self) -> bool:
        return self.crowd.answers >= self.at

    def result(self):
        return self._result


def item_features(sim, spec: str, seed: int) -> np.ndarray | None:
    """Simulated item features of a simulator's items (``--features``): None for ``none``; ``noise``
    (:func:`simulation.features.noise_features`, 16 columns); or a number, features of the truth's latent
    points that agree with its mean ratings on that share of random triplets
    (:func:`simulation.features.features_of_agreement`)."""
    if spec == "none":
        return None
    if spec == "noise":
        return noise_features(sim.n_items, 16, random_state=seed)
    D = -np.asarray(sim.means, np.float64)
    np.fill_diagonal(D, 0.0)
    return features_of_agreement(sim.points, float(spec), random_state=seed, distances=D)


def run(method: str, n: int, budgets: list[int], seed: int, live: bool, batch: int, lag: float,
        features: str = "none") -> list[float]:
    """hit@3 at each budget (ratings per item: ``budget x n`` ratings in all), with the items' simulated
    ``features`` (:func:`item_features`) where not ``none``."""
    algorithm, params = METHODS[method]
    sim = realistic_simulator(n, random_state=seed)
    D = truth_distances(sim, seed)
    F = item_features(sim, features, seed)
    prior = {} if F is None else {"features": F}
    planner = make_planner(algorithm, n, question_kind="rating", random_state=seed, **params, **prior)
    takes_raters = ALGORITHMS[algorithm].takes_raters
    crowd = Crowd()
    if live:
        drive_as_pool(planner, LaggedFitter(crowd, lag))
    step = batch if live else n
    total, out = 0, []
    for b in budgets:
        while total < b * n:
            qs = planner.next_questions(min(step, b * n - total))
            if not qs:
                break
            rows = sim.answer(qs)
            planner.observe(rows if takes_raters else [r[:3] for r in rows])
            total += len(qs)
            crowd.answers = total
        if live and isinstance(planner, RefitsBeside):
            # the update pass that applies the last answers puts a refit that is ready by then in place
            # (the worker's pass with nothing to plan, workers.jobs.learners)
            planner.settle_fit()
        picks = np.asarray(planner.neighbor_graph(1).neighbors)[:, 0]
        out.append(nn_metrics(picks, D)[1])
    return out


#: --mixed: method label -> the share of rater time spent on ratings (None: duels on triplets, or the
#: learner's own split)
MIXED = {"ratings": 1.0, "triplets": 0.0, "mixed": None, "mixed (learner's split)": None,
         "mixed (committed split)": None, "duels (triplets)": None}
LEARNED = "mixed (learner's split)"
#: the learner's split until SPLIT_COMMIT rater seconds per item, then all but SPLIT_COMMIT_FLOOR of the time on
#: the kind it favours then
COMMITTED = "mixed (committed split)"
SPLITS = (LEARNED, COMMITTED)


def true_triplet_scale(sim, triplet_noise: float) -> float:
    """The logistic scale (distance units) of the simulated people's triplets, leaving out their lapse: a
    gap's SD, ``sqrt(2)`` x ``triplet_noise`` points, over a logistic's 1.8 SDs per scale, in the rating
    scale's units (a point is ``1 / (high - low)``)."""
    scale = sim.noise.scale
    return float(np.sqrt(2.0) * triplet_noise / (scale.high - scale.low) / 1.8)


def run_mixed(method: str, n: int, budgets: list[int], seed: int, seconds: dict[str, float], share: float,
              triplet_noise: float | None, spent_out: list | None = None, true_scale: bool = False,
              triplet_agreement: float | None = None) -> list[float]:
    """hit@3 at each budget of rater seconds per item, for ratings only, triplets only or both into the
    pooled learner (or triplets into duels); ``spent_out`` gets the share of the time spent on ratings
    by each budget. ``true_scale``: the learner's split weighs a triplet by the simulator's scale
    (:func:`true_triplet_scale`) once it has measured both kinds, in place of the scale it fits.
    ``triplet_agreement``: the triplet noise is the one at which people's answers to random triplets of this
    seed's items agree with their truth that often (:func:`simulation.ratings.triplet_noise_for`), not
    ``triplet_noise``."""
    sim = realistic_simulator(n, random_state=seed)
    D = truth_distances(sim, seed)
    triplet_noise = noise_of(sim.means, triplet_noise, triplet_agreement)
    rater = TripletRater(sim.means, TripletNoise(noise_sd=triplet_noise), random_state=seed + 20_000)
    duels = method == "duels (triplets)"
    planner = make_planner("duels" if duels else "pooled", n, random_state=seed,
                           question_kind="triplet" if duels else "rating")
    if true_scale and method in SPLITS:
        fitted, truth = planner.triplet_scale, true_triplet_scale(sim, triplet_noise)
        planner.triplet_scale = lambda: truth if planner._measured() else fitted()
    rating_share = share if method == "mixed" else (0.0 if duels else MIXED[method])
    spent = {"rating": 0.0, "triplet": 0.0}  # rater seconds on each kind so far
    committed = None  # whether the committed split chose ratings (kept as a study's state would keep it)
    out = []
    for b in budgets:
        while method in SPLITS and sum(spent.values()) < b * n - 1e-9:
            # one round of about n screens' time, split as the learner says now
            left = b * n - sum(spent.values())
            step = min(left, n * min(seconds.values()))
            r = planner.time_shares(seconds)["rating"]
            if method == COMMITTED:
                r, committed = committed_share(r, sum(spent.values()) / n, committed)
            counts = {kind: int(round(step * s / seconds[kind])) for kind, s in (("rating", r), ("triplet", 1 - r))}
            if not any(counts.values()):
                counts["rating" if r >= 0.5 else "triplet"] = 1
            if counts["rating"]:
                planner.observe(sim.answer(planner.next_questions(counts["rating"])))
            if counts["triplet"]:
                planner.observe_triplets(rater.answer(planner.next_triplets(counts["triplet"])))
            for kind, c in counts.items():
                spent[kind] += c * seconds[kind]
        while method not in SPLITS and sum(spent.values()) < b * n - 1e-9:
            # ask one batch of about n screens, keeping each kind's time at its share
            total = sum(spent.values())
            left = b * n - total
            kind = "rating" if rating_share >= 1 or 0 < rating_share and spent["rating"] <= rating_share * total \
                else "triplet"
            count = max(1, min(n, int(left / seconds[kind])))
            if kind == "rating":
                planner.observe(sim.answer(planner.next_questions(count)))
            elif duels:
                planner.observe(rater.answer(planner.next_questions(count)))
            else:
                planner.observe_triplets(rater.answer(planner.next_triplets(count)))
            spent[kind] += count * seconds[kind]
        picks = np.asarray(planner.neighbor_graph(1).neighbors)[:, 0]
        out.append(nn_metrics(picks, D)[1])
        if spent_out is not None:
            spent_out.append(spent["rating"] / sum(spent.values()))
    return out


def noise_of(means: np.ndarray, triplet_noise: float | None, triplet_agreement: float | None) -> float:
    """The triplet noise of a seed's items: ``triplet_noise``, or the one at which random triplets of them agree with
    their truth ``triplet_agreement`` of the time if that is given."""
    return float(triplet_noise) if triplet_agreement is None else triplet_noise_for(means, triplet_agreement)


def triplet_noise_of(args, n: int) -> tuple[float, float]:
    """(the triplet noise, how often people's answers to random triplets agree with the truth at it), means over
    the seeds' items: what a table's triplets are as noisy as, beside the real figure."""
    noises, agreements = [], []
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        means = realistic_simulator(n, random_state=seed).means
        noise = noise_of(means, args.triplet_noise, args.triplet_agreement)
        noises.append(noise)
        agreements.append(random_triplet_agreement(means, TripletNoise(noise_sd=noise)))
    return float(np.mean(noises)), float(np.mean(agreements))


def scale_reads(args) -> None:
    """--scale-reads: what the learner's split reads a triplet's scale as in a study's first answers, half the
    screens each kind, against the model's assumption (a triplet as noisy as two ratings compared) and the truth."""
    counts = [float(x) for x in args.scale_reads.split(",")]
    for n in (int(x) for x in args.items.split(",")):
        reads, truths = [], []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            sim = realistic_simulator(n, random_state=seed)
            noise = noise_of(sim.means, args.triplet_noise, args.triplet_agreement)
            rater = TripletRater(sim.means, TripletNoise(noise_sd=noise), random_state=seed + 20_000)
            planner = make_planner("pooled", n, random_state=seed, question_kind="rating")
            measured = planner._measured
            row = []
            for c in counts:
                while len(planner.log_) < c * n:
                    planner.observe(sim.answer(planner.next_questions(max(1, n // 2))))
                    planner.observe_triplets(rater.answer(planner.next_triplets(max(1, n // 2))))
                planner.refresh_if_due()
                if planner.fit_ is None:
                    row.append(np.nan)
                    continue
                planner._measured = lambda: True  # read the scale as if both kinds were measured
                assumed = TRIPLET_SCALE_PER_NOISE * float(planner.fit_.estimated.noise)
                row.append(planner.triplet_scale() / assumed)
                planner._measured = measured
            reads.append(row)
            truths.append(noise / sim.noise.noise_sd)  # the assumption: a triplet as noisy as a rating per pair
        r = np.asarray(reads)
        print_table(f"{n} items, a triplet's scale as the split reads it over the model's assumption, half the "
                    f"screens each kind; the truth over the assumption {np.mean(truths):.3f}; mean (least - most) of "
                    f"{args.seeds} seeds{_from_seed(args)}", ["ratings and triplets per item", "read / assumption"],
                    [[f"{c:g}", f"{np.nanmean(r[:, k]):.3f} ({np.nanmin(r[:, k]):.3f} - {np.nanmax(r[:, k]):.3f})"]
                     for k, c in enumerate(counts)])


def main_mixed(args, budgets: list[int]) -> None:
    seconds = {"rating": KINDS["rating"].seconds, "triplet": KINDS["triplet"].seconds}
    for part in filter(None, args.seconds.split(",")):
        kind, _, value = part.partition("=")
        seconds[kind] = float(value)
    methods = set(MIXED) if args.mixed_methods == "all" else {m.strip() for m in args.mixed_methods.split(",")}
    unknown = methods - set(MIXED)
    if unknown or not {"ratings", "triplets"} <= methods:
        raise SystemExit(f"--mixed-methods: among {', '.join(MIXED)}, with ratings and triplets; "
                         f"got {unknown or methods}")
    for n in (int(x) for x in args.items.split(",")):
        rows, per_seed, split_shares = [], {}, {}
        for method in [m for m in MIXED if m in methods]:
            t0 = time.time()
            spent: list[float] = []
            hits = [run_mixed(method, n, budgets, s, seconds, args.rating_share, args.triplet_noise, spent,
                              args.true_scale, args.triplet_agreement)
                    for s in range(args.first_seed, args.first_seed + args.seeds)]
            per_seed[method] = np.asarray(hits)
            mean = np.mean(hits, axis=0)
            rows.append([method, *[f"{v:.2f}" for v in mean]])
            if method in SPLITS:
                split_shares[method] = np.reshape(spent, (args.seeds, len(budgets))).mean(axis=0)
            print(f"  n={n} {method}: hit@3 {' / '.join(rows[-1][1:])} ({time.time() - t0:.0f} s)", file=sys.stderr,
                  flush=True)
        truth = "held-out means of 253 raters" if n <= HELDOUT_UP_TO else "the simulator's means"
        noise, agreement = triplet_noise_of(args, n)
        print_table(f"{n} items, realistic ratings and triplets of the same people, hit@3 ({truth}) by rater "
                    f"seconds per item (a rating {seconds['rating']:g} s, a triplet {seconds['triplet']:g} s; "
                    f"mixed: {100 * args.rating_share:.0f}% of the time on ratings; triplet noise "
                    f"{noise:.3g} points{' (mean over the seeds)' if args.triplet_agreement else ''}: random "
                    f"triplets agree with the truth {agreement:.3f}, real people's {REAL_RANDOM_TRIPLET_AGREEMENT}"
                    f"{'; the split told the true scale' if args.true_scale else ''}), "
                    f"mean of {args.seeds} seeds{_from_seed(args)}",
                    ["method", *[f"{b} s/item" for b in budgets]],
                    rows + [[f"{method.removeprefix('mixed (').removesuffix(')')}: share of the time on ratings",
                             *[f"{v:.2f}" for v in shares]] for method, shares in split_shares.items()])
        print_table(f"{n} items, mixed less each kind alone, seed by seed: mean (standard error) of "
                    f"{args.seeds} seeds{_from_seed(args)}", ["difference", *[f"{b} s/item" for b in budgets]],
                    paired_rows(per_seed))


def _from_seed(args) -> str:
    return f" from seed {args.first_seed}" if args.first_seed else ""


def paired_rows(per_seed: dict[str, np.ndarray]) -> list[list[str]]:
    """Mixed less ratings only, triplets only and the better of the two in each seed, by budget: the
    goal's test with the seeds' shared truth and raters taken out."""
    ratings, triplets = per_seed["ratings"], per_seed["triplets"]
    rows = []
    for label, ref in (("mixed - ratings", ratings), ("mixed - triplets", triplets),
                       ("mixed - the better", np.maximum(ratings, triplets))):
        for name in [m for m in ("mixed", *SPLITS) if m in per_seed]:
            d = per_seed[name] - ref
            se = d.std(axis=0, ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.full(d.shape[1], np.nan)
            rows.append([label.replace("mixed", name, 1),
                         *[f"{m:+.2f} ({e:.2f})" for m, e in zip(d.mean(axis=0), se, strict=True)]])
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--methods", default="pooled,random+model,random,anntri")
    ap.add_argument("--items", default="30")
    ap.add_argument("--budgets", default="25,50,100,200,400,800", help="ratings per item")
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--live", action="store_true", help="drive as a live pool (also prints offline)")
    ap.add_argument("--live-only", action="store_true", help="drive as a live pool only")
    ap.add_argument("--batch", type=int, default=200, help="questions per live pass")
    ap.add_argument("--lag", type=float, default=0.1, help="a live refit is ready after this share of its ratings")
    ap.add_argument("--mixed", action="store_true",
                    help="ratings only vs triplets only vs both at equal rater time (budgets in seconds per item)")
    ap.add_argument("--seconds", default="", help="--mixed: seconds per screen, e.g. rating=3,triplet=2")
    ap.add_argument("--rating-share", type=float, default=0.5, help="--mixed: share of the time on ratings")
    ap.add_argument("--mixed-methods", default="all",
                    help="--mixed: the methods to run, comma-separated (ratings and triplets always among them)")
    ap.add_argument("--first-seed", type=int, default=0,
                    help="seeds first-seed, first-seed + 1, ... (--seeds of them)")
    ap.add_argument("--true-scale", action="store_true",
                    help="--mixed: the learner's split weighs triplets by the simulator's true scale (a ceiling)")
    ap.add_argument("--triplet-noise", type=float, default=TripletNoise().noise_sd,
                    help="--mixed: SD (rating points) of each pair's impression in a triplet")
    ap.add_argument("--triplet-agreement", type=float, default=None,
                    help="--mixed: in place of --triplet-noise, the noise at which random triplets agree with the "
                         f"truth this often (real people's: {REAL_RANDOM_TRIPLET_AGREEMENT})")
    ap.add_argument("--scale-reads", default="",
                    help="ratings (and triplets) per item, e.g. 2,3,4,5: print how the split reads a triplet's scale "
                         "then (at --triplet-noise or --triplet-agreement)")
    ap.add_argument("--features", default="none",
                    help="item features given to the methods that take them, comma-separated: none, noise, or the "
                         "share of random triplets on which they agree with the truth (e.g. none,0.7,noise)")
    ap.add_argument("--save", default="", help="write each method's hit@3 seed by seed to this JSON file")
    ap.add_argument("--paired", default="",
                    help="a --save file (of another revision): print each method less it, paired by seed")
    args = ap.parse_args(argv)
    budgets = [int(x) for x in args.budgets.split(",")]
    if args.scale_reads:
        scale_reads(args)
        return
    if args.mixed:
        main_mixed(args, budgets)
        return
    saved: dict[str, dict[str, list]] = {}
    for n in (int(x) for x in args.items.split(",")):
        rows = []
        runs = [(method, spec) for method in args.methods.split(",") for spec in args.features.split(",")
                if spec == "none" or takes_features(METHODS[method][0])]
        for method, spec in runs:
            for live in ([True] if args.live_only else [False, True] if args.live else [False]):
                t0 = time.time()
                hits = [run(method, n, budgets, s, live, args.batch, args.lag, spec)
                        for s in range(args.first_seed, args.first_seed + args.seeds)]
                mean = np.mean(hits, axis=0)
                label = f"{method}{'' if spec == 'none' else f' + features {spec}'}{' live' if live else ''}"
                rows.append([label, *[f"{v:.2f}" for v in mean]])
                saved.setdefault(str(n), {})[label] = [[float(v) for v in h] for h in hits]
                print(f"  n={n} {label}: hit@3 {' / '.join(rows[-1][1:])} ({time.time() - t0:.0f} s)",
                      file=sys.stderr, flush=True)
        truth = "held-out means of 253 raters" if n <= HELDOUT_UP_TO else "the simulator's means"
        pool = f"; live: batches of {args.batch}, refits lag {args.lag:g}" if args.live or args.live_only else ""
        print_table(f"{n} items, realistic ratings, hit@3 ({truth}) by ratings per item, mean of {args.seeds} "
                    f"seeds{_from_seed(args)}{pool}",
                    ["method", *[f"{b}/item" for b in budgets]], rows)
        with_features = {label: hits for label, hits in saved[str(n)].items() if " + features " in label}
        if with_features:
            without = {label: saved[str(n)][_without_features(label)] for label in with_features
                       if _without_features(label) in saved[str(n)]}
            print_table(f"{n} items, each method with features less the same method without, paired by seed: mean "
                        f"(standard error)", ["difference", *[f"{b}/item" for b in budgets]],
                        differences(with_features, without))
        if args.paired:
            saved_before = json.loads(Path(args.paired).read_text())
            before = saved_before.get(str(n), {})
            offset = args.first_seed - int(saved_before.get("first_seed", 0))
            print_table(f"{n} items, each method less the same method in {args.paired}, paired by seed: mean "
                        f"(standard error) of the seeds both ran", ["difference", *[f"{b}/item" for b in budgets]],
                        differences(saved[str(n)], before, offset))
    if args.save:
        Path(args.save).write_text(json.dumps({**saved, "first_seed": args.first_seed}))


def _without_features(label: str) -> str:
    """A run's label without its ``+ features ...`` part (``pooled + features 0.7 live`` -> ``pooled live``)."""
    head, _, tail = label.partition(" + features ")
    return head + (" live" if tail.endswith(" live") else "")


def differences(now: dict[str, list], before: dict[str, list], offset: int = 0) -> list[list[str]]:
    """Each label in both (hit@3 seed by seed, budgets along), now less before over their common seeds
    (``now``'s first seed is ``before``'s ``offset``-th) and the budgets now has (the saved ones' first few)."""
    rows = []
    for label in [x for x in now if x in before]:
        if offset < 0:
            raise SystemExit(f"--paired: the saved seeds start after --first-seed ({-offset} later)")
        k = min(len(now[label]), len(before[label]) - offset)
        if k < 1:
            continue
        ref = np.asarray(before[label][offset:offset + k])
        got = np.asarray(now[label][:k])
        d = got - ref[:, : got.shape[1]]
        se = d.std(axis=0, ddof=1) / np.sqrt(k) if k > 1 else np.full(d.shape[1], np.nan)
        rows.append([f"{label} ({k} seeds)", *[f"{m:+.3f} ({e:.3f})" for m, e in zip(d.mean(axis=0), se, strict=True)]])
    return rows


if __name__ == "__main__":
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        main()
