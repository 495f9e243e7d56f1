"""Benchmark — features as priors: how much the items' own features save a study.

Every row drives the public API an outside harness drives, ``make_planner(name, n, features=F,
random_state=s)``, offline (``next_questions(n)`` → answers → ``observe``, one question per head per
call) and reads ``neighbor_graph(k=1)`` at each budget of answers per item: hit@3 (the pick is one of
the item's 3 truly nearest), mean over seeds. Methods:

- ``duels``: the default learner without features;
- ``duels + F``: the same with the features F;
- ``random + emb(F)``: uniformly random triplets and a t-STE embedding fitted on the features and the
  answers together (``fit_embedding(features=...)``, 2/4/8 dimensions chosen on held-out answers):
  the strongest non-adaptive peer;
- ``F alone``: 1-NN in the features (no answer).

Data sets (``--datasets``):

- ``clusters``: clustered 4-D points (clusters of 20, as ``live_vs_offline.py``), answered by the
  human noise model (logistic 0.1 of the clusters' unit spread, lapse 0.1); features of known quality
  (``simulation.features``: triplet agreement .6 / .7 / .8 with the truth) and pure noise (16 columns);
- ``eggs``: the 300 NEXT alien eggs, the 1-D truth answered by the noise fitted to their 17,611 human
  answers; features: the egg's generated parameter itself, the parameter blurred to agreement .8, noise;
- ``food100``: the 100 Food-100 dishes (Wilber et al., HCOMP 2014). The truth is the crowd's consensus:
  a 4-D t-STE fitted to every triplet the 15,320 non-catch grid screens imply; simulated raters answer
  from it with a lapse of 0.1 and a logistic scale chosen so they agree with the consensus as often as
  the real screens do. Features: the dishes' ingredients (one column per ingredient, TF-IDF weighted)
  and their six taste percentages, as a researcher would have them before asking anyone.

With ``--ceiling`` no learner runs: what features of agreement A can tell at all, per truth and size. For
features blurred to agreement A on random triplets (``random``) and on local ones (``local 50``: j and k among
i's 50 truly nearest, :func:`simulation.features.local_triplets`): their agreement on both kinds, hit@3 of 1-NN
in the features, and the recall of the true 3 nearest among each item's 15 and 50 nearest in the features (the
shortlists a learner could take from them). Truths: ``box`` (``live_vs_offline.py``'s: clusters of 20 in
[0, 10]^4 whatever n, so larger studies overlap more) and ``dense`` (``harness.points``: the box grows with n).

    python benchmarks/features_prior.py                       # clusters n = 100, eggs, food100
    python benchmarks/features_prior.py --datasets clusters --sizes 1000 --budgets 5,10,25 --seeds 1
    python benchmarks/features_prior.py --ceiling --sizes 1000,10000,50000 --agreements .7

With ``--false-trust`` no hit@3 is measured: how often the features' test (``engine.duels.priors``) trusts
features whose test share is ``--shares`` (.5: pure noise), per size, over ``--seeds`` runs. Its decisions need
only the test answers: each run drives ``FeaturePrior.judge`` as the planner does, one look per call of n
questions (offline) or of ``--batch`` questions, each test won with probability share; once trusted, the
random share (``explore`` .1) of the questions are tests, judged on their own, up to ``--budgets``' largest
answers per item: the table gives the share ever trusted, still trusted at the end, the looks (calls) before a
trust, and the answers per item at which trusted features were dropped. ``--planner`` instead drives the planner
itself on pure noise (``live_vs_offline.py``'s truth and raters: clustered 4-D points) until the features are
trusted or dropped; ``--trust-z 2.0`` judges as before alpha was spent over looks (z >= 2.0 at every look).

    python benchmarks/features_prior.py --false-trust --sizes 100,1000,10000 --seeds 20000
    python benchmarks/features_prior.py --false-trust --planner --sizes 10000 --seeds 40 --trust-z 2.0

With ``--kind rank`` the clusters are asked 8-rank-2 screens (``RankOracle``, the same noise; budgets in screens per
item; no peer); ``--screen-tests 0`` leaves out the screens that test trusted features again
(``engine.duels.questions.SCREEN_TEST_SHARE``):

    python benchmarks/features_prior.py --datasets clusters --kind rank --agreements .7 --seeds 12 --no-peer
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import zipfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import clustered_points, nn_metrics, points, print_table, to_budgets  # noqa: E402
from scipy.spatial import cKDTree  # noqa: E402

from engine.duels import priors  # noqa: E402
from engine.duels.fits import auto_warmup  # noqa: E402
from engine.embedding import embedding_neighbors, fit_embedding, select_embedding  # noqa: E402
from engine.features import PRIOR_STIFFNESS, feature_neighbors, feature_space  # noqa: E402
from engine.planners import make_planner  # noqa: E402
from simulation import oracles  # noqa: E402
from simulation.datasets import default_data_dir, load_alien_eggs  # noqa: E402
from simulation.features import (  # noqa: E402
    features_of_agreement,
    local_triplets,
    noise_features,
    triplet_agreement,
)
from simulation.noise import alien_egg_noise  # noqa: E402

NOISE, LAPSE = 0.1, 0.1


def drive(n: int, oracle, budgets: list[int], seed: int, features=None, kind: str = "triplet") -> list[np.ndarray]:
    """Duels from the registry (``make_planner``), offline; its picks at each budget."""
    planner = make_planner("duels", n, question_kind=kind, random_state=seed, features=features)
    out = []
    for _ in to_budgets(planner, oracle, n, budgets):
        out.append(np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0])
    return out


def peer(n: int, oracle, budgets: list[int], seed: int, features) -> list[np.ndarray]:
    """Random triplets + a t-STE fitted on the features and the answers together, at each budget."""
    rng = np.random.default_rng([seed, 7])
    q = oracles.random_triplet_questions(n, max(budgets) * n, rng)
    a = np.asarray(oracle.answer([tuple(map(int, r)) for r in q]))
    t = np.column_stack([a[:, 0], a[:, 3], np.where(a[:, 3] == a[:, 1], a[:, 2], a[:, 1])])
    Z = feature_space(features, n).astype(np.float64)
    out = []
    for b in budgets:
        X = select_embedding(t[: b * n], n, dims=(2, 4, 8), kernels=("tste",), line=False, random_state=seed,
                             features=Z, stiffness=PRIOR_STIFFNESS).embedding
        out.append(embedding_neighbors(X, 1)[:, 0])
    return out


def evaluate(title: str, D: np.ndarray, make_oracle, variants: dict, budgets: list[int], seeds: int,
             peer_of: tuple[str, ...] = (), kind: str = "triplet", first_seed: int = 0,
             only: list[str] | None = None, reseed: int = 0) -> None:
    """The rows of ``variants`` (label -> features of a seed, None: duels without features) on seeds
    ``first_seed`` ... ``first_seed + seeds - 1``; ``only``: those labels and the row without features;
    ``reseed``: one more row, duels without features whose own random stream is seed + ``reseed`` (the same
    truth and raters: how far two such learners differ by chance, paired by seed)."""
    n = len(D)
    if only is not None:
        variants = {k: v for k, v in variants.items() if v is None or k in only}
    if reseed:
        variants = {**variants, f"learner seed + {reseed}": None}
    rows = []
    curves_of = {}
    started = time.monotonic()
    for label, make_features in variants.items():
        other = reseed if label.startswith("learner seed") else 0
        runs = {"duels" if label == "none" else f"duels, {label}" if other else f"duels + {label}": []}
        if label in peer_of:
            runs[f"random + emb({label})"] = []
        alone = []
        agree = []
        for seed in range(first_seed, first_seed + seeds):
            F = None if make_features is None else make_features(seed)
            key = next(iter(runs))
            runs[key].append([nn_metrics(p, D)[1] for p in drive(n, make_oracle(seed), budgets, seed + other, F,
                                                                   kind)])
            if F is not None:
                agree.append(triplet_agreement(F, D))
                alone.append(nn_metrics(feature_neighbors(feature_space(F, n), 1)[:, 0], D)[1])
                if len(runs) > 1:
                    runs[f"random + emb({label})"].append(
                        [nn_metrics(p, D)[1] for p in peer(n, make_oracle(seed + 100), budgets, seed, F)])
        curves_of.update(runs)
        for name, curves in runs.items():
            mean = np.mean(curves, axis=0)
            rows.append([name, "-" if not agree else f"{np.mean(agree):.2f}",
                         "-" if not alone else f"{np.mean(alone):.2f}"] + [f"{v:.2f}" for v in mean])
    print_table(f"{title} — hit@3 by answers per item (mean of {seeds} seed(s); {time.monotonic() - started:.0f} s)",
                ["method", "F agrees", "F alone"] + [f"{b}/item" for b in budgets], rows)
    if seeds > 1:
        # each duels + F run less duels on the same seed (the same oracle): mean and standard error. Only the truth,
        # the raters and the features are paired: the learners' random streams part at the first question
        base = np.asarray(curves_of["duels"])
        diffs = []
        for name, curves in curves_of.items():
            if name.startswith(("duels + ", "duels, ")):
                d = np.asarray(curves) - base
                se = d.std(axis=0, ddof=1) / np.sqrt(len(d))
                diffs.append([f"{name} - duels"] + [f"{m:+.3f} ± {e:.3f}" for m, e in zip(d.mean(axis=0), se,
                                                                                            strict=True)])
        print_table(f"{title} — paired differences, seed by seed (mean ± standard error of {seeds})",
                    ["method"] + [f"{b}/item" for b in budgets], diffs)
    sys.stdout.flush()


def clusters(args) -> None:
    for n in args.sizes:
        X = points(n, n)
        D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(axis=2))

        def make_oracle(seed, X=X):
            if args.kind == "rank":  # (for two references the same model as the triplets')
                return oracles.RankOracle.from_points(X, scale=NOISE, lapse=LAPSE, n_select=2, random_state=seed + 1)
            return oracles.TripletOracle.from_points(X, noise=NOISE, model="human", lapse=LAPSE, random_state=seed + 1)

        variants = {"none": None}
        for a in args.agreements:
            variants[f"F .{round(a * 10)}"] = (lambda seed, a=a, X=X, D=D:
                                              features_of_agreement(X, a, random_state=seed, distances=D))
        variants["noise"] = lambda seed, n=n: noise_features(n, 16, random_state=seed)
        rank = args.kind == "rank"
        evaluate(f"clustered 4-D points, n = {n}, human noise (logistic {NOISE}, lapse {LAPSE})"
                 + (", 8-rank-2 screens (budgets: screens per item)" if rank else ""), D, make_oracle,
                 variants, args.budgets, args.seeds, kind=args.kind,
                 peer_of=("F .7", "noise") if not (args.no_peer or rank) else (), first_seed=args.first_seed,
                 only=args.variants, reseed=args.reseed)


def eggs(args) -> None:
    data = load_alien_eggs()
    D = data.distances
    n = len(D)
    fit = alien_egg_noise()
    param = data.coordinates.astype(np.float64)[:, None]

    def make_oracle(seed):
        return oracles.TripletOracle(D, model="human", noise=fit.scale, lapse=fit.lapse, random_state=seed + 1)

    variants = {"none": None, "parameter": lambda seed: param,
                "parameter .8": lambda seed: features_of_agreement(param, 0.8, n_features=1, random_state=seed,
                                                                   distances=D),
                "noise": lambda seed: noise_features(n, 16, random_state=seed)}
    evaluate(f"alien eggs, n = {n}, simulated human raters (noise fitted to the egg crowds)", D, make_oracle,
             variants, args.budgets, args.seeds, peer_of=("parameter .8",) if not args.no_peer else (),
             first_seed=args.first_seed, only=args.variants, reseed=args.reseed)


def food100_screens(data_dir: Path) -> tuple[list[str], np.ndarray]:
    """(dish file names, triplets (probe, picked, not picked)) of every non-catch Food-100 grid screen."""
    names: dict[str, int] = {}
    rows = []
    with zipfile.ZipFile(data_dir / "food100" / "food100_grids.zip") as z:
        for entry in sorted(z.namelist()):
            if not entry.endswith(".json"):
                continue
            for hit in json.loads(z.read(entry)):
                for screen in hit["HIT_screens"]:
                    if screen["is_catchtrial"]:
                        continue
                    ids = [names.setdefault(Path(x).name, len(names)) for x in [screen["probe"], *screen["images"]]]
                    head, shown = ids[0], ids[1:]
                    picked = {names[Path(x).name] for x in screen["near_answer"]}
                    for p in picked:
                        rows.extend((head, p, o) for o in shown if o not in picked)
    order = sorted(names)
    remap = np.array([order.index(k) for k in sorted(names, key=names.get)])
    return order, remap[np.asarray(rows, np.int64)]


def food100_features(data_dir: Path, dishes: list[str]) -> np.ndarray:
    """Ingredients (one TF-IDF weighted column per ingredient name) and the six taste percentages; the
    dishes the annotation file has nothing for (7 of 100) get a row of zeros."""
    info = {d: v or {} for d, v in json.loads((data_dir / "food100" / "ingredients.json").read_text()).items()}
    names = [[i["name"].strip().lower() for i in info.get(d, {}).get("ingredients") or []] for d in dishes]
    vocab = sorted({x for row in names for x in row})
    col = {v: c for c, v in enumerate(vocab)}
    B = np.zeros((len(dishes), len(vocab)))
    for r, row in enumerate(names):
        B[r, [col[x] for x in row]] = 1.0
    idf = np.log(len(dishes) / B.sum(axis=0))
    tastes = np.zeros((len(dishes), 6))
    for r, d in enumerate(dishes):
        for c, t in enumerate(sorted(info.get(d, {}).get("tastes") or [], key=lambda t: t["name"])[:6]):
            tastes[r, c] = float(t["percent"] or 0) / 100.0
    return np.hstack([B * idf, tastes])


def food100(args) -> None:
    data_dir = default_data_dir()
    dishes, t = food100_screens(data_dir)
    n = len(dishes)
    consensus = fit_embedding(t, n, dim=4, kernel="tste", random_state=0)
    D = np.sqrt(((consensus[:, None] - consensus[None]) ** 2).sum(axis=2))
    gap = D[t[:, 0], t[:, 2]] - D[t[:, 0], t[:, 1]]
    agree = float(np.mean(gap > 0))
    lo, hi = 1e-4, 10.0
    for _ in range(40):  # the logistic scale at which simulated raters agree with the consensus as often
        mid = np.sqrt(lo * hi)
        p = oracles.human_agree_probability(gap, mid, LAPSE).mean()
        lo, hi = (mid, hi) if p > agree else (lo, mid)
    scale = float(np.sqrt(lo * hi))
    F = food100_features(data_dir, dishes)
    print(f"Food-100: {n} dishes, {len(t):,} triplets from the non-catch screens; the 4-D consensus predicts "
          f"{agree:.3f} of them; simulated raters: logistic scale {scale:.3f}, lapse {LAPSE}; features: "
          f"{F.shape[1] - 6} ingredients + 6 tastes")

    def make_oracle(seed):
        return oracles.TripletOracle(D, model="human", noise=scale, lapse=LAPSE, random_state=seed + 1)

    variants = {"none": None, "ingredients": lambda seed: F, "noise": lambda seed: noise_features(n, 16, seed)}
    evaluate("Food-100 dishes, simulated from the crowd's consensus", D, make_oracle, variants, args.budgets,
             args.seeds, peer_of=("ingredients",) if not args.no_peer else (), first_seed=args.first_seed,
             only=args.variants, reseed=args.reseed)


#: local triplets' neighbourhood (``--ceiling``)
LOCAL = 50


def ceiling(args) -> None:
    """What features of each agreement tell without any answer (see ``--ceiling`` in the module text)."""
    rows = []
    for truth, make in (("box", clustered_points), ("dense", points)):
        for n in args.sizes:
            X = make(n, 0)
            _, true3 = cKDTree(X).query(X, k=4)
            true3 = np.asarray(true3)[:, 1:]
            third = np.sqrt(((X[true3[:, 2]] - X) ** 2).sum(axis=1))
            rand = np.random.default_rng(1).integers(n, size=(200_000, 3))
            rand = rand[(rand[:, 0] != rand[:, 1]) & (rand[:, 0] != rand[:, 2]) & (rand[:, 1] != rand[:, 2])]
            local = local_triplets(X, LOCAL, random_state=1)
            for a in args.agreements:
                for model, k in (("random", 0), (f"local {LOCAL}", LOCAL)):
                    F = features_of_agreement(X, a, random_state=0, local=k)
                    near = feature_neighbors(feature_space(F, n), 50)
                    pick = near[:, 0]
                    hit = np.sqrt(((X[pick] - X) ** 2).sum(axis=1)) <= third + 1e-9
                    rec = [np.mean([np.isin(true3[i], near[i, :m]).mean() for i in range(n)]) for m in (15, 50)]
                    rows.append([truth, f"{n:,}", f"{a:g} {model}",
                                 f"{triplet_agreement(F, None, points=X, triplets=rand):.3f}",
                                 f"{triplet_agreement(F, None, points=X, triplets=local):.3f}",
                                 f"{hit.mean():.3f}", f"{rec[0]:.3f}", f"{rec[1]:.3f}"])
                    print("  " + "  ".join(rows[-1]), file=sys.stderr, flush=True)
    print_table("what features tell before any answer: hit@3 of 1-NN in them, recall of the true 3 nearest "
                "among the 15 / 50 nearest in them",
                ["truth", "items", "features", "agree random", f"agree local {LOCAL}", "F alone hit@3",
                 "recall@15", "recall@50"], rows)


#: share of a duels study's questions that are random (its ``explore``): test questions once the features are trusted
EXPLORE = 0.1


def judged_run(n: int, share: float, step: int, per_item: int, rng: np.random.Generator) -> tuple[int, int, float]:
    """One study's judgement of features whose test a feature neighbour wins with probability ``share``,
    asked ``step`` questions a call up to ``per_item`` answers per item: (the look that trusted them, -1:
    never; whether trusted at the end; answers per item when trusted features were dropped, nan: not)."""
    prior = priors.FeaturePrior(np.zeros((n, 1), np.float32))
    trusted_at, dropped_at = -1, float("nan")
    answers = 0
    while answers < per_item * n and not prior.dropped_:
        asked = min(step, per_item * n - answers)
        tests = asked if prior.testing else int(rng.binomial(asked, EXPLORE))
        prior.tests_ += (int(rng.binomial(tests, share)), tests)
        answers += asked
        looks = prior.looks_
        verdict = prior.judge(final=answers >= auto_warmup(n) * n)
        if verdict:
            prior.trust()
            trusted_at = looks
        elif verdict is False:
            prior.dropped_ = True
            if prior.decided_:
                dropped_at = answers / n
    return trusted_at, int(prior.trusted), dropped_at


def planner_run(n: int, seed: int) -> bool:
    """The planner itself on pure noise (``live_vs_offline.py``'s truth, raters and features), offline,
    until the features are trusted (True) or dropped (False)."""
    X = clustered_points(n, seed)
    oracle = oracles.TripletOracle.from_points(X, noise=NOISE, model="human", lapse=LAPSE, random_state=seed + 7)
    planner = make_planner("duels", n, question_kind="triplet", random_state=seed,
                           features=noise_features(n, 16, random_state=seed))
    while planner.prior_.testing:
        planner.observe(oracle.answer(planner.next_questions(n)))
    return bool(planner.prior_.trusted)


def false_trust(args) -> None:
    """``--false-trust``: how often the features' test trusts features of each test share (module text)."""
    if args.trust_z is not None:
        priors.trust_z = lambda look: args.trust_z
    rule = f"z >= {args.trust_z:g} at every look" if args.trust_z is not None else "alpha spent over looks"
    rows = []
    for n in args.sizes:
        if args.planner:
            started = time.monotonic()
            hits = [s for s in range(args.first_seed, args.first_seed + args.seeds) if planner_run(n, s)]
            rows.append([f"{n:,}", ".50 (planner)", "offline", f"{len(hits)} of {args.seeds}", "-", "-", "-",
                         f"seeds {', '.join(map(str, hits)) or '-'} ({time.monotonic() - started:.0f} s)"])
            continue
        for batch in args.batches:
            for share in args.shares:
                rng = np.random.default_rng([n, args.first_seed, round(share * 1000), batch or 0])
                runs = [judged_run(n, share, batch or n, max(args.budgets), rng) for _ in range(args.seeds)]
                at = np.array([r[0] for r in runs])
                dropped = np.array([r[2] for r in runs])
                ever = at >= 0
                se = np.sqrt(ever.mean() * (1 - ever.mean()) / len(runs))
                looks = np.bincount(at[ever], minlength=3)[:3] / max(ever.sum(), 1)
                drops = dropped[~np.isnan(dropped)]
                rows.append([f"{n:,}", f"{share:.2f}", "offline" if batch is None else f"batches of {batch}",
                             f"{ever.mean():.4f} ± {se:.4f}", f"{np.mean([r[1] for r in runs]):.4f}",
                             " / ".join(f"{v:.2f}" for v in looks),
                             "-" if not len(drops) else f"{len(drops) / max(ever.sum(), 1):.3f}",
                             "-" if not len(drops) else
                             f"{np.median(drops):.1f} ({np.percentile(drops, 90):.1f})"])
    print_table(f"the features' test ({rule}): share of {args.seeds} runs that trusted them (ever; still at "
                f"{max(args.budgets)} answers per item), which look trusted (1st / 2nd / 3rd), share of those "
                "trusted later dropped, answers per item when dropped: median (90th percentile)",
                ["items", "test share", "asked", "ever trusted", f"at {max(args.budgets)}/item",
                 "look 1/2/3", "dropped", "dropped at"], rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", default="clusters,eggs,food100")
    ap.add_argument("--sizes", default="100", help="clusters: numbers of items")
    ap.add_argument("--budgets", default="5,10,25,50", help="answers per item")
    ap.add_argument("--agreements", default=".6,.7,.8", help="clusters: triplet agreement of simulated features")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--no-peer", action="store_true", help="leave out random triplets + embedding")
    ap.add_argument("--ceiling", action="store_true", help="only what the features tell without answers (fast)")
    ap.add_argument("--false-trust", action="store_true", help="only how often the features' test trusts them")
    ap.add_argument("--shares", default=".5", help="--false-trust: the test shares of the features judged")
    ap.add_argument("--batches", default="offline", help="--false-trust: offline and/or questions per call")
    ap.add_argument("--planner", action="store_true", help="--false-trust: drive the planner on pure noise")
    ap.add_argument("--trust-z", type=float, default=None, help="--false-trust: trust from this z at every look")
    ap.add_argument("--first-seed", type=int, default=0, help="the first seed (then first-seed + 1, ...)")
    ap.add_argument("--variants", default=None,
                    help="only these rows with features (comma-separated labels: noise, ingredients, F .7, ...) "
                         "beside duels without features")
    ap.add_argument("--reseed", type=int, default=0,
                    help="one more row: duels without features on the learner's seed + this (0: none)")
    ap.add_argument("--kind", choices=("triplet", "rank"), default="triplet",
                    help="clusters: triplets, or 8-rank-2 screens (no peer)")
    ap.add_argument("--screen-tests", type=float, default=None,
                    help="rank: screens that test trusted features again, as a share of explore (0: none)")
    ap.add_argument("--coin-tests", type=float, default=None,
                    help="where near duels are coin flips: re-tests of trusted features, as a share of explore")
    args = ap.parse_args(argv)
    if args.screen_tests is not None or args.coin_tests is not None:
        from engine.duels import questions

        if args.screen_tests is not None:
            questions.SCREEN_TEST_SHARE = args.screen_tests
        if args.coin_tests is not None:
            questions.COIN_TESTS = args.coin_tests
    args.sizes = [int(x) for x in args.sizes.split(",")]
    args.budgets = sorted(int(x) for x in args.budgets.split(","))
    args.agreements = [float(x) for x in args.agreements.split(",") if x]
    args.variants = None if args.variants is None else [x.strip() for x in args.variants.split(",")]
    if args.ceiling:
        ceiling(args)
        return
    if args.false_trust:
        args.shares = [float(x) for x in args.shares.split(",")]
        args.batches = [None if x == "offline" else int(x) for x in args.batches.split(",")]
        false_trust(args)
        return
    sets = args.datasets.split(",")
    for name, run in (("clusters", clusters), ("eggs", eggs), ("food100", food100)):
        if name in sets:
            run(args)


if __name__ == "__main__":
    main()
