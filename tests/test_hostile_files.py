"""Never a silent wrong answer: data files that change on disk, and hostile arguments
of the out-of-core, passes and diagnostics helpers (issue 25, parts 4 and 6).

A step reads its rows from memory-mapped files while it samples and computes sums,
bounds and a Gaussian fit from them when it is built; a file written, replaced or
truncated after that must raise :class:`pymc_subsample.DataFileChangedError`, naming
the file, before any row of the changed file is read (a truncated file would otherwise
kill the process with ``SIGBUS``).
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap

import cloudpickle
import numpy as np
import pymc as pm
import pytest

import pymc_subsample as pms
from pymc_subsample import _memmap
from pymc_subsample.kernels.scalable.thinning import BoundViolationError
from pymc_subsample.out_of_core import DataFileChangedError, DataFileWatcher
from pymc_subsample.testing import from_dict
from tests.conftest import logistic_model

N, D = 3000, 2


def _files(tmp_path):
    """``X.npy`` (float64) and ``y.npy`` (int64) of a small logistic regression."""
    x_path, y_path, _ = pms.datasets.write_logistic(tmp_path, N, D, seed=4, dtype="float64")
    return x_path, y_path


def _model(x, y):
    return logistic_model(x, y, coef="beta", n_coef=D)


def _rows_model(tmp_path):
    x_path, y_path = _files(tmp_path)
    model = _model(pms.out_of_core.rows(x_path), pms.out_of_core.rows(y_path, dtype="int64"))
    return model, x_path, y_path


def _sample(model, step, **kw):
    with model:
        return pm.sample(draws=kw.pop("draws", 50), tune=kw.pop("tune", 50), chains=1,
                         cores=1, step=step, random_seed=1, progressbar=False,
                         compute_convergence_checks=False, **kw)


def _write_through_memmap(path):
    """What a user does by mistake: open the data file read-write and change it."""
    mm = np.load(path, mmap_mode="r+")
    mm[:] = -mm
    mm.flush()
    del mm


# ------------------------------------------------------------------ files changed on disk
def test_file_written_between_build_and_sample_raises(tmp_path):
    model, x_path, _ = _rows_model(tmp_path)
    with model:
        step = pms.AustereMH()
    _write_through_memmap(x_path)
    with pytest.raises(DataFileChangedError, match=r"AustereMH: the data file .*X\.npy.* "
                       r"since the step was built.*open it again.*build the model and "
                       r"the step again"):
        _sample(model, step)


def test_changed_file_error_is_a_value_error_named_at_package_level(tmp_path):
    model, x_path, _ = _rows_model(tmp_path)
    with model:
        step = pms.BarkerMinibatch()
    with open(x_path, "r+b") as f:  # an ordinary write to the file
        f.seek(-8, os.SEEK_END)
        f.write(np.float64(7.0).tobytes())
    with pytest.raises(pms.DataFileChangedError, match="was written to") as err:
        _sample(model, step)
    assert isinstance(err.value, ValueError)
    assert err.value.path == str(x_path) and "constant" in err.value.variable


def test_file_written_during_sampling_raises_at_the_next_draw(tmp_path):
    model, x_path, _ = _rows_model(tmp_path)
    with model:
        step = pms.AustereMH()
    seen = []

    def write_at_draw_20(trace, draw):
        seen.append(draw.draw_idx)
        if len(seen) == 20:
            _write_through_memmap(x_path)

    with pytest.raises(DataFileChangedError, match=r"X\.npy"):
        _sample(model, step, callback=write_at_draw_20)
    assert len(seen) == 20  # not one more draw on the changed file


def test_memmap_passed_directly_is_watched(tmp_path):
    """Covariates given as a plain numpy.memmap (no pms.out_of_core.rows) are watched
    too: ScalableMH used to stop with an unexplained BoundViolationError, or not at all."""
    x_path, y_path = _files(tmp_path)
    model = _model(np.load(x_path, mmap_mode="r"), np.load(y_path))
    with model:
        step = pms.ScalableMH()
    _write_through_memmap(x_path)
    with pytest.raises(DataFileChangedError, match=r"ScalableMH: the data file .*X\.npy"):
        _sample(model, step)
    assert step._data_files.paths == [str(x_path)]  # y, in memory, is not watched


def test_file_replaced_under_the_same_name_raises(tmp_path):
    model, _, y_path = _rows_model(tmp_path)
    with model:
        step = pms.SGLD()
    y = np.load(y_path)
    os.replace(_save(tmp_path / "new.npy", 1 - y), y_path)
    with pytest.raises(DataFileChangedError, match=r"y\.npy.*observed 'y'.*replaced"):
        _sample(model, step)


def _save(path, arr):
    np.save(path, arr)
    return path


def test_write_that_keeps_the_time_stamp_is_caught_by_the_digest(tmp_path):
    """A write that leaves size and modification time as they were (the time stamp's
    resolution, or os.utime) is caught when the chain starts, by the digest."""
    model, x_path, _ = _rows_model(tmp_path)
    with model:
        step = pms.AustereMH()
    st = os.stat(x_path)
    _write_through_memmap(x_path)
    os.utime(x_path, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(DataFileChangedError, match="its contents changed"):
        _sample(model, step)


def test_recorded_identity_survives_pickling_to_a_worker(tmp_path):
    """What pm.sample does for spawn / forkserver workers: the unpickled step maps the
    file again and still checks it against the identity recorded at construction."""
    model, x_path, y_path = _rows_model(tmp_path)
    with model:
        step = pms.AustereMH()
    blob = cloudpickle.dumps(step)
    copy = pickle.loads(blob)
    assert sum(_memmap.is_file_backed(a) for a in copy.engine.data_arrays()) == 2
    copy.set_rng(np.random.default_rng(0))  # unchanged: the chain starts
    point = model.initial_point()
    point, _ = copy.step(point)
    _write_through_memmap(x_path)
    with pytest.raises(DataFileChangedError, match=r"X\.npy"):
        copy.step(point)  # during sampling
    with pytest.raises(DataFileChangedError, match=r"X\.npy"):
        pickle.loads(blob).set_rng(np.random.default_rng(0))  # at a chain's start
    assert copy._data_files.paths == step._data_files.paths == [str(x_path), str(y_path)]


def test_error_from_a_worker_pickles_as_itself():
    err = DataFileChangedError("the file changed", path="/d/X.npy", variable="'X'")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is DataFileChangedError and str(back) == str(err)
    assert (back.path, back.variable) == ("/d/X.npy", "'X'")


_TRUNCATE_CHILD = """
import os, sys, warnings
import numpy as np, pymc as pm, pymc_subsample as pms
warnings.simplefilter("ignore")
x_path, y_path, _ = pms.datasets.write_logistic(sys.argv[1], {n}, {d}, seed=4,
                                                dtype="float64")
X, y = pms.out_of_core.rows(x_path), pms.out_of_core.rows(y_path, dtype="int64")
with pm.Model() as model:
    beta = pm.Normal("beta", 0.0, 1.0, shape={d})
    pm.Bernoulli("y", logit_p=pm.math.dot(X, beta), observed=y)
    step = pms.AustereMH(batch_size=500)
n_draws = []
def truncate(trace, draw):
    n_draws.append(1)
    if len(n_draws) == 10:
        os.truncate(x_path, 256)  # header and a few rows remain
with model:
    pm.sample(draws=100, tune=0, chains=1, cores=1, step=step, random_seed=1,
              progressbar=False, compute_convergence_checks=False, callback=truncate)
print("sampled on a truncated file")
"""


@pytest.mark.skipif(sys.platform == "win32", reason="SIGBUS and truncating a mapped file")
def test_file_truncated_during_sampling_raises_instead_of_sigbus(tmp_path):
    """In a child process, so that a SIGBUS would only kill the child: it must end with
    a Python traceback naming the file, not a signal."""
    script = _TRUNCATE_CHILD.format(n=N, d=D)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode >= 0, (
        f"the child was killed by {signal.Signals(-proc.returncode).name}: {proc.stderr}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" in proc.stderr
    assert "DataFileChangedError" in proc.stderr
    assert f"{tmp_path / 'X.npy'}' (the model's data" in proc.stderr
    assert "shrank to 256 bytes" in proc.stderr


def test_watcher_skips_arrays_in_memory_and_shares_one_entry_per_file(tmp_path):
    path = _save(tmp_path / "a.npy", np.arange(40.0).reshape(20, 2))
    mm = np.load(path, mmap_mode="r")
    watch = DataFileWatcher([("a", mm), ("a0", mm[:, 0]), ("b", np.ones(3))], owner="T")
    assert len(watch) == 1 and watch.entries[0][0] == ("a", "a0")
    watch.check()
    os.truncate(path, 200)
    with pytest.raises(DataFileChangedError, match=r"T: the data file .*a\.npy.*'a', 'a0'.*"
                       r"shrank to 200 bytes"):
        watch.check_stat()
    os.remove(path)
    with pytest.raises(DataFileChangedError, match="deleted or moved"):
        watch.check()


def test_bound_violation_names_changed_data_as_a_likely_cause():
    msg = str(BoundViolationError(3, 2.0, 0.5, 1.5))
    assert "Likely causes" in msg
    assert "the data changed after the step was built" in msg
    assert "data file written, truncated or replaced" in msg
    assert "invalid" in msg  # the old explanation stays


# ------------------------------------------------------------------ sources of rows
def test_rows_on_a_directory_that_is_not_a_zarr_store(tmp_path):
    pytest.importorskip("zarr")
    (tmp_path / "data").mkdir()
    with pytest.raises(ValueError, match=r"'.*data' is a directory that is neither an \.npy "
                       r"file nor a Zarr array store.*Accepted sources: a path to an \.npy"):
        pms.out_of_core.rows(tmp_path / "data")


def test_rows_on_a_zarr_group_names_its_arrays(tmp_path):
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    group.create_array("X", shape=(10, 2), dtype="float64")
    with pytest.raises(ValueError, match=r"is a Zarr group, not an array.*arrays: X"):
        pms.out_of_core.open_rows(tmp_path / "g.zarr")


def test_rows_on_a_csv_file(tmp_path):
    pytest.importorskip("zarr")
    path = tmp_path / "X.csv"
    np.savetxt(path, np.ones((5, 2)), delimiter=",")
    with pytest.raises(ValueError, match=r"X\.csv' is a file that is neither an \.npy file "
                       r"nor a Zarr array store.*Accepted sources.*numpy\.save"):
        pms.out_of_core.rows(path)


def test_truncated_npy_names_the_path(tmp_path):
    path = _save(tmp_path / "X.npy", np.ones((100, 3)))
    os.truncate(path, os.path.getsize(path) - 100)
    with pytest.raises(ValueError, match=r"'.*X\.npy' is truncated or damaged: its header "
                       r"describes an array of shape \(100, 3\).*holds 2,428 bytes"):
        pms.out_of_core.rows(path)


def test_npy_with_a_damaged_header_names_the_path(tmp_path):
    path = _save(tmp_path / "X.npy", np.ones((100, 3)))
    os.truncate(path, 40)  # inside the header
    with pytest.raises(ValueError, match=r"'.*X\.npy' is truncated or damaged"):
        pms.out_of_core.open_rows(path)


# ------------------------------------------------------------------ passes on a client
@pytest.fixture
def closed_client():
    distributed = pytest.importorskip("distributed")
    client = distributed.Client(processes=False, n_workers=1, threads_per_worker=1,
                                dashboard_address=None)
    client.close()
    return client


def test_closed_client_is_refused_by_configure(closed_client):
    with pytest.raises(ValueError, match=r"passes.configure: the dask.distributed client "
                       r".* is closed .*Configure an open one"):
        pms.passes.configure(client=closed_client)
    assert pms.passes.current()["client"] is None  # nothing was configured


def test_client_closed_after_configure_raises_at_the_pass():
    distributed = pytest.importorskip("distributed")
    client = distributed.Client(processes=False, n_workers=1, threads_per_worker=1,
                                dashboard_address=None)
    with pms.passes.configure(client=client):
        client.close()
        with pytest.raises(RuntimeError, match=r"passes: the dask.distributed client .* is "
                           r"closed and cannot run the passes"):
            pms.passes.map_chunks(lambda s, e: e - s, [(0, 2), (2, 4)],
                                  lambda s, e, r: None)


# ------------------------------------------------------------------ diagnostics
@pytest.fixture(scope="module")
def usage_idata():
    rng = np.random.default_rng(0)
    return from_dict(posterior={"a": rng.normal(size=(1, 20))},
                        sample_stats={"data_used": rng.integers(10, 20, size=(1, 20)),
                                      "accepted": rng.random((1, 20)) < 0.5})


@pytest.mark.parametrize("n_rows", [-5, 0, 2.5, True, "1000"])
def test_data_usage_summary_refuses_a_bad_n_rows(usage_idata, n_rows):
    from pymc_subsample.diagnostics import data_usage_summary

    with pytest.raises(ValueError, match=r"n_rows must be the number of data rows N, a "
                       r"positive integer"):
        data_usage_summary(usage_idata, n_rows=n_rows)


@pytest.mark.parametrize("quantiles", [(5, 50), (-0.1,), (float("nan"),), "q50"])
def test_data_usage_summary_refuses_bad_quantiles(usage_idata, quantiles):
    from pymc_subsample.diagnostics import data_usage_summary

    with pytest.raises(ValueError, match=r"quantiles must"):
        data_usage_summary(usage_idata, quantiles=quantiles)


def test_data_usage_summary_still_accepts_good_arguments(usage_idata):
    from pymc_subsample.diagnostics import data_usage_summary

    table = data_usage_summary(usage_idata, n_rows=np.int64(1000), quantiles=(0.5,))
    assert list(table.columns[:2]) == ["mean", "q50"]
    assert 0 < table.loc["all", "mean_fraction"] < 1


@pytest.mark.slow  # two spawned workers importing PyMC
def test_file_changed_before_sampling_is_caught_in_spawned_workers(tmp_path):
    """Under ``mp_ctx="spawn"`` the step reaches each worker pickled, with its files as
    references: the worker maps the changed file again, and its check at the chain's
    start refuses it."""
    model, x_path, _ = _rows_model(tmp_path)
    with model:
        step = pms.AustereMH()
    _write_through_memmap(x_path)
    with model, pytest.raises(Exception) as err:
        pm.sample(draws=5, tune=5, chains=2, cores=2, step=step, mp_ctx="spawn",
                  random_seed=1, progressbar=False, compute_convergence_checks=False)
    chain, texts = err.value, []
    while chain is not None:
        texts.append(f"{type(chain).__name__}: {chain}")
        chain = chain.__cause__ or chain.__context__
    text = "\n".join(texts)
    assert "DataFileChangedError" in text or isinstance(err.value, DataFileChangedError), text
    assert f"the data file '{x_path}'" in text, text


def test_a_big_endian_npy_names_the_file_and_the_fix(tmp_path):
    """A ``.npy`` of another byte order gave PyTensor's ``TypeError: Unsupported dtype
    >f8``; now the message names the file and ``dtype=``, which converts it."""
    path = tmp_path / "x.npy"
    np.save(path, np.arange(12.0).reshape(6, 2).astype(">f8"))
    with pytest.raises(ValueError, match=r"x\.npy holds >f8 values.*dtype='float64'"):
        pms.out_of_core.rows(str(path))
    converted = pms.out_of_core.rows(str(path), dtype="float64", path=str(tmp_path / "n.npy"))
    np.testing.assert_array_equal(converted.data, np.arange(12.0).reshape(6, 2))
    assert converted.data.dtype.isnative
