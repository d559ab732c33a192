"""Out-of-core data stays out of core in PyMC's worker processes.

With ``mp_ctx="spawn"`` or ``"forkserver"`` ``pm.sample`` pickles the step for each worker.
A ``numpy.memmap`` would arrive there as an in-memory copy; the steps pickle file-backed
arrays by reference instead (:mod:`pymc_subsample._memmap`), so each worker maps the file.
"""

from __future__ import annotations

import os
import pickle
import sys

import cloudpickle
import numpy as np
import pytest

import pymc_subsample as pms
from pymc_subsample import _memmap
from pymc_subsample.testing import sample_stats
from tests.conftest import logistic_data, logistic_model, run_sample


class FileBackedProbe(pms.AustereMH):
    """AustereMH that reports, from inside the process that samples, how many of its
    row-indexed data arrays read from a file mapping, and the process id."""

    stats_dtypes_shapes = {
        **pms.AustereMH.stats_dtypes_shapes,
        "n_file_backed": (np.int64, []),
        "worker_pid": (np.int64, []),
    }

    def astep(self, q0):
        q, (stats,) = super().astep(q0)
        stats["n_file_backed"] = sum(_memmap.is_file_backed(a)
                                     for a in self.engine.data_arrays())
        stats["worker_pid"] = os.getpid()
        return q, [stats]


def _memmap_model(tmp_path, n=400, k=3, rows=False):
    """A logistic model on a memmapped X (``rows=True``: X and y through
    ``pms.out_of_core.rows``, both file-backed)."""
    X, y = logistic_data(np.random.default_rng(5), n, np.linspace(-1, 1, k))
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y)
    Xm = np.load(tmp_path / "X.npy", mmap_mode="r")
    assert isinstance(Xm, np.memmap)
    if rows:
        Xm, y = pms.out_of_core.rows(tmp_path / "X.npy"), pms.out_of_core.rows(tmp_path / "y.npy")
    return logistic_model(Xm, y, prior_sd=1, n_coef=k), X


def test_file_backed_arrays_pickle_by_reference(tmp_path):
    """Views (sliced, transposed, reversed) of read-only and read-write maps come back
    mapped, with the same values and type; in-memory and copy-on-write arrays by value."""
    data = np.arange(60.0).reshape(6, 10)
    np.save(tmp_path / "a.npy", data)
    for mode in ("r", "r+"):
        mm = np.load(tmp_path / "a.npy", mmap_mode=mode)
        for view in (mm, mm[2:5], mm[:, 3:7], mm.T, mm[::-2, ::3], mm[4]):
            back = pickle.loads(_memmap.dumps(view))
            assert _memmap.is_file_backed(back) and type(back) is type(view)
            assert back.shape == view.shape and back.dtype == view.dtype
            np.testing.assert_array_equal(back, view)
        if mode == "r+":  # a shared map: writes reach the other process's map
            back = pickle.loads(_memmap.dumps(mm[1:3]))
            mm[2, 0] = -1.0
            mm.flush()
            assert back[1, 0] == -1.0
    cow = np.load(tmp_path / "a.npy", mmap_mode="c")
    cow[0, 0] = 99.0  # changed in this process only: must travel by value
    back = pickle.loads(_memmap.dumps(cow))
    assert not _memmap.is_file_backed(back) and back[0, 0] == 99.0
    plain = pickle.loads(_memmap.dumps(np.ones(3)))
    assert not _memmap.is_file_backed(plain)


def test_a_pickled_step_keeps_its_memmap(tmp_path):
    """The step's cloudpickle round trip (what PyMC does for spawn workers) keeps the
    covariates file-backed, and the copy samples the same chain."""
    model, X = _memmap_model(tmp_path)
    with model:
        step = pms.AustereMH()
    assert sum(_memmap.is_file_backed(a) for a in step.engine.data_arrays()) == 1
    copy = cloudpickle.loads(cloudpickle.dumps(step))
    arrays = copy.engine.data_arrays()
    assert sum(_memmap.is_file_backed(a) for a in arrays) == 1
    assert any(isinstance(a, np.memmap) and np.array_equal(a, X) for a in arrays)
    draws = []
    for s in (step, copy):
        s.set_rng(np.random.default_rng(3))
        point, out = model.initial_point(), []
        for _ in range(20):
            point, _ = s.step(point)
            out.append(point["b"].copy())
        draws.append(np.array(out))
    np.testing.assert_array_equal(draws[0], draws[1])


@pytest.mark.slow  # two worker processes importing PyMC: about 30 s each
@pytest.mark.parametrize("mp_ctx, rows", [("spawn", False), ("forkserver", False),
                                          ("spawn", True)])
def test_memmapped_data_stays_memmapped_in_each_worker(tmp_path, mp_ctx, rows):
    if mp_ctx == "forkserver" and sys.platform == "win32":
        pytest.skip("no forkserver on Windows")
    model, _ = _memmap_model(tmp_path, rows=rows)
    with model:
        step = FileBackedProbe(batch_size=100)
    # the probe class lives in this test module: send it by value to the workers
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        idata = run_sample(model, step, draws=5, tune=5, chains=2, cores=2, seed=2,
                           mp_ctx=mp_ctx)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    stats = sample_stats(idata)
    pids = np.unique(stats["worker_pid"].values)
    assert len(pids) == 2 and os.getpid() not in pids  # sampled in two workers
    assert np.all(stats["n_file_backed"].values == (2 if rows else 1))
