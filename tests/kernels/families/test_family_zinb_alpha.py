"""The bounds of the zero-inflated NegativeBinomial with ``psi`` fixed and the shape
``alpha`` sampled on the log scale (``zeroinflated_negbinomial_alpha``, rows of
``(eta, s = log alpha)``), checked against PyTensor's autodiff of the row log density
(itself checked against ``pm.logp`` of ``pm.ZeroInflatedNegativeBinomial``) and against
finite differences:

* ``h = softplus - sigmoid`` (the zero rows' ``d/ds`` of ``log p0``) to 50 digits;
* the closed-form partials at a point (a box of zero width) equal autodiff's, for zero
  rows, small and large counts (``y`` up to 10^5) and shapes from 0.05 to 400;
* autodiff's partials agree with central finite differences of the lower orders;
* every partial on a dense grid of a box stays below the enclosure returned for it, which
  is close to the grid's maximum on narrow boxes; the grid check catches an enclosure
  divided by 2 (its power);
* recognition order: the fixed-alpha family no longer refuses a sampled alpha.
"""

from __future__ import annotations

import decimal

import numpy as np
import pytest

from pymc_subsample.kernels.families import FAMILIES, get_family
from pymc_subsample.kernels.families.zinb_alpha import (
    ZeroInflatedNegBinomialAlpha,
    softplus_minus_sigmoid,
)
from pymc_subsample.kernels.scalable.region import local_sup2

NAME = "zeroinflated_negbinomial_alpha"
PSIS = (0.05, 0.7, 0.999)


def _make_autodiff():
    """Compiled ``(eta, s, y, r) -> {m: [d^m l / d eta^j d s^(m-j), j = 0..m]}``
    (m = 0..3), ``s = log alpha``, ``r = logit psi``, from the plain row density, checked
    against ``pm.logp`` of ``pm.ZeroInflatedNegativeBinomial``."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    eta, s, y, r = pt.dvector("eta"), pt.dvector("s"), pt.dvector("y"), pt.dvector("r")
    psi, mu, a = pt.sigmoid(r), pt.exp(eta), pt.exp(s)
    log_p0 = -a * pt.softplus(eta - s)  # a log(a / (a + mu))
    count = (pt.gammaln(y + a) - pt.gammaln(a) - pt.gammaln(y + 1.0) + a * s
             + y * eta - (y + a) * pt.log(a + mu))
    plain = pt.switch(pt.eq(y, 0), pt.log1p(-psi + psi * pt.exp(log_p0)),
                      pt.log(psi) + count)
    dist = pm.ZeroInflatedNegativeBinomial.dist(psi=psi, mu=mu, alpha=a)
    check = pytensor.function([eta, s, y, r], [pm.logp(dist, y), plain])
    e0, s0, y0 = _data(np.random.default_rng(0), 80)
    ref, mine = check(e0, s0, y0, np.full(80, 0.8))
    np.testing.assert_allclose(mine, ref, rtol=1e-9, atol=1e-9)
    outs = [plain]
    for m in (1, 2, 3):
        for j in range(m + 1):
            d = plain
            for wrt in [eta] * j + [s] * (m - j):
                d = pytensor.grad(d.sum(), wrt)
            outs.append(d)
    fn = pytensor.function([eta, s, y, r], outs, on_unused_input="ignore")

    def partials(e, ss, yy, rr):
        n = np.broadcast(e, ss, yy, rr).shape
        vals = fn(*(np.broadcast_to(np.asarray(v, dtype=np.float64), n).copy()
                    for v in (e, ss, yy, rr)))
        out, k = {}, 0
        for m in (0, 1, 2, 3):
            out[m] = np.column_stack([np.broadcast_to(v, n) for v in vals[k:k + max(1, m + 1)]])
            k += max(1, m + 1)
        return out

    return partials


@pytest.fixture(scope="module")
def autodiff():
    return _make_autodiff()


def _data(rng, n):
    """Rows at predictors N(0.5, 1.5) and log shapes N(0, 1.5) (alpha about 0.05 to 20),
    half of them zeros, the others counts from 1 to large."""
    eta = rng.normal(0.5, 1.5, n)
    s = rng.normal(0.0, 1.5, n)
    y = np.where(rng.random(n) < 0.5, 0.0, rng.poisson(np.exp(eta)) + 1.0)
    y[::7] = np.where(y[::7] > 0, rng.integers(50, 100_000, y[::7].size), 0.0)
    return eta, s, y


def _r(psi, n):
    return np.full(n, np.log(psi / (1.0 - psi)))


def _slack(G, y):
    """Allowed excess of autodiff's value over an enclosure ``G`` (rows x partials):
    rounding on zero rows; on count rows PyTensor's trigamma and tetragamma are accurate
    to about 1e-8 only, and the pure-s partials cancel terms of size ``a^2 psi1``, so
    1e-6 of the row's largest partial (:class:`NegBinomialLog`'s own test allows 2e-7
    absolute on smaller counts)."""
    zero = (np.asarray(y) == 0)[:, None]
    return np.where(zero, 1e-8 * G + 1e-10, 1e-6 * G.max(axis=1, keepdims=True))


def test_family_is_registered_with_its_requirements():
    fam = get_family("zinb_alpha")
    assert isinstance(fam, ZeroInflatedNegBinomialAlpha) and fam.name == NAME
    assert fam.two_param and fam.box_bound and not fam.global_bound
    assert not fam.predictor_coordinates and fam.scale_transform == "log"
    assert fam.requirements == {"psi": "fixed", "n": "free"}
    # the four zero-inflated NegativeBinomial families split psi x alpha, fixed or free
    zinb = {n: FAMILIES[n].requirements for n in FAMILIES if n.startswith("zeroinflated_neg")}
    assert sorted(tuple(sorted(r.items())) for r in zinb.values()) == sorted(
        ((("n", a), ("psi", b)) for a in ("fixed", "free") for b in ("fixed", "free")))
    assert get_family("zinb").name == "zeroinflated_negbinomial_log"


def test_softplus_minus_sigmoid_to_50_digits():
    """``h(x)`` against a 50-digit evaluation (``decimal``), across the series' switch at
    ``x = -2`` and far in both tails; positive and increasing."""
    decimal.getcontext().prec = 50
    x = np.concatenate([np.linspace(-40.0, 40.0, 401), [-2.0, -2.0 - 1e-12, -1.99]])
    x = np.sort(x)
    got = softplus_minus_sigmoid(x)
    ref = []
    for v in x:
        u = decimal.Decimal(float(v)).exp()
        ref.append(float((1 + u).ln() - u / (1 + u)))
    np.testing.assert_allclose(got, ref, rtol=5e-15, atol=0.0)
    assert np.all(got > 0) and np.all(np.diff(got) >= 0)
    assert softplus_minus_sigmoid(np.array([-800.0]))[0] == 0.0  # e^-1600 / 2 underflows


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("psi", PSIS)
def test_box_partials_equal_autodiff_at_a_point(autodiff, m, psi):
    rng = np.random.default_rng(3 + m + int(100 * psi))
    eta, s, y = _data(rng, 400)
    exact = autodiff(eta, s, y, _r(psi, eta.size))[m]
    G = local_sup2(NAME, m, eta, eta, s, s, y=y, psi=psi)
    zero = y == 0
    np.testing.assert_allclose(G[zero], np.abs(exact[zero]), rtol=1e-7, atol=1e-10)
    assert np.all(np.abs(G - np.abs(exact)) <= _slack(G, y))


def test_autodiff_agrees_with_finite_differences(autodiff):
    """Central differences of the (m-1)-th partials give the m-th (m = 1..3): the
    reference itself is checked independently of PyTensor's gradients."""
    rng = np.random.default_rng(11)
    eta, s, y = _data(rng, 200)
    y = np.minimum(y, 500.0)  # keeps the differences' rounding small
    r = _r(0.7, eta.size)
    h = 1e-5
    for m in (1, 2, 3):
        lower = autodiff(eta, s, y, r)[m - 1]
        exact = autodiff(eta, s, y, r)[m]
        # d/d eta of the partial with j - 1 eta's gives the one with j; d/ds of j gives j
        for j in range(m + 1):
            if j > 0:
                fd = (autodiff(eta + h, s, y, r)[m - 1][:, j - 1]
                      - autodiff(eta - h, s, y, r)[m - 1][:, j - 1]) / (2 * h)
            else:
                fd = (autodiff(eta, s + h, y, r)[m - 1][:, 0]
                      - autodiff(eta, s - h, y, r)[m - 1][:, 0]) / (2 * h)
            scale = np.abs(exact[:, j]) + np.abs(lower).max(axis=1) + 1.0
            assert np.all(np.abs(fd - exact[:, j]) <= 1e-5 * scale), (m, j)


def test_zero_row_partials_tend_to_the_negbinomial_at_psi_one(autodiff):
    """At ``psi -> 1`` a zero row is the NegativeBinomial's ``log p0``: the zero-row
    enclosures approach :class:`NegBinomialLog`'s partials at ``y = 0`` (an independent
    derivation)."""
    rng = np.random.default_rng(4)
    eta, s, _ = _data(rng, 200)
    # rows with p0 > e^-8, so that 1 - psi = 1e-13 is negligible beside psi p0
    keep = np.exp(s) * np.logaddexp(0.0, eta - s) < 8.0
    eta, s, y = eta[keep], s[keep], np.zeros(keep.sum())
    assert y.size > 150
    for m in (2, 3):
        ours = local_sup2(NAME, m, eta, eta, s, s, y=y, psi=1.0 - 1e-13)
        nb = local_sup2("negbinomial_log", m, eta, eta, s, s, y=y)
        np.testing.assert_allclose(ours, nb, rtol=1e-6, atol=1e-8)


def _box_grid_max(autodiff, m, eta, s, y, r, we, ws, k=15):
    """``max |partial|`` over a k x k grid of each box, per row and partial."""
    t = np.linspace(-1.0, 1.0, k)
    worst = np.zeros((eta.size, m + 1))
    for a in t:
        for b in t:
            worst = np.maximum(worst, np.abs(autodiff(eta + a * we, s + b * ws, y, r)[m]))
    return worst


@pytest.mark.numerics
@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("psi", PSIS)
def test_box_suprema_bound_a_dense_grid_and_are_tight_on_narrow_boxes(autodiff, m, psi):
    rng = np.random.default_rng(20 + m + int(100 * psi))
    eta, s, y = _data(rng, 300)
    r = _r(psi, eta.size)
    # boxes of half-widths up to 0.5 in both, split as the step splits them
    we, ws = rng.uniform(0, 0.5, eta.size), rng.uniform(0, 0.5, eta.size)
    G = local_sup2(NAME, m, eta - we, eta + we, s - ws, s + ws, y=y, psi=psi, pieces=(8, 8))
    grid = _box_grid_max(autodiff, m, eta, s, y, r, we, ws)
    assert np.all(grid <= G + _slack(G, y)), float(np.max(grid - G))
    # narrow boxes: not loose on the zero rows (the count rows are NegBinomialLog's,
    # tested with it). Interval evaluation's excess grows with the width times the terms
    # that cancel (g_e^3 against 3 g_e g_ee, of size alpha^3 p^3): measured, the 90%
    # quantile of the ratio is <= 1.7 at half-width 0.01 and <= 1.22 at 0.003
    zero = y == 0
    for w, q90, worst in ((0.01, 2.0, 8.0), (0.003, 1.3, 3.0)):
        we, ws = np.full(eta.size, w), np.full(eta.size, w)
        G = local_sup2(NAME, m, eta - we, eta + we, s - ws, s + ws, y=y, psi=psi)
        grid = _box_grid_max(autodiff, m, eta, s, y, r, we, ws, k=5)
        assert np.all(grid <= G + _slack(G, y)), float(np.max(grid - G))
        big = zero & (grid.max(axis=1) > 1e-3)
        ratio = G.max(axis=1)[big] / grid.max(axis=1)[big]
        assert big.sum() > 50 and np.all(ratio <= worst), float(ratio.max())
        assert np.quantile(ratio, 0.9) <= q90, float(np.quantile(ratio, 0.9))


def test_box_grid_check_catches_a_halved_supremum(autodiff):
    rng = np.random.default_rng(5)
    eta, s, y = _data(rng, 300)
    r = _r(0.7, eta.size)
    we, ws = np.full(eta.size, 0.05), np.full(eta.size, 0.05)
    G = local_sup2(NAME, 3, eta - we, eta + we, s - ws, s + ws, y=y, psi=0.7)
    grid = _box_grid_max(autodiff, 3, eta, s, y, r, we, ws, k=5)
    zero = y == 0
    half = 0.5 * G
    assert np.any((grid > half + _slack(half, y))[zero])
    assert np.any((grid > half + _slack(half, y))[~zero])


def test_extreme_rows_are_finite_and_bounded(autodiff):
    """Far predictors and shapes (mu up to e^30, alpha from e^-6 to e^8, y up to 10^6)."""
    eta = np.array([30.0, -30.0, 30.0, -30.0, 5.0, 5.0, 0.0, 12.0])
    s = np.array([0.0, 0.0, -6.0, 8.0, -6.0, 8.0, 3.0, 2.0])
    y = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e6, 1e6])
    r = _r(0.4, eta.size)
    w = np.full(eta.size, 0.02)
    for m in (2, 3):
        G = local_sup2(NAME, m, eta - w, eta + w, s - w, s + w, y=y, psi=0.4)
        assert np.all(np.isfinite(G))
        grid = _box_grid_max(autodiff, m, eta, s, y, r, w, w, k=5)
        assert np.all(grid <= G + _slack(G, y)), float(np.max(grid - G))


def test_psi_per_row_and_errors():
    fam = get_family(NAME)
    eta, s, y = np.array([0.0, 1.0]), np.array([0.5, -0.5]), np.zeros(2)
    one = local_sup2(fam, 3, eta, eta + 0.1, s, s + 0.1, y=y, psi=0.6)
    rows = local_sup2(fam, 3, eta, eta + 0.1, s, s + 0.1, y=y, psi=np.array([0.6, 0.6]))
    np.testing.assert_allclose(one, rows)
    with pytest.raises(ValueError, match="psi"):
        local_sup2(fam, 2, eta, eta, s, s, y=y, psi=1.0)
    with pytest.raises(TypeError, match="psi"):
        local_sup2(fam, 2, eta, eta, s, s, y=y)
