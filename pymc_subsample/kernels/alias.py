"""Walker's alias table: O(1) i.i.d. draws of rows with given weights.

Step 2 of Algorithm 1 of Cornish, Vanetti, Bouchard-Cote, Deligiannidis & Doucet (2019),
"Scalable Metropolis-Hastings for Exact Bayesian Inference with Large Datasets" (rows
drawn with probability ``psi_i / Psi``), and the importance sampler of
:class:`pymc_subsample.kernels.rows.ImportanceSampler`. Pure NumPy; randomness comes only
from the ``rng`` argument.
"""

from __future__ import annotations

import numpy as np

__all__ = ["AliasTable"]


class AliasTable:
    """Walker's alias table for i.i.d. draws of rows with ``P(X = i) ∝ w_i``.

    Implements step 2 of Algorithm 1 of Cornish et al. (2019) (rows drawn with
    probability ``psi_i / Psi``; Walker 1977, Kronmal & Peterson 1979). The table is
    built once in O(N) time and O(N) memory; each draw then costs O(1).

    Construction. The probabilities are first put on an integer grid: with
    ``b = min(52, 62 - bit_length(N))`` and ``unit = 2**b`` (one table column), row i
    gets ``P_i`` grid units with ``sum_i P_i = N * unit`` exactly (largest-remainder
    rounding of ``N * unit * w_i / sum(w)``). On that grid Vose's pairing of "small"
    (``P_i < unit``) and "large" columns is carried out exactly in ``int64`` and without a
    Python loop: with ``D`` the cumulative deficits of the small columns and ``E`` the
    cumulative excesses of the large ones (both in grid units, ``D[-1] == E[-1]``), small
    column ``j`` takes its alias from the first large column ``t`` with
    ``E_t >= D_{j-1}``, and large column ``t`` turns small at the first ``j`` with
    ``D_j > E_t``, keeping ``unit - (D_j - E_t)`` units and aliasing to large column
    ``t + 1``. This is the sequential Vose algorithm (a large column that turns small is
    paired next) written with cumulative sums.

    Exactness. Row ``i`` is drawn with probability exactly ``P_i / (N * unit)``, which
    differs from ``w_i / sum(w)`` by at most about ``1 / (N * unit)`` (``unit >= 2**22``
    for any ``N < 2**40``; ``2**38`` for ``N`` around ten million). Zero-weight rows get
    ``P_i = 0`` and are never drawn: their column always returns its alias, and an alias
    is always a row with at least ``unit`` grid units.

    Sampling. One integer ``r`` uniform on ``[0, N * unit)`` per draw: the column is
    ``r >> b`` and the low ``b`` bits are compared with the column's integer threshold,
    so the accept-or-alias coin is exact too.

    Parameters
    ----------
    weights : array_like of float, shape (N,)
        Nonnegative, finite weights with a positive sum (e.g. ``psi_i``). Only read;
        a ``numpy.memmap`` is fine.

    Attributes
    ----------
    n : int
        Number of rows ``N``.
    total : float
        ``sum(weights)`` (the ``Psi`` of Algorithm 1 when the weights are ``psi_i``).
    alias : ndarray of int64, shape (N,)
        Alias row of each column.
    threshold : ndarray of int64, shape (N,)
        Grid units (out of ``2**bits``) for which a column returns its own row.
    bits : int
        ``b``, the number of fractional bits of the grid.
    """

    __slots__ = ("n", "total", "alias", "threshold", "bits", "_high", "_mask")

    def __init__(self, weights):
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1:
            raise ValueError(f"AliasTable weights must be a 1-D array, got shape {w.shape}.")
        n = int(w.size)
        if n == 0:
            raise ValueError("AliasTable needs at least one weight, got an empty array.")
        finite = np.isfinite(w)
        if not finite.all():
            i = int(np.flatnonzero(~finite)[0])
            raise ValueError(
                f"AliasTable weights must be finite; weight {i} is {float(w[i])!r} "
                f"({int(np.count_nonzero(~finite))} non-finite in total)."
            )
        neg = w < 0
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise ValueError(
                f"AliasTable weights must be >= 0; weight {i} is {float(w[i])!r} "
                f"({int(np.count_nonzero(neg))} negative in total)."
            )
        wmax = float(w.max())
        if not wmax > 0.0:
            raise ValueError("AliasTable weights must have a positive sum; all are zero.")

        bits = min(52, 62 - n.bit_length())
        if bits < 20:
            raise ValueError(f"AliasTable supports at most 2**42 rows, got {n}.")
        unit = 1 << bits
        high = n * unit  # < 2**62

        frac = w / wmax  # in [0, 1]; avoids overflow of the sum
        total_scaled = float(frac.sum())
        frac *= float(high) / total_scaled  # N * unit * w_i / sum(w)
        units = np.floor(frac)
        frac -= units  # fractional parts, for the rounding below
        units = units.astype(np.int64)
        # Largest-remainder rounding so that sum(units) == high exactly; zero weights
        # keep zero units.
        rest = high - int(units.sum())
        if rest > 0:
            pos = np.flatnonzero(w > 0)
            m = min(rest, pos.size)
            if m == pos.size:
                units[pos] += 1
            else:
                top = np.argpartition(frac[pos], pos.size - m)[pos.size - m :]
                units[pos[top]] += 1
            rest -= m
        del frac
        if rest != 0:
            # Only floating-point error of the scaling is left here (a few hundred
            # units at most); the largest row holds >= unit >= 2**20 units.
            i = int(np.argmax(units))
            units[i] += rest
            if units[i] < 0:  # pragma: no cover - impossible for N < 2**40
                raise ValueError("AliasTable: could not normalise the weights.")

        small = units < unit
        s_idx = np.flatnonzero(small)
        l_idx = np.flatnonzero(~small)
        del small
        deficit = unit - units[s_idx]
        dcum = np.cumsum(deficit)
        ecum = np.cumsum(units[l_idx] - unit)

        threshold = np.empty(n, dtype=np.int64)
        alias = np.empty(n, dtype=np.int64)
        # Small columns: own row with units[i]; alias = large column serving them.
        threshold[s_idx] = units[s_idx]
        t = np.searchsorted(ecum, dcum - deficit, side="left")
        alias[s_idx] = l_idx[t]
        del t, deficit
        # Large columns: full unless they turn small before the smalls run out.
        threshold[l_idx] = unit
        alias[l_idx] = l_idx
        j = np.searchsorted(dcum, ecum, side="right")
        turned = np.flatnonzero(j < dcum.size)
        if turned.size:
            threshold[l_idx[turned]] = unit - (dcum[j[turned]] - ecum[turned])
            alias[l_idx[turned]] = l_idx[turned + 1]

        self.n = n
        self.total = float(total_scaled * wmax)
        self.alias = alias
        self.threshold = threshold
        self.bits = bits
        self._high = high
        self._mask = unit - 1

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"AliasTable(n={self.n}, total={self.total!r})"

    @property
    def prob(self) -> np.ndarray:
        """Per-column probability of returning the column's own row (float64, exact)."""
        return self.threshold * (2.0**-self.bits)

    def probabilities(self) -> np.ndarray:
        """Exact distribution implied by the table, ``P(X = i)`` for every row.

        O(N); meant for checks and diagnostics, not for sampling.
        """
        unit = self._mask + 1
        mass = self.threshold.copy()
        np.add.at(mass, self.alias, unit - self.threshold)
        return mass / float(self._high)

    def sample(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """Draw ``k`` i.i.d. rows, ``P(X = i) = w_i / sum(w)`` (Algorithm 1, step 2).

        Parameters
        ----------
        rng : numpy.random.Generator
            The only source of randomness.
        k : int
            Number of draws (>= 0).

        Returns
        -------
        ndarray of int64, shape (k,)
            Row indices. Vectorised, O(k).
        """
        r = rng.integers(0, self._high, size=k, dtype=np.int64)
        col = r >> self.bits
        own = (r & self._mask) < self.threshold[col]
        return np.where(own, col, self.alias[col])
