"""Benchmark — what a live rating study's update passes cost the worker with the default rating learner.

A study's passes in-process, as the worker runs them without Redis: each pass observes a batch of
``(i, j, d, rater)`` ratings (the realistic simulator's, raters drawn among ``--raters``), plans as many
questions (``next_questions``), hands out the state and makes the journal entry the pass would append
(``to_state`` + ``workers.store.engine_state.advance_delta``), and every ``--summary-every`` passes reads
what the dashboard's summary reads (``neighbor_graph(1)`` and the held-out scores' model distances). Refits
go to a fitter beside the passes (``drive_as_pool``): each is computed when handed over, its time counted
as the fit process's, not the pass's, and put in place once ``--lag`` x its ratings more have come.

Timed in CPU seconds of the process (``time.process_time``, BLAS on one thread: a loaded machine slows the
wall clock, not this) from the first fit on (the warmup's random pairs cost nothing) to ``--per-item``
ratings per item; a refit small enough to run inside the call (``FIT_INLINE_ANSWERS``) counts as the pass's.
With ``--baseline REF`` the same passes run first with ``engine/ratings`` as it was at git revision REF (a
copy of ``engine/`` in a temporary folder; the repository is not touched), then with this tree, alternately
``--repeats`` times, and the ratio of the best times is printed: the machine is shared, so compare within
one run. ``same`` says whether both asked the same questions and ended with the same graph::

    nice -n 10 python benchmarks/rating_pass_cost.py --items 300,1000 --baseline HEAD
    nice -n 10 python benchmarks/rating_pass_cost.py --items 1000 --per-item 25 --batch 50
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: the phases of a pass timed, as the table's columns name them
PHASES = ("observe", "plan", "state", "summary")


class _Ready:
    def __init__(self, clock: dict, at: float, result: dict) -> None:
        self.clock, self.at, self._result = clock, at, result

    def done(self) -> bool:
        return self.clock["answers"] >= self.at

    def result(self) -> dict:
        return self._result


class TimedFitter:
    """A fit process beside the passes: the fit runs when handed over (its seconds counted apart) and is
    ready once the crowd has given ``lag`` x its ratings more."""

    def __init__(self, clock: dict, lag: float) -> None:
        self.clock, self.lag, self.seconds, self.fits, self.log = clock, lag, 0.0, 0, []

    def fit(self, task):
        started = time.process_time()
        result = task.run()
        self.seconds += time.process_time() - started
        self.fits += 1
        self.log.append((len(task.values), round(time.process_time() - started, 3)))
        return _Ready(self.clock, self.clock["answers"] + self.lag * len(task.values), result)


def one_run(n: int, per_item: float, batch: int, raters: int, summary_every: int, lag: float, seed: int) -> dict:
    """Seconds per phase of the passes from the first fit on, and what they made (see the module's doc)."""
    import numpy as np

    from engine.heldout import model_distances
    from engine.planners import make_planner
    from engine.registry import drive_as_pool
    from simulation.ratings import realistic_simulator
    from workers.store.engine_state import Lifted, advance_delta

    sim = realistic_simulator(n, random_state=seed)
    rng = np.random.default_rng(seed + 1)
    planner = make_planner("pooled", n, question_kind="rating", random_state=seed)
    clock = {"answers": 0}
    fitter = TimedFitter(clock, lag)
    drive_as_pool(planner, fitter)
    digest = hashlib.sha256()
    seconds = dict.fromkeys(PHASES, 0.0)
    kept, journal, passes, timed_answers, timed_passes, fit_before = None, 0, 0, 0, 0, 0.0
    pool = planner.next_questions(2 * batch)
    while clock["answers"] < per_item * n:
        asked, pool = pool[:batch], pool[batch:]
        digest.update(np.asarray(asked, np.int64).tobytes())
        values, _ = sim.ratings(np.asarray(asked, np.int64))
        d = sim.noise.scale.distance(values)
        who = rng.integers(raters, size=len(asked))
        rows = [(i, j, float(x), f"rater-{r}") for (i, j), x, r in zip(asked, d, who, strict=True)]
        timed = planner.n_fits_ > 0
        fit_seconds = fitter.seconds
        t0 = time.process_time()
        planner.observe(rows)
        t1 = time.process_time()
        clock["answers"] += len(rows)
        pool += planner.next_questions(len(rows))
        t2 = time.process_time()
        in_fits = fitter.seconds - fit_seconds  # a refit handed over in this call: the fit process's time
        lifted = Lifted.of(planner.to_state())
        if kept is None:
            kept = Lifted.of(planner.to_state(), copy=True)
        else:
            delta, kept = advance_delta(kept, lifted, "bench", passes)
            journal += 0 if delta is None or not timed else len(delta)
        t3 = time.process_time()
        if passes % summary_every == 0:
            planner.neighbor_graph(1)
            model_distances(planner)
        t4 = time.process_time()
        passes += 1
        if timed:
            for phase, dt in zip(PHASES, (t1 - t0, t2 - t1 - in_fits, t3 - t2, t4 - t3), strict=True):
                seconds[phase] += dt
            timed_answers += len(rows)
            timed_passes += 1
        elif planner.n_fits_ > 0:
            fit_before = fitter.seconds
    picks = np.asarray(planner.neighbor_graph(1).neighbors)[:, 0]
    digest.update(picks.astype(np.int64).tobytes())
    return {"seconds": seconds, "answers": timed_answers, "passes": timed_passes, "fits": fitter.fits,
            "fit_seconds": fitter.seconds - fit_before, "journal_bytes": journal, "state_bytes": kept.nbytes,
            "digest": digest.hexdigest()[:12], "fit_log": fitter.log}


def code_of(ref: str, folder: Path) -> Path:
    """``engine/`` of this tree copied into ``folder``, with ``engine/ratings`` as it was at ``ref`` (read with
    ``git show``; the repository is not touched). Returns ``folder``, to put first on ``sys.path``."""
    shutil.copytree(ROOT / "engine", folder / "engine", ignore=shutil.ignore_patterns("__pycache__"))
    ratings = folder / "engine" / "ratings"
    names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{ref}:engine/ratings"],
                           check=True, capture_output=True, text=True).stdout.split()
    for path in ratings.glob("*.py"):
        path.unlink()
    for name in names:
        data = subprocess.run(["git", "-C", str(ROOT), "show", f"{ref}:engine/ratings/{name}"], check=True,
                              capture_output=True).stdout
        (ratings / name).write_bytes(data)
    return folder


def run_child(code: Path | None, args: argparse.Namespace, n: int) -> dict:
    cmd = [sys.executable, __file__, "--child", "--items", str(n), "--per-item", str(args.per_item), "--batch",
           str(args.batch), "--raters", str(args.raters), "--summary-every", str(args.summary_every), "--lag",
           str(args.lag), "--seed", str(args.seed)]
    if code is not None:
        cmd += ["--code", str(code)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def row(label: str, r: dict) -> list[str]:
    per = {k: 1e6 * v / max(r["answers"], 1) for k, v in r["seconds"].items()}
    total = sum(r["seconds"].values())
    return [label, *[f"{per[k]:.1f}" for k in PHASES], f"{1e6 * total / max(r['answers'], 1):.1f}",
            f"{1e3 * total / max(r['passes'], 1):.2f}", f"{1e6 * r['fit_seconds'] / max(r['answers'], 1):.1f}",
            f"{r['journal_bytes'] / max(r['answers'], 1):.0f}", f"{r['state_bytes'] / 1e6:.2f}", r["digest"]]


def best(runs: list[dict]) -> dict:
    """Each phase's least time over the runs (the machine is shared: the least is the least disturbed)."""
    out = dict(runs[0])
    out["seconds"] = {k: min(r["seconds"][k] for r in runs) for k in PHASES}
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", default="300,1000")
    ap.add_argument("--per-item", type=float, default=25.0, help="ratings per item the passes go to")
    ap.add_argument("--batch", type=int, default=100, help="ratings per pass (500 answers/s: 5 passes a second)")
    ap.add_argument("--raters", type=int, default=1000, help="raters the ratings are drawn among")
    ap.add_argument("--summary-every", type=int, default=5, help="passes between dashboard summaries")
    ap.add_argument("--lag", type=float, default=0.5, help="a refit is ready after this share of its ratings more")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baseline", metavar="REF", help="also run engine/ratings as at git revision REF")
    ap.add_argument("--repeats", type=int, default=2, help="runs of each code, alternately")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--code", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        sys.path[:0] = [*([args.code] if args.code else []), str(ROOT)]
        # numpy's and scipy's BLAS loaded before they are limited to one thread (threadpoolctl limits only
        # the libraries loaded by then; left at two threads, a fit's vector products spun on a busy machine)
        import scipy.optimize  # noqa: F401
        from threadpoolctl import threadpool_limits

        import engine.ratings  # noqa: F401

        with threadpool_limits(limits=1, user_api="blas"):
            print(json.dumps(one_run(int(args.items), args.per_item, args.batch, args.raters, args.summary_every,
                                     args.lag, args.seed)))
        return
    sys.path[:0] = [str(HERE)]
    from harness import print_table

    with tempfile.TemporaryDirectory(prefix="rating-pass-") as tmp:
        codes = [(None, "this tree")]
        if args.baseline:
            codes.insert(0, (code_of(args.baseline, Path(tmp)), f"at {args.baseline}"))
        rows = []
        for n in (int(x) for x in args.items.split(",")):
            runs: dict[str, list[dict]] = {label: [] for _, label in codes}
            for _ in range(args.repeats):
                for code, label in codes:
                    runs[label].append(run_child(code, args, n))
                    print(f"  n={n} {label}: {row(label, runs[label][-1])}", file=sys.stderr, flush=True)
            kept = {label: best(r) for label, r in runs.items()}
            for label, r in kept.items():
                rows.append(row(f"{n} items, {label}", r))
            if args.baseline:
                before, after = kept[codes[0][1]], kept["this tree"]
                ratio = [f"{after['seconds'][k] / max(before['seconds'][k], 1e-12):.2f}" for k in PHASES]
                total = sum(after["seconds"].values()) / max(sum(before["seconds"].values()), 1e-12)
                rows.append([f"{n} items, after / before", *ratio, f"{total:.2f}", f"{total:.2f}", "", "", "",
                             "same" if before["digest"] == after["digest"] else "differ"])
    print_table(f"Update passes of a pooled rating study, µs per rating from the first fit to {args.per_item:g} "
                f"per item ({args.batch} ratings a pass, {args.raters} raters, a summary every "
                f"{args.summary_every} passes; best of {args.repeats})",
                ["", *PHASES, "pass total", "ms / pass", "fit process", "journal B / rating", "state MB",
                 "questions + graph"], rows)


if __name__ == "__main__":
    main()
