"""The data-use diagnostics on a real sampling result (InferenceData on PyMC 5, DataTree
on PyMC 6)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from pymc_subsample.testing import from_dict, sample_stats
from tests.conftest import logistic_data, logistic_model, run_sample


@pytest.fixture(scope="module")
def sampled():
    import pymc_subsample as pms

    n = 3_000
    x, y = logistic_data(np.random.default_rng(21), n, 1.0, intercept=0.5)
    model = logistic_model(x, y, prior_sd=2.0, intercept_sd=2.0)
    with model:
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


def test_laplace_approximation_is_exact_on_a_conjugate_model():
    """Normal likelihood with known sd and a Normal prior: the posterior is Gaussian, so
    the Laplace approximation must equal it (mean and sd in closed form); a transformed
    variable is reported on its unconstrained value variable."""
    import pymc as pm

    from pymc_subsample.diagnostics import laplace_approximation

    rng = np.random.default_rng(3)
    n, d, noise, prior_sd = 2_000, 3, 0.7, 2.0
    X = rng.standard_normal((n, d))
    y = X @ np.array([0.5, -1.0, 0.2]) + noise * rng.standard_normal(n)
    with pm.Model():
        beta = pm.Normal("beta", 0.0, prior_sd, shape=d)
        pm.HalfNormal("tau", 1.0)  # free, not in the likelihood: N(0, 1) log-density + Jacobian
        pm.Normal("y", X @ beta, noise, observed=y)
        laplace = laplace_approximation()
    precision = X.T @ X / noise**2 + np.eye(d) / prior_sd**2
    cov = np.linalg.inv(precision)
    mean = cov @ (X.T @ y) / noise**2
    assert list(laplace.index) == ["beta[0]", "beta[1]", "beta[2]", "tau_log__"]
    np.testing.assert_allclose(laplace["mean"].to_numpy()[:d], mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(laplace["sd"].to_numpy()[:d], np.sqrt(np.diag(cov)), rtol=1e-6)
    # log tau = u: log p(u) = -exp(2u)/2 + u, mode at u = 0, curvature 2: sd 1/sqrt(2)
    assert abs(laplace.loc["tau_log__", "mean"]) < 1e-6
    assert abs(laplace.loc["tau_log__", "sd"] - 2**-0.5) < 1e-6


def test_data_usage_summary_in_a_compound_step_does_not_mix_accept_rates():
    """PyMC stacks ``accepted`` of a CompoundStep (ours and pm.Metropolis's) along an
    extra dimension: the summary must not average the two steps' acceptance rates, and
    sums ``data_used`` when two of our steps record it."""
    from pymc_subsample.diagnostics import data_usage_summary

    rng = np.random.default_rng(0)
    accepted = np.stack([np.ones((2, 50)), np.zeros((2, 50))], axis=-1)  # ours, Metropolis
    used = np.stack([np.full((2, 50), 3), np.full((2, 50), 4)], axis=-1)  # two of ours
    idata = from_dict(
        posterior={"x": rng.normal(size=(2, 50))},
        sample_stats={"accepted": accepted, "data_used": used},
    )
    summary = data_usage_summary(idata)
    assert "accept_rate" not in summary.columns
    assert summary.loc["all", "mean"] == 7.0
    one = from_dict(posterior={"x": rng.normal(size=(2, 50))},
                    sample_stats={"accepted": accepted[..., 0], "data_used": used[..., 0]})
    assert data_usage_summary(one).loc["all", "accept_rate"] == 1.0
