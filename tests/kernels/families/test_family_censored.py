"""The bounds of the censored Normal families (``censored_normal``: sigma fixed;
``censored_normal_scale``: sigma sampled), checked on dense grids.

References: ``g = log Phi`` and its derivatives from a form that stays accurate in the
left tail (the continued fraction of the Mills ratio, :func:`_logphi_ref`), itself checked
against PyTensor's autodiff of ``log Phi`` and against the closed forms where both are
accurate; the two-parameter partials against the chain rule written out in the test with that reference, itself checked
against finite differences of SciPy's row log density.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from scipy.special import log_ndtr

from pymc_subsample.kernels import families
from pymc_subsample.kernels.families import PROBIT_PEAK3, get_family
from pymc_subsample.kernels.families.partials import _PROBIT_SUP3, _logphi_enclosure
from pymc_subsample.kernels.scalable.interval import Interval
from pymc_subsample.kernels.scalable.region import local_sup, local_sup2

SIGMAS = (0.4, 1.0, 2.5)


# ------------------------------------------------------------------ reference for log Phi
def _cf(x, terms=400):
    """``(C1, C2, C3)`` of the continued fraction ``C_k = x + (k + 1) / C_(k+1)``
    (``x > 0``), evaluated backwards from ``C_(terms+1) = x``: the Mills ratio
    ``(1 - Phi(x)) / phi(x)`` is ``1 / (x + 1 / C1)`` (Laplace's continued fraction)."""
    c = [np.array(x, dtype=np.float64, copy=True)]
    for k in range(terms, 0, -1):
        c.insert(0, x + (k + 1.0) / c[0])
        del c[3:]
    return c[0], c[1], c[2]


def _logphi_ref(t):
    """``(g', g'', g''')`` of ``g = log Phi`` at ``t``. For ``t < -5`` (``x = -t``): with
    ``u = t + lambda = 1 / C1`` and ``lambda = x + u``, ``g'' = -lambda u`` and
    ``g''' = 2 lambda (C2 - C1) / (C1^2 C2)`` with ``C2 - C1 = 3 / C3 - 2 / C2`` (no
    cancellation of leading terms); else the closed forms ``lambda = phi / Phi``,
    ``g'' = -lambda (t + lambda)``, ``g''' = lambda (t + lambda)(t + 2 lambda) - lambda``."""
    t = np.asarray(t, dtype=np.float64)
    out = [np.empty_like(t) for _ in range(3)]
    left = t < -5.0
    x = -t[left]
    c1, c2, c3 = _cf(x)
    u = 1.0 / c1
    lam = x + u
    out[0][left], out[1][left] = lam, -lam * u
    out[2][left] = 2.0 * lam * (3.0 / c3 - 2.0 / c2) / (c1 * c1 * c2)
    tr = t[~left]
    lam = np.exp(stats.norm.logpdf(tr) - log_ndtr(tr))
    out[0][~left] = lam
    out[1][~left] = -lam * (tr + lam)
    out[2][~left] = lam * (tr + lam) * (tr + 2.0 * lam) - lam
    return out


def test_logphi_reference_matches_autodiff_and_closed_forms():
    import pytensor
    import pytensor.tensor as pt

    tv = pt.dvector("t")
    g = pt.log(0.5 * pt.erfc(-tv / np.sqrt(2.0)))
    ds, d = [], g
    for _ in range(3):
        d = pytensor.grad(d.sum(), tv)
        ds.append(d)
    fn = pytensor.function([tv], ds, mode="FAST_COMPILE")
    t = np.linspace(-5.0, 6.0, 221)
    for got, ref in zip(_logphi_ref(t), fn(t)):
        np.testing.assert_allclose(got, ref, rtol=1e-8, atol=1e-12)
    # where the continued fraction takes over, the closed forms are still accurate
    t = np.linspace(-8.0, -5.0001, 60)
    lam = np.exp(stats.norm.logpdf(t) - log_ndtr(t))
    closed = (lam, -lam * (t + lam), lam * (t + lam) * (t + 2.0 * lam) - lam)
    for got, ref in zip(_logphi_ref(t), closed):
        np.testing.assert_allclose(got, ref, rtol=1e-8)


def test_logphi_shapes_the_bounds_rest_on():
    """On a fine grid: ``g' > 0`` decreases, ``g''`` increases in ``(-1, 0)``, ``g''' > 0``
    rises up to ``t*`` and falls after it, with its maximum the constant used."""
    t = np.concatenate([np.linspace(-200.0, -10.0, 4000), np.linspace(-10.0, 37.0, 200_001)])
    g1, g2, g3 = _logphi_ref(t)
    assert np.all(g1 > 0) and np.all(np.diff(g1) <= 0)
    assert np.all((g2 > -1) & (g2 < 0)) and np.all(np.diff(g2) >= 0)
    assert np.all(g3[t < 37.0] > 0)
    rise, fall = t <= PROBIT_PEAK3, t >= PROBIT_PEAK3
    assert np.all(np.diff(g3[rise]) >= 0) and np.all(np.diff(g3[fall]) <= 0)
    assert g3.max() <= _PROBIT_SUP3 <= g3.max() * (1 + 2e-6)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_logphi_enclosure_contains_the_function_on_dense_grids(k):
    """Random intervals of ``t`` (widths 1e-4 to 10, both tails): every grid value lies in
    the enclosure, and the enclosure's far end is the range's to 1e-6 (outside the left
    tail below -8, where ``g''`` and ``g'''`` are read at -8)."""
    rng = np.random.default_rng(k)
    n = 400
    centre = np.concatenate([rng.uniform(-60.0, 30.0, n), rng.uniform(-3.0, 4.0, n)])
    width = 10.0 ** rng.uniform(-4.0, 1.0, centre.size)
    tl, th = centre - width / 2, centre + width / 2
    lo, hi = _logphi_enclosure(k, tl, th)
    grid = tl[:, None] + (th - tl)[:, None] * np.linspace(0.0, 1.0, 401)[None, :]
    vals = _logphi_ref(grid.ravel())[k - 1].reshape(grid.shape)
    peak = (tl <= PROBIT_PEAK3) & (PROBIT_PEAK3 <= th)
    vmax = np.where(peak, _logphi_ref(np.array([PROBIT_PEAK3]))[k - 1], vals.max(axis=1))
    vmax = np.maximum(vmax, vals.max(axis=1))
    vmin = vals.min(axis=1)
    assert np.all(lo <= vmin) and np.all(vmax <= hi)
    exact = tl >= -8.0
    far = hi if k != 2 else -lo  # the end that sets |g^(k)|'s supremum
    true_far = vmax if k != 2 else -vmin
    assert np.all(far[exact] <= true_far[exact] * (1 + 2e-6) + 1e-300)
    if k == 3:  # read at -8 in the left tail: g'''(-8) ~= 0.0037 at most
        assert np.all(hi[th < -8.0] <= 0.004)


# ------------------------------------------------------------- sigma fixed: one parameter
def _rows():
    """Rows of the three types, bounds lower = -1, upper = 2."""
    y = np.array([-1.0, 0.5, 2.0, -1.0, 2.0, 1.999])
    return y, -1.0, 2.0


def _true_abs_derivative(m, eta, y, sigma, lower, upper):
    """``|d^m U / d eta^m|`` per row from the reference (``eta``: rows x grid)."""
    y = y[:, None] * np.ones_like(eta)
    at_lo, at_hi = y <= lower, y >= upper
    t = np.where(at_lo, (lower - eta) / sigma, (eta - upper) / sigma)
    g = np.abs(_logphi_ref(t.ravel())[m - 1].reshape(t.shape)) / sigma**m
    plain = np.full_like(eta, 1.0 / sigma**2 if m == 2 else 0.0)
    return np.where(at_lo | at_hi, g, plain)


@pytest.mark.parametrize("sigma", SIGMAS)
@pytest.mark.parametrize("m", [2, 3])
def test_local_sup_on_dense_grids(m, sigma):
    """Over random intervals of ``eta``: the supremum is at least every grid value and at
    most the grid's largest to 1e-6 (where the interval's ``t`` stays above -8)."""
    y0, lower, upper = _rows()
    rng = np.random.default_rng(10 + m)
    reps = 300
    y = np.tile(y0, reps)
    centre = rng.uniform(-12.0, 14.0, y.size) * max(1.0, sigma)
    width = 10.0 ** rng.uniform(-3.0, 1.0, y.size)
    lo, hi = centre - width / 2, centre + width / 2
    bound = local_sup("censored_normal", m, lo, hi, y=y, sigma=sigma, lower=lower,
                      upper=upper)
    grid = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, 601)[None, :]
    # the peak of g''' in eta, where it falls inside
    peaks = np.where(y <= lower, lower - sigma * PROBIT_PEAK3, upper + sigma * PROBIT_PEAK3)
    grid = np.column_stack([grid, np.clip(peaks, lo, hi)])
    true = _true_abs_derivative(m, grid, y, sigma, lower, upper)
    top = true.max(axis=1)
    assert np.all(top <= bound), float(np.max(top - bound))
    t_left = np.where(y <= lower, (lower - hi) / sigma, (lo - upper) / sigma)
    exact = (t_left >= -8.0) | ((y > lower) & (y < upper))
    assert np.all(bound[exact] <= top[exact] * (1 + 2e-6) + 1e-300)
    # uncensored rows: exactly the Normal constants
    mid = (y > lower) & (y < upper)
    np.testing.assert_allclose(bound[mid], 1.0 / sigma**2 if m == 2 else 0.0)


@pytest.mark.parametrize("sigma", SIGMAS)
def test_global_sup_bounds_every_row_type_and_is_attained(sigma):
    fam = get_family("censored_normal")
    eta = np.linspace(-80.0, 80.0, 40_001)[None, :] * sigma
    y0, lower, upper = _rows()
    for m in (2, 3):
        sup = fam.sup_derivative(m, sigma=sigma, lower=lower, upper=upper)
        true = _true_abs_derivative(m, eta, y0, sigma, lower, upper).max()
        assert true <= sup <= true * (1 + 1e-3), (m, true, sup)
    # no bound finite: a Normal likelihood, whose Taylor expansion of order 2 is exact
    assert fam.sup_derivative(3, sigma=sigma, lower=-np.inf, upper=np.inf) == 0.0
    # through the public function, per row, with sigma moved into the row factor
    from pymc_subsample.kernels.scalable.bounds import predictor_constants

    J = np.array([[1.0, 0.5], [2.0, -1.0]])
    psi = predictor_constants("censored_normal", 2, J, np.zeros(2), sigma=sigma,
                              lower=lower, upper=upper)
    np.testing.assert_allclose(psi, _PROBIT_SUP3 * (np.abs(J).max(1) / sigma) ** 3,
                               rtol=1e-6)


def test_row_loglik_matches_scipy():
    """``l`` up to a per-row constant (differences in ``eta``) and its derivatives (central
    differences) on rows of the three types and both open bounds."""
    fam = get_family("censored_normal")
    rng = np.random.default_rng(3)
    for lower, upper in ((-1.0, 2.0), (-1.0, np.inf), (-np.inf, 2.0), (None, None)):
        lo = -np.inf if lower is None else lower
        hi = np.inf if upper is None else upper
        y = np.array([-1.0, 0.3, 2.0, 1.2, -0.7])
        y = np.clip(y, lo, hi)
        sigma = 0.7
        params = {"sigma": sigma, "lower": lower, "upper": upper}
        e1, e2 = rng.normal(0.5, 2.0, (2, y.size))

        def ref(e):
            return np.where(y <= lo, stats.norm.logcdf(lo, e, sigma),
                            np.where(y >= hi, stats.norm.logsf(hi, e, sigma),
                                     stats.norm.logpdf(y, e, sigma)))

        l1, d1, dd1 = fam.row_loglik(e1, y, params)
        l2 = fam.row_loglik(e2, y, params, derivatives=0)[0]
        np.testing.assert_allclose(l2 - l1, ref(e2) - ref(e1), rtol=1e-9, atol=1e-9)
        h = 1e-4
        np.testing.assert_allclose(d1, (ref(e1 + h) - ref(e1 - h)) / (2 * h), rtol=1e-6,
                                   atol=1e-7)
        np.testing.assert_allclose(dd1, (ref(e1 + h) - 2 * ref(e1) + ref(e1 - h)) / h**2,
                                   rtol=1e-4, atol=1e-5)


# --------------------------------------------------------- sigma sampled: two parameters
LOWER2, UPPER2 = -1.0, 2.0


def _partials_ref(m, e, s, y):
    """Signed ``d^m l / d eta^j d s^(m-j)``, ``j = 0..m``, of the censored Normal row
    (bounds ``LOWER2``, ``UPPER2``) at points ``(e, s)``: censored rows from the chain rule
    with :func:`_logphi_ref` (``T = sg (eta - c) e^-s``, ``sg = -1`` below, ``+1`` above),
    uncensored rows ``l = -s - T^2 / 2``, ``T = (y - eta) e^-s``. Checked against finite
    differences in :func:`test_partials_reference_matches_finite_differences`."""
    es = np.exp(-s)
    below, above = y <= LOWER2, y >= UPPER2
    sg = np.where(below, -1.0, 1.0)
    c = np.where(below, LOWER2, UPPER2)
    T = sg * (e - c) * es
    g1, g2, g3 = _logphi_ref(T)
    B = g1 + T * g2
    if m == 2:
        cens = [T * B, -sg * es * B, es**2 * g2]
    else:
        K = g1 + 3 * T * g2 + T * T * g3
        cens = [-T * K, sg * es * K, -es**2 * (2 * g2 + T * g3), sg * es**3 * g3]
    t = (y - e) * es
    plain = ([-2 * t * t, -2 * t * es, -es**2] if m == 2
             else [4 * t * t, 4 * t * es, 2 * es**2, 0 * t])
    cut = below | above
    return np.column_stack([np.where(cut, a, b) for a, b in zip(cens, plain)])


def _row_logpdf(e, s, y):
    sc = np.exp(s)
    return np.where(y <= LOWER2, stats.norm.logcdf(LOWER2, e, sc),
                    np.where(y >= UPPER2, stats.norm.logsf(UPPER2, e, sc),
                             stats.norm.logpdf(y, e, sc)))


def _box_rows(rng, n):
    """Rows of the three types with ``T`` (or the standardised residual) in [-3, 4]."""
    y = np.where(np.arange(n) % 3 == 0, LOWER2,
                 np.where(np.arange(n) % 3 == 1, UPPER2, 0.4))
    s0 = rng.uniform(-0.7, 0.7, n)
    t0 = rng.uniform(-3.0, 4.0, n)
    e0 = np.where(y == LOWER2, LOWER2 - t0 * np.exp(s0),
                  np.where(y == UPPER2, UPPER2 + t0 * np.exp(s0), y - t0 * np.exp(s0)))
    return e0, s0, y


def test_partials_reference_matches_finite_differences():
    """The second partials of :func:`_partials_ref` against central differences of SciPy's
    row log density; its third partials against central differences of its second."""
    rng = np.random.default_rng(7)
    e, s, y = _box_rows(rng, 300)
    h = 1e-4
    f = lambda de, ds: _row_logpdf(e + de, s + ds, y)  # noqa: E731
    fd2 = np.column_stack([
        (f(0, h) - 2 * f(0, 0) + f(0, -h)) / h**2,
        (f(h, h) - f(h, -h) - f(-h, h) + f(-h, -h)) / (4 * h * h),
        (f(h, 0) - 2 * f(0, 0) + f(-h, 0)) / h**2,
    ])
    np.testing.assert_allclose(_partials_ref(2, e, s, y), fd2, rtol=1e-4, atol=1e-5)
    h = 1e-5
    p2 = lambda de, ds: _partials_ref(2, e + de, s + ds, y)  # noqa: E731
    d_s = (p2(0, h) - p2(0, -h)) / (2 * h)
    d_e = (p2(h, 0) - p2(-h, 0)) / (2 * h)
    fd3 = np.column_stack([d_s[:, 0], d_s[:, 1], d_s[:, 2], d_e[:, 2]])
    np.testing.assert_allclose(_partials_ref(3, e, s, y), fd3, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(d_e[:, :2], d_s[:, 1:], rtol=1e-6, atol=1e-8)  # symmetry


@pytest.mark.parametrize("m", [2, 3])
def test_box_partials_contain_the_partials(m):
    """A box of zero width gives ``|each partial|`` to 1e-6 (and at least it); on random
    boxes (rows of the three types) every partial at random points inside stays within
    the supremum, which is not vacuous."""
    rng = np.random.default_rng(20 + m)
    n = 600
    e0, s0, y = _box_rows(rng, n)
    kw = dict(y=y, lower=LOWER2, upper=UPPER2)
    G = local_sup2("censored_normal_scale", m, e0, e0, s0, s0, **kw)
    ref = np.abs(_partials_ref(m, e0, s0, y))
    # an upper bound, equal to 1e-6 (a small excess where the terms of K cancel)
    assert np.all(G >= ref * (1 - 1e-9))
    np.testing.assert_allclose(G, ref, rtol=1e-6, atol=1e-7)
    we, ws = 10.0 ** rng.uniform(-3, -0.5, (2, n))
    G = local_sup2("censored_normal_scale", m, e0 - we, e0 + we, s0 - ws, s0 + ws, **kw)
    top = np.zeros_like(G)
    for _ in range(40):
        e = e0 + we * rng.uniform(-1, 1, n)
        s = s0 + ws * rng.uniform(-1, 1, n)
        top = np.maximum(top, np.abs(_partials_ref(m, e, s, y)))
    assert np.all(top <= G * (1 + 1e-9) + 1e-12)
    cens = (y == LOWER2) | (y == UPPER2)
    ratio = top[cens].max(axis=1) / G[cens].max(axis=1)
    assert np.median(ratio) > 0.5, np.median(ratio)


def test_box_partials_in_the_left_tail_are_bounds():
    """Censored rows far in the tail (``T`` down to -60): the enclosures hold against the
    continued-fraction reference of ``g'``, ``g''``, ``g'''`` combined by the chain rule."""
    fam = get_family("censored_normal_scale")
    rng = np.random.default_rng(5)
    n = 300
    lower = 0.0
    y = np.zeros(n)
    s0 = rng.uniform(-1.0, 1.0, n)
    T0 = rng.uniform(-60.0, -6.0, n)
    e0 = lower - T0 * np.exp(s0)
    we, ws = 10.0 ** rng.uniform(-3, -1, (2, n))
    for m in (2, 3):
        parts = fam.box_partials(m, Interval(e0 - we, e0 + we), Interval(s0 - ws, s0 + ws), y,
                                 lower=lower, upper=None)
        sup = np.column_stack([p.abs_sup() for p in parts])
        for _ in range(20):
            e = e0 + we * rng.uniform(-1, 1, n)
            s = s0 + ws * rng.uniform(-1, 1, n)
            es = np.exp(-s)
            T = (lower - e) * es
            g1, g2, g3 = _logphi_ref(T)
            if m == 2:
                true = [T * (g1 + T * g2), es * (g1 + T * g2), es**2 * g2]
            else:
                K = g1 + 3 * T * g2 + T * T * g3
                true = [T * K, es * K, es**2 * (2 * g2 + T * g3), es**3 * g3]
            assert np.all(np.abs(np.column_stack(true)) <= sup * (1 + 1e-9))


def test_families_are_registered_and_listed():
    assert get_family("censored").name == "censored_normal"
    one, two = get_family("censored_normal"), get_family("censored_normal_scale")
    assert one.global_bound and one.interval_bound and one.predictor_coordinates
    assert two.box_bound and not two.predictor_coordinates
    text = families.supported_text()
    assert "censored_normal:" in text and "censored_normal_scale:" in text
    with pytest.raises(TypeError, match="need y"):
        local_sup("censored_normal", 2, np.zeros(2), np.ones(2), sigma=1.0, lower=0.0)
    assert math.isfinite(_PROBIT_SUP3)
