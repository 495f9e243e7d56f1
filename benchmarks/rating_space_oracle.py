"""Where the pooled rating learner's 4x gap is (issue 41): its questions, or the space it fits.

The same learner, offline on the realistic simulator (as ``rating_learners.py``), its pair estimates'
prior taken four ways (each a subclass of ``engine.ratings.estimates.PairEstimates`` put in its place):

- ``fitted``: the learner as it is (the prior the space it fits from the ratings).
- ``truth's space``: the simulator's own structured part (the means less their pair-specific part,
  ``simulation.ratings.latent_parts``) as the prior, with the true pair-specific SD as its spread: a
  perfect space. The questions are the learner's own, chosen by these estimates. ``truth's space (own
  spread)``: the same distances weighed by the spread the learner gives its own space (the pairs' residual it
  estimates and how surely it has placed each item), so the two rows part what the space's distances and
  what its weight bring.
- ``chains``: the mean of ``--chains`` fits (the learner's and the others', each warm from its own last fit,
  so no single fit's local optimum decides), their disagreement added to the prior's variance.

hit@3 against the held-out means of 253 other raters, as ``rating_learners.py`` judges it; a second table
gives each variant less ``fitted``, seed by seed (mean ± its standard error). ``--reads`` also reads the
fitted learner's picks other ways at each budget, the same questions asked (so exactly paired): the pair
likeliest to be the item's nearest, and likeliest to be among its 3 nearest, under 400 draws of the estimates
(independent Gaussians of their means and variances) instead of the smallest mean; and the nearest by the
fitted space alone (no pair's own ratings)::

    python benchmarks/rating_space_oracle.py --items 30 --seeds 24
    python benchmarks/rating_space_oracle.py --items 30 --seeds 24 --methods "fitted,chains" --chains 4
    python benchmarks/rating_space_oracle.py --items 30 --seeds 48 --methods fitted --reads
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import nn_metrics, print_table, truth_distances  # noqa: E402

from engine.planners import make_planner  # noqa: E402
from engine.ratings.estimates import PairEstimates  # noqa: E402
from engine.ratings.model import fit_ratings  # noqa: E402
from simulation.ratings import realistic_simulator  # noqa: E402

METHODS = ("fitted", "truth's space", "truth's space (own spread)", "chains")
#: --reads: the other ways of reading the fitted learner's picks, and the draws of the estimates they use
READS = ("likeliest nearest", "likeliest among 3 nearest", "the space alone")
READ_DRAWS = 400


class TruthSpace(PairEstimates):
    """The pair estimates with the truth's structured part as their prior once the learner has a fit
    (before it, the learner's own prior: the warm-up is the same), weighed by the true residual's SD or
    (``residual_sd`` None) by the spread the learner gives its own space."""

    def __init__(self, n_items: int, space: np.ndarray, residual_sd: float | None) -> None:
        self.space, self.residual_sd = space, residual_sd
        super().__init__(n_items)

    def build(self, log, fit, fitted_on, dim) -> None:
        super().build(log, fit, fitted_on, dim)
        if fit is not None:
            spread2 = 1.0 / self._prior_prec if self.residual_sd is None else self.residual_sd**2
            self._prior_term = self.space / spread2
            self._prior_prec = np.broadcast_to(1.0 / spread2, self.space.shape).copy()


class Chains(PairEstimates):
    """The pair estimates with the mean of the learner's fit and ``chains - 1`` others as their prior
    (each refitted, warm from its own last fit, whenever the learner's is), the fits' variance about
    their mean added to the prior's."""

    def __init__(self, n_items: int, chains: int) -> None:
        self.others: list = [None] * (chains - 1)
        self.at = -1
        self.mean_space = self.spread = None
        super().__init__(n_items)

    def build(self, log, fit, fitted_on, dim) -> None:
        super().build(log, fit, fitted_on, dim)
        if fit is None:
            return
        if self.at != fitted_on:
            t = fitted_on
            for k, other in enumerate(self.others):
                self.others[k] = fit_ratings(self.n_items, log.pairs[:t], log.values[:t], log.raters[:t],
                                             log.n_raters, dim=dim, hyper=fit.hyper, init=other,
                                             random_state=1000 + k)
            spaces = np.array([fit.space()] + [f.space() for f in self.others])
            self.mean_space, self.spread, self.at = spaces.mean(axis=0), spaces.var(axis=0, ddof=1), t
        spread2 = 1.0 / self._prior_prec + self.spread
        self._prior_term = self.mean_space / spread2
        self._prior_prec = 1.0 / spread2


def likeliest(mean: np.ndarray, var: np.ndarray, top: int, rng: np.random.Generator) -> np.ndarray:
    """Each item's pair most often among its ``top`` nearest in :data:`READ_DRAWS` draws of the estimates."""
    n = len(mean)
    finite = np.where(np.isfinite(mean), mean, np.inf)
    sd = np.sqrt(np.where(np.isfinite(var), var, 0.0))
    hits = np.zeros((n, n))
    rows = np.arange(n)[:, None]
    for _ in range(READ_DRAWS):
        draw = finite + sd * rng.standard_normal((n, n))
        np.fill_diagonal(draw, np.inf)
        near = np.argpartition(draw, top - 1, axis=1)[:, :top]
        hits[rows, near] += 1
    return np.argmax(hits, axis=1)


def run(method: str, n: int, budgets: list[int], seed: int, chains: int, reads: bool = False
        ) -> tuple[list[float], dict[str, list[float]]]:
    """hit@3 at each budget (ratings per item), and with ``reads`` the other reads' (:data:`READS`)."""
    sim = realistic_simulator(n, random_state=seed)
    D = truth_distances(sim, seed)
    planner = make_planner("pooled", n, question_kind="rating", random_state=seed)
    if method.startswith("truth's space"):
        structured, residual_sd = sim.parts
        space = sim.noise.scale.distance(structured)
        np.fill_diagonal(space, 0.0)
        scale = sim.noise.scale
        own = method.endswith("(own spread)")
        planner._pairs = TruthSpace(n, space, None if own else residual_sd / (scale.high - scale.low))
    elif method == "chains":
        planner._pairs = Chains(n, chains)
    total, out, other = 0, [], {r: [] for r in READS} if reads else {}
    rng = np.random.default_rng(seed + 20_000)
    for b in budgets:
        while total < b * n:
            qs = planner.next_questions(min(n, b * n - total))
            planner.observe(sim.answer(qs))
            total += len(qs)
        picks = np.asarray(planner.neighbor_graph(1).neighbors)[:, 0]
        out.append(nn_metrics(picks, D)[1])
        if reads:
            mean, var = planner.estimates()
            for read, top in zip(READS[:2], (1, 3), strict=True):
                other[read].append(nn_metrics(likeliest(mean, var, top, rng), D)[1])
            space = planner.fit_.space()
            np.fill_diagonal(space, np.inf)
            other[READS[2]].append(nn_metrics(np.argmin(space, axis=1), D)[1])
    return out, other


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=24)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--budgets", default="25,50,100,200,400", help="ratings per item, comma-separated")
    ap.add_argument("--methods", default=",".join(METHODS), help=f"some of: {', '.join(METHODS)}")
    ap.add_argument("--chains", type=int, default=4, help="fits the chains method averages (2 or more)")
    ap.add_argument("--reads", action="store_true", help="also read the fitted learner's picks the other ways")
    args = ap.parse_args(argv)
    budgets = [int(b) for b in args.budgets.split(",")]
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown or args.chains < 2:
        ap.error(f"unknown method(s) {unknown}: choose among {', '.join(METHODS)}" if unknown
                 else "--chains needs at least 2 fits")
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    hits, rows = {}, []
    for method in methods:
        t0 = time.time()
        results = [run(method, args.items, budgets, s, args.chains, args.reads and method == "fitted") for s in seeds]
        hits[method] = np.array([r[0] for r in results])
        rows.append([method] + [f"{v:.3f}" for v in np.mean([r[0] for r in results], axis=0)])
        print(f"  {method}: {' / '.join(rows[-1][1:])} ({time.time() - t0:.0f} s)", file=sys.stderr, flush=True)
        hits[method] = np.array([r[0] for r in results])
        for read in results[0][1]:
            hits[f"fitted, {read}"] = np.array([r[1][read] for r in results])
            rows.append([f"fitted, {read}"] + [f"{v:.3f}" for v in hits[f"fitted, {read}"].mean(axis=0)])
    header = ["method"] + [f"{b}/item" for b in budgets]
    print_table(f"{args.items} items, realistic ratings, hit@3 (held-out means of 253 raters), seeds "
                f"{seeds.start}-{seeds.stop - 1}", header, rows)
    if "fitted" in hits and len(hits) > 1:
        diffs = []
        for method in hits:
            if method == "fitted":
                continue
            d = hits[method] - hits["fitted"]
            se = d.std(axis=0, ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.zeros(len(budgets))
            cells = [f"{m:+.3f} ± {s:.3f}" for m, s in zip(d.mean(axis=0), se, strict=True)]
            diffs.append([f"{method} - fitted"] + cells)
        print_table("paired by seed", header, diffs)


if __name__ == "__main__":
    main()
