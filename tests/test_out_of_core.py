"""Data kept on disk (``pymc_subsample.out_of_core``), the parallel one-time passes
(``pymc_subsample.passes``) and the compact per-row arrays of ScalableMH."""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample import _memmap, passes
from pymc_subsample.kernels.scalable.bounds import UpperBounds
from pymc_subsample.out_of_core import keep_observations_on_disk, open_rows, rows
from pymc_subsample.testing import group
from tests.conftest import bernoulli_logit_draws, logistic_data, logistic_model


def _write(tmp_path, n=3000, k=3, seed=0):
    X, y = logistic_data(np.random.default_rng(seed), n, np.linspace(-1.0, 1.0, k),
                         dtype=np.float32)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    return X, y


def test_open_rows_maps_converts_and_refuses(tmp_path):
    X, y = _write(tmp_path)
    mm = open_rows(tmp_path / "X.npy")
    assert _memmap.is_file_backed(mm) and mm.dtype == np.float32
    np.testing.assert_array_equal(mm, X)
    assert open_rows(mm) is mm  # already mapped in the right dtype: as is
    as64 = open_rows(tmp_path / "X.npy", dtype=np.float64, path=str(tmp_path / "X64.npy"))
    assert _memmap.is_file_backed(as64) and as64.dtype == np.float64
    np.testing.assert_array_equal(as64, X.astype(np.float64))
    small = open_rows(np.arange(10), dtype=np.int8, chunk=3)  # in memory -> a file
    assert _memmap.is_file_backed(small) and small.dtype == np.int8
    np.testing.assert_array_equal(small, np.arange(10))
    with pytest.raises(ValueError, match="non-integer"):
        open_rows(np.array([0.0, 0.5]), dtype=np.int64)
    with pytest.raises(FileNotFoundError, match="no such file"):
        open_rows(tmp_path / "missing.npy")
    with pytest.raises(TypeError, match="source must be"):
        open_rows([1, 2, 3])
    bad = X.copy()
    bad[1234, 1] = np.nan
    np.save(tmp_path / "bad.npy", bad)
    with pytest.raises(ValueError, match="row 1234 .* NaN"):
        rows(tmp_path / "bad.npy")


def test_open_rows_reads_zarr_in_chunks(tmp_path):
    zarr = pytest.importorskip("zarr")
    X, _ = _write(tmp_path)
    z = zarr.open_array(str(tmp_path / "X.zarr"), mode="w", shape=X.shape, chunks=(500, 3),
                        dtype=X.dtype)
    z[:] = X
    for source in (z, str(tmp_path / "X.zarr")):
        mm = open_rows(source, chunk=700, path=str(tmp_path / "fromzarr.npy"))
        assert _memmap.is_file_backed(mm)
        np.testing.assert_array_equal(mm, X)


def test_rows_constants_compare_by_file_not_by_content(tmp_path):
    X, _ = _write(tmp_path)
    np.save(tmp_path / "X2.npy", X)
    a, b = rows(tmp_path / "X.npy"), rows(tmp_path / "X.npy")
    c = rows(tmp_path / "X2.npy")
    assert a.equals(b) and hash(a.signature()) == hash(b.signature())
    assert not a.equals(c)  # same values, other file
    assert a.unique_value is None
    assert type(a).__name__ == "RowsConstant"


def test_observations_stay_on_disk_and_draws_equal_in_memory(tmp_path):
    """The same seed gives the same draws with the data in memory and on disk; on disk
    neither the step nor the result holds a copy of the rows."""
    X, y = _write(tmp_path)
    disk = logistic_model(rows(tmp_path / "X.npy"), rows(tmp_path / "y.npy", dtype="int64"))
    memory = logistic_model(X, y)
    draws = []
    for model in (disk, memory):
        with model:
            step = pms.ScalableMH()
            idata = pm.sample(draws=300, tune=100, chains=1, step=step, random_seed=3,
                              progressbar=False, compute_convergence_checks=False)
        draws.append(group(idata, "posterior")["b"].values)
        if model is disk:
            assert all(_memmap.is_file_backed(a) for a in step.engine.data_arrays())
            value = model.rvs_to_values[model["y"]]
            assert _memmap.is_file_backed(value.data)
            assert _memmap.is_file_backed(np.asarray(group(idata, "observed_data")["y"].values))
            assert step.psi.dtype == np.float32 and step.table.cumulative.dtype == np.int64
    np.testing.assert_array_equal(draws[0], draws[1])


def test_observations_not_redirected_when_casts_change_values(tmp_path):
    """PyMC casts int64 observations to int32 and back: a value beyond int32 would
    change, so the model keeps PyMC's cast (the step never silently swaps data)."""
    counts = np.array([1, 2, 3, 2**40], dtype=np.int64)
    np.save(tmp_path / "c.npy", counts)
    with pm.Model() as model:
        lam = pm.Exponential("lam", 1.0)
        pm.Poisson("c", lam, observed=rows(tmp_path / "c.npy", dtype="int64"))
    with pytest.warns(UserWarning, match="'c': some values .* change under PyMC's dtype"):
        assert keep_observations_on_disk(model) == []
    np.save(tmp_path / "ok.npy", counts[:3])
    with pm.Model() as model:
        lam = pm.Exponential("lam", 1.0)
        pm.Poisson("c", lam, observed=rows(tmp_path / "ok.npy", dtype="int64"))
    assert keep_observations_on_disk(model) == ["c"]


def test_observations_in_another_dtype_warn_and_still_sample(tmp_path):
    """y saved as float64 for an int64 pm.Bernoulli: PyMC converts it symbolically, so
    the file cannot stand in for the observations; the step says so (naming the variable
    and the fix) and ScalableMH still samples, without the predictor coordinates that
    need the observations as a data array (it used to stop with a bare StopIteration)."""
    X, y = _write(tmp_path)
    np.save(tmp_path / "yf.npy", y.astype(np.float64))
    model = logistic_model(rows(tmp_path / "X.npy"), rows(tmp_path / "yf.npy"))
    with model:
        with pytest.warns(UserWarning, match=r"observed 'y': .*yf.npy holds float64 but "
                          r"'y' is int64.*dtype='int64'"):
            step = pms.ScalableMH()
        idata = pm.sample(draws=200, tune=100, chains=1, step=step, random_seed=3,
                          progressbar=False, compute_convergence_checks=False)
    assert np.all(np.isfinite(group(idata, "posterior")["b"].values))


def test_upper_bounds_round_up_and_widen():
    values = np.random.default_rng(0).exponential(size=1000) * 10.0 ** np.arange(-3, 7).repeat(100)
    store = UpperBounds(values.size)
    store.put(0, 500, values[:500])
    store.put(500, 1000, values[500:])
    got = store.values
    assert got.dtype == np.float32
    assert np.all(got.astype(np.float64) >= values)
    # close above: within 2**-21 of the value (a widening by 2**-22 and a cast)
    assert np.all(got.astype(np.float64) <= values * (1.0 + 2.0**-21))
    # zero stays zero; tiny, subnormal and negative values are rounded up one by one
    odd = np.array([0.0, 1e-40, 3e-45, 1.0e-38, -2.5, 5e-324])
    got = UpperBounds.round_up(odd)
    assert got.dtype == np.float32 and got[0] == 0.0
    assert np.all(got.astype(np.float64) >= odd)
    assert np.all(np.nextafter(got, np.float32(-np.inf)).astype(np.float64) < odd)
    for one in (2.5, 0.0, 1e-40):  # one value: a 0-d array
        got = UpperBounds.round_up(np.float64(one))
        assert got.shape == () and got.dtype == np.float32 and float(got) >= one
    store = UpperBounds(3)
    store.put(0, 2, [1.0, 2.0])
    store.put(2, 3, [1e39])  # beyond float32: the array widens, nothing is lost
    assert store.values.dtype == np.float64 and store.values[2] == 1e39
    assert np.all(store.values[:2] >= [1.0, 2.0])


def _built_serial_and_threaded(model, make_step):
    """``make_step()`` in ``model`` with the passes in this thread, then on 2 threads."""
    built = {}
    for label, settings in (("serial", dict(scheduler="sync")),
                            ("threads", dict(num_workers=2, wave=2))):
        with passes.configure(**settings), model:
            assert passes.current()["backend"] == label
            built[label] = make_step()
    return built["serial"], built["threads"]


def test_parallel_passes_equal_serial(tmp_path):
    """Set-up passes on 2 Dask threads give exactly the serial results (chunks are
    consumed in row order)."""
    pytest.importorskip("dask")
    X, y = _write(tmp_path, n=150_000)  # three chunks of 65,536 rows
    model = logistic_model(rows(tmp_path / "X.npy"), rows(tmp_path / "y.npy", dtype="int64"))
    a, b = _built_serial_and_threaded(model, lambda: pms.ScalableMH())
    np.testing.assert_array_equal(a.psi, b.psi)
    np.testing.assert_array_equal(a.theta_hat, b.theta_hat)
    np.testing.assert_array_equal(a.table.cumulative, b.table.cumulative)
    assert passes.current()["scheduler"] == "threads"  # the context restored it


def test_parallel_compiled_passes_equal_serial():
    """The compiled full-data sums of a model outside the GLM shortcuts (the mode
    search's gradient and Hessian passes) and the bound constants of engine/glm.py (a
    Gamma regression with unknown shape; a logistic regression with Cornish et al.'s
    bound form) run on Dask threads too, with exactly the serial results."""
    pytest.importorskip("dask")
    rng = np.random.default_rng(4)
    n = 150_000  # three chunks of 65,536 rows
    x = rng.normal(size=n)
    y = 0.5 * np.exp(0.3 * x) + rng.normal(0.0, 0.5, n)
    with pm.Model() as curved:  # not a GLM: a coefficient inside exp
        a = pm.Normal("a", 0.0, 2.0)
        b = pm.Normal("b", 0.0, 1.0)
        pm.Normal("y", a * pm.math.exp(b * x), 0.5, observed=y)
    s, t = _built_serial_and_threaded(curved, lambda: pms.AustereMH())
    assert getattr(s.control, "vmap", None) is None  # the engine's compiled passes, not the predictor's
    for field in ("theta", "loglik_grad", "loglik_hess"):
        np.testing.assert_array_equal(getattr(s.center, field), getattr(t.center, field))
    X = rng.normal(size=(n, 2))
    eta = X @ [0.3, -0.5]
    with pm.Model() as gamma:  # rows l(eta, log shape), bounded in q (engine/glm.py)
        beta = pm.Normal("beta", 0.0, 1.0, shape=2)
        shape = pm.HalfNormal("shape", 3.0)
        pm.Gamma("y", alpha=shape, beta=shape / pm.math.exp(pm.math.dot(X, beta)),
                 observed=rng.gamma(2.5, np.exp(eta) / 2.5))
    # one-parameter rows, Cornish et al.'s bound form
    logistic = logistic_model(X, bernoulli_logit_draws(rng, eta), coef="beta")
    for model, kw in ((gamma, {}), (logistic, dict(bound_form="cornish"))):
        s, t = _built_serial_and_threaded(model, lambda: pms.ScalableMH(**kw))
        np.testing.assert_array_equal(s.psi, t.psi)
        np.testing.assert_array_equal(s.theta_hat, t.theta_hat)


def test_thread_copies_of_a_function_with_a_scan_give_serial_results():
    """A Scan (here: PyTensor's Hessian, a scan over the gradient) keeps its own compiled
    inner function, which copies of the outer function share: worker threads call such
    a function one at a time. Run concurrently, the calls failed inside the Scan
    ("expected an ndarray, not None") or returned wrong values."""
    import threading

    import pytensor
    import pytensor.tensor as pt

    from pymc_subsample.engine.evaluate import thread_copy

    w, X = pt.dvector("w"), pt.dmatrix("X")
    fn = pytensor.function([w, X], pytensor.gradient.hessian(
        pt.sum(pt.log1p(pt.exp(X @ w))), w))
    rng = np.random.default_rng(0)
    data = [rng.normal(size=(20_000, 4)) for _ in range(12)]
    w0 = np.array([0.1, -0.2, 0.3, 0.05])
    expected = [fn(w0, x) for x in data]
    wrong, errors = [], []

    def work(ks):
        try:
            for _ in range(4):
                wrong.extend(k for k in ks
                             if not np.array_equal(thread_copy(fn)(w0, data[k]), expected[k]))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(range(j, 12, 2),)) for j in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not wrong


def test_passes_configure_validates():
    with pytest.raises(ValueError, match="num_workers"):
        passes.configure(num_workers=0)
    with pytest.raises(ValueError, match="scheduler"):
        passes.configure(scheduler="processes")
    with pytest.raises(TypeError, match="dask.distributed.Client"):
        passes.configure(client=object())


def test_map_chunks_orders_results_and_reports_progress():
    got, seen = [], []
    with passes.configure(num_workers=2, wave=1):
        passes.map_chunks(lambda s, e: (s, e, sum(range(s, e))), [(0, 3), (3, 7), (7, 9)],
                          lambda s, e, r: got.append(r), progress=seen.append)
    assert got == [(0, 3, 3), (3, 7, 18), (7, 9, 15)] and seen == [3, 7, 9]


def test_threaded_passes_keep_row_order_bound_the_chunks_in_flight_and_raise():
    """Chunks that finish out of order are consumed in row order, at most
    ``num_workers * wave`` are started ahead of the one consumed, and a chunk's error
    reaches the caller (the chunks not yet started are not run)."""
    import threading
    import time

    rng = np.random.default_rng(0)
    delays = rng.uniform(0.0, 0.004, size=40)
    lock, state = threading.Lock(), {"started": 0, "consumed": 0, "ahead": 0}

    def fn(s, e):
        with lock:
            state["started"] += 1
            state["ahead"] = max(state["ahead"], state["started"] - state["consumed"])
        time.sleep(delays[s])
        return s

    got = []

    def consume(s, e, r):
        state["consumed"] += 1
        got.append(r)

    ranges = [(k, k + 1) for k in range(40)]
    with passes.configure(num_workers=2, wave=3):
        passes.map_chunks(fn, ranges, consume)
    assert got == list(range(40))
    assert state["ahead"] <= 2 * 3

    def failing(s, e):
        if s == 5:
            raise ZeroDivisionError("chunk 5")
        time.sleep(0.002)
        return s

    done = []
    with passes.configure(num_workers=2, wave=1), pytest.raises(ZeroDivisionError):
        passes.map_chunks(failing, ranges, lambda s, e, r: done.append(r))
    assert done == list(range(5))


@pytest.mark.slow
def test_passes_on_a_distributed_client(tmp_path):
    """The passes run on a LocalCluster's worker processes (the chunk function travels
    with its memmaps as file references) and give the serial results: NumPy passes
    (logistic) and compiled ones (a Gamma regression: the mode search's gradient and
    Hessian, the bound constants)."""
    distributed = pytest.importorskip("distributed")
    X, y = _write(tmp_path, n=150_000)  # three chunks of 65,536 rows
    logistic = logistic_model(rows(tmp_path / "X.npy"), rows(tmp_path / "y.npy", dtype="int64"))
    eta = X.astype(np.float64) @ np.array([0.3, -0.5, 0.2])
    np.save(tmp_path / "g.npy", np.random.default_rng(1).gamma(2.5, np.exp(eta) / 2.5))
    with pm.Model() as gamma:
        beta = pm.Normal("beta", 0.0, 1.0, shape=3)
        shape = pm.HalfNormal("shape", 3.0)
        pm.Gamma("y", alpha=shape,
                 beta=shape / pm.math.exp(pm.math.dot(rows(tmp_path / "X.npy"), beta)),
                 observed=rows(tmp_path / "g.npy"))
    serial, remote = {}, {}
    for name, model in (("logistic", logistic), ("gamma", gamma)):
        with passes.configure(scheduler="sync"), model:
            serial[name] = pms.ScalableMH()
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        for name, model in (("logistic", logistic), ("gamma", gamma)):
            with passes.configure(client=client), model:
                assert passes.current()["backend"] == "distributed"
                remote[name] = pms.ScalableMH()
    for name in serial:
        np.testing.assert_array_equal(serial[name].psi, remote[name].psi)
        np.testing.assert_array_equal(serial[name].theta_hat, remote[name].theta_hat)


@pytest.mark.skipif(sys.platform != "linux", reason="os.fork and SIGALRM")
def test_a_pass_in_a_forked_process_does_not_hang():
    """``pm.sample(cores>1)`` forks its workers after the set-up's passes used the thread
    pool, and a chain re-centred at the end of tuning runs a pass in the worker. Dask's
    own pool cache would be inherited without its threads and wait forever (checked:
    the child then times out); the passes' pools are per process."""
    pytest.importorskip("dask")

    def run():
        out = []
        with passes.configure(num_workers=2):
            passes.map_chunks(_slow_length, [(0, 3), (3, 7), (7, 9), (9, 10)],
                              lambda s, e, r: out.append(r))
        return out

    assert run() == [3, 4, 2, 1]  # the parent's pool now exists, with its threads
    pid = os.fork()
    if pid == 0:  # the child: exit 0 only if the pass finishes within 20 s
        signal.alarm(20)
        try:
            os._exit(0 if run() == [3, 4, 2, 1] else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status


def _slow_length(start, stop):
    time.sleep(0.05)  # both threads of the pool start
    return stop - start
