"""The blocked sweep on the linear mixed model: a Normal likelihood with a sampled scale
``sigma`` and one random intercept per group (``pymc_subsample.steps.hierarchical.normal``).

* the structure is found with its scale, centred and non-centred; ``print(step)`` names
  the scale and its move; the Student-t and other sampled-parameter families are still
  refused, saying so;
* the sufficient statistics give the exact residual sum of squares and the exact
  log-likelihood differences of the moves (against the rows);
* a Uniform prior on sigma (an interval transform) gets the random-walk scale move, which
  draws the sigma of the conditional move (slow);
* the sweep reads no row while sampling, its stats carry the scale move's (prefixed);
  the three MH steps run the same chain;
* the posterior of every step, centred and non-centred, matches long PyMC NUTS
  (``benchmarks/lmm_reference.py``, ``tests/data/lmm_nuts.json``): every mean within
  0.1 sd + 4 MCSE, sds within 0.8-1.25x, R-hat <= 1.01 and bulk ESS >= 400 from
  2 x 1,000 draws; a scale move without its proposal density, and an exact test that
  accepts everything, fail the same check.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.engine import LikelihoodEngine
from pymc_subsample.engine.groups import GroupStructure, NotFound, find_groups
from pymc_subsample.steps.hierarchical import HierarchicalSweep
from pymc_subsample.steps.hierarchical.normal import ExactNormalTest, ScaleConditional
from pymc_subsample.testing import (ess, hierarchical_data, hierarchical_model, mcse_mean,
                                    posterior)

REF_FILE = os.path.join(os.path.dirname(__file__), "..", "data", "lmm_nuts.json")


def _reference():
    with open(REF_FILE) as fh:
        return json.load(fh)


def _small(centred, n=3000, groups=15, seed=2):
    data = hierarchical_data(n, groups, family="normal", n_features=2, seed=seed)
    return hierarchical_model(data, centred=centred, family="normal"), data


# ------------------------------------------------------------------ the structure
@pytest.mark.parametrize("centred", [True, False])
def test_structure_with_the_scale(centred):
    model, data = _small(centred)
    s = find_groups(LikelihoodEngine(model))
    assert isinstance(s, GroupStructure), s
    assert s.family == "normal_scale" and s.scale is not None
    assert s.scale.name == "sigma" and s.scale.log_is_coordinate
    assert s.terms[0].hyper_names == ["mu", "tau"] and s.fixed_names == ["beta"]
    with model:
        step = pms.ScalableMH()
    text = repr(step)
    assert "blocked hierarchical sweep" in text and "sampled scale 'sigma'" in text
    assert "its own move" in text


def test_other_sampled_parameters_still_refused():
    rng = np.random.default_rng(0)
    n, G = 400, 6
    g = rng.integers(0, G, n)
    y = rng.normal(size=n)
    with pm.Model() as student:
        a = pm.Normal("a", 0, pm.HalfNormal("tau", 1), shape=G)
        pm.StudentT("y", nu=4, mu=a[g], sigma=pm.HalfNormal("sigma", 1), observed=y)
    reason = find_groups(LikelihoodEngine(student)).reason
    assert "StudentT" in reason and "not covered yet" in reason
    with pm.Model() as shared_scale:  # sigma also the group scale: not covered
        sigma = pm.HalfNormal("sigma", 1)
        a = pm.Normal("a", 0, sigma, shape=G)
        pm.Normal("y", mu=a[g], sigma=sigma, observed=y)
    found = find_groups(LikelihoodEngine(shared_scale))
    assert isinstance(found, NotFound) and "sigma" in found.reason


def _uniform_scale_model(data):
    with pm.Model() as uni:
        mu, tau = pm.Normal("mu", 0, 1.5), pm.HalfNormal("tau", 1)
        a = pm.Normal("a", mu, tau, shape=8)
        beta = pm.Normal("beta", 0, 1, shape=2)
        sigma = pm.Uniform("sigma", 0, 10)
        pm.Normal("y", a[data["group"]] + pm.math.dot(data["X"], beta), sigma,
                  observed=data["y"])
    return uni


def test_uniform_scale_prior_uses_a_random_walk():
    """A scale whose coordinate is not log sigma (an interval transform): found, with the
    random-walk scale move."""
    s = find_groups(LikelihoodEngine(_uniform_scale_model(_small(True, n=1500, groups=8)[1])))
    assert isinstance(s, GroupStructure) and not s.scale.log_is_coordinate
    assert "random walk" in s.describe()


@pytest.mark.slow
def test_uniform_scale_prior_samples_the_same_sigma():
    """The random-walk scale move (several per sweep) under a Uniform prior draws the
    sigma of the HalfNormal prior's conditional move (the data dominate either prior)."""
    model, data = _small(True, n=1500, groups=8)
    uni = _uniform_scale_model(data)
    draws = []
    for m in (uni, model):
        with m:
            step = pms.ScalableMH()
            idata = pm.sample(step=step, draws=500, tune=500, chains=2, cores=1,
                              random_seed=6, progressbar=False,
                              compute_convergence_checks=False)
        draws.append(posterior(idata)["sigma"].values)
        assert step.sweep.counts["scale"] == (6 if m is uni else 1)
    (x, ref) = draws
    assert abs(x.mean() - ref.mean()) < 0.1 * ref.std() + 4 * np.hypot(mcse_mean(x),
                                                                         mcse_mean(ref))
    assert 0.8 < x.std() / ref.std() < 1.25 and ess(x) > 200


# ------------------------------------------------------------------ exactness
def _rows_ssr(data, beta, a):
    r = data["y"] - data["X"] @ beta - a[data["group"]]
    return float(r @ r)


@pytest.mark.parametrize("centred", [True, False])
def test_sums_give_the_exact_likelihood(centred):
    """SSR from the sufficient statistics equals the rows' at random points, and the
    exact test's per-group and block log-likelihood differences are the rows'."""
    model, data = _small(centred)
    with model:
        step = pms.AustereMH()
    fit, test = step.sweep.fit, step.sweep.factorised
    assert isinstance(test, ExactNormalTest)
    sums, t = fit.sums, fit.taylor
    rng = np.random.default_rng(3)
    G, sc = len(data["sizes"]), fit.s.scale
    for _ in range(5):
        db, da = 0.05 * rng.standard_normal(2), 0.2 * rng.standard_normal(G)
        want = _rows_ssr(data, t.beta_hat + db, t.a_hat + da)
        np.testing.assert_allclose(sums.ssr(db, da), want, rtol=1e-10)
    q = step.engine.initial_q()
    q[sc.idx] = np.log(1.1)
    db, a = 0.01 * rng.standard_normal(2), t.a_hat + 0.1 * rng.standard_normal(G)
    a_new = a + 0.05 * rng.standard_normal(G)
    beta = t.beta_hat + db

    def loglik_g(a_):
        r = data["y"] - data["X"] @ beta - a_[data["group"]]
        return np.bincount(data["group"], -0.5 * r * r / 1.1**2, G)

    want = loglik_g(a_new) - loglik_g(a)
    for k in range(G):  # accepted exactly when log u < the group's log ratio
        for eps in (-1e-6, 1e-6):
            log_u = np.full(G, -np.inf)
            log_u[k] = min(want[k], 0.0) + eps
            ok, used = test.decide(db, a, db, a_new, log_u, np.zeros(G), rng, per_group=True,
                                   q=q, q_new=q)
            assert ok[k] == (eps < 0) and used == 0
    q_new = q.copy()
    q_new[sc.idx] = np.log(0.95)
    full = (-data["y"].size * np.log(0.95 / 1.1)
            - 0.5 * _rows_ssr(data, beta, a_new) / 0.95**2
            + 0.5 * _rows_ssr(data, beta, a) / 1.1**2)
    for eps in (-1e-6, 1e-6):
        ok, _ = test.decide(db, a, db, a_new, min(full, 0.0) + eps, 0.0, rng, per_group=False,
                            q=q, q_new=q_new)
        assert ok == (eps < 0)


def test_scale_move_is_the_likelihoods_conditional():
    """Given the effects, the scale move's draws of 1 / sigma^2 follow Gamma(N/2, SSR/2)
    (before the prior's accept step) and its ratio is the prior's."""
    model, data = _small(False)
    with model:
        step = pms.BarkerMinibatch()
    sweep = step.sweep
    move = next(m for m in sweep.moves if isinstance(m, ScaleConditional))
    sweep.reset()
    q = sweep.init(step.engine.initial_q(), warm_start=True)
    rng = np.random.default_rng(0)
    lam = []
    for _ in range(4000):
        q_new, _, aux = move.propose(q, rng, sweep.state)
        lam.append(np.exp(-2.0 * aux[2]))
    ssr, n = aux[0], data["y"].size
    lam = np.array(lam)
    np.testing.assert_allclose(lam.mean(), n / ssr, rtol=5 * np.sqrt(2 / n) / np.sqrt(4000))
    np.testing.assert_allclose(lam.std(), np.sqrt(2 * n) / ssr, rtol=0.05)
    prior = step.engine.prior
    np.testing.assert_allclose(move.log_ratio(q, q_new, prior, aux),
                               prior(q_new) - prior(q), atol=1e-6)


def test_sweep_reads_no_rows_and_names_the_scale_move():
    model, _ = _small(False)
    with model:
        step = pms.ScalableMH()
        idata = pm.sample(step=step, draws=50, tune=50, chains=1, random_seed=1,
                          progressbar=False, compute_convergence_checks=False)
    assert np.all(idata.sample_stats["data_used"].values == 0)
    means = step.sweep.move_stats()
    assert {"scale__accepted", "scale__data_used"} <= set(means)
    assert means["scale__accepted"] > 0.9
    assert set(means) == {f"{name}__{stat}" for name in
                          [*HierarchicalSweep.DEFAULT_MOVES, "scale"]
                          for stat in ("accepted", "data_used")}


def test_every_mh_step_and_both_forms_run_the_same_chain():
    out = []
    for centred, cls in ((True, pms.ScalableMH), (True, pms.AustereMH),
                         (True, pms.BarkerMinibatch), (False, pms.ScalableMH)):
        with _small(centred)[0]:
            idata = pm.sample(step=cls(), draws=40, tune=40, chains=1, random_seed=4,
                              progressbar=False, compute_convergence_checks=False)
        out.append(posterior(idata)["sigma"].values)
    for other in out[1:3]:
        np.testing.assert_array_equal(other, out[0])
    np.testing.assert_allclose(out[3], out[0], rtol=1e-6)


def test_set_data_is_refused():
    model, data = _small(True, n=1500, groups=8)
    with model:
        step = pms.ScalableMH()
        pm.set_data({"X": data["X"] + 1.0})
        with pytest.raises(Exception, match="changed since this step was built"):
            pm.sample(step=step, draws=5, tune=5, chains=1, random_seed=1,
                      progressbar=False, compute_convergence_checks=False)


# ------------------------------------------------------------------ against NUTS
def _series(post):
    out = {"mu": post["mu"].values, "log_tau": np.log(post["tau"].values),
           "log_sigma": np.log(post["sigma"].values)}
    for j in range(post["beta"].shape[-1]):
        out[f"beta[{j}]"] = post["beta"].values[..., j]
    for g in range(post["a"].shape[-1]):
        out[f"a[{g}]"] = post["a"].values[..., g]
    return out


def check_against_reference(idata, ref):
    """The quantities outside the tolerances: ``(name, problem)`` for a mean off by more
    than 0.1 sd + 4 MCSE, an sd ratio outside 0.8-1.25, R-hat above 1.01 or bulk ESS
    below 400; and the worst figures."""
    import arviz as az

    bad, worst = [], {"mean_err_sd": 0.0, "sd_ratio": [np.inf, 0.0], "rhat": 0.0,
                      "ess": np.inf}
    for name, x in _series(posterior(idata)).items():
        mean, sd, mcse_ref = ref[name]
        err, ratio = abs(x.mean() - mean), x.std() / sd
        rhat, n_eff = float(az.rhat(x)), ess(x, method="bulk")
        worst["mean_err_sd"] = max(worst["mean_err_sd"], err / sd)
        worst["sd_ratio"] = [min(worst["sd_ratio"][0], ratio), max(worst["sd_ratio"][1], ratio)]
        worst["rhat"], worst["ess"] = max(worst["rhat"], rhat), min(worst["ess"], n_eff)
        if err > 0.1 * sd + 4.0 * np.hypot(mcse_mean(x), mcse_ref):
            bad.append((name, "mean", round(float(x.mean()), 4), mean))
        if not 0.8 <= ratio <= 1.25:
            bad.append((name, "sd ratio", round(float(ratio), 3)))
        if rhat > 1.01:
            bad.append((name, "rhat", round(rhat, 4)))
        if n_eff < 400:
            bad.append((name, "ess", round(n_eff)))
    return bad, worst


def _sample_reference_model(step_name, centred, seed=23):
    data = hierarchical_data(**_reference()["settings"]["data"])
    with hierarchical_model(data, centred=centred, family="normal"):
        step = getattr(pms, step_name)()
        return pm.sample(step=step, draws=1000, tune=1000, chains=2, cores=1,
                         random_seed=seed, progressbar=False, compute_convergence_checks=False)


@pytest.mark.slow
@pytest.mark.parametrize("centred", [True, False])
@pytest.mark.parametrize("step_name", ["AustereMH", "BarkerMinibatch", "ScalableMH"])
def test_posterior_matches_long_nuts(step_name, centred):
    """2 chains x (1,000 tune + 1,000 draws) at the step's defaults on 20,000 rows in 100
    groups (5 of 1-10 rows): every mean (mu, log tau, log sigma, beta, every group
    effect) within 0.1 sd + 4 MCSE of the reference, sds within 0.8-1.25x, R-hat <= 1.01,
    bulk ESS >= 400."""
    idata = _sample_reference_model(step_name, centred)
    bad, worst = check_against_reference(idata, _reference()["reference"])
    print(step_name, "centred" if centred else "non-centred", worst)
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.parametrize("broken", ["scale_proposal", "accept_all"])
def test_broken_sweep_fails_the_check(broken, monkeypatch):
    """The check can fail: a scale move without its proposal density (it then samples
    sigma from the likelihood squared: its sd shrinks by sqrt 2), and an exact test that
    accepts every proposal."""
    if broken == "scale_proposal":
        monkeypatch.setattr(ScaleConditional, "proposal_logpdf", lambda self, u, ssr: 0.0)
    else:
        monkeypatch.setattr(ExactNormalTest, "decide", lambda self, *a, per_group, **k: (
            np.ones(self.fit.term.n_groups, bool) if per_group else True, 0))
    idata = _sample_reference_model("ScalableMH", True)
    bad, _ = check_against_reference(idata, _reference()["reference"])
    print(broken, len(bad), "failures, e.g.", bad[:4])
    assert bad
    if broken == "scale_proposal":
        assert ("log_sigma", "sd ratio") in {b[:2] for b in bad}


def test_sgld_refuses_the_linear_mixed_model():
    """SGLD's default refusal of group structures now names the linear mixed model too
    (it used to sample it, diverging, as a model without groups)."""
    from pymc_subsample.errors import ModelNotSupportedError

    with _small(True)[0]:
        with pytest.raises(ModelNotSupportedError, match="sampled scale 'sigma'"):
            pms.SGLD()
