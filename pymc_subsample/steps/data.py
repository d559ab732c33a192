"""What a step keeps of its data, and how it travels: the refusal of stale data and
changed files, and pickling with file-backed data (a mixin of
:class:`~pymc_subsample.steps.base.SubsampleStep`).

A step that keeps sums, bounds or fits computed from the data at construction records
the data's fingerprint and weak references to its arrays, and refuses to sample after
``pm.set_data`` replaced them; every step watches the files behind file-backed rows
(:class:`~pymc_subsample.out_of_core.DataFileWatcher`).
"""

from __future__ import annotations

import weakref

from .. import _memmap
from ..engine.analysis import InvalidDataError, data_fingerprint
from ..out_of_core import DataFileWatcher

__all__ = ["DataGuard", "IN_PLACE_ROWS"]

#: rows (evenly spread, the first and last included) whose digest stands for each data
#: array when a chain starts, to catch values changed in place (``X[:] = X2``): O(1) in N
#: (``benchmarks/data_guard.py`` measures it against one pass over the rows)
IN_PLACE_ROWS = 1024


class DataGuard:
    """Stale data, changed files and pickling of a step with an ``engine``."""

    # ------------------------------------------------------------------ stale data
    #: whether the step keeps sums, bounds or fits computed from the data at construction
    #: (then a later pm.set_data must be refused, not sampled with stale sums)
    keeps_data_sums = True
    #: the files behind file-backed rows (set by :meth:`_remember_data`)
    _data_files = None

    def _watch_files(self):
        """Record the files behind file-backed rows (every step reads rows from them
        while sampling: :class:`~pymc_subsample.out_of_core.DataFileWatcher`)."""
        self._data_files = DataFileWatcher(
            zip([r.name for r in self.engine.rows], self.engine.data_arrays()),
            owner=type(self).__name__)

    def _remember_data(self):
        """Record what the data looked like when the step's sums were computed (a step
        that keeps sums; the set-up decides whether it does)."""
        if not self.keeps_data_sums:
            return
        # the digest is only read by a worker that unpickled the step: it is taken when
        # the step is pickled (``__getstate__``), after the identities show the data
        # unchanged (a digest of 65,536 spread rows cost about two data passes at 10^6
        # rows of a file)
        self._data_fingerprint = None
        self._data_refs = [weakref.ref(a) for a in self.engine.data_arrays()]
        self._in_place_digest = self._spread_digest()

    def _spread_digest(self) -> tuple:
        """Each row-data array's shape, dtype and a digest of :data:`IN_PLACE_ROWS` spread
        rows, as they are now."""
        return data_fingerprint(self.engine.rows, self.engine.n_rows, IN_PLACE_ROWS)

    def _changed_in_place(self) -> list[str]:
        """The data variables whose values changed in place since construction (the same
        array, other values at the spread rows)."""
        old = getattr(self, "_in_place_digest", None)
        if old is None:
            return []
        return [o[0] for o, new in zip(old, self._spread_digest()) if o != new]

    def _changed_since_built(self) -> list[str] | None:
        """The data variables replaced since construction, by identity (None: the step
        was unpickled, and identities are lost)."""
        refs = getattr(self, "_data_refs", None)
        arrays = self.engine.data_arrays()
        if refs is None or len(refs) != len(arrays):
            return None
        replaced = [r.name for r, ref, a in zip(self.engine.rows, refs, arrays)
                    if ref() is not a]
        return replaced or self._changed_in_place()

    def _check_data_unchanged(self):
        """Refuse to sample when the data changed (``pm.set_data``, or values written in
        place) since construction.

        In the process that built the step, any replaced data array counts as a change
        (``pm.set_data`` always installs a new array, even with equal values), and so do
        other values at :data:`IN_PLACE_ROWS` spread rows of the same array (``X[:] = X2``
        on the array the model was built from, or on a ``pm.Data`` buffer through
        ``get_value(borrow=True)``; a change confined to rows between the spread rows is
        not seen); in a worker that unpickled the step (``mp_ctx="spawn"`` /
        ``"forkserver"``) identities are lost, and the shapes and a digest of 65,536
        evenly spread rows are compared with those taken when it was pickled (itself
        after the same check).

        First, in any step, the files behind file-backed rows are compared with what they
        were when the step was built (size, modification time, inode and a digest of
        spread blocks); a file written, truncated or replaced since raises
        :class:`~pymc_subsample.out_of_core.DataFileChangedError`.
        """
        if self._data_files is not None:
            self._data_files.check()
        if not self.keeps_data_sums:
            return
        changed = self._changed_since_built()
        if changed is None:
            old = self._data_fingerprint
            if old[:1] == ("changed",):  # already replaced when the step was pickled
                changed = list(old[1])
            else:
                now = self.engine.data_fingerprint()
                changed = [o[0] for o, new in zip(old, now) if o != new]
        if changed:
            raise InvalidDataError(
                f"{type(self).__name__}: {', '.join(changed)} changed since this step was "
                "built (pm.set_data, or values written into the array). Its control-variate "
                "sums, bounds and Gaussian fit were computed on the old values and would "
                "sample the wrong posterior: build the step again after changing the data."
            )

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        state = dict(self.__dict__)
        if state.get("_data_refs") is not None:
            # weak references do not pickle: a digest of the data stands for them
            changed = self._changed_since_built()
            state["_data_fingerprint"] = (("changed", tuple(changed)) if changed
                                          else self.engine.data_fingerprint())
        state["_data_refs"] = None
        return state

    def __reduce_ex__(self, protocol):
        """Pickle file-backed data by reference when the data has any.

        ``pm.sample`` pickles the step for its workers unless they are forked
        (``mp_ctx="spawn"``, ``"forkserver"``, macOS): a ``numpy.memmap`` would arrive as
        an in-memory copy in every worker. With a file-backed data array, the step is
        pickled by :func:`pymc_subsample._memmap.dumps`, which writes every file-backed
        array it reaches (the engine's rows, the model graph's constants) as its file,
        offset, dtype, shape and strides, mapped again on unpickling.
        """
        if any(_memmap.is_file_backed(a) for a in self.engine.data_arrays()):
            return (_memmap.loads, (_memmap.dumps(self, as_state=True),))
        return super().__reduce_ex__(protocol)

