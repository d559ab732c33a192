"""Models written as model builders write them (Bambi's idioms) run the steps their plain
forms run.

Bambi (``shared/notes/bambi-and-pymc6-facts.md``) writes a GLM's mean through a
``pm.Deterministic`` (``p``, ``mu``), a Bernoulli's ``p`` as ``sigmoid(eta)`` clipped away
from 0 and 1 by machine epsilon (two ``switch(eq(.., c), k, ..)`` guards), and a random
intercept as ``a[g] * 1`` with a column of ones of ``N`` rows. These tests write those
idioms by hand in PyMC (Bambi need not be installed):

* the link readers see through the Deterministic and the guards, and no further:
  a switch that changes the value where ``p`` is not exactly 0 or 1 is not a guard, and
  ``bounds="auto"`` refuses it as before;
* a column of ones in the predictor, which PyMC drops from the likelihood, no longer
  breaks the batch graphs (it asserted the data's length on every batch);
* each idiom model finds the same blocked sweep and runs the same chain, draw for draw
  (to rounding), as its plain form, for the Bernoulli, Poisson and Normal (sampled
  ``sigma``) likelihoods, so the plain forms' posterior checks against long NUTS
  (``tests/steps/test_hierarchical.py``, ``test_hierarchical_normal.py``) cover them;
* with Bambi installed, a Bambi model fits end to end through ``m.fit(step=...)``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_subsample as pms
from pymc_subsample.testing import hierarchical_data, hierarchical_model, posterior

EPS = np.finfo(np.float64).eps


def _clipped_sigmoid(eta, low=EPS, high=1.0 - EPS, at_one=1.0):
    """Bambi's ``p``: ``sigmoid(eta)`` with an exact 0 replaced by ``low`` and an exact
    ``at_one`` by ``high``."""
    p = pt.sigmoid(eta)
    p = pt.switch(pt.eq(p, 0), low, p)
    return pt.switch(pt.eq(p, at_one), high, p)


def _idiom_model(data, family, *, guard=_clipped_sigmoid):
    """:func:`~pymc_subsample.testing.hierarchical_model` (non-centred) written with
    Bambi's idioms: the same variables, their names and order, so the same ``q``."""
    X, group, y = (np.asarray(data[k]) for k in ("X", "group", "y"))
    n_groups = int(group.max()) + 1
    ones = np.ones(X.shape[0], dtype=np.int64)  # Bambi's intercept column of the term
    coords = {"group": np.arange(n_groups), "obs": np.arange(X.shape[0]),
              "feature": np.arange(X.shape[1])}
    with pm.Model(coords=coords) as model:
        group_d = pm.Data("g", group, dims="obs")
        X_d = pm.Data("X", X, dims=("obs", "feature"))
        mu = pm.Normal("mu", 0.0, 1.5)
        tau = pm.HalfNormal("tau", 1.0)
        beta = pm.Normal("beta", 0.0, 1.0, dims="feature")
        z = pm.Normal("z", 0.0, 1.0, dims="group")
        a = pm.Deterministic("a", mu + tau * z, dims="group")
        eta = a[group_d] * ones + pm.math.dot(X_d, beta)
        if family == "bernoulli":
            pm.Bernoulli("y", p=pm.Deterministic("p", guard(eta), dims="obs"), observed=y,
                         dims="obs")
        elif family == "poisson":
            pm.Poisson("y", mu=pm.Deterministic("m", pm.math.exp(eta), dims="obs"),
                       observed=y, dims="obs")
        else:
            sigma = pm.HalfNormal("sigma", 1.0)
            pm.Normal("y", mu=pm.Deterministic("m", eta, dims="obs"), sigma=sigma,
                      observed=y, dims="obs")
    return model


def _data(family, n=1500, groups=12, seed=0):
    return hierarchical_data(n, groups, n_features=2, seed=seed, family=family)


def _draws(model, n=100, seed=3):
    with model:
        idata = pm.sample(step=pms.ScalableMH(), draws=n, tune=n, chains=1, cores=1,
                          random_seed=seed, progressbar=False,
                          compute_convergence_checks=False)
    return posterior(idata)


@pytest.mark.parametrize("family", ["bernoulli", "poisson", "normal"])
def test_idioms_run_the_same_chain_as_the_plain_model(family):
    data = _data(family)
    idiom = _idiom_model(data, family)
    with idiom:
        step = pms.AustereMH()
    assert step.sweep is not None, step
    assert "random intercept 'z' (non-centred)" in repr(step)
    plain = _draws(hierarchical_model(data, centred=False, family=family))
    got = _draws(idiom)
    for name in ("tau", "a", "beta") + (("sigma",) if family == "normal" else ()):
        np.testing.assert_allclose(got[name].values, plain[name].values, rtol=1e-6,
                                   atol=1e-8, err_msg=name)


def test_a_switch_that_changes_p_is_not_read_as_the_link():
    """Only exact 0 / 1 guards by a constant within 1e-6 are seen through: a guard that
    moves ``p`` where it is 1 to 0.5, or that tests another value, is a different model,
    and ScalableMH's automatic bounds refuse it as they refuse any unknown link."""
    data = _data("bernoulli", n=400, groups=5)
    with _idiom_model(data, "bernoulli"):
        assert pms.ScalableMH().sweep is not None
    for guard in (lambda eta: _clipped_sigmoid(eta, high=0.5),
                  lambda eta: _clipped_sigmoid(eta, at_one=0.5)):
        with _idiom_model(data, "bernoulli", guard=guard):
            with pytest.raises(ValueError, match="neither with a logit link"):
                pms.ScalableMH()


def test_a_column_of_ones_in_the_flat_predictor():
    """``b0 * 1 + x * b1`` with a Normal likelihood (PyMC drops the ones from the
    likelihood; the predictor's graph keeps them): the steps build and sample."""
    rng = np.random.default_rng(2)
    n = 3000
    x = rng.normal(size=n)
    y = 0.5 + 2.0 * x + rng.normal(size=n)
    with pm.Model():
        b0 = pm.Normal("b0", 0, 5)
        b1 = pm.Normal("b1", 0, 5)
        sigma = pm.HalfNormal("sigma", 2)
        pm.Normal("y", mu=b0 * np.ones(n) + b1 * x, sigma=sigma, observed=y)
        idata = pm.sample(step=pms.AustereMH(), draws=300, tune=300, chains=1,
                          random_seed=1, progressbar=False, compute_convergence_checks=False)
    b1_draws = posterior(idata)["b1"].values
    assert abs(b1_draws.mean() - 2.0) < 0.1


def test_bambi_model_fits_end_to_end():
    """A Bambi Bernoulli model with a random intercept: the sweep is found in
    ``m.backend.model`` and ``m.fit(step=...)`` returns its draws (skipped without the
    ``bambi`` extra)."""
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    data = _data("bernoulli", n=2000, groups=10, seed=4)
    df = pd.DataFrame({"y": data["y"], "x0": data["X"][:, 0], "x1": data["X"][:, 1],
                       "g": [f"L{k}" for k in data["group"]]})
    m = bmb.Model("y ~ x0 + x1 + (1|g)", df, family="bernoulli")
    m.build()
    with m.backend.model:
        step = pms.ScalableMH()
    assert step.sweep is not None, step
    idata = m.fit(step=step, draws=100, tune=100, chains=1, cores=1, random_seed=1,
                  progressbar=False)
    sd = posterior(idata)["1|g_sigma"].values
    assert np.all(np.isfinite(sd)) and np.std(sd) > 0


@pytest.mark.parametrize("formula, terms", [
    ("z ~ x + (1|g) + (1|h)", 2),  # crossed factors
    ("z ~ x + (x|g)", 2),          # an intercept and a slope per group
    ("z ~ x + (1|g/k)", 2),        # a factor nested in g
])
def test_bambi_gaussian_group_terms_run_the_exact_sweep(formula, terms):
    """Bambi's Gaussian mixed models with several group terms run the exact Gaussian sweep
    (every term found in ``m.backend.model``, Bambi's unnamed index constants named as
    such), and ``m.fit(step=...)`` samples them reading no row per draw (skipped without
    the ``bambi`` extra; the sweep's exactness is tested on the plain models,
    ``test_hierarchical_crossed.py``)."""
    bmb = pytest.importorskip("bambi")
    import pandas as pd

    from pymc_subsample.steps.hierarchical import GaussianSweep

    rng = np.random.default_rng(5)
    n = 1500
    g, h = rng.integers(0, 8, n), rng.integers(0, 5, n)
    k = rng.integers(0, 3, n)
    x = rng.normal(size=n)
    z = 0.3 + 0.5 * x + rng.normal(0, 0.5, 8)[g] + rng.normal(0, 0.4, 5)[h] + rng.normal(size=n)
    df = pd.DataFrame({"z": z, "x": x, "g": [f"G{v}" for v in g], "h": [f"H{v}" for v in h],
                       "k": [f"K{v}" for v in k]})
    m = bmb.Model(formula, df, family="gaussian")
    m.build()
    with m.backend.model:
        step = pms.ScalableMH()
    assert isinstance(step.sweep, GaussianSweep), step
    assert len(step.hierarchy.terms) == terms
    text = step.hierarchy.describe()
    assert "an unnamed index" in text and "sigma" in text, text
    if "(x|g)" in formula:
        assert "random slope on an unnamed covariate" in text, text
    idata = m.fit(step=step, draws=150, tune=150, chains=1, cores=1, random_seed=1,
                  progressbar=False)
    assert float(idata.sample_stats["data_used"].max()) == 0
    for name in ("sigma", "1|g_sigma"):
        draws = posterior(idata)[name].values
        assert np.all(np.isfinite(draws)) and np.std(draws) > 0, name
