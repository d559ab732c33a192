"""The data-use diagnostics on a real sampling result (InferenceData on PyMC 5, DataTree
on PyMC 6)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from helpers import run_sample, sample_stats


@pytest.fixture(scope="module")
def sampled():
    import pymc as pm

    import pymc_subsample as pms

    rng = np.random.default_rng(21)
    n = 3_000
    x = rng.standard_normal(n)
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-(0.5 + x)))).astype(np.int64)
    with pm.Model() as model:
        a = pm.Normal("a", 0.0, 2.0)
        b = pm.Normal("b", 0.0, 2.0)
        pm.Bernoulli("y", logit_p=a + b * x, observed=y)
        step = pms.AustereMH()
    idata = run_sample(model, step, draws=150, tune=100, chains=2, seed=3)
    return idata, n


def test_data_usage_summary_matches_the_stats(sampled):
    from pymc_subsample.diagnostics import data_usage_summary

    idata, n = sampled
    used = sample_stats(idata)["data_used"].values  # (chains, draws)
    table = data_usage_summary(idata, n_rows=n)
    assert list(table.index) == [0, 1, "all"]
    np.testing.assert_allclose(table.loc[0, "mean"], used[0].mean())
    np.testing.assert_allclose(table.loc["all", "mean"], used.mean())
    np.testing.assert_allclose(table.loc["all", "q50"], np.quantile(used, 0.5))
    assert table.loc["all", "total"] == used.sum()
    np.testing.assert_allclose(table.loc["all", "mean_fraction"], used.mean() / n)
    acc = sample_stats(idata)["accepted"].values
    np.testing.assert_allclose(table.loc[1, "accept_rate"], acc[1].mean())


def test_plots_draw_the_data_use(sampled):
    import matplotlib.pyplot as plt

    from pymc_subsample.diagnostics import plot_batch_sizes, plot_data_used

    idata, _ = sampled
    used = sample_stats(idata)["data_used"].values
    ax = plot_batch_sizes(idata)
    assert sum(p.get_height() for p in ax.patches) == used.size  # every draw counted
    ax = plot_data_used(idata)
    lines = ax.get_lines()
    assert len(lines) == 2
    np.testing.assert_array_equal(lines[1].get_ydata(), used[1])
    plt.close("all")


def test_audit_summary_without_audits_and_a_missing_group(sampled):
    from pymc_subsample.diagnostics import audit_summary, get_group

    idata, _ = sampled
    table = audit_summary(idata)  # sampled without audit=: nothing audited
    assert table.loc["all", "n_audited"] == 0 and np.isnan(table.loc["all", "disagreement"])
    with pytest.raises(KeyError, match="no 'prior' group"):
        get_group(idata, "prior")
