"""Benchmark — built-in image features (issue 42): how much Proxima's colour, texture and shape statistics of
each image (``engine.image_features``) help the default learner, and what they cost to compute.

No image set with real similarity judgements ships with the repository's data (Food-100 and the alien eggs come
without their pictures, the material set without its renders), so the pictures are drawn here from a known
truth and answered by simulated raters, which says what the features can do, not what they do for a real
crowd. The truth is clustered 4-D points (``harness.points``: clusters of 20, unit spread), answered with the
human noise model (logistic 0.1 of the clusters' spread, lapse 0.1). Each item is a picture of an ellipse on a
light ground, drawn with nuisance (position, size, ground lightness, pixel noise). Scenarios:

- ``looks``: all four truth coordinates are drawn (hue and chroma of the fill, the ellipse's aspect, the spacing
  of its stripes): people judge by what the pictures show;
- ``half``: two are drawn (the colour), two are not (shape and stripes random): half of what people judge is
  in the pictures;
- ``unseen``: nothing of the truth is drawn (every picture random): the features are structured but say nothing
  about it, as a photo's colours say nothing of a dish's taste; the learner should drop them.

Rows: the default learner (``make_planner("duels", n, features=F)``, offline, one question per head per call)
without features and with the built-in features F; "F agrees": share of random triplets on which the
standardised features and the truth agree; "F alone": hit@3 of 1-NN in the features; "dropped": runs whose
learner had stopped trusting the features at the last budget. Also the seconds per 1,000 images to compute
the features (640 x 480 JPEGs).

    python benchmarks/builtin_features.py                      # n = 100, budgets 5/10/25, 3 seeds (~3 min)
    python benchmarks/builtin_features.py --sizes 300 --seeds 2
"""
from __future__ import annotations

import argparse
import io
import sys
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from harness import nn_metrics, points, print_table, to_budgets  # noqa: E402

from engine.features import feature_neighbors, feature_space  # noqa: E402
from engine.image_features import image_feature_matrix  # noqa: E402
from engine.planners import make_planner  # noqa: E402
from engine.registry import wrapped_learner  # noqa: E402
from simulation import oracles  # noqa: E402
from simulation.features import triplet_agreement  # noqa: E402

NOISE, LAPSE = 0.1, 0.1
SIDE = 160  # pixels of a drawn picture


def lab_to_rgb(L: float, a: float, b: float) -> tuple[int, int, int]:
    """An sRGB colour (clipped to the gamut) of CIE L*a*b* (D65)."""
    fy = (L + 16) / 116
    f = np.array([fy + a / 500, fy, fy - b / 200])
    xyz = np.where(f > 6 / 29, f**3, 3 * (6 / 29) ** 2 * (f - 4 / 29)) * [0.95047, 1.0, 1.08883]
    M = np.array([[3.2406, -1.5372, -0.4986], [-0.9689, 1.8758, 0.0415], [0.0557, -0.2040, 1.0570]])
    lin = np.clip(M @ xyz, 0, 1)
    rgb = np.where(lin <= 0.0031308, 12.92 * lin, 1.055 * lin ** (1 / 2.4) - 0.055)
    return tuple(int(round(255 * c)) for c in rgb)


def draw(u: np.ndarray, rng: np.random.Generator, size: tuple[int, int] = (SIDE, SIDE), fmt: str = "PNG") -> bytes:
    """A picture of the four looks ``u`` in [0, 1]: hue, chroma, the ellipse's aspect, the stripes' spacing;
    with nuisance drawn from ``rng``."""
    w, h = size
    ground = float(rng.uniform(85, 95))
    image = Image.new("RGB", size, lab_to_rgb(ground, 0, 0))
    d = ImageDraw.Draw(image)
    hue, chroma = 2 * np.pi * 0.85 * u[0], 15 + 45 * u[1]
    fill = lab_to_rgb(55, chroma * np.cos(hue), chroma * np.sin(hue))
    aspect = np.exp(1.6 * (u[2] - 0.5))  # width / height, 0.45 .. 2.2
    area = 0.18 * w * h * rng.uniform(0.9, 1.1)
    ew, eh = np.sqrt(area * aspect), np.sqrt(area / aspect)
    cx, cy = w / 2 + rng.uniform(-0.06, 0.06) * w, h / 2 + rng.uniform(-0.06, 0.06) * h
    box = [cx - ew / 2, cy - eh / 2, cx + ew / 2, cy + eh / 2]
    d.ellipse(box, fill=fill)
    mask = Image.new("L", size, 0)
    ImageDraw.Draw(mask).ellipse(box, fill=255)
    stripes = Image.new("RGB", size, fill)
    sd = ImageDraw.Draw(stripes)
    period = 4 + 20 * u[3]
    dark = lab_to_rgb(30, 0.6 * chroma * np.cos(hue), 0.6 * chroma * np.sin(hue))
    for x in np.arange(0, w, period * w / SIDE):
        sd.line([(x, 0), (x, h)], fill=dark, width=max(1, round(1.5 * w / SIDE)))
    image.paste(stripes, mask=mask)
    pixels = np.asarray(image, np.float64) + rng.normal(0, 5, (h, w, 3))
    out = io.BytesIO()
    Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8)).save(out, fmt, **({"quality": 90} if fmt == "JPEG"
                                                                                else {}))
    return out.getvalue()


def looks_of(X: np.ndarray, drawn: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Each item's four looks in [0, 1]: the truth's coordinates ``drawn`` (scaled over the items), the others
    random (independent of the truth)."""
    U = rng.uniform(size=X.shape)
    lo, hi = X.min(axis=0), X.max(axis=0)
    for c in drawn:
        U[:, c] = (X[:, c] - lo[c]) / (hi[c] - lo[c])
    return U


def drive(X: np.ndarray, budgets: list[int], seed: int, features=None) -> tuple[list[float], bool]:
    """hit@3 of the default learner at each budget, and whether it had dropped the features at the last."""
    n = len(X)
    D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(axis=2))
    oracle = oracles.TripletOracle.from_points(X, noise=NOISE, model="human", lapse=LAPSE, random_state=seed + 1)
    planner = make_planner("duels", n, question_kind="triplet", random_state=seed, features=features)
    out = []
    for _ in to_budgets(planner, oracle, n, budgets):
        out.append(nn_metrics(np.asarray(planner.neighbor_graph(k=1).neighbors)[:, 0], D)[1])
    prior = getattr(wrapped_learner(planner), "prior_", None)
    return out, prior is not None and not prior.trusted


SCENARIOS = {"looks": (0, 1, 2, 3), "half": (0, 1), "unseen": ()}


def run(n: int, budgets: list[int], seeds: int) -> None:
    rows = []
    started = time.monotonic()
    results: dict[str, list] = {"none": []}
    extra: dict[str, dict[str, list]] = {}
    for seed in range(seeds):
        X = points(n, seed)
        D = np.sqrt(((X[:, None] - X[None]) ** 2).sum(axis=2))
        results["none"].append(drive(X, budgets, seed)[0])
        for name, drawn in SCENARIOS.items():
            rng = np.random.default_rng([seed, 42])
            U = looks_of(X, drawn, rng)
            F = image_feature_matrix([draw(u, rng) for u in U])
            Z = feature_space(F, n)
            curve, dropped = drive(X, budgets, seed, F)
            got = extra.setdefault(name, {"curve": [], "agree": [], "alone": [], "dropped": []})
            got["curve"].append(curve)
            got["agree"].append(triplet_agreement(Z, D, random_state=seed))
            got["alone"].append(nn_metrics(feature_neighbors(Z, 1)[:, 0], D)[1])
            got["dropped"].append(dropped)
    rows.append(["duels (no features)", "-", "-", "-"] + [f"{v:.2f}" for v in np.mean(results["none"], axis=0)])
    for name, got in extra.items():
        rows.append([f"duels + built-in ({name})", f"{np.mean(got['agree']):.2f}", f"{np.mean(got['alone']):.2f}",
                     f"{sum(got['dropped'])}/{seeds}"] + [f"{v:.2f}" for v in np.mean(got["curve"], axis=0)])
    print_table(f"pictures drawn from clustered 4-D truth, n = {n}, simulated human raters (logistic {NOISE}, lapse "
                f"{LAPSE}) — hit@3 by answers per item (mean of {seeds} seed(s); {time.monotonic() - started:.0f} s)",
                ["method", "F agrees", "F alone", "dropped"] + [f"{b}/item" for b in budgets], rows)
    if seeds > 1:
        # with the features less without them, seed by seed (the same truth and raters): mean ± standard error
        base = np.asarray(results["none"])
        diffs = []
        for name, got in extra.items():
            d = np.asarray(got["curve"]) - base
            se = d.std(axis=0, ddof=1) / np.sqrt(seeds)
            diffs.append([f"built-in ({name}) - none"] + [f"{m:+.3f} ± {e:.3f}" for m, e in
                                                          zip(d.mean(axis=0), se, strict=True)])
        print_table(f"paired differences, seed by seed (mean ± standard error of {seeds})",
                    ["method"] + [f"{b}/item" for b in budgets], diffs)
    sys.stdout.flush()


def speed(count: int) -> None:
    """Seconds per 1,000 images of 640 x 480 pixels (JPEG, quality 90) and of 160 x 160 (PNG)."""
    rng = np.random.default_rng(0)
    rows = []
    for size, fmt in (((640, 480), "JPEG"), ((SIDE, SIDE), "PNG")):
        images = [draw(rng.uniform(size=4), rng, size, fmt) for _ in range(count)]
        started = time.process_time()
        image_feature_matrix(images)
        seconds = time.process_time() - started
        rows.append([f"{size[0]} x {size[1]} {fmt}", f"{sum(map(len, images)) / count / 1024:.0f} KiB",
                     f"{1000 * seconds / count:.1f}"])
    print_table(f"built-in features: CPU seconds per 1,000 images (one core, {count} images each)",
                ["images", "mean file", "s / 1,000"], rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="100", help="numbers of items")
    ap.add_argument("--budgets", default="5,10,25", help="answers per item")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--speed-images", type=int, default=300, help="images timed per size (0: no timing)")
    args = ap.parse_args(argv)
    budgets = sorted(int(x) for x in args.budgets.split(","))
    if args.speed_images:
        speed(args.speed_images)
    for n in (int(x) for x in args.sizes.split(",")):
        run(n, budgets, args.seeds)


if __name__ == "__main__":
    main()
