"""Local derivative bounds over an interval of the linear predictor
(:mod:`pymc_subsample.kernels.scalable.region`): each supremum is checked against a dense grid
(it must be at least the grid's maximum, and at most slightly above it), and a
deliberately wrong supremum (the value at the interval's midpoint) is shown to be caught
by the same check."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import expit, log_ndtr

from pymc_subsample.kernels.scalable.region import local_sup


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
    if family == "bernoulli_probit":  # both responses: |f^(m)(eta)| = |g^(m)(+-eta)|
        def g(t):
            t = np.asarray(t, dtype=float)
            lam = np.exp(-0.5 * t * t - 0.5 * np.log(2 * np.pi) - log_ndtr(t))
            return -lam * (t + lam) if m == 2 else lam * (t + lam) * (t + 2 * lam) - lam
        return np.maximum(np.abs(g(eta)), np.abs(g(-eta)))
    raise AssertionError(family)


CASES = [
    ("bernoulli_logit", {}),
    ("student_t", {"nu": 4.0, "sigma": 1.5}),
    ("poisson_log", {}),
    ("bernoulli_probit", {}),
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
    tight = np.ones(lo.size, bool)
    if family == "bernoulli_probit":  # read at -8 below -8 (cancellation), see local_sup
        tight = (lo > -8) & (hi < 8)
    assert np.all(sup[tight] <= grid[tight] * (1 + 1e-3) + 1e-15)  # the supremum, not more


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


# ---------------------------------------------------------------------------------------
# two-parameter rows: every partial derivative against PyTensor's autodiff of pm.logp
# ---------------------------------------------------------------------------------------

TWO_PARAM = {
    "normal_scale": dict(nu=None),
    "student_t_scale": dict(nu=3.5),
    "gamma_log": dict(nu=None),
    "negbinomial_log": dict(nu=None),
}


def _autodiff_partials(family, m, nu=None):
    """Compiled ``(eta, s, y) -> [d^m l / d eta^j d s^(m-j) for j = 0..m]``, by PyTensor's
    autodiff of the row log density written out plainly (PyMC's own logp graphs carry
    parameter checks whose third derivatives take minutes to compile); the plain
    density is checked against ``pm.logp`` to rounding first."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    eta, s, y = pt.dvector("eta"), pt.dvector("s"), pt.dvector("y")
    if family == "normal_scale":
        dist = pm.Normal.dist(mu=eta, sigma=pt.exp(s))
        plain = -s - 0.5 * ((y - eta) * pt.exp(-s)) ** 2 - 0.5 * np.log(2 * np.pi)
    elif family == "student_t_scale":
        dist = pm.StudentT.dist(nu=nu, mu=eta, sigma=pt.exp(s))
        t = (y - eta) * pt.exp(-s)
        plain = (-s - (nu + 1) / 2 * pt.log1p(t**2 / nu) + pt.gammaln((nu + 1) / 2)
                 - pt.gammaln(nu / 2) - 0.5 * np.log(nu * np.pi))
    elif family == "gamma_log":
        a = pt.exp(s)
        dist = pm.Gamma.dist(alpha=a, beta=a / pt.exp(eta))
        plain = a * s - a * eta - pt.gammaln(a) + (a - 1) * pt.log(y) - a * y * pt.exp(-eta)
    else:
        a = pt.exp(s)
        dist = pm.NegativeBinomial.dist(mu=pt.exp(eta), alpha=a)
        plain = (pt.gammaln(y + a) - pt.gammaln(a) - pt.gammaln(y + 1) + a * s + y * eta
                 - (y + a) * pt.log(a + pt.exp(eta)))
    check = pytensor.function([eta, s, y], [pm.logp(dist, y), plain])
    rng = np.random.default_rng(0)
    e0, s0, y0 = _two_param_data(family, rng, 50)
    ref, mine = check(e0, s0, y0)
    np.testing.assert_allclose(mine, ref, rtol=1e-9, atol=1e-9)
    out = []
    for j in range(m + 1):
        d = plain
        for wrt in [eta] * j + [s] * (m - j):
            d = pytensor.grad(d.sum(), wrt)
        out.append(d)
    return pytensor.function([eta, s, y], out, on_unused_input="ignore")


def _two_param_data(family, rng, n):
    eta = rng.normal(0.5, 1.0, n)
    s = rng.normal(0.0, 1.0, n)
    if family in ("normal_scale", "student_t_scale"):
        y = eta + np.exp(s) * rng.standard_t(4, n)
    elif family == "gamma_log":
        y = rng.gamma(np.exp(s), np.exp(eta - s))
        y = np.maximum(y, 1e-3)
    else:
        y = rng.poisson(np.exp(eta) * rng.gamma(np.exp(s), np.exp(-s))).astype(float)
    return eta, s, y


@pytest.mark.parametrize("family", sorted(TWO_PARAM))
@pytest.mark.parametrize("m", [2, 3])
def test_local_sup2_contains_autodiff_partials(family, m):
    """A box of zero width returns |each partial| (to rounding); on boxes of random width
    every partial at random points inside stays below its supremum."""
    from pymc_subsample.kernels.scalable.region import local_sup2

    nu = TWO_PARAM[family]["nu"]
    f = _autodiff_partials(family, m, nu)
    rng = np.random.default_rng(11)
    eta, s, y = _two_param_data(family, rng, 300)
    exact = np.column_stack(f(eta, s, y))
    G = local_sup2(family, m, eta, eta, s, s, y=y, nu=nu)
    # both sides cancel large terms in the pure-s partials: agreement to ~1e-7 absolute
    np.testing.assert_allclose(G, np.abs(exact), rtol=1e-6, atol=2e-7)
    # boxes of width up to 0.3 in eta and in s
    we, ws = rng.uniform(0, 0.15, 300), rng.uniform(0, 0.15, 300)
    G = local_sup2(family, m, eta - we, eta + we, s - ws, s + ws, y=y, nu=nu)
    worst = 0.0
    for _ in range(30):
        e2 = eta + we * rng.uniform(-1, 1, 300)
        s2 = s + ws * rng.uniform(-1, 1, 300)
        vals = np.abs(np.column_stack(f(e2, s2, y)))
        worst = max(worst, float(np.max((vals - 2e-7) / np.maximum(G, 1e-300))))
    assert worst <= 1.0
    # the check has power: halving the supremum is caught at the box's centre
    with pytest.raises(AssertionError):
        np.testing.assert_array_less(np.abs(exact), 0.5 * local_sup2(
            family, m, eta, eta, s, s, y=y, nu=nu) + 1e-12)


def test_path_constant_bounds_the_derivative_form():
    """``|D^m l[v]^m| <= M`` for unit whitened directions ``v`` (random p, c, partials)."""
    from pymc_subsample.kernels.scalable.region import path_constant

    rng = np.random.default_rng(3)
    d, n, m = 6, 50, 3
    P, C = rng.normal(size=(n, d)), rng.normal(size=(n, d)) * 0.3
    G = np.abs(rng.normal(size=(n, m + 1)))
    M = path_constant(G, np.linalg.norm(P, axis=1), np.linalg.norm(C, axis=1))
    from math import comb
    for _ in range(200):
        v = rng.normal(size=d)
        v /= np.linalg.norm(v)
        pe, ps = P @ v, C @ v
        signs = rng.choice([-1.0, 1.0], size=(n, m + 1))
        form = sum(comb(m, j) * signs[:, j] * G[:, j] * pe**j * ps ** (m - j)
                   for j in range(m + 1))
        assert np.all(np.abs(form) <= M * (1 + 1e-12))


def test_interval_operations_contain_pointwise_results():
    """Every operation's interval contains the operation applied to members (random
    points of random intervals), and an empty interval or a bad argument is refused."""
    from scipy.special import log_expit, polygamma

    from pymc_subsample.kernels.scalable.interval import Interval

    rng = np.random.default_rng(9)
    n = 2000
    lo_a, lo_b = rng.normal(0, 2, n), rng.normal(0, 2, n)
    A = Interval(lo_a, lo_a + rng.exponential(1.0, n))
    B = Interval(lo_b, lo_b + rng.exponential(1.0, n))
    P = Interval(np.exp(lo_a) * 0.1 + 0.01, np.exp(lo_a) * 0.1 + 0.01 + rng.exponential(1.0, n))
    for _ in range(20):
        a = A.lo + (A.hi - A.lo) * rng.random(n)
        b = B.lo + (B.hi - B.lo) * rng.random(n)
        p = P.lo + (P.hi - P.lo) * rng.random(n)
        checks = [
            (A + B, a + b), (A - B, a - b), (A * B, a * b), (A / P, a / p), (2.0 - A, 2.0 - a),
            (A * 3.0, a * 3.0), (A**2, a**2), (A**3, a**3),
            (A.exp(), np.exp(a)), (P.log(), np.log(p)), (A.expit(), 1 / (1 + np.exp(-a))),
            (A.log_expit(), log_expit(a)), (P.polygamma(0), polygamma(0, p)),
            (P.polygamma(1), polygamma(1, p)), (P.polygamma(2), polygamma(2, p)),
            (np.full(n, 1.5) * A, 1.5 * a),
        ]
        for iv, val in checks:
            assert val in iv
    assert (A**2).lo.min() >= 0.0
    with pytest.raises(ValueError, match="lo must be <= hi"):
        Interval([1.0], [0.0])
    with pytest.raises(ValueError, match="positive"):
        A.log()
    with pytest.raises(ValueError, match="positive denominator"):
        A / B
