"""Enclosures of ordered-logistic rows' derivatives (pymc_subsample.kernels.scalable.ordered)
against dense grids and finite differences, including gaps near a = b."""

import math

import numpy as np
import pytest

from pymc_subsample.kernels.scalable.ordered import (
    compose, h_sup, ordered_constants, ordered_loglik, sp_sup)


def _sp_k(x, k):
    s = 1.0 / (1.0 + np.exp(-x))
    return [s, s * (1 - s), s * (1 - s) * (1 - 2 * s)][k - 1]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_sp_sup_matches_dense_grid(k):
    rng = np.random.default_rng(k)
    lo = rng.uniform(-6, 6, 300)
    hi = lo + rng.exponential(1.5, 300)
    grid = lo[:, None] + (hi - lo)[:, None] * np.linspace(0, 1, 4001)[None, :]
    exact = np.abs(_sp_k(grid, k)).max(axis=1)
    got = sp_sup(k, lo, hi)
    assert np.all(got >= exact * (1 - 1e-12))
    assert np.all(got <= exact * (1 + 1e-5) + 1e-15)  # sharp


def _h_k(d, k):
    h1 = 1.0 / (1.0 - np.exp(-d))
    h2 = -1.0 / (4.0 * np.sinh(d / 2) ** 2)
    h3 = np.cosh(d / 2) / (4 * np.sinh(d / 2) ** 3)
    return [h1, h2, h3][k - 1]


@pytest.mark.parametrize("k", [1, 2, 3])
def test_h_sup_and_derivatives(k):
    # the closed forms are the derivatives of log(expm1(d)): central differences
    d = np.array([1e-2, 0.1, 0.5, 2.0, 6.0])
    f = lambda x: np.log(np.expm1(x))  # noqa: E731
    hh = 1e-3 * d
    fd = [(f(d + hh) - f(d - hh)) / (2 * hh),
          (f(d + hh) - 2 * f(d) + f(d - hh)) / hh**2,
          (f(d + 2 * hh) - 2 * f(d + hh) + 2 * f(d - hh) - f(d - 2 * hh)) / (2 * hh**3)][k - 1]
    np.testing.assert_allclose(_h_k(d, k), fd, rtol=2e-3)
    # the supremum over [d_lo, inf) is at d_lo (a dense grid), infinite for d_lo <= 0
    lo = np.array([1e-4, 1e-3, 0.05, 0.7, 3.0])
    grid = lo[:, None] * np.exp(np.linspace(0, 5, 2001))[None, :]
    assert np.all(h_sup(k, lo) >= np.abs(_h_k(grid, k)).max(axis=1) * (1 - 1e-12))
    assert np.all(np.isinf(h_sup(k, np.array([0.0, -0.3]))))


def test_compose_zero_times_infinite_is_zero():
    out = compose(3, (np.inf, np.inf, np.inf), (0.0, 0.0, 0.0))
    assert out == 0.0


# --------------------------------------------------------------- whole rows, in q


def _setup(K, D, n, gap_scale, seed, sd=0.05):
    rng = np.random.default_rng(seed)
    d = D + K - 1
    X = rng.standard_normal((n, D))
    y = rng.integers(0, K, n)
    q_hat = np.concatenate([rng.normal(0, 0.5, D), [rng.normal(0, 1)],
                            np.log(gap_scale * rng.uniform(0.5, 2.0, K - 2))])
    A = rng.standard_normal((d, d))
    L = np.linalg.cholesky(sd**2 * (A @ A.T / d + 0.2 * np.eye(d)))
    return X, y, q_hat, L


def _cuts(q, D):
    qc = q[D:]
    return np.cumsum(np.concatenate([qc[:1], np.exp(qc[1:])]))


def _row_ll(X, y, q, D):
    return ordered_loglik("logit", y, X @ q[:D], _cuts(q, D))


def _constants(X, y, q_hat, L, order, radius, D, K):
    d = q_hat.size
    # the ordered transform: c = P q + B exp(q_S), S = the last K - 2 coordinates
    P = np.zeros((K - 1, d))
    P[:, D] = 1.0
    B = np.tril(np.ones((K - 1, K - 1)))[:, 1:]
    S = np.arange(D + 1, d)
    c_hat = _cuts(q_hat, D)
    J = np.zeros((len(y), d))
    J[:, :D] = X
    return ordered_constants("logit", order, y, X @ q_hat[:D], J @ L, c_hat, P, B,
                             q_hat[S], S, L, radius)


def _directional(f, m, h):
    """m-th derivative of a scalar function of t at 0 (central differences, O(h^2))."""
    if m == 2:
        return (f(h) - 2 * f(0.0) + f(-h)) / h**2
    return (f(2 * h) - 2 * f(h) + 2 * f(-h) - f(-2 * h)) / (2 * h**3)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("gap", [1.0, 1e-3])  # 1e-3: a nearly equal to b
def test_constants_bound_directional_derivatives(order, gap):
    K, D, n, R = 5, 2, 200, 3.0
    X, y, q_hat, L = _setup(K, D, n, gap, seed=order + int(gap * 10))
    if gap < 0.1:
        y[: n // 2] = 1  # middle rows, whose gap is the singular one
    M = _constants(X, y, q_hat, L, order, R, D, K)
    assert np.all(np.isfinite(M)) and np.all(M >= 0)
    rng = np.random.default_rng(11)
    worst = np.zeros(n)
    h = 2e-3
    for _ in range(60):
        z = rng.standard_normal(q_hat.size)
        z *= rng.uniform(0, R - 4 * h) / np.linalg.norm(z)
        u = rng.standard_normal(q_hat.size)
        u /= np.linalg.norm(u)
        f = lambda t: _row_ll(X, y, q_hat + L @ (z + t * u), D)  # noqa: E731
        der = np.abs(_directional(f, order + 1, h))
        worst = np.maximum(worst, der)
    assert np.all(worst <= M * (1 + 1e-2) + 1e-9), np.max(worst / M)
    # not vacuous: the bound is within a modest factor for some rows
    assert np.max(worst / M) > 0.05


def test_affine_cutpoints_whose_gap_may_vanish_give_inf():
    # cutpoints affine in q (no transform): the ball reaches c_1 = c_0 for a small gap
    K, D, n = 3, 1, 4
    d = D + K - 1
    L = 0.2 * np.eye(d)
    P = np.zeros((K - 1, d))
    P[0, 1], P[1, 2] = 1.0, 1.0
    c_hat = np.array([0.0, 0.3])
    y = np.array([0, 1, 1, 2])
    X = np.ones((n, 1))
    M = ordered_constants("logit", 2, y, np.zeros(n), X @ L[:1], c_hat, P,
                          np.zeros((K - 1, 0)), np.zeros(0), np.zeros(0, int), L, 3.0)
    assert np.isinf(M[1]) and np.isinf(M[2])  # middle rows: the gap 0.3 - 0.85 R < 0
    assert np.all(np.isfinite(M[[0, 3]]))  # end rows have no gap term
    M_far = ordered_constants("logit", 2, y, np.zeros(n), X @ L[:1], np.array([0.0, 3.0]),
                              P, np.zeros((K - 1, 0)), np.zeros(0), np.zeros(0, int), L, 3.0)
    assert np.all(np.isfinite(M_far))


def test_loglik_sums_to_one_and_validation():
    eta = np.linspace(-3, 3, 7)
    cuts = np.array([-1.0, 0.0, 2.0])
    tot = sum(np.exp(ordered_loglik("logit", np.full(7, k), eta, cuts)) for k in range(4))
    np.testing.assert_allclose(tot, 1.0, rtol=1e-12)
    with pytest.raises(ValueError, match="link"):
        ordered_loglik("cauchit", np.zeros(7, int), eta, cuts)
    with pytest.raises(ValueError, match="categories"):
        ordered_constants("logit", 2, np.array([5]), np.zeros(1), np.zeros((1, 2)),
                          cuts, np.zeros((3, 2)), np.zeros((3, 0)), np.zeros(0),
                          np.zeros(0, int), np.eye(2), 1.0)
    with pytest.raises(ValueError, match="order"):
        ordered_constants("logit", 3, np.array([1]), np.zeros(1), np.zeros((1, 2)),
                          cuts, np.zeros((3, 2)), np.zeros((3, 0)), np.zeros(0),
                          np.zeros(0, int), np.eye(2), 1.0)


# --------------------------------------------------------------- ordered probit


def _probit_mid_partials(a, b):
    """Exact partials of log(Phi(a) - Phi(b)) by the closed forms (checked against
    finite differences below)."""
    from scipy.stats import norm
    D = norm.cdf(a) - norm.cdf(b)
    r, s = norm.pdf(a) / D, norm.pdf(b) / D
    return {"a": r, "b": -s, "aa": -a * r - r**2, "ab": r * s, "bb": b * s - s**2,
            "aaa": r * (a**2 - 1) + 3 * a * r**2 + 2 * r**3, "aab": -a * r * s - 2 * r**2 * s,
            "abb": 2 * r * s**2 - b * r * s, "bbb": s * (1 - b**2) + 3 * b * s**2 - 2 * s**3}


def test_probit_closed_form_partials_match_finite_differences():
    from scipy.stats import norm
    f = lambda a, b: np.log(norm.cdf(a) - norm.cdf(b))  # noqa: E731
    a, b, h = np.array([0.7, 2.0, -0.5]), np.array([-0.4, 1.2, -2.5]), 1e-3
    P = _probit_mid_partials(a, b)
    fa = lambda a, b: (f(a + h, b) - f(a - h, b)) / (2 * h)  # noqa: E731
    fb = lambda a, b: (f(a, b + h) - f(a, b - h)) / (2 * h)  # noqa: E731
    np.testing.assert_allclose(fa(a, b), P["a"], rtol=1e-5)
    np.testing.assert_allclose(fb(a, b), P["b"], rtol=1e-5)
    pa = lambda k: lambda a, b: _probit_mid_partials(a, b)[k]  # noqa: E731
    for k in ("a", "b", "aa", "ab", "bb"):
        np.testing.assert_allclose((pa(k)(a + h, b) - pa(k)(a - h, b)) / (2 * h),
                                   P[{"a": "aa", "b": "ab", "aa": "aaa", "ab": "aab",
                                      "bb": "abb"}[k]], rtol=1e-4)
        if k == "bb":
            np.testing.assert_allclose((pa(k)(a, b + h) - pa(k)(a, b - h)) / (2 * h),
                                       P["bbb"], rtol=1e-4)


@pytest.mark.parametrize("gap", [2.0, 0.3, 0.02])
def test_probit_box_partials_enclose_dense_grid(gap):
    from pymc_subsample.kernels.scalable.ordered import probit_partials
    from pymc_subsample.kernels.scalable.interval import Interval
    rng = np.random.default_rng(int(gap * 100))
    n = 40
    b0 = rng.uniform(-4, 3, n)
    a0 = b0 + gap * rng.uniform(1.0, 2.0, n)
    w = 0.3 * gap * rng.uniform(0.1, 1.0, n)
    d_lo = np.maximum(a0 - b0 - 2 * w, 1e-12)
    G = probit_partials(Interval(a0 - w, a0 + w), Interval(b0 - w, b0 + w), d_lo)
    t = np.linspace(-1, 1, 41)
    A = a0[:, None, None] + w[:, None, None] * t[None, :, None]
    B = b0[:, None, None] + w[:, None, None] * t[None, None, :]
    P = _probit_mid_partials(A, B)
    for k, v in P.items():
        exact = np.nanmax(np.abs(v).reshape(n, -1), axis=1)
        assert np.all(G[k] >= exact * (1 - 1e-9)), k
    # a gap that may close: infinite
    G0 = probit_partials(Interval(np.zeros(1), np.ones(1)), Interval(np.zeros(1), np.ones(1)),
                         np.zeros(1))
    assert all(np.isinf(v[0]) for v in G0.values())


@pytest.mark.parametrize("order", [1, 2])
def test_probit_constants_bound_directional_derivatives(order):
    K, D, n, R = 5, 2, 200, 3.0
    X, y, q_hat, L = _setup(K, D, n, 1.0, seed=20 + order)
    d = q_hat.size
    P = np.zeros((K - 1, d))
    P[:, D] = 1.0
    Bm = np.tril(np.ones((K - 1, K - 1)))[:, 1:]
    S = np.arange(D + 1, d)
    J = np.zeros((n, d))
    J[:, :D] = X
    M = ordered_constants("probit", order, y, X @ q_hat[:D], J @ L, _cuts(q_hat, D), P, Bm,
                          q_hat[S], S, L, R)
    assert np.all(np.isfinite(M))
    rng = np.random.default_rng(12)
    worst = np.zeros(n)
    h = 2e-3
    for _ in range(60):
        z = rng.standard_normal(d)
        z *= rng.uniform(0, R - 4 * h) / np.linalg.norm(z)
        u = rng.standard_normal(d)
        u /= np.linalg.norm(u)
        f = lambda t: ordered_loglik("probit", y, X @ (q_hat + L @ (z + t * u))[:D],  # noqa: E731
                                     _cuts(q_hat + L @ (z + t * u), D))
        worst = np.maximum(worst, np.abs(_directional(f, order + 1, h)))
    assert np.all(worst <= M * (1 + 1e-2) + 1e-9), np.max(worst / M)
    assert np.max(worst / M) > 0.02
