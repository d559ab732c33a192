"""ScalableMH with ``bounds="auto"`` on models with several observed variables sharing
the rows (:func:`pymc_subsample.engine.glm.detect_glms`): row ``i``'s term is the sum of
the variables' terms and its constant ``psi_i`` the sum of theirs
(:func:`pymc_subsample.steps.scalable_bounds.summed_glm_psi`).

Two models on the same rows, ``eta_i = x_i . b``:

* ``mixed``: ``y1 ~ Normal(a + eta, s)`` (a sampled scale: path bound) and
  ``y2 ~ Bernoulli(logit_p = eta + c)``; q = (a, b0, b1, log s, c);
* ``counts``: ``y1 ~ Poisson(exp(a + eta))`` and ``y2 ~ Bernoulli(logit_p = eta + c)``
  (both one-parameter: the whitened bound); q = (a, b0, b1, c).

What is checked: one spec per variable, and refusals (rows of different lengths, an
unrecognised variable); ``psi`` is the sum of the variables' own constants;
``lambda_i <= phi psi_i`` on every row for random pairs in the region, and the same check
fails when one variable's constants are dropped (the power of the check); a step whose
bounds drop one variable's constants stops with a bound violation; exactness of the draws
against an importance-sampling reference in ``q`` within ``Z_TOL`` Monte Carlo standard
errors, with few rows per step.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import expit

import pymc_subsample as pms
from pymc_subsample.engine.glm import detect_glm, detect_glms, glm_psi
from pymc_subsample.kernels.scalable.phi import path_phi, whitened_phi
from pymc_subsample.kernels.scalable.thinning import BoundViolationError
from pymc_subsample.steps import scalable_bounds
from pymc_subsample.testing import posterior, sample_stats
from tests.steps.test_scalable import (
    SEED,
    _in_region,
    _is_reference,
    _posterior_cov,
    _random_pairs,
    _sample,
    assert_matches,
)

N_ROWS = 1500
PRIOR_SD = 3.0


def _log1pexp(x):
    return np.logaddexp(0.0, x)


class MultiProblem:
    """The ``mixed`` or ``counts`` model of the module docstring and its log posterior
    in the step's raveled space."""

    def __init__(self, kind, n=N_ROWS, seed=5):
        rng = np.random.default_rng(seed)
        self.kind = kind
        self.X = rng.standard_normal((n, 2))
        beta = np.array([0.3, -0.5])
        eta = self.X @ beta
        if kind == "mixed":
            self.y1 = 0.4 + eta + 0.8 * rng.standard_normal(n)
        else:
            self.y1 = rng.poisson(np.exp(0.4 + eta)).astype(np.int64)
        self.y2 = (rng.random(n) < expit(eta - 0.2)).astype(np.int64)
        with pm.Model() as self.model:
            a = pm.Normal("a", 0.0, PRIOR_SD)
            b = pm.Normal("b", 0.0, PRIOR_SD, shape=2)
            if kind == "mixed":
                s = pm.HalfNormal("s", PRIOR_SD)
            c = pm.Normal("c", 0.0, PRIOR_SD)
            e = pm.math.dot(self.X, b)
            if kind == "mixed":
                pm.Normal("y1", mu=a + e, sigma=s, observed=self.y1)
            else:
                pm.Poisson("y1", mu=pm.math.exp(a + e), observed=self.y1)
            pm.Bernoulli("y2", logit_p=e + c, observed=self.y2)
        self.names = ["a", "b", "s", "c"] if kind == "mixed" else ["a", "b", "c"]
        self._steps = {}

    def log_post(self, Q):
        """Log posterior density of q = (a, b0, b1[, log s], c): the HalfNormal prior
        and the log transform's Jacobian included."""
        a, b, c = Q[:, 0:1], Q[:, 1:3], Q[:, -1:]
        eta = b @ self.X.T
        e2 = eta + c
        ll = (self.y2 * e2 - _log1pexp(e2)).sum(axis=1)
        if self.kind == "mixed":
            u = Q[:, 3]
            ll += stats.norm.logpdf(self.y1, a + eta, np.exp(u)[:, None]).sum(axis=1)
            lp = stats.halfnorm.logpdf(np.exp(u), scale=PRIOR_SD) + u
        else:
            e1 = a + eta
            ll += (self.y1 * e1 - np.exp(e1)).sum(axis=1)
            lp = 0.0
        free = np.concatenate([Q[:, :3], c], axis=1)
        return ll + lp - 0.5 * (free**2).sum(axis=1) / PRIOR_SD**2

    def step(self, order):
        if order not in self._steps:
            with self.model:
                self._steps[order] = pms.ScalableMH(order=order)
        return self._steps[order]

    def draws_q(self, idata):
        post = posterior(idata)
        parts = []
        for name in self.names:
            v = np.asarray(post[name].values, dtype=float)
            if name == "s":
                v = np.log(v)
            parts.append(v.reshape(v.shape[0], v.shape[1], -1))
        return np.concatenate(parts, axis=-1)


@pytest.fixture(scope="module", params=["mixed", "counts"])
def problem(request):
    return MultiProblem(request.param)


def _phi(step, q, qp):
    """The step's ``phi`` for the pair, from the kernels' formulas: the path factor when
    a variable has two row parameters (the one-parameter constants bound the same
    derivative form), the whitened one otherwise."""
    z, zp = step.whiten(q), step.whiten(qp)
    return (path_phi if step.bounds.path else whitened_phi)(z, zp, step.order)


def _violations(step, psi, rng, scales=(0.5, 1.0, 2.0)):
    """``(pairs checked, pairs with a row above phi psi_i, worst lambda_i / (phi psi_i))``
    over random pairs inside the region, on every row; also checks the factorisation
    (remainders + Taylor part == the full log-likelihood ratio)."""
    rows = np.arange(step.n_rows)
    checked = broken = 0
    worst = 0.0
    for q, qp in _random_pairs(step, rng, scales):
        if not (_in_region(step, q) and _in_region(step, qp)):
            continue
        checked += 1
        signed = np.asarray(step.remainder_fn(q, qp)(rows))
        lam = np.abs(signed)  # lambda_i = max(0, .); the reverse pair gives the minus
        bound = _phi(step, q, qp) * psi
        broken += int(np.any(lam > bound * (1 + 1e-8) + 1e-10))
        worst = max(worst, float(np.max(lam / np.maximum(bound, 1e-300))))
        full = step.engine.full_loglik_diff(q, qp)
        assert signed.sum() - step.proxy_sum_diff(q, qp) == pytest.approx(
            -full, rel=1e-7, abs=1e-7)
    return checked, broken, worst


# ---------------------------------------------------------------- recognition


def test_one_spec_per_observed_variable(problem):
    specs = detect_glms(problem.model)
    assert [s.observed for s in specs] == ["y1", "y2"]
    first = "normal_scale" if problem.kind == "mixed" else "poisson_log"
    assert [s.family for s in specs] == [first, "bernoulli_logit"]
    # detect_glm keeps reading one variable (its callers' fast paths are per variable)
    with pytest.raises(ValueError, match="one observed variable"):
        detect_glm(problem.model)
    assert detect_glm(problem.model, problem.model["y2"]).family == "bernoulli_logit"


def test_rows_of_different_lengths_are_refused():
    rng = np.random.default_rng(0)
    X1, X2 = rng.standard_normal((40, 2)), rng.standard_normal((30, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.Normal("y1", pm.math.dot(X1, b), 1.0, observed=rng.standard_normal(40))
        pm.Bernoulli("y2", logit_p=pm.math.dot(X2, b), observed=rng.integers(0, 2, 30))
    with pytest.raises(ValueError, match="different numbers of rows") as err:
        detect_glms(model)
    assert "'y1' 40" in str(err.value) and len(str(err.value)) <= 300
    # the engine refuses such a model first, for every step
    with model, pytest.raises(ValueError, match="different lengths"):
        pms.ScalableMH()


def test_an_unrecognised_variable_is_named():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((50, 2))
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        pm.Normal("y1", pm.math.dot(X, b), 1.0, observed=rng.standard_normal(50))
        pm.Exponential("y2", lam=1.0 + pm.math.dot(X, b) ** 2, observed=rng.random(50) + 0.1)
    with pytest.raises(ValueError, match="'y2'"):
        detect_glms(model)


# ---------------------------------------------------------------- bounds


def test_psi_is_the_sum_of_the_variables_constants(problem):
    step = problem.step(2)
    assert step._glm_spec is None and len(step._glm_specs) == 2
    assert step.bounds.path == (problem.kind == "mixed")
    assert step.region == pytest.approx(math.sqrt(step.ndim) + 4.0)
    parts = [np.asarray(glm_psi(step.engine, spec, 2, step.theta_hat,
                                whiten=step._laplace_chol, radius=step.region), dtype=float)
             for spec in step._glm_specs]
    total = parts[0] + parts[1]
    assert np.all(step.psi >= total) and np.all(step.psi <= total * (1 + 1e-6))
    assert np.all(parts[0] > 0) and np.all(parts[1] > 0)


# order 1 on PyMC 5 only: the same compiled remainders as order 2, which runs on both,
# against another NumPy constant (see pyproject's "numerics" marker)
@pytest.mark.parametrize("order", [2, pytest.param(1, marks=pytest.mark.numerics)])
def test_bounds_hold_on_every_row(problem, order):
    step = problem.step(order)
    checked, broken, worst = _violations(step, step.psi, np.random.default_rng(40 + order))
    assert checked >= 6 and broken == 0, (checked, broken)
    assert worst > 1e-3, worst  # not vacuous


def test_dropping_one_variables_constants_is_caught(problem):
    """The check above fails when the first variable's constants (Normal or Poisson) are
    left out of the sum. (Left out the other way, the Bernoulli's, it does not: the
    Normal's path constants and the Poisson's region constants are loose enough to
    cover both variables' remainders on these pairs, and then the chain stays exact.
    ``test_psi_is_the_sum_of_the_variables_constants`` pins the sum itself.)"""
    step = problem.step(2)
    keep = step._glm_specs[1]
    psi = np.asarray(glm_psi(step.engine, keep, 2, step.theta_hat,
                             whiten=step._laplace_chol, radius=step.region), dtype=float)
    checked, broken, _ = _violations(step, psi, np.random.default_rng(42))
    assert broken > 0, (checked, broken)


def test_a_step_missing_one_variables_constants_stops(monkeypatch):
    """Sampling with the Normal variable's constants dropped from the sum raises a
    bound violation (the thinning checks every drawn row) instead of running on."""
    problem = MultiProblem("mixed", seed=6)

    def last_only(engine, specs, order, theta_hat, **kw):
        return glm_psi(engine, specs[-1], order, theta_hat, **kw)

    monkeypatch.setattr(scalable_bounds, "summed_glm_psi", last_only)
    with problem.model:
        step = pms.ScalableMH(order=2)
    with pytest.raises(BoundViolationError):
        _sample(problem.model, step, draws=300, tune=100, chains=1, seed=SEED + 7)


# ---------------------------------------------------------------- exactness


def _exactness(problem, order):
    step = problem.step(order)
    idata = _sample(problem.model, step, draws=1500 if order == 2 else 3000, tune=500,
                    seed=SEED + 80 + order)
    ref, ess = _is_reference(problem.log_post, step.theta_hat, _posterior_cov(step),
                             np.random.default_rng(15))
    assert ess > 5000, ess
    assert_matches(problem.draws_q(idata), ref, label=f"{problem.kind} order {order}")
    ss = sample_stats(idata)
    used = np.asarray(ss["data_used"].values, dtype=float).mean()
    # N = 1,500: order 2 reads a few rows per step (benchmarks/smh_families.py has the
    # figure at N = 10^5)
    assert used < (0.05 * N_ROWS if order == 2 else 0.6 * N_ROWS), used
    assert np.asarray(ss["accepted"].values).mean() > (0.5 if order == 2 else 0.1)
    return used


@pytest.mark.parametrize("order", [2, pytest.param(1, marks=pytest.mark.slow)])
def test_posterior_is_exact(problem, order):
    _exactness(problem, order)


def test_reference_is_the_model(problem):
    """The reference's log density is the model's, up to a constant (so the exactness
    test compares with the right posterior)."""
    step = problem.step(2)
    rng = np.random.default_rng(3)
    L = np.linalg.cholesky(_posterior_cov(step))
    Q = step.theta_hat + rng.standard_normal((5, step.ndim)) @ L.T
    fn = step.engine.model.compile_logp()
    ip = step.engine.model.initial_point()
    mine = problem.log_post(Q)
    theirs = []
    for q in Q:
        point = dict(ip)
        for name, (sl, shape) in _slices(step).items():
            point[name] = q[sl].reshape(shape)
        theirs.append(fn(point))
    diff = mine - np.asarray(theirs)
    assert np.ptp(diff) < 1e-6, diff


def _slices(step):
    """value-variable name -> (slice of q, shape), in the step's raveling order."""
    out, start = {}, 0
    for v in step.engine.vars:
        shape = step.engine.model.initial_point()[v.name].shape
        size = int(np.prod(shape, dtype=int))
        out[v.name] = (slice(start, start + size), shape)
        start += size
    return out
