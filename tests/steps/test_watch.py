"""Failures that leave no trace in the draws are reported (issue 44): a chain stuck where
it started, one sitting thousands of posterior sds from the centre, every draw falling
back to all rows, and an improper posterior (a flat prior on separable data). Each is a
sampler warning; a well-posed model started at the defaults gets none of them."""

from __future__ import annotations

import warnings

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from tests.conftest import run_sample

WORDS = ("has not moved", "posterior sds", "each read all", "looks improper")


def _logistic(prior="normal", separable=False, n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 2))
    if separable:
        y = (X[:, 1] > 0).astype(np.int64)
    else:
        y = (rng.random(n) < 1 / (1 + np.exp(-(X @ [0.5, -0.3])))).astype(np.int64)
    with pm.Model() as model:
        b = pm.Flat("b", shape=2) if prior == "flat" else pm.Normal("b", 0, 2, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    return model


def _run(model, step, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return run_sample(model, step, draws=150, tune=150, chains=1, seed=1,
                          keep_warning_stat=True, discard_tuned_samples=False, **kw)


def _messages(idata):
    """The watch's warnings of the tuning and the kept draws (InferenceData or DataTree)."""
    from pymc_subsample.diagnostics import get_group

    found = []
    for name in ("warmup_sample_stats", "sample_stats"):
        try:
            stat = get_group(idata, name)["warning"].values
        except KeyError:
            continue
        found += [w.message for w in stat.ravel()
                  if w is not None and any(word in w.message for word in WORDS)]
    return found


def test_a_chain_stuck_far_out_is_reported():
    """``init="model"`` with ``initvals`` 10^3 out: ScalableMH stayed there (sd 1.6e-5),
    every draw read all rows, without a word."""
    model = _logistic()
    with model:
        step = pms.ScalableMH(init="model")
    idata = _run(model, step, initvals={"b": np.array([1e3, -1e3])})
    found = _messages(idata)
    assert any("has not moved in 100 draws" in m for m in found), found
    assert any("each read all 3,000 rows" in m for m in found), found
    assert any(m.startswith("ScalableMH: the chain sits") for m in found), found


@pytest.mark.parametrize("name", ["ScalableMH", "AustereMH"])
def test_an_improper_posterior_is_reported(name):
    """Separable classes under a flat prior: ScalableMH returned coefficients of 3.5e3 to
    9.5e4 without a warning."""
    model = _logistic("flat", separable=True)
    with model, pytest.warns(UserWarning, match=r"looks improper.*'b' has a flat prior"):
        step = getattr(pms, name)()
    found = _messages(_run(model, step))
    assert any("looks improper" in m for m in found), found


@pytest.mark.parametrize("prior", ["normal", "flat"])
def test_a_well_posed_model_gets_no_such_warning(prior):
    """A flat prior on data that identify the coefficients is proper: no warning; nor for
    the default start of a proper model."""
    model = _logistic(prior)
    with model, warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*looks improper.*")
        step = pms.ScalableMH()
    assert _messages(_run(model, step)) == []
