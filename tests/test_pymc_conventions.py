"""PyMC conventions of the three steps: progress-bar columns and compile options.

What a PyMC user expects from a step method besides its draws: the progress bar shows
step-specific columns (rows read per draw, acceptance and, for ScalableMH, the share of
exact full-data fallbacks), as ``pm.Metropolis`` shows its scaling and acceptance.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from helpers import run_sample, sample_stats

METHODS = ["ScalableMH", "AustereMH", "BarkerMinibatch"]


@pytest.fixture(scope="module")
def model():
    rng = np.random.default_rng(7)
    x = rng.normal(size=3000)
    y = rng.random(3000) < 1 / (1 + np.exp(-(0.3 + 0.8 * x)))
    with pm.Model() as m:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 2)
        pm.Bernoulli("y", logit_p=a + b * x, observed=y.astype(int))
        pm.Normal("c", 0, 1)  # not in the likelihood: for another step of a CompoundStep
    return m


@pytest.mark.parametrize("name", METHODS)
def test_progress_bar_columns_are_running_means_of_the_stats(name):
    cls = getattr(pms, name)
    columns, fields = cls._progressbar_config(n_chains=2)
    headers = [c.get_table_column().header for c in columns]
    assert headers[:2] == ["Rows/draw", "Accept"]
    assert ("Fallback" in headers) == (name == "ScalableMH")
    assert all(v == ["-", "-"] for v in fields.values()) and len(fields) == len(columns)
    (update,) = cls._make_progressbar_update_functions()
    draws = [{"data_used": 100, "accepted": 1.0, "fallback": False},
             {"data_used": 300, "accepted": 0.0, "fallback": True}]
    out = [update(d) for d in draws][-1]
    assert set(out) == set(fields)
    assert float(out["pms_rows"].replace(",", "")) == 200.0
    assert float(out["pms_accept"]) == 0.5
    if name == "ScalableMH":
        assert float(out["pms_fallback"]) == 0.5
    # a new sampling run starts new means
    (fresh,) = cls._make_progressbar_update_functions()
    assert float(fresh(draws[0])["pms_accept"]) == 1.0


@pytest.mark.parametrize("progressbar", [True, "split+stats"])
@pytest.mark.parametrize("name", METHODS)
def test_sampling_with_the_progress_bar_on(model, name, progressbar):
    """The hooks run inside ``pm.sample`` on PyMC 5 and 6, alone and in a CompoundStep."""
    with model:
        step = getattr(pms, name)()
    idata = run_sample(model, step, draws=40, tune=20, chains=2, seed=3,
                       progressbar=progressbar)
    assert sample_stats(idata)["data_used"].shape == (2, 40)
    with model:
        compound = [getattr(pms, name)([model["a"], model["b"]]), pm.Metropolis([model["c"]])]
    idata = run_sample(model, compound, draws=20, tune=10, chains=1, seed=4,
                       progressbar=progressbar)
    assert sample_stats(idata)["data_used"].shape[:2] == (1, 20)
