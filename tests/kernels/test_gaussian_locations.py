"""The Gaussian conditional of the locations (``kernels/gaussian_locations.py``) against
dense linear algebra: the eliminated factor with one term (a diagonal block) and with an
intercept and a slope per level (2 x 2 blocks), the cross block dense and sparse.

For random rows, covariates, levels and weights, ``Z`` is built densely; the sums'
``Z'Z`` blocks, the conditional's mean, its log density (differences between points) and
the covariance of its draws (the exact linear map from the white noise, read off by
feeding unit vectors) must equal those of ``N(P^-1 h, P^-1)`` with ``P = Z'Z / s^2 +
Lambda``. Pure NumPy."""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.kernels import gaussian_locations as gl

pytestmark = pytest.mark.numerics


def _problem(factors, sizes, n=300, p=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    levels = {}
    groups = [levels.setdefault(f, rng.integers(0, s, n)) for f, s in zip(factors, sizes)]
    weights = [np.ones(n) if k % 2 == 0 else rng.normal(size=n) for k in range(len(sizes))]
    lay = gl.Layout(p, sizes, factors)
    Z = np.zeros((n, lay.size))
    Z[:, :p] = X
    for k, (g, w) in enumerate(zip(groups, weights)):
        Z[np.arange(n), lay.offsets[k] + g] += w
    r = rng.normal(size=n)
    rr, rb, bb = lay.zz(X, groups, weights)
    sums = gl.LocationSums(n=n, E=float(r @ r), c=lay.zt_times(r, X, groups, weights),
                           r_idx=lay.r_idx, b_idx=lay.b_idx, ZZ_rr=rr, ZZ_rb=rb, ZZ_bb=bb)
    lam = np.r_[np.zeros(p), rng.uniform(0.5, 3.0, lay.size - p)]
    beta_prec = np.eye(p) * 0.3
    shift = rng.normal(size=lay.size)
    return lay, Z, r, sums, lam, beta_prec, shift


class _Noise:
    """An rng whose normal draws are given vectors (to read a draw's linear map)."""

    def __init__(self, vectors):
        self.vectors = list(vectors)

    def standard_normal(self, size):
        return self.vectors.pop(0)[:size] if np.ndim(size) == 0 else None


@pytest.mark.parametrize("factors, sizes, dense, eliminated", [
    ([0, 1], [7, 4], True, [0]),            # two crossed factors, one term each
    ([0, 0, 1], [7, 7, 4], True, [0, 1]),   # intercept and slope per level of factor 0
    ([0, 0, 1], [7, 7, 4], False, [0, 1]),  # the same with the cross block sparse
    ([0, 1, 1], [12, 9, 9], True, [1, 2]),  # the factor with most locations goes first
])
def test_conditional_equals_dense_algebra(factors, sizes, dense, eliminated, monkeypatch):
    if not dense:
        monkeypatch.setattr(gl, "DENSE_CROSS_ENTRIES", 0)
    lay, Z, r, sums, lam, beta_prec, shift = _problem(factors, sizes)
    assert lay.b_terms == eliminated
    inv_s2 = 0.7
    cond = gl.GaussianConditional(sums, inv_s2, lam, beta_prec, shift)
    P = Z.T @ Z * inv_s2 + np.diag(lam)
    P[:2, :2] += beta_prec
    h = Z.T @ r * inv_s2 + shift
    mean = np.linalg.solve(P, h)
    np.testing.assert_allclose(cond.mean(), mean, rtol=1e-9, atol=1e-10)
    # the quadratic form of the sums
    d = np.random.default_rng(1).normal(size=lay.size)
    np.testing.assert_allclose(sums.quadratic(d), d @ Z.T @ Z @ d, rtol=1e-10)
    # log density differences
    e1, e2 = mean + 0.3, mean - 0.2 * np.arange(lay.size) / lay.size
    dense_lp = [-0.5 * (e - mean) @ P @ (e - mean) for e in (e1, e2)]
    assert cond.logpdf(e1) - cond.logpdf(e2) == pytest.approx(dense_lp[0] - dense_lp[1],
                                                              rel=1e-9)
    _, logdet = np.linalg.slogdet(P)
    assert cond.logpdf(mean) == pytest.approx(0.5 * logdet, rel=1e-9)
    # a draw is mean + A (z_r, z_b): A A' must be P^-1
    n_r, n_b = lay.r_idx.size, lay.b_idx.size
    cols = []
    for j in range(n_r + n_b):
        z = np.zeros(n_r + n_b)
        z[j] = 1.0
        cols.append(cond.sample(_Noise([z[:n_r], z[n_r:]])) - cond.mean())
    A = np.column_stack(cols)
    np.testing.assert_allclose(A @ A.T, np.linalg.inv(P), rtol=1e-8, atol=1e-11)


def test_a_block_that_is_not_positive_is_refused():
    lay, Z, r, sums, lam, beta_prec, shift = _problem([0, 0, 1], [7, 7, 4])
    lam[lay.b_idx] = -50.0
    with pytest.raises(np.linalg.LinAlgError):
        gl.GaussianConditional(sums, 0.7, lam, beta_prec, shift)
