"""Shared helpers of the ANNTri benchmarks (table printing, planner factory, question loops,
``--quick`` defaults); the timed question loop also serves the triplet learners' benchmarks."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.anntri import ANN, ANNTri, RandomSampling  # noqa: E402

PLANNERS = {"ANNTri": ANNTri, "ANN": ANN, "Random": RandomSampling}


def table(header, rows):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) for i, h in enumerate(header)]
    line = " | ".join(str(h).rjust(w) for h, w in zip(header, widths, strict=False))
    print(line)
    print("-+-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).rjust(w) for c, w in zip(r, widths, strict=False)))


def fmt(x, digits=3):
    if x != x:  # NaN
        return "—"
    if isinstance(x, float) and abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def quick_defaults(args, **defaults):
    """Fill each option ``name`` still None with ``defaults[name] = (quick, full)``: ``--quick``
    only changes what was not given explicitly (``--quick --seeds 20`` runs 20 seeds)."""
    for name, (quick, full) in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)


def ask_and_answer(planner, oracle, budget, repeat=False):
    """One round trip: up to ``budget`` questions (with ``repeat``, repeats when no new question
    is worth asking), answered by ``oracle`` and observed. Returns how many (0: none to ask)."""
    qs = planner.next_questions(budget)
    if not qs and repeat:
        qs = planner.repeat_questions(budget)
    if not qs:
        return 0
    planner.observe(oracle.answer(qs))
    return len(qs)


def error_curve(planner, oracle, D, marks, repeat=False):
    """Error of ``current_neighbors`` once each budget in ``marks`` (total answers) is spent."""
    # Imported here: engine.truth brings in scipy, and duels_quick / embedding_peer (which
    # import this module for timed_answers) time the engine's own first, lazy scipy imports.
    from engine.truth import neighbor_error

    n = planner.n_items
    total, errs = 0, []
    for mark in marks:
        while total < mark:
            asked = ask_and_answer(planner, oracle, min(n, mark - total), repeat)
            if not asked:
                break
            total += asked
        errs.append(neighbor_error(planner.current_neighbors(), D))
    return errs


def timed_answers(planner, oracle, total, target, step):
    """Ask ``planner`` for at most ``step`` questions at a time, answered by ``oracle``, until
    ``target`` answers in all (``total`` so far). Returns the new total and the CPU seconds of the
    planner's own calls (the oracle's time excluded)."""
    cpu = 0.0
    while total < target:
        t0 = time.process_time()
        qs = planner.next_questions(min(step, target - total))
        cpu += time.process_time() - t0
        ans = oracle.answer(qs)
        t0 = time.process_time()
        planner.observe(ans)
        cpu += time.process_time() - t0
        total += len(qs)
    return total, cpu
