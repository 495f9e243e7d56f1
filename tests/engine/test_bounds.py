import numpy as np
import pytest

from engine import bounds
from engine.bounds import BOUNDS, confidence_interval, hoeffding_radius, kl_interval, lil_radius


@pytest.mark.parametrize("radius", [lil_radius, hoeffding_radius])
def test_radius_is_infinite_without_samples_and_shrinks_with_more(radius):
    r = radius(np.arange(0, 2000), 100, 0.1, 0.5)
    assert np.isinf(r[0])
    assert np.all(np.diff(r[1:]) < 0)
    assert r[-1] < 0.2


def test_lil_matches_the_formula_of_the_paper_experiments():
    eps, sigma, delta, n, T = 0.7, 0.5, 0.1, 100, 37
    expected = (1 + np.sqrt(eps)) * sigma * np.sqrt(
        2 * (1 + eps) / T * np.log(np.log((1 + eps) * T + 2) / (delta / n)))
    assert lil_radius(T, n, delta, sigma) == pytest.approx(expected)


@pytest.mark.parametrize("bound", BOUNDS)
def test_interval_contains_the_mean(bound):
    mean = np.array([0.0, 0.2, 0.5, 0.9, 1.0])
    count = np.array([1, 5, 50, 500, 7])
    lo, hi = confidence_interval(mean, count, 50, 0.1, 0.5, bound)
    assert np.all(lo <= mean + 1e-12) and np.all(mean <= hi + 1e-12)


@pytest.mark.parametrize("bound", ["bernstein", "kl"])
def test_bounded_intervals_cover_bernoulli_means(bound):
    rng = np.random.default_rng(0)
    p = rng.random(400)
    T = rng.integers(1, 300, size=400)
    mean = rng.binomial(T, p) / T
    lo, hi = confidence_interval(mean, T, 10, 0.1, 0.5, bound)
    assert np.mean((lo <= p) & (p <= hi)) > 0.99
    assert np.all((0 <= lo) & (hi <= 1))


def test_kl_is_tighter_than_hoeffding_near_the_edges():
    lo, hi = kl_interval(np.array([0.02]), np.array([400]), 10, 0.1)
    r = hoeffding_radius(400, 10, 0.1, 0.5)
    assert hi[0] - lo[0] < 2 * r


def test_unknown_bound_is_rejected():
    with pytest.raises(ValueError, match="bound"):
        confidence_interval([0.1], [1], 10, 0.1, 0.5, "chebyshev")


def _reference_kl_interval(mean, count, n_items, delta):
    """A plain scalar bisection of {q : T·kl(m, q) <= log(4n²T²/δ)}, one side at a time."""
    def kl(p, q):
        p, q = min(max(p, 1e-12), 1 - 1e-12), min(max(q, 1e-12), 1 - 1e-12)
        return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))

    m = min(max(float(mean), 0.0), 1.0)
    if count <= 0:
        return 0.0, 1.0
    T = float(count)
    level = np.log(4.0 * n_items**2 * T**2 / delta) / T
    lo, hi = m, 1.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if kl(m, mid) <= level else (lo, mid)
    upper = hi
    lo, hi = 0.0, m
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if kl(m, mid) <= level else (mid, hi)
    return lo, upper


_EDGE_MEANS = [0.0, -0.0, 1.0, 5e-324, 1e-300, 1e-13, 1e-12, 0.02, 1 / 3, 0.5, 0.98, 1 - 1e-12,
               float(np.nextafter(1.0, 0.0)), -0.25, 1.5]
_EDGE_COUNTS = [0, 1, 2, 7, 400, 10**5]


@pytest.mark.parametrize("cache_size", [bounds._KL_CACHE_SIZE, 3])
def test_kl_interval_is_the_plain_bisection_bit_for_bit(monkeypatch, cache_size):
    # The batched, deduplicated and remembered bisection gives exactly the floats of a scalar one,
    # with the cache cold, warm, and starting over (cache_size=3).
    monkeypatch.setattr(bounds, "_KL_CACHE", {})
    monkeypatch.setattr(bounds, "_KL_CACHE_SIZE", cache_size)
    rng = np.random.default_rng(3)
    means, counts = (np.array(a).ravel() for a in np.meshgrid(_EDGE_MEANS, _EDGE_COUNTS))
    k = rng.integers(0, 30, size=200)
    T = k + rng.integers(1, 30, size=200)  # k / T means, as 0/1 answers give, many repeated
    means, counts = np.concatenate([means, k / T, rng.random(50)]), np.concatenate([counts, T, rng.integers(1, 99, 50)])
    for n_items, delta in [(300, 0.1), (4, 0.999), (10**4, 1e-6)]:
        expected = np.array([_reference_kl_interval(m, t, n_items, delta) for m, t in zip(means, counts, strict=True)])
        for order in (np.arange(len(means)), rng.permutation(len(means))):
            lo, hi = kl_interval(means[order], counts[order], n_items, delta)
            assert lo.dtype == hi.dtype == np.float64
            assert np.array_equal(lo.view(np.uint64), expected[order, 0].view(np.uint64))
            assert np.array_equal(hi.view(np.uint64), expected[order, 1].view(np.uint64))
    assert len(bounds._KL_CACHE) <= cache_size


def test_kl_interval_keeps_shapes_and_broadcasts():
    lo, hi = kl_interval(0.25, 40, 30, 0.1)
    assert lo.shape == hi.shape == () and (float(lo), float(hi)) == _reference_kl_interval(0.25, 40, 30, 0.1)
    means, counts = np.array([[0.1], [0.5], [1.0]]), np.array([[0, 3, 50, 3]])
    lo, hi = kl_interval(means, counts, 30, 0.1)
    assert lo.shape == hi.shape == (3, 4)
    for (r, c), m in np.ndenumerate(np.broadcast_to(means, (3, 4))):
        assert (lo[r, c], hi[r, c]) == _reference_kl_interval(m, counts[0, c], 30, 0.1)
    lo, hi = kl_interval(np.array([]), np.array([], dtype=np.int64), 30, 0.1)
    assert lo.shape == hi.shape == (0,)
    lo, hi = kl_interval(np.array([np.nan, 0.3]), np.array([5, 5]), 30, 0.1)  # NaN stays NaN, alone
    assert np.isnan(lo[0]) and np.isnan(hi[0]) and (lo[1], hi[1]) == _reference_kl_interval(0.3, 5, 30, 0.1)
