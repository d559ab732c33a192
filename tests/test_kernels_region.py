"""Local derivative bounds over an interval of the linear predictor
(:mod:`pymc_subsample.kernels.region`): each supremum is checked against a dense grid
(it must be at least the grid's maximum, and at most slightly above it), and a
deliberately wrong supremum (the value at the interval's midpoint) is shown to be caught
by the same check."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit

from pymc_subsample.kernels.region import local_sup


def _derivs(family, m, eta, y=None, nu=None, sigma=None):
    if family == "bernoulli_logit":
        s = expit(eta)
        return s * (1 - s) if m == 2 else s * (1 - s) * (1 - 2 * s)
    if family == "student_t":
        r, c, a = y - eta, nu * sigma**2, (nu + 1) / 2
        if m == 2:
            return 2 * a * (c - r * r) / (c + r * r) ** 2
        return 4 * a * r * (r * r - 3 * c) / (c + r * r) ** 3
    if family == "poisson_log":
        return np.exp(eta)
    raise AssertionError(family)


CASES = [
    ("bernoulli_logit", {}),
    ("student_t", {"nu": 4.0, "sigma": 1.5}),
    ("poisson_log", {}),
]


def _intervals(rng, n=400):
    centre = rng.normal(0.0, 3.0, n)
    width = rng.exponential(1.0, n)
    return centre - width, centre + width


def _grid_max(family, m, lo, hi, y, params, k=2001):
    t = np.linspace(0.0, 1.0, k)[:, None]
    eta = lo[None, :] + t * (hi - lo)[None, :]
    return np.max(np.abs(_derivs(family, m, eta, y=y, **params)), axis=0)


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("family, params", CASES)
def test_local_sup_matches_a_dense_grid(family, params, m):
    rng = np.random.default_rng(m)
    lo, hi = _intervals(rng)
    y = rng.normal(0.0, 3.0, lo.size) if family == "student_t" else None
    sup = local_sup(family, m, lo, hi, y=y, **params)
    grid = _grid_max(family, m, lo, hi, y, params)
    assert np.all(sup >= grid * (1 - 1e-12))  # a bound
    assert np.all(sup <= grid * (1 + 1e-3) + 1e-15)  # and the supremum, not more


@pytest.mark.parametrize("family, params", CASES[:2])
def test_grid_check_catches_a_wrong_supremum(family, params):
    """The midpoint value is not a supremum: the grid check must reject it."""
    rng = np.random.default_rng(9)
    lo, hi = _intervals(rng)
    y = rng.normal(0.0, 3.0, lo.size) if family == "student_t" else None
    wrong = np.abs(_derivs(family, 3, 0.5 * (lo + hi), y=y, **params))
    grid = _grid_max(family, 3, lo, hi, y, params)
    assert np.any(wrong < grid * (1 - 1e-6))


def test_local_sup_is_below_the_global_constant():
    lo, hi = np.array([-8.0, -0.1, 3.0]), np.array([-7.0, 0.1, 3.5])
    glob = 1 / (6 * np.sqrt(3))
    sup = local_sup("bernoulli_logit", 3, lo, hi)
    assert np.all(sup <= glob * (1 + 1e-12))
    assert sup[0] < 1e-2 * glob and sup[1] < 0.2 * glob
    assert local_sup("bernoulli_logit", 3, np.array([1.0]), np.array([2.0]))[0] == pytest.approx(glob)


def test_local_sup_normal_and_errors():
    lo, hi = np.zeros(3), np.ones(3)
    np.testing.assert_allclose(local_sup("normal", 2, lo, hi, sigma=2.0), 0.25)
    np.testing.assert_allclose(local_sup("normal", 3, lo, hi, sigma=2.0), 0.0)
    with pytest.raises(ValueError, match="unknown family"):
        local_sup("gamma", 2, lo, hi)
    with pytest.raises(ValueError, match="must be 2 or 3"):
        local_sup("poisson_log", 4, lo, hi)
    with pytest.raises(TypeError, match="student_t needs"):
        local_sup("student_t", 2, lo, hi)
