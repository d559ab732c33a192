"""Tests of the Scalable-MH kernels: alias table, Poisson thinning, SMH test, GLM bounds.

Statistical checks use fixed seeds; their tolerances are multiples of the Monte Carlo
standard error (``Z_TOL`` standard errors, about a 1e-5 two-sided chance per check for a
correct kernel at a random seed).
"""

from __future__ import annotations

import ast
import math
import subprocess
import sys
import zlib

import numpy as np
import pytest
from scipy import optimize, stats

from pymc_subsample.kernels.scalable.bounds import (
    glm_bound_constants,
    glm_row_bounds,
    glm_sup_derivative,
    row_max_abs,
)
from pymc_subsample.kernels.sampling.alias import AliasTable
from pymc_subsample.kernels.scalable.phi import taylor_phi, whitened_phi
from pymc_subsample.kernels.scalable.smh import SMHResult, smh_test
from pymc_subsample.kernels.scalable.thinning import (
    BoundViolationError,
    ThinningResult,
    poisson_estimator_test,
    poisson_thinning_test,
)
from tests.conftest import REPO

#: pure NumPy numerics: CI runs them on Python 3.11 only (see pyproject's markers)
pytestmark = pytest.mark.numerics

Z_TOL = 4.5
KERNELS = REPO / "pymc_subsample" / "kernels"


# ---------------------------------------------------------------------------------------
# Pure-NumPy GLM terms U_i = f(eta_i, y_i) and their eta-derivatives
# ---------------------------------------------------------------------------------------


def _logit_f(eta, y):  # y in {-1, 1}
    return np.logaddexp(0.0, -y * eta)


def _logit_f1(eta, y):
    return -y / (1.0 + np.exp(y * eta))


def _logit_f2(eta, y):
    s = 1.0 / (1.0 + np.exp(-eta))
    return s * (1.0 - s)


def _t_parts(nu, sigma):
    a, c = 0.5 * (nu + 1.0), nu * sigma**2

    def f(eta, y):
        return a * np.log1p((y - eta) ** 2 / c)

    def f1(eta, y):
        r = y - eta
        return -2.0 * a * r / (c + r * r)

    def f2(eta, y):
        r2 = (y - eta) ** 2
        return 2.0 * a * (c - r2) / (c + r2) ** 2

    return f, f1, f2


def _normal_parts(sigma):
    def f(eta, y):
        return 0.5 * (y - eta) ** 2 / sigma**2

    def f1(eta, y):
        return -(y - eta) / sigma**2

    def f2(eta, y):
        return np.full(np.broadcast(eta, y).shape, 1.0 / sigma**2)

    return f, f1, f2


class GLM:
    """Rows U_i(theta) = f(x~_i . theta, y_i) with exact per-row Taylor expansions."""

    def __init__(self, X, y, parts, intercept=True):
        self.X = X
        self.X1 = np.column_stack([np.ones(len(X)), X]) if intercept else X
        self.y = y
        self.f, self.f1, self.f2 = parts

    def U(self, theta):
        """U_i(theta) for all rows; theta of shape (d,) or (n_pairs, d)."""
        return self.f(np.asarray(theta) @ self.X1.T, self.y)

    def set_mode(self, theta_hat):
        self.theta_hat = np.asarray(theta_hat, dtype=float)
        eta = self.X1 @ self.theta_hat
        self.U_hat = self.f(eta, self.y)  # U_i(theta_hat)
        self.grad = self.f1(eta, self.y)[:, None] * self.X1  # (N, d): grad U_i(theta_hat)
        self.hess = self.f2(eta, self.y)[:, None, None] * (
            self.X1[:, :, None] * self.X1[:, None, :]
        )  # (N, d, d): hess U_i(theta_hat)

    def Uhat(self, theta, k):
        """Uhat_{k,i}(theta): k-th order Taylor expansion of U_i at theta_hat."""
        h = np.asarray(theta) - self.theta_hat
        out = self.U_hat + h @ self.grad.T
        if k == 2:
            out = out + 0.5 * np.einsum("...a,iab,...b->...i", h, self.hess, h)
        return out

    def lam(self, theta, theta_prop, k):
        """lambda_i(theta, theta') = max(0, (U_i - Uhat_{k,i})(theta') - (U_i - Uhat_{k,i})(theta))."""
        r_new = self.U(theta_prop) - self.Uhat(theta_prop, k)
        r_old = self.U(theta) - self.Uhat(theta, k)
        return np.maximum(0.0, r_new - r_old)

    def Uhat_total(self, theta, k):
        return self.Uhat(theta, k).sum(axis=-1)


def _logistic_problem(seed=1, n=20, p=2):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    beta = np.r_[0.3, np.linspace(1.0, -0.7, p)]
    X1 = np.column_stack([np.ones(n), X])
    y = np.where(rng.random(n) < 1.0 / (1.0 + np.exp(-X1 @ beta)), 1.0, -1.0)
    model = GLM(X, y, (_logit_f, _logit_f1, _logit_f2))
    # theta_hat: Newton on U + |theta|^2 / 20 (a mode under a weak prior; any theta_hat
    # gives an exact test, a good one just makes it cheap).
    th = np.zeros(p + 1)
    for _ in range(50):
        eta = X1 @ th
        g = _logit_f1(eta, y) @ X1 + th / 10.0
        H = (X1.T * _logit_f2(eta, y)) @ X1 + np.eye(p + 1) / 10.0
        th = th - np.linalg.solve(H, g)
    model.set_mode(th)
    H = (X1.T * _logit_f2(X1 @ th, y)) @ X1
    model.chol_cov = np.linalg.cholesky(np.linalg.inv(H))
    return model


def _pick_pairs(model, k, psi_total, n_pairs, seed, p_range=(0.25, 0.9), max_rate=40.0):
    """Deterministic (theta, theta') pairs near theta_hat with moderate acceptance."""
    rng = np.random.default_rng(seed)
    d = model.theta_hat.size
    pairs = []
    for _ in range(2000):
        sc = rng.choice([0.5, 0.8, 1.2, 1.6])
        a = model.theta_hat + sc * model.chol_cov @ rng.normal(size=d)
        b = model.theta_hat + sc * model.chol_cov @ rng.normal(size=d)
        lam = model.lam(a, b, k)
        p_acc = math.exp(-lam.sum())
        rate = taylor_phi(a, b, model.theta_hat, k) * psi_total
        if p_range[0] <= p_acc <= p_range[1] and rate <= max_rate:
            pairs.append((a, b, lam, p_acc))
            if len(pairs) == n_pairs:
                return pairs
    raise AssertionError("could not find test pairs")  # pragma: no cover


# ---------------------------------------------------------------------------------------
# Alias table
# ---------------------------------------------------------------------------------------


def test_alias_frequencies_chi_square():
    rng = np.random.default_rng(11)
    w = rng.exponential(size=30) * (rng.random(30) < 0.75)
    w[[0, 7]] = 0.0
    w[3] = 25.0  # one heavy row
    table = AliasTable(w)
    n_draw = 300_000
    draws = table.sample(np.random.default_rng(12), n_draw)
    assert draws.dtype == np.int64 and draws.shape == (n_draw,)
    counts = np.bincount(draws, minlength=w.size)
    assert counts[w == 0].sum() == 0
    pos = w > 0
    res = stats.chisquare(counts[pos], n_draw * w[pos] / w.sum())
    assert res.pvalue > 1e-4, res


@pytest.mark.parametrize(
    "weights",
    [
        np.ones(7),
        np.array([0.0, 0.0, 3.0, 0.0]),
        np.array([5.0]),
        np.r_[1e-12, 1.0, 0.0, 1e6, 2.5],
        np.r_[1e-300, 1e300, 0.0],
        np.random.default_rng(3).pareto(0.7, size=5000),
        np.random.default_rng(4).exponential(size=200_000),
    ],
    ids=["uniform", "onehot", "single", "spread", "extreme", "pareto", "large"],
)
def test_alias_table_is_exact(weights):
    table = AliasTable(weights)
    q = table.probabilities()
    target = weights / weights.sum()
    grid = 1.0 / (len(weights) * 2.0**table.bits)
    np.testing.assert_array_less(np.abs(q - target), 1e-13 * target + 4 * grid)
    assert np.all(q[weights == 0] == 0.0)
    assert table.alias.dtype == np.int32 and table.threshold.dtype == np.int64
    assert np.all((table.prob >= 0) & (table.prob <= 1))
    # every alias is a row that holds positive weight
    assert np.all(weights[table.alias] > 0)
    assert table.total == pytest.approx(weights.sum(), rel=1e-12)


def test_alias_table_float32_weights_and_chunks_agree():
    """float32 weights (as ScalableMH stores psi) give the exact table of their float64
    values, and the chunked construction does not depend on the chunk size."""
    w32 = np.random.default_rng(8).pareto(0.7, size=50_000).astype(np.float32)
    w32[::97] = 0.0
    whole = AliasTable(w32.astype(np.float64))
    for chunk in (1, 999, 1 << 20):
        part = AliasTable(w32, chunk=chunk)
        np.testing.assert_array_equal(part.probabilities(), whole.probabilities())
        assert part.total == pytest.approx(whole.total, rel=1e-12)
    q, target = whole.probabilities(), w32 / w32.astype(np.float64).sum()
    grid = 1.0 / (w32.size * 2.0**whole.bits)
    np.testing.assert_array_less(np.abs(q - target), 1e-13 * target + 4 * grid)


def test_alias_zero_weights_never_drawn():
    rng = np.random.default_rng(5)
    w = np.zeros(1000)
    w[rng.choice(1000, 13, replace=False)] = rng.exponential(size=13)
    w[17] = 1e-9  # tiny but positive: may be drawn, zeros may not
    table = AliasTable(w)
    draws = table.sample(rng, 500_000)
    assert np.all(w[draws] > 0)
    assert table.sample(rng, 0).shape == (0,)


def test_alias_accepts_lists_and_memmap_without_modifying(tmp_path):
    w = np.random.default_rng(6).exponential(size=100)
    mm = np.memmap(tmp_path / "w.dat", dtype=np.float64, mode="w+", shape=(100,))
    mm[:] = w
    before = np.array(mm)
    t1, t2 = AliasTable(mm), AliasTable(list(w))
    np.testing.assert_array_equal(np.asarray(mm), before)
    np.testing.assert_array_equal(t1.alias, t2.alias)
    np.testing.assert_array_equal(t1.threshold, t2.threshold)
    assert len(t1) == 100


@pytest.mark.parametrize(
    "bad, match",
    [
        ([], "empty"),
        ([1.0, -0.5], "weight 1 is -0.5"),
        ([1.0, np.nan], "finite"),
        ([np.inf, 1.0], "finite"),
        ([0.0, 0.0], "positive sum"),
        ([[1.0, 2.0]], "1-D"),
    ],
)
def test_alias_validation(bad, match):
    with pytest.raises(ValueError, match=match):
        AliasTable(np.asarray(bad, dtype=float))


# ---------------------------------------------------------------------------------------
# phi, thinning, SMH
# ---------------------------------------------------------------------------------------


def test_taylor_phi():
    q, qp, m = np.array([1.0, -2.0]), np.array([0.5, 0.5]), np.array([0.0, -1.0])
    a, b = 2.0, 2.0  # ||q - m||_1 = 1 + 1, ||qp - m||_1 = 0.5 + 1.5
    assert taylor_phi(q, qp, m, 1) == pytest.approx((a**2 + b**2) / 2)
    assert taylor_phi(q, qp, m, 2) == pytest.approx((a**3 + b**3) / 6)
    assert taylor_phi(q, qp, m, 2) == taylor_phi(qp, q, m, 2)  # symmetric
    with pytest.raises(ValueError):
        taylor_phi(q, qp, m, 0)


@pytest.mark.parametrize("k", [1, 2])
def test_thinning_acceptance_matches_exact(k):
    """P(accept) of Algorithm 1 equals exp(-sum_i lambda_i), computed exactly (N = 20)."""
    model = _logistic_problem()
    psi = glm_row_bounds(model.X, "bernoulli_logit", k, intercept=True)
    table = AliasTable(psi)
    psi_total = psi.sum()
    rng = np.random.default_rng(100 + k)
    n_rep = 15_000
    for a, b, lam, p_exact in _pick_pairs(model, k, psi_total, 3, seed=200 + k):
        phi = taylor_phi(a, b, model.theta_hat, k)
        fn = lam.__getitem__
        acc = n_k = used = 0
        for _ in range(n_rep):
            r = poisson_thinning_test(rng, phi, psi_total, table, psi, fn)
            acc += r.accept
            n_k += r.n_poisson
            used += r.data_used
            assert r.data_used <= r.n_poisson
        se = math.sqrt(p_exact * (1 - p_exact) / n_rep)
        assert abs(acc / n_rep - p_exact) < Z_TOL * se, (acc / n_rep, p_exact)
        rate = phi * psi_total
        assert r.poisson_rate == pytest.approx(rate)
        assert abs(n_k / n_rep - rate) < Z_TOL * math.sqrt(rate / n_rep)
        assert used <= n_k


def test_smh_test_product_of_factors():
    """First factor and thinning are independent: P(accept) = min(1, e^a) * exp(-sum lambda)."""
    model = _logistic_problem()
    k = 2
    psi = glm_row_bounds(model.X, "logistic", k)
    table = AliasTable(psi)
    (a, b, lam, p_thin), = _pick_pairs(model, k, psi.sum(), 1, seed=7)
    phi = taylor_phi(a, b, model.theta_hat, k)
    rng = np.random.default_rng(8)

    def full():  # pragma: no cover - must not be called
        raise AssertionError("fallback used")

    n_rep = 15_000
    first = math.log(0.6)
    acc = sum(
        smh_test(rng, first, phi, psi.sum(), table, psi, lam.__getitem__, full,
                 truncation=math.inf).accept
        for _ in range(n_rep)
    )
    p = 0.6 * p_thin
    assert abs(acc / n_rep - p) < Z_TOL * math.sqrt(p * (1 - p) / n_rep)

    # A rejected first factor touches no data; NaN rejects too.
    def no_data(rows):  # pragma: no cover - must not be called
        raise AssertionError("data touched")

    for lr in (-math.inf, math.nan):
        r = smh_test(rng, lr, phi, psi.sum(), table, psi, no_data, full, truncation=math.inf)
        assert isinstance(r, SMHResult)
        assert not r.accept and r.data_used == 0 and not r.fallback


def test_truncation_falls_back_to_full_mh():
    model = _logistic_problem()
    psi = glm_row_bounds(model.X, "logistic", 1)
    table = AliasTable(psi)
    n = len(psi)
    # a far pair: phi * Psi >= R = N (the default)
    a = model.theta_hat + 2.0
    b = model.theta_hat - 2.0
    phi = taylor_phi(a, b, model.theta_hat, 1)
    assert phi * psi.sum() >= n
    log_r = math.log(0.3)
    calls = []

    def full():
        calls.append(1)
        return log_r

    def no_data(rows):  # pragma: no cover - must not be called
        raise AssertionError("thinning used")

    rng = np.random.default_rng(9)
    n_rep = 10_000
    acc = 0
    for _ in range(n_rep):
        r = smh_test(rng, 0.0, phi, psi.sum(), table, psi, no_data, full)
        assert r.fallback and r.data_used == n and r.n_poisson == 0
        assert r.poisson_rate == pytest.approx(phi * psi.sum())
        acc += r.accept
    assert len(calls) == n_rep
    assert abs(acc / n_rep - 0.3) < Z_TOL * math.sqrt(0.3 * 0.7 / n_rep)
    # explicit R; ratio >= 0 always accepts; NaN rejects
    r = smh_test(rng, 0.0, phi, psi.sum(), table, psi, no_data, lambda: 0.5, truncation=1.0)
    assert r.accept and r.fallback
    # delayed acceptance: the data-free factor first (no rows read when it rejects), then
    # the rest of the ratio: P(accept) = min(1, 0.5) min(1, 0.3 / 0.5) = 0.3
    acc = read = 0
    for _ in range(n_rep):
        r = smh_test(rng, math.log(0.5), phi, psi.sum(), table, psi, no_data,
                     lambda: math.log(0.3))
        assert r.fallback and r.data_used in (0, n) and (r.data_used == n or not r.accept)
        acc += r.accept
        read += r.data_used == n
    assert abs(acc / n_rep - 0.3) < Z_TOL * math.sqrt(0.3 * 0.7 / n_rep)
    assert abs(read / n_rep - 0.5) < Z_TOL * math.sqrt(0.25 / n_rep)
    r = smh_test(rng, 0.0, phi, psi.sum(), table, psi, no_data, lambda: math.nan)
    assert not r.accept and r.fallback
    # below R the full-data function is never called
    calls.clear()
    r = smh_test(rng, 0.0, 1e-6, psi.sum(), table, psi, lambda rows: np.zeros(len(rows)), full)
    assert not r.fallback and not calls


def test_thinning_chunks_and_counts():
    rng = np.random.default_rng(10)
    psi = np.random.default_rng(0).exponential(size=500)
    table = AliasTable(psi)
    seen = []

    def zero(rows):
        seen.append(len(rows))
        return np.zeros(len(rows))

    r = poisson_thinning_test(rng, 10.0, psi.sum(), table, psi, zero, chunk_size=64)
    assert isinstance(r, ThinningResult)
    assert r.accept and r.n_poisson > 2000
    # chunks of 64, 128, 256, ... draws; a row drawn twice in a chunk is read once
    assert r.data_used == sum(seen) < r.n_poisson
    assert len(seen) >= 4 and max(seen) <= 500 and seen[0] <= 64

    seen.clear()
    phi = 10.0

    def tight(rows):  # lambda = phi * psi: every Bernoulli succeeds
        seen.append(len(rows))
        return phi * psi[rows]

    r = poisson_thinning_test(rng, phi, psi.sum(), table, psi, tight, chunk_size=64)
    assert not r.accept and r.data_used == seen[0] <= 64 and len(seen) == 1

    # small K: all rows at once
    seen.clear()
    r = poisson_thinning_test(rng, 3.0 / psi.sum(), psi.sum(), table, psi, zero)
    assert len(seen) <= 1 and r.data_used == r.n_poisson

    # Psi = 0 (e.g. SMH-2 with a Normal likelihood): accept without a table
    r = poisson_thinning_test(rng, 1.0, 0.0, None, np.zeros(5), zero)
    assert r.accept and r.n_poisson == 0 and r.data_used == 0
    r = smh_test(rng, 0.0, 1.0, 0.0, None, np.zeros(5), zero, lambda: 0.0)
    assert r.accept and not r.fallback and r.data_used == 0


def test_bound_violation_raises():
    psi = np.array([1.0, 2.0, 0.0, 3.0])
    table = AliasTable(psi)
    rng = np.random.default_rng(13)
    with pytest.raises(BoundViolationError, match="invalid") as info:
        poisson_thinning_test(rng, 5.0, psi.sum(), table, psi, lambda rows: 2.0 * 5.0 * psi[rows])
    err = info.value
    assert isinstance(err, ValueError)
    assert err.lam > err.bound == pytest.approx(5.0 * psi[err.row])
    assert f"row {err.row}" in str(err)
    # within the floating-point tolerance: no error
    r = poisson_thinning_test(
        rng, 5.0, psi.sum(), table, psi, lambda rows: 5.0 * psi[rows] * (1 + 1e-12)
    )
    assert not r.accept
    with pytest.raises(ValueError, match="NaN"):
        poisson_thinning_test(rng, 5.0, psi.sum(), table, psi, lambda rows: np.full(len(rows), np.nan))


def test_too_small_bounds_detected_in_logistic_model():
    """Bounds 100x too small for a real model are caught, not silently used."""
    model = _logistic_problem()
    k = 1
    psi = glm_row_bounds(model.X, "logistic", k) / 100.0
    table = AliasTable(psi)
    rng = np.random.default_rng(14)
    a = model.theta_hat + 3.0 * model.chol_cov @ rng.normal(size=3)
    b = model.theta_hat + 3.0 * model.chol_cov @ rng.normal(size=3)
    lam = model.lam(a, b, k)
    phi = taylor_phi(a, b, model.theta_hat, k)
    assert phi * psi.sum() > 5 and np.mean(lam > phi * psi) > 0.2
    with pytest.raises(BoundViolationError):
        for _ in range(20):
            smh_test(rng, 0.0, phi, psi.sum(), table, psi, lam.__getitem__, lambda: 0.0)


# ---------------------------------------------------------------------------------------
# Bounds
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "family, params",
    [
        ("bernoulli_logit", {}),
        ("student_t", {"nu": 1.0, "sigma": 0.7}),
        ("student_t", {"nu": 4.0, "sigma": 2.0}),
        ("normal", {"sigma": 0.8}),
    ],
)
@pytest.mark.parametrize("k", [1, 2])
def test_bounds_never_violated(family, params, k):
    """lambda_i(theta, theta') <= phi * psi_i for random pairs around theta_hat."""
    rng = np.random.default_rng([zlib.crc32(family.encode()), k, *map(int, params.values())])
    n, p = 150, 3
    X = rng.normal(size=(n, p)) * rng.choice([0.2, 1.0, 3.0], size=(n, 1))
    beta = rng.normal(size=p + 1)
    eta = np.column_stack([np.ones(n), X]) @ beta
    if family == "bernoulli_logit":
        parts = (_logit_f, _logit_f1, _logit_f2)
        y = np.where(rng.random(n) < 1 / (1 + np.exp(-eta)), 1.0, -1.0)
    elif family == "student_t":
        parts = _t_parts(**params)
        y = eta + params["sigma"] * rng.standard_t(params["nu"], size=n)
    else:
        parts = _normal_parts(**params)
        y = eta + params["sigma"] * rng.normal(size=n)
    model = GLM(X, y, parts)
    model.set_mode(beta + 0.05 * rng.normal(size=p + 1))
    psi = glm_row_bounds(X, family, k, intercept=True, **params)
    n_pairs = 1500
    scales = np.array([1e-3, 0.03, 0.3, 1.0, 3.0])[rng.integers(0, 5, size=(n_pairs, 1))]
    a = model.theta_hat + scales * rng.normal(size=(n_pairs, p + 1))
    b = model.theta_hat + scales * rng.normal(size=(n_pairs, p + 1))
    lam = model.lam(a, b, k)  # (n_pairs, n)
    phi = np.array([taylor_phi(ai, bi, model.theta_hat, k) for ai, bi in zip(a, b)])
    bound = phi[:, None] * psi[None, :]
    # rounding slack: lambda is a difference of O(|U_i|) numbers
    slack = 1e-12 * (1.0 + np.abs(model.U(a)) + np.abs(model.U(b)))
    assert np.all(lam <= bound * (1 + 1e-9) + slack)
    if family != "normal" or k == 1:
        ratio = lam / np.where(bound > 0, bound, np.inf)
        assert 0.0 < ratio.max() <= 1.0 + 1e-9
        print(family, params, k, "max lambda / bound:", ratio.max())


def _numeric_sup(d1, lo, hi, h):
    """sup |d^m f| for m = 2, 3 from a first derivative d1, by central differences."""

    def d2(x):
        return (d1(x + h) - d1(x - h)) / (2 * h)

    def d3(x):
        return (d1(x + h) - 2 * d1(x) + d1(x - h)) / h**2

    out = []
    for g in (d2, d3):
        grid = np.linspace(lo, hi, 40_001)
        v = np.abs(g(grid))
        x0 = grid[np.argmax(v)]
        dx = grid[1] - grid[0]
        res = optimize.minimize_scalar(
            lambda x: -abs(g(x)), bounds=(x0 - 2 * dx, x0 + 2 * dx), method="bounded",
            options={"xatol": 1e-12},
        )
        out.append(max(v.max(), -res.fun))
    return out


@pytest.mark.parametrize("nu", [0.5, 1.0, 3.0, 10.0, 50.0])
@pytest.mark.parametrize("sigma", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("y", [0.0, -3.7])
def test_student_t_sup_constants_numerically(nu, sigma, y):
    a, c = 0.5 * (nu + 1), nu * sigma**2

    def f1(eta):  # first eta-derivative of a * log(1 + (y - eta)^2 / c)
        r = y - eta
        return -2 * a * r / (c + r * r)

    s = math.sqrt(c)
    sup2, sup3 = _numeric_sup(f1, y - 30 * s, y + 30 * s, 1e-3 * s)
    assert glm_sup_derivative("student_t", 2, nu=nu, sigma=sigma) == pytest.approx(sup2, rel=1e-5)
    assert glm_sup_derivative("student_t", 3, nu=nu, sigma=sigma) == pytest.approx(sup3, rel=1e-5)


def test_logistic_and_normal_sup_constants_numerically():
    for y in (-1.0, 1.0):
        sup2, sup3 = _numeric_sup(lambda e: _logit_f1(e, y), -30, 30, 1e-3)
        assert glm_sup_derivative("bernoulli_logit", 2) == pytest.approx(sup2, rel=1e-5)
        assert glm_sup_derivative("logistic", 3) == pytest.approx(sup3, rel=1e-5)
    assert glm_sup_derivative("logistic", 2) == 0.25
    assert glm_sup_derivative("logistic", 3) == pytest.approx(1 / (6 * math.sqrt(3)))
    assert glm_sup_derivative("normal", 2, sigma=2.0) == 0.25
    assert glm_sup_derivative("gaussian", 3, sigma=2.0) == 0.0


def test_bound_helpers():
    X = np.array([[0.5, -0.2], [3.0, 1.0], [-0.1, 0.0]])
    np.testing.assert_allclose(row_max_abs(X, intercept=True), [1.0, 3.0, 1.0])
    np.testing.assert_allclose(row_max_abs(X, intercept=False), [0.5, 3.0, 0.1])
    np.testing.assert_allclose(row_max_abs(X[:, 0], intercept=False), [0.5, 3.0, 0.1])
    np.testing.assert_allclose(row_max_abs(np.empty((2, 0)), intercept=True), [1.0, 1.0])
    M = np.array([1.0, 2.0])
    C = 1 / (6 * math.sqrt(3))
    np.testing.assert_allclose(glm_bound_constants("logit", M, 2), C * M**3)
    np.testing.assert_allclose(
        glm_bound_constants("logit", M, 1, scale=[2.0, -1.0], weights=[1.0, 3.0]),
        [0.25 * 4.0, 3 * 0.25 * 4.0],
    )
    np.testing.assert_allclose(glm_bound_constants(0.5, M, 1), 0.5 * M**2)
    t = glm_bound_constants("student_t", M, 1, nu=3.0, sigma=2.0)
    np.testing.assert_allclose(t, (4.0 / 12.0) * M**2)
    np.testing.assert_array_equal(glm_bound_constants("normal", M, 2, sigma=1.0), 0.0)
    with pytest.raises(ValueError, match="Poisson"):
        glm_bound_constants("poisson", M, 1)
    with pytest.raises(ValueError, match="Unknown"):
        glm_bound_constants("gamma", M, 1)
    with pytest.raises(TypeError, match="missing"):
        glm_bound_constants("student_t", M, 1, nu=3.0)
    with pytest.raises(ValueError, match="> 0"):
        glm_bound_constants("normal", M, 1, sigma=0.0)
    with pytest.raises(ValueError, match="order"):
        glm_bound_constants("normal", M, 3, sigma=1.0)
    with pytest.raises(ValueError, match="finite"):
        row_max_abs(np.array([[1.0, np.nan]]), intercept=False)


def test_glm_row_bounds_chunked_memmap(tmp_path):
    rng = np.random.default_rng(15)
    X = rng.normal(size=(1000, 3)) * 2
    mm = np.memmap(tmp_path / "X.dat", dtype=np.float32, mode="w+", shape=X.shape)
    mm[:] = X
    mm.flush()
    ro = np.memmap(tmp_path / "X.dat", dtype=np.float32, mode="r", shape=X.shape)
    w = rng.random(1000)
    got = glm_row_bounds(ro, "student_t", 2, chunk_rows=128, weights=w, nu=4.0, sigma=1.5)
    M = np.maximum(np.abs(X.astype(np.float32)).max(axis=1), 1.0)
    want = glm_bound_constants("student_t", M, 2, weights=w, nu=4.0, sigma=1.5)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert got.dtype == np.float64


# ---------------------------------------------------------------------------------------
# Layering
# ---------------------------------------------------------------------------------------


def test_kernels_import_neither_pymc_nor_pytensor():
    names = ("sampling.alias", "scalable.thinning", "scalable.smh", "scalable.bounds",
             "scalable.phi", "scalable.region", "scalable.interval",
             "variance.gradient_estimators", "sgld")
    for name in (n.replace(".", "/") + ".py" for n in names):
        tree = ast.parse((KERNELS / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""]
            else:
                continue
            for mod in mods:
                assert mod.split(".")[0] not in ("pymc", "pytensor", "arviz"), (name, mod)
    # the kernels folder loaded as a stand-alone package (relative imports between kernels)
    code = (
        "import importlib, importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('kernels', r'{KERNELS}/__init__.py', "
        f"submodule_search_locations=[r'{KERNELS}'])\n"
        "pkg = importlib.util.module_from_spec(spec); sys.modules['kernels'] = pkg\n"
        "spec.loader.exec_module(pkg)\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module('kernels.' + name)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pymc', 'pytensor')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    # and through the package (its __init__ is lazy)
    code = (
        "import sys, pymc_subsample.kernels.scalable.smh, pymc_subsample.kernels.scalable.bounds\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pymc', 'pytensor')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=KERNELS.parents[1])


# ---------------------------------------------------------------------------------------
# End to end: a small SMH chain targets the exact posterior
# ---------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("k", [1, 2])
def test_smh_chain_targets_posterior(k):
    """1-D logistic regression, prior N(0, 3^2): SMH-k posterior mean/var vs quadrature."""
    rng = np.random.default_rng(16)
    n = 60
    x = rng.normal(size=n)
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-0.8 * x)), 1.0, -1.0)
    model = GLM(x[:, None], y, (_logit_f, _logit_f1, _logit_f2), intercept=False)

    def U0(t):
        return 0.5 * t * t / 9.0

    grid = np.linspace(-6, 6, 20_001)
    logpost = -(model.U(grid[:, None]).sum(axis=1) + U0(grid))
    dens = np.exp(logpost - logpost.max())
    dens /= dens.sum()
    mean = (grid * dens).sum()
    var = ((grid - mean) ** 2 * dens).sum()

    theta_hat = np.array([mean + 0.1 * math.sqrt(var)])  # near, not at, the mode
    model.set_mode(theta_hat)
    psi = glm_row_bounds(x[:, None], "logistic", k, intercept=False)
    table = AliasTable(psi)
    psi_total = psi.sum()
    step = 1.5 * math.sqrt(var)

    n_steps = 40_000
    th = theta_hat.copy()
    out = np.empty(n_steps)
    acc = used = 0
    for i in range(n_steps):
        prop = th + step * rng.normal(size=1)
        first = (U0(th[0]) + model.Uhat_total(th, k)) - (U0(prop[0]) + model.Uhat_total(prop, k))
        phi = taylor_phi(th, prop, theta_hat, k)
        cur = th

        def rem(rows, cur=cur, prop=prop):
            return model.lam(cur, prop, k)[rows]

        def full(cur=cur, prop=prop):
            return float(-(model.U(prop).sum() + U0(prop[0])) + model.U(cur).sum() + U0(cur[0]))

        r = smh_test(rng, first, phi, psi_total, table, psi, rem, full)
        if r.accept:
            th = prop
            acc += 1
        used += r.data_used
        out[i] = th[0]
    # batch-means standard errors
    batches = out.reshape(100, -1)
    se_mean = batches.mean(axis=1).std(ddof=1) / 10
    se_var = ((batches - mean) ** 2).mean(axis=1).std(ddof=1) / 10
    assert abs(out.mean() - mean) < Z_TOL * se_mean
    assert abs(((out - mean) ** 2).mean() - var) < Z_TOL * se_var
    assert 0.2 < acc / n_steps < 0.9
    assert used / n_steps < n  # subsampling touched fewer rows than full MH


# ---------------------------------------------------------------------------------------
# the Poisson-estimator data test (MH-SS) and the whitened phi
# ---------------------------------------------------------------------------------------


def _estimator_accept_rate(dif, psi, phi, reps, seed, broken=False):
    table = AliasTable(psi)
    rng = np.random.default_rng(seed)
    acc = 0
    for _ in range(reps):
        if broken:  # a wrong kernel: f' = b - |D| (drops the gain of falling rows)
            res = poisson_estimator_test(rng, phi, psi.sum(), table, psi,
                                         lambda rows: np.abs(dif[rows]))
        else:
            res = poisson_estimator_test(rng, phi, psi.sum(), table, psi,
                                         lambda rows: dif[rows])
        acc += res.accept
    return acc / reps


@pytest.mark.parametrize("broken", [False, True])
def test_poisson_estimator_satisfies_detailed_balance(broken):
    """P(accept | D) / P(accept | -D) = exp(-sum D): the data factor is reversible (the
    reverse move flips every remainder difference). Checked within 4.5 Monte Carlo
    standard errors; a kernel that ignores the sign of D fails the same check."""
    rng = np.random.default_rng(0)
    psi = rng.uniform(0.5, 2.0, 20)
    dif = rng.uniform(-1.0, 1.0, 20) * psi
    dif *= 0.6 / dif.sum()  # sum D = 0.6: acceptance ratio exp(-0.6)
    phi = 1.2 * float(np.max(np.abs(dif) / psi))  # about 8 rows per test
    assert np.all(np.abs(dif) <= phi * psi)
    reps = 30_000
    p_f = _estimator_accept_rate(dif, psi, phi, reps, 1, broken)
    p_b = _estimator_accept_rate(-dif, psi, phi, reps, 2, broken)
    ratio = p_f / p_b
    se = ratio * math.sqrt((1 - p_f) / (p_f * reps) + (1 - p_b) / (p_b * reps))
    z = (ratio - math.exp(-dif.sum())) / se
    if broken:
        assert abs(z) > 4.5, (ratio, z)
    else:
        assert abs(z) < 4.5, (ratio, math.exp(-dif.sum()), z)


def test_poisson_estimator_checks_the_bound():
    psi = np.ones(5)
    table = AliasTable(psi)
    with pytest.raises(BoundViolationError):
        poisson_estimator_test(np.random.default_rng(0), 1.0, 5.0, table, psi,
                               lambda rows: np.full(rows.size, -2.0))
    res = poisson_estimator_test(np.random.default_rng(0), 0.0, 5.0, table, psi,
                                 lambda rows: np.zeros(rows.size))
    assert res.accept and res.data_used == 0


def test_whitened_phi_bounds_the_cubic_difference_sharply():
    """phi >= |(x.z')^3 - (x.z)^3| / 6 for every unit x (random and worst directions),
    phi is symmetric, and it is within 6% of the true supremum (not loose)."""
    rng = np.random.default_rng(5)
    for _ in range(200):
        d = int(rng.integers(1, 12))
        z, zp = rng.standard_normal(d), rng.standard_normal(d)
        for k in (1, 2):
            phi = whitened_phi(z, zp, k)
            assert phi == whitened_phi(zp, z, k)
            x = rng.standard_normal((4000, d))
            x /= np.linalg.norm(x, axis=1)[:, None]
            e, ep = x @ z, x @ zp
            g = np.abs(ep**3 - e**3) / 6 if k == 2 else np.abs(ep * np.abs(ep) - e * np.abs(e)) / 2
            assert g.max() <= phi * (1 + 1e-12)
            # the supremum lies in the plane of z, z': a fine scan there
            u1 = z / np.linalg.norm(z)
            w = zp - (zp @ u1) * u1
            u2 = w / np.linalg.norm(w) if np.linalg.norm(w) > 1e-12 else 0.0 * u1
            t = np.linspace(0, np.pi, 200_001)
            xs = np.outer(np.cos(t), u1) + np.outer(np.sin(t), u2)
            e, ep = xs @ z, xs @ zp
            g = np.abs(ep**3 - e**3) / 6 if k == 2 else np.abs(ep * np.abs(ep) - e * np.abs(e)) / 2
            assert g.max() <= phi * (1 + 1e-12) and phi <= 1.06 * g.max() + 1e-12


def _two_param_row(p, c, z, order):
    """``R(z)``: remainder of the order-k Taylor expansion about 0 of
    ``h(p.z, c.z)``, ``h(e, s) = sin(e + s/2) + 0.3 cos(e - s)``."""
    e, s = z @ p, z @ c
    h = np.sin(e + s / 2) + 0.3 * np.cos(e - s)
    # derivatives of h at (0, 0): value 0.3, gradient (1, 1/2), Hessian of 0.3 cos(e - s)
    taylor = 0.3 + e + s / 2
    if order == 2:
        taylor = taylor - 0.15 * (e - s) ** 2
    return h - taylor


def test_path_phi_bounds_two_parameter_remainders():
    """``|R(z') - R(z)| <= M phi`` for rows depending on z through two directions, with
    ``M`` from the partials' suprema (``G_j = 2^(j-m) + 0.3``); symmetric; not vacuous;
    and a third of it is violated (the check has power)."""
    from pymc_subsample.kernels.scalable.phi import path_phi
    from pymc_subsample.kernels.scalable.region import path_constant

    rng = np.random.default_rng(8)
    worst, broken = 0.0, 0
    for _ in range(300):
        d = int(rng.integers(1, 8))
        P, C = rng.standard_normal((40, d)), rng.standard_normal((40, d)) * rng.uniform(0, 1)
        scale = rng.choice([0.1, 0.5, 1.0, 2.0])
        z, zp = scale * rng.standard_normal(d), scale * rng.standard_normal(d)
        if rng.random() < 0.5:  # short moves as well as independent points
            zp = z + 0.1 * scale * rng.standard_normal(d)
        for k in (1, 2):
            m = k + 1
            G = np.tile([0.5 ** (m - j) + 0.3 for j in range(m + 1)], (40, 1))
            M = path_constant(G, np.linalg.norm(P, axis=1), np.linalg.norm(C, axis=1))
            phi = path_phi(z, zp, k)
            assert phi == path_phi(zp, z, k)
            diff = np.abs([_two_param_row(P[i], C[i], zp, k) - _two_param_row(P[i], C[i], z, k)
                           for i in range(40)])
            assert np.all(diff <= M * phi * (1 + 1e-9) + 1e-12)
            worst = max(worst, float(np.max(diff / (M * phi))))
            broken += int(np.any(diff > M * phi / 3))
    assert worst > 0.05 and broken > 0


def test_path_phi_forms():
    """k = 2: the segment integral ``||d|| (||z||^2 + z.d + ||d||^2/3) / 2`` or the sum of
    the two remainders' bounds, whichever is smaller; zero at the centre."""
    from pymc_subsample.kernels.scalable.phi import path_phi

    z, zp = np.array([1.0, 0.0]), np.array([1.1, 0.0])
    assert path_phi(z, zp, 2) == pytest.approx(0.1 * (1 + 0.1 + 0.01 / 3) / 2)
    z, zp = np.array([1.0, 0.0]), np.array([-1.0, 0.0])
    assert path_phi(z, zp, 2) == pytest.approx(2.0 / 6.0)
    assert path_phi(np.zeros(3), np.zeros(3), 1) == 0.0
    with pytest.raises(ValueError, match="orders 1 and 2"):
        path_phi(z, zp, 3)


def test_repeated_rows_are_read_once_and_keep_their_values():
    """When the Poisson count exceeds the rows (rate near N), each distinct row is read
    once and every draw of it sees that row's value: the outcome equals an evaluation row
    by row."""
    psi = np.array([1.0, 2.0, 3.0])
    table = AliasTable(psi)
    lam_row = np.array([0.0, 0.0, 0.001])
    calls = []

    def fn(rows):
        calls.append(np.array(rows))
        return lam_row[rows]

    for seed in range(20):
        calls.clear()
        r = poisson_thinning_test(np.random.default_rng(seed), 5.0, psi.sum(), table, psi, fn)
        assert r.data_used == sum(len(c) for c in calls) <= 3
        assert all(len(np.unique(c)) == len(c) for c in calls)
        direct = poisson_thinning_test(
            np.random.default_rng(seed), 5.0, psi.sum(), table, psi,
            lambda rows: lam_row[np.asarray(rows)], chunk_size=1 << 20,
        )
        assert r.accept == direct.accept and r.n_poisson == direct.n_poisson
        calls.clear()
        r = poisson_estimator_test(np.random.default_rng(seed), 5.0, psi.sum(), table, psi, fn)
        assert r.data_used == len(calls[0]) <= 3


def test_bound_violation_survives_pickling():
    """pm.sample(cores>1) pickles a worker's exception to the parent: the error must
    arrive as itself, with its message and attributes (it used to raise a TypeError)."""
    import pickle

    err = BoundViolationError(3, 2.0, 0.5, 1.5)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is BoundViolationError
    assert str(back) == str(err)
    assert (back.row, back.lam, back.phi, back.psi, back.bound) == (3, 2.0, 0.5, 1.5, 0.75)
