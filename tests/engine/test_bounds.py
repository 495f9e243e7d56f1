import numpy as np
import pytest

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
