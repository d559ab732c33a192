"""Student-t rows with an unknown ``nu`` (:mod:`pymc_subsample.kernels.families.student_nu`)
and the d-coordinate path bound (:func:`pymc_subsample.kernels.scalable.region.local_supd`,
:func:`~pymc_subsample.kernels.scalable.region.path_constant_d`), checked against PyTensor's
autodiff of the row log density (itself checked against ``pm.logp`` of
``pm.StudentT``):

* the closed-form partials in ``(eta, s = log sigma, t = log(nu - c))`` at a point (a box
  of zero width) equal the autodiff ones, orders 2 and 3, three shifts ``c``;
* every partial at the points of a dense grid in a box stays below the supremum returned
  for it, which is not far above the grid's maximum on narrow boxes; the same check
  catches a supremum taken at the box's centre (its power);
* the path constant ``M_i`` bounds ``|D^m l[v, ..., v]|`` along random unit directions
  ``v`` at random points of the ball, and the same check catches ``M_i / 10``;
* for two coordinates ``local_supd`` and ``path_constant_d`` are ``local_sup2`` and
  ``path_constant``.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.special import polygamma

from pymc_subsample.kernels.families import FAMILIES, get_family
from pymc_subsample.kernels.scalable.interval import Interval
from pymc_subsample.kernels.scalable.region import (
    local_sup2,
    local_supd,
    multi_indices,
    path_constant,
    path_constant_d,
    path_constants,
)

SHIFTS = (0.0, 1.0, 2.5)


@pytest.fixture(scope="module")
def autodiff():
    """Compiled ``(eta, s, t, y, c) -> {m: (n, len(multi_indices(m, 3))) partials}`` of
    ``l = log StudentT(y | nu = c + e^t, mu = eta, sigma = e^s)``, and the directional
    derivatives ``d^m/dh^m l(x + h v)`` at ``h = 0`` (``x``, ``v``: (n, 3))."""
    import pymc as pm
    import pytensor
    import pytensor.tensor as pt

    e, s, t, y = (pt.dvector(n) for n in ("eta", "s", "t", "y"))
    c = pt.dscalar("c")
    nu = c + pt.exp(t)
    r = (y - e) * pt.exp(-s)
    # l = A(nu) + rest; PyTensor's polygamma gradients are accurate to ~1e-8 only, so the
    # t-derivatives of A(nu) = lgamma((nu+1)/2) - lgamma(nu/2) come from SciPy's
    # polygamma (exact) by the chain rule in t; the rest is autodiff
    rest = -0.5 * pt.log(nu * np.pi) - s - (nu + 1) / 2 * pt.log1p(r * r / nu)
    lg = pt.gammaln((nu + 1) / 2) - pt.gammaln(nu / 2)
    ref = pm.logp(pm.StudentT.dist(nu=nu, mu=e, sigma=pt.exp(s)), y)
    outs = [rest + lg, ref]
    for m in (2, 3):
        for j in multi_indices(m, 3):
            d = rest
            for wrt in [e] * j[0] + [s] * j[1] + [t] * j[2]:
                d = pytensor.grad(d.sum(), wrt)
            outs.append(d)
    fn = pytensor.function([e, s, t, y, c], outs, on_unused_input="ignore")
    rng = np.random.default_rng(0)
    x, yy = _points(rng, 50)
    got = fn(*x.T, yy, 1.0)
    np.testing.assert_allclose(got[0], got[1], rtol=1e-10, atol=1e-10)

    def lgamma_t(m, t, shift):
        """d^m/dt^m [lgamma((nu+1)/2) - lgamma(nu/2)], nu = shift + e^t."""
        w = np.exp(t)
        nu = shift + w
        d = [(polygamma(k - 1, (nu + 1) / 2) - polygamma(k - 1, nu / 2)) / 2**k
             for k in (1, 2, 3)]
        if m == 2:
            return w * d[0] + w**2 * d[1]
        return w * d[0] + 3 * w**2 * d[1] + w**3 * d[2]

    def partials(x, yy, shift):
        vals = fn(*(np.ascontiguousarray(x[:, k]) for k in range(3)), yy, float(shift))[2:]
        out = {2: np.column_stack(vals[:6]), 3: np.column_stack(vals[6:])}
        for m in (2, 3):
            out[m][:, 0] += lgamma_t(m, x[:, 2], float(shift))  # (0, 0, m) comes first
        return out

    def directional(x, v, yy, shift, m):
        P = partials(x, yy, shift)[m]
        out = 0.0
        for r, j in enumerate(multi_indices(m, 3)):
            out = out + _multinomial(j) * P[:, r] * np.prod(v**np.array(j), axis=1)
        return out

    return partials, directional


def _multinomial(j):
    from math import factorial

    out = factorial(sum(j))
    for jk in j:
        out //= factorial(jk)
    return out


def _points(rng, n):
    """Random (eta, s, t) and responses, outliers included."""
    x = np.column_stack([rng.normal(0.0, 1.0, n), rng.normal(0.0, 0.7, n),
                         rng.normal(1.2, 1.2, n)])
    y = x[:, 0] + np.exp(x[:, 1]) * rng.standard_t(2.0, n) * rng.choice([1.0, 5.0], n)
    return x, y


def test_families_are_registered():
    fam = get_family("student_t_nu")
    assert fam.two_param and fam.box_bound and fam.n_coords == 3
    assert not fam.predictor_coordinates and not fam.global_bound
    fixed = get_family("student_t_nu_fixed_scale")
    assert fixed.two_param and fixed.box_bound and fixed.scale_param == "nu"
    assert fam.requirements == {"sigma": "free", "nu": "free"}
    assert fixed.requirements == {"sigma": "fixed", "nu": "free"}
    # the four Student-t families split nu x sigma, fixed or free
    reqs = {tuple(sorted(FAMILIES[n].requirements.items())) for n in FAMILIES
            if FAMILIES[n].distribution == "StudentTRV"}
    assert reqs == {(("nu", a), ("sigma", b)) for a in ("fixed", "free")
                    for b in ("fixed", "free")}


@pytest.mark.parametrize("m", [2, 3])
@pytest.mark.parametrize("shift", SHIFTS)
def test_point_partials_equal_autodiff(autodiff, m, shift):
    partials, _ = autodiff
    x, y = _points(np.random.default_rng(m + int(10 * shift)), 400)
    exact = partials(x, y, shift)[m]
    fam = get_family("student_t_nu")
    boxes = [Interval(x[:, k]) for k in range(3)]
    got = fam.box_partials_d(m, boxes, y, nu_shift=shift)
    for r, iv in enumerate(got):
        mid = 0.5 * (iv.lo + iv.hi)
        # PyTensor's polygamma grads are accurate to ~1e-9 relative (PyMC 6's)
        np.testing.assert_allclose(mid, exact[:, r], rtol=1e-7, atol=1e-10,
                                   err_msg=str(multi_indices(m, 3)[r]))
        assert np.all(iv.hi - iv.lo <= 1e-9 * (1.0 + np.abs(mid)))
    # sigma fixed: the partials with no s-derivative, (eta, t) order j = 0..m
    sigma = np.exp(x[:, 1])
    two = get_family("student_t_nu_fixed_scale").box_partials(
        m, boxes[0], boxes[2], y, sigma=sigma, nu_shift=shift)
    cols = {j: r for r, j in enumerate(multi_indices(m, 3))}
    for j, iv in enumerate(two):
        np.testing.assert_allclose(0.5 * (iv.lo + iv.hi), exact[:, cols[(j, 0, m - j)]],
                                   rtol=1e-7, atol=1e-10)


def _boxes(rng, n, width):
    x, y = _points(rng, n)
    half = width * rng.uniform(0.2, 1.0, (n, 3))
    return x - half, x + half, y


def _grid_max(partials, lo, hi, y, shift, m, k=9):
    """max over a k^3 grid of each box of |every m-th partial|."""
    g = np.array(list(itertools.product(np.linspace(0.0, 1.0, k), repeat=3)))
    x = (lo[None] + g[:, None, :] * (hi - lo)[None]).reshape(-1, 3)  # every grid point at once
    vals = np.abs(np.asarray(partials(x, np.tile(y, len(g)), shift)[m]))
    return vals.reshape(len(g), len(lo), *vals.shape[1:]).max(axis=0)


@pytest.mark.numerics
@pytest.mark.parametrize("m", [2, 3])
def test_box_suprema_cover_a_dense_grid(autodiff, m):
    partials, _ = autodiff
    rng = np.random.default_rng(100 + m)
    for shift, width in ((0.0, 0.05), (1.0, 0.2), (0.0, 0.5)):
        lo, hi, y = _boxes(rng, 150, width)
        G = local_supd("student_t_nu", m, lo.T, hi.T, y=y, nu_shift=shift, pieces=(2, 2, 2))
        grid = _grid_max(partials, lo, hi, y, shift, m)
        assert np.all(G >= grid * (1 - 1e-7) - 1e-12), (shift, width)
        if width <= 0.05:  # narrow boxes: the enclosure is close to the range
            tight = G <= 2.0 * grid + 0.02 * np.max(grid, axis=1, keepdims=True)
            assert np.mean(tight) > 0.9, np.mean(tight)
        # its power: the partials at the box's centre fall below the grid's maximum
        centre = np.abs(partials(0.5 * (lo + hi), y, shift)[m])
        assert np.mean(centre < grid * (1 - 1e-7)) > 0.5


@pytest.mark.numerics
def test_fixed_scale_suprema_cover_a_dense_grid(autodiff):
    partials, _ = autodiff
    rng = np.random.default_rng(7)
    lo, hi, y = _boxes(rng, 150, 0.2)
    sigma = np.exp(0.5 * (lo[:, 1] + hi[:, 1]))
    lo[:, 1] = hi[:, 1] = np.log(sigma)
    for m in (2, 3):
        G = local_sup2("student_t_nu_fixed_scale", m, lo[:, 0], hi[:, 0], lo[:, 2], hi[:, 2],
                       y=y, sigma=sigma, nu_shift=1.0)
        grid = _grid_max(partials, lo, hi, y, 1.0, m)
        cols = {j: r for r, j in enumerate(multi_indices(m, 3))}
        for j in range(m + 1):
            assert np.all(G[:, j] >= grid[:, cols[(j, 0, m - j)]] * (1 - 1e-7) - 1e-12)


def test_local_supd_with_two_coordinates_is_local_sup2():
    rng = np.random.default_rng(3)
    n = 200
    e = rng.normal(0, 2, n)
    s = rng.normal(0, 0.5, n)
    w = rng.uniform(0.01, 0.4, (2, n))
    y = e + rng.standard_t(3, n)
    for m in (2, 3):
        a = local_sup2("student_t_scale", m, e - w[0], e + w[0], s - w[1], s + w[1], y=y,
                       nu=4.0, pieces=(3, 2))
        b = local_supd("student_t_scale", m, [e - w[0], s - w[1]], [e + w[0], s + w[1]], y=y,
                       nu=4.0, pieces=(3, 2))
        np.testing.assert_array_equal(a, b)
        A = rng.uniform(0.0, 2.0, (n, 2))
        np.testing.assert_allclose(path_constant(a, A[:, 0], A[:, 1]), path_constant_d(a, A),
                                   rtol=1e-14)
    assert multi_indices(3, 2) == ((0, 3), (1, 2), (2, 1), (3, 0))
    assert len(multi_indices(3, 3)) == 10 and all(sum(j) == 3 for j in multi_indices(3, 3))


def _chunk(rng, n=120, dim=5):
    """Rows of (eta, s, t) affine in a whitened z: c^k = c^k_hat + P_k z."""
    Xd = rng.standard_normal((n, dim))
    Je = Xd * 0.05
    Js = np.zeros((n, dim))
    Js[:, dim - 2] = 0.03
    Jt = np.zeros((n, dim))
    Jt[:, dim - 1] = 0.08
    base = (rng.normal(0, 1, n), np.full(n, -0.2), np.full(n, np.log(3.0)))
    y = base[0] + np.exp(base[1]) * rng.standard_t(3, n) * rng.choice([1.0, 8.0], n,
                                                                       p=[0.9, 0.1])
    return (Je, Js, Jt), base, y


@pytest.mark.parametrize("order", [1, 2])
def test_path_constant_bounds_directional_derivatives(autodiff, order):
    """``|D^m l[v, ..., v]| <= M_i`` for unit ``v`` at points of the ball (brute force over
    random directions and points); ``M_i / 10`` fails the same check."""
    _, directional = autodiff
    rng = np.random.default_rng(order)
    J, base, y = _chunk(rng)
    dim = J[0].shape[1]
    L = np.eye(dim)
    radius = 3.0
    m = order + 1
    M = path_constants("student_t_nu", order, J, base, y, whiten=L, radius=radius,
                       nu_shift=1.0)
    worst, broken = 0.0, 0
    for _ in range(60):
        z = rng.standard_normal(dim)
        z *= radius * rng.uniform() ** (1 / dim) / np.linalg.norm(z)
        v = rng.standard_normal(dim)
        v /= np.linalg.norm(v)
        x = np.column_stack([b + Jk @ z for Jk, b in zip(J, base)])
        dv = np.column_stack([Jk @ v for Jk in J])
        val = np.abs(directional(x, dv, y, 1.0, m))
        worst = max(worst, float(np.max(val / M)))
        broken += int(np.any(val > M / 10.0))
    assert worst <= 1.0, worst
    assert worst > 0.02, worst  # not vacuous
    assert broken > 0


def test_refusals_and_validation():
    fam = get_family("student_t_nu")
    with pytest.raises(TypeError, match="three row coordinates"):
        fam.box_partials(2, Interval(0.0), Interval(0.0), np.zeros(1))
    with pytest.raises(ValueError, match="shift c >= 0"):
        fam.box_partials_d(2, [Interval(np.zeros(1))] * 3, np.zeros(1), nu_shift=-1.0)
    with pytest.raises(ValueError, match="3 row coordinates"):
        local_supd("student_t_nu", 2, [np.zeros(2)] * 2, [np.ones(2)] * 2, y=np.zeros(2))
    with pytest.raises(ValueError, match="needs sigma|sigma must"):
        get_family("student_t_nu_fixed_scale").box_partials(
            2, Interval(0.0), Interval(0.0), np.zeros(1), sigma=-1.0)
