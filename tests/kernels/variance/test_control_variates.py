"""The control-variate layer: the pure kernel, the engine's Taylor terms, the centre
search, and the behaviour of AustereMH / BarkerMinibatch / ScalableMH built on them."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.center import find_center
from pymc_subsample.diagnostics import audit_summary
from pymc_subsample.engine import LikelihoodEngine
from pymc_subsample.kernels.variance.control_variates import (
    StoredGradients,
    TaylorProxy,
    VarianceCheck,
    importance_weights,
    residuals,
)
from pymc_subsample.testing import mcse_mean, posterior, sample_stats
from tests.conftest import (
    REPO,
    hierarchical_logistic,
    make_logistic_model,
    run_sample,
    sampler_warnings,
)

SEED = 20261123


# ---------------------------------------------------------------------- pure kernel


def _logistic_rows(n=300, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (rng.random(n) < 0.5).astype(float)

    def ll(theta):  # per-row log-likelihood
        eta = X @ theta
        return y * eta - np.logaddexp(0.0, eta)

    def grad(theta):
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        return (y - p)[:, None] * X

    def hess(theta):
        p = 1.0 / (1.0 + np.exp(-(X @ theta)))
        return -(p * (1 - p))[:, None, None] * X[:, :, None] * X[:, None, :]

    return ll, grad, hess, d


@pytest.mark.parametrize("order", [1, 2])
def test_identity_closed_form_plus_residuals_is_the_full_sum(order):
    """sum_i l_i = proxy.sum_diff + sum_i r_i exactly, for any pair (not only near c)."""
    ll, grad, hess, d = _logistic_rows()
    rng = np.random.default_rng(1)
    c = rng.normal(size=d) * 0.2
    g, H = grad(c), hess(c)
    proxy = TaylorProxy(c, g.sum(0), H.sum(0) if order == 2 else None, order)
    for _ in range(5):
        q, qp = rng.normal(size=d), rng.normal(size=d)
        u, w = qp - q, (qp - c) + (q - c)
        terms = [ll(qp) - ll(q), g @ u]
        if order == 2:
            terms.append(np.einsum("j,njk,k->n", u, H, w))
        r = residuals(np.array(terms))
        assert proxy.sum_diff(q, qp) + r.sum() == pytest.approx((ll(qp) - ll(q)).sum(), rel=1e-12)


def test_residuals_shrink_near_the_centre():
    """Order 2 residuals are O(|u| |d|^2), order 1 O(|u| |d|), plain l_i O(|u|)."""
    ll, grad, hess, d = _logistic_rows(n=2000)
    c = np.full(d, 0.5)  # not 0: there the softplus's third derivative vanishes
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=d), rng.normal(size=d)
    sds = {}
    for scale in (0.1, 0.01):
        q, qp = c + scale * a, c + scale * b
        u, w = qp - q, (qp - c) + (q - c)
        l = ll(qp) - ll(q)
        gu = grad(c) @ u
        uhw = np.einsum("j,njk,k->n", u, hess(c), w)
        sds[scale] = [l.std(), residuals(np.array([l, gu])).std(),
                      residuals(np.array([l, gu, uhw])).std()]
    plain, o1, o2 = (sds[0.1][i] / sds[0.01][i] for i in range(3))
    assert 7 < plain < 14 and 70 < o1 < 140 and 700 < o2 < 1400


def test_variance_check_verdicts():
    chk = VarianceCheck(min_steps=3)
    rng = np.random.default_rng(0)
    for _ in range(2):
        chk.add(rng.normal(size=50), 0.1 * rng.normal(size=50))
    assert chk.verdict() is None  # too early
    chk.add(rng.normal(size=50), 0.1 * rng.normal(size=50))
    assert chk.verdict() is True and chk.ratio < 0.1
    chk.reset()
    for _ in range(3):
        chk.add(rng.normal(size=50), 3 * rng.normal(size=50))
    assert chk.verdict() is False and chk.ratio > 1


def test_kernel_imports_no_pymc():
    code = (
        "import sys, importlib.util\n"
        "spec = importlib.util.spec_from_file_location('cv', "
        "'pymc_subsample/kernels/variance/control_variates.py')\n"
        "mod = importlib.util.module_from_spec(spec); sys.modules['cv'] = mod\n"
        "spec.loader.exec_module(mod)\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pymc', 'pytensor')]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ---------------------------------------------------------------------- engine and centre


@pytest.fixture(scope="module")
def grouped():
    """Hierarchical logistic regression with a group index and a non-centred effect."""
    rng = np.random.default_rng(3)
    n, k = 600, 4
    g = rng.integers(0, k, n)
    x = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-(0.5 * x + rng.normal(size=k)[g])))).astype(int)
    return hierarchical_logistic(y, g, x, k)


@pytest.mark.parametrize("order", [1, 2])
def test_engine_taylor_terms_match_per_row_derivatives(grouped, order):
    eng = LikelihoodEngine(grouped)
    rng = np.random.default_rng(4)
    c = eng.initial_q() + 0.3 * rng.normal(size=eng.ndim)
    q, qp = c + 0.1 * rng.normal(size=eng.ndim), c + 0.1 * rng.normal(size=eng.ndim)
    rows = np.arange(0, 600, 7)
    t = eng.loglik_diff_taylor(q, qp, c, rows, order)
    assert t.shape == (order + 1, rows.size)
    _, g, h = eng.loglik_rows_hessian(c, rows)
    u, w = qp - q, (qp - c) + (q - c)
    np.testing.assert_allclose(t[0], eng.loglik_diff(q, qp, rows), atol=1e-12)
    np.testing.assert_allclose(t[1], g @ u, atol=1e-10)
    if order == 2:
        np.testing.assert_allclose(t[2], np.einsum("j,njk,k->n", u, h, w), atol=1e-10)
    # and the identity on all rows, with the engine's full-data sums
    centre = find_center(eng, start=c, max_iter=0)  # no search: L-BFGS fallback from c
    full = eng.full_loglik_diff(q, qp)
    proxy = centre.proxy(order)
    r = residuals(eng.loglik_diff_taylor(q, qp, proxy.center, np.arange(eng.n_rows), order))
    assert proxy.sum_diff(q, qp) + r.sum() == pytest.approx(full, rel=1e-9, abs=1e-9)


def test_newton_centre_is_the_mode_in_few_passes():
    model = make_logistic_model(20_000, 5, prior_sd=1, matmul=True)
    eng = LikelihoodEngine(model)
    c = find_center(eng)
    assert c.method == "newton" and c.converged
    assert c.n_passes <= 20
    grad = c.loglik_grad + c.prior_grad
    hess = -(c.loglik_hess + c.prior_hess)
    assert 0.5 * grad @ np.linalg.solve(hess, grad) < 1e-9  # the Newton decrement
    # the Laplace mean at the mode is the mode
    mean, cov = c.laplace()
    np.testing.assert_allclose(mean, c.theta, atol=1e-8)
    assert np.all(np.linalg.eigvalsh(cov) > 0)


def test_flat_prior_centre_and_gradients():
    """pm.Flat / pm.HalfFlat priors have no gradient: handled as zero, not a crash."""
    x = np.random.default_rng(5).normal(2.0, 1.0, 500)
    with pm.Model() as model:
        theta = pm.Flat("theta")
        pm.Normal("y", theta, 1.0, observed=x)
    eng = LikelihoodEngine(model)
    assert eng.prior_and_grad(np.array([0.3]))[1].tolist() == [0.0]
    c = find_center(eng)
    assert c.theta[0] == pytest.approx(x.mean(), abs=1e-9)


# ---------------------------------------------------------------------- steps


def _flat_models():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(800, 2))
    y = x @ np.array([1.0, -0.5]) + rng.normal(0, 0.8, 800)
    with pm.Model() as regression:  # Flat coefficients, HalfFlat scale
        b = pm.Flat("b", shape=2)
        s = pm.HalfFlat("s")
        pm.Normal("y", x @ b, s, observed=y)
    obs = rng.normal(1.0, 1.0, 800)
    with pm.Model() as location:  # known scale
        t = pm.Flat("t")
        pm.Normal("y", t, 1.0, observed=obs)
    return regression, location, obs


@pytest.mark.parametrize("cls", ["AustereMH", "BarkerMinibatch", "ScalableMH"])
def test_flat_priors_sample(cls):
    regression, location, obs = _flat_models()
    for model in (regression, location) if cls == "ScalableMH" else (regression,):
        with model:
            step = getattr(pms, cls)()
        idata = run_sample(model, step, draws=400, tune=300, chains=1, seed=SEED)
        if model is location:
            t = posterior(idata)["t"].values.ravel()
            assert abs(t.mean() - obs.mean()) < 4 * mcse_mean(t[None]) + 0.05 / math.sqrt(800)
        else:  # unknown scale (HalfFlat): ScalableMH's two-parameter bounds
            s = posterior(idata)["s"].values.ravel()
            assert 0.7 < s.mean() < 0.9


@pytest.fixture(scope="module")
def worst_case():
    """Seita et al. 2017, Sec. 2.2: Gaussian mean, flat prior, N = 2 x 10^5."""
    n = 200_000
    x = np.random.default_rng(2017).normal(0.3, 1.0, n)
    with pm.Model() as model:
        theta = pm.Flat("theta")
        pm.Normal("x", theta, 1.0, observed=x)
    return model, x


@pytest.mark.parametrize("cls", ["AustereMH", "BarkerMinibatch"])
def test_seita_worst_case_decides_on_the_first_batch(worst_case, cls):
    """Proposal sd 1/sqrt(N): the plain test needs most of the data (Sec 2.2); with the
    control variates every decision is taken on the first batch and the draws match the
    exact posterior N(xbar, 1/N)."""
    model, x = worst_case
    n = x.size
    sd = 1.0 / math.sqrt(n)
    with model:
        step = getattr(pms, cls)(proposal="random_walk", scaling=sd, tune=False)
    idata = run_sample(model, step, draws=3000, tune=0, chains=2, seed=SEED,
                       initvals={"theta": float(x.mean())})
    used = sample_stats(idata)["data_used"].values
    assert np.all(used == step.steps_per_draw * step.batch_size), np.unique(used)
    th = posterior(idata)["theta"].values
    err = abs(th.mean() - x.mean())
    assert err < 4 * mcse_mean(th), (err / sd, mcse_mean(th) / sd)
    assert abs(th.std() / sd - 1) < 0.1
    # the papers' plain test on the same proposals reads far more
    with model:
        plain = getattr(pms, cls)(proposal="random_walk", scaling=sd, tune=False,
                                  control_variate=0)
    idata0 = run_sample(model, plain, draws=100, tune=0, chains=1, seed=SEED,
                        initvals={"theta": float(x.mean())})
    assert sample_stats(idata0)["data_used"].values.mean() > 20 * step.batch_size


@pytest.fixture(scope="module")
def logit_small():
    return make_logistic_model(5000, 3, prior_sd=1, matmul=True)


@pytest.mark.parametrize("cls", ["AustereMH", "BarkerMinibatch"])
def test_audit_agrees_with_the_exact_decisions(logit_small, cls):
    with logit_small:
        step = getattr(pms, cls)(audit=0.25)
    idata = run_sample(logit_small, step, draws=400, tune=200, chains=2, seed=SEED)
    st = sample_stats(idata)
    assert st["cv_active"].values.all()
    audited = np.isfinite(st["audit"].values)
    share = 1 - 0.75 ** step.steps_per_draw  # a draw is audited if one transition was
    assert share - 0.1 < audited.mean() < share + 0.1
    summ = audit_summary(idata)
    assert summ.loc["all", "n_audited"] == audited.sum()
    assert summ.loc["all", "disagreement"] <= 0.02


class _AcceptAll(pms.AustereMH):
    """A deliberately broken sampler: accepts every proposal, whatever the test says."""

    def _run_test(self, terms_fn, log_ratio_o1, exact_sum):
        res, stats = super()._run_test(terms_fn, log_ratio_o1, exact_sum)
        return dataclasses.replace(res, accept=True), stats


def test_audit_catches_a_broken_sampler(logit_small):
    with logit_small:
        step = _AcceptAll(audit=0.5, proposal="random_walk", scaling=0.2, tune=False)
    idata = run_sample(logit_small, step, draws=200, tune=0, chains=1, seed=SEED)
    summ = audit_summary(idata)
    assert summ.loc["all", "disagreement"] > 0.3


def test_settings_and_errors(logit_small):
    with logit_small:
        with pytest.raises(ValueError, match="control_variate must be"):
            pms.AustereMH(control_variate=3)
        with pytest.raises(ValueError, match="control_variate must be"):
            pms.BarkerMinibatch(control_variate=True)
        with pytest.raises(ValueError, match="needs control_variate=1 or 2"):
            pms.AustereMH(control_variate=0, center=np.zeros(3))
        with pytest.raises(ValueError, match="audit must be"):
            pms.BarkerMinibatch(audit=1.5)
        with pytest.raises(ValueError, match="center must give 3"):
            pms.AustereMH(center=np.zeros(2))
        step = pms.AustereMH(control_variate=1)
        assert type(step.proposal).__name__ == "PreconditionedRandomWalk"
        assert type(pms.AustereMH().proposal).__name__ == "PCN"
        assert type(pms.AustereMH(control_variate=0).proposal).__name__ == "RandomWalk"
        assert type(pms.AustereMH(scaling=0.1).proposal).__name__ == "RandomWalk"


def test_explicit_control_variates_refused_beside_another_step():
    x = np.random.default_rng(7).normal(size=300)
    with pm.Model():
        mu = pm.Normal("mu", 0, 10)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", mu, sigma, observed=x)
        with pytest.raises(ValueError, match="'sigma' is sampled by another step"):
            pms.BarkerMinibatch([mu], control_variate=2)
        with pytest.warns(UserWarning, match="control variates are off"):
            step = pms.AustereMH([mu])
        assert step.cv.name == "none" and step.center is None and step.control.setting == 0


def test_falls_back_to_plain_differences_when_the_proxy_does_not_help(logit_small, monkeypatch):
    """When the variance check's verdict at the end of tuning is that the residuals vary
    more than the plain differences, the chain drops the control variates and says so."""
    monkeypatch.setattr(VarianceCheck, "verdict", lambda self: False)
    with logit_small:
        step = pms.AustereMH()
    idata = run_sample(logit_small, step, draws=50, tune=200, chains=1, seed=SEED,
                       keep_warning_stat=True)
    st = sample_stats(idata)
    assert not st["cv_active"].values.any()
    assert len(sampler_warnings(idata, "falls back to plain differences")[0]) == 1


def test_recenter_and_seeds_cores_1_and_2(logit_small):
    with logit_small:
        step = pms.BarkerMinibatch(recenter=True)
    runs = [run_sample(logit_small, step, draws=100, tune=150, chains=2, seed=SEED, cores=c)
            for c in (1, 2)]
    a, b = (posterior(r)["b"].values for r in runs)
    np.testing.assert_array_equal(a, b)
    assert step.center is not None and step.control.taylor_order == 2


def test_austere_reports_the_whole_test_error_and_designs(logit_small):
    with logit_small:
        plain = pms.AustereMH(control_variate=0, batch_size=100)
        designed = pms.AustereMH(max_error=0.05)
    assert designed.design is not None and designed.design.error <= 0.05
    assert (designed.epsilon, designed.batch_size) == (
        designed.design.epsilon, designed.design.batch_size)
    e_plain = sample_stats(run_sample(logit_small, plain, draws=150, tune=100, chains=1,
                                      seed=SEED))["test_error"].values
    with logit_small:
        cv = pms.AustereMH(batch_size=100)
    e_cv = sample_stats(run_sample(logit_small, cv, draws=150, tune=100, chains=1,
                                   seed=SEED))["test_error"].values
    assert np.all((e_plain >= 0) & (e_plain <= 0.5)) and np.all((e_cv >= 0) & (e_cv <= 0.5))
    # control variates make the standardised mean large: the whole test is almost exact
    assert e_cv.mean() < 0.01 < e_plain.mean()


def test_barker_reports_lemma3_beside_its_estimate(logit_small):
    with logit_small:
        step = pms.BarkerMinibatch(control_variate=0, temperature=50.0)
    st = sample_stats(run_sample(logit_small, step, draws=100, tune=50, chains=1, seed=SEED))
    approx = ~st["exact"].values
    assert approx.any()
    assert np.all(st["lemma3_error"].values[approx] >= 6.4 / np.sqrt(
        st["data_used"].values[approx]) * 0.9)
    assert np.all(st["clt_error"].values[approx] <= 0.01)


# ---------------------------------------------------------------------- El hanchi's options


def test_stored_gradients_keep_their_sum_and_reset():
    rng = np.random.default_rng(8)
    g0 = rng.normal(size=(50, 3))
    sg = StoredGradients(g0)
    rows = np.array([1, 7, 9])
    new = rng.normal(size=(3, 3))
    sg.update(rows, new)
    expect = g0.copy()
    expect[rows] = new
    np.testing.assert_allclose(sg.total, expect.sum(0), atol=1e-12)
    q, qp = rng.normal(size=3), rng.normal(size=3)
    l = rng.normal(size=50)
    r = sg.residuals(l[rows], rows, q, qp)
    np.testing.assert_allclose(r, l[rows] - new @ (qp - q))
    # the identity: S . u + sum of all residuals = sum of l
    assert sg.sum_diff(q, qp) + sg.residuals(l, np.arange(50), q, qp).sum() == pytest.approx(l.sum())
    sg.reset()
    np.testing.assert_array_equal(sg.h, g0)


def test_importance_sampled_terms_are_unbiased():
    """mean of t_i / (N p_i) over i.i.d. rows from p estimates (1/N) sum t_i."""
    from pymc_subsample.kernels.sampling.rows import ImportanceSampler
    from pymc_subsample.kernels.sampling.alias import AliasTable

    rng = np.random.default_rng(9)
    n = 400
    g, g2 = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    w = importance_weights(g, g2)
    assert np.all(w > 0)
    t = np.linalg.norm(g, axis=1) * rng.choice([-1, 1], n) + 0.3
    s = ImportanceSampler(AliasTable(w), rng)
    rows = s.draw(200_000)
    assert s.n_drawn == 200_000 and s.drawn().size == 200_000
    z = t[rows] / (n * s.probs[rows])
    se = z.std() / math.sqrt(z.size)
    assert abs(z.mean() - t.mean()) < 4 * se
    # importance sampling with weights tracking |t| beats uniform sampling here
    assert z.var() < t.var()


def test_austere_kernel_iid_mode_takes_the_exact_sum_at_n_draws():
    from pymc_subsample.kernels.acceptance.austere import austere_test
    from pymc_subsample.kernels.sampling.rows import ImportanceSampler
    from pymc_subsample.kernels.sampling.alias import AliasTable

    rng = np.random.default_rng(10)
    l = rng.normal(0, 1, 300)
    calls = []

    def exact():
        calls.append(1)
        return float(l.sum())

    s = ImportanceSampler(AliasTable(np.ones(300)), rng)
    res = austere_test(rng, lambda rows: l[rows], 300, 0.0, epsilon=1e-9, batch_size=100,
                       sampler=s, fpc=False, exact_sum=exact)
    assert res.exact and res.data_used == 300 and calls == [1]
    assert res.accept == (res.log_u < l.sum())


@pytest.mark.parametrize("kw", [dict(control_variate="saga"),
                                dict(control_variate=0, sampling="importance"),
                                dict(control_variate="saga", sampling="importance")],
                         ids=["saga", "importance", "is-saga"])
def test_el_hanchi_options_sample(logit_small, kw):
    with logit_small:
        step = pms.AustereMH(**kw)
    idata = run_sample(logit_small, step, draws=300, tune=300, chains=1, seed=SEED)
    st = sample_stats(idata)
    used = st["data_used"].values
    assert used.mean() < 5000 * 0.6
    b = posterior(idata)["b"].values.reshape(-1, 3)
    with logit_small:
        c = find_center(pms.AustereMH(control_variate=0).engine)
    mean, cov = c.laplace()
    assert np.all(np.abs(b.mean(0) - mean) < 1.0 * np.sqrt(np.diag(cov)))


def test_el_hanchi_options_refused_where_they_do_not_apply(logit_small):
    with logit_small:
        with pytest.raises(ValueError, match="sampling='importance' is AustereMH's"):
            pms.BarkerMinibatch(sampling="importance")
        with pytest.raises(ValueError, match="sampling must be"):
            pms.AustereMH(sampling="stratified")
        old = pms.AustereMH.SAGA_MEMORY
        try:
            pms.AustereMH.SAGA_MEMORY = 1000
            with pytest.raises(MemoryError, match="control_variate=2"):
                pms.AustereMH(control_variate="saga")
        finally:
            pms.AustereMH.SAGA_MEMORY = old


def test_random_walk_starts_from_the_laplace_covariance(logit_small):
    """proposal="random_walk" with control variates: the Laplace covariance scaled by
    2.38^2 / d (then Haario's adaptation with adapt_covariance=True)."""
    with logit_small:
        step = pms.AustereMH(proposal="random_walk", proposal_kwargs={"adapt_covariance": True})
    _, cov = step.center.laplace()
    np.testing.assert_allclose(step.proposal.proposal_cov, 2.38**2 / 3 * cov, rtol=1e-10)
    idata = run_sample(logit_small, step, draws=300, tune=400, chains=1, seed=SEED)
    assert 0.1 < sample_stats(idata)["accepted"].values.mean() < 0.6


def test_warns_when_the_laplace_fit_is_poor(logit_small):
    """A centre far from the posterior: the chain's tuning mean lies many Laplace sds away
    and the step says so (and stays quiet on the same model with the default centre)."""
    with logit_small:
        good = pms.AustereMH()
        far = pms.AustereMH(center=good.center.theta + 1.0, init="model", proposal="random_walk")
    msgs = []
    for step in (good, far):
        idata = run_sample(logit_small, step, draws=20, tune=300, chains=1, seed=SEED,
                           keep_warning_stat=True)
        msgs.append(sampler_warnings(idata, "Laplace sds")[0])
    assert msgs[0] == [] and len(msgs[1]) == 1, msgs
