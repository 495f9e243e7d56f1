"""Benchmark — what serving an image as a variant per handle costs (webapp.handles.varied, issue 40).

In a study whose catch trials are copies, every image a rater's page fetches is decoded, half of its tiles
moved by one level and encoded again in its own format. For typical stimulus sizes (256, 512 and 1024 pixels
square) and formats (JPEG at quality 85, PNG, a palette GIF, WebP lossy at 80 and lossless), of two pictures
drawn with Pillow (a "photo": a Mandelbrot set, gradients and grain, blurred; a "flat" drawing: eight filled
ellipses on white), prints per image the median milliseconds of CPU (the process's: a busy machine's other
work is left out) to decode, vary and encode (the three apart, so what a cache of decoded pixels per item
would save is read off the decode column) and for ``varied`` as a whole, the upload's and the variant's
size, and how far the variant's pixels are from the upload's (the largest difference of a channel, and the
mean of each pixel's largest).

    python benchmarks/media_variants.py               # 9 repeats per image
    python benchmarks/media_variants.py --repeats 3 --sizes 256,512
"""
from __future__ import annotations

import argparse
import io
import random
import statistics
import sys
import time
from pathlib import Path

from PIL import Image, ImageChops, ImageDraw, ImageFilter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from webapp import handles  # noqa: E402

#: (name, media type, Pillow format, save options, the picture it is drawn from)
FORMATS = (("JPEG q85", "image/jpeg", "JPEG", {"quality": 85}, "photo"),
           ("PNG", "image/png", "PNG", {}, "photo"),
           ("PNG flat", "image/png", "PNG", {}, "flat"),
           ("GIF", "image/gif", "GIF", {}, "flat"),
           ("WebP q80", "image/webp", "WEBP", {"quality": 80}, "photo"),
           ("WebP lossless", "image/webp", "WEBP", {"lossless": True}, "photo"))


def photo(size: int) -> Image.Image:
    """A photo-like RGB picture: structure at every scale, smooth gradients and grain."""
    base = Image.effect_mandelbrot((size, size), (-2.0, -1.5, 1.0, 1.5), 60).convert("L")
    grain = Image.effect_noise((size, size), 30)
    ramp = Image.linear_gradient("L").resize((size, size))
    return Image.merge("RGB", (ImageChops.add(base, grain, 2), ImageChops.add(ramp, grain, 2),
                               Image.radial_gradient("L").resize((size, size)))).filter(ImageFilter.GaussianBlur(1.2))


def flat(size: int) -> Image.Image:
    """A drawing of flat colours (what compresses best, and what a change of pixels costs most bytes)."""
    image = Image.new("RGB", (size, size), "white")
    draw = ImageDraw.Draw(image)
    for k in range(8):
        draw.ellipse((k * size // 25, k * size // 34, k * size // 25 + size // 3, k * size // 34 + size // 4),
                     fill=(30 * k, 100, 200 - 20 * k))
    return image


def encoded(image: Image.Image, fmt: str, options: dict) -> bytes:
    out = io.BytesIO()
    (image.convert("P") if fmt == "GIF" else image).save(out, fmt, **options)
    return out.getvalue()


def difference(a: bytes, b: bytes) -> tuple[int, float]:
    """(the largest difference of a channel, the mean of each pixel's largest channel difference)."""
    with Image.open(io.BytesIO(a)) as x, Image.open(io.BytesIO(b)) as y:
        r, g, bl = ImageChops.difference(x.convert("RGB"), y.convert("RGB")).split()
    histogram = ImageChops.lighter(ImageChops.lighter(r, g), bl).histogram()
    return max(v for v, n in enumerate(histogram) if n), sum(v * n for v, n in enumerate(histogram)) / sum(histogram)


def timed(data: bytes, fmt: str, seed: bytes) -> tuple[float, float, float]:
    """Seconds to decode, vary and encode once: ``handles.varied``'s steps, apart (a JPEG's options as it
    passes them; the total is checked against ``varied`` itself by the caller)."""
    started = time.process_time()
    image = Image.open(io.BytesIO(data))
    image.load()
    decoded = time.process_time()
    variant = handles._vary_pixels(image, random.Random(seed), together=fmt == "JPEG")
    moved = time.process_time()
    out = io.BytesIO()
    if fmt == "JPEG":
        variant.save(out, "JPEG", qtables=image.quantization, comment=b"x" * 32)
    elif fmt == "WEBP":
        lossless = data[12:16] == b"VP8L"
        variant.save(out, "WEBP", lossless=lossless, exact=True,
                     **({"quality": handles.WEBP_EFFORT, "method": handles.WEBP_METHOD} if lossless
                        else {"quality": handles.WEBP_QUALITY}))
    else:
        variant.save(out, fmt, **({"optimize": False} if fmt == "GIF" else {"compress_type": handles.PNG_STRATEGY}))
    return decoded - started, moved - decoded, time.process_time() - moved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes", default="256,512,1024", help="comma-separated sides in pixels")
    a = parser.parse_args()
    pictures = {"photo": photo, "flat": flat}
    print("| image | side | decode ms | vary ms | encode ms | varied() ms | upload KB | variant KB "
          "| largest difference | mean difference |\n|---|---|---|---|---|---|---|---|---|---|")
    for side in (int(s) for s in a.sizes.split(",")):
        for name, media_type, fmt, options, drawn in FORMATS:
            data = encoded(pictures[drawn](side), fmt, options)
            steps = [timed(data, fmt, bytes([n])) for n in range(a.repeats)]
            whole = []
            for n in range(a.repeats):
                started = time.process_time()
                variant = handles.varied(data, media_type, bytes([n]))
                whole.append(time.process_time() - started)
            worst, mean = difference(variant, data)
            decode, vary, encode = (1000 * statistics.median(s[k] for s in steps) for k in range(3))
            print(f"| {name} | {side} | {decode:.1f} | {vary:.1f} | {encode:.1f} | "
                  f"{1000 * statistics.median(whole):.1f} | {len(data) / 1024:.1f} | {len(variant) / 1024:.1f} | "
                  f"{worst} | {mean:.2f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
