"""pms.loo / pms.loo_update / pms.compute_log_likelihood against exact PSIS-LOO.

At N = 20,000 rows the full log-likelihood fits in memory, so the exact PSIS-LOO
(``pm.compute_log_likelihood`` + ``az.loo``) is the reference for three models: a
logistic regression, a Poisson regression and a hierarchical (random-intercept)
logistic regression, each sampled by NUTS with fixed seeds.

Tolerances come from the subsampling SE. Each correctness check is also run against a
deliberately broken estimator (the approximation replaced by zeros; the wrong scaling
``m`` for ``N``) to show that it fails.
"""

from __future__ import annotations

import importlib
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample.kernels._validation import InvalidParameterError
from pymc_subsample.workflow.loglik import PosteriorLoglik
from tests.conftest import hierarchical_logistic, logistic_data

# the module (pymc_subsample.workflow.loo, the attribute, is the function)
loo_module = importlib.import_module("pymc_subsample.workflow.loo")

N = 20_000
M = 1_000
ARVIZ_1 = int(az.__version__.split(".")[0]) >= 1


# ---------------------------------------------------------------------- helpers
def elpd_of(res) -> float:
    """``elpd_loo`` of an ArviZ ELPD object of either version."""
    return float(res["elpd"] if ARVIZ_1 else res["elpd_loo"])


def p_of(res) -> float:
    return float(res["p"] if ARVIZ_1 else res["p_loo"])


def pointwise_of(res) -> np.ndarray:
    return np.asarray(res["elpd_i"] if ARVIZ_1 else res["loo_i"], dtype=float).ravel()


def sample(model, seed, draws=150, tune=200):
    with model:
        return pm.sample(draws=draws, tune=tune, chains=2, random_seed=seed, progressbar=False,
                         compute_convergence_checks=False)


def log_likelihood_dataset(ll):
    """``pm.compute_log_likelihood(..., extend_inferencedata=False)``'s result as a Dataset
    (PyMC 5 returns a Dataset, PyMC 6 a DataTree)."""
    if hasattr(ll, "children"):
        return (ll["log_likelihood"] if "log_likelihood" in ll.children else ll).to_dataset()
    return ll


def exact_loo(idata, model, var_names=None):
    """Exact PSIS-LOO with PyMC's full log-likelihood and ArviZ (the reference)."""
    ll = log_likelihood_dataset(pm.compute_log_likelihood(
        idata, model=model, var_names=var_names, extend_inferencedata=False,
        progressbar=False))
    full = idata.copy()
    if ARVIZ_1:
        import xarray as xr

        full["log_likelihood"] = xr.DataTree(dataset=ll)
    else:
        full.add_groups({"log_likelihood": ll})
    return az.loo(full, pointwise=True), ll


def loo_failures(res, exact) -> list[str]:
    """The issue's acceptance checks of one subsampled result against the exact one."""
    out = []
    sub_se = float(res["subsampling_se"])
    diff = elpd_of(res) - elpd_of(exact)
    if not abs(diff) <= 3 * sub_se:
        out.append(f"elpd off by {diff:.3f}, more than 3 subsampling SEs ({sub_se:.3f})")
    if not sub_se <= 2.0:
        out.append(f"subsampling SE {sub_se:.3f} > 2")
    if not abs(float(res["se"]) / float(exact["se"]) - 1) < 0.05:
        out.append(f"se {float(res['se']):.3f} vs exact {float(exact['se']):.3f}")
    # the reported subsampling SE is the estimator's true SE (computed from the exact
    # pointwise values of all rows) to within the noise of its own estimate
    true_se = true_subsampling_se(res, exact)
    if not abs(sub_se / true_se - 1) < 0.3:
        out.append(f"subsampling SE {sub_se:.3f} vs its true value {true_se:.3f}")
    return out


def true_subsampling_se(res, exact) -> float:
    """The subsampling SE the difference estimator really has, from the population: the
    exact pointwise elpd of every row minus the approximation (Cochran's SRS variance)."""
    e = pointwise_of(exact) - np.asarray(res["elpd_loo_approx"], dtype=float)
    m = int(res["subsample_size"])
    return float(np.sqrt(N**2 * (1 - m / N) * e.var(ddof=1) / m))


# ---------------------------------------------------------------------- models
def _logistic():
    rng = np.random.default_rng(101)
    X, y = logistic_data(rng, N, [0.8, -0.5, 0.3], intercept=-0.3)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X, b), observed=y)
    return model, (X, y)


def _poisson():
    rng = np.random.default_rng(202)
    X = rng.normal(size=(N, 2))
    y = rng.poisson(np.exp(0.5 + X @ np.array([0.3, -0.2])))
    with pm.Model(coords={"obs": np.arange(N)}) as model:
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Poisson("y", pm.math.exp(a + pm.math.dot(X, b)), observed=y, dims="obs")
    return model, (X, y)


def _hierarchical():
    rng = np.random.default_rng(303)
    groups = 30
    g = rng.integers(0, groups, size=N)
    x = rng.normal(size=N)
    z = rng.normal(0, 0.7, size=groups)
    eta = -0.2 + z[g] + 0.6 * x
    y = (rng.random(N) < 1 / (1 + np.exp(-eta))).astype("int64")
    # centred: the plug-in at the posterior mean is good (see pms.loo's approximation)
    return hierarchical_logistic(y, g, x, groups, centred=True), (g, x, y)


MODELS = {"logistic": _logistic, "poisson": _poisson, "hierarchical": _hierarchical}


@pytest.fixture(scope="module", params=list(MODELS))
def fitted(request):
    model, data = MODELS[request.param]()
    idata = sample(model, seed=11)
    exact, ll = exact_loo(idata, model)
    return {"name": request.param, "model": model, "idata": idata, "exact": exact, "ll": ll,
            "data": data}


# ---------------------------------------------------------------------- against exact LOO
def test_loo_matches_exact_psis_loo(fitted):
    res = pms.loo(fitted["idata"], fitted["model"], observations=M, seed=5)
    assert loo_failures(res, fitted["exact"]) == []
    # PSIS of a row does not depend on the other rows: the subsample's pointwise values
    # are exactly ArviZ's on the full log-likelihood
    rows = np.asarray(res["loo_subsample_observations"])
    np.testing.assert_allclose(pointwise_of(res)[rows], pointwise_of(fitted["exact"])[rows],
                               rtol=1e-9, atol=1e-9)
    true_se = true_subsampling_se(res, fitted["exact"])
    print(f"{fitted['name']}: elpd_loo {elpd_of(res):.2f} vs exact "
          f"{elpd_of(fitted['exact']):.2f}, subsampling SE "
          f"{float(res['subsampling_se']):.3f} (true {true_se:.3f}), "
          f"se {float(res['se']):.2f} vs {float(fitted['exact']['se']):.2f}, p_loo "
          f"{p_of(res):.2f} vs {p_of(fitted['exact']):.2f}")
    # p_loo: an SRS estimate with its own noise (a few % at m = 1000)
    assert abs(p_of(res) - p_of(fitted["exact"])) < 0.25 * p_of(fitted["exact"]) + 0.5
    assert int(res["subsample_size"]) == M and int(res["n_data_points"]) == N


@pytest.mark.parametrize("fitted", ["poisson"], indirect=True)
def test_lpd_approximation(fitted):
    res = pms.loo(fitted["idata"], fitted["model"], observations=M, seed=6,
                  approximation="lpd")
    assert loo_failures(res, fitted["exact"]) == []
    from scipy.special import logsumexp

    ll = fitted["ll"]["y"].values
    lpd = logsumexp(ll.reshape(-1, N), axis=0) - np.log(ll.shape[0] * ll.shape[1])
    np.testing.assert_allclose(np.asarray(res["elpd_loo_approx"]), lpd, rtol=1e-10)


def _zero_approximation(self, q, *, chunk=65536):
    return [np.zeros(self.n_rows)]


_ORIGINAL_ESTIMATE = loo_module.difference_estimate


def _wrong_scaling(y, pi_sample, pi_all_sum, pi_all_sq_sum, n_rows):
    _, sub_se, se = _ORIGINAL_ESTIMATE(y, pi_sample, pi_all_sum, pi_all_sq_sum, n_rows)
    return pi_all_sum + y.size * np.mean(y - pi_sample), sub_se, se  # m where N belongs


def _wrong_variance(y, pi_sample, pi_all_sum, pi_all_sq_sum, n_rows):
    est, sub_se, se = _ORIGINAL_ESTIMATE(y, pi_sample, pi_all_sum, pi_all_sq_sum, n_rows)
    return est, sub_se / np.sqrt(2.0), se  # a variance off by a factor of 2


@pytest.mark.parametrize("fitted", ["logistic"], indirect=True)
@pytest.mark.parametrize("broken", ["zero_approximation", "wrong_scaling", "wrong_variance"])
def test_checks_fail_on_a_broken_estimator(fitted, broken, monkeypatch):
    """The acceptance checks above can fail: with the approximation replaced by zeros the
    subsampling SE blows up; with the wrong scaling the estimate is far off; with a
    variance off by 2 the reported SE disagrees with the true one."""
    if broken == "zero_approximation":
        monkeypatch.setattr(PosteriorLoglik, "at_point_all_rows", _zero_approximation)
    else:
        monkeypatch.setattr(loo_module, "difference_estimate",
                            _wrong_scaling if broken == "wrong_scaling" else _wrong_variance)
    res = pms.loo(fitted["idata"], fitted["model"], observations=M, seed=5)
    failures = loo_failures(res, fitted["exact"])
    assert failures, f"{broken}: the checks passed a broken estimator"
    if broken == "zero_approximation":
        assert float(res["subsampling_se"]) > 2


@pytest.mark.parametrize("fitted", ["logistic", "poisson"], indirect=True)
def test_loo_update_lowers_the_subsampling_se(fitted):
    res = pms.loo(fitted["idata"], fitted["model"], observations=500, seed=3)
    up = pms.loo_update(res, fitted["idata"], fitted["model"], observations=1500, seed=4)
    old = np.asarray(res["loo_subsample_observations"])
    new = np.asarray(up["loo_subsample_observations"])
    assert new.size == 2000 and np.unique(new).size == 2000
    np.testing.assert_array_equal(new[:500], old)  # the rows already drawn are kept
    np.testing.assert_allclose(pointwise_of(up)[new], pointwise_of(fitted["exact"])[new],
                               rtol=1e-9, atol=1e-9)
    assert float(up["subsampling_se"]) < 0.75 * float(res["subsampling_se"])
    assert loo_failures(up, fitted["exact"]) == []


@pytest.mark.slow
def test_reported_subsampling_se_matches_spread_over_seeds(fitted):
    """20 subsamples (seeds 0..19): the SD of the 20 estimates agrees with the mean
    reported subsampling SE within 30% (the SD of 20 draws is itself uncertain by about
    16%)."""
    ev_results = [pms.loo(fitted["idata"], fitted["model"], observations=M, seed=s)
                  for s in range(20)]
    est = np.array([elpd_of(r) for r in ev_results])
    reported = np.mean([float(r["subsampling_se"]) for r in ev_results])
    spread = est.std(ddof=1)
    print(f"{fitted['name']}: SD over 20 seeds {spread:.3f}, mean reported subsampling SE "
          f"{reported:.3f}, ratio {spread / reported:.2f}")
    assert abs(spread / reported - 1) < 0.3, (spread, reported)
    # and each estimate is within 3 of its SEs of the exact value
    z = (est - elpd_of(fitted["exact"])) / reported
    assert np.max(np.abs(z)) < 3.5


# ---------------------------------------------------------------------- compare
@pytest.mark.parametrize("fitted", ["logistic"], indirect=True)
def test_compare_ranks_the_true_model_first(fitted):
    X, y = fitted["data"]
    with pm.Model() as wrong:  # drops the strongest covariate
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=a + pm.math.dot(X[:, 1:], b), observed=y)
    idata_wrong = sample(wrong, seed=12)
    true_res = pms.loo(fitted["idata"], fitted["model"], observations=M, seed=9)
    wrong_res = pms.loo(idata_wrong, wrong, observations=M, seed=9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        table = az.compare({"wrong": wrong_res, "true": true_res})
    assert list(table.index) == ["true", "wrong"]
    diff_col = "elpd_diff"
    assert table.loc["wrong", diff_col] < -10 * max(table.loc["wrong", "dse"], 1.0) or \
        abs(table.loc["wrong", diff_col]) > 100
    if ARVIZ_1:
        assert "subsampling_dse" in table.columns


# ---------------------------------------------------------------------- log-likelihood
@pytest.mark.parametrize("fitted", ["poisson", "hierarchical"], indirect=True)
def test_compute_log_likelihood_rows_match_pymc(fitted):
    """Poisson (with dims) and hierarchical (a group index among the row data)."""
    rows = np.array([19_999, 0, 7, 12_345, 500])
    out = pms.compute_log_likelihood(fitted["idata"], fitted["model"], rows=rows,
                                     extend_inferencedata=False)
    group = out["log_likelihood"] if hasattr(out, "children") else out.log_likelihood
    mine = group["y"]
    ref = fitted["ll"]["y"]
    row_dim = mine.dims[2]
    np.testing.assert_array_equal(mine[row_dim].values, rows)
    np.testing.assert_allclose(mine.values, ref.isel({ref.dims[2]: rows}).values, rtol=1e-10,
                               atol=1e-12)
    assert type(out) is type(fitted["idata"])
    # rows in several chunks, unsorted
    ev = PosteriorLoglik(fitted["idata"], fitted["model"], ["y"], sum_rows=False)
    (chunked,) = ev.at_rows(rows, chunk=2)
    np.testing.assert_allclose(chunked.T.reshape(mine.shape), mine.values, rtol=1e-12)


# ---------------------------------------------------------------------- small models
@pytest.fixture(scope="module")
def small():
    rng = np.random.default_rng(7)
    n = 600
    X, y = logistic_data(rng, n, [0.5, -0.4])
    w = X[:, 0] + rng.normal(size=n)
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        s = pm.HalfNormal("s", 1)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
        pm.Normal("w", b[0] * X[:, 0], s, observed=w)
        idata = pm.sample(draws=100, tune=150, chains=2, random_seed=3, progressbar=False,
                          compute_convergence_checks=False)
    return model, idata, n


def test_refuses_rows_none_over_the_memory_limit(small):
    model, idata, n = small
    with pytest.raises(ValueError, match=r"rows=.*pms\.loo") as err:
        pms.compute_log_likelihood(idata, model, max_bytes=1e4)
    assert "GiB" in str(err.value)
    out = pms.compute_log_likelihood(idata, model, extend_inferencedata=False)
    group = out["log_likelihood"] if hasattr(out, "children") else out.log_likelihood
    assert set(group.data_vars) == {"y", "w"} and group["y"].shape == (2, 100, n)
    assert pms.workflow.loglik.MAX_LOGLIK_BYTES == 2**30


def test_several_observed_variables_need_var_name(small):
    model, idata, n = small
    with pytest.raises(ValueError, match=r"several observed variables \(y, w\).*var_name"):
        pms.loo(idata, model, observations=100)
    with pytest.raises(ValueError, match=r"var_name='v'.*y, w"):
        pms.loo(idata, model, observations=100, var_name="v")
    res = pms.loo(idata, model, observations=200, var_name="w", seed=1)
    ll = log_likelihood_dataset(pm.compute_log_likelihood(
        idata, model=model, var_names=["w"], extend_inferencedata=False, progressbar=False))
    ref = ll["w"].values.reshape(200, n).T
    rows = np.asarray(res["loo_subsample_observations"])
    expected, _ = loo_module._psis_elpd(ref[rows], res["reff"])
    np.testing.assert_allclose(pointwise_of(res)[rows], expected, rtol=1e-9)


def test_bad_input_gives_clear_errors(small):
    model, idata, n = small
    with pytest.raises(InvalidParameterError, match=rf"rows.*outside.*{n} rows.*{n + 5}"):
        pms.compute_log_likelihood(idata, model, rows=[0, n + 5])
    with pytest.raises(InvalidParameterError, match=r"rows.*-1"):
        pms.compute_log_likelihood(idata, model, rows=[-1, 3])
    with pytest.raises(InvalidParameterError, match=r"repeated"):
        pms.compute_log_likelihood(idata, model, rows=[3, 3])
    with pytest.raises(InvalidParameterError, match=rf"observations={n + 1}.*{n}"):
        pms.loo(idata, model, observations=n + 1, var_name="y")
    with pytest.raises(InvalidParameterError, match=r"observations"):
        pms.loo(idata, model, observations=1, var_name="y")
    with pytest.raises(InvalidParameterError, match=r"approximation"):
        pms.loo(idata, model, approximation="tis", var_name="y")
    with pytest.raises(ValueError, match=r"var_names.*|'v' is not an observed"):
        pms.compute_log_likelihood(idata, model, rows=[1], var_names=["v"])
    with pytest.raises(TypeError, match=r"pms\.loo"):
        pms.loo_update({"elpd": 1.0}, idata, model)


def _same_model(X, y, w):
    """The model of ``small`` on other data (same names and priors)."""
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        s = pm.HalfNormal("s", 1)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
        pm.Normal("w", b[0] * X[:, 0], s, observed=w)
    return model


@pytest.mark.parametrize("change", ["shifted", "fewer rows", "one row"])
def test_refuses_a_model_on_other_data(small, change):
    """loo, loo_update, compute_log_likelihood and sample_posterior_predictive on a model
    with the same names but other observations (``w + 5``, 100 rows fewer, one value
    changed) raise DataMismatchError naming the variable (issue 44: an ELPD of other data
    was returned without a word); check_data=False evaluates the other data on purpose."""
    model, idata, n = small
    rng = np.random.default_rng(7)
    X, y = logistic_data(rng, n, [0.5, -0.4])
    w = X[:, 0] + rng.normal(size=n)
    keep = np.arange(n)
    if change == "shifted":
        w = w + 5
    elif change == "fewer rows":
        keep = np.arange(n - 100)
    else:
        w = w.copy()
        w[n // 3 + 1] += 1e-3  # not one of the spread rows: the arrays are compared in full
    other = _same_model(X[keep], y[keep], w[keep])
    what = r"has 500 rows in the model but 600" if change == "fewer rows" else r"differs"
    with pytest.raises(pms.DataMismatchError, match=rf"loo: observed 'w' {what}"):
        pms.loo(idata, other, observations=100, var_name="w")
    with pytest.raises(pms.DataMismatchError, match=rf"compute_log_likelihood: observed 'w'"):
        pms.compute_log_likelihood(idata, other, rows=[0, 1], var_names=["w"])
    with pytest.raises(pms.DataMismatchError, match=r"sample_posterior_predictive"):
        pms.sample_posterior_predictive(idata, other, rows=[0, 1], var_names=["w"])
    out = pms.compute_log_likelihood(idata, other, rows=[0, 1], var_names=["w"],
                                     check_data=False, extend_inferencedata=False)
    group = out["log_likelihood"] if hasattr(out, "children") else out.log_likelihood
    assert group["w"].shape == (2, 100, 2)
    # the model the result came from passes, and 'y' alone is unchanged in every case
    # but the row count
    pms.compute_log_likelihood(idata, model, rows=[0, 1], extend_inferencedata=False)
    if change != "fewer rows":
        pms.compute_log_likelihood(idata, other, rows=[0, 1], var_names=["y"],
                                   extend_inferencedata=False)


def test_loo_update_refuses_other_data(small):
    model, idata, n = small
    res = pms.loo(idata, model, observations=100, var_name="w", seed=2)
    rng = np.random.default_rng(7)
    X, y = logistic_data(rng, n, [0.5, -0.4])
    w = X[:, 0] + rng.normal(size=n)
    with pytest.raises(pms.DataMismatchError, match=r"loo_update: observed 'w' differs"):
        pms.loo_update(res, idata, _same_model(X, y, w + 5), observations=50)


def test_spread_rows_are_compared_for_data_on_disk(small, tmp_path):
    """A memory-mapped observed array is compared at spread rows (not read in full)."""
    from pymc_subsample.workflow.loglik import SPREAD_ROWS, check_observed_data

    model, idata, n = small
    rng = np.random.default_rng(7)
    X, y = logistic_data(rng, n, [0.5, -0.4])
    w = X[:, 0] + rng.normal(size=n)
    path = tmp_path / "w.npy"
    np.save(path, w + 5)
    mapped = np.load(path, mmap_mode="r")
    with pytest.raises(pms.DataMismatchError, match=r"row 0:"):
        check_observed_data(idata, _same_model(X, y, mapped), ["w"], owner="t")
    assert SPREAD_ROWS >= 32
