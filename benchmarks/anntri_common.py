"""Shared helpers of the ANNTri benchmarks (table printing, planner factory)."""
from __future__ import annotations

import sys
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
