"""What the two weighted row tables share: the weights read and checked chunk by chunk,
and the table protocol (``n``, ``total``, ``probabilities()``, ``sample(rng, k)``).

Step 2 of Algorithm 1 of Cornish, Vanetti, Bouchard-Cote, Deligiannidis & Doucet (2019),
"Scalable Metropolis-Hastings for Exact Bayesian Inference with Large Datasets", draws
rows with probability ``psi_i / Psi``. Both tables put the weights on an integer grid
(row ``i`` gets ``P_i`` grid units) and draw exactly ``P_i / sum_j P_j``:
:class:`~pymc_subsample.kernels.sampling.alias.AliasTable` (Walker's alias method, O(1)
a draw) and :class:`~pymc_subsample.kernels.sampling.inverse_cdf.InverseCDFTable`
(inversion of the cumulative units, O(log N) a draw, cheaper to build). Pure NumPy;
randomness comes only from the ``rng`` argument.
"""

from __future__ import annotations

import abc
import math

import numpy as np

__all__ = ["RowTable", "read_weights"]


def _count(a, ranges, pred) -> int:
    """``count_nonzero(pred(a))``, chunk by chunk."""
    return sum(int(np.count_nonzero(pred(a[s:e]))) for s, e in ranges)


def _check_weights(w, ranges, what: str = "AliasTable weights") -> float:
    """The largest weight, after checking chunk by chunk (no N-sized temporaries) that
    every weight is finite and ``>= 0`` and that one is positive (``what`` names them in
    the errors)."""
    wmax = 0.0
    for s, e in ranges:
        c = w[s:e]
        bad = ~np.isfinite(c)
        if bad.any():
            i = s + int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"{what} must be finite; weight {i} is {float(w[i])!r} "
                f"({_count(w, ranges, lambda x: ~np.isfinite(x))} non-finite in total).")
        neg = c < 0
        if neg.any():
            i = s + int(np.flatnonzero(neg)[0])
            raise ValueError(
                f"{what} must be >= 0; weight {i} is {float(w[i])!r} "
                f"({_count(w, ranges, lambda x: x < 0)} negative in total).")
        wmax = max(wmax, float(c.max()))
    if not wmax > 0.0:
        raise ValueError(f"{what} must have a positive sum; all are zero.")
    return wmax


def read_weights(weights, chunk: int, what: str) -> tuple[np.ndarray, list, float]:
    """A table's weights, checked: ``(w, ranges, wmax)``.

    Parameters
    ----------
    weights : array_like of float, shape (N,)
        Nonnegative, finite, with a positive sum. A float array (a ``numpy.memmap``
        too) is only read, never copied; other arrays become float64.
    chunk : int
        Rows per chunk of the checks (and of the table's own passes).
    what : str
        How the errors name the weights.

    Returns
    -------
    w : ndarray of float
    ranges : list of (int, int)
        The chunks ``[start, stop)`` covering the ``N`` rows.
    wmax : float
        The largest weight.
    """
    w = weights if isinstance(weights, np.ndarray) else np.asarray(weights, np.float64)
    if w.ndim != 1:
        raise ValueError(f"{what} must be a 1-D array, got shape {w.shape}.")
    n = int(w.size)
    if n == 0:
        raise ValueError(f"{what} are an empty array: at least one row is needed.")
    if not np.issubdtype(w.dtype, np.floating):
        w = w.astype(np.float64)
    ranges = [(s, min(s + chunk, n)) for s in range(0, n, chunk)]
    return w, ranges, _check_weights(w, ranges, what)


def scaled_total(w, ranges, wmax) -> float:
    """``sum(w) / wmax``, exactly rounded (``w / wmax`` is in ``[0, 1]``: no overflow)."""
    return math.fsum(float(np.sum(w[s:e] / np.float64(wmax))) for s, e in ranges)


class RowTable(abc.ABC):
    """I.i.d. draws of rows with ``P(X = i) = P_i / sum_j P_j``, ``P_i`` the integer grid
    units of row ``i`` (step 2 of Algorithm 1 of Cornish et al. 2019).

    Attributes
    ----------
    n : int
        Number of rows ``N``.
    total : float
        ``sum(weights)`` (the ``Psi`` of Algorithm 1 when the weights are ``psi_i``).
    """

    __slots__ = ("n", "total")

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n={self.n}, total={self.total!r})"

    @abc.abstractmethod
    def _row_units(self) -> tuple[np.ndarray, int]:
        """``(P, sum_j P_j)``: every row's grid units (int64) and their total."""

    @abc.abstractmethod
    def _draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """``k`` row indices (int64), each row ``i`` with probability ``P_i / sum_j P_j``,
        from ``rng`` only."""

    def probabilities(self) -> np.ndarray:
        """Exact distribution implied by the table, ``P(X = i) = P_i / sum_j P_j`` for
        every row.

        O(N); meant for checks and set-up (an importance sampler's weights), not for
        sampling.
        """
        units, total = self._row_units()
        return units / float(total)

    def sample(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """Draw ``k`` i.i.d. rows, ``P(X = i) = P_i / sum_j P_j`` (Algorithm 1, step 2).

        Parameters
        ----------
        rng : numpy.random.Generator
            The only source of randomness.
        k : int
            Number of draws (>= 0).

        Returns
        -------
        ndarray of int64, shape (k,)
            Row indices, in the order drawn (the cost of a draw is the table's).
        """
        return self._draw(rng, k)
