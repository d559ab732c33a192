"""ScalableMH with ``bounds="auto"`` on robust regressions with an unknown Student-t
``nu``: ``y ~ StudentT(nu, mu=a + b x, sigma)`` with

* ``"both"``: ``nu ~ Gamma(2, 0.1)`` and ``sigma ~ HalfNormal(5)`` (rows of
  ``(eta, log sigma, log nu)``, family ``student_t_nu``: the d-coordinate path bound);
* ``"fixed_sigma"``: ``nu ~ Gamma(2, 0.1)``, ``sigma = 0.8`` (rows of ``(eta, log nu)``,
  ``student_t_nu_fixed_scale``);
* ``"shift"``: ``nu = 1 + Exponential(1/10)`` and ``sigma ~ HalfNormal(5)`` (``t = log(nu -
  1)``).

What is checked:

* the family is recognised (and the shift read);
* ``lambda_i <= phi psi_i`` on every row for random pairs in the region, and not vacuous;
  the same check catches the constants divided by 50 (its power; at this N the
  bounds are about 28 times the largest remainder of the pairs);
* exactness (slow): the draws of ``q`` match an importance-sampling reference of the
  posterior within ``Z_TOL`` Monte Carlo standard errors, with few rows read per step;
* a fast smoke run; refusals of forms of ``nu`` that are not supported.

The partials' formulas are checked against autodiff on dense grids in
``tests/kernels/families/test_family_student_nu.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy import stats

import pymc_subsample as pms
from pymc_subsample.testing import posterior, sample_stats
from tests.steps.test_scalable import (
    SEED,
    _check_step_bounds,
    _in_region,
    _is_reference,
    _phi,
    _posterior_cov,
    _random_pairs,
    _sample,
    assert_matches,
)

N_ROWS = 1500
SIGMA = 0.8


class NuProblem:
    """``y_i ~ StudentT(nu, a + b x_i, sigma)``, ``a, b ~ Normal(0, 5)``; ``q = (a, b,
    log(nu - shift)[, log sigma])`` is the step's raveled space."""

    def __init__(self, kind, n=N_ROWS, seed=3):
        rng = np.random.default_rng(seed)
        self.kind = kind
        self.x = rng.standard_normal(n)
        self.y = 0.5 + 1.0 * self.x + SIGMA * rng.standard_t(4.0, n)
        self.shift = 1.0 if kind == "shift" else 0.0
        self.free_sigma = kind != "fixed_sigma"
        with pm.Model() as self.model:
            a = pm.Normal("a", 0.0, 5.0)
            b = pm.Normal("b", 0.0, 5.0)
            if kind == "shift":
                nu = 1.0 + pm.Exponential("nu_m1", 0.1)
            else:
                nu = pm.Gamma("nu", 2.0, 0.1)
            sigma = pm.HalfNormal("sigma", 5.0) if self.free_sigma else SIGMA
            pm.StudentT("y", nu=nu, mu=a + b * self.x, sigma=sigma, observed=self.y)
        self._steps = {}

    @property
    def nu_name(self):
        return "nu_m1" if self.kind == "shift" else "nu"

    def log_post(self, Q):
        """Log posterior density of q (priors and the log transforms' Jacobians)."""
        eta = Q[:, :1] + Q[:, 1:2] * self.x[None, :]
        t = Q[:, 2]
        w = np.exp(t)
        nu = self.shift + w
        s = Q[:, 3] if self.free_sigma else np.full(Q.shape[0], math.log(SIGMA))
        ll = stats.t.logpdf(self.y[None, :], nu[:, None], eta, np.exp(s)[:, None]).sum(axis=1)
        lp = stats.norm.logpdf(Q[:, 0], 0, 5) + stats.norm.logpdf(Q[:, 1], 0, 5)
        if self.kind == "shift":
            lp += stats.expon.logpdf(w, scale=10.0) + t
        else:
            lp += stats.gamma.logpdf(w, 2.0, scale=10.0) + t
        if self.free_sigma:
            lp += stats.halfnorm.logpdf(np.exp(s), scale=5.0) + s
        return ll + lp

    def step(self, order):
        if order not in self._steps:
            with self.model:
                self._steps[order] = pms.ScalableMH(order=order)
        return self._steps[order]

    def draws_q(self, idata):
        post = posterior(idata)
        parts = [np.asarray(post[n].values, dtype=float)[..., None] for n in ("a", "b")]
        parts.append(np.log(np.asarray(post[self.nu_name].values, dtype=float))[..., None])
        if self.free_sigma:
            parts.append(np.log(np.asarray(post["sigma"].values, dtype=float))[..., None])
        return np.concatenate(parts, axis=-1)


KIND_NAMES = ("both", "fixed_sigma", "shift")
_KINDS = ["both", pytest.param("fixed_sigma", marks=pytest.mark.slow),
          pytest.param("shift", marks=pytest.mark.slow)]


@pytest.fixture(scope="module", params=_KINDS)
def problem(request):
    return NuProblem(request.param)


def test_family_is_recognised(problem):
    step = problem.step(2)
    spec = step._glm_spec
    assert spec.two_param and step.bound_form == "whitened"
    assert spec.params["nu_shift"] == problem.shift
    if problem.free_sigma:
        assert spec.family == "student_t_nu" and len(spec.extra) == 1
        assert step.region == pytest.approx(2.0 + 4.0)
    else:
        assert spec.family == "student_t_nu_fixed_scale" and spec.extra == ()
        assert float(np.ravel(spec.params["sigma"])[0]) == SIGMA
        assert step.region == pytest.approx(math.sqrt(3.0) + 4.0)


# order 1 on PyMC 5 only: the same compiled remainders as order 2, which runs on both,
# against another NumPy constant (see pyproject's "numerics" marker)
@pytest.mark.parametrize("order", [2, pytest.param(1, marks=pytest.mark.numerics)])
def test_bounds_hold_on_every_row(problem, order):
    step = problem.step(order)
    worst = _check_step_bounds(step, np.random.default_rng(61 + order), scales=(0.5, 1.0, 2.0))
    assert 1e-3 < worst <= 1.0, worst


def test_bound_check_catches_broken_constants(problem):
    """The row check of :func:`test_bounds_hold_on_every_row` fails for ``psi_i / 50``.

    At N = 1,500 the region's box spans about +-6 posterior sds of ``log nu`` (nu from
    about 1.2 to 15), over which the third derivatives vary widely, so the largest
    ``lambda_i / (phi psi_i)`` of these pairs is about 1/28: ``psi_i / 10`` would still
    be a valid bound, and dividing by 50 is the smallest round factor that breaks it."""
    step = problem.step(2)
    rows = np.arange(step.n_rows)
    broken = 0
    for q, qp in _random_pairs(step, np.random.default_rng(3), (1.0, 2.0)):
        if _in_region(step, q) and _in_region(step, qp):
            lam = np.abs(np.asarray(step.remainder_fn(q, qp)(rows)))
            broken += int(np.any(lam > _phi(step, q, qp) * step.psi / 50.0))
    assert broken > 0


def test_smoke_run(problem):
    """A short run: finite draws, few rows per step, proposals accepted."""
    step = problem.step(2)
    idata = _sample(problem.model, step, draws=150, tune=50, chains=1, seed=SEED + 7)
    draws = problem.draws_q(idata)
    assert np.all(np.isfinite(draws))
    ss = sample_stats(idata)
    assert np.asarray(ss["data_used"].values, dtype=float).mean() < 0.1 * N_ROWS
    assert np.asarray(ss["accepted"].values).mean() > 0.3


@pytest.mark.slow
@pytest.mark.parametrize("order", [2, 1])
def test_posterior_is_exact(problem, order):
    step = problem.step(order)
    idata = _sample(problem.model, step, draws=3000, tune=500,
                    seed=SEED + 90 + order + 3 * KIND_NAMES.index(problem.kind))
    ref, ess = _is_reference(problem.log_post, step.theta_hat, _posterior_cov(step),
                             np.random.default_rng(17))
    assert ess > 5000, ess
    assert_matches(problem.draws_q(idata), ref, label=f"{problem.kind} order {order}")
    ss = sample_stats(idata)
    used = np.asarray(ss["data_used"].values, dtype=float).mean()
    # at N = 1,500 the boxes span +-6 sds of log nu (and log(nu - 1) is wider still):
    # up to ~6% of the rows per step at order 2 (7 rows of 10^5 in the benchmark)
    assert used < (0.1 * N_ROWS if order == 2 else 0.6 * N_ROWS), used
    assert np.asarray(ss["accepted"].values).mean() > (0.5 if order == 2 else 0.1)


@pytest.mark.parametrize("make_nu, token", [
    (lambda: pm.Uniform("nu", 1.0, 30.0), "log degrees of freedom nu"),
    (lambda: pm.Exponential("nu", 0.1) - 0.5, "c not one number >= 0"),
])
def test_unsupported_nu_is_refused(make_nu, token):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(300)
    with pm.Model():
        b = pm.Normal("b", 0.0, 2.0)
        pm.StudentT("y", nu=make_nu(), mu=b * x, sigma=pm.HalfNormal("sigma", 1.0),
                    observed=x + rng.standard_t(4, 300))
        with pytest.raises(ValueError) as err:
            pms.ScalableMH()
    msg = str(err.value)
    assert token in msg and "'y'" in msg and "docs/families.md" in msg, msg
    assert len(msg) <= 300, len(msg)


def test_non_centred_predictor_with_nu_sampled_is_refused():
    """Predictor coordinates (a predictor affine only in parameter expressions) do not
    cover a sampled nu: a short refusal."""
    rng = np.random.default_rng(5)
    n, g = 400, 4
    idx = rng.integers(0, g, n)
    with pm.Model():
        tau = pm.HalfNormal("tau", 1.0)
        z = pm.Normal("z", 0.0, 1.0, shape=g)
        nu = pm.Gamma("nu", 2.0, 0.1)
        pm.StudentT("y", nu=nu, mu=tau * z[idx], sigma=pm.HalfNormal("sigma", 1.0),
                    observed=rng.standard_t(4, n))
        with pytest.raises(ValueError) as err:
            pms.ScalableMH()
    msg = str(err.value)
    assert "linear predictor" in msg and "'y'" in msg and len(msg) <= 300, msg
