"""The derivative bounds of multinomial-logit rows (:mod:`pymc_subsample.kernels.scalable.softmax`)
against brute-force maxima of ``|D^m lse(eta)[u, ..., u]|`` over many random points
``eta`` and directions ``v`` (``u = A v``), and against the exact formula of the
derivatives (finite differences of ``lse``).

Every check is one-sided (the bound is never exceeded) and has power: the brute-force
maximum comes within a few per cent of the global bound (which is sharp), so the bound
divided by 1.1 is caught (:func:`test_a_tenth_smaller_bound_is_caught`)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import logsumexp

from pymc_subsample.kernels.scalable.softmax import (
    SOFTMAX_THIRD,
    cornish_constants,
    lse_derivative,
    pair_distances,
    softmax_constants,
    softmax_global_constants,
    softmax_region_constants,
)

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics


def _unit(rng, n, d):
    v = rng.standard_normal((n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.parametrize("m", [2, 3])
def test_lse_derivative_matches_finite_differences(m):
    rng = np.random.default_rng(1)
    for K in (2, 3, 5):
        eta, u = rng.normal(0, 2, K), rng.standard_normal(K)
        h = 1e-3
        f = lambda t: logsumexp(eta + t * u)  # noqa: E731
        if m == 2:
            fd = (f(h) - 2 * f(0) + f(-h)) / h**2
        else:
            fd = (f(2 * h) - 2 * f(h) + 2 * f(-h) - f(-2 * h)) / (2 * h**3)
        assert lse_derivative(eta, u, m) == pytest.approx(fd, rel=1e-4, abs=1e-6)


def _brute_max(A, m, rng, etas, n_dirs=400):
    """max over the points ``etas`` (n_eta, K) and random unit directions plus the
    class-pair difference directions of ``|D^m lse(eta)[A v, ...]|``, for one row's
    ``A`` (K x d)."""
    K, d = A.shape
    dirs = [_unit(rng, n_dirs, d)]
    for k, l in itertools.combinations(range(K), 2):
        w = A[k] - A[l]
        if np.linalg.norm(w) > 0:
            dirs.append((w / np.linalg.norm(w))[None, :])
    V = np.concatenate(dirs)
    U = V @ A.T  # (n_dirs, K)
    vals = lse_derivative(etas[:, None, :], U[None, :, :], m)
    return float(np.abs(vals).max())


def _extremal_points(A, rng, n=300):
    """Random predictors, plus points that put the mass on one pair of classes in a
    range of ratios (where the suprema are approached)."""
    K = A.shape[0]
    pts = [rng.normal(0, 3, (n, K))]
    for k, l in itertools.combinations(range(K), 2):
        for s in np.linspace(0.05, 0.95, 37):
            e = np.full(K, -40.0)
            e[k], e[l] = 0.0, math.log(s / (1 - s))
            pts.append(e[None, :])
    return np.concatenate(pts)


@pytest.mark.parametrize("m", [2, 3])
def test_global_bound_is_never_exceeded_and_sharp(m):
    rng = np.random.default_rng(10 + m)
    ratios = []
    for K, d in [(2, 3), (3, 5), (3, 18), (4, 6), (6, 4)]:
        for _ in range(6):
            A = rng.normal(0, 1, (K, d)) * rng.uniform(0.01, 2.0)
            if rng.random() < 0.3:
                A[0] = 0.0  # a reference class with a zero predictor
            M = softmax_global_constants(pair_distances(A[None]), m)[0]
            brute = _brute_max(A, m, rng, _extremal_points(A, rng))
            assert brute <= M * (1 + 1e-9), (K, d, brute, M)
            ratios.append(brute / M)
    # sharp: the extremal points and directions come within 2% of the bound
    assert min(ratios) > 0.98, min(ratios)


def test_global_constants_closed_form():
    A = np.zeros((1, 3, 2))
    A[0, 1] = [3.0, 4.0]  # d_01 = 5 is the largest pair distance
    A[0, 2] = [1.0, 0.0]
    D = pair_distances(A)
    assert D[0, 0, 1] == pytest.approx(5.0)
    assert softmax_global_constants(D, 2)[0] == pytest.approx(25.0 / 4)
    assert softmax_global_constants(D, 3)[0] == pytest.approx(125.0 * SOFTMAX_THIRD)
    # adding one vector to every class's row changes nothing (only differences matter)
    shifted = A + np.array([7.0, -2.0])
    np.testing.assert_allclose(pair_distances(shifted), D)


@pytest.mark.parametrize("m", [2, 3])
def test_region_bound_is_never_exceeded(m):
    rng = np.random.default_rng(20 + m)
    n_rows, K, d, R = 40, 3, 5, 2.5
    A = rng.normal(0, 1, (n_rows, K, d)) * rng.uniform(0.02, 1.0, (n_rows, 1, 1))
    eta_hat = rng.normal(0, 3, (n_rows, K))
    D = pair_distances(A)
    Mr = softmax_region_constants(D, eta_hat, R, m)
    Mg = softmax_global_constants(D, m)
    assert np.all(Mr <= Mg)
    tight = []
    for i in range(n_rows):
        z = _unit(rng, 300, d) * (R * rng.uniform(0, 1, (300, 1)) ** (1 / d))
        z = np.concatenate([z, _unit(rng, 100, d) * R])  # the sphere itself too
        etas = eta_hat[i] + z @ A[i].T
        brute = _brute_max(A[i], m, rng, etas, n_dirs=200)
        assert brute <= Mr[i] * (1 + 1e-9), (i, brute, Mr[i])
        tight.append(brute / Mr[i])
    # confident rows: the region constant is far below the global one
    assert np.any(Mr < 0.5 * Mg)
    print(f"m={m}: region/global median {np.median(Mr / Mg):.3f}, brute/region max "
          f"{max(tight):.3f} median {np.median(tight):.3f}")
    assert max(tight) > 0.3, max(tight)


@pytest.mark.parametrize("m", [2, 3])
def test_region_bound_of_a_confident_row_is_small(m):
    """A row whose class wins by 10 in the whole ball: the region constant is O(e^-8)
    times the global one."""
    A = np.array([[[0.1, 0.0], [0.0, 0.1], [0.0, 0.0]]])
    D = pair_distances(A)
    Mr = softmax_region_constants(D, np.array([[10.0, 0.0, 0.0]]), 3.0, m)
    Mg = softmax_global_constants(D, m)
    assert Mr[0] < 1e-3 * Mg[0]


@pytest.mark.parametrize("m", [2, 3])
def test_cornish_constants_bound_every_partial(m):
    """Eq. 12: every m-th partial derivative in q, ``D^m lse[J e_j1, ..., J e_jm]``."""
    rng = np.random.default_rng(30 + m)
    worst = 0.0
    for K, d in [(2, 3), (3, 4), (5, 3)]:
        J = rng.normal(0, 1, (1, K, d))
        psi = cornish_constants(J, m)[0]
        for eta in _extremal_points(J[0], rng, n=200):
            p = np.exp(eta - eta.max())
            p /= p.sum()
            C = J[0] - p @ J[0]  # centred columns (K, d)
            if m == 2:
                T = np.einsum("k,ka,kb->ab", p, C, C)
            else:
                T = np.einsum("k,ka,kb,kc->abc", p, C, C, C)
            top = float(np.abs(T).max())
            assert top <= psi * (1 + 1e-9)
            worst = max(worst, top / psi)
    assert worst > (0.9 if m == 2 else 0.3), worst


def test_a_tenth_smaller_bound_is_caught():
    """The brute-force check has power: the global constants / 1.1 are exceeded."""
    rng = np.random.default_rng(5)
    caught = 0
    for m in (2, 3):
        for _ in range(5):
            A = rng.normal(0, 1, (3, 4))
            M = softmax_global_constants(pair_distances(A[None]), m)[0] / 1.1
            caught += _brute_max(A, m, rng, _extremal_points(A, rng, n=50)) > M
    assert caught == 10


def test_softmax_constants_dispatch_and_validation():
    rng = np.random.default_rng(2)
    J = rng.normal(0, 1, (7, 3, 4))
    eta = rng.normal(0, 1, (7, 3))
    L = np.linalg.cholesky(np.eye(4) * 0.3 + 0.1)
    np.testing.assert_allclose(softmax_constants(2, J, eta), cornish_constants(J, 3))
    D = pair_distances(J @ L)
    np.testing.assert_allclose(softmax_constants(1, J, eta, whiten=L),
                               softmax_global_constants(D, 2))
    np.testing.assert_allclose(softmax_constants(2, J, eta, whiten=L, radius=2.0),
                               softmax_region_constants(D, eta, 2.0, 3))
    with pytest.raises(ValueError, match="order must be 1 or 2"):
        softmax_constants(3, J, eta, whiten=L)
    with pytest.raises(ValueError, match="K >= 2 classes"):
        softmax_constants(2, J[:, :1], eta, whiten=L)
    with pytest.raises(ValueError, match="whitening matrix"):
        softmax_constants(2, J, eta, radius=1.0)
    with pytest.raises(ValueError, match="whiten must be"):
        softmax_constants(2, J, eta, whiten=np.eye(3))
    with pytest.raises(ValueError, match="radius must be"):
        softmax_region_constants(D, eta, -1.0, 2)
    with pytest.raises(ValueError, match="m = k \\+ 1"):
        softmax_global_constants(D, 4)
