"""ScalableMH with ``bounds="auto"`` on a multinomial logit,
``pm.Categorical("y", p=pm.math.softmax(a + X @ B, axis=-1))`` (also ``logit_p=`` and the
form with K - 1 free classes and a zero reference column).

What is checked:

* the model is recognised in all three spellings (:mod:`pymc_subsample.engine.softmax`),
  with the path step factor and the region; other Categoricals and non-affine class
  predictors are refused with short messages;
* ``lambda_i <= phi psi_i`` on every row for random pairs in the region (whitened
  region and global bounds, and eq. 12's ``bound_form="cornish"``), not vacuous; the same
  check catches the constants divided by 10 (its power), and so does the sampler itself
  (:class:`~pymc_subsample.kernels.scalable.thinning.BoundViolationError`);
* exactness (slow): the draws of ``q`` match an importance-sampling reference of the
  posterior within ``Z_TOL`` Monte Carlo standard errors, with few rows read per step.

The bound formulas are checked against brute-force maxima in
``tests/kernels/scalable/test_softmax.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from scipy.special import logsumexp

import pymc_subsample as pms
from pymc_subsample.engine.softmax import SoftmaxSpec, detect_specs
from pymc_subsample.kernels.families import REFUSAL_LIMIT
from pymc_subsample.kernels.scalable.phi import path_phi, taylor_phi
from pymc_subsample.kernels.scalable.thinning import BoundViolationError
from pymc_subsample.testing import sample_stats
from tests.steps.test_scalable import (
    SEED,
    _draws,
    _is_reference,
    _posterior_cov,
    _sample,
    assert_matches,
)

N_ROWS, D, K = 1500, 2, 3


class SoftmaxProblem:
    """``y_i ~ Categorical(softmax(a + x_i B))``, ``a, B ~ Normal(0, 2)``; ``form``:
    ``"p"`` (``p=pm.math.softmax``), ``"logit_p"``, or ``"reference"`` (K - 1 free
    classes, class 0's predictor fixed at 0)."""

    def __init__(self, form, n=N_ROWS, seed=3):
        rng = np.random.default_rng(seed)
        self.form = form
        self.X = rng.standard_normal((n, D))
        eta = np.column_stack([np.zeros(n), self.X @ np.array([[0.8, -0.4], [0.3, 0.6]])
                               + np.array([0.2, -0.3])])
        self.y = np.argmax(eta + rng.gumbel(size=eta.shape), axis=1)
        self.k_free = K - 1 if form == "reference" else K
        with pm.Model() as self.model:
            B = pm.Normal("B", 0.0, 2.0, shape=(D, self.k_free))
            a = pm.Normal("a", 0.0, 2.0, shape=self.k_free)
            e = a + pm.math.dot(self.X, B)
            if form == "reference":
                e = pt.concatenate([pt.zeros((n, 1)), e], axis=1)
            if form == "logit_p":
                pm.Categorical("y", logit_p=e, observed=self.y)
            else:
                pm.Categorical("y", p=pm.math.softmax(e, axis=-1), observed=self.y)
        self._steps = {}

    def names(self, step):
        return [v.name for v in step.engine.vars]

    def log_post(self, Q, names):
        """Log posterior density of q (raveled in the step's order ``names``)."""
        parts, i = {}, 0
        for name in names:
            size = D * self.k_free if name == "B" else self.k_free
            parts[name] = Q[:, i:i + size]
            i += size
        B = parts["B"].reshape(-1, D, self.k_free)
        eta = parts["a"][:, None, :] + np.einsum("nd,sdk->snk", self.X, B)
        if self.form == "reference":
            eta = np.concatenate([np.zeros(eta.shape[:2] + (1,)), eta], axis=2)
        ll = (np.take_along_axis(eta, self.y[None, :, None], axis=2)[..., 0]
              - logsumexp(eta, axis=2)).sum(axis=1)
        return ll - 0.5 * (Q**2).sum(axis=1) / 4.0

    def step(self, order=2, **kw):
        key = (order, tuple(sorted(kw.items())))
        if key not in self._steps:
            with self.model:
                self._steps[key] = pms.ScalableMH(order=order, **kw)
        return self._steps[key]


@pytest.fixture(scope="module")
def reference():
    return SoftmaxProblem("reference")


def _random_pairs(step, rng, scales):
    th = step.theta_hat
    L = np.linalg.cholesky(_posterior_cov(step))
    for s in scales:
        for _ in range(4):
            q = th + s * L @ rng.standard_normal(th.size)
            yield q, th + s * L @ rng.standard_normal(th.size)


def _phi(step, q, qp):
    """The path step factor (whitened) or eq. 13's, recomputed from the kernels."""
    if step.bound_form == "cornish":
        return taylor_phi(q, qp, step.theta_hat, step.order)
    return path_phi(step.whiten(q), step.whiten(qp), step.order)


def _inside(step, q):
    if step.region is None:
        return True
    z = step.whiten(q)
    return float(z @ z) <= step.region**2


def _worst_ratio(step, rng, scales, psi=None):
    """``max_i |lambda_i| / (phi psi_i)`` over random pairs in the region (> 1: broken)."""
    psi = step.psi if psi is None else psi
    rows = np.arange(step.n_rows)
    worst, checked = 0.0, 0
    for q, qp in _random_pairs(step, rng, scales):
        if not (_inside(step, q) and _inside(step, qp)):
            continue
        checked += 1
        lam = np.abs(np.asarray(step.remainder_fn(q, qp)(rows)))
        bound = _phi(step, q, qp) * psi
        worst = max(worst, float(np.max((lam - 1e-10) / (bound * (1 + 1e-8)))))
    assert checked >= 4
    return worst


@pytest.mark.parametrize("form", ["p", "logit_p", "reference"])
def test_the_three_spellings_are_recognised(form):
    prob = SoftmaxProblem(form, n=200)
    (spec,) = detect_specs(prob.model)
    assert isinstance(spec, SoftmaxSpec) and spec.observed == "y" and spec.n_classes == K


def test_the_step_takes_path_region_bounds(reference):
    step = reference.step()
    assert step.bound_form == "whitened" and step.bounds.path
    assert step.region == pytest.approx(math.sqrt(D * (K - 1) + K - 1) + 4.0)
    assert step.psi.shape == (N_ROWS,) and np.all(step.psi > 0)
    assert step.psi_total < 1.0  # N = 1,500 rows: O(1/sqrt N) each at order 2


@pytest.mark.parametrize("kw", [{}, {"region": None}, {"bound_form": "cornish"},
                                pytest.param({"order": 1}, marks=pytest.mark.slow)],
                         ids=["region", "global", "cornish", "order1"])
def test_bounds_hold_on_every_row(reference, kw):
    kw = dict(kw)
    step = reference.step(kw.pop("order", 2), **kw)
    worst = _worst_ratio(step, np.random.default_rng(41), (0.5, 1.0, 2.0))
    assert 1e-3 < worst <= 1.0, worst


def test_bound_check_catches_a_tenth_of_the_constants(reference):
    """The row check fails for ``psi_i / 10``; and the sampler raises on a drawn row that
    breaks its bound."""
    step = reference.step()
    assert _worst_ratio(step, np.random.default_rng(3), (1.0, 2.0), psi=step.psi / 10) > 1.0
    broken = SoftmaxProblem("reference", seed=3)
    bstep = broken.step()
    from pymc_subsample.steps.scalable_bounds import Bounds

    b = bstep.bounds
    bstep.bounds = Bounds(b.psi / 10, b.form, b.order, b.whiten_inv, b.region, path=b.path)
    with pytest.raises(BoundViolationError):
        _sample(broken.model, bstep, draws=300, tune=0, chains=1, seed=SEED)


#: the registry's refusal of a Categorical no family matches (softmax, ordered)
NOT_SOFTMAX = r"Categorical but neither with p=pm\.math\.softmax\(eta, axis=-1\)"


def test_other_categoricals_are_refused():
    X = np.random.default_rng(0).standard_normal((50, D))
    y = np.zeros(50, dtype=int)
    with pm.Model() as m1:
        w = pm.Dirichlet("w", np.ones(K))
        pm.Categorical("y", p=w, observed=y)
    with pytest.raises(ValueError, match=NOT_SOFTMAX) as err:
        detect_specs(m1)
    assert len(str(err.value)) <= REFUSAL_LIMIT
    for axis in (0, None):  # normalised over the rows, or over everything
        with pm.Model() as m3:
            B = pm.Normal("B", 0.0, 1.0, shape=(D, K))
            pm.Categorical("y", p=pt.special.softmax(pm.math.dot(X, B), axis=axis),
                           observed=y)
        with pytest.raises(ValueError, match=NOT_SOFTMAX):
            detect_specs(m3)
    with pm.Model() as m2:
        B = pm.Normal("B", 0.0, 1.0, shape=(D, K))
        pm.Categorical("y", logit_p=pm.math.dot(X, pm.math.exp(B)), observed=y)
        with pytest.raises(ValueError, match="not affine") as err:
            pms.ScalableMH()
    assert len(str(err.value)) <= REFUSAL_LIMIT


def _check_exact(prob, step, seed, draws=3000):
    idata = _sample(prob.model, step, draws=draws, tune=500, seed=seed)
    names = prob.names(step)
    ref, ess = _is_reference(lambda Q: prob.log_post(Q, names), step.theta_hat,
                             _posterior_cov(step), np.random.default_rng(15))
    assert ess > 5000, ess
    assert_matches(_draws(idata, names), ref, label=f"softmax {prob.form} order {step.order}")
    ss = sample_stats(idata)
    used = np.asarray(ss["data_used"].values, dtype=float).mean()
    return used, np.asarray(ss["accepted"].values).mean()


@pytest.mark.slow
def test_posterior_is_exact_reference_form(reference):
    used, acc = _check_exact(reference, reference.step(), SEED + 90)
    assert used < 0.05 * N_ROWS and acc > 0.5, (used, acc)


@pytest.mark.slow
def test_posterior_is_exact_full_form():
    """All K classes free (the common shift identified by the prior only), ``logit_p=``."""
    prob = SoftmaxProblem("logit_p")
    used, acc = _check_exact(prob, prob.step(), SEED + 91)
    assert used < 0.05 * N_ROWS and acc > 0.5, (used, acc)


@pytest.mark.slow
def test_posterior_is_exact_order_1(reference):
    used, acc = _check_exact(reference, reference.step(1), SEED + 92)
    assert used < 0.6 * N_ROWS and acc > 0.1, (used, acc)
