"""Predictor coordinates (ScalableMH on GLMs whose linear predictor is not affine in the
sampled variables) and the surrogate-HMC proposal.

The exactness run against a NUTS reference on a non-centred hierarchical model is the
slow ``test_scalable_mh_non_centred_hierarchical_is_exact`` in ``test_cv_posteriors.py``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from pymc_subsample.kernels.variance.predictor import (
    predictor_sums,
    remainder_difference,
    row_loglik,
    scale_remainder_difference,
    scale_row_loglik,
    scale_sums,
)
from pymc_subsample.proposals import SurrogateHMC
from pymc_subsample.testing import mcse_mean, posterior, sample_stats
from tests.conftest import (
    bernoulli_logit_draws,
    hierarchical_logistic,
    hierarchical_normal,
    run_sample,
)

FAMILIES = {
    "bernoulli_logit": ({}, lambda eta, y: stats.bernoulli.logpmf(y, 1 / (1 + np.exp(-eta)))),
    "bernoulli_probit": ({}, lambda eta, y: stats.bernoulli.logpmf(y, stats.norm.cdf(eta))),
    "poisson_log": ({}, lambda eta, y: stats.poisson.logpmf(y, np.exp(eta))),
    "normal": ({"sigma": 1.7}, lambda eta, y: stats.norm.logpdf(y, eta, 1.7)),
    "student_t": ({"nu": 4.0, "sigma": 0.8},
                  lambda eta, y: stats.t.logpdf(y, 4.0, loc=eta, scale=0.8)),
}


def _y(family, rng, n):
    if family in ("bernoulli_logit", "bernoulli_probit"):
        return rng.integers(0, 2, n).astype(float)
    if family == "poisson_log":
        return rng.poisson(2.0, n).astype(float)
    return rng.normal(0.0, 2.0, n)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_row_loglik_matches_scipy_and_its_derivatives(family):
    """Differences of ``l`` equal SciPy's log densities' differences; ``l'``, ``l''``
    equal central differences."""
    params, ref = FAMILIES[family]
    rng = np.random.default_rng(1)
    eta = rng.normal(0.3, 1.0, 50)
    y = _y(family, rng, 50)
    l0, l1, l2 = row_loglik(family, eta, y, params)
    l0b = row_loglik(family, eta + 0.37, y, params, derivatives=0)[0]
    np.testing.assert_allclose(l0b - l0, ref(eta + 0.37, y) - ref(eta, y), atol=1e-10)
    h = 1e-5
    up, dn = (row_loglik(family, eta + s, y, params) for s in (h, -h))
    np.testing.assert_allclose(l1, (up[0] - dn[0]) / (2 * h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(l2, (up[1] - dn[1]) / (2 * h), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("order", [1, 2])
def test_remainder_difference_is_the_taylor_remainder_in_v(order):
    """``D_i`` equals the remainder difference computed directly in ``v``-space with the
    row's explicit gradient and Hessian ``l'' a a'``; the proxy sums equal the sums of
    those per-row terms."""
    rng = np.random.default_rng(2)
    n, p = 40, 4
    A = rng.normal(size=(n, p))
    y = _y("bernoulli_logit", rng, n)
    v_hat, v, vp = (rng.normal(0, 0.4, p) for _ in range(3))
    eh, e, ep = A @ v_hat, A @ v, A @ vp
    D = remainder_difference("bernoulli_logit", y, {}, e, ep, eh, order)
    l, _, _ = row_loglik("bernoulli_logit", np.stack([e, ep]), y, {})
    _, d1, d2 = row_loglik("bernoulli_logit", eh, y, {})
    for i in range(n):
        g = d1[i] * A[i]
        H = d2[i] * np.outer(A[i], A[i])

        def taylor(x, g=g, H=H):
            u = x - v_hat
            return g @ u + (0.5 * u @ H @ u if order == 2 else 0.0)

        direct = -((l[1, i] - l[0, i]) - (taylor(vp) - taylor(v)))
        assert D[i] == pytest.approx(direct, abs=1e-12)
    G, H = predictor_sums("bernoulli_logit", y, {}, eh, A, 2)
    np.testing.assert_allclose(G, A.T @ d1)
    np.testing.assert_allclose(H, sum(d2[i] * np.outer(A[i], A[i]) for i in range(n)))


SCALE_FAMILIES = {
    "normal_scale": ({}, lambda e, s, y: stats.norm.logpdf(y, e, np.exp(s))),
    "student_t_scale": ({"nu": 4.0}, lambda e, s, y: stats.t.logpdf(y, 4.0, e, np.exp(s))),
}


@pytest.mark.parametrize("family", list(SCALE_FAMILIES))
def test_scale_row_loglik_matches_scipy_and_its_derivatives(family):
    """Rows with an unknown scale: differences of ``l`` equal SciPy's; the gradient and
    Hessian in ``(eta, s)`` equal central differences of SciPy's log density."""
    params, ref = SCALE_FAMILIES[family]
    rng = np.random.default_rng(11)
    e, s, y = rng.normal(0.3, 1.0, 40), rng.normal(0.0, 0.5, 40), rng.normal(0.0, 2.0, 40)
    l, ge, gs, hee, hes, hss = scale_row_loglik(family, e, s, y, params)
    l2 = scale_row_loglik(family, e + 0.3, s - 0.2, y, params)[0]
    np.testing.assert_allclose(l2 - l, ref(e + 0.3, s - 0.2, y) - ref(e, s, y), atol=1e-10)
    h = 1e-5
    np.testing.assert_allclose(ge, (ref(e + h, s, y) - ref(e - h, s, y)) / (2 * h), atol=1e-7)
    np.testing.assert_allclose(gs, (ref(e, s + h, y) - ref(e, s - h, y)) / (2 * h), atol=1e-7)
    up_e, dn_e = (scale_row_loglik(family, e + d, s, y, params) for d in (h, -h))
    up_s, dn_s = (scale_row_loglik(family, e, s + d, y, params) for d in (h, -h))
    np.testing.assert_allclose(hee, (up_e[1] - dn_e[1]) / (2 * h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(hes, (up_s[1] - dn_s[1]) / (2 * h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(hes, (up_e[2] - dn_e[2]) / (2 * h), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(hss, (up_s[2] - dn_s[2]) / (2 * h), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("order", [1, 2])
def test_scale_remainder_difference_is_the_joint_taylor_remainder(order):
    """With a log scale, ``D_i`` is the remainder of the joint Taylor expansion in
    ``(eta_i, s_i)``, both affine in ``v``: equal to the remainder computed directly in
    ``v`` with the row's gradient ``l_e a + l_s b`` and Hessian; the sums equal the sums
    of those terms. A proxy that drops the cross term ``l_es`` is caught."""
    rng = np.random.default_rng(12)
    n, p = 30, 4
    A, B = rng.normal(size=(n, p)), 0.3 * rng.normal(size=(n, p))
    y = rng.normal(0.0, 2.0, n)
    v_hat, v, vp = (rng.normal(0, 0.3, p) for _ in range(3))
    pts = [(A @ x, B @ x) for x in (v, vp, v_hat)]
    D = scale_remainder_difference("student_t_scale", y, {"nu": 4.0}, *pts, order)
    l0 = scale_row_loglik("student_t_scale", *pts[0], y, {"nu": 4.0})[0]
    l1 = scale_row_loglik("student_t_scale", *pts[1], y, {"nu": 4.0})[0]
    _, ge, gs, hee, hes, hss = scale_row_loglik("student_t_scale", *pts[2], y, {"nu": 4.0})
    G_all, H_all = np.zeros(p), np.zeros((p, p))
    for i in range(n):
        g = ge[i] * A[i] + gs[i] * B[i]
        H = (hee[i] * np.outer(A[i], A[i]) + hss[i] * np.outer(B[i], B[i])
             + hes[i] * (np.outer(A[i], B[i]) + np.outer(B[i], A[i])))
        G_all += g
        H_all += H

        def taylor(x, g=g, H=H):
            u = x - v_hat
            return g @ u + (0.5 * u @ H @ u if order == 2 else 0.0)

        direct = -((l1[i] - l0[i]) - (taylor(vp) - taylor(v)))
        assert D[i] == pytest.approx(direct, abs=1e-12)
        if order == 2:
            no_cross = H - hes[i] * (np.outer(A[i], B[i]) + np.outer(B[i], A[i]))
            wrong = -((l1[i] - l0[i]) - (taylor(vp, H=no_cross) - taylor(v, H=no_cross)))
            assert abs(wrong - D[i]) > 1e-8
    G, H = scale_sums("student_t_scale", y, {"nu": 4.0}, *pts[2], A, B, 2)
    np.testing.assert_allclose(G, G_all)
    np.testing.assert_allclose(H, H_all)


def _non_centred_normal(n=3000, groups=6, seed=13, per_group_sigma=False):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, n)
    x = rng.normal(1.0, 1.0, n)
    y = rng.normal(-0.3, 0.7, groups)[g] + 0.5 * x + rng.normal(0.0, 1.2, n)
    return hierarchical_normal(y, g, x, groups, per_group_sigma=per_group_sigma), g


@pytest.mark.parametrize("per_group_sigma", [False, True], ids=["sigma", "sigma[g]"])
def test_scalable_mh_samples_a_non_centred_model_with_unknown_scale(per_group_sigma):
    """A non-centred predictor with a sampled scale (one, or one per group): the log scale
    joins the predictor coordinates (``log sigma``, or ``log sigma`` lifted above the
    gather), the rows take path bounds in ``(eta, s)``; a short run checks every drawn
    row's bound (a violation would raise) and reads few rows. Exactness against NUTS:
    the slow ``test_scalable_mh_non_centred_hierarchical_is_exact[hierarchical_normal]``."""
    import pymc_subsample as pms

    model, g = _non_centred_normal(per_group_sigma=per_group_sigma)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the joint move's predictor coordinates (with one sigma the default is the
        # blocked sweep of the linear mixed model: tests/steps/test_hierarchical_normal.py)
        step = pms.ScalableMH(hierarchical="off")
    vmap = getattr(step.control, "vmap", None)
    assert vmap is not None and vmap.scale and isinstance(step.proposal, SurrogateHMC)
    assert vmap.size == 1 + 6 + (6 if per_group_sigma else 1)
    # the rows' log scale at theta_hat is the model's log sigma (of the row's group)
    q, eng = step.theta_hat, step.engine
    sizes = [int(np.prod(model.initial_point()[w.name].shape)) for w in eng.vars]
    at = {w.name: val for w, val in zip(eng.vars, np.split(q, np.cumsum(sizes)[:-1]))}
    rows = np.arange(0, 3000, 11)
    e, s = vmap.channels(vmap.v(q), eng.gather(rows))
    log_sigma = at["sigma_log__"][g[rows]] if per_group_sigma else np.full(rows.size, at[
        "sigma_log__"][0] if np.ndim(at["sigma_log__"]) else at["sigma_log__"])
    np.testing.assert_allclose(s, log_sigma, rtol=1e-10, atol=1e-12)
    assert vmap.check_affine(vmap.v(q)) and np.all(np.isfinite(e))
    idata = run_sample(model, step, draws=300, tune=300, chains=1, seed=14)
    st = sample_stats(idata)
    assert 0.5 < float(np.mean(st["accepted"].values)) <= 1.0
    assert float(np.mean(st["data_used"].values)) < 300
    assert np.isfinite(np.asarray(posterior(idata)["sigma"].values)).all()


def _non_centred(n=600, groups=6, seed=3):
    rng = np.random.default_rng(seed)
    g = rng.integers(0, groups, n)
    x = rng.normal(1.0, 1.0, n)
    a = rng.normal(-0.3, 0.7, groups)
    y = bernoulli_logit_draws(rng, a[g] + 0.5 * x)
    return hierarchical_logistic(y, g, x, groups), g, x


def test_predictor_map_of_a_non_centred_model():
    """The gather is lifted (``mu + tau * z[g] -> (mu + tau * z)[g]``): the coordinates
    are ``b`` and the group intercepts, the predictor is affine in them and equals the
    model's."""
    from pymc_subsample.engine import LikelihoodEngine
    from pymc_subsample.engine.glm import detect_glm, eta_is_affine
    from pymc_subsample.engine.predictor import predictor_map

    model, g, x = _non_centred()
    with model:
        eng = LikelihoodEngine()
    spec = detect_glm(model)
    q = eng.initial_q() + np.random.default_rng(4).normal(0, 0.3, eng.ndim)
    assert not eta_is_affine(eng, spec, q)
    vmap = predictor_map(eng, spec)
    assert vmap.size == 1 + 6
    v = vmap.v(q)
    sizes = [int(np.prod(model.initial_point()[w.name].shape)) for w in eng.vars]
    pt_map = {w.name: val for w, val in zip(eng.vars, np.split(q, np.cumsum(sizes)[:-1]))}
    mu, tau, z, b = (pt_map["mu"], np.exp(pt_map["tau_log__"]), pt_map["z"], pt_map["b"])
    assert sorted(np.round(v, 10)) == sorted(np.round(np.r_[b, mu + tau * z], 10))
    rows = np.arange(0, 600, 7)
    data = eng.gather(rows)
    expected = (mu + tau * z)[g[rows]] + b * x[rows]
    np.testing.assert_allclose(vmap.eta(v, data), np.ravel(expected), rtol=1e-12)
    assert vmap.check_affine(v)


def test_scalable_mh_samples_a_non_centred_model_without_violating_bounds():
    """A short run: predictor coordinates and the surrogate HMC are chosen by default,
    every drawn row's bound is checked (a violation would raise), few rows are read."""
    import pymc_subsample as pms

    model, _, _ = _non_centred(n=3000)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH(hierarchical="off")  # the joint move's machinery
    assert getattr(step.control, "vmap", None) is not None and isinstance(step.proposal, SurrogateHMC)
    idata = run_sample(model, step, draws=300, tune=300, chains=1, seed=5)
    st = sample_stats(idata)
    assert 0.5 < float(np.mean(st["accepted"].values)) <= 1.0
    assert float(np.mean(st["data_used"].values)) < 300
    assert np.isfinite(np.asarray(posterior(idata)["tau"].values)).all()


def test_a_predictor_not_affine_in_any_parameter_part_is_refused():
    import pymc as pm

    import pymc_subsample as pms

    rng = np.random.default_rng(6)
    x = rng.normal(size=200)
    with pm.Model():
        b = pm.Normal("b", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=pm.math.exp(b * x), observed=rng.integers(0, 2, 200))
        with pytest.raises(ValueError, match="affine neither"):
            pms.ScalableMH()


def test_surrogate_hmc_samples_a_gaussian_exactly_and_is_caught_without_its_ratio():
    """Used as an MH proposal with the exact target, the trajectory's ``log_ratio`` makes
    the kernel exact (mean and covariance of a correlated Gaussian within Monte Carlo
    error); ignoring the ratio with a coarse step is caught."""
    cov = np.array([[1.0, 0.8], [0.8, 1.0]])
    prec = np.linalg.inv(cov)

    def logp(q):
        return -0.5 * q @ prec @ q

    def run(use_ratio, h):
        prop = SurrogateHMC(step_size=h, path_length=2.0, adapt=False)
        prop.setup(2, grad_fn=lambda q: -prec @ q, cov=np.eye(2))
        rng = np.random.default_rng(7)
        q, out = np.zeros(2), []
        for _ in range(6000):
            qn, lr = prop.draw(q, rng)
            log_a = logp(qn) - logp(q) + (lr if use_ratio else 0.0)
            if np.log(rng.random()) < log_a:
                q = qn
            out.append(q)
        return np.array(out)

    draws = run(True, 0.5)
    for j in range(2):
        assert abs(draws[:, j].mean()) < 4 * mcse_mean(draws[:, j][None]) + 1e-3
    np.testing.assert_allclose(np.cov(draws.T), cov, atol=0.12)
    bad = run(False, 0.5)
    assert np.abs(np.cov(bad.T) - cov).max() > 0.12


def test_surrogate_hmc_adapts_its_mass_matrix_while_tuning():
    """Started with a whitening 100x off in one direction, tuning replaces it by the
    tuning states' covariance (within a factor 2 here) and keeps a usable step size;
    ``max_steps`` caps the trajectory."""
    sd = np.array([10.0, 0.1])

    def logp(q):
        return -0.5 * float(np.sum((q / sd) ** 2))

    prop = SurrogateHMC(path_length=2.0, max_steps=16)
    prop.setup(2, grad_fn=lambda q: -q / sd**2, cov=np.eye(2))
    rng = np.random.default_rng(8)
    q = np.zeros(2)
    for _ in range(700):
        qn, lr = prop.draw(q, rng)
        a = min(1.0, float(np.exp(min(0.0, logp(qn) - logp(q) + lr))))
        if rng.random() < a:
            q = qn
        prop.tune(a, q=q)
    prop.stop_tuning()
    var = np.diag(prop._mass.L @ prop._mass.L.T)
    assert np.all(var / sd**2 > 0.5) and np.all(var / sd**2 < 2.0), var
    assert 0.2 < prop.scaling <= 2.0
    with pytest.raises(ValueError, match="max_steps"):
        SurrogateHMC(max_steps=0)


def test_per_row_scale_keeps_the_bounds_in_q():
    """A Normal likelihood with a known scale per row is not covered by the predictor
    coordinates (one value for all rows); its predictor is affine in ``q``, so ScalableMH
    keeps the bounds there instead of refusing the model."""
    import pymc as pm

    import pymc_subsample as pms

    rng = np.random.default_rng(9)
    n = 2000
    X = rng.standard_normal((n, 2))
    s = rng.uniform(0.5, 2.0, n)
    y = X @ np.array([1.0, -1.0]) + s * rng.standard_normal(n)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 5.0, shape=2)
        pm.Normal("y", pm.math.dot(X, b), s, observed=y)
        step = pms.ScalableMH()
    assert getattr(step.control, "vmap", None) is None and step.region is not None
    idata = run_sample(model, step, draws=200, tune=200, chains=1, seed=10)
    assert float(np.mean(sample_stats(idata)["data_used"].values)) < 0.05 * n


def _glm(rng, n, coef, family, *, groups=None):
    """A GLM with an intercept ``a`` and coefficients ``b`` on standard-normal rows:
    ``bernoulli_logit``, ``normal_scale`` (unknown sigma) or ``non_centred`` (logistic
    with a group term ``tau * z[g]``)."""
    import pymc as pm

    X = rng.standard_normal((n, len(coef)))
    g = rng.integers(0, groups, n) if groups else None
    eta = X @ np.asarray(coef) + 0.3
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0, shape=len(coef))
        a = pm.Normal("a", 0.0, 2.0)
        lin = a + pm.math.dot(X, b)
        if family == "normal_scale":
            pm.Normal("y", lin, pm.HalfNormal("sigma", 2.0),
                      observed=eta + 1.5 * rng.standard_normal(n))
            return model
        if family == "non_centred":
            lin = lin + pm.HalfNormal("tau", 1.0) * pm.Normal("z", 0.0, 1.0, shape=groups)[g]
        y = (rng.random(n) < 1.0 / (1.0 + np.exp(-eta))).astype(np.int64)
        pm.Bernoulli("y", logit_p=lin, observed=y)
    return model


@pytest.mark.parametrize("family", ["bernoulli_logit", "normal_scale"])
def test_mode_search_in_predictor_coordinates_matches_the_engine(family):
    """On an ordinary GLM (predictor coordinates affine in ``q``) the mode search runs on
    the NumPy row terms (:class:`~pymc_subsample.engine.predictor.PredictorLikelihood`): the same
    mode and the same gradient and Hessian sums as with the engine's compiled Hessian,
    and ScalableMH's set-up compiles neither that Hessian nor the full-data gradient
    (their compilation dominated a first use)."""
    import pymc_subsample as pms
    from pymc_subsample.center import find_center
    from pymc_subsample.engine.glm import detect_glm
    from pymc_subsample.engine.predictor import PredictorLikelihood, affine_likelihood

    # above twice the warm start's rows: both phases run
    model = _glm(np.random.default_rng(15), 50_000, [0.5, -1.0, 0.25], family)
    from pymc_subsample.engine import LikelihoodEngine

    with model:
        eng = LikelihoodEngine()
    vmap, lik = affine_likelihood(eng, detect_glm(model), eng.initial_q())
    assert isinstance(lik, PredictorLikelihood)
    # the one batch-likelihood interface both back-ends implement
    from pymc_subsample.center import BatchLikelihood

    assert isinstance(eng, BatchLikelihood) and isinstance(lik, BatchLikelihood)
    assert not isinstance(vmap, BatchLikelihood)  # works in v, not q: not a back-end
    ours, ref = find_center(lik), find_center(eng)
    assert ours.converged and ref.converged
    # both stop within the Newton tolerance of the mode (different paths): 1% of an sd
    sd = np.sqrt(np.diag(ref.laplace()[1]))
    assert np.all(np.abs(ours.theta - ref.theta) < 0.01 * sd)
    # at the same point, the same sums
    _, g_ours, h_ours = lik.full_loglik_hessian(ref.theta)
    np.testing.assert_allclose(g_ours, ref.loglik_grad, rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(h_ours, ref.loglik_hess, rtol=1e-8)
    assert abs(lik.full_loglik(ref.theta + 0.1 * sd) - lik.full_loglik(ref.theta)
               - (eng.full_loglik(ref.theta + 0.1 * sd) - eng.full_loglik(ref.theta))) < 1e-6
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH()
    vmap = getattr(step.control, "vmap", None)
    assert vmap is not None and vmap.scale == (family == "normal_scale")
    compiled = {k if isinstance(k, str) else k[0] for k in step.engine._compiled}
    assert not compiled & {"sum_hess", "ll_sum_grad"}, compiled
    # ScalableMH stops at its centre's tolerance: a predicted gain below
    # SCALABLE_CENTER_TOL puts the centre within about sqrt(2 SCALABLE_CENTER_TOL) sds of
    # the mode (whitened norm)
    from pymc_subsample.steps.setup import SCALABLE_CENTER_TOL as tol

    assert np.all(np.abs(step.theta_hat - ref.theta) < 1.5 * np.sqrt(2 * tol) * sd)


@pytest.mark.parametrize("family", ["bernoulli_logit", "normal_scale", "non_centred"])
def test_full_data_fallback_needs_no_compile_in_the_draws(family):
    """ScalableMH's exact full-data test (truncation, or a point outside the region) is
    ready at construction, never compiled inside the draws: in predictor coordinates it
    sums the NumPy row terms chunk by chunk, equal to the engine's compiled differences
    (and -inf for a scale outside its support); with bounds in ``q`` the engine's
    function is compiled by the constructor."""
    import pymc_subsample as pms

    rng = np.random.default_rng(16)
    # more than one 65,536-row chunk
    model = _glm(rng, 70_000, [0.5, -1.0], family, groups=8)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH(hierarchical="off")  # the joint move's machinery
    assert getattr(step.control, "vmap", None) is not None
    compiled = {k if isinstance(k, str) else k[0] for k in step.engine._compiled}
    assert "ll_diff" not in compiled, compiled
    q = step.theta_hat
    for k in range(3):
        q_prop = q + rng.normal(0.0, 0.05, q.size)
        ours = step.full_loglik_diff(q, q_prop)
        ref = step.engine.full_loglik_diff(q, q_prop)
        assert abs(ours - ref) < 1e-7 * max(1.0, abs(ref)), (ours, ref)
    if family == "normal_scale":
        far = q.copy()
        point = model.initial_point()
        sizes = [np.size(point[v.name]) for v in step.engine.vars]
        names = [v.name for v in step.engine.vars]
        far[int(np.sum(sizes[:names.index("sigma_log__")]))] = -800.0  # exp(-800) == 0.0
        assert step.full_loglik_diff(q, far) == -np.inf


def test_full_data_fallback_compiled_at_construction_with_bounds_in_q():
    import pymc as pm

    import pymc_subsample as pms

    rng = np.random.default_rng(17)
    n = 2_000
    x = rng.standard_normal(n)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 2.0)
        pm.Bernoulli("y", logit_p=b * x, observed=(rng.random(n) < 0.5).astype(np.int64))
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH(bound_form="cornish")
    assert getattr(step.control, "vmap", None) is None
    compiled = {k if isinstance(k, str) else k[0] for k in step.engine._compiled}
    assert "ll_diff" in compiled, compiled


def test_proposal_kwargs_reach_the_default_surrogate_hmc():
    """The set-up decides the default proposal (SurrogateHMC on a curved predictor) before
    it is built, so ``proposal_kwargs`` reach it instead of being dropped; kwargs that do
    not fit the default are refused with a message that names it."""
    import pymc_subsample as pms

    model, _, _ = _non_centred()
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH(proposal_kwargs={"path_length": 2.5, "max_steps": 7})
        assert isinstance(step.proposal, SurrogateHMC)
        assert step.proposal.max_steps == 7
        with pytest.raises(TypeError, match="default proposal 'surrogate_hmc'"):
            pms.AustereMH(proposal_kwargs={"rho": 0.5})


def test_the_design_matrix_is_the_jacobian_only_for_eta_equal_to_x_beta():
    """``eta = X @ beta``: the Jacobian is ``X``'s chunk itself, read in place, and the
    predictors equal the graph's. With an intercept or an offset the graph's
    differences stay in use (no design found)."""
    import pymc as pm

    from pymc_subsample.engine import LikelihoodEngine
    from pymc_subsample.engine.glm import detect_glm
    from pymc_subsample.engine.predictor import predictor_map

    rng = np.random.default_rng(21)
    X = rng.normal(size=(3000, 3))
    y = (rng.random(3000) < 0.4).astype(np.int64)
    offset = rng.normal(size=3000)

    def build(form):
        with pm.Model() as m:
            b = pm.Normal("b", 0, 1, shape=3)
            eta = {"plain": lambda: X @ b, "intercept": lambda: pm.Normal("a", 0, 1) + X @ b,
                   "offset": lambda: offset + X @ b}[form]()
            pm.Bernoulli("y", logit_p=eta, observed=y)
        with m:
            eng = LikelihoodEngine()
        return eng, predictor_map(eng, detect_glm(m))

    eng, vmap = build("plain")
    assert vmap.design_index() is not None
    data = eng.gather_slice(100, 900)
    v = rng.normal(size=vmap.size)
    base, J = vmap.jacobian(v, data)
    assert np.shares_memory(J, data[vmap.design_index()]) or np.array_equal(J, X[100:900])
    vmap._design = -1  # the graph's differences, for comparison
    base_g, J_g = vmap.jacobian(v, data)
    np.testing.assert_allclose(J, J_g, atol=1e-12)
    np.testing.assert_allclose(base, base_g, rtol=1e-12, atol=1e-12)
    for form in ("intercept", "offset"):
        assert build(form)[1].design_index() is None, form
    # with the design found, the rows' predictors at several points are X's rows times
    # them, as the graph vectorised over v computes them; that graph is then never
    # compiled (LazyFunction), unless asked for
    _, vmap = build("plain")
    assert vmap.design_index() is not None and not vmap._stack_fn.built
    points = rng.normal(size=(2, vmap.size))
    fast = vmap.channels_at(points, data)
    assert not vmap._stack_fn.built
    k, vmap._design = vmap._design, -1
    np.testing.assert_allclose(fast, vmap.channels_at(points, data), rtol=1e-12, atol=1e-12)
    assert vmap._stack_fn.built
    np.testing.assert_allclose(vmap.channels(points[0], data), fast[0], rtol=1e-12,
                               atol=1e-12)


def test_the_predictor_map_pickles_with_its_stacked_function():
    """A spawned worker cannot build the stacked function (its builder is a closure over
    graphs): a map without a design matrix builds it before pickling (cloudpickle, as
    PyMC pickles a step for its workers), and the copy evaluates the same predictors;
    with the design it pickles unbuilt and uses X."""
    import cloudpickle
    import pymc as pm

    from pymc_subsample.engine import LikelihoodEngine
    from pymc_subsample.engine.glm import detect_glm
    from pymc_subsample.engine.predictor import predictor_map

    rng = np.random.default_rng(4)
    X = rng.normal(size=(500, 2))
    y = (rng.random(500) < 0.5).astype(np.int64)
    for intercept in (True, False):
        with pm.Model() as m:
            b = pm.Normal("b", 0, 1, shape=2)
            eta = X @ b + (pm.Normal("a", 0, 1) if intercept else 0.0)
            pm.Bernoulli("y", logit_p=eta, observed=y)
        with m:
            eng = LikelihoodEngine()
        vmap = predictor_map(eng, detect_glm(m))
        assert (vmap.design_index() is None) == intercept
        data = eng.gather_slice(0, 50)
        points = rng.normal(size=(3, vmap.size))
        copy = cloudpickle.loads(cloudpickle.dumps(vmap))
        assert (copy._stack_fn.get() is not None) == intercept
        np.testing.assert_allclose(copy.channels_at(points, data),
                                   vmap.channels_at(points, data), rtol=1e-12, atol=1e-12)
