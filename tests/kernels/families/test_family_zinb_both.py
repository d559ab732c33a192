"""The bounds of the zero-inflated NegativeBinomial with ``psi`` and the shape ``alpha``
both sampled (``zeroinflated_negbinomial_both``, rows of ``(eta, r = logit psi,
s = log alpha)``), checked against PyTensor's autodiff of the row log density (itself
checked against ``pm.logp`` of ``pm.ZeroInflatedNegativeBinomial``) and against finite
differences:

* the closed-form partials at a point (a box of zero width) equal autodiff's, for zero
  rows, small and large counts and shapes from about 0.05 to 20, in the column order of
  ``multi_indices(m, 3)``;
* autodiff's partials agree with central finite differences of the lower orders;
* every partial on a dense grid of a box stays below the enclosure returned for it; the
  grid check catches an enclosure divided by 2 (its power);
* with ``r`` (or ``s``) a point, the enclosures of the partials without it equal those
  of the psi-fixed (alpha-fixed) family: the shared derivation;
* recognition order and errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from pymc_subsample.kernels.families import FAMILIES, get_family
from pymc_subsample.kernels.families.zinb_both import ZeroInflatedNegBinomialBoth
from pymc_subsample.kernels.scalable.region import local_sup2, local_supd, multi_indices
from tests.kernels.families.test_family_zinb_alpha import _data, _slack

NAME = "zeroinflated_negbinomial_both"


def _make_autodiff():
    """Compiled ``(eta, r, s, y) -> {m: columns d^m l / d eta^je dr^jr ds^js in the order
    of multi_indices(m, 3)}`` (m = 0..3), from the plain row density, checked against
    ``pm.logp``. FAST_COMPILE: no C compilation, but slow per row (a few hundred rows
    only; the dense grids use the family's point values, checked against this)."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    eta, r, s, y = (pt.dvector(n) for n in ("eta", "r", "s", "y"))
    psi, mu, a = pt.sigmoid(r), pt.exp(eta), pt.exp(s)
    log_p0 = -a * pt.softplus(eta - s)
    count = (pt.gammaln(y + a) - pt.gammaln(a) - pt.gammaln(y + 1.0) + a * s
             + y * eta - (y + a) * pt.log(a + mu))
    plain = pt.switch(pt.eq(y, 0), pt.log1p(-psi + psi * pt.exp(log_p0)),
                      pt.log(psi) + count)
    dist = pm.ZeroInflatedNegativeBinomial.dist(psi=psi, mu=mu, alpha=a)
    check = pytensor.function([eta, r, s, y], [pm.logp(dist, y), plain],
                              mode="FAST_COMPILE")
    e0, s0, y0 = _data(np.random.default_rng(0), 80)
    r0 = np.linspace(-3.0, 3.0, 80)
    ref, mine = check(e0, r0, s0, y0)
    ok = np.isfinite(ref)  # without the C rewrites pm.logp overflows on huge counts
    assert ok.sum() > 70
    np.testing.assert_allclose(mine[ok], ref[ok], rtol=1e-9, atol=1e-9)
    coords = (eta, r, s)
    cache = {(): plain}

    def partial(j):  # j: sorted tuple of coordinate indices
        if j not in cache:
            cache[j] = pytensor.grad(partial(j[:-1]).sum(), coords[j[-1]])
        return cache[j]

    outs, layout = [plain], [(0, 1)]
    for m in (1, 2, 3):
        cols = [tuple(k for k, n in enumerate(jj) for _ in range(n))
                for jj in multi_indices(m, 3)]
        layout.append((len(outs), len(cols)))
        outs += [partial(c) for c in cols]
    fn = pytensor.function([eta, r, s, y], outs, mode="FAST_COMPILE",
                           on_unused_input="ignore")

    def partials(e, rr, ss, yy):
        n = np.broadcast(e, rr, ss, yy).shape
        vals = fn(*(np.broadcast_to(np.asarray(v, dtype=np.float64), n).copy()
                    for v in (e, rr, ss, yy)))
        return {m: np.column_stack([np.broadcast_to(v, n) for v in vals[k:k + c]])
                for m, (k, c) in enumerate(layout)}

    return partials


@pytest.fixture(scope="module")
def autodiff():
    return _make_autodiff()


def _rows(seed, n):
    eta, s, y = _data(np.random.default_rng(seed), n)
    r = np.random.default_rng(seed + 1).uniform(-3.0, 4.0, n)  # psi from 0.05 to 0.98
    return eta, r, s, y


def _grid_max(m, c, w, y, k):
    """``max |partial|`` over a k^3 grid of each box ``c -+ w``, from the family's
    closed forms at points (zero-width boxes: the exact partials up to rounding, checked
    against autodiff by :func:`test_box_partials_equal_autodiff_at_a_point`)."""
    t = np.linspace(-1.0, 1.0, k)
    offs = np.array(np.meshgrid(t, t, t, indexing="ij")).reshape(3, -1)
    n = y.size
    pts = [(c[i][None, :] + offs[i][:, None] * w[i][None, :]).ravel() for i in range(3)]
    vals = local_supd(NAME, m, pts, pts, y=np.tile(y, offs.shape[1])) / (1.0 + 1e-9)
    return vals.reshape(offs.shape[1], n, -1).max(axis=0)


def _slack_grid(G):
    """Rounding allowance of a grid of point enclosures against a box enclosure."""
    return 1e-9 * G + 1e-12


def test_family_is_registered_with_three_coordinates():
    fam = get_family("zinb_both")
    assert isinstance(fam, ZeroInflatedNegBinomialBoth) and fam.name == NAME
    assert fam.n_coords == 3 and fam.extra_coords == ("n",) and fam.fixed_params == ()
    assert fam.requirements == {"psi": "free", "n": "free"}
    assert fam.scale_param == "psi" and fam.scale_transform == "logit"
    assert fam.two_param and fam.box_bound and not fam.global_bound


@pytest.mark.parametrize("m", [2, 3])
def test_box_partials_equal_autodiff_at_a_point(autodiff, m):
    eta, r, s, y = _rows(3 + m, 150)
    exact = autodiff(eta, r, s, y)[m]
    G = local_supd(NAME, m, [eta, r, s], [eta, r, s], y=y)
    zero = y == 0
    np.testing.assert_allclose(G[zero], np.abs(exact[zero]), rtol=1e-7, atol=1e-10)
    assert np.all(np.abs(G - np.abs(exact)) <= _slack(G, y))


def test_autodiff_agrees_with_finite_differences(autodiff):
    """Central differences of the (m-1)-th partials give the m-th (m = 1..3)."""
    eta, r, s, y = _rows(11, 40)
    y = np.minimum(y, 500.0)
    h = 1e-5
    base = [eta, r, s]
    for m in (1, 2, 3):
        lower_idx = {j: c for c, j in enumerate(multi_indices(m - 1, 3))} if m > 1 else {
            (0, 0, 0): 0}
        exact = autodiff(eta, r, s, y)[m]
        lower = autodiff(eta, r, s, y)[m - 1]
        for col, j in enumerate(multi_indices(m, 3)):
            k = next(i for i in range(3) if j[i])  # differentiate along the first one
            jl = tuple(v - (i == k) for i, v in enumerate(j))
            up = [b + h * (i == k) for i, b in enumerate(base)]
            dn = [b - h * (i == k) for i, b in enumerate(base)]
            fd = (autodiff(*up, y)[m - 1][:, lower_idx[jl]]
                  - autodiff(*dn, y)[m - 1][:, lower_idx[jl]]) / (2 * h)
            scale = np.abs(exact[:, col]) + np.abs(lower).max(axis=1) + 1.0
            assert np.all(np.abs(fd - exact[:, col]) <= 1e-5 * scale), (m, j)


@pytest.mark.numerics
@pytest.mark.parametrize("m", [2, 3])
def test_box_suprema_bound_a_dense_grid(m):
    eta, r, s, y = _rows(20 + m, 200)
    rng = np.random.default_rng(30 + m)
    w = [rng.uniform(0, 0.4, eta.size) for _ in range(3)]
    c = [eta, r, s]
    G = local_supd(NAME, m, [a - b for a, b in zip(c, w)], [a + b for a, b in zip(c, w)],
                   y=y, pieces=(4, 4, 4))
    grid = _grid_max(m, c, w, y, k=7)
    assert np.all(grid <= G + _slack_grid(G)), float(np.max(grid - G))
    # not vacuous on narrow boxes: within a factor 3 for nine rows in ten
    wn = [np.full(eta.size, 0.005)] * 3
    G = local_supd(NAME, m, [a - b for a, b in zip(c, wn)], [a + b for a, b in zip(c, wn)],
                   y=y)
    grid = _grid_max(m, c, wn, y, k=3)
    assert np.all(grid <= G + _slack_grid(G)), float(np.max(grid - G))
    big = grid.max(axis=1) > 1e-3
    ratio = G.max(axis=1)[big] / grid.max(axis=1)[big]
    assert big.sum() > 100 and np.quantile(ratio, 0.9) <= 3.0, np.quantile(ratio, 0.9)


@pytest.mark.numerics
def test_grid_check_catches_a_halved_supremum():
    eta, r, s, y = _rows(5, 200)
    c, w = [eta, r, s], [np.full(eta.size, 0.05)] * 3
    G = local_supd(NAME, 3, [a - b for a, b in zip(c, w)], [a + b for a, b in zip(c, w)], y=y)
    grid = _grid_max(3, c, w, y, k=3)
    half = 0.5 * G
    bad = np.any(grid > half + _slack_grid(half), axis=1)
    assert np.any(bad[y == 0]) and np.any(bad[y > 0])


@pytest.mark.numerics
@pytest.mark.parametrize("m", [2, 3])
def test_reduces_to_the_one_parameter_families(m):
    """``r`` a point: the ``(eta, s)`` partials are ``zeroinflated_negbinomial_alpha``'s;
    ``s`` a point: the ``(eta, r)`` ones are ``zeroinflated_negbinomial_logit``'s."""
    eta, r, s, y = _rows(7, 300)
    w = 0.1
    G = local_supd(NAME, m, [eta - w, r, s - w], [eta + w, r, s + w], y=y)
    cols = [c for c, j in enumerate(multi_indices(m, 3)) if j[1] == 0]  # (je, 0, js)
    psi = 1.0 / (1.0 + np.exp(-r))
    alpha_fam = local_sup2("zeroinflated_negbinomial_alpha", m, eta - w, eta + w, s - w,
                           s + w, y=y, psi=psi)
    # both: ascending in the eta count
    np.testing.assert_allclose(G[:, cols], alpha_fam, rtol=1e-8, atol=1e-12)
    G = local_supd(NAME, m, [eta - w, r - w, s], [eta + w, r + w, s], y=y)
    cols = [c for c, j in enumerate(multi_indices(m, 3)) if j[2] == 0]  # (je, jr, 0)
    logit_fam = local_sup2("zeroinflated_negbinomial_logit", m, eta - w, eta + w, r - w,
                           r + w, y=y, n=np.exp(s))
    np.testing.assert_allclose(G[:, cols], logit_fam, rtol=1e-6, atol=1e-10)


def test_extreme_rows_are_finite_and_bounded(autodiff):
    """Far predictors, shapes and psi: finite enclosures above the grid, and the point
    values equal autodiff's where PyTensor's are finite."""
    eta = np.array([30.0, -30.0, 30.0, -30.0, 5.0, 5.0, 0.0, 12.0])
    s = np.array([0.0, 0.0, -6.0, 8.0, -6.0, 8.0, 3.0, 2.0])
    r = np.array([-8.0, 8.0, 0.0, 3.0, -3.0, 12.0, 0.5, -12.0])
    y = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1e6, 1e6])
    w = [np.full(eta.size, 0.02)] * 3
    c = [eta, r, s]
    for m in (2, 3):
        G = local_supd(NAME, m, [a - b for a, b in zip(c, w)],
                       [a + b for a, b in zip(c, w)], y=y)
        assert np.all(np.isfinite(G))
        grid = _grid_max(m, c, w, y, k=3)
        assert np.all(grid <= G + _slack_grid(G)), float(np.max(grid - G))
        exact = np.abs(autodiff(eta, r, s, y)[m])
        point = local_supd(NAME, m, c, c, y=y)
        ok = np.isfinite(exact) & (y[:, None] == 0)
        assert np.all(np.abs(point - exact)[ok] <= 1e-6 * point[ok] + 1e-10)


def test_errors():
    fam = get_family(NAME)
    x = np.zeros(2)
    with pytest.raises(TypeError, match="three row coordinates"):
        local_sup2(fam, 2, x, x, x, x, y=x)
    with pytest.raises(ValueError, match="alpha = c"):
        local_supd(fam, 2, [x, x, x], [x, x, x], y=x, n_shift=1.0)
    with pytest.raises(ValueError, match="order m"):
        local_supd(fam, 4, [x, x, x], [x, x, x], y=x)


def test_supported_text_lists_this_family_and_the_multinomial_logit():
    from pymc_subsample.engine import glm

    assert f"{NAME}: pm.ZeroInflatedNegativeBinomial" in glm.SUPPORTED_TEXT
    assert "categorical_softmax: pm.Categorical" in glm.SUPPORTED_TEXT
