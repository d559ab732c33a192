"""docs/architecture.md says a new step method is one module (a SubsampleStep subclass
with its ``_decide``) plus one registry line, and a new proposal one module (a Proposal
subclass) plus one line in ``proposals.REGISTRY``. This checks both, on a conjugate
model whose posterior is known exactly: the step's and the proposal's draws must match
it, and the same check catches a step that accepts every proposal."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helpers import mcse_mean, mcse_sd, posterior, run_sample, sample_stats

from pymc_subsample.proposals.base import Proposal

N, SIGMA, PRIOR_SD = 400, 2.0, 3.0


@pytest.fixture(scope="module")
def conjugate():
    import pymc as pm

    y = np.random.default_rng(31).normal(1.5, SIGMA, N)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, PRIOR_SD)
        pm.Normal("y", mu, SIGMA, observed=y)
    prec = 1.0 / PRIOR_SD**2 + N / SIGMA**2
    return model, y.sum() / SIGMA**2 / prec, math.sqrt(1.0 / prec)


def _exact_mh_step(broken=False):
    """The "one new module": an exact full-data MH step on the package's plumbing."""
    from pymc_subsample.steps.base import SubsampleStep

    class FullDataMH(SubsampleStep):
        name = "full_data_mh"
        keeps_data_sums = False

        def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
            log_r = log_prior_ratio + log_qratio + self.engine.full_loglik_diff(q, q_prop)
            accept = broken or math.log(self.rng.random()) < log_r
            return accept, {"data_used": self.n_rows, "n_batches": 1}

    return FullDataMH


class ReflectedWalk(Proposal):
    """The "one new module" of a proposal: a random walk whose step is reflected about
    the current point with probability 1/2 (symmetric, log ratio 0; no adaptation)."""

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        self._s = np.sqrt(np.diag(cov)) if cov is not None else np.ones(ndim)

    def draw(self, q, rng):
        step = 2.4 * self._s * rng.standard_normal(q.size)
        return q + (step if rng.random() < 0.5 else -step), 0.0


@pytest.mark.parametrize("broken", [False, True])
def test_a_fourth_step_method_is_one_module(conjugate, broken):
    model, mean, sd = conjugate
    with model:
        step = _exact_mh_step(broken)(proposal="random_walk")
    idata = run_sample(model, step, draws=3000, tune=500, chains=2, seed=7)
    mu = posterior(idata)["mu"].values
    z_mean = abs(mu.mean() - mean) / mcse_mean(mu)
    z_sd = abs(mu.std() - sd) / mcse_sd(mu)
    assert (z_mean < 4 and z_sd < 4) != broken, (z_mean, z_sd)
    st = sample_stats(idata)  # no accept from _decide: the decision is reported
    np.testing.assert_array_equal(st["accept"].values, st["accepted"].values)


def test_a_new_proposal_is_one_module_plus_a_registry_line(conjugate, monkeypatch):
    import pymc_subsample as pms
    from pymc_subsample import proposals

    monkeypatch.setitem(proposals.REGISTRY, "reflected", ReflectedWalk)
    model, mean, sd = conjugate
    with model:
        step = pms.AustereMH(proposal="reflected", control_variate=2)
    assert type(step.proposal).__name__ == "ReflectedWalk"
    idata = run_sample(model, step, draws=3000, tune=500, chains=2, seed=8)
    mu = posterior(idata)["mu"].values
    assert abs(mu.mean() - mean) < 4 * mcse_mean(mu) + 0.02 * sd
    assert abs(mu.std() - sd) < 4 * mcse_sd(mu) + 0.02 * sd
