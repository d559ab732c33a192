"""The zero-inflated families' derivative bounds: Poisson and NegativeBinomial (fixed
shape) with a log link, ``psi`` fixed (``zeroinflated_*_log``, rows of ``eta``) or
sampled on the logit scale (``zeroinflated_*_logit``, rows of ``(eta, logit psi)``),
checked against PyTensor's autodiff of the row log density (itself checked against
``pm.logp`` of ``pm.ZeroInflatedPoisson`` / ``pm.ZeroInflatedNegativeBinomial``):

* the closed-form partials at a point (a box of zero width) equal the autodiff ones;
* every partial at the points of a dense grid in an interval or a box stays below the
  supremum returned for it, which is not much above the grid's maximum on narrow boxes;
* the same grid check catches a supremum halved (its power);
* the NumPy row terms (control variates in predictor coordinates) equal autodiff's.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import gammaln

from pymc_subsample.kernels.families import FAMILIES, get_family
from pymc_subsample.kernels.scalable.region import local_sup, local_sup2

#: (one-parameter family, two-parameter family, fixed parameters) per count distribution
KINDS = {
    "zip": ("zeroinflated_poisson_log", "zeroinflated_poisson_logit", {}),
    "zinb": ("zeroinflated_negbinomial_log", "zeroinflated_negbinomial_logit", {"n": 1.7}),
}
FIXED, FREE = KINDS["zip"][:2]
PSIS = (0.02, 0.3, 0.7, 0.95, 0.999)


def _make_autodiff(kind):
    """Compiled ``(eta, r, y) -> {m: [d^m l / d eta^j d r^(m-j), j = 0..m]}`` (m = 0..3;
    ``{0: [l]}``), ``r = logit psi``, from the plain row density, checked against
    ``pm.logp`` of ``pm.ZeroInflatedPoisson`` / ``pm.ZeroInflatedNegativeBinomial``."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    eta, r, y = pt.dvector("eta"), pt.dvector("r"), pt.dvector("y")
    psi, mu = pt.sigmoid(r), pt.exp(eta)
    if kind == "zip":
        p0 = pt.exp(-mu)
        count = y * eta - mu - pt.gammaln(y + 1.0)
        dist = pm.ZeroInflatedPoisson.dist(psi=psi, mu=mu)
    else:
        a = KINDS["zinb"][2]["n"]
        p0 = (a / (a + mu)) ** a
        count = (pt.gammaln(y + a) - pt.gammaln(a) - pt.gammaln(y + 1.0) + a * np.log(a)
                 + y * eta - (y + a) * pt.log(a + mu))
        dist = pm.ZeroInflatedNegativeBinomial.dist(psi=psi, mu=mu, alpha=a)
    plain = pt.switch(pt.eq(y, 0), pt.log(1.0 - psi + psi * p0), pt.log(psi) + count)
    check = pytensor.function([eta, r, y], [pm.logp(dist, y), plain])
    e0, r0, y0 = _data(np.random.default_rng(0), 60)
    ref, mine = check(e0, r0, y0)
    np.testing.assert_allclose(mine, ref, rtol=1e-10, atol=1e-10)
    outs = [plain]
    for m in (1, 2, 3):
        for j in range(m + 1):
            d = plain
            for wrt in [eta] * j + [r] * (m - j):
                d = pytensor.grad(d.sum(), wrt)
            outs.append(d)
    fn = pytensor.function([eta, r, y], outs, on_unused_input="ignore")

    def partials(e, rr, yy):
        vals = fn(*(np.asarray(v, dtype=np.float64) for v in (e, rr, yy)))
        out, k = {}, 0
        for m in (0, 1, 2, 3):
            out[m] = np.column_stack(vals[k:k + max(1, m + 1)])
            k += max(1, m + 1)
        return out

    return partials


@pytest.fixture(scope="module", params=sorted(KINDS))
def kind(request):
    """``(kind, autodiff partials, fixed family, free family, fixed parameters)``."""
    fixed, free, params = KINDS[request.param]
    return request.param, _make_autodiff(request.param), fixed, free, params


@pytest.fixture(scope="module")
def autodiff():
    return _make_autodiff("zip")


def _data(rng, n):
    """Rows at predictors N(0.3, 1.5), logit psi N(0.5, 2), half of them zeros."""
    eta = rng.normal(0.3, 1.5, n)
    r = rng.normal(0.5, 2.0, n)
    y = np.where(rng.random(n) < 0.5, 0.0, rng.poisson(np.exp(eta)) + 1.0)
    return eta, r, y


def test_families_are_registered_and_others_keep_the_log_scale():
    for fixed_name, free_name, _ in KINDS.values():
        fixed, free = get_family(fixed_name), get_family(free_name)
        assert fixed.region_bound and not fixed.global_bound and fixed.predictor_coordinates
        assert free.box_bound and free.scale_transform == "logit"
        assert not free.predictor_coordinates
    assert get_family("zip").name == FIXED and get_family("zinb").name == KINDS["zinb"][0]
    ours = {n for k in KINDS.values() for n in k[:2]}
    # psi and alpha both sampled: logit psi is a row coordinate too (family_zinb_both)
    ours.add("zeroinflated_negbinomial_both")
    assert get_family("zeroinflated_negbinomial_both").scale_transform == "logit"
    assert all(f.scale_transform in ("log", "log_shifted") for f in FAMILIES.values()
               if f.name not in ours)
    before = ("bernoulli_logit", "bernoulli_probit", "student_t", "normal", "poisson_log",
              "normal_scale", "student_t_scale", "gamma_log", "negbinomial_log")
    assert all(get_family(n).param_reader is None for n in before)


@pytest.mark.parametrize("m", [2, 3])
def test_box_partials_equal_autodiff_at_a_point(kind, m):
    _, autodiff, _, free, params = kind
    rng = np.random.default_rng(3 + m)
    eta, r, y = _data(rng, 400)
    exact = autodiff(eta, r, y)[m]
    G = local_sup2(free, m, eta, eta, r, r, y=y, **params)
    np.testing.assert_allclose(G, np.abs(exact), rtol=1e-7, atol=1e-9)


def _box_grid_max(autodiff, m, eta, r, y, we, wr, k=15):
    """``max |partial|`` over a k x k grid of each box, per row and partial."""
    t = np.linspace(-1.0, 1.0, k)
    worst = np.zeros((eta.size, m + 1))
    for a in t:
        for b in t:
            worst = np.maximum(worst, np.abs(autodiff(eta + a * we, r + b * wr, y)[m]))
    return worst


@pytest.mark.numerics
@pytest.mark.parametrize("m", [2, 3])
def test_box_suprema_bound_a_dense_grid_and_are_tight_on_narrow_boxes(kind, m):
    _, autodiff, _, free, params = kind
    rng = np.random.default_rng(20 + m)
    eta, r, y = _data(rng, 300)
    # boxes of half-widths up to 0.5 (eta) and 1 (logit psi), split as the step splits them
    we, wr = rng.uniform(0, 0.5, eta.size), rng.uniform(0, 1.0, eta.size)
    G = local_sup2(free, m, eta - we, eta + we, r - wr, r + wr, y=y, pieces=(8, 8), **params)
    grid = _box_grid_max(autodiff, m, eta, r, y, we, wr)
    assert np.all(grid <= G * (1 + 1e-9) + 1e-12), float(np.max(grid - G))
    # narrow boxes (the region boxes at N = 10^5 are narrower still): close to the grid
    we, wr = np.full(eta.size, 0.01), np.full(eta.size, 0.01)
    G = local_sup2(free, m, eta - we, eta + we, r - wr, r + wr, y=y, **params)
    grid = _box_grid_max(autodiff, m, eta, r, y, we, wr, k=5)
    assert np.all(grid <= G * (1 + 1e-9) + 1e-12)
    big = grid.max(axis=1) > 1e-3  # rows with a partial of some size
    ratio = G.max(axis=1)[big] / grid.max(axis=1)[big]
    assert np.all(ratio <= 1.3), float(ratio.max())


def test_box_grid_check_catches_a_halved_supremum(kind):
    _, autodiff, _, free, params = kind
    rng = np.random.default_rng(5)
    eta, r, y = _data(rng, 300)
    we, wr = np.full(eta.size, 0.05), np.full(eta.size, 0.05)
    G = local_sup2(free, 3, eta - we, eta + we, r - wr, r + wr, y=y, **params)
    grid = _box_grid_max(autodiff, 3, eta, r, y, we, wr, k=5)
    assert np.any(grid > 0.5 * G * (1 + 1e-9) + 1e-12)


def _interval_grid_max(autodiff, m, lo, hi, r, y, k=801):
    t = np.linspace(0.0, 1.0, k)
    worst = np.zeros(lo.size)
    for a in t:
        worst = np.maximum(worst, np.abs(autodiff(lo + a * (hi - lo), r, y)[m][:, m]))
    return worst


@pytest.mark.numerics
@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("psi", PSIS)
def test_local_sup_bounds_a_dense_grid(kind, m, psi):
    """Fixed psi: over intervals of eta of random centre and width, ``|d^m l / d eta^m|``
    on a grid of 801 points stays below :meth:`local_sup`, which is not much above the
    grid's maximum; half of it is exceeded on the grid (the check's power)."""
    name, autodiff, fixed, _, params = kind
    rng = np.random.default_rng(int(1000 * psi) + m)
    n = 200
    centre, width = rng.normal(0.5, 2.0, n), rng.exponential(0.3, n)
    lo, hi = centre - width, centre + width
    y = np.where(np.arange(n) % 2 == 0, 0.0, 3.0)
    r = np.full(n, np.log(psi / (1 - psi)))
    sup = local_sup(fixed, m, lo, hi, y=y, psi=psi, **params)
    grid = _interval_grid_max(autodiff, m, lo, hi, r, y)
    assert np.all(grid <= sup * (1 + 1e-9) + 1e-12), float(np.max(grid - sup))
    # not loose: within a factor 4 of the grid's maximum, and within 25% on intervals
    # narrower than 0.2 (the region's intervals at N = 10^5 are about that wide)
    big = grid > 1e-6
    ratio = sup[big] / grid[big]
    assert np.all(ratio <= 4.0), float(ratio.max())
    narrow = (hi - lo)[big] <= 0.2
    assert narrow.sum() > 20 and np.all(ratio[narrow] <= 1.25), float(ratio[narrow].max())
    if name == "zip":  # count rows: the exact exp(hi)
        np.testing.assert_allclose(sup[y > 0], np.exp(hi[y > 0]))
    assert np.any(grid > 0.5 * sup + 1e-12)


def test_local_sup_per_row_psi_and_errors(kind):
    _, _, fixed, _, params = kind
    lo, hi = np.array([-1.0, 0.0]), np.array([-0.5, 0.5])
    y = np.zeros(2)
    one = local_sup(fixed, 3, lo, hi, y=y, psi=0.6, **params)
    rows = local_sup(fixed, 3, lo, hi, y=y, psi=np.array([0.6, 0.6]), **params)
    np.testing.assert_allclose(one, rows)
    with pytest.raises(ValueError, match="psi"):
        local_sup(fixed, 2, lo, hi, y=y, psi=1.0, **params)
    with pytest.raises(TypeError, match="psi"):
        local_sup(fixed, 2, lo, hi, y=y, **params)


@pytest.mark.parametrize("psi", [0.1, 0.7, 0.99])
def test_row_loglik_equals_autodiff(kind, psi):
    """``(l, l', l'')`` of the fixed-psi family: ``l`` up to a constant per row and the
    derivatives in ``eta`` exactly, also far out (eta = 30 and -30)."""
    name, autodiff, fixed, _, params = kind
    fam = get_family(fixed)
    rng = np.random.default_rng(8)
    eta, _, y = _data(rng, 300)
    eta[:4] = [30.0, -30.0, 30.0, -30.0]
    y[:4] = [0.0, 0.0, 2.0, 2.0]
    r = np.full(eta.size, np.log(psi / (1 - psi)))
    ref = autodiff(eta, r, y)
    l0, l1, l2 = fam.row_loglik(eta, y, {"psi": psi, **params})
    if name == "zip":
        const = -gammaln(y + 1) * (y > 0)
    else:
        a = params["n"]
        const = (gammaln(y + a) - gammaln(a) - gammaln(y + 1) + a * np.log(a)) * (y > 0)
    np.testing.assert_allclose(l0 + const, ref[0][:, 0], rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(l1, ref[1][:, 1], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(l2, ref[2][:, 2], rtol=1e-9, atol=1e-12)
    far = fam.row_loglik(np.array([800.0]), np.zeros(1), {"psi": psi, **params})
    assert np.all(np.isfinite(far[2]))


def test_zero_rows_partials_vanish_far_out():
    """Zero rows' partials carry ``e^(r - e^eta)``: 0 far right (no NaN from
    ``inf * 0``), and small far left."""
    lo, hi = np.array([30.0, -40.0]), np.array([900.0, -39.0])
    for m in (2, 3):
        sup = local_sup(FIXED, m, lo, hi, y=np.zeros(2), psi=0.5)
        assert np.all(np.isfinite(sup)) and sup[0] == 0.0 and sup[1] < 1e-15
        G = local_sup2(FREE, m, lo, hi, np.zeros(2), np.ones(2), y=np.zeros(2))
        assert np.all(np.isfinite(G)) and np.all(G[0, 1:] == 0.0)
