"""Rows drawn with given weights by inverting their cumulative distribution on an integer grid.

Step 2 of Algorithm 1 of Cornish, Vanetti, Bouchard-Cote, Deligiannidis & Doucet (2019),
"Scalable Metropolis-Hastings for Exact Bayesian Inference with Large Datasets" (rows
drawn with probability ``psi_i / Psi``), and the importance samplers of the approximate
steps and of SGLD. Pure NumPy; randomness comes only from the ``rng`` argument.

The table is a single cumulative sum, built in a few vectorised passes (no pairing as in
Walker's alias table, :mod:`pymc_subsample.kernels.sampling.alias`, whose construction cost
about two passes over the data at 10^6 rows); a draw costs a binary search,
``O(log N)``, which is negligible next to evaluating the drawn row.
"""

from __future__ import annotations

import numpy as np

from .table import RowTable, read_weights, scaled_total

__all__ = ["InverseCDFTable"]

#: the grid's total: rows' units sum to at most about this (with a margin below 2**63)
_GRID = 2.0**61


class InverseCDFTable(RowTable):
    """I.i.d. draws of rows with ``P(X = i) ∝ w_i``, by inversion on an integer grid.

    Implements step 2 of Algorithm 1 of Cornish et al. (2019) (rows drawn with
    probability ``psi_i / Psi``).

    Construction. Row ``i`` gets ``P_i = ceil(w_i * s)`` grid units (``int64``), with
    ``s`` chosen so that ``sum_i w_i s`` is about ``2**61``; zero weights get zero units
    and every positive weight at least one. The table keeps the cumulative sums
    ``C_i = P_0 + ... + P_i`` (exact in ``int64``).

    Exactness. One integer ``r`` uniform on ``[0, C_{N-1})`` per draw; the row is the
    first ``i`` with ``C_i > r``, so row ``i`` is drawn with probability exactly
    ``P_i / C_{N-1}``. This differs from ``w_i / sum(w)`` by at most about
    ``2**-61 + 2 N 2**-122``-ish relative terms: the rounding of ``w_i s`` up to an
    integer, one unit in more than ``2**61 / N`` for an average row.

    Memory. 8 bytes per row (the ``int64`` cumulative sums); the weights are read in
    chunks and may be float32 or a ``numpy.memmap``.

    Parameters
    ----------
    weights : array_like of float, shape (N,)
        Nonnegative, finite weights with a positive sum (e.g. ``psi_i``). Only read.
    chunk : int, default 2**20
        Rows per chunk of the construction's passes.
    map_fn : callable, optional
        ``map_fn(fn, items) -> list``: how the chunks' work is mapped (e.g. on threads:
        NumPy releases the GIL in it); default serial. The table does not depend on it.

    Attributes
    ----------
    n, total : int, float
        ``N`` and ``sum(weights)``, as for every
        :class:`~pymc_subsample.kernels.sampling.table.RowTable`.
    cumulative : ndarray of int64, shape (N,)
        The cumulative grid units ``C_i``.
    """

    __slots__ = ("cumulative",)

    def __init__(self, weights, *, chunk: int = 1 << 20, map_fn=None):
        w, ranges, wmax = read_weights(weights, chunk, "the weights")
        n = int(w.size)
        total_scaled = scaled_total(w, ranges, wmax)
        scale = np.float64(_GRID / total_scaled / wmax)
        cum = np.empty(n, dtype=np.int64)
        run = map_fn if map_fn is not None else (lambda fn, items: [fn(i) for i in items])

        def block(k):  # a chunk's own cumulative sum; its last value
            s, e = ranges[k]
            units = np.ceil(w[s:e] * scale).astype(np.int64)  # float64 whatever w's type
            np.cumsum(units, out=cum[s:e])
            return int(cum[e - 1])

        last = run(block, range(len(ranges)))
        carries = np.cumsum([0] + last[:-1]).tolist()  # exact: the total is below 2**62

        def shift(k):
            if carries[k]:
                cum[ranges[k][0]:ranges[k][1]] += carries[k]

        run(shift, range(len(ranges)))
        self.n = n
        self.total = float(total_scaled * wmax)
        self.cumulative = cum

    def _row_units(self) -> tuple[np.ndarray, int]:
        """Each row's units, the differences of the cumulative sums."""
        return np.diff(self.cumulative, prepend=np.int64(0)), self.cumulative[-1]

    def _draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """One integer ``r`` on ``[0, C_{N-1})`` a draw; the row is the first ``i`` with
        ``C_i > r`` (a binary search, ``O(k log N)``)."""
        r = rng.integers(0, self.cumulative[-1], size=k, dtype=np.int64)
        return np.searchsorted(self.cumulative, r, side="right").astype(np.int64, copy=False)
