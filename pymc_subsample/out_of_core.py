"""Data that stay on disk: memory-mapped ``.npy`` files, ``numpy.memmap`` and Zarr arrays.

A subsampling step reads a few rows per draw, so the covariates and observations can
stay in a file that the operating system pages in on demand. Covariates can be passed to
PyMC as a ``numpy.memmap`` directly (``pm.math.dot(X, beta)`` keeps the array as it is).
Observations cannot: PyMC stores ``observed=`` arrays with ``astype``, which makes an
in-memory copy of all ``N`` rows. :func:`observed` hands PyMC the file instead.

- :func:`open_rows` turns a path to an ``.npy`` file, a ``numpy.memmap`` or a Zarr array
  (or the path of a Zarr store) into a read-only ``numpy.memmap``. A Zarr array
  (compressed chunks cannot be mapped) and an array in another dtype are copied chunk
  by chunk into an ``.npy`` file on disk, never whole into memory.
- :func:`observed` wraps such an array as a PyTensor constant for ``observed=``, so PyMC
  does not copy it, and the steps read rows from the file. A step built on the model
  also points PyMC's record of the observations at the file
  (:func:`keep_observations_on_disk`), so ``observed_data`` in the returned
  ``InferenceData`` / ``DataTree`` is the memory map, not a copy.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np

__all__ = ["open_rows", "rows", "observed", "keep_observations_on_disk"]

_CHUNK = 1 << 20


def _is_zarr(obj) -> bool:
    return type(obj).__module__.split(".")[0] == "zarr"


def _is_sliceable(obj) -> bool:
    """An array-like with ``shape``, ``dtype`` and row slicing (a Zarr array, or a row
    range of one): its rows can be copied chunk by chunk."""
    return all(hasattr(obj, a) for a in ("shape", "dtype", "__getitem__"))


def open_rows(source, *, dtype=None, path=None, chunk: int = _CHUNK) -> np.memmap:
    """A read-only memory map of row-indexed data.

    Parameters
    ----------
    source : str, os.PathLike, numpy.ndarray, numpy.memmap or zarr.Array
        An ``.npy`` file (opened with ``mmap_mode="r"``), a Zarr store's path (``.zarr``)
        or array, or an array already in memory or mapped.
    dtype : numpy dtype, optional
        The dtype the rows must have (for observations: the observed variable's, e.g.
        ``int64`` for ``pm.Bernoulli``, ``float64`` for ``pm.Normal``). Data in another
        dtype are converted chunk by chunk into a new ``.npy`` file.
    path : str, optional
        Where a converted copy is written (default: a new file in a temporary
        directory; it is not deleted).
    chunk : int
        Rows per chunk of a conversion.

    Returns
    -------
    numpy.memmap
        Read-only, file-backed: rows are read from disk when used.
    """
    arr = source
    if isinstance(source, (str, os.PathLike)):
        p = os.fspath(source)
        if not os.path.exists(p):
            raise FileNotFoundError(f"open_rows: no such file or store: {p!r}.")
        if p.endswith(".npy"):
            arr = np.load(p, mmap_mode="r")
        else:
            try:
                import zarr
            except ImportError as err:  # pragma: no cover - zarr is in the [dask] extra
                raise ImportError(
                    f"open_rows: {p!r} is not an .npy file; reading a Zarr store needs "
                    "zarr: pip install 'pymc-subsample[dask]'.") from err
            arr = zarr.open_array(p, mode="r")
    if not (isinstance(arr, np.ndarray) or _is_sliceable(arr)):
        raise TypeError(
            "open_rows: source must be a path to an .npy file or a Zarr store, a NumPy "
            f"array or memmap, or a Zarr array; got {type(source).__name__}.")
    if len(arr.shape) == 0:
        raise ValueError("open_rows: the data need a leading row axis; got a scalar.")
    want = np.dtype(arr.dtype if dtype is None else dtype)
    if isinstance(arr, np.memmap) and arr.dtype == want and getattr(arr, "filename", None):
        return arr
    return _copy_to_npy(arr, want, path, chunk)


def _copy_to_npy(arr, dtype, path, chunk) -> np.memmap:
    """Write ``arr`` (any array with slicing) as ``dtype`` into an ``.npy`` file, ``chunk``
    rows at a time, and map it read-only."""
    if path is None:
        path = os.path.join(tempfile.mkdtemp(prefix="pms-rows-"), "rows.npy")
    out = np.lib.format.open_memmap(path, mode="w+", dtype=dtype, shape=tuple(arr.shape))
    n = int(arr.shape[0])
    for s in range(0, n, int(chunk)):
        e = min(s + int(chunk), n)
        block = np.asarray(arr[s:e])
        if np.issubdtype(dtype, np.integer) and not np.issubdtype(block.dtype, np.integer):
            if not np.all(np.isfinite(block)) or np.any(block != np.round(block)):
                raise ValueError(
                    f"open_rows: rows {s}:{e} hold non-integer values; cannot store them "
                    f"as {dtype}.")
        out[s:e] = block
    out.flush()
    del out
    return np.load(path, mmap_mode="r")


def _rows_constant_class():
    """:class:`RowsConstant`, defined on first use (PyTensor is imported lazily)."""
    global _RowsConstantClass
    if _RowsConstantClass is not None:
        return _RowsConstantClass
    from pytensor.tensor.variable import TensorConstant

    from ._memmap import file_backing

    class _RowsConstant(TensorConstant):
        """A PyTensor constant over a file-backed array, compared by the file's identity.

        PyTensor compares constants (to merge equal ones) by a signature that sums the
        data and keeps a NaN mask of one byte per element for as long as the graph lives
        (1 GB for 10^8 rows of 10 features), and some rewrites test whether all elements
        are equal. This constant's signature is the file's name, modification time,
        byte range, dtype, shape and strides instead, so nothing reads the rows but the
        steps.
        """

        def signature(self):
            ref = file_backing(self.data)
            if ref is None:  # not file-backed (any more): the usual comparison
                return super().signature()
            stat = os.stat(ref[0])
            return (_RowsConstantClass, self.type, ref[0], stat.st_mtime_ns, stat.st_size,
                    ref[2], ref[3], ref[4], str(ref[5]), ref[6], ref[7])

        @property
        def unique_value(self):
            return None

    _RowsConstant.__name__ = _RowsConstant.__qualname__ = "RowsConstant"
    _RowsConstant.__module__ = __name__
    _RowsConstantClass = _RowsConstant
    return _RowsConstantClass


# the constant class of :func:`rows`, created on first use (PyTensor is imported lazily);
# ``pymc_subsample.out_of_core.RowsConstant`` (pickle's lookup) creates it
_RowsConstantClass = None


def __getattr__(name):  # ``from pymc_subsample.out_of_core import RowsConstant``
    if name == "RowsConstant":
        return _rows_constant_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def rows(source, *, dtype=None, path=None, check_finite: bool = True):
    """Row-indexed data for a PyMC model, kept on disk: covariates or ``observed=``.

    ``pm.math.dot(pms.out_of_core.rows("X.npy"), beta)`` and
    ``pm.Bernoulli("y", ..., observed=pms.out_of_core.rows("y.npy", dtype="int64"))``.
    PyMC receives a PyTensor constant over the memory map (:func:`open_rows`), so

    - it does not copy observations (it would copy an ``observed=`` array with
      ``astype``), and its dtype conversions stay symbolic, applied to the rows a step
      reads;
    - PyTensor does not scan the data to compare constants, nor keep the one-byte-per-
      element NaN mask it keeps for a plain array constant (:class:`RowsConstant`);
    - the step methods read rows from the file, and with ``dtype`` equal to the observed
      variable's, ``observed_data`` in the result is the file too
      (:func:`keep_observations_on_disk`).

    Parameters
    ----------
    source, dtype, path
        As for :func:`open_rows`. For ``observed=`` give the observed variable's dtype
        (``int64`` for discrete distributions, ``float64`` for continuous ones with
        PyMC's default ``floatX``).
    check_finite : bool, default True
        Refuse NaN or infinite values (one chunked pass): PyMC would treat NaN
        observations as missing values to impute, which the steps do not support.

    Returns
    -------
    RowsConstant
        A ``pytensor.tensor.TensorConstant``.
    """
    from pytensor.tensor.type import TensorType

    arr = open_rows(source, dtype=dtype, path=path)
    if check_finite and np.issubdtype(arr.dtype, np.floating):
        n = int(arr.shape[0])
        for s in range(0, n, _CHUNK):
            bad = ~np.isfinite(arr[s : s + _CHUNK])
            if bad.any():
                i = s + int(np.flatnonzero(bad.reshape(bad.shape[0], -1).any(axis=1))[0])
                raise ValueError(
                    f"rows: row {i} of {getattr(arr, 'filename', 'the data')} holds a NaN or "
                    "infinite value; the steps need complete data (drop or fill such rows "
                    "first).")
    cls = _rows_constant_class()
    return cls(TensorType(arr.dtype, shape=(None,) * arr.ndim), arr)


def observed(source, *, dtype=None, path=None):
    """:func:`rows` under the name used for ``observed=``."""
    return rows(source, dtype=dtype, path=path)


def keep_observations_on_disk(model) -> list[str]:
    """Point PyMC's record of each observed variable's data at its file, where the data
    came from :func:`observed` and only passed through dtype casts.

    PyMC casts observations to its integer type and back (``int64 -> int32 -> int64``
    for discrete distributions), symbolically when they come from :func:`observed`;
    when the file already has the observed variable's dtype and every value survives
    the round trip (checked chunk by chunk), the casts are the identity and the model's
    observed value becomes the file's constant itself. Called by the step methods at
    construction; harmless to call again.

    Returns
    -------
    list of str
        The observed variables whose data now point at their file.

    Warns
    -----
    UserWarning
        For an observed variable whose file cannot stand in for PyMC's converted data:
        the file's dtype differs from the variable's, or some values change under the
        conversions.
    """
    from pytensor.graph.basic import Constant
    from pytensor.scalar import Cast
    from pytensor.tensor.elemwise import Elemwise

    from ._memmap import is_file_backed

    changed = []
    for rv in model.observed_RVs:
        value = model.rvs_to_values.get(rv)
        casts, v = [], value
        while (v is not None and v.owner is not None and isinstance(v.owner.op, Elemwise)
               and isinstance(v.owner.op.scalar_op, Cast)):
            casts.append(v.type.dtype)
            v = v.owner.inputs[0]
        if not casts or not isinstance(v, Constant) or not is_file_backed(v.data):
            continue
        data = v.data  # elementwise casts keep the shape: only the dtype can differ
        name = getattr(data, "filename", "the file")
        if data.dtype != rv.type.dtype:
            warnings.warn(
                f"observed '{rv.name}': {name} holds {data.dtype} but '{rv.name}' is "
                f"{rv.type.dtype}, so PyMC converts the rows as they are read, and copies all "
                "of them into memory when it stores observed_data. Open the file with "
                f"pms.out_of_core.rows(path, dtype='{rv.type.dtype}') (converted chunk by "
                "chunk into a new file).",
                UserWarning, stacklevel=3)
            continue
        if not _casts_are_identity(data, casts):
            warnings.warn(
                f"observed '{rv.name}': some values in {name} change under PyMC's dtype "
                f"conversions ({' -> '.join([str(data.dtype)] + casts[::-1])}), e.g. counts "
                "beyond 2^31; PyMC's model uses the converted values. Check the data's "
                "range.", UserWarning, stacklevel=3)
            continue
        model.rvs_to_values[rv] = v
        rv.tag.observations = v
        changed.append(rv.name)
    return changed


def _casts_are_identity(data, dtypes) -> bool:
    """Whether casting ``data`` through ``dtypes`` in turn gives back its values."""
    n = int(data.shape[0])
    for s in range(0, n, _CHUNK):
        block = np.asarray(data[s : s + _CHUNK])
        back = block
        for dt in reversed(dtypes):
            back = back.astype(dt)
        if not np.array_equal(back.astype(block.dtype), block):
            return False
    return True
