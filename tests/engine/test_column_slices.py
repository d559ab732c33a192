"""Column selections of row data (``X[:, :4]``, ``X[:, [0, 2, 5]]``, ``X[:, 1]``) and
selections of rows (``X[:1000]``, ``X[::2]``) inside a model.

PyMC's logp rewrites fold an expression of constants such as ``X[:, :4]`` into a new
``(N, 4)`` constant, which the likelihood then reads, while the model's own expressions
(the linear predictor the steps' bounds, control variates and mode search use) still read
``X`` through the indexing op. The engine must give both the same rows of the batch: a
row axis that survives column indexing stays the batch's row axis. A selection of rows
inside the model must either be exact or be refused with a message naming the data.

Every value is compared with PyMC's own graphs of the same model, at random rows.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

import pymc_subsample as pms
from pymc_subsample.engine import LikelihoodEngine, ModelNotSupportedError

N = 300
D = 10
RTOL = 1e-9

#: column selections: ``X -> (selected data, number of coefficients or None for a
#: single column times a scalar)``
SELECTIONS = {
    "first_columns": lambda X: (X[:, :4], 4),
    "listed_columns": lambda X: (X[:, [0, 2, 5]], 3),
    "one_column_times_scalar": lambda X: (X[:, 1] * 2.0, None),
    "transposed_and_back": lambda X: (X.T[:4].T, 4),
}

#: how the model receives the covariates
KINDS = ("out_of_core", "numpy", "pm_data")


@functools.lru_cache(maxsize=None)
def _files():
    import atexit
    import shutil
    import tempfile

    directory = tempfile.mkdtemp(prefix="pms_column_slices_")
    atexit.register(shutil.rmtree, directory, True)
    x_path, y_path, _ = pms.datasets.write_logistic(directory, N, D, seed=1)
    return x_path, y_path


def _data(kind):
    x_path, y_path = _files()
    if kind == "out_of_core":
        return pms.out_of_core.rows(x_path), pms.out_of_core.rows(y_path)
    return np.load(x_path), np.load(y_path)


def _build(kind, selection):
    """A logistic regression on a column selection of ``X``; returns the model and its
    linear predictor (a model expression, read by the steps through the engine)."""
    X, y = _data(kind)
    with pm.Model() as model:
        if kind == "pm_data":
            X = pm.Data("X", X)
        elif kind == "numpy":
            X = pt.as_tensor(X)
        Xs, k = SELECTIONS[selection](X)
        if k is None:
            b = pm.Normal("b", 0, 1)
            eta = Xs * b
        else:
            b = pm.Normal("b", 0, 1, shape=k)
            eta = pm.math.dot(Xs, b)
        pm.Bernoulli("y", logit_p=eta, observed=y)
    return model, eta


def _engine(model):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return LikelihoodEngine(model)


def _reference(model, eta):
    """PyMC's per-row log-likelihood terms and linear predictor over all rows, as
    functions of the point ``{"b": q}``."""
    terms = model.logp(vars=model.observed_RVs, sum=False)[0]
    ll = model.compile_fn(terms, inputs=model.value_vars, on_unused_input="ignore")
    eta = model.replace_rvs_by_values([eta])[0]
    eta_fn = model.compile_fn(eta, inputs=model.value_vars, on_unused_input="ignore")
    shape = model.initial_point()["b"].shape

    def point(q):
        return {"b": np.asarray(q, dtype=np.float64).reshape(shape)}

    return (lambda q: np.asarray(ll(point(q)))), (lambda q: np.asarray(eta_fn(point(q))))


def assert_close(actual, desired, what=""):
    actual = np.asarray(actual, dtype=np.float64)
    desired = np.asarray(desired, dtype=np.float64)
    assert actual.shape == desired.shape, (what, actual.shape, desired.shape)
    np.testing.assert_allclose(actual, desired, rtol=RTOL, atol=1e-12, err_msg=what)


def _check_rows(model, eta, seed=0):
    """Engine vs PyMC on random rows: the per-row log-likelihood and the linear
    predictor rebuilt over the batch (``compile_batch``, the steps' path)."""
    eng = _engine(model)
    n = eng.n_rows
    rng = np.random.default_rng(seed)
    q = eng.initial_q() + rng.normal(0, 0.5, eng.ndim)
    ref_ll, ref_eta = _reference(model, eta)
    full_ll, full_eta = ref_ll(q), ref_eta(q)
    assert full_ll.shape == (n,)
    eta_fn = eng.compile_batch([eta])
    for rows in (rng.choice(n, size=37, replace=False), np.array([0, n - 1]),
                 np.array([5]), np.arange(n)):
        rows = rows.astype(np.int64)
        assert_close(eng.loglik(q, rows), full_ll[rows], what=f"loglik rows {rows[:5]}")
        got = np.broadcast_to(np.asarray(eta_fn(q, *eng.gather(rows))[0]), rows.shape)
        assert_close(got, np.broadcast_to(full_eta, (n,))[rows], what="linear predictor")
    # the likelihood over all rows, chunk by chunk
    assert_close(eng.full_loglik(q, chunk=64), full_ll.sum(), what="full loglik")
    return eng


# ====================================================================== exact values
@pytest.mark.parametrize("selection", list(SELECTIONS))
def test_column_selection_rows_match_pymc(selection):
    """Each kind of data (on disk, NumPy, pm.Data) with the same column selection."""
    for kind in KINDS:
        model, eta = _build(kind, selection)
        eng = _check_rows(model, eta)
        # no row data keeps more than the N rows (a full-size constant in the batch
        # graph would make the predictor's shape N whatever the batch)
        assert all(r.array().shape[0] == N for r in eng.rows), (kind, eng.describe())


def test_column_selection_of_a_memmap_reads_the_file():
    """``X[:, :4]`` of :func:`pms.out_of_core.rows`: the engine's rows are still views of
    the file (no copy of the data in memory), and the predictor is exact."""
    model, eta = _build("out_of_core", "first_columns")
    eng = _check_rows(model, eta)
    covariates = [r.array() for r in eng.rows if r.array().ndim == 2]
    assert covariates and all(_backed_by_file(a) for a in covariates)


def _backed_by_file(a) -> bool:
    import mmap

    while a is not None:
        if isinstance(a, (np.memmap, mmap.mmap)):
            return True
        a = getattr(a, "base", None)
    return False


# ====================================================================== the steps
STEPS = {
    "ScalableMH": lambda: pms.ScalableMH(),
    "AustereMH": lambda: pms.AustereMH(),
    "BarkerMinibatch": lambda: pms.BarkerMinibatch(),
    "SGLD": lambda: pms.SGLD(),
}


def _map_estimate(selection):
    """Mode of the same model with the selected columns passed as a plain array."""
    X, y = _data("numpy")
    Xs, k = SELECTIONS[selection](X)
    Xs = np.asarray(Xs, dtype=np.float64)
    with pm.Model():
        b = pm.Normal("b", 0, 1, shape=k)
        pm.Bernoulli("y", logit_p=pm.math.dot(Xs, b), observed=y)
        return pm.find_MAP(progressbar=False)["b"]


@pytest.mark.parametrize("step", list(STEPS))
def test_steps_sample_a_column_selection_on_disk(step):
    """The report's model: ``pm.math.dot(X[:, :4], b)`` with ``X`` on disk."""
    model, _ = _build("out_of_core", "first_columns")
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        idata = pm.sample(step=STEPS[step](), draws=100, tune=100, chains=1,
                          random_seed=3, progressbar=False, compute_convergence_checks=False)
    draws = idata.posterior["b"].values.reshape(-1, 4)
    assert draws.shape == (100, 4) and np.all(np.isfinite(draws))
    # near the mode (the posterior sd is about 0.15 for N = 300)
    assert np.max(np.abs(draws.mean(axis=0) - _map_estimate("first_columns"))) < 0.5


@pytest.mark.parametrize("selection", ["listed_columns", "one_column_times_scalar"])
def test_scalable_mh_builds_on_numpy_column_selections(selection):
    model, _ = _build("numpy", selection)
    with model, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        step = pms.ScalableMH()
        idata = pm.sample(step=step, draws=30, tune=30, chains=1, random_seed=4,
                          progressbar=False, compute_convergence_checks=False)
    assert np.all(np.isfinite(idata.posterior["b"].values))


# ====================================================================== rows selected in the model
def _row_selection_model(X, y, select):
    with pm.Model() as model:
        b = pm.Normal("b", 0, 1, shape=3)
        eta = pm.math.dot(select(X)[:, :3], b)
        pm.Bernoulli("y", logit_p=eta, observed=y)
    return model, eta


ROW_SELECTIONS = {
    "head": (lambda X: X[:N], lambda X: X[:N]),
    "every_other": (lambda X: X[::2], lambda X: X[::2]),
    "reversed": (lambda X: X[::-1][:N], lambda X: X[::-1][:N]),
    "listed_rows": (lambda X: X[np.arange(2 * N - 1, 0, -2)],
                    lambda X: X[np.arange(2 * N - 1, 0, -2)]),
}


def _long_data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(2 * N, 4))
    y = rng.integers(0, 2, size=N)
    return X, y


@pytest.mark.parametrize("name", list(ROW_SELECTIONS))
def test_row_selection_of_a_numpy_constant_is_exact(name):
    """A NumPy ``X`` of 2N rows, rows selected in the model: PyMC folds the selection
    into a constant of N rows, and the engine must be exact on both of its paths."""
    X, y = _long_data()
    model, eta = _row_selection_model(pt.as_tensor(X), y, ROW_SELECTIONS[name][0])
    _check_rows(model, eta, seed=1)
    if name == "listed_rows":
        # pm.Data rows listed by a NumPy index of one entry per observation: a gather
        # by row data (the index is row data), exact; PyTensor 3 rewrites this index (an
        # arange) into a slice of the rows, which is refused
        with pm.Model() as model:
            Xd = pm.Data("X", X)
            b = pm.Normal("b", 0, 1, shape=3)
            eta = pm.math.dot(ROW_SELECTIONS[name][1](Xd)[:, :3], b)
            pm.Bernoulli("y", logit_p=eta, observed=y)
        try:
            _check_rows(model, eta, seed=2)
        except ModelNotSupportedError as err:
            assert "indexes the rows of 'X'" in str(err), str(err)


REFUSED_ROW_SELECTIONS = [k for k in ROW_SELECTIONS if k != "listed_rows"]


@pytest.mark.parametrize("name", REFUSED_ROW_SELECTIONS)
def test_row_selection_of_pm_data_is_refused(name):
    """``pm.Data('X', X)[:N]`` (and other row selections of data with more rows than the
    observations): the batch graph would keep N rows of X whatever the batch; refused,
    naming the data and saying what to do."""
    X, y = _long_data()
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=pm.math.dot(ROW_SELECTIONS[name][1](Xd)[:, :3], b),
                     observed=y)
    with pytest.raises(ModelNotSupportedError,
                       match=r"indexes the rows of 'X'.*Select the rows before building"):
        _engine(model)


@pytest.mark.parametrize("select", [lambda X: X[::-1], lambda X: X[np.arange(N)[::-1]],
                                    lambda X: X[1:][:-1]],
                         ids=["reversed", "listed", "shifted"])
def test_row_indexing_of_row_data_is_refused(select):
    """``pm.Data('X', X)`` with one row per observation, indexed along its rows in the
    model (``X[::-1]``): rebuilt over a batch this would pair the batch's rows with the
    wrong observations; refused with a message naming the data."""
    rng = np.random.default_rng(8)
    X = rng.normal(size=(N, 3))
    y = rng.integers(0, 2, size=N)
    if select(X).shape[0] != N:  # "shifted": one row fewer, observed rows to match
        y = y[: select(X).shape[0]]
    with pm.Model() as model:
        Xd = pm.Data("X", X)
        b = pm.Normal("b", 0, 1, shape=3)
        pm.Bernoulli("y", logit_p=pm.math.dot(select(Xd), b), observed=y)
    with pytest.raises(ModelNotSupportedError, match=r"indexes the rows of .*'X'"):
        _engine(model)


def test_column_selection_of_pm_data_with_listed_columns():
    """``pm.Data('X', X)[:, [0, 2, 5]]``: the index's slice constants are not data (this
    failed while the engine looked for row data)."""
    model, eta = _build("pm_data", "listed_columns")
    eng = _check_rows(model, eta)
    assert any(r.array().shape == (N, D) for r in eng.rows)
