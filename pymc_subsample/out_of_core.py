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
- :class:`DataFileWatcher` records the identity of each data file when a step is built
  (:func:`file_identity`: size, modification time, inode, a digest of spread blocks) and
  checks it when a chain starts and before every draw; a file written, replaced or
  truncated since raises :class:`DataFileChangedError` instead of a wrong posterior or
  a ``SIGBUS``.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import warnings
from dataclasses import dataclass

import numpy as np

__all__ = ["open_rows", "rows", "observed", "keep_observations_on_disk",
           "DataFileChangedError"]

_CHUNK = 1 << 20


def is_zarr(obj) -> bool:
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

    Raises
    ------
    FileNotFoundError
        No file or directory at the path.
    ValueError
        An ``.npy`` file shorter than its header says (truncated) or with a damaged
        header; a path that is neither an ``.npy`` file nor a Zarr array (a CSV file, a
        directory without Zarr metadata, a Zarr group: its arrays are named).
    TypeError
        A source of another type.
    """
    arr = source
    if isinstance(source, (str, os.PathLike)):
        p = os.fspath(source)
        if not os.path.exists(p):
            raise FileNotFoundError(f"open_rows: no such file or store: {p!r}.")
        if p.endswith(".npy") or (os.path.isfile(p) and _has_npy_magic(p)):
            arr = _load_npy(p)
        else:
            arr = _open_zarr(p)
    if not (isinstance(arr, np.ndarray) or _is_sliceable(arr)):
        raise TypeError(
            "open_rows: source must be a path to an .npy file or a Zarr store, a NumPy "
            f"array or memmap, or a Zarr array; got {type(source).__name__}.")
    if len(arr.shape) == 0:
        raise ValueError("open_rows: the data need a leading row axis; got a scalar.")
    if dtype is None and not np.dtype(arr.dtype).isnative:
        where = getattr(arr, "filename", None) or (
            os.fspath(source) if isinstance(source, (str, os.PathLike)) else "the data")
        native = np.dtype(arr.dtype).newbyteorder("=")
        raise ValueError(
            f"open_rows: {where} holds {np.dtype(arr.dtype).str} values (byte order not "
            "this machine's), which PyTensor cannot compute with. Pass "
            f"dtype={native.name!r} to convert them chunk by chunk into a new .npy file "
            "(path= chooses where).")
    want = np.dtype(arr.dtype if dtype is None else dtype)
    if isinstance(arr, np.memmap) and arr.dtype == want and getattr(arr, "filename", None):
        return arr
    return _copy_to_npy(arr, want, path, chunk)


#: what :func:`open_rows` accepts, for the messages
_ACCEPTED = ("a path to an .npy file, a numpy.memmap or NumPy array, a Zarr array, or the "
             "path of a Zarr array store (a directory with a Zarr array's metadata)")


def _has_npy_magic(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(6) == b"\x93NUMPY"


def _load_npy(path: str) -> np.memmap:
    """``np.load(path, mmap_mode="r")``, with errors that name the file: a header that
    does not parse, or a file shorter than its header says (truncated)."""
    try:
        return np.load(path, mmap_mode="r")
    except (ValueError, OSError, EOFError) as err:
        detail = _npy_size_problem(path)
        raise ValueError(
            f"open_rows: {path!r} is truncated or damaged: "
            f"{detail or f'NumPy cannot map it ({type(err).__name__}: {err})'}. Write the "
            f"file again with numpy.save (or give another source: {_ACCEPTED}).") from err


def _npy_size_problem(path: str) -> str | None:
    """What is wrong with the size of an ``.npy`` file, from its header (None when the
    header does not parse or the size is right)."""
    fmt = np.lib.format
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(f)
            offset = f.tell()
    except Exception:  # an unknown version or a damaged header: NumPy's message says it
        return None
    need = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    size = os.path.getsize(path)
    if size >= need:
        return None
    return (f"its header describes an array of shape {tuple(shape)} and dtype {dtype} "
            f"({need:,} bytes with the header) but the file holds {size:,} bytes")


def _open_zarr(path: str):
    """The Zarr array stored at ``path``, or an error saying what ``path`` is and what
    :func:`open_rows` accepts."""
    kind = "directory" if os.path.isdir(path) else "file"
    ext = os.path.splitext(path)[1].lower()
    hint = ""
    if ext in (".csv", ".tsv", ".txt", ".parquet", ".feather", ".h5", ".hdf5"):
        hint = (f" To use a {ext} file, read it once (e.g. pandas or numpy.loadtxt) and "
                "save the rows with numpy.save, or write them into a Zarr array.")
    try:
        import zarr
    except ImportError as err:  # pragma: no cover - zarr is in the [dask] extra
        raise ImportError(
            f"open_rows: {path!r} is not an .npy file; reading a Zarr store needs "
            "zarr: pip install 'pymc-subsample[dask]'.") from err
    try:
        return zarr.open_array(path, mode="r")
    except Exception as err:  # zarr's errors differ between versions
        arrays = []
        if kind == "directory":
            try:
                group = zarr.open_group(path, mode="r")
                arrays = sorted(name for name, _ in group.arrays())
            except Exception:
                arrays = []
        if arrays:
            raise ValueError(
                f"open_rows: {path!r} is a Zarr group, not an array; give the path of one "
                f"of its arrays, e.g. {os.path.join(path, arrays[0])!r} (arrays: "
                f"{', '.join(arrays)}).") from err
        raise ValueError(
            f"open_rows: {path!r} is a {kind} that is neither an .npy file nor a Zarr "
            f"array store ({type(err).__name__}: {err}). Accepted sources: {_ACCEPTED}."
            f"{hint}") from err


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


# ---------------------------------------------------------------------------------------
# Files that change on disk after a step was built
# ---------------------------------------------------------------------------------------


class DataFileChangedError(ValueError):
    """A data file changed on disk (written, truncated, replaced or deleted) after a step
    that reads it was built.

    A step computes sums, bounds and a Gaussian fit from the data when it is built and
    reads rows from the file while it samples; on a changed file it would sample a wrong
    posterior, or crash on rows past the end of a truncated file. Rebuild the data
    (:func:`rows`) and the step once the file is final.

    Attributes
    ----------
    path : str or None
        The file.
    variable : str or None
        The model's data that the file holds (the names the step gives its row data).
    """

    def __init__(self, message: str, *, path: str | None = None, variable: str | None = None):
        super().__init__(message)
        self.path = path
        self.variable = variable


@dataclass(frozen=True)
class FileIdentity:
    """What a memory-mapped file looked like: enough to tell that it changed.

    Attributes
    ----------
    path : str
    size, mtime_ns, inode : int
        From ``os.stat``: size in bytes, modification time in nanoseconds, inode (a file
        replaced under the same name has another).
    start, stop : int
        The bytes ``[start, stop)`` that the mapped arrays read (the ``.npy`` header
        excluded).
    digest : str
        A digest of :data:`DIGEST_BLOCKS` blocks of bytes spread evenly over
        ``[start, stop)`` (first and last included): O(1) in the file's size.
    """

    path: str
    size: int
    mtime_ns: int
    inode: int
    start: int
    stop: int
    digest: str

    @property
    def stat_key(self) -> tuple[int, int, int]:
        """``(size, mtime_ns, inode)``, compared with ``os.stat`` during sampling."""
        return (self.size, self.mtime_ns, self.inode)


#: blocks of bytes read for a file's digest, and their size
DIGEST_BLOCKS, DIGEST_BLOCK_BYTES = 64, 256


def _file_digest(path: str, start: int, stop: int) -> str:
    """A digest of :data:`DIGEST_BLOCKS` blocks spread over bytes ``[start, stop)`` of
    ``path``, read with ``os.pread`` (not through a memory map: a read past the end of
    the file returns fewer bytes instead of raising ``SIGBUS``)."""
    h = hashlib.blake2b(digest_size=16)
    block = max(1, min(DIGEST_BLOCK_BYTES, stop - start))
    offsets = np.unique(np.linspace(start, max(start, stop - block), DIGEST_BLOCKS)
                        .astype(np.int64))
    fd = os.open(path, os.O_RDONLY)
    try:
        for off in offsets:
            h.update(os.pread(fd, block, int(off)))
    finally:
        os.close(fd)
    return h.hexdigest()


def file_identity(arr) -> FileIdentity | None:
    """The identity of the file a memory-mapped array reads, now.

    Parameters
    ----------
    arr : object
        A ``numpy.memmap`` (from ``np.load(path, mmap_mode=...)``, :func:`open_rows` or
        :func:`rows`' ``.data``), or a view of one, in any map mode.

    Returns
    -------
    FileIdentity or None
        None for an array not read from a named file (in memory, not an array, or a
        file that no longer exists under its name).
    """
    from ._memmap import mapped_range

    where = mapped_range(arr)
    if where is None:
        return None
    path, start, stop = where
    try:
        st = os.stat(path)
    except OSError:  # the file is gone (an unlinked temporary file): nothing to watch
        return None
    return FileIdentity(path, st.st_size, st.st_mtime_ns, st.st_ino, start, stop,
                        _file_digest(path, start, stop))


class DataFileWatcher:
    """Tells whether the files behind a step's row data changed since it was built.

    Built with the step (``SubsampleStep._remember_data``) from the engine's row-data
    arrays; arrays on the same file share one entry. Holds paths and numbers only, so it
    pickles with the step to spawn / forkserver workers and checks there the files that
    the worker maps again.

    - :meth:`check_stat`, before every draw reads rows: one ``os.stat`` per file (about
      3 us), compared on size, modification time (ns) and inode.
    - :meth:`check`, when a chain starts: the same, plus the digest of spread blocks
      (catches writes that left the time stamp alone, e.g. within its resolution).

    Parameters
    ----------
    named_arrays : iterable of (str, array)
        The step's row data: ``(name, array)``; arrays not read from a file are skipped.
    owner : str
        Who reads the files (the step's class name), for the messages.

    Notes
    -----
    ``SIGBUS`` (a read through a memory map past the end of a file that shrank) cannot
    be turned into a Python exception safely: a Python signal handler only runs after
    the faulting instruction, which repeats. The check before each draw is the defence,
    so a file truncated between two draws raises :class:`DataFileChangedError`; a
    truncation that races a single draw (after its check, before its reads) can still
    end the process with ``SIGBUS``. The rows are not copied for safety: do not write to
    a data file while a step samples from it.
    """

    def __init__(self, named_arrays, owner: str = "the step"):
        self.owner = owner
        entries: dict[str, list] = {}
        for name, arr in named_arrays:
            ident = file_identity(arr)
            if ident is None:
                continue
            entry = entries.setdefault(ident.path, [[], ident])
            if name not in entry[0]:
                entry[0].append(name)
            old = entry[1]
            if (ident.start, ident.stop) != (old.start, old.stop):  # the union of the spans
                start, stop = min(ident.start, old.start), max(ident.stop, old.stop)
                entry[1] = FileIdentity(old.path, old.size, old.mtime_ns, old.inode, start,
                                        stop, _file_digest(old.path, start, stop))
        #: ``[(names, FileIdentity)]``, one per file
        self.entries = [(tuple(names), ident) for names, ident in entries.values()]
        self._paths = [(ident.path, ident.stat_key) for _, ident in self.entries]

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def paths(self) -> list[str]:
        """The files watched."""
        return [p for p, _ in self._paths]

    def check_stat(self) -> None:
        """Raise :class:`DataFileChangedError` if a file's size, modification time or
        inode changed, or it is gone: one ``os.stat`` per file, O(1) in its size.

        Raises
        ------
        DataFileChangedError
        """
        for k, (path, key) in enumerate(self._paths):
            try:
                st = os.stat(path)
            except OSError:
                self._raise(k, None)
            if (st.st_size, st.st_mtime_ns, st.st_ino) != key:
                self._raise(k, st)

    def check(self) -> None:
        """:meth:`check_stat`, then the digest of each file's spread blocks.

        Raises
        ------
        DataFileChangedError
        """
        self.check_stat()
        for k, (_, ident) in enumerate(self.entries):
            try:
                digest = _file_digest(ident.path, ident.start, ident.stop)
            except OSError:
                self._raise(k, None)
            if digest != ident.digest:
                self._raise(k, os.stat(ident.path), "its contents changed (a digest of "
                            "rows spread over the file differs)")

    def _raise(self, k: int, st, reason: str | None = None):
        names, ident = self.entries[k]
        what = ", ".join(repr(n) for n in names)
        raise DataFileChangedError(
            f"{self.owner}: the data file {ident.path!r} (the model's data {what}) "
            f"{reason or self._reason(st, ident)} since the step was built. The step "
            "computed its sums, bounds and Gaussian fit from the file as it was and reads "
            "rows from it while sampling, so it would sample a wrong posterior: once the "
            "file is final, open it again (pms.out_of_core.rows(path)) and build the model "
            "and the step again; do not write to a data file while a step uses it.",
            path=ident.path, variable=what)

    @staticmethod
    def _reason(st, ident: FileIdentity) -> str:
        """What changed, from the file's ``os.stat`` now (None: it is gone)."""
        if st is None:
            return "was deleted or moved"
        if st.st_size < ident.stop:
            return (f"shrank to {st.st_size:,} bytes (truncated?) while the data need "
                    f"{ident.stop:,}; reading its rows would crash the process (SIGBUS)")
        if st.st_ino != ident.inode:
            return "was replaced by another file of the same name"
        if st.st_size != ident.size:
            return f"changed size ({ident.size:,} -> {st.st_size:,} bytes)"
        return "was written to (its modification time changed)"
