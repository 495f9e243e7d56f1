import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.distance import cdist

from engine.triangle import closure_reference, full_pass, refresh_row, update_pair, update_pairs


def _random_intervals(seed, n):
    """A random metric and random intervals around it, some pairs unknown (0, inf)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, rng.integers(1, 4)))
    D = cdist(X, X)
    U = D + rng.exponential(0.3, size=D.shape)
    L = np.maximum(D - rng.exponential(0.3, size=D.shape), 0)
    U = np.minimum(U, U.T)
    L = np.maximum(L, L.T)
    unknown = rng.random(D.shape) < 0.5
    unknown = unknown | unknown.T
    U[unknown] = np.inf
    L[unknown] = 0.0
    np.fill_diagonal(U, 0)
    np.fill_diagonal(L, 0)
    return rng, D, U, L


def _contains(D, U, L):
    return np.all(L <= D + 1e-9) and np.all(D <= U + 1e-9)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(3, 12))
def test_every_triangle_update_keeps_true_distances_inside_the_bounds(seed, n):
    rng, D, U, L = _random_intervals(seed, n)
    for _ in range(5):
        i, j = rng.choice(n, 2, replace=False)
        width = rng.exponential(0.1)
        U[i, j] = U[j, i] = min(U[i, j], D[i, j] + width)
        L[i, j] = L[j, i] = max(L[i, j], D[i, j] - rng.exponential(0.1))
        update_pair(U, L, i, j)
        assert _contains(D, U, L)
    refresh_row(U, L, int(rng.integers(n)), chunk=2)
    assert _contains(D, U, L)
    full_pass(U, L)
    assert _contains(D, U, L)
    assert np.allclose(U, U.T) and np.allclose(L, L.T)
    assert np.all(L <= U + 1e-9)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(3, 10))
def test_full_pass_closes_upper_bounds_like_shortest_paths(seed, n):
    _, D, U, L = _random_intervals(seed, n)
    U_ref, L_ref = closure_reference(U, L, sweeps=n)
    full_pass(U, L)
    assert np.allclose(U, U_ref)
    assert np.all(L <= L_ref + 1e-9)  # never tighter than the true fixpoint
    assert _contains(D, U, L)


def test_refresh_row_matches_one_relaxation_of_that_row():
    _, D, U, L = _random_intervals(3, 9)
    U0 = U.copy()
    refresh_row(U, L, 4, chunk=3)
    expected = np.minimum(U0[4], (U0[4][:, None] + U0).min(axis=0))
    expected[4] = 0
    assert np.allclose(U[4], expected) and np.allclose(U[:, 4], expected)


def test_a_sampled_pair_tightens_the_third_side():
    U = np.full((3, 3), np.inf)
    L = np.zeros((3, 3))
    np.fill_diagonal(U, 0)
    U[0, 1] = U[1, 0] = 1.0
    L[0, 1] = L[1, 0] = 0.9
    update_pair(U, L, 0, 1)
    U[0, 2] = U[2, 0] = 0.1
    L[0, 2] = L[2, 0] = 0.05
    update_pair(U, L, 0, 2)
    assert U[1, 2] == 1.1
    assert L[1, 2] == 0.8  # d(1,2) >= d(0,1) - d(0,2) >= 0.9 - 0.1


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(3, 12), m=st.integers(1, 8))
def test_batched_pair_updates_are_sound_symmetric_and_no_tighter_than_the_loop(seed, n, m):
    rng, D, U, L = _random_intervals(seed, n)
    for _ in range(m):  # tighten some sampled pairs first, as observe does
        i, j = rng.choice(n, 2, replace=False)
        U[i, j] = U[j, i] = min(U[i, j], D[i, j] + rng.exponential(0.1))
        L[i, j] = L[j, i] = max(L[i, j], D[i, j] - rng.exponential(0.1))
    pairs = [tuple(rng.choice(n, 2, replace=False)) for _ in range(m)]
    U_loop, L_loop = U.copy(), L.copy()
    for i, j in pairs:
        update_pair(U_loop, L_loop, i, j)
    U0, L0 = U.copy(), L.copy()
    update_pairs(U, L, [p[0] for p in pairs], [p[1] for p in pairs])
    assert _contains(D, U, L)
    assert np.array_equal(U, U.T) and np.array_equal(L, L.T)
    assert np.all(U <= U0) and np.all(L >= L0)
    assert np.all(U >= U_loop - 1e-12) and np.all(L <= L_loop + 1e-12)
    if m == 1:  # one pair: exactly update_pair
        assert np.allclose(U, U_loop) and np.allclose(L, L_loop)


def test_batched_pair_updates_chunk_like_one_step(monkeypatch):
    import engine.triangle as tri

    _, D, U, L = _random_intervals(11, 15)
    i, j = [0, 3, 3, 7, 9], [1, 4, 8, 2, 0]
    U1, L1 = U.copy(), L.copy()
    update_pairs(U1, L1, i, j)
    monkeypatch.setattr(tri, "UPDATE_CHUNK_ELEMENTS", 15)  # one pair end per chunk
    monkeypatch.setattr(tri, "SMALL_UPDATE_PAIRS", 0)  # the vectorised path, not row by row
    update_pairs(U, L, i, j)
    assert np.array_equal(U, U1) and np.array_equal(L, L1)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(3, 12), m=st.integers(1, 8))
def test_few_pair_updates_row_by_row_equal_the_vectorised_step_bit_for_bit(seed, n, m):
    import engine.triangle as tri

    rng, D, U, L = _random_intervals(seed, n)
    for _ in range(m):
        i, j = rng.choice(n, 2, replace=False)
        U[i, j] = U[j, i] = min(U[i, j], D[i, j] + rng.exponential(0.1))
        L[i, j] = L[j, i] = max(L[i, j], D[i, j] - rng.exponential(0.1))
    pairs = [tuple(int(x) for x in rng.choice(min(n, 4), 2, replace=False)) for _ in range(m)]  # shared rows
    i, j = [p[0] for p in pairs], [p[1] for p in pairs]
    U_vec, L_vec = U.copy(), L.copy()
    old = tri.SMALL_UPDATE_PAIRS
    try:
        tri.SMALL_UPDATE_PAIRS = 0
        update_pairs(U_vec, L_vec, i, j)
    finally:
        tri.SMALL_UPDATE_PAIRS = old
    update_pairs(U, L, i, j)  # m <= 8 pairs: row by row
    assert U.tobytes() == U_vec.tobytes() and L.tobytes() == L_vec.tobytes()


def test_batched_pair_updates_on_float32_round_the_float64_result():
    _, D, U, L = _random_intervals(5, 14)
    i, j = [0, 2, 2, 5, 9, 13], [1, 3, 7, 6, 0, 4]
    U64, L64 = U.copy(), L.copy()
    U32, L32 = U.astype(np.float32), L.astype(np.float32)
    update_pairs(U64, L64, i, j)
    update_pairs(U32, L32, i, j)
    assert np.array_equal(U32, U64.astype(np.float32)) or np.allclose(U32, U64, rtol=1e-6)
    assert np.allclose(L32, L64, rtol=1e-6, atol=1e-7)
