"""Built-in image features: colour, texture and shape statistics of each image, from its pixels alone
(Pillow, numpy, scipy: nothing downloaded, no learned network). They are weak: they see how an image
looks, not what it shows, and the learners let the answers overrule them. Must never import Flask,
Redis, RQ, ``webapp`` or ``workers``.

The columns (:data:`COLUMNS`, fixed for a ``BUILTIN_VERSION``) are in their own units (shares, CIE Lab
values, log ratios); the learners standardise every column (``engine.features.FeatureSpace``), so an
item added to a study later is computed alike and read through the same map.
"""
from __future__ import annotations

import io
import math
from collections.abc import Iterable

import numpy as np
from scipy import ndimage
from scipy.spatial import ConvexHull, QhullError

#: bumped whenever a column changes meaning: a study records the version its features were computed with
BUILTIN_VERSION = 1
#: an image is read at most this many pixels on its long side (its statistics barely change above it)
SIZE = 128
#: the texture statistics are taken at these reductions of the read image (1: as read, 2: half, 4: quarter)
SCALES = (1, 2, 4)
#: hue sectors of the colour histogram (equal angles in the a*b* plane, the first starting at +a*)
HUE_BINS = 8
#: lightness bands of the colour histogram (equal steps of L* over 0..100)
LIGHTNESS_BINS = 4
#: gradient-orientation bins over [0, pi) (an edge and its reverse count alike), the first centred on the x axis
ORIENTATION_BINS = 8
#: a pixel counts fully towards its hue sector from this chroma (C*ab) on, in part below (greys count little)
FULL_CHROMA = 20.0
#: a pixel is foreground where its colour is at least this far (Delta E, CIE76) from the median of the image's
#: border, unless the image has an alpha channel (then where it is at least half opaque)
BACKGROUND_DELTA = 12.0
#: a pixel is an edge where its lightness gradient (L* per pixel, Sobel) is at least this
EDGE_GRADIENT = 20.0
#: the texture entropy's histogram: lightness minus its local (5 x 5) mean, in bins this wide, clipped at +-32
ENTROPY_BIN = 4.0

COLUMNS: tuple[str, ...] = (
    # colour, CIE L*a*b* (L* 0..100, a* and b* about -100..100)
    "colour_L_mean", "colour_L_std", "colour_a_mean", "colour_a_std", "colour_b_mean", "colour_b_std",
    "colour_chroma_mean", "colour_chroma_std",
    *(f"colour_hue_{k}" for k in range(HUE_BINS)),
    *(f"colour_lightness_{k}" for k in range(LIGHTNESS_BINS)),
    # texture
    *(f"texture_orientation_{k}" for k in range(ORIENTATION_BINS)),
    *(f"texture_gradient_s{s}" for s in SCALES),
    *(f"texture_contrast_s{s}" for s in SCALES),
    *(f"texture_entropy_s{s}" for s in SCALES),
    # shape
    "shape_foreground", "shape_centre_x", "shape_centre_y", "shape_elongation", "shape_orientation_cos",
    "shape_orientation_sin", "shape_extent", "shape_box_aspect", "shape_solidity", "shape_compactness",
    "shape_edge_density", "shape_image_aspect",
)

class ImageFeatureError(ValueError):
    """An image that cannot be read (the message names no file: callers add it)."""


#: sRGB (linear, D65) to CIE XYZ, and the D65 white point (IEC 61966-2-1; CIE 15)
_SRGB_TO_XYZ = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
_WHITE = np.array([0.95047, 1.0, 1.08883])


def _to_lab(image) -> np.ndarray:
    """float64 (h, w, 3): CIE L*a*b* (D65) of an RGB image read as sRGB, L* 0..100. (Computed here rather than
    with Pillow's littleCMS transform: Pillow hands a* and b* back as bytes whose sign depends on how they
    are read.)"""
    rgb = np.asarray(image, np.float64) / 255.0
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    xyz = linear @ _SRGB_TO_XYZ.T / _WHITE
    f = np.where(xyz > (6 / 29) ** 3, np.cbrt(xyz), xyz / (3 * (6 / 29) ** 2) + 4 / 29)
    return np.dstack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])])


def _read(data: bytes):
    """(RGB image of at most SIZE px a side, its alpha as a bool mask or None, the original width / height)."""
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(data))
        width, height = image.size
        image.draft("RGB", (2 * SIZE, 2 * SIZE))  # JPEG: decode at a reduced size (much faster)
        image.load()
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageFeatureError(f"not a readable image ({exc})") from None
    if width < 1 or height < 1:
        raise ImageFeatureError("an image of no pixels")
    has_alpha = image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info)
    image = image.convert("RGBA" if has_alpha else "RGB")
    image.thumbnail((SIZE, SIZE), Image.Resampling.BILINEAR)
    alpha = None
    if has_alpha:
        alpha = np.asarray(image.getchannel("A")) >= 128
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        image = background
    return image, alpha, width / height


def _entropy(counts: np.ndarray) -> float:
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log2(p)).sum())


def _reduce(a: np.ndarray, s: int) -> np.ndarray:
    """``a`` averaged over s x s blocks (rows and columns past a whole block dropped)."""
    if s == 1:
        return a
    h, w = (a.shape[0] // s) * s, (a.shape[1] // s) * s
    return a[:h, :w].reshape(h // s, s, w // s, s).mean(axis=(1, 3))


def _colour(lab: np.ndarray) -> list[float]:
    L, a, b = lab[..., 0].ravel(), lab[..., 1].ravel(), lab[..., 2].ravel()
    chroma = np.hypot(a, b)
    hue = np.mod(np.arctan2(b, a), 2 * np.pi)
    sector = np.minimum((hue / (2 * np.pi) * HUE_BINS).astype(int), HUE_BINS - 1)
    weight = np.minimum(chroma / FULL_CHROMA, 1.0)
    hues = np.bincount(sector, weights=weight, minlength=HUE_BINS) / len(L)
    band = np.minimum((L / 100.0 * LIGHTNESS_BINS).astype(int), LIGHTNESS_BINS - 1).clip(0)
    bands = np.bincount(band, minlength=LIGHTNESS_BINS) / len(L)
    return [L.mean(), L.std(), a.mean(), a.std(), b.mean(), b.std(), chroma.mean(), chroma.std(),
            *hues.tolist(), *bands.tolist()]


def _texture(L: np.ndarray) -> tuple[list[float], np.ndarray]:
    """The texture columns and the lightness gradient's magnitude as read (for the edge density)."""
    gy, gx = ndimage.sobel(L, axis=0) / 8.0, ndimage.sobel(L, axis=1) / 8.0
    magnitude = np.hypot(gx, gy)
    # bin k is centred on k * pi / ORIENTATION_BINS: bin 0 holds the gradients along x (vertical edges) either way
    angle = np.mod(np.arctan2(gy, gx), np.pi)
    which = np.floor(angle / np.pi * ORIENTATION_BINS + 0.5).astype(int) % ORIENTATION_BINS
    orientations = np.bincount(which.ravel(), weights=magnitude.ravel(), minlength=ORIENTATION_BINS)
    orientations = orientations / orientations.sum() if orientations.sum() > 0 else np.full(ORIENTATION_BINS, 0.0)
    gradients, contrasts, entropies = [], [], []
    edges = np.arange(-32.0, 32.0 + ENTROPY_BIN, ENTROPY_BIN)
    for s in SCALES:
        R = _reduce(L, s)
        if min(R.shape) < 3:  # (a sliver of an image: nothing to measure at this scale)
            gradients.append(0.0), contrasts.append(0.0), entropies.append(0.0)
            continue
        g = np.hypot(ndimage.sobel(R, axis=0), ndimage.sobel(R, axis=1)) / 8.0
        gradients.append(float(g.mean()))
        mean = ndimage.uniform_filter(R, 3, mode="reflect")
        local_var = ndimage.uniform_filter(R * R, 3, mode="reflect") - mean * mean
        contrasts.append(float(np.sqrt(np.clip(local_var, 0.0, None)).mean()))
        detail = np.clip(R - ndimage.uniform_filter(R, 5, mode="reflect"), -32.0, 32.0 - 1e-9)
        entropies.append(_entropy(np.histogram(detail, bins=edges)[0]))
    return [*orientations.tolist(), *gradients, *contrasts, *entropies], magnitude


def _foreground(lab: np.ndarray, alpha: np.ndarray | None) -> np.ndarray:
    if alpha is not None:
        mask = alpha
    else:
        border = np.concatenate([lab[0], lab[-1], lab[1:-1, 0], lab[1:-1, -1]])
        mask = np.linalg.norm(lab - np.median(border, axis=0), axis=2) >= BACKGROUND_DELTA
    mask = ndimage.binary_opening(mask, np.ones((3, 3), bool)) if min(mask.shape) >= 3 else mask
    return mask if mask.any() else np.ones_like(mask)  # nothing stands out: the whole image is the object


def _shape(mask: np.ndarray, magnitude: np.ndarray, image_aspect: float) -> list[float]:
    h, w = mask.shape
    ys, xs = np.nonzero(mask)
    area = float(len(xs))
    cx, cy = xs.mean(), ys.mean()
    cov = np.cov(np.vstack([xs, ys])) if area > 1 else np.zeros((2, 2))
    small, big = np.linalg.eigvalsh(cov)
    elongation = 1.0 - math.sqrt(max(small, 0.0) / big) if big > 0 else 0.0
    theta = 0.5 * math.atan2(2 * cov[0, 1], cov[0, 0] - cov[1, 1])  # the main axis's angle from x
    box_w, box_h = xs.max() - xs.min() + 1, ys.max() - ys.min() + 1
    boundary = mask & ~ndimage.binary_erosion(mask, border_value=0)
    perimeter = float(boundary.sum())
    try:
        by, bx = np.nonzero(boundary)
        hull = ConvexHull(np.column_stack([bx, by]).astype(np.float64))
        solidity = min(1.0, area / max(hull.volume, 1.0))
    except (QhullError, ValueError):  # a line or a point: fully solid
        solidity = 1.0
    return [area / (h * w), cx / w, cy / h, elongation, elongation * math.cos(2 * theta),
            elongation * math.sin(2 * theta), area / (box_w * box_h), math.log(box_w / box_h), solidity,
            perimeter**2 / (4 * math.pi * area), float((magnitude >= EDGE_GRADIENT).mean()),
            math.log(image_aspect)]


def image_features(data: bytes) -> np.ndarray:
    """The built-in features of one image (its file's bytes): float64 of shape (len(COLUMNS),), in the order of
    :data:`COLUMNS`. ImageFeatureError when the bytes are not an image Pillow reads."""
    image, alpha, aspect = _read(data)
    lab = _to_lab(image)
    texture, magnitude = _texture(lab[..., 0])
    row = np.array([*_colour(lab), *texture, *_shape(_foreground(lab, alpha), magnitude, aspect)], np.float64)
    if not np.isfinite(row).all():  # (no input should get here: a guard, not a path)
        raise ImageFeatureError("its statistics are not all finite numbers")
    return row


def image_feature_matrix(images: Iterable[bytes]) -> np.ndarray:
    """The built-in features of each image: float64 (n_images, len(COLUMNS)), rows in the order given.
    ImageFeatureError names the first image (0-based position) that cannot be read."""
    rows = []
    for position, data in enumerate(images):
        try:
            rows.append(image_features(data))
        except ImageFeatureError as exc:
            raise ImageFeatureError(f"image {position}: {exc}") from None
    return np.vstack(rows) if rows else np.zeros((0, len(COLUMNS)))
