"""Tests of the ScalableMH step method (``pymc_subsample.steps.scalable``).

Cornish et al. (2019), "Scalable Metropolis-Hastings for Exact Bayesian Inference with
Large Datasets". What is checked:

* exactness: ScalableMH's marginals (order 2 and order 1) match a reference posterior within
  Monte Carlo error: on a logistic regression (N = 10^4) an importance-sampling reference
  (fast tests) and a long NUTS run (slow tests); on a Normal regression with known sigma the
  exact Gaussian posterior (and order 2 then reads no rows at all);
* the bounds ``lambda_i <= phi * psi_i`` on every row for random pairs, through the step's own
  remainder function, and the identity that makes the factorisation exact
  (``sum_i R_i`` + the Taylor part = the full log-likelihood ratio);
* wrong bounds stop the sampler (``BoundViolationError``), ``bounds=`` as "auto"
  (Bernoulli-logit, Student-t), callable and array, and the refusals of "auto";
* rows read per step fall with N for order 2; sample stats; truncation (TFMH fallbacks);
  ``mode=``; cores=1 vs cores=2 and ``CompoundStep`` beside NUTS.

Statistical checks use fixed seeds. Tolerances are ``Z_TOL`` Monte Carlo standard errors
(batch means within chains for MCMC, the delta-method standard error for importance
sampling), about a 1e-4 two-sided chance per check for a correct sampler at a random seed.
Module fixtures share the models and step objects (PyTensor compilation dominates).
"""

from __future__ import annotations

import dataclasses

import math

import numpy as np
import pymc as pm
import pytest
import scipy.optimize
from scipy import stats

import pymc_subsample as pms
from pymc_subsample.kernels.scalable.phi import path_phi, taylor_phi, whitened_phi
from pymc_subsample.kernels.scalable.thinning import BoundViolationError

from pymc_subsample.testing import batch_means_ess, batch_means_se, posterior, sample_stats
from tests.conftest import bernoulli_logit_draws, logistic_data, logistic_model, run_sample

Z_TOL = 4.5
N_BATCHES = 10  # batch means within chains (the Monte Carlo standard errors of this module)
N_LOGIT = 10_000
SEED = 20190601


# ====================================================================== utilities


def _start(step):
    """``initvals`` at the step's ``theta_hat`` (the paper starts its chains there).

    From PyMC's default start (zeros), far out in the tails of a posterior concentrated at
    N = 10^4, a pCN proposal can stall (its reference Gaussian decays faster than a
    heavy-tailed posterior) and the fallback rule makes every early step O(N).
    """
    out, i = {}, 0
    point = step.engine.model.initial_point()
    for v in step.engine.vars:
        shape = np.shape(point[v.name])
        size = int(np.prod(shape, dtype=int))
        out[v.name] = step.theta_hat[i : i + size].reshape(shape)
        i += size
    return out


def _sample(model, step, *, draws, tune, chains=2, cores=1, seed=SEED, start=None, **kw):
    if start is not None:
        kw["initvals"] = _start(start)
    return run_sample(model, step, draws=draws, tune=tune, chains=chains, cores=cores,
                      seed=seed, **kw)


def _draws(idata, names):
    """(chains, draws, d) array of the named variables, concatenated along the last axis."""
    post = posterior(idata)
    parts = []
    for n in names:
        v = np.asarray(post[n].values, dtype=float)
        parts.append(v.reshape(v.shape[0], v.shape[1], -1))
    return np.concatenate(parts, axis=-1)


def _mcse(x):
    """Standard error of the mean of ``x`` (chains, draws) by batch means within chains."""
    return batch_means_se(x, N_BATCHES)


def _ess(x):
    """Effective sample size of the mean of ``x`` (chains, draws) from batch means."""
    return batch_means_ess(x, N_BATCHES)


def _draws_reference(draws):
    """A reference for :func:`assert_matches` from MCMC draws ``(chains, n, d)``: the mean
    and centred second moment of every coordinate, with their batch-means errors."""
    mean = draws.mean(axis=(0, 1))
    d = draws.shape[-1]
    return {
        "mean": mean,
        "var": ((draws - mean) ** 2).mean(axis=(0, 1)),
        "mean_se": np.array([_mcse(draws[..., j]) for j in range(d)]),
        "var_se": np.array([_mcse((draws[..., j] - mean[j]) ** 2) for j in range(d)]),
    }


def assert_matches(draws, ref, *, label=""):
    """Mean and centred second moment of every coordinate within ``Z_TOL`` standard errors.

    ``draws``: (chains, n, d); ``ref``: dict with ``mean``, ``var`` and their standard
    errors ``mean_se``, ``var_se`` (0 for an exact reference). The second moment is taken
    about the reference mean, ``E[(x - m_ref)^2]``, whose reference value is ``var``.
    """
    d = draws.shape[-1]
    for j in range(d):
        x = draws[..., j]
        m, se_m = x.mean(), _mcse(x)
        z = (m - ref["mean"][j]) / math.hypot(se_m, ref["mean_se"][j])
        c2 = (x - ref["mean"][j]) ** 2
        v, se_v = c2.mean(), _mcse(c2)
        zv = (v - ref["var"][j]) / math.hypot(se_v, ref["var_se"][j])
        assert abs(z) < Z_TOL, (
            f"{label} coordinate {j}: mean {m:.6g} vs reference {ref['mean'][j]:.6g} "
            f"(z = {z:.2f}, mcse {se_m:.3g})"
        )
        assert abs(zv) < Z_TOL, (
            f"{label} coordinate {j}: E(x - m)^2 {v:.6g} vs reference variance "
            f"{ref['var'][j]:.6g} (z = {zv:.2f}, mcse {se_v:.3g})"
        )


def _one_blas_thread():
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        import contextlib

        return contextlib.nullcontext()
    return threadpool_limits(1)


def _is_reference(log_target, mode, cov, rng, n=10_000, df=8.0, chunk=500):
    """Self-normalised importance sampling from a multivariate t around the Laplace fit.

    Returns the reference dict of :func:`assert_matches` (delta-method standard errors)
    and the effective sample size of the weights.
    """
    d = mode.size
    L = np.linalg.cholesky(cov * 1.2)
    z = rng.standard_normal((n, d))
    w = rng.chisquare(df, size=n) / df
    x = mode + (z @ L.T) / np.sqrt(w)[:, None]
    logq = stats.multivariate_t(loc=mode, shape=cov * 1.2, df=df).logpdf(x)
    with _one_blas_thread():  # multithreaded BLAS spins on a busy 2-core CI machine
        logp = np.concatenate([log_target(x[s : s + chunk]) for s in range(0, n, chunk)])
    lw = logp - logq
    wt = np.exp(lw - lw.max())
    wt /= wt.sum()
    mean = wt @ x
    c2 = (x - mean) ** 2
    var = wt @ c2
    mean_se = np.sqrt(wt**2 @ (x - mean) ** 2)
    var_se = np.sqrt(wt**2 @ (c2 - var) ** 2)
    ess = 1.0 / float(wt @ wt)
    return {"mean": mean, "var": var, "mean_se": mean_se, "var_se": var_se}, ess


# ====================================================================== logistic regression


class LogitProblem:
    """Logistic regression with an intercept, ``eta = a + X @ b``, and its references."""

    def __init__(self, n=N_LOGIT, seed=1):
        self.n = n
        self.X, self.y = logistic_data(np.random.default_rng(seed), n, [0.8, -0.5], intercept=0.3)
        self.prior_sd = 5.0
        self.model = self.build()
        self._steps = {}
        self._ref = None

    def build(self, extra=None):
        with pm.Model() as model:
            a = pm.Normal("a", 0.0, self.prior_sd)
            b = pm.Normal("b", 0.0, self.prior_sd, shape=2)
            if extra is not None:
                extra()
            pm.Bernoulli("y", logit_p=a + pm.math.dot(self.X, b), observed=self.y)
        return model

    # q = (a, b0, b1): the step's raveled space (both unconstrained)
    def design(self):
        return np.column_stack([np.ones(self.n), self.X])

    def log_post(self, Q):
        """Log posterior (up to a constant) at the rows of ``Q`` (k, 3)."""
        eta = Q @ self.design().T  # (k, N)
        ll = (eta * self.y).sum(axis=1) - np.logaddexp(0.0, eta).sum(axis=1)
        return ll - 0.5 * (Q**2).sum(axis=1) / self.prior_sd**2

    def laplace(self):
        Z = self.design()

        def f(q):
            eta = Z @ q
            p = 1.0 / (1.0 + np.exp(-eta))
            val = -(eta @ self.y - np.logaddexp(0.0, eta).sum()) + 0.5 * q @ q / self.prior_sd**2
            return val, -(Z.T @ (self.y - p)) + q / self.prior_sd**2

        res = scipy.optimize.minimize(f, np.zeros(3), jac=True, method="BFGS", options={"gtol": 1e-10})
        p = 1.0 / (1.0 + np.exp(-(Z @ res.x)))
        H = (Z * (p * (1 - p))[:, None]).T @ Z + np.eye(3) / self.prior_sd**2
        return res.x, np.linalg.inv(H)

    def reference(self):
        """Importance-sampling reference of the posterior (precise: ESS ~ 1e4)."""
        if self._ref is None:
            mode, cov = self.laplace()
            ref, ess = _is_reference(self.log_post, mode, cov, np.random.default_rng(7))
            assert ess > 8000, ess
            self._ref = ref
        return self._ref

    def psi(self, order, whiten=None):
        """The bound constants for logistic regression, by hand: eq. 12 of the paper
        (``M_i = max_j |x~_ij|``), or with ``whiten=L`` the whitened row factor
        ``s_i = ||x~_i L||``."""
        if whiten is None:
            M = np.maximum(1.0, np.abs(self.X).max(axis=1))
        else:
            M = np.linalg.norm(self.design() @ whiten, axis=1)
        return M**2 / 4.0 if order == 1 else M**3 / (6.0 * math.sqrt(3.0))

    def step(self, order, bound_form="whitened", region="auto"):
        key = (order, bound_form, region)
        if key not in self._steps:
            with self.model:
                self._steps[key] = pms.ScalableMH(order=order, bound_form=bound_form,
                                                  region=region)
        return self._steps[key]


@pytest.fixture(scope="module")
def logit():
    return LogitProblem()


@pytest.fixture(scope="module")
def logit_runs(logit):
    """One run per order (2 chains), shared by the exactness, stats and seed tests."""
    runs = {}
    for order, draws in ((2, 1500), (1, 2000)):
        step = logit.step(order)
        runs[order] = _sample(logit.model, step, draws=draws, tune=500, seed=SEED + order)
    return runs


def _logit_draws(idata):
    return _draws(idata, ["a", "b"])


# ---------------------------------------------------------------------- exactness


@pytest.mark.parametrize("order", [2, 1])
def test_logistic_marginals_match_reference(logit, logit_runs, order):
    draws = _logit_draws(logit_runs[order])
    assert _ess(draws[..., 1]) > (1000 if order == 2 else 100)
    assert_matches(draws, logit.reference(), label=f"order {order}")


def test_logistic_reference_is_the_laplace_neighbourhood(logit):
    """Sanity of the reference itself: close to the Laplace approximation at N = 10^4."""
    ref = logit.reference()
    mode, cov = logit.laplace()
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(ref["mean"] - mode) < 0.1 * sd)
    assert np.allclose(np.sqrt(ref["var"]), sd, rtol=0.05)


class NormalProblem:
    """Normal regression with known sigma: the posterior is Gaussian in closed form."""

    def __init__(self, n=5000, seed=2):
        rng = np.random.default_rng(seed)
        self.X = rng.standard_normal((n, 2))
        self.sigma = 1.5
        self.prior_sd = 3.0
        Z = np.column_stack([np.ones(n), self.X])
        self.y = Z @ np.array([1.0, 0.5, -2.0]) + self.sigma * rng.standard_normal(n)
        prec = Z.T @ Z / self.sigma**2 + np.eye(3) / self.prior_sd**2
        self.cov = np.linalg.inv(prec)
        self.mean = self.cov @ (Z.T @ self.y) / self.sigma**2
        with pm.Model() as self.model:
            a = pm.Normal("a", 0.0, self.prior_sd)
            b = pm.Normal("b", 0.0, self.prior_sd, shape=2)
            pm.Normal("y", mu=a + pm.math.dot(self.X, b), sigma=self.sigma, observed=self.y)

    def ref(self):
        v = np.diag(self.cov)
        return {"mean": self.mean, "var": v, "mean_se": np.zeros(3), "var_se": np.zeros(3)}


@pytest.fixture(scope="module")
def normal():
    return NormalProblem()


@pytest.mark.parametrize("order", [2, pytest.param(1, marks=pytest.mark.slow)])
def test_normal_regression_matches_exact_posterior(normal, order):
    with normal.model:
        step = pms.ScalableMH(order=order)
    idata = _sample(normal.model, step, draws=1500, tune=500, seed=SEED + 10 + order)
    draws = _draws(idata, ["a", "b"])
    assert_matches(draws, normal.ref(), label=f"normal order {order}")
    # the correlation of the two slopes as well (exact posterior correlation)
    flat = draws.reshape(-1, 3)
    r = np.corrcoef(flat[:, 1], flat[:, 2])[0, 1]
    r_true = normal.cov[1, 2] / math.sqrt(normal.cov[1, 1] * normal.cov[2, 2])
    assert abs(r - r_true) < 0.1
    ss = sample_stats(idata)
    fallback = np.asarray(ss["fallback"].values)
    used = np.asarray(ss["data_used"].values)
    if order == 2:
        # the second-order expansion of a Gaussian likelihood is exact: psi = 0, no rows
        assert np.all(step.psi == 0.0)
        assert not fallback.any()
        assert np.all(used[~fallback] == 0)
        assert np.all(np.asarray(ss["poisson_rate"].values) == 0.0)
        # and the pCN proposal is exactly reversible for the posterior: all accepted
        assert np.asarray(ss["accepted"].values).mean() > 0.99
    else:
        # whitened row factor s_i = ||x~_i L||, L the Cholesky factor of the Laplace
        # covariance (exact here: the posterior covariance)
        Z = np.column_stack([np.ones(len(normal.y)), normal.X])
        s_i = np.linalg.norm(Z @ np.linalg.cholesky(normal.cov), axis=1)
        np.testing.assert_allclose(step.psi, (s_i / normal.sigma) ** 2, rtol=1e-6)
        assert used[~fallback].mean() < 0.05 * len(normal.y)


# ---------------------------------------------------------------------- bounds


def _random_pairs(step, rng, scales):
    th = step.theta_hat
    L = np.linalg.cholesky(_posterior_cov(step))
    for s in scales:
        for _ in range(4):
            q = th + s * L @ rng.standard_normal(th.size)
            qp = th + s * L @ rng.standard_normal(th.size)
            yield q, qp


def _posterior_cov(step):
    eng = step.engine
    h = eng.full_loglik_hessian(step.theta_hat)[2] + eng.prior_hessian(step.theta_hat)[2]
    return np.linalg.inv(-h)


def _phi(step, q, qp):
    """The step's ``phi`` for the pair, recomputed from the kernels' formulas."""
    if step.bound_form == "cornish":
        return taylor_phi(q, qp, step.theta_hat, step.order)
    z, zp = step.whiten(q), step.whiten(qp)
    two = step._glm_spec is not None and step._glm_spec.two_param
    return (path_phi if two else whitened_phi)(z, zp, step.order)


def _in_region(step, q):
    """Whether ``q`` lies in the ball where region bounds hold (always, without one)."""
    if getattr(step, "region", None) is None:
        return True
    z = step.whiten(q)
    return float(z @ z) <= step.region**2


def _check_step_bounds(step, rng, scales=(0.3, 1.0, 3.0, 30.0)):
    """``lambda_i <= phi psi_i`` on every row for random pairs; with region bounds, only
    for pairs inside the region (the step takes the exact test for the others)."""
    rows = np.arange(step.n_rows)
    worst = 0.0
    checked = 0
    for q, qp in _random_pairs(step, rng, scales):
        if not (_in_region(step, q) and _in_region(step, qp)):
            continue
        checked += 1
        lam = np.asarray(step.remainder_fn(q, qp)(rows))
        bound = _phi(step, q, qp) * step.psi
        # lambda_i = max(0, lam) <= phi psi_i; the reverse pair gives -lam, bounded too
        slack = bound * (1 + 1e-8) + 1e-10
        assert np.all(np.abs(lam) <= slack), (
            f"bound violated on {int(np.sum(np.abs(lam) > slack))} rows"
        )
        worst = max(worst, float(np.max(np.abs(lam) / np.maximum(bound, 1e-300))))
        # the factorisation: sum of remainders + Taylor part == the full log-lik ratio
        full = step.engine.full_loglik_diff(q, qp)
        taylor = -step.proxy_sum_diff(q, qp)
        assert lam.sum() + taylor == pytest.approx(-full, rel=1e-7, abs=1e-7)
    assert checked >= 4
    return worst


@pytest.mark.parametrize("form", ["whitened", "whitened-global", "cornish"])
@pytest.mark.parametrize("order", [1, 2])
def test_bounds_hold_on_every_row_at_the_step_level(logit, order, form):
    """``lambda_i <= phi psi_i`` on all 10,000 rows for random pairs (region bounds: pairs
    in the region), with ``psi`` checked against a computation by hand, and the bounds
    not vacuous (some row within a factor 20 of its bound)."""
    region = None if form == "whitened-global" else "auto"
    step = logit.step(order, form.split("-")[0], region)
    # the whitening the bounds were built with (from the mode search's last Hessian
    # but one, when they ride on its last pass; any invertible one gives valid bounds),
    # carried from the predictor coordinates v = A q (here a permutation) back to q
    whiten = None
    if form != "cornish":
        A = step.control.vmap.jacobian_v(step.theta_hat)
        whiten = np.linalg.solve(A, np.linalg.inv(step.bounds.whiten_inv))
    by_hand = logit.psi(order, whiten)
    if form == "whitened":  # local suprema over the region: at most the global ones
        assert np.all(step.psi <= by_hand * (1 + 1e-6)) and step.psi.sum() < by_hand.sum()
    else:
        np.testing.assert_allclose(step.psi, by_hand, rtol=1e-6)
    worst = _check_step_bounds(step, np.random.default_rng(order))
    assert 0.05 < worst <= 1.0


def test_bound_check_catches_a_bound_that_is_too_small(logit):
    """The same check fails for a phi one third of the step's (the power of the test)."""
    step = logit.step(2)
    rng = np.random.default_rng(2)
    rows = np.arange(step.n_rows)
    broken = 0
    for q, qp in _random_pairs(step, rng, (1.0, 3.0)):
        if _in_region(step, q) and _in_region(step, qp):
            lam = np.abs(np.asarray(step.remainder_fn(q, qp)(rows)))
            broken += int(np.any(lam > _phi(step, q, qp) / 3.0 * step.psi))
    assert broken > 0


def test_whitened_bounds_are_tighter(logit):
    """The default whitened bound gives a smaller (order 1) or similar (order 2) expected
    row count ``phi * Psi`` than eq. 12-13 on the same posterior-scale pairs: independent pairs for order 2 (pCN near
    rho = 0), random-walk pairs of scale 2.38 / sqrt(d) for order 1. (Here d = 3; at
    d = 10 the gain is about 1.7x / 3.5x, benchmarks/scalable.py.)"""
    rng = np.random.default_rng(3)
    for order in (1, 2):
        w, c = logit.step(order, "whitened"), logit.step(order, "cornish")
        L = w._laplace_chol
        rate_w = rate_c = 0.0
        for _ in range(400):
            q = w.theta_hat + L @ rng.standard_normal(3)
            if order == 2:
                qp = w.theta_hat + L @ rng.standard_normal(3)
            else:
                qp = q + 2.38 / math.sqrt(3) * L @ rng.standard_normal(3)
            rate_w += _phi(w, q, qp) * w.psi_total
            rate_c += _phi(c, q, qp) * c.psi_total
        # d = 3: clearly fewer rows for order 1, about as many for order 2
        assert rate_w < (0.9 if order == 1 else 1.05) * rate_c, (order, rate_w, rate_c)


def test_whitened_bound_form_needs_auto_bounds(logit):
    with logit.model, pytest.raises(ValueError, match="bound_form='whitened' needs"):
        pms.ScalableMH(bounds=logit.psi(2), bound_form="whitened")
    with logit.model, pytest.raises(ValueError, match="bound_form must be"):
        pms.ScalableMH(bound_form="tight")


def test_too_small_bounds_raise_during_sampling(logit):
    step1 = logit.step(1)
    with logit.model:
        bad = pms.ScalableMH(order=1, bounds=step1.psi / 100.0, center=step1.theta_hat)
    with pytest.raises(BoundViolationError) as err:
        _sample(logit.model, bad, draws=300, tune=100, chains=1)
    assert err.value.lam > err.value.bound


def test_unknown_bounds_name_raises(logit):
    with logit.model, pytest.raises(ValueError, match="bounds must be"):
        pms.ScalableMH(order=1, bounds="glm")


def test_bounds_array_of_wrong_length_raises(logit):
    with logit.model, pytest.raises(ValueError, match="bound constants"):
        pms.ScalableMH(order=1, bounds=np.ones(10), center=logit.step(1).theta_hat)


@pytest.mark.parametrize("kind", ["callable", "array"])
def test_user_bounds_callable_and_array(logit, kind):
    order = 2
    calls = []

    def bounds(k):
        calls.append(k)
        return logit.psi(k)

    arg = bounds if kind == "callable" else logit.psi(order)
    with logit.model:
        step = pms.ScalableMH(order=order, bounds=arg, center=logit.step(2).theta_hat)
    if kind == "callable":
        assert calls == [order]
    np.testing.assert_array_equal(step.psi, logit.psi(order))
    idata = _sample(logit.model, step, draws=300, tune=200, chains=1, seed=SEED + 20)
    ss = sample_stats(idata)
    assert np.asarray(ss["accepted"].values).mean() > 0.5
    assert np.asarray(ss["data_used"].values).sum() > 0  # the thinning test did run


class StudentProblem:
    def __init__(self, n=4000, seed=3, nu=4.0, sigma=0.7):
        rng = np.random.default_rng(seed)
        self.X = rng.standard_normal((n, 2))
        self.nu, self.sigma = nu, sigma
        self.y = 0.5 + self.X @ np.array([1.0, -1.0]) + sigma * rng.standard_t(nu, size=n)
        with pm.Model() as self.model:
            a = pm.Normal("a", 0.0, 5.0)
            b = pm.Normal("b", 0.0, 5.0, shape=2)
            pm.StudentT("y", nu=nu, mu=a + pm.math.dot(self.X, b), sigma=sigma, observed=self.y)

    def psi(self, order):
        M = np.maximum(1.0, np.abs(self.X).max(axis=1))
        c = self.nu * self.sigma**2
        if order == 1:
            return (self.nu + 1) / c * M**2
        return (self.nu + 1) * (3 + 2 * math.sqrt(2)) / (4 * c**1.5) * M**3

    def log_post(self, Q):
        Z = np.column_stack([np.ones(len(self.y)), self.X])
        r = (self.y[None, :] - Q @ Z.T) / self.sigma
        ll = -0.5 * (self.nu + 1) * np.log1p(r**2 / self.nu).sum(axis=1)
        return ll - 0.5 * (Q**2).sum(axis=1) / 25.0


@pytest.fixture(scope="module")
def student():
    return StudentProblem()


def test_auto_bounds_student_t(student):
    with student.model:
        cornish = pms.ScalableMH(order=2, bound_form="cornish")
        step = pms.ScalableMH(order=2)  # whitened
    np.testing.assert_allclose(cornish.psi, student.psi(2), rtol=1e-6)
    for st in (cornish, step):
        worst = _check_step_bounds(st, np.random.default_rng(11), scales=(0.5, 2.0, 20.0))
        assert worst <= 1.0
    idata = _sample(
        student.model, step, draws=1000, tune=300, chains=2, seed=SEED + 30, start=step
    )
    ref, ess = _is_reference(
        student.log_post, step.theta_hat, _posterior_cov(step), np.random.default_rng(9)
    )
    assert ess > 5000
    assert_matches(_draws(idata, ["a", "b"]), ref, label="student-t order 2")
    assert np.asarray(sample_stats(idata)["accepted"].values).mean() > 0.3


def _assert_lists_supported(message):
    for token in ("bounds=", "AustereMH", "docs/families.md"):
        assert token in message, message


def test_auto_bounds_refuse_student_t_with_unknown_nu_and_non_log_scales():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((500, 2))
    with pm.Model():
        b = pm.Normal("b", 0, 5, shape=2)
        nu = pm.Uniform("nu", 1.0, 30.0)  # its log is not affine (a free nu's log is)
        pm.StudentT("y", nu=nu, mu=pm.math.dot(X, b), sigma=1.0,
                    observed=rng.standard_normal(500))
        with pytest.raises(ValueError, match="degrees of freedom nu") as err:
            pms.ScalableMH()
    _assert_lists_supported(str(err.value))
    with pm.Model():  # sigma = s^2 with s unconstrained: log sigma is not affine in s
        b = pm.Normal("b", 0, 5, shape=2)
        s = pm.Normal("s", 1.0, 0.1)
        pm.Normal("y", mu=pm.math.dot(X, b), sigma=s**2, observed=rng.standard_normal(500))
        with pytest.raises(ValueError, match="log scale .* is not affine") as err:
            pms.ScalableMH()
    _assert_lists_supported(str(err.value))


def test_auto_bounds_refuse_poisson_without_region_or_log_link():
    rng = np.random.default_rng(5)
    X = rng.standard_normal((500, 2))
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Poisson("y", mu=pm.math.exp(pm.math.dot(X, b)), observed=rng.poisson(1.0, 500))
        with pytest.raises(ValueError, match="needs region bounds"):
            pms.ScalableMH(region=None)
        with pytest.raises(ValueError, match="needs region bounds"):
            pms.ScalableMH(bound_form="cornish")
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Poisson("y", mu=pm.math.log1pexp(pm.math.dot(X, b)), observed=rng.poisson(1.0, 500))
        with pytest.raises(ValueError, match="Poisson but not with a log") as err:
            pms.ScalableMH()
    _assert_lists_supported(str(err.value))


class PoissonProblem:
    """Poisson regression with a log link (N = 3,000, an intercept and two covariates):
    no global bound exists; the default region bounds make it samplable, exactly."""

    def __init__(self, n=3000, seed=6):
        rng = np.random.default_rng(seed)
        self.X = rng.standard_normal((n, 2))
        self.Z = np.column_stack([np.ones(n), self.X])
        self.y = rng.poisson(np.exp(self.Z @ np.array([0.5, 0.3, -0.4])))
        with pm.Model() as self.model:
            a = pm.Normal("a", 0.0, 5.0)
            b = pm.Normal("b", 0.0, 5.0, shape=2)
            pm.Poisson("y", mu=pm.math.exp(a + pm.math.dot(self.X, b)), observed=self.y)

    def log_post(self, Q):
        eta = Q @ self.Z.T
        return (eta * self.y - np.exp(eta)).sum(axis=1) - 0.5 * (Q**2).sum(axis=1) / 25.0


@pytest.mark.parametrize("order", [2, 1])
def test_poisson_log_link_with_region_bounds_is_exact(order):
    prob = PoissonProblem()
    with prob.model:
        step = pms.ScalableMH(order=order)
    assert step.region == pytest.approx(math.sqrt(3) + 4)
    worst = _check_step_bounds(step, np.random.default_rng(12), scales=(0.5, 1.0, 2.0))
    assert 0.01 < worst <= 1.0
    idata = _sample(prob.model, step, draws=1500 if order == 2 else 3000, tune=500,
                    seed=SEED + 40 + order)
    ref, ess = _is_reference(
        prob.log_post, step.theta_hat, _posterior_cov(step), np.random.default_rng(10)
    )
    assert ess > 5000
    assert_matches(_draws(idata, ["a", "b"]), ref, label=f"poisson order {order}")
    ss = sample_stats(idata)
    used = np.asarray(ss["data_used"].values, dtype=float)
    assert used.mean() < (20 if order == 2 else 300), used.mean()
    # pairs outside the region take the exact test: rare at order 2 (pCN), a few per
    # cent for the wider random-walk moves of order 1
    assert np.asarray(ss["fallback"].values).mean() < (0.01 if order == 2 else 0.05)


# ---------------------------------------------------------------------- stats


def test_sample_stats_names_dtypes_and_consistency(logit, logit_runs):
    for order, idata in logit_runs.items():
        ss = sample_stats(idata)
        dtypes = {
            "accepted": np.float64,
            "data_used": np.int64,
            "n_batches": np.int64,
            "scaling": np.float64,
            "poisson_rate": np.float64,
            "fallback": np.bool_,
        }
        for name, dt in dtypes.items():
            assert name in ss, name
            assert ss[name].dtype == dt, (name, ss[name].dtype)
        used = np.asarray(ss["data_used"].values)
        fb = np.asarray(ss["fallback"].values)
        rate = np.asarray(ss["poisson_rate"].values)
        nb = np.asarray(ss["n_batches"].values)
        acc = np.asarray(ss["accepted"].values)
        scaling = np.asarray(ss["scaling"].values)
        assert np.all(used >= 0) and np.all(used <= logit.n)
        # the full-data path reads every row, unless the data-free first factor has
        # already rejected (then no row)
        assert np.all((used[fb] == logit.n) | ((used[fb] == 0) & (acc[fb] == 0)))
        assert np.all(rate[~fb] < logit.n) and np.all(rate >= 0)
        assert np.all(nb == (used > 0))
        assert np.all(np.isfinite(scaling)) and np.all(scaling > 0)
        # after tuning the scaling is frozen
        assert np.all(scaling == scaling[:, :1])
        # rows read track the Poisson rate: E[data_used] <= phi * Psi
        m_used, m_rate = used[~fb].mean(), rate[~fb].mean()
        assert m_used <= m_rate + Z_TOL * math.sqrt(max(m_rate, 1e-3) / used.size)
        if order == 2:
            assert m_rate < 5.0  # O(1 / sqrt(N)) rows per step at N = 10^4
            assert acc.mean() > 0.5
        else:
            assert m_used < 0.02 * logit.n
            assert 0.1 < acc.mean() < 0.5


@pytest.mark.slow
def test_data_used_falls_as_n_grows_for_order_2():
    rates, used = [], []
    for n in (2**10, 2**13, 2**16):
        prob = LogitProblem(n=n, seed=8)
        with prob.model:
            step = pms.ScalableMH(order=2)
        idata = _sample(prob.model, step, draws=1500, tune=300, chains=1, seed=SEED + n)
        ss = sample_stats(idata)
        assert not np.asarray(ss["fallback"].values).any()
        rates.append(float(np.asarray(ss["poisson_rate"].values).mean()))
        used.append(float(np.asarray(ss["data_used"].values).mean()))
    # theory: phi * Psi ~ N^(-1/2), a factor 2^1.5 ~ 2.8 per step
    assert rates[0] > 1.8 * rates[1] > 1.8**2 * rates[2], rates
    assert used[0] > 3.0 * used[2], used
    assert used[2] < 1.0


# ---------------------------------------------------------------------- truncation


def test_truncation_forces_fallbacks_and_keeps_the_posterior(logit, logit_runs):
    step1 = logit.step(1)
    # R at about the median Poisson rate: half the steps fall back to full-data MH
    r = float(np.median(np.asarray(sample_stats(logit_runs[1])["poisson_rate"].values)))
    with logit.model:
        step = pms.ScalableMH(order=1, truncation=r, center=step1.theta_hat)
    idata = _sample(logit.model, step, draws=2000, tune=500, seed=SEED + 40)
    ss = sample_stats(idata)
    fb = np.asarray(ss["fallback"].values)
    used = np.asarray(ss["data_used"].values)
    rate = np.asarray(ss["poisson_rate"].values)
    assert 0.1 < fb.mean() < 0.9, fb.mean()
    # the full-data test reads all rows unless its data-free first factor rejected
    assert np.all((used[fb] == logit.n) | (used[fb] == 0)) and np.any(used[fb] == logit.n)
    assert np.all(rate[fb] >= r) and np.all(rate[~fb] < r)
    assert np.all(used[~fb] < logit.n)
    assert_matches(_logit_draws(idata), logit.reference(), label="truncated")


def test_tiny_truncation_is_full_data_mh(logit):
    with logit.model:
        step = pms.ScalableMH(order=1, truncation=1e-9, center=logit.step(1).theta_hat)
    idata = _sample(logit.model, step, draws=200, tune=100, chains=1, seed=SEED + 41)
    ss = sample_stats(idata)
    assert np.all(np.asarray(ss["fallback"].values))
    used = np.asarray(ss["data_used"].values)
    assert np.all((used == logit.n) | (used == 0)) and np.mean(used == logit.n) > 0.5


@pytest.mark.parametrize("bad", [0, -1.0, "N"])
def test_invalid_truncation_raises(logit, bad):
    with logit.model, pytest.raises(ValueError, match="truncation"):
        pms.ScalableMH(truncation=bad)


# ---------------------------------------------------------------------- mode


@pytest.mark.parametrize("form", ["dict", "array"])
def test_given_center_skips_the_optimiser(logit, monkeypatch, form):
    theta = logit.step(2).theta_hat + 1e-3  # any point near the mode works

    def boom(*args, **kwargs):
        raise AssertionError("the optimiser ran although center= was given")

    monkeypatch.setattr(scipy.optimize, "minimize", boom)
    mode = {"a": theta[0], "b": theta[1:]} if form == "dict" else theta
    with logit.model:
        step = pms.ScalableMH(order=2, center=mode)
    np.testing.assert_array_equal(step.theta_hat, theta)
    idata = _sample(logit.model, step, draws=100, tune=50, chains=1, seed=SEED + 50)
    assert np.asarray(sample_stats(idata)["accepted"].values).mean() > 0.5


def test_found_mode_is_the_map(logit):
    mode, _ = logit.laplace()
    np.testing.assert_allclose(logit.step(2).theta_hat, mode, atol=1e-4)


@pytest.mark.parametrize(
    "bad",
    [np.zeros(2), np.array([0.0, np.nan, 0.0]), {"a": 0.0}, {"a": 0.0, "b": np.zeros(3)}],
    ids=["short", "nan", "dict-missing", "dict-wrong-size"],
)
def test_invalid_center_raises(logit, bad):
    with logit.model, pytest.raises(ValueError, match="center"):
        pms.ScalableMH(order=2, center=bad)


def test_mode_is_refused_with_where_it_went(logit):
    """``mode=`` was ScalableMH's centre, and is PyTensor's compile mode in PyMC's steps:
    it is refused, saying both where the centre and the compile mode go."""
    with logit.model, pytest.raises(TypeError, match=r"center=.*compile_kwargs"):
        pms.ScalableMH(order=2, mode=logit.step(2).theta_hat)


@pytest.mark.parametrize("cls", ["ScalableMH", "AustereMH", "BarkerMinibatch"])
def test_compile_kwargs_reach_the_compiled_functions(logit, cls):
    """``compile_kwargs`` (PyMC's convention) go to every function of the sampling loop
    and the data passes; a wrong type is refused at construction."""
    import pytensor

    with logit.model:
        step = getattr(pms, cls)(compile_kwargs={"mode": "FAST_COMPILE"})
        with pytest.raises(TypeError, match="compile_kwargs must be a dict"):
            getattr(pms, cls)(compile_kwargs="FAST_COMPILE")
    fns = list(step.engine._compiled.values())
    assert fns
    fast = pytensor.compile.mode.get_mode("FAST_COMPILE")
    assert all(type(f.maker.linker) is type(fast.linker) for f in fns)
    idata = _sample(logit.model, step, draws=30, tune=30, chains=1, seed=SEED + 51)
    assert np.asarray(sample_stats(idata)["accepted"].values).size == 30


@pytest.mark.parametrize("order", [0, 3, True, "2"])
def test_invalid_order_raises(logit, order):
    with logit.model, pytest.raises(ValueError, match="order"):
        pms.ScalableMH(order=order)


# ---------------------------------------------------------------------- seeds, CompoundStep


def _assert_same_runs(a, b, names):
    for n in names:
        np.testing.assert_array_equal(posterior(a)[n].values, posterior(b)[n].values)
    for n in ("accepted", "data_used", "poisson_rate", "fallback", "scaling"):
        np.testing.assert_array_equal(sample_stats(a)[n].values, sample_stats(b)[n].values)


@pytest.mark.parametrize("order", [2, 1])
def test_cores_1_and_2_give_identical_draws(logit, order):
    step = logit.step(order)
    kw = dict(draws=150, tune=100, chains=2, seed=SEED + 60)
    one = _sample(logit.model, step, cores=1, **kw)
    two = _sample(logit.model, step, cores=2, **kw)
    _assert_same_runs(one, two, ["a", "b"])
    # and the chains differ from each other
    p = posterior(one)["a"].values
    assert not np.array_equal(p[0], p[1])


def test_compound_step_beside_nuts(logit):
    """ScalableMH on the regression, NUTS on a variable that only enters the prior."""

    def extra():
        pm.Normal("tau", 1.0, 2.0)

    model = logit.build(extra)
    with model:
        smh = pms.ScalableMH([model["a"], model["b"]], order=2)
    assert smh.ndim == 3
    kw = dict(draws=1000, tune=400, chains=2, seed=SEED + 70)
    # a fresh NUTS per run: its adaptation state persists in the object between pm.sample calls
    one = _sample(model, [smh, pm.NUTS([model["tau"]], model=model)], cores=1, **kw)
    two = _sample(model, [smh, pm.NUTS([model["tau"]], model=model)], cores=2, **kw)
    _assert_same_runs(one, two, ["a", "b", "tau"])
    ss = sample_stats(one)
    assert "diverging" in ss and "data_used" in ss
    assert_matches(_logit_draws(one), logit.reference(), label="compound")
    tau = _draws(one, ["tau"])
    assert_matches(
        tau, {"mean": [1.0], "var": [4.0], "mean_se": [0.0], "var_se": [0.0]}, label="tau"
    )


@pytest.mark.slow
def test_spawned_workers_give_identical_draws(logit):
    """The step pickles (cloudpickle) for spawned workers (macOS, or mp_ctx="spawn")."""
    step = logit.step(2)
    kw = dict(draws=100, tune=50, chains=2, seed=SEED + 65)
    one = _sample(logit.model, step, cores=1, **kw)
    two = _sample(logit.model, step, cores=2, mp_ctx="spawn", **kw)
    _assert_same_runs(one, two, ["a", "b"])


def test_likelihood_depending_on_another_steps_variable_is_refused(logit):
    """The Taylor terms at theta_hat are computed once: the likelihood must not move under
    the step's feet (NUTS sampling the intercept would make the bounds fail)."""
    with logit.model, pytest.raises(ValueError, match="likelihood depends on"):
        pms.ScalableMH([logit.model["b"]], order=1)


# ====================================================================== slow: long runs


@pytest.fixture(scope="module")
def nuts_reference(logit):
    """A long NUTS run on the logistic regression (4 x 2500 draws)."""
    with logit.model:
        idata = pm.sample(
            draws=2500, tune=1000, chains=4, cores=1, random_seed=SEED + 100,
            progressbar=False, compute_convergence_checks=False,
        )
    draws = _logit_draws(idata)
    return _draws_reference(draws), draws


def _thin(draws, j):
    """Nearly independent draws of coordinate j: every k-th, k about twice the IAT."""
    x = draws[..., j]
    iat = x.size / _ess(x)
    k = max(1, int(math.ceil(2 * iat)))
    return x[:, ::k].ravel()


@pytest.mark.slow
@pytest.mark.parametrize("order", [2, 1])
def test_logistic_marginals_match_long_nuts(logit, nuts_reference, order):
    ref, ref_draws = nuts_reference
    # the NUTS reference agrees with the importance-sampling one
    assert_matches(ref_draws, logit.reference(), label="NUTS vs IS")
    step = logit.step(order)
    draws_n = 4000 if order == 2 else 6000
    idata = _sample(logit.model, step, draws=draws_n, tune=1000, chains=2, seed=SEED + 110 + order)
    draws = _logit_draws(idata)
    assert_matches(draws, ref, label=f"order {order} vs NUTS")
    for j in range(3):
        p = stats.ks_2samp(_thin(draws, j), _thin(ref_draws, j)).pvalue
        assert p > 1e-3, (order, j, p)


@pytest.mark.slow
def test_student_t_marginals_match_reference(student):
    with student.model:
        step = pms.ScalableMH(order=1)
    idata = _sample(
        student.model, step, draws=4000, tune=1000, chains=2, seed=SEED + 120, start=step
    )
    cov = _posterior_cov(step)
    ref, ess = _is_reference(student.log_post, step.theta_hat, cov, np.random.default_rng(9))
    assert ess > 5000
    assert_matches(_draws(idata, ["a", "b"]), ref, label="student-t order 1")


@pytest.mark.slow
def test_compound_hierarchical_prior_matches_nuts():
    """NUTS moves the prior mean of the coefficients; ScalableMH reads it through the prior
    (not the likelihood). A small N and a tight prior so that the prior matters. (No scale
    parameter: a funnel would stall any Gibbs split, NUTS-within-Gibbs as well.)"""
    X, y = logistic_data(np.random.default_rng(12), 400, [0.6, -0.2, 0.1])
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        b = pm.Normal("b", mu, 0.2, shape=3)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
        smh = pms.ScalableMH([b], order=1)
        ref = pm.sample(
            draws=3000, tune=1000, chains=2, cores=1, random_seed=SEED + 130,
            progressbar=False, compute_convergence_checks=False,
        )
    idata = _sample(model, [smh, pm.NUTS([model["mu"]], model=model)], draws=5000, tune=1000,
                    seed=SEED + 131)
    names = ["b", "mu"]
    refd = _draws_reference(_draws(ref, names))
    draws = _draws(idata, names)
    assert_matches(draws, refd, label="hierarchical compound")
    # the prior matters here: the posterior mean of b is pulled towards mu
    assert abs(refd["mean"][3]) > 5 * refd["mean_se"][3]


# ---------------------------------------------------------------------- exactness with power


class SkewedProblem:
    """A 30-row logistic regression (intercept and slope, prior Normal(0, 3)) whose
    posterior is skewed: its Laplace approximation is at least 0.3 posterior sd off in a
    mean, so a sampler that returned Laplace draws would fail the check. Reference:
    quadrature on a 400 x 400 grid."""

    def __init__(self):
        self.x, self.y = logistic_data(np.random.default_rng(30), 30, 2.0, intercept=1.5)
        self.model = logistic_model(self.x, self.y, prior_sd=3.0, intercept_sd=3.0)

    def log_post(self, A, B):
        eta = A[..., None] + B[..., None] * self.x
        ll = (eta * self.y - np.logaddexp(0.0, eta)).sum(-1)
        return ll - 0.5 * (A**2 + B**2) / 9.0

    @staticmethod
    def grid():
        return np.linspace(-4, 10, 400), np.linspace(-4, 14, 400)

    def reference(self):
        a, b = self.grid()
        A, B = np.meshgrid(a, b, indexing="ij")
        lp = self.log_post(A, B)
        w = np.exp(lp - lp.max())
        w /= w.sum()
        Q = np.stack([A, B], -1).reshape(-1, 2)
        w = w.ravel()
        mean = w @ Q
        var = w @ (Q - mean) ** 2
        return {"mean": mean, "var": var, "mean_se": np.zeros(2), "var_se": np.zeros(2)}


@pytest.fixture(scope="module")
def skewed():
    return SkewedProblem()


def test_skewed_reference_is_far_from_laplace(skewed):
    ref = skewed.reference()
    with skewed.model:
        step = pms.ScalableMH()
    lap_mean, _ = step.center.laplace()
    assert np.max(np.abs(lap_mean - ref["mean"]) / np.sqrt(ref["var"])) >= 0.3


@pytest.mark.slow
@pytest.mark.parametrize("order, proposal", [
    (2, None), (2, "random_walk"), (1, None), (1, "reversible")])
def test_exact_on_a_skewed_small_posterior(skewed, order, proposal):
    """Both orders and the proposal families match the quadrature reference within MCSE
    where the Laplace approximation is >= 0.3 sd off. (Order 1 with pCN: see
    :func:`test_order_1_pcn_is_exact_from_chains_started_in_the_posterior`.)"""
    kw = {} if proposal is None else {"proposal": proposal}
    with skewed.model:
        step = pms.ScalableMH(order=order, **kw)
    idata = _sample(skewed.model, step, draws=8000, tune=1000, seed=SEED + 50 + order)
    assert_matches(_draws(idata, ["a", "b"]), skewed.reference(),
                   label=f"skewed order {order} {proposal}")


class _AcceptAll(pms.ScalableMH):
    """ScalableMH with its test removed: every proposal accepted (a broken sampler that
    the exactness checks must catch)."""

    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        d = super()._decide(q, q_prop, log_prior_ratio, log_qratio)
        return dataclasses.replace(d, accepted=True)


def _posterior_starts(problem, k, rng):
    """``k`` exact draws from the skewed posterior: grid cells drawn by their quadrature
    weight, then a uniform point in the cell."""
    a, b = problem.grid()
    A, B = np.meshgrid(a, b, indexing="ij")
    lp = problem.log_post(A, B)
    w = np.exp(lp - lp.max()).ravel()
    idx = rng.choice(w.size, k, p=w / w.sum())
    starts = np.stack([A.ravel()[idx], B.ravel()[idx]], -1)
    return starts + rng.uniform(-0.5, 0.5, starts.shape) * [a[1] - a[0], b[1] - b[0]]


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["exact", "accept-all"])
def test_order_1_pcn_is_exact_from_chains_started_in_the_posterior(skewed, broken):
    """Order 1 with the independent pCN proposal (``rho = 0``, where tuning takes it on
    this posterior) is an independence sampler whose Gaussian is lighter-tailed than the
    posterior: the weight ``pi / phi`` is unbounded, the chain is not geometrically
    ergodic, and it has rare long stays in the heavier tail. Batch-means errors are then
    too small: over eight seeds of 2 x 20,000 draws, ScalableMH's z-scores of the second
    moment against the quadrature reference reached -5.3, and full-data Metropolis-
    Hastings with the same proposal reached -4.05 (so the chain, not the factorised test,
    is the cause).

    This check does not lean on mixing: 200 chains, each started at an exact posterior
    draw, with the proposal fixed (no tuning), are each stationary from the start, so the
    average over chains of each chain's mean is unbiased, and the chains are independent,
    so its error is the spread of the chain means over ``sqrt(200)``. The same check on
    the step with every proposal accepted (Laplace draws after a few steps) must fail
    (measured: |z| from 7.8 to 73)."""
    from pymc_subsample.proposals import PCN

    k, n = 200, 200
    starts = _posterior_starts(skewed, k, np.random.default_rng(5))
    with skewed.model:
        step = (_AcceptAll if broken else pms.ScalableMH)(order=1, proposal=PCN(rho=0.0))
    idata = _sample(skewed.model, step, draws=n, tune=0, chains=k, seed=SEED + 52,
                    initvals=[{"a": a, "b": b} for a, b in starts])
    draws, ref = _draws(idata, ["a", "b"]), skewed.reference()
    zs = []
    for j in range(2):
        for f, r in ((draws[..., j], ref["mean"][j]),
                     ((draws[..., j] - ref["mean"][j]) ** 2, ref["var"][j])):
            chain_means = f.mean(axis=1)
            zs.append((chain_means.mean() - r) / (chain_means.std(ddof=1) / math.sqrt(k)))
    if broken:
        assert max(abs(z) for z in zs) > Z_TOL, zs
    else:
        assert max(abs(z) for z in zs) < Z_TOL, zs


@pytest.mark.slow
@pytest.mark.parametrize("broken", [False, True], ids=["exact", "ratio-dropped"])
def test_reversible_proposal_with_a_centre_off_the_mode(skewed, broken):
    """Eq. 17's proposal drifts along the surrogate's gradient at theta_hat, which is 0 at
    the mode: with ``center=`` one Laplace sd off the mode (as from SGD) the drift is
    large, SMH-1 with it still matches the quadrature reference, and the same check
    catches the proposal with its density ratio dropped (a chain that drifts off)."""
    from pymc_subsample.proposals import ReversibleRandomWalk

    class NoRatio(ReversibleRandomWalk):
        def draw(self, q, rng):
            return super().draw(q, rng)[0], 0.0

    with skewed.model:
        mode_step = pms.ScalableMH(order=1)
    theta_hat = mode_step.theta_hat + mode_step._laplace_chol @ np.array([1.0, -0.5])
    proposal = NoRatio() if broken else "reversible"
    with skewed.model:
        step = pms.ScalableMH(order=1, proposal=proposal, center=theta_hat)
    assert np.linalg.norm(step.proposal._drift) > 0.1 * np.sqrt(np.min(np.diag(
        mode_step.center.laplace()[1])))
    idata = _sample(skewed.model, step, draws=8000, tune=1000, seed=SEED + 61)
    check = lambda: assert_matches(_draws(idata, ["a", "b"]), skewed.reference(),  # noqa: E731
                                   label=f"reversible off-mode broken={broken}")
    if broken:
        with pytest.raises(AssertionError):
            check()
    else:
        check()


@pytest.mark.slow
def test_skewed_check_catches_a_sampler_that_accepts_everything(skewed):
    """The same check on ScalableMH with its test removed (every pCN proposal accepted:
    i.i.d. Laplace draws) must fail."""

    with skewed.model:
        step = _AcceptAll(order=2)
    idata = _sample(skewed.model, step, draws=8000, tune=1000, seed=SEED + 60)
    with pytest.raises(AssertionError):
        assert_matches(_draws(idata, ["a", "b"]), skewed.reference(), label="accept-all")


@pytest.mark.slow
def test_hyperparameters_on_pymc_metropolis_beside_scalable_mh():
    """Centred hierarchical logistic regression: ScalableMH on the group effects and the
    coefficient, pm.Metropolis on the hyperparameters (mu, tau) that move the step's own
    prior. ScalableMH must see Metropolis's current mu and tau in its prior term at every
    step: the posterior must match full-data NUTS within Monte Carlo error (a step that
    kept the hyperparameters of its construction would shrink the groups wrongly)."""
    import arviz as az

    rng = np.random.default_rng(11)
    n, groups = 600, 30  # 20 rows per group: the prior's shrinkage moves the group effects
    g = rng.integers(0, groups, n)
    x = rng.normal(size=n)
    a_true = rng.normal(0.5, 0.8, groups)
    y = bernoulli_logit_draws(rng, a_true[g] + 0.7 * x)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 1.0)
        tau = pm.HalfNormal("tau", 1.0)
        a = pm.Normal("a", mu, tau, shape=groups)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Bernoulli("y", logit_p=a[g] + b * x, observed=y)
        split = [pms.ScalableMH(vars=[a, b]), pm.Metropolis([mu, tau])]
    ours = run_sample(model, split, draws=3000, tune=1000, chains=2, seed=SEED)
    ref = run_sample(model, None, draws=2000, tune=1000, chains=2, seed=SEED + 1)
    for name in ("a", "b", "mu", "tau"):
        m1 = posterior(ours)[name].mean(("chain", "draw")).values
        m2 = posterior(ref)[name].mean(("chain", "draw")).values
        se1 = az.mcse(posterior(ours)[[name]], method="mean")[name].values
        se2 = az.mcse(posterior(ref)[[name]], method="mean")[name].values
        z = np.abs(m1 - m2) / np.sqrt(se1**2 + se2**2)
        assert np.all(z < 4.5), (name, z)
    # checked once: the same model with (mu, tau) frozen at (0, 1) gives z = 12 on ``a``
