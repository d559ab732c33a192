"""Walker's alias table: O(1) i.i.d. draws of rows with given weights.

Step 2 of Algorithm 1 of Cornish, Vanetti, Bouchard-Cote, Deligiannidis & Doucet (2019),
"Scalable Metropolis-Hastings for Exact Bayesian Inference with Large Datasets" (rows
drawn with probability ``psi_i / Psi``), and the importance sampler of
:class:`pymc_subsample.kernels.sampling.rows.ImportanceSampler`. Pure NumPy; randomness comes only
from the ``rng`` argument.
"""

from __future__ import annotations

import numpy as np

from .table import RowTable, _count, read_weights, scaled_total
from .table import _check_weights  # noqa: F401 - read from here by the tests of the parts

__all__ = ["AliasTable", "index_dtype"]


def index_dtype(n: int) -> type:
    """The smallest signed integer type that holds every row index of ``n`` rows
    (``int32`` below 2**31 rows, else ``int64``): per-row index arrays in that type are
    exact and half the size."""
    return np.int32 if n <= np.iinfo(np.int32).max else np.int64


def _where(a, ranges, pred, dtype) -> np.ndarray:
    """``flatnonzero(pred(a))`` as ``dtype``, chunk by chunk (no N-sized mask)."""
    out = np.empty(_count(a, ranges, pred), dtype=dtype)
    k = 0
    for s, e in ranges:
        hit = np.flatnonzero(pred(a[s:e]))
        out[k : k + hit.size] = hit + s
        k += hit.size
    return out


def _grid_units(w, ranges, wmax, high) -> tuple[np.ndarray, float]:
    """The rounding of :class:`AliasTable`: each row's grid units ``P_i``, int64 with
    ``sum_i P_i == high == N * unit`` exactly (largest-remainder rounding of
    ``high * w_i / sum(w)``; zero weights keep zero units), and ``sum(w) / wmax``."""
    n = w.size
    total_scaled = scaled_total(w, ranges, wmax)
    scale = float(high) / total_scaled
    # Grid units, N * unit * w_i / sum(w), floored; the fractional parts are kept in
    # float32 (they only rank rows for the rounding below).
    units = np.empty(n, dtype=np.int64)
    frac = np.empty(n, dtype=np.float32)
    for s, e in ranges:
        f = w[s:e] * np.float64(scale / wmax)  # float64, whatever the weights' type
        u = np.floor(f)
        units[s:e] = u
        f -= u
        f[w[s:e] == 0] = -1.0  # zero weights are never rounded up
        frac[s:e] = f
    # Largest-remainder rounding so that sum(units) == high exactly; zero weights
    # keep zero units.
    rest = high - int(units.sum())
    if rest > 0:
        n_pos = n - _count(w, ranges, lambda x: x == 0)
        m = min(rest, n_pos)
        _round_up_largest(units, frac, ranges, m, n_pos)
        rest -= m
    del frac
    if rest != 0:
        # Only floating-point error of the scaling is left here (a few hundred
        # units at most); the largest row holds >= unit >= 2**20 units.
        i = int(np.argmax(units))
        units[i] += rest
        if units[i] < 0:  # pragma: no cover - impossible for N < 2**40
            raise ValueError("AliasTable: could not normalise the weights.")
    return units, total_scaled


def _round_up_largest(units, frac, ranges, m, n_pos) -> None:
    """Add one unit, in place, to the ``m`` rows with the largest fractional parts
    ``frac`` (ties at the cut: the first ones in row order); all ``n_pos`` rows of
    positive weight when ``m == n_pos``."""
    n = frac.size
    if m == n_pos:
        for s, e in ranges:
            units[s:e] += frac[s:e] >= 0
        return
    cut = float(np.partition(frac, n - m)[n - m])  # the m-th largest
    above = 0
    for s, e in ranges:
        up = frac[s:e] > cut
        units[s:e] += up
        above += int(np.count_nonzero(up))
    # ties at the cut: the first ones, in row order
    ties = _where(frac, ranges, lambda x: x == cut, np.int64)[: m - above]
    units[ties] += 1


def _vose_pairing(units, ranges, unit, chunk) -> np.ndarray:
    """The pairing of :class:`AliasTable` (Vose's algorithm written with cumulative
    sums): the alias of every column; ``units`` becomes the thresholds in place."""
    n = units.size
    idx = index_dtype(n)
    s_idx = _where(units, ranges, lambda x: x < unit, idx)
    l_idx = _where(units, ranges, lambda x: x >= unit, idx)
    # cumulative deficits of the small columns, excesses of the large ones
    dcum = np.subtract(unit, units[s_idx])
    np.cumsum(dcum, out=dcum)
    ecum = units[l_idx]
    ecum -= unit
    np.cumsum(ecum, out=ecum)
    threshold = units  # small columns already hold their own units
    alias = np.empty(n, dtype=idx)
    for s in range(0, s_idx.size, chunk):  # small column j: alias = large column t
        e = min(s + chunk, s_idx.size)
        before = dcum[s - 1 : e - 1] if s > 0 else np.r_[0, dcum[: e - 1]]
        alias[s_idx[s:e]] = l_idx[np.searchsorted(ecum, before, side="left")]
    for s in range(0, l_idx.size, chunk):  # large columns: full unless they turn small
        e = min(s + chunk, l_idx.size)
        cols = l_idx[s:e]
        threshold[cols] = unit
        alias[cols] = cols
        j = np.searchsorted(dcum, ecum[s:e], side="right")
        turned = np.flatnonzero(j < dcum.size)
        if turned.size:
            k = s + turned
            threshold[l_idx[k]] = unit - (dcum[j[turned]] - ecum[k])
            alias[l_idx[k]] = l_idx[k + 1]
    return alias


class AliasTable(RowTable):
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

    Memory. The table keeps 12 bytes per row (the int64 threshold, which holds the grid
    exactly, and the int32 alias). Building it is done chunk by chunk, with about 16
    more bytes per row of temporaries at the peak (the float32 rounding remainders, then
    the int32 lists of small and large columns and their int64 cumulative sums); the
    weights are read in chunks and may be float32 or a ``numpy.memmap``.

    Parameters
    ----------
    weights : array_like of float, shape (N,)
        Nonnegative, finite weights with a positive sum (e.g. ``psi_i``). Only read;
        a ``numpy.memmap`` is fine.
    chunk : int, default 2**20
        Rows per chunk of the construction's passes.

    Attributes
    ----------
    n, total : int, float
        ``N`` and ``sum(weights)``, as for every
        :class:`~pymc_subsample.kernels.sampling.table.RowTable`.
    alias : ndarray of int32 (int64 from 2**31 rows), shape (N,)
        Alias row of each column (:func:`index_dtype`: exact, half the size of int64).
    threshold : ndarray of int64, shape (N,)
        Grid units (out of ``2**bits``) for which a column returns its own row.
    bits : int
        ``b``, the number of fractional bits of the grid.
    """

    __slots__ = ("alias", "threshold", "bits", "_high", "_mask")

    def __init__(self, weights, *, chunk: int = 1 << 20):
        w, ranges, wmax = read_weights(weights, chunk, "AliasTable weights")
        n = int(w.size)
        bits = min(52, 62 - n.bit_length())
        if bits < 20:
            raise ValueError(f"AliasTable supports at most 2**42 rows, got {n}.")
        unit = 1 << bits
        high = n * unit  # < 2**62
        units, total_scaled = _grid_units(w, ranges, wmax, high)
        alias = _vose_pairing(units, ranges, unit, chunk)

        self.n = n
        self.total = float(total_scaled * wmax)
        self.alias = alias
        self.threshold = units  # turned into the thresholds in place by the pairing
        self.bits = bits
        self._high = high
        self._mask = unit - 1

    @property
    def prob(self) -> np.ndarray:
        """Per-column probability of returning the column's own row (float64, exact)."""
        return self.threshold * (2.0**-self.bits)

    def _row_units(self) -> tuple[np.ndarray, int]:
        """Each row's units: its own column's threshold plus the rest of every column
        that aliases it."""
        unit = self._mask + 1
        mass = self.threshold.copy()
        np.add.at(mass, self.alias, unit - self.threshold)
        return mass, self._high

    def _draw(self, rng: np.random.Generator, k: int) -> np.ndarray:
        """One integer ``r`` on ``[0, N * unit)`` a draw: column ``r >> bits``, its own
        row when the low bits fall below its threshold, else its alias. Vectorised,
        O(k)."""
        r = rng.integers(0, self._high, size=k, dtype=np.int64)
        col = r >> self.bits
        own = (r & self._mask) < self.threshold[col]
        return np.where(own, col, self.alias[col])
