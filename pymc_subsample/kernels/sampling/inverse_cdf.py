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

import math

import numpy as np

from .alias import _check_weights

__all__ = ["InverseCDFTable"]

#: the grid's total: rows' units sum to at most about this (with a margin below 2**63)
_GRID = 2.0**61


class InverseCDFTable:
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
    n : int
        Number of rows ``N``.
    total : float
        ``sum(weights)`` (the ``Psi`` of Algorithm 1 when the weights are ``psi_i``).
    cumulative : ndarray of int64, shape (N,)
        The cumulative grid units ``C_i``.
    """

    __slots__ = ("n", "total", "cumulative")

    def __init__(self, weights, *, chunk: int = 1 << 20, map_fn=None):
        w = weights if isinstance(weights, np.ndarray) else np.asarray(weights, np.float64)
        if w.ndim != 1:
            raise ValueError(f"the weights must be a 1-D array, got shape {w.shape}.")
        n = int(w.size)
        if n == 0:
            raise ValueError("the weights are an empty array: at least one row is needed.")
        if not np.issubdtype(w.dtype, np.floating):
            w = w.astype(np.float64)
        ranges = [(s, min(s + chunk, n)) for s in range(0, n, chunk)]
        wmax = _check_weights(w, ranges, "the weights")
        # w / wmax is in [0, 1]: no overflow of the sum
        total_scaled = math.fsum(float(np.sum(w[s:e] / np.float64(wmax))) for s, e in ranges)
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

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"InverseCDFTable(n={self.n}, total={self.total!r})"

    def probabilities(self) -> np.ndarray:
        """Exact distribution implied by the table, ``P(X = i)`` for every row.

        O(N); meant for checks and set-up, not for sampling.
        """
        units = np.diff(self.cumulative, prepend=np.int64(0))
        return units / float(self.cumulative[-1])

    def sample(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """Draw ``k`` i.i.d. rows, ``P(X = i) = P_i / C_{N-1}`` (Algorithm 1, step 2).

        Parameters
        ----------
        rng : numpy.random.Generator
            The only source of randomness.
        k : int
            Number of draws (>= 0).

        Returns
        -------
        ndarray of int64, shape (k,)
            Row indices, in the order drawn. ``O(k log N)``.
        """
        r = rng.integers(0, self.cumulative[-1], size=k, dtype=np.int64)
        return np.searchsorted(self.cumulative, r, side="right").astype(np.int64, copy=False)
