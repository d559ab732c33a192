"""Divide-and-conquer MCMC: the combiners (pure NumPy) and ``pms.consensus_sample``.

Reference posteriors are exact: Gaussian shard draws whose product is known, the
density-product estimator itself computed on a grid from its definition, a product of
Gamma densities, and a Bayesian linear regression with known noise variance and a
Normal prior, where the product of the shards' posteriors with the prior raised to 1/S
is the full-data posterior. Tolerances come from Monte Carlo standard errors.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from pymc_subsample.consensus import combine
from pymc_subsample.testing import group, mcse_mean, mcse_sd


# ---------------------------------------------------------------------- combiners


def _gaussian_shards(rng, S=4, T=4000, d=3):
    """S shards of exact Gaussian draws, N(mu_s, Sigma_s), and their product's moments."""
    if d <= 3:
        base = np.array([[1.0, 0.3, 0.0], [0.3, 0.5, 0.1], [0.0, 0.1, 2.0]])[:d, :d]
    else:  # AR(1)-type correlations 0.3^|i-j|, sds from 0.7 to 1.4
        sds = np.linspace(0.7, 1.4, d)
        base = 0.3 ** np.abs(np.subtract.outer(np.arange(d), np.arange(d))) * np.outer(sds, sds)
    covs = [base * S * (1.0 + s / S) for s in range(S)]  # unequal shard covariances
    mus = rng.multivariate_normal(np.zeros(d), base * S, size=S)
    draws = [rng.multivariate_normal(mus[s], covs[s], size=T) for s in range(S)]
    prec = sum(np.linalg.inv(c) for c in covs)
    cov = np.linalg.inv(prec)
    mean = cov @ sum(np.linalg.inv(c) @ m for c, m in zip(covs, mus))
    return draws, mean, cov


def _gaussian_product_se(rng, draws, T, reps=40):
    """Standard error of the Gaussian product's mean (the shards' fitted means and
    covariances are estimated from T draws) by parametric bootstrap from the shards'
    fits: the part of any combiner's error that no sampler can remove."""
    fits = [(x.mean(0), np.cov(x, rowvar=False)) for x in draws]
    means = [combine.gaussian_product([rng.multivariate_normal(m, c, size=T) for m, c in fits])[0]
             for _ in range(reps)]
    return np.std(means, axis=0, ddof=1)


@pytest.mark.numerics
def test_consensus_weighting_is_exact_on_gaussian_shards():
    """Inverse-covariance weighting recovers the product of Gaussian shards within Monte
    Carlo error. Verified by hand to fail with ``weights="identity"`` (the unweighted
    average: the shards' covariances differ, so its mean and covariance are wrong)."""
    rng = np.random.default_rng(0)
    draws, mean, cov = _gaussian_shards(rng)
    theta = combine.consensus_weighting(draws)
    assert theta.shape == draws[0].shape
    sd = np.sqrt(np.diag(cov))
    # draws are independent: MCSE of the mean = sd / sqrt(T); of the sd ~ sd / sqrt(2T);
    # the weights are estimated, which adds O(1/T) terms
    T = len(theta)
    assert np.all(np.abs(theta.mean(0) - mean) < 4 * sd / np.sqrt(T))
    assert np.all(np.abs(theta.std(0) / sd - 1) < 4 / np.sqrt(2 * T))
    bad = combine.consensus_weighting(draws, weights="identity")
    assert np.any(np.abs(bad.mean(0) - mean) > 4 * sd / np.sqrt(T)) or np.any(
        np.abs(bad.std(0) / sd - 1) > 4 / np.sqrt(2 * T))


@pytest.mark.numerics
def test_gaussian_product_moments():
    rng = np.random.default_rng(1)
    draws, mean, cov = _gaussian_shards(rng, T=20000)
    m, c = combine.gaussian_product(draws)
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(m - mean) < 5 * sd / np.sqrt(20000))
    np.testing.assert_allclose(np.sqrt(np.diag(c)), sd, rtol=0.03)


def _grid_moments(shards, h, nonparametric, n=301, width=7.0):
    """Mean and variance of the density-product estimator for d = 2, on a grid, written
    straight from its definition with SciPy (independent of the combiner's algebra):
    ``prod_s f_s(x) (1/T) sum_t N(x | x_t, h^2 C_s) / f_s(x_t)``, ``f_s = N(m_s, C_s)``
    (without the ``f_s`` factors for the nonparametric product)."""
    m, c = combine.gaussian_product(shards)
    sd = np.sqrt(np.diag(c))
    axes = [np.linspace(m[j] - width * 3 * sd[j], m[j] + width * 3 * sd[j], n) for j in range(2)]
    g = np.stack(np.meshgrid(*axes, indexing="ij"), -1).reshape(-1, 2)
    logp = np.zeros(len(g))
    for x in shards:
        cs = np.cov(x, rowvar=False)
        f = stats.multivariate_normal(x.mean(0), cs)
        k = np.array([stats.multivariate_normal(xt, h**2 * cs).pdf(g) for xt in x])  # (T, G)
        if nonparametric:
            logp += np.log(k.mean(0))
        else:
            logp += f.logpdf(g) + np.log((k / f.pdf(x)[:, None]).mean(0))
    p = np.exp(logp - logp.max())
    p /= p.sum()
    mean = p @ g
    return mean, p @ (g - mean) ** 2


@pytest.mark.numerics
@pytest.mark.parametrize("nonparametric", [False, True])
def test_density_product_sampler_matches_its_estimator(nonparametric):
    """Brute force: with S = 2 skewed shards of T = 25 draws in d = 2 and a fixed
    bandwidth, the estimator's density is computed on a grid from its definition; the
    sampler's long-run mean and variance match it within 4.5 MCSE. Verified by hand to
    fail (semiparametric) without the 1/f_s(draw) factor, with the kernel variance h
    instead of h^2, with an isotropic kernel instead of h^2 Sigma_s, and without the
    proposal density in the weights; and (nonparametric) with the f_s factors kept."""
    rng = np.random.default_rng(12)
    shards = [rng.gamma(2.0, 1.0, size=(25, 2)) @ np.array([[1.0, 0.4], [0.0, 1.0]]),
              rng.gamma(3.0, 0.7, size=(25, 2)) + np.array([0.5, -0.3])]
    h = 0.6
    mean, var = _grid_moments(shards, h, nonparametric)
    theta, info = combine.semiparametric_product(shards, rng=rng, draws=30000, bandwidth=h,
                                                 nonparametric=nonparametric,
                                                 return_info=True)
    assert info["bandwidths"] == [h, h] and 0 < info["acceptance_rate"] <= 1
    for j in range(2):
        x = theta[:, j]
        assert abs(x.mean() - mean[j]) < 4.5 * mcse_mean(x), (j, x.mean(), mean[j])
        assert abs(x.std() - np.sqrt(var[j])) < 4.5 * mcse_sd(x), (j, x.std(), var[j])


@pytest.mark.numerics
@pytest.mark.parametrize("d, T", [(3, 4000), (10, 2000)])
def test_semiparametric_on_gaussian_shards(d, T):
    """On exact Gaussian shards the semiparametric product is as good as the parametric
    one: its draws' mean is within 4.5 MCSE of the Gaussian product of the shards' fits
    (whose own error against the exact product is checked in
    ``test_gaussian_product_moments``), and within 4.5 standard errors of the exact
    product, the standard error combining the draws' MCSE with the sampling error of
    the Gaussian product (parametric bootstrap: ~ sd / sqrt(T), plus the error of the
    estimated weights, which grows with d and the spread of the shards' means). Verified by hand to fail with
    ``bandwidth="rule"`` (the paper's final bandwidth, T^(-1/(4+d)): noisy kernel
    corrections) and with the previous annealed Gibbs sampler over index tuples."""
    rng = np.random.default_rng(20 + d)
    draws, mean, cov = _gaussian_shards(rng, T=T, d=d)
    theta, info = combine.semiparametric_product(draws, rng=rng, return_info=True)
    assert theta.shape == (T, d) and info["importance_ess"] > T / 2
    m_fit, c_fit = combine.gaussian_product(draws)
    se_fit = _gaussian_product_se(np.random.default_rng(0), draws, T)
    for j in range(d):
        x = theta[:, j]
        se = mcse_mean(x)
        assert abs(x.mean() - m_fit[j]) < 4.5 * se, (j, x.mean(), m_fit[j], se)
        se_exact = np.hypot(se, se_fit[j])
        assert abs(x.mean() - mean[j]) < 4.5 * se_exact, (j, x.mean(), mean[j], se_exact)
        assert abs(x.std() - np.sqrt(c_fit[j, j])) < 4.5 * mcse_sd(x), (j, x.std())


@pytest.mark.numerics
def test_nonparametric_on_gaussian_shards_matches_the_smoothed_product():
    """The nonparametric product of Gaussian shards is (in expectation over the draws)
    the product of the kernel-smoothed fits N(m_s, (1 + h_s^2) Sigma_s), an exact answer
    for its selected bandwidths; the draws match its mean and sd within 4.5 MCSE.
    Verified by hand to fail with the 1/f_s factors of the semiparametric estimate."""
    rng = np.random.default_rng(31)
    draws, _, _ = _gaussian_shards(rng, T=3000)
    theta, info = combine.nonparametric_product(draws, rng=rng, return_info=True)
    precs = [np.linalg.inv((1 + h**2) * np.cov(x, rowvar=False))
             for x, h in zip(draws, info["bandwidths"])]
    cov = np.linalg.inv(sum(precs))
    mean = cov @ sum(p @ x.mean(0) for p, x in zip(precs, draws))
    for j in range(3):
        x = theta[:, j]
        assert abs(x.mean() - mean[j]) < 4.5 * mcse_mean(x), (j, x.mean(), mean[j])
        assert abs(x.std() - np.sqrt(cov[j, j])) < 4.5 * mcse_sd(x) + 0.02 * np.sqrt(
            cov[j, j]), (j, x.std(), np.sqrt(cov[j, j]))


def _gamma_shards(rng, T=4000):
    """Shards whose subposteriors are Gamma(a_s, b_s) (skewed, bounded at 0); their product
    is Gamma(sum(a_s - 1) + 1, sum b_s)."""
    a = np.array([2.0, 2.5, 1.5, 3.0])
    b = np.array([1.0, 2.0, 0.5, 1.5])
    draws = [rng.gamma(a[s], 1.0 / b[s], size=(T, 1)) for s in range(len(a))]
    return draws, stats.gamma((a - 1).sum() + 1, scale=1.0 / b.sum())


@pytest.mark.numerics
def test_semiparametric_beats_consensus_on_a_skewed_product():
    """On skewed shards the consensus average is biased (its draws' mean is about 0.9
    product sd too high); the semiparametric product, with its cross-validated
    bandwidths (small here), is within 4.5 MCSE + 0.06 sd of the exact mean (the
    allowance: its kernel-smoothing and shard-sampling error; errors measured over
    seeds 3 - 8: 0.005 - 0.08 sd, against a limit of ~0.14) and at least 5 times closer than consensus in mean and in
    Kolmogorov-Smirnov distance. Verified by hand to fail with the bandwidth fixed at
    1e6 (the estimator is then the Gaussian product, as biased as consensus) and with
    ``bandwidth="rule"``."""
    rng = np.random.default_rng(3)
    draws, ref = _gamma_shards(rng)
    cons = combine.consensus_weighting(draws)[:, 0]
    semi, info = combine.semiparametric_product(draws, rng=rng, return_info=True)
    semi = semi[:, 0]
    err_c = abs(cons.mean() - ref.mean()) / ref.std()
    err_s = abs(semi.mean() - ref.mean()) / ref.std()
    ks_c = stats.kstest(cons, ref.cdf).statistic
    ks_s = stats.kstest(semi, ref.cdf).statistic
    assert err_c > 0.5  # consensus is visibly biased here (a check of the test's premise)
    assert max(info["bandwidths"]) < 0.5
    assert err_s < 4.5 * mcse_mean(semi) / ref.std() + 0.06, (err_s, mcse_mean(semi))
    assert err_s < err_c / 5 and ks_s < ks_c / 5, (err_c, err_s, ks_c, ks_s)


@pytest.mark.numerics
def test_combiners_use_only_their_rng():
    rng = np.random.default_rng(4)
    draws, _, _ = _gaussian_shards(rng, T=300)
    a = combine.semiparametric_product(draws, rng=np.random.default_rng(9))
    b = combine.semiparametric_product(draws, rng=np.random.default_rng(9))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="rng"):
        combine.semiparametric_product(draws, rng=9)


@pytest.mark.numerics
def test_combiners_reject_bad_input():
    rng = np.random.default_rng(5)
    good = [rng.normal(size=(50, 2)) for _ in range(3)]
    with pytest.raises(ValueError, match=r"shard_draws\[1\] has d = 3"):
        combine.consensus_weighting([good[0], rng.normal(size=(50, 3))])
    with pytest.raises(ValueError, match=r"shard_draws\[0\] has 3 draws"):
        combine.consensus_weighting([good[0][:3], good[1][:3]])
    bad = good[2].copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match=r"shard_draws\[2\] contains non-finite"):
        combine.semiparametric_product([good[0], good[1], bad], rng=rng)
    with pytest.raises(ValueError, match="same number of draws"):
        combine.consensus_weighting([good[0], good[1][:40]])
    with pytest.raises(ValueError, match=r"shard_draws\[1\] has a singular"):
        combine.consensus_weighting([good[0], np.ones((50, 2))])
    with pytest.raises(ValueError, match="empty"):
        combine.consensus_weighting([])
    with pytest.raises(ValueError, match="weights"):
        combine.consensus_weighting(good, weights="diag")
    # shards of different lengths are fine for the density products
    assert combine.semiparametric_product([good[0], good[1][:40]], rng=rng).shape == (50, 2)


def test_importing_the_package_imports_neither_dask_nor_pymc_for_the_combiners():
    code = ("import sys, pymc_subsample, pymc_subsample.consensus as c; "
            "assert 'dask' not in sys.modules and 'pymc' not in sys.modules; "
            "pymc_subsample.consensus_sample; assert 'dask' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------- PyMC part

needs_dask = pytest.mark.skipif(importlib.util.find_spec("dask") is None,
                                reason="consensus_sample needs dask (the [dask] extra)")


def _normal_scale_model(y):
    import pymc as pm

    with pm.Model() as model:
        mu = pm.Normal("mu", 0.0, 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        pm.Normal("y", mu, sigma, observed=y)
    return model


@pytest.mark.parametrize("S", [1, 4])
def test_prior_power_potential(S):
    """The shard model's log density is log-lik + log prior / S + log Jacobian, at a
    point, computed independently with SciPy. Verified by hand (S = 4) to fail when the
    Potential is left out and when it includes the Jacobian terms
    (``model.logp(vars=free_RVs, jacobian=True)``)."""
    from pymc_subsample.consensus.run import add_prior_power

    y = np.array([0.3, -1.2, 0.8, 2.0, 0.1])
    model = add_prior_power(_normal_scale_model(y), S)
    mu, log_sigma = 0.4, -0.3
    sigma = np.exp(log_sigma)
    got = model.compile_logp()({"mu": mu, "sigma_log__": log_sigma})
    loglik = stats.norm.logpdf(y, mu, sigma).sum()
    prior = stats.norm.logpdf(mu, 0, 2) + stats.halfnorm.logpdf(sigma, scale=1)
    assert got == pytest.approx(loglik + prior / S + log_sigma, abs=1e-7)


def _regression(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = np.column_stack([np.ones(n), rng.normal(size=n)])
    y = X @ np.array([0.5, -1.0]) + rng.normal(size=n)
    return X, y


PRIOR_SD = 0.05  # a prior strong enough that dropping its power 1/S moves the posterior


def regression_model(X, y):
    """Bayesian linear regression with known noise sd 1 and beta ~ N(0, PRIOR_SD^2 I)."""
    import pymc as pm

    with pm.Model() as model:
        beta = pm.Normal("beta", 0.0, PRIOR_SD, shape=X.shape[1])
        pm.Normal("y", pm.math.dot(X, beta), 1.0, observed=y)
    return model


def _exact_posterior(X, y):
    prec = X.T @ X + np.eye(X.shape[1]) / PRIOR_SD**2
    cov = np.linalg.inv(prec)
    return cov @ X.T @ y, cov


def _check_against_exact(res, X, y, group_name="posterior", k=4.5, mean_slack=0.0):
    """Means within ``k`` MCSE (+ ``mean_slack`` posterior sds) of the exact posterior's,
    sds within ``k`` MCSE + 2 %."""
    mean, cov = _exact_posterior(X, y)
    beta = np.asarray(group(res, group_name)["beta"].values)  # (1, draws, 2)
    for j in range(2):
        x = beta[..., j]
        sd = np.sqrt(cov[j, j])
        assert abs(x.mean() - mean[j]) < k * mcse_mean(x) + mean_slack * sd, (
            j, x.mean(), mean[j], mcse_mean(x))
        assert abs(x.std() - sd) < k * mcse_sd(x) + 0.02 * sd, (j, x.std(), sd)


@needs_dask
def test_consensus_sample_recovers_the_exact_posterior():
    """The whole path with client=None (Dask's synchronous scheduler) on a conjugate
    regression: the consensus draws match the exact full posterior within 4.5 MCSE.
    Verified by hand to fail without the prior power (the prior counted 4 times) and
    with the unweighted average in place of consensus weighting. The semiparametric
    draws are held to the same standard (the previous annealed index-tuple sampler
    failed it)."""
    import pymc_subsample as pms

    X, y = _regression()
    res = pms.consensus_sample(regression_model, {"X": X, "y": y}, n_shards=4, draws=1000,
                               tune=300, random_seed=1,
                               combiners=("consensus", "semiparametric"))
    _check_against_exact(res, X, y)
    _check_against_exact(res, X, y, "posterior_semiparametric")
    sp = group(res, "posterior_semiparametric")
    assert sp["beta"].shape == (1, 1000, 2)
    shards = group(res, "shard_posterior")
    assert shards["beta"].shape == (4, 1, 1000, 2)
    diag = group(res, "shard_diagnostics")
    assert diag["n_rows"].values.tolist() == [500] * 4
    assert diag["row_start"].values.tolist() == [0, 500, 1000, 1500]
    assert np.all(diag["ess_bulk_min"].values > 100)
    assert np.all(np.isnan(diag["rhat_max"].values))  # one chain
    assert np.all((diag["acceptance_rate"].values > 0) & (diag["acceptance_rate"].values <= 1))
    assert np.all(np.isfinite(diag["mean_data_used"].values))
    assert np.all(diag["wall_time"].values > 0)
    attrs = group(res, "posterior").attrs
    assert attrs["n_shards"] == 4 and "semiparametric" in attrs["combiners"]
    assert "exact only when every shard's posterior is Gaussian" in attrs["bias_statement"]
    assert type(res).__name__ == ("DataTree" if _pymc_major() >= 6 else "InferenceData")


def _pymc_major():
    import pymc as pm

    return int(pm.__version__.split(".")[0])


@needs_dask
def test_transformed_variables_are_combined_unconstrained_and_mapped_back(tmp_path):
    """A positive scale (log transform) and a memmap data file; chains=2 gives R-hat. The
    combined sigma is positive and close to the shards' pooled value."""
    import pymc as pm

    import pymc_subsample as pms

    rng = np.random.default_rng(7)
    y = rng.normal(1.0, 2.0, size=4000)
    np.save(tmp_path / "y.npy", y)
    ym = np.load(tmp_path / "y.npy", mmap_mode="r")
    res = pms.consensus_sample(_normal_scale_model, {"y": ym}, n_shards=2, draws=400,
                               tune=200, chains=2, random_seed=3, step=pm.Metropolis,
                               combiners=("consensus",))
    sigma = group(res, "posterior")["sigma"].values
    assert np.all(sigma > 0)
    assert abs(np.mean(sigma) - y.std()) < 0.1
    diag = group(res, "shard_diagnostics")
    assert np.all(np.isfinite(diag["rhat_max"].values))


@needs_dask
def test_same_seed_same_draws_and_argument_errors():
    import pymc as pm

    import pymc_subsample as pms

    X, y = _regression(n=400)
    kw = dict(n_shards=2, draws=200, tune=100, combiners=("consensus",))
    a = pms.consensus_sample(regression_model, {"X": X, "y": y}, random_seed=5, **kw)
    b = pms.consensus_sample(regression_model, {"X": X, "y": y}, random_seed=5, **kw)
    np.testing.assert_array_equal(group(a, "posterior")["beta"].values,
                                  group(b, "posterior")["beta"].values)
    data = {"X": X, "y": y}
    with pytest.raises(ValueError, match="n_shards"):
        pms.consensus_sample(regression_model, data, n_shards=0)
    with pytest.raises(ValueError, match="n_shards = 401 exceeds"):
        pms.consensus_sample(regression_model, data, n_shards=401)
    with pytest.raises(ValueError, match="same number of rows"):
        pms.consensus_sample(regression_model, {"X": X, "y": y[:-1]})
    with pytest.raises(ValueError, match="combiners"):
        pms.consensus_sample(regression_model, data, combiners=("average",))
    with pytest.raises(TypeError, match="data must be"):
        pms.consensus_sample(regression_model, [X, y])
    with pytest.raises(TypeError, match="model_fn must be callable"):
        pms.consensus_sample(None, data)
    with pm.Model():
        pm.Normal("z")
        inst = pm.Metropolis()
    with pytest.raises(TypeError, match="not a\\s+step instance"):
        pms.consensus_sample(regression_model, data, step=inst)
    with pytest.raises(ValueError, match="sample_kwargs may not set"):
        pms.consensus_sample(regression_model, data, sample_kwargs={"chains": 2})
    with pytest.raises(TypeError, match="model_fn must return a pymc.Model"):
        pms.consensus_sample(lambda X, y: None, data, n_shards=2, draws=10, tune=10)


@needs_dask
def test_zarr_data_is_read_in_the_task(tmp_path):
    zarr = pytest.importorskip("zarr")
    import pymc_subsample as pms

    X, y = _regression(n=600, seed=2)
    zx = zarr.open_array(str(tmp_path / "X.zarr"), mode="w", shape=X.shape, chunks=(100, 2),
                         dtype="f8")
    zx[:] = X
    kw = dict(n_shards=3, draws=200, tune=100, combiners=("consensus",), random_seed=4)
    a = pms.consensus_sample(regression_model, {"X": zx, "y": y}, **kw)
    b = pms.consensus_sample(regression_model, {"X": X, "y": y}, **kw)
    np.testing.assert_array_equal(group(a, "posterior")["beta"].values,
                                  group(b, "posterior")["beta"].values)


@needs_dask
def test_local_cluster_gives_the_same_draws_as_client_none(tmp_path):
    """Two worker processes of a dask.distributed LocalCluster, with the data as a memmap
    (sent as a file reference): the same seed gives the same draws as client=None."""
    pytest.importorskip("distributed")
    import cloudpickle
    from dask.distributed import Client, LocalCluster

    import pymc_subsample as pms

    X, y = _regression(n=800, seed=3)
    np.save(tmp_path / "X.npy", X)
    Xm = np.load(tmp_path / "X.npy", mmap_mode="r")
    kw = dict(n_shards=2, draws=200, tune=100, random_seed=8,
              combiners=("consensus", "semiparametric"))
    local = pms.consensus_sample(regression_model, {"X": Xm, "y": y}, **kw)
    # the workers cannot import this test module: send its functions by value
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                          dashboard_address=None) as cluster, Client(cluster) as client:
            dist = pms.consensus_sample(regression_model, {"X": Xm, "y": y}, client=client,
                                        **kw)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    for g in ("posterior", "posterior_semiparametric", "shard_posterior"):
        np.testing.assert_array_equal(group(local, g)["beta"].values,
                                      group(dist, g)["beta"].values)


@pytest.mark.slow
@needs_dask
def test_consensus_and_semiparametric_on_more_shards():
    """8 shards, 2 chains each, 2000 draws: consensus within 4.5 MCSE + 0.1 sd of the
    exact posterior, and so is the semiparametric product (its cross-validated
    bandwidths are large on these near-Gaussian shards).

    The 0.1 sd: both combiners weight the shards by covariances estimated once from the
    shard draws. Those weights' error shifts every combined draw alike, which the
    combined chain's MCSE cannot see. With 8 shards, whose means lie about sqrt(8)
    posterior sds apart, the shift is comparable to the MCSE. Measured on seeds 12-15
    (2026-11-27): z from MCSE alone up to 4.9, errors up to 0.077 posterior sds."""
    import pymc_subsample as pms

    X, y = _regression(n=8000, seed=11)
    res = pms.consensus_sample(regression_model, {"X": X, "y": y}, n_shards=8, draws=2000,
                               tune=500, chains=2, random_seed=12)
    _check_against_exact(res, X, y, mean_slack=0.1)
    _check_against_exact(res, X, y, "posterior_semiparametric", mean_slack=0.1)
