"""ScalableMH with ``bounds="auto"`` on zero-inflated count regressions,
``pm.ZeroInflatedPoisson("y", psi, mu=pm.math.exp(a + X @ b))`` and
``pm.ZeroInflatedNegativeBinomial`` with the same mean and a fixed shape ``alpha``, with
``psi`` fixed (rows of ``eta`` alone, region bounds, control variates in the predictor
coordinates) and with ``psi ~ Beta(2, 2)`` sampled on the logit scale (rows of
``(eta, logit psi)``, the path bound over boxes of both).

What is checked, for each of the four:

* the family is recognised (PyMC builds the likelihood as a ``Mixture`` of
  ``DiracDelta(0)`` and the count distribution);
* ``lambda_i <= phi psi_i`` on every row for random pairs in the region, and not vacuous;
  the same check catches the bound constants halved (its power);
* exactness: the draws of ``q = (a, b, [logit psi])`` match an importance-sampling
  reference of the posterior within ``Z_TOL`` Monte Carlo standard errors (order 2; order 1
  in the slow suite), with few rows read per step.

A sampled ``alpha`` as well as a sampled ``psi`` makes three row coordinates: the family
``zeroinflated_negbinomial_both`` (``tests/steps/test_scalable_zinb_both.py``; with ``psi``
fixed a sampled ``alpha`` is ``tests/steps/test_scalable_zinb_alpha.py``'s). The bounds'
formulas are checked against autodiff on dense grids in
``tests/kernels/families/test_family_zeroinflated.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import expit, gammaln, log_expit

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
PSI = 0.7
ALPHA = 1.7  # the zero-inflated NegativeBinomial's fixed shape


class ZIProblem:
    """``y_i ~ ZIP(psi, exp(a + x_i . b))`` or ``ZINB(psi, exp(a + x_i . b), ALPHA)``,
    ``a, b ~ Normal(0, 3)``; ``psi`` fixed at ``PSI`` or ``~ Beta(2, 2)``.
    q = (a, b0, b1[, logit psi]) is the step's raveled space."""

    def __init__(self, kind, free_psi, n=N_ROWS, seed=5):
        rng = np.random.default_rng(seed)
        self.kind, self.free = kind, free_psi
        self.X = rng.standard_normal((n, 2))
        self.Z = np.column_stack([np.ones(n), self.X])
        eta = self.Z @ np.array([0.5, 0.4, -0.3])
        mu = np.exp(eta)
        if kind == "zinb":
            mu = mu * rng.gamma(ALPHA, 1.0 / ALPHA, n)
        self.y = np.where(rng.random(n) < PSI, rng.poisson(mu), 0).astype(np.int64)
        with pm.Model() as self.model:
            a = pm.Normal("a", 0.0, 3.0)
            b = pm.Normal("b", 0.0, 3.0, shape=2)
            psi = pm.Beta("psi", 2.0, 2.0) if free_psi else PSI
            mu = pm.math.exp(a + pm.math.dot(self.X, b))
            if kind == "zip":
                pm.ZeroInflatedPoisson("y", psi=psi, mu=mu, observed=self.y)
            else:
                pm.ZeroInflatedNegativeBinomial("y", psi=psi, mu=mu, alpha=ALPHA,
                                                observed=self.y)
        self._steps = {}

    def log_post(self, Q):
        """Log posterior density of q (the Beta prior and the logit transform's Jacobian
        included)."""
        eta = Q[:, :3] @ self.Z.T
        r = Q[:, 3:4] if self.free else np.full((Q.shape[0], 1), math.log(PSI / (1 - PSI)))
        log_psi, log_1m = log_expit(r), log_expit(-r)
        mu, y = np.exp(eta), self.y
        if self.kind == "zip":
            log_p0 = -mu
            count = y * eta - mu - gammaln(y + 1.0)
        else:
            a = ALPHA
            log_p0 = a * (math.log(a) - np.log(a + mu))
            count = (gammaln(y + a) - gammaln(a) - gammaln(y + 1.0) + a * math.log(a)
                     + y * eta - (y + a) * np.log(a + mu))
        ll = np.where(y == 0, np.logaddexp(log_1m, log_psi + log_p0),
                      log_psi + count).sum(axis=1)
        lp = -0.5 * (Q[:, :3] ** 2).sum(axis=1) / 9.0
        if self.free:
            psi = expit(r[:, 0])
            lp += stats.beta.logpdf(psi, 2.0, 2.0) + log_psi[:, 0] + log_1m[:, 0]
        return ll + lp

    def step(self, order):
        if order not in self._steps:
            with self.model:
                self._steps[order] = pms.ScalableMH(order=order)
        return self._steps[order]

    def draws_q(self, idata):
        post = posterior(idata)
        parts = [np.asarray(post["a"].values, dtype=float)[..., None],
                 np.asarray(post["b"].values, dtype=float)]
        if self.free:
            p = np.asarray(post["psi"].values, dtype=float)
            parts.append(np.log(p / (1 - p))[..., None])
        return np.concatenate(parts, axis=-1)


@pytest.fixture(scope="module",
                params=["zip-fixed", "zip-free", "zinb-fixed", "zinb-free"])
def problem(request):
    kind, psi = request.param.split("-")
    return ZIProblem(kind, psi == "free")


def test_family_is_recognised(problem):
    step = problem.step(2)
    spec = step._glm_spec
    count = "poisson" if problem.kind == "zip" else "negbinomial"
    if problem.free:
        assert spec.family == f"zeroinflated_{count}_logit" and spec.two_param
        assert step.region == pytest.approx(2.0 + 4.0)
    else:
        assert spec.family == f"zeroinflated_{count}_log" and not spec.two_param
        assert float(spec.params["psi"]) == PSI
        assert step.region == pytest.approx(math.sqrt(3.0) + 4.0)
    assert step.bound_form == "whitened"


# order 1 on PyMC 5 only: the same compiled remainders as order 2, which runs on both,
# against another NumPy constant (see pyproject's "numerics" marker)
@pytest.mark.parametrize("order", [2, pytest.param(1, marks=pytest.mark.numerics)])
def test_bounds_hold_on_every_row(problem, order):
    step = problem.step(order)
    worst = _check_step_bounds(step, np.random.default_rng(41 + order), scales=(0.5, 1.0, 2.0))
    assert 1e-3 < worst <= 1.0, worst


def test_bound_check_catches_halved_constants(problem):
    """The row check of :func:`test_bounds_hold_on_every_row` fails for ``psi_i / 2``."""
    step = problem.step(2)
    rows = np.arange(step.n_rows)
    broken = 0
    for q, qp in _random_pairs(step, np.random.default_rng(3), (1.0, 2.0)):
        if _in_region(step, q) and _in_region(step, qp):
            lam = np.abs(np.asarray(step.remainder_fn(q, qp)(rows)))
            broken += int(np.any(lam > _phi(step, q, qp) * step.psi / 2.0))
    assert broken > 0


@pytest.mark.parametrize("order", [2, pytest.param(1, marks=pytest.mark.slow)])
def test_posterior_is_exact(problem, order):
    step = problem.step(order)
    # 2 x 3,000 draws: pCN moves at order 2 accept ~95% and the batch-means errors of
    # 2 x 1,500 draws were themselves too rough (a variance off by z = 4.7 once)
    idata = _sample(problem.model, step, draws=3000, tune=500,
                    seed=SEED + 80 + order + 2 * problem.free + 4 * (problem.kind == "zinb"))
    ref, ess = _is_reference(problem.log_post, step.theta_hat, _posterior_cov(step),
                             np.random.default_rng(15))
    assert ess > 5000, ess
    label = f"{problem.kind} ({'free' if problem.free else 'fixed'} psi) order {order}"
    assert_matches(problem.draws_q(idata), ref, label=label)
    ss = sample_stats(idata)
    used = np.asarray(ss["data_used"].values, dtype=float).mean()
    assert used < (0.05 * N_ROWS if order == 2 else 0.6 * N_ROWS), used
    assert np.asarray(ss["accepted"].values).mean() > (0.5 if order == 2 else 0.1)
    assert math.isfinite(step.psi_total)


def test_zinb_with_psi_and_alpha_sampled_is_the_three_coordinate_family():
    from pymc_subsample.engine.glm import detect_glm

    prob = ZIProblem("zinb", False, n=50)
    with pm.Model() as model:
        b = pm.Normal("b", 0.0, 1.0, shape=2)
        alpha = pm.HalfNormal("alpha", 2.0)
        psi = pm.Beta("psi", 2.0, 2.0)  # with psi fixed a sampled alpha is supported
        pm.ZeroInflatedNegativeBinomial("y", psi=psi, mu=pm.math.exp(pm.math.dot(prob.X, b)),
                                        alpha=alpha, observed=prob.y)
    assert detect_glm(model).family == "zeroinflated_negbinomial_both"
