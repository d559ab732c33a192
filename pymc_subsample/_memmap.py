"""Pickling that keeps file-backed arrays file-backed.

``pm.sample`` sends the step method to its worker processes with ``cloudpickle`` whenever
the start method is not ``fork`` (``mp_ctx="spawn"`` or ``"forkserver"``, and macOS by
default). NumPy pickles a ``numpy.memmap`` like any array: by value. Each worker would then
hold a private in-memory copy of the data, which defeats out-of-core covariates.

:func:`dumps` pickles with a ``cloudpickle`` pickler that writes every array backed by a
file mapping (a ``numpy.memmap`` or a view of one, opened read-only or shared read-write)
as a reference: file name, byte offset, dtype, shape and strides. :func:`loads` (plain
``pickle.loads``) maps the file again. Arrays share one reference per object, so an array
seen from several places (the model graph's constant, the engine's rows) is mapped once.

Copy-on-write maps (``mode="c"``) are pickled by value: the process may have changed
them without writing to the file.
"""

from __future__ import annotations

import io
import mmap
import os
import pickle

import cloudpickle
import numpy as np

__all__ = ["file_backing", "is_file_backed", "mapped_range", "dumps", "loads"]

#: file modes whose mapping is shared with the file (re-opened with these modes)
_SHARED_MODES = {"r": "r", "r+": "r+", "readwrite": "r+", "w+": "r+", "write": "r+",
                 "readonly": "r"}


def _address(arr: np.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def _root_map(arr: np.ndarray):
    """The array of ``arr``'s ``base`` chain that wraps the ``mmap.mmap`` (``numpy.memmap``
    makes one, with ``filename``, ``offset`` and ``mode``), or None."""
    a = arr
    while isinstance(a, np.ndarray):
        if isinstance(a.base, mmap.mmap):
            return a
        a = a.base
    return None


def file_backing(arr) -> tuple | None:
    """Where a file-backed array lives, or None for an in-memory (or copy-on-write) array.

    Parameters
    ----------
    arr : object
        Anything; only an array in a shared mapping of a file that still exists has a
        backing.

    Returns
    -------
    tuple or None
        ``(filename, mode, start, length, offset, dtype, shape, strides, cls)``: the byte
        range ``[start, start + length)`` of the file that the array spans (that of
        :func:`mapped_range`), the array's offset in that range, and what
        :func:`_reopen` needs to rebuild it.
    """
    span = _file_span(arr)
    if span is None:
        return None
    root, filename, start, lo = span
    mode = getattr(root, "mode", None)
    if mode not in _SHARED_MODES or not os.path.exists(filename):
        return None
    return (filename, _SHARED_MODES[mode], start, _span_length(arr), _address(arr) - lo,
            arr.dtype, arr.shape, arr.strides, type(arr))


def _span_length(arr: np.ndarray) -> int:
    """Bytes from the lowest to one past the highest byte of ``arr``'s elements."""
    length = arr.itemsize
    for n, s in zip(arr.shape, arr.strides):
        length += (n - 1) * abs(s)
    return length


def _file_span(arr):
    """``(root map, filename, first byte in the file, lowest address)`` of an array
    mapped from a named file, in any map mode, or None."""
    if not isinstance(arr, np.ndarray) or arr.size == 0:
        return None
    root = _root_map(arr)
    filename = None if root is None else getattr(root, "filename", None)
    if filename is None:
        return None
    lo = _address(arr)
    for n, s in zip(arr.shape, arr.strides):  # the lowest byte the array's elements use
        if s < 0:
            lo += (n - 1) * s
    return root, filename, int(getattr(root, "offset", 0) or 0) + (lo - _address(root)), lo


def mapped_range(arr) -> tuple[str, int, int] | None:
    """The file a memory-mapped array reads and the bytes it needs from it, in any map
    mode (copy-on-write ``"c"`` too: its unwritten pages still read the file).

    Parameters
    ----------
    arr : object
        Anything; an array mapped from a named file (or a view of one) has a range.

    Returns
    -------
    (filename, start, stop) : (str, int, int), or None
        The array's elements lie in bytes ``[start, stop)`` of ``filename``.
    """
    span = _file_span(arr)
    if span is None:
        return None
    _, filename, start, _ = span
    return os.fspath(filename), start, start + _span_length(arr)


def is_file_backed(arr) -> bool:
    """Whether ``arr`` reads its elements from a shared file mapping (not a copy)."""
    return _root_map(arr) is not None if isinstance(arr, np.ndarray) else False


def _reopen(filename, mode, start, length, offset, dtype, shape, strides, cls):
    """Map the bytes ``[start, start + length)`` of ``filename`` again and view them as
    the pickled array."""
    raw = np.memmap(filename, dtype=np.uint8, mode=mode, offset=start, shape=(length,))
    arr = np.ndarray(shape, dtype=dtype, buffer=raw, offset=offset, strides=strides)
    # a numpy.memmap stays one (its attributes come from ``raw``); a plain view stays plain
    return arr.view(np.memmap) if issubclass(cls, np.memmap) else arr


class _Pickler(cloudpickle.Pickler):
    """``cloudpickle``'s pickler, with file-backed arrays written as references.

    ``root`` (optional) is pickled from its ``__getstate__`` instead of its own
    ``__reduce_ex__``, so that an object whose ``__reduce_ex__`` calls :func:`dumps` on
    itself does not recurse.
    """

    def __init__(self, file, root=None):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self._root = root

    def reducer_override(self, obj):
        if obj is not None and obj is self._root:
            # what the default protocol-2 reduction does, minus the __reduce_ex__ call
            newargs = getattr(obj, "__getnewargs_ex__", None)
            args, kwargs = newargs() if newargs is not None else ((), {})
            return (_new, (type(obj), args, kwargs), obj.__getstate__())
        if isinstance(obj, np.ndarray):
            ref = file_backing(obj)
            if ref is not None:
                return (_reopen, ref)
        return super().reducer_override(obj)


def _new(cls, args, kwargs):
    return cls.__new__(cls, *args, **kwargs)


def dumps(obj, *, as_state: bool = False) -> bytes:
    """Pickle ``obj`` with file-backed arrays as references to their files.

    Parameters
    ----------
    obj : object
    as_state : bool, default False
        Pickle ``obj`` itself as its class and ``__getstate__()`` (for use inside the
        ``__reduce_ex__`` of ``obj``).

    Returns
    -------
    bytes
        A pickle that :func:`loads` (or ``pickle.loads``) reads in any process that can
        open the same files.
    """
    buf = io.BytesIO()
    _Pickler(buf, root=obj if as_state else None).dump(obj)
    return buf.getvalue()


loads = pickle.loads
