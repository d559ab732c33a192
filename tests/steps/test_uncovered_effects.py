"""A random-effect model the blocked sweep does not cover is sampled by the joint move,
which does not mix on it (R-hat 1.6-3.7 on real data, issue 44): the MH steps warn before
sampling, naming the effects and why the sweep does not take the model, and again in
each chain's first draw's ``warning`` stat. A covered model, a model without random
effects and a user's own choice of the joint move do not warn."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.engine.groups import random_effects
from tests.conftest import run_sample

N, G, H = 1500, 12, 7


def _data(seed=0):
    rng = np.random.default_rng(seed)
    g, h = rng.integers(0, G, N), rng.integers(0, H, N)
    x = rng.standard_normal(N)
    eta = 0.3 + 0.5 * x + rng.normal(0, 0.5, G)[g] + rng.normal(0, 0.5, H)[h]
    y = (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(np.int64)
    return g, h, x, y


def _crossed():
    g, h, x, y = _data()
    with pm.Model() as model:
        gd = pm.Data("carrier", g)
        a = pm.Normal("a", 0, pm.HalfNormal("tau_a", 1), shape=G)
        c = pm.Normal("c", 0, pm.HalfNormal("tau_c", 1), shape=H)
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x + a[gd] + c[h], observed=y)
    return model


def _one_intercept():
    g, _, x, y = _data()
    with pm.Model() as model:
        a = pm.Normal("a", 0, pm.HalfNormal("tau_a", 1), shape=G)
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x + a[g], observed=y)
    return model


def _flat():
    _, _, x, y = _data()
    with pm.Model() as model:
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x, observed=y)
    return model


def test_random_effects_are_found_by_name():
    assert sorted(random_effects(pms.LikelihoodEngine(_crossed()))) == ["a[carrier]",
                                                                 "c[row index]"]
    assert random_effects(pms.LikelihoodEngine(_flat())) == []


@pytest.mark.parametrize("name", ["ScalableMH", "AustereMH", "BarkerMinibatch"])
def test_crossed_effects_warn_before_sampling_and_in_the_first_draw(name):
    model = _crossed()
    with model, pytest.warns(UserWarning, match=r"random effects \(a\[carrier\], "
                             r"c\[row index\]\) that the blocked hierarchical sweep does "
                             r"not cover \(2 group terms .*Bernoulli likelihood.*R-hat"):
        step = getattr(pms, name)()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = run_sample(model, step, draws=3, tune=0, chains=1, seed=1,
                           keep_warning_stat=True)
    stats = idata.sample_stats if hasattr(idata, "sample_stats") else idata["sample_stats"]
    texts = [str(w) for w in np.asarray(stats["warning"]).ravel() if w is not None]
    assert any("does not cover" in t for t in texts), texts


@pytest.mark.parametrize("build", [_one_intercept, _flat], ids=["covered", "no effects"])
def test_covered_and_plain_models_do_not_warn(build):
    with build(), warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*does not cover.*")
        pms.AustereMH()


def test_choosing_the_joint_move_does_not_warn():
    with _crossed(), warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*does not cover.*")
        pms.AustereMH(hierarchical="off")


def test_correlated_effects_warn_naming_the_matrix_of_effects():
    """Intercepts and slopes correlated by an LKJ prior (``ab[g, 0] + ab[g, 1] * x``): not
    covered; the warning says why (a matrix of effects), not "no group effect"."""
    g, _, x, y = _data()
    with pm.Model():
        chol, _, _ = pm.LKJCholeskyCov("chol", n=2, eta=2.0, compute_corr=True,
                                       sd_dist=pm.HalfNormal.dist(1.0))
        ab = pm.MvNormal("ab", mu=np.zeros(2), chol=chol, shape=(G, 2))
        b = pm.Normal("b", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=b[0] + b[1] * x + ab[g, 0] + ab[g, 1] * x, observed=y)
        with pytest.warns(UserWarning, match=r"does not cover \(the group effects are "
                          r"gathered from a matrix of effects.*LKJCholeskyCov"):
            pms.AustereMH()
