"""pms.sample_posterior_predictive: draws for a subset of rows, right for each model.

For each model (logistic, Poisson and Normal GLMs, a random-intercept model) the
predictive draws of chosen rows are checked against the model's distribution at the
posterior draws, computed here in NumPy from the posterior: per row, the predictive mean
over draws must match ``mean_s E[y_i | theta_s]`` within its Monte Carlo error, and (for
the Normal) the predictive variance must match ``sigma^2 + var_s(mu_i)``. A check that
pairs the draws with the wrong rows fails (shown below).
"""

from __future__ import annotations

import arviz as az
import numpy as np
import pymc as pm
import pytest

import importlib

import pymc_subsample as pms
from pymc_subsample.kernels._validation import InvalidParameterError

predictive_module = importlib.import_module("pymc_subsample.workflow.predictive")

N = 3000
ROWS = np.array([2999, 0, 17, 1500, 42, 2048, 7, 999])
ARVIZ_1 = int(az.__version__.split(".")[0]) >= 1


def group(res, name):
    return res[name] if hasattr(res, "children") else getattr(res, name)


def draws(idata, name):
    """Posterior draws of ``name`` as ``(chains * draws, ...)``."""
    post = group(idata, "posterior")[name].values
    return post.reshape((-1,) + post.shape[2:])


def _sample(model, seed=5):
    with model:
        return pm.sample(draws=200, tune=200, chains=2, random_seed=seed, progressbar=False,
                         compute_convergence_checks=False)


def _data(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, 2))
    g = rng.integers(0, 8, size=N)
    return rng, X, g


def logistic():
    rng, X, _ = _data(1)
    y = (rng.random(N) < 1 / (1 + np.exp(-(X @ [1.0, -0.5])))).astype("int64")
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Bernoulli("y", logit_p=pm.math.dot(X, b), observed=y)
    idata = _sample(model)

    def mean_var(rows):
        p = 1 / (1 + np.exp(-(draws(idata, "b") @ X[rows].T)))  # (S, rows)
        return p, p * (1 - p)
    return model, idata, y, mean_var


def poisson():
    rng, X, _ = _data(2)
    y = rng.poisson(np.exp(0.4 + X @ [0.3, -0.2]))
    with pm.Model(coords={"obs": np.arange(N)}) as model:
        Xd = pm.Data("X", X, dims=("obs", "k"))
        a = pm.Normal("a", 0, 2)
        b = pm.Normal("b", 0, 1, shape=2)
        pm.Poisson("y", pm.math.exp(a + pm.math.dot(Xd, b)), observed=y, dims="obs")
    idata = _sample(model)

    def mean_var(rows):
        lam = np.exp(draws(idata, "a")[:, None] + draws(idata, "b") @ X[rows].T)
        return lam, lam
    return model, idata, y, mean_var


def normal():
    rng, X, _ = _data(3)
    y = 1.0 + X @ [0.5, 2.0] + rng.normal(0, 1.5, size=N)
    with pm.Model() as model:
        a = pm.Normal("a", 0, 5)
        b = pm.Normal("b", 0, 5, shape=2)
        s = pm.HalfNormal("s", 3)
        pm.Normal("y", a + pm.math.dot(X, b), s, observed=y)
    idata = _sample(model)

    def mean_var(rows):
        mu = draws(idata, "a")[:, None] + draws(idata, "b") @ X[rows].T
        return mu, np.broadcast_to(draws(idata, "s")[:, None] ** 2, mu.shape)
    return model, idata, y, mean_var


def random_intercept():
    rng, X, g = _data(4)
    u = rng.normal(0, 1.0, size=8)
    y = 0.5 + u[g] + X[:, 0] + rng.normal(0, 0.8, size=N)
    with pm.Model() as model:
        mu = pm.Normal("mu", 0, 5)
        tau = pm.HalfNormal("tau", 2)
        a = pm.Normal("a", mu, tau, shape=8)
        b = pm.Normal("b", 0, 5)
        s = pm.HalfNormal("s", 2)
        pm.Normal("y", a[g] + b * X[:, 0], s, observed=y)
    idata = _sample(model)

    def mean_var(rows):
        m = draws(idata, "a")[:, g[rows]] + draws(idata, "b")[:, None] * X[rows, 0]
        return m, np.broadcast_to(draws(idata, "s")[:, None] ** 2, m.shape)
    return model, idata, y, mean_var


MODELS = {"logistic": logistic, "poisson": poisson, "normal": normal,
          "random_intercept": random_intercept}


@pytest.fixture(scope="module", params=list(MODELS))
def fitted(request):
    return request.param, *MODELS[request.param]()


def z_scores(pp, mean, var):
    """Per row: (predictive mean over draws - model mean) / its Monte Carlo SE, where the
    predictive variance is ``E[var] + var(E)`` over draws."""
    s = pp.shape[0]
    target = mean.mean(axis=0)
    pvar = var.mean(axis=0) + mean.var(axis=0)
    return (pp.mean(axis=0) - target) / np.sqrt(pvar / s)


def test_draws_follow_the_model_on_the_chosen_rows(fitted, monkeypatch):
    name, model, idata, y, mean_var = fitted
    # several chunks of unsorted rows: the draws must still land on their rows
    monkeypatch.setattr(predictive_module, "ROWS_PER_CHUNK", 3)
    res = pms.sample_posterior_predictive(idata, model, rows=ROWS, random_seed=1)
    assert type(res) is type(idata)
    pp = group(res, "posterior_predictive")["y"]
    obs = group(res, "observed_data")["y"]
    row_dim = pp.dims[2]
    assert pp.dims[:2] == ("chain", "draw") and obs.dims == (row_dim,)
    np.testing.assert_array_equal(pp[row_dim].values, ROWS)
    np.testing.assert_array_equal(obs[row_dim].values, ROWS)
    np.testing.assert_array_equal(obs.values, y[ROWS])
    flat = pp.values.reshape(-1, ROWS.size)
    mean, var = mean_var(ROWS)
    z = z_scores(flat, mean, var)
    # 8 rows, each z ~ N(0, 1): a max |z| of 4.5 fails with probability ~5e-5
    assert np.max(np.abs(z)) < 4.5, z
    # the check can fail: the same draws scored against the other rows' means
    z_wrong = z_scores(flat, mean[:, ::-1], var[:, ::-1])
    assert np.max(np.abs(z_wrong)) > 4.5, z_wrong
    if name in ("normal", "random_intercept"):
        # spread: predictive variance sigma^2 + var(mu_i), pooled over rows
        pvar = (var.mean(axis=0) + mean.var(axis=0))
        ratio = flat.var(axis=0) / pvar
        # a variance estimate from 400 draws has relative SE sqrt(2/400) = 7%
        assert abs(ratio.mean() - 1) < 4 * 0.07 / np.sqrt(ROWS.size), ratio


@pytest.mark.parametrize("fitted", ["poisson"], indirect=True)
def test_seed_reproduces_and_default_rows(fitted):
    name, model, idata, y, _ = fitted
    a = pms.sample_posterior_predictive(idata, model, rows=ROWS, random_seed=3)
    b = pms.sample_posterior_predictive(idata, model, rows=ROWS, random_seed=3)
    np.testing.assert_array_equal(group(a, "posterior_predictive")["y"].values,
                                  group(b, "posterior_predictive")["y"].values)
    c = pms.sample_posterior_predictive(idata, model, random_seed=3, n_rows=100)
    pp = group(c, "posterior_predictive")["y"]
    rows = pp[pp.dims[2]].values
    assert rows.size == 100 and np.unique(rows).size == 100 and rows.max() < N
    with pytest.raises(InvalidParameterError, match=rf"rows.*{N}"):
        pms.sample_posterior_predictive(idata, model, rows=[N])
    with pytest.raises(ValueError, match=r"'z' is not an observed variable.*y"):
        pms.sample_posterior_predictive(idata, model, rows=ROWS, var_names=["z"])


@pytest.mark.parametrize("fitted", ["logistic"], indirect=True)
def test_plot_ppc_accepts_the_result(fitted):
    name, model, idata, y, _ = fitted
    import matplotlib

    matplotlib.use("Agg")
    res = pms.sample_posterior_predictive(idata, model, rows=np.arange(0, N, 10),
                                          random_seed=2)
    if ARVIZ_1:
        pytest.importorskip("arviz_plots")
        az.plot_ppc_dist(res)
    else:
        az.plot_ppc(res)


@pytest.mark.parametrize("fitted", ["poisson", "random_intercept"], indirect=True)
def test_zarr_store_streams_every_row(fitted, tmp_path, monkeypatch):
    """``store=``: the draws of all N rows written chunk by chunk to a Zarr store and read
    back lazily are the in-memory draws of the same rows and seed; the observed values
    are the data's; memory holds a chunk, not the N x draws array."""
    import dask.array as da

    name, model, idata, y, _ = fitted
    monkeypatch.setattr(predictive_module, "ROWS_PER_CHUNK", 512)  # several chunks
    written = []
    write = predictive_module._ZarrWriter.write

    def spy(self, group_name, var, dims, values, *args):
        written.append((group_name, values.shape))
        return write(self, group_name, var, dims, values, *args)

    monkeypatch.setattr(predictive_module._ZarrWriter, "write", spy)
    store = tmp_path / "pp.zarr"
    res = pms.sample_posterior_predictive(idata, model, store=store, random_seed=11)
    pp = group(res, "posterior_predictive")["y"]
    assert isinstance(pp.data, da.Array)  # read lazily from the store
    # every write held one chunk of rows (for every draw), never all N rows
    chunks = [shape for g, shape in written if g == "posterior_predictive"]
    assert len(chunks) == -(-N // 512)
    assert max(shape[2] for shape in chunks) == 512
    row_dim = pp.dims[2]
    np.testing.assert_array_equal(pp[row_dim].values, np.arange(N))
    mem = pms.sample_posterior_predictive(idata, model, rows=np.arange(N), random_seed=11)
    np.testing.assert_array_equal(pp.values, group(mem, "posterior_predictive")["y"].values)
    obs = group(res, "observed_data")["y"]
    np.testing.assert_array_equal(obs.values, y)
    # the store stands alone: another process can open it
    import xarray as xr

    again = xr.open_zarr(store, group="posterior_predictive", consolidated=False)
    np.testing.assert_array_equal(again["y"].values, pp.values)
    # a chosen subset is written in increasing row order
    sub = pms.sample_posterior_predictive(idata, model, rows=[2999, 5, 700], store=store,
                                          random_seed=11)
    sub_pp = group(sub, "posterior_predictive")["y"]
    np.testing.assert_array_equal(sub_pp[row_dim].values, [5, 700, 2999])
    np.testing.assert_array_equal(group(sub, "observed_data")["y"].values, y[[5, 700, 2999]])


@pytest.mark.parametrize("fitted", ["poisson"], indirect=True)
def test_a_full_disk_names_the_store_and_leaves_no_partial_store(fitted, tmp_path,
                                                                monkeypatch):
    """A write that fails part-way (a full disk: ``OSError(ENOSPC)`` on the third chunk)
    raises an OSError naming the store, which is removed (it was left half written, and
    the message named no path)."""
    import errno

    import xarray as xr

    name, model, idata, y, _ = fitted
    monkeypatch.setattr(predictive_module, "ROWS_PER_CHUNK", 512)
    calls = {"n": 0}
    to_zarr = xr.Dataset.to_zarr

    def full_disk(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        return to_zarr(self, *args, **kwargs)

    monkeypatch.setattr(xr.Dataset, "to_zarr", full_disk)
    store = tmp_path / "pp.zarr"
    with pytest.raises(OSError, match=r"pp\.zarr.*No space left.*removed.*store=") as err:
        pms.sample_posterior_predictive(idata, model, store=store, random_seed=11)
    assert err.value.errno == errno.ENOSPC
    assert not store.exists()
