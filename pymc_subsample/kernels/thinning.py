"""Poisson thinning and the Scalable Metropolis-Hastings (SMH) acceptance test.

Pure NumPy kernels for Cornish, Vanetti, Bouchard-Cote, Deligiannidis & Doucet (2019),
"Scalable Metropolis-Hastings for Exact Bayesian Inference with Large Datasets";
equation numbers below refer to that paper. The step factors ``phi`` live in
:mod:`pymc_subsample.kernels.phi`.

Notation (target ``pi(theta) ∝ exp(-U(theta))``, ``U = U_0 + sum_i U_i``):

* ``lambda_i(theta, theta') = max(0, (U_i - Uhat_{k,i})(theta') - (U_i - Uhat_{k,i})(theta))``
  is the negative log of the i-th data factor of the SMH acceptance (eq. 10/11);
* ``phi(theta, theta') * psi_i`` bounds it (eq. 3, with eq. 13 for ``phi`` and eq. 12,
  ``psi_i = Ubar_{k,i}``, for the constants); ``Psi = sum_i psi_i``;
* Algorithm 1 (Poisson thinning) accepts the factorised data part with probability
  exactly ``exp(-sum_i lambda_i)`` while touching ``phi * Psi`` rows on average;
* truncation (eq. 6, TFMH) replaces the factorised test by the ordinary full-data MH test
  whenever ``phi * Psi >= R``.

Nothing here imports PyMC or PyTensor. Randomness comes only from the ``rng`` argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .phi import taylor_phi, whitened_phi  # re-exported: the step factors live in .phi

__all__ = [
    "AliasTable",
    "BoundViolationError",
    "SMHResult",
    "ThinningResult",
    "poisson_estimator_test",
    "poisson_thinning_test",
    "smh_test",
    "taylor_phi",
    "whitened_phi",
]


# ---------------------------------------------------------------------------------------
# Walker's alias table
# ---------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------
# Poisson thinning (Algorithm 1)
# ---------------------------------------------------------------------------------------


class BoundViolationError(ValueError):
    """A drawn row has ``lambda_i > phi * psi_i``: the bound (eq. 3 / eq. 12) is wrong.

    Poisson thinning (Algorithm 1) is only valid when every factor satisfies
    ``lambda_i(theta, theta') <= phi(theta, theta') * psi_i``. A violation means the
    bound constants ``psi_i`` (``Ubar_{k,i}``), the expansion point ``theta_hat`` and its
    derivatives, or the remainder function disagree; continuing would sample a wrong
    posterior, so the test stops.

    Attributes
    ----------
    row : int
        Index of the offending row.
    lam : float
        Its ``lambda_i``.
    phi, psi : float
        ``phi(theta, theta')`` and ``psi_i``.
    bound : float
        ``phi * psi_i``.
    """

    def __init__(self, row: int, lam: float, phi: float, psi: float):
        self.row = int(row)
        self.lam = float(lam)
        self.phi = float(phi)
        self.psi = float(psi)
        self.bound = self.phi * self.psi
        ratio = self.lam / self.bound if self.bound > 0 else math.inf
        super().__init__(
            f"Poisson-thinning bound violated at data row {self.row}: "
            f"lambda = {self.lam!r} > phi * psi = {self.phi!r} * {self.psi!r} = "
            f"{self.bound!r} (ratio {ratio:.6g}). The bound constants psi_i (Ubar_{{k,i}}, "
            "bounds on the (k+1)-th derivatives of U_i) are invalid for this model, or "
            "theta_hat / its Taylor coefficients do not match the remainder function. "
            "Scalable MH would not sample the posterior; fix the bounds (or fall back to "
            "full-data MH)."
        )


@dataclass(frozen=True, slots=True)
class ThinningResult:
    """Outcome of :func:`poisson_thinning_test`.

    Attributes
    ----------
    accept : bool
        True iff every Bernoulli ``B_j`` was 0.
    n_poisson : int
        ``K``, the Poisson number of candidate rows.
    data_used : int
        Distinct rows whose ``lambda`` was evaluated, summed over the evaluation chunks
        (at most ``K``; a row drawn twice in one chunk is read once).
    poisson_rate : float
        ``phi * Psi``, the mean of ``K``.
    """

    accept: bool
    n_poisson: int
    data_used: int
    poisson_rate: float


_MAX_CHUNK = 1 << 16


def _evaluate_rows(remainder_fn, rows):
    """``remainder_fn`` at the drawn rows, each distinct row evaluated once.

    Returns the values for every entry of ``rows`` (repeats copied) and the number of
    distinct rows read. Poisson draws repeat rows when ``phi * Psi`` nears ``N``; reading a
    row once keeps ``data_used`` a count of rows (never above ``N`` within one call).
    """
    uniq, inverse = np.unique(rows, return_inverse=True)
    ask = rows if len(uniq) == len(rows) else uniq
    vals = np.asarray(remainder_fn(ask), dtype=np.float64).reshape(-1)
    if vals.shape != (len(ask),):
        raise ValueError(f"remainder_fn returned {vals.size} values for {len(ask)} rows.")
    return (vals if ask is rows else vals[inverse]), len(ask)


def _checked_bound(lam, rows, phi, psi, rtol, atol):
    """``phi * psi_i`` for the drawn rows, after checking ``lam <= phi psi_i`` (with the
    floating-point slack ``rtol``, ``atol``) on each: a NaN raises ValueError, a
    violation :class:`BoundViolationError`."""
    bound = phi * np.asarray(psi[rows], dtype=np.float64)
    bad = ~(lam <= bound * (1.0 + rtol) + atol)  # also catches NaN
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        if np.isnan(lam[i]):
            raise ValueError(f"remainder_fn returned NaN for data row {int(rows[i])}.")
        raise BoundViolationError(int(rows[i]), lam[i], phi, float(psi[rows[i]]))
    return bound


def poisson_thinning_test(
    rng: np.random.Generator,
    phi: float,
    psi_total: float,
    alias: AliasTable | None,
    psi: np.ndarray,
    remainder_fn: Callable[[np.ndarray], np.ndarray],
    *,
    rtol: float = 1e-8,
    atol: float = 1e-10,
    chunk_size: int = 256,
) -> ThinningResult:
    """Accept with probability ``exp(-sum_i lambda_i)`` by Poisson thinning (Algorithm 1).

    Implements Algorithm 1 of Cornish et al. (2019) (proof: their Proposition C.1),
    as restated in the project's paper notes:

    1. ``K ~ Poisson(phi * Psi)``;
    2. rows ``X_1..X_K`` i.i.d. with ``P(X = i) = psi_i / Psi`` (``alias``);
    3. ``B_j ~ Bernoulli(lambda_{X_j} / (phi * psi_{X_j}))``;
    4. accept iff every ``B_j = 0``, stopping at the first success.

    Valid whenever ``lambda_i <= phi * psi_i`` for all rows (eq. 3); this is checked on
    every evaluated row. Rows are evaluated in vectorised chunks: all ``K`` at once when
    ``K <= chunk_size``, otherwise chunks of ``chunk_size``, doubling (at most
    ``2**16``), with a stop after the first chunk that holds a success.

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness.
    phi : float
        ``phi(theta, theta')`` (eq. 13; see :func:`taylor_phi`), >= 0.
    psi_total : float
        ``Psi = sum_i psi_i``.
    alias : AliasTable or None
        Table built from ``psi``; may be None only when ``phi * Psi == 0``.
    psi : ndarray, shape (N,)
        Per-row bound constants ``psi_i`` (eq. 12, ``Ubar_{k,i}``).
    remainder_fn : callable
        ``remainder_fn(rows) -> lambda``: for an int64 array of row indices, the values
        ``lambda_i(theta, theta') >= 0`` (eq. 11), one per entry (repeated rows allowed).
        Negative values count as 0, so the raw difference
        ``(U_i - Uhat_{k,i})(theta') - (U_i - Uhat_{k,i})(theta)`` may be returned.
    rtol, atol : float
        Floating-point slack of the bound check: a row fails when
        ``lambda > phi * psi_i * (1 + rtol) + atol``. ``atol`` covers cancellation in
        ``lambda`` (a difference of O(1) log-likelihood terms) when ``theta`` and
        ``theta'`` are so close to ``theta_hat`` that the bound itself is tiny.
    chunk_size : int
        Rows per first evaluation call.

    Returns
    -------
    ThinningResult

    Raises
    ------
    BoundViolationError
        If an evaluated row has ``lambda > phi * psi_i`` beyond the tolerance.
    ValueError
        If ``phi * Psi`` is negative or NaN, or ``remainder_fn`` returns NaN or a wrong
        shape.

    Notes
    -----
    ``P(accept) = exp(-sum_i lambda_i)`` up to the alias table's grid rounding, which
    shifts ``log P(accept)`` by at most about ``phi * Psi * 2**-bits`` (see
    :class:`AliasTable`). Expected rows evaluated: at most ``phi * Psi``.
    """
    rate = float(phi) * float(psi_total)
    if not rate > 0.0:
        if rate == 0.0:
            return ThinningResult(True, 0, 0, 0.0)
        raise ValueError(
            f"Poisson thinning needs phi * Psi >= 0, got phi={phi!r}, Psi={psi_total!r}."
        )
    if rate == math.inf:
        raise ValueError(
            "Poisson thinning rate phi * Psi is infinite; use the truncated test "
            "(smh_test falls back to full-data MH for large rates)."
        )
    if alias is None:
        raise ValueError("Poisson thinning needs an AliasTable when phi * Psi > 0.")
    if alias.n != len(psi):
        raise ValueError(f"AliasTable has {alias.n} rows but psi has {len(psi)}.")
    k_total = int(rng.poisson(rate))
    if k_total == 0:
        return ThinningResult(True, 0, 0, rate)

    phi = float(phi)
    remaining = k_total
    used = 0
    chunk = max(1, int(chunk_size))
    while remaining:
        m = remaining if remaining <= chunk else chunk
        rows = alias.sample(rng, m)
        lam, n_read = _evaluate_rows(remainder_fn, rows)
        used += n_read
        bound = _checked_bound(lam, rows, phi, psi, rtol, atol)
        # B_j = 1 iff u_j < lambda_j / bound_j (bound_j > 0: psi_i = 0 rows are never drawn).
        u = rng.random(m)
        if (u * bound < lam).any():
            return ThinningResult(False, k_total, used, rate)
        remaining -= m
        if chunk < _MAX_CHUNK:
            chunk = min(2 * chunk, _MAX_CHUNK)
    return ThinningResult(True, k_total, used, rate)


def poisson_estimator_test(
    rng: np.random.Generator,
    phi: float,
    psi_total: float,
    alias: AliasTable | None,
    psi: np.ndarray,
    remainder_fn: Callable[[np.ndarray], np.ndarray],
    *,
    rtol: float = 1e-8,
    atol: float = 1e-10,
) -> ThinningResult:
    """The data factor of the MH test by Poisson auxiliary variables (MH-SS, TunaMH form).

    The test of Prado, Nemeth & Sherlock (2024, "Metropolis-Hastings with Scalable
    Subsampling", the optimal ``gamma = 0`` member), after Zhang et al. (2020,
    "Asymptotically optimal exact minibatch Metropolis-Hastings", TunaMH), written from
    the following derivation. Let ``D_i = R_i(theta') - R_i(theta)`` be row ``i``'s
    remainder difference with ``|D_i| <= b_i = phi psi_i`` and let

        f_i = b_i + min(0, D_i),    f'_i = b_i - max(0, D_i) = f_i - D_i   (both >= 0).

    Reversing the move swaps ``D_i -> -D_i`` and hence ``f_i <-> f'_i``. With auxiliary
    counts ``s_i ~ Poisson(f_i)``, independent, the ratio of the extended target is
    ``exp(-sum D_i) exp(sum (f_i - f'_i)) prod (f'_i / f_i)^s_i = prod (f'_i / f_i)^s_i``:
    the exponentials cancel exactly. The counts are drawn with O(phi Psi) rows:
    ``K ~ Poisson(phi Psi)`` rows i.i.d. ``~ psi_i / Psi``, each kept with probability
    ``f_j / b_j``; the kept counts are independent ``Poisson(f_i)``. The data factor
    accepts with probability ``min(1, prod_kept f'_j / f_j)``.

    Unlike the factorised test (:func:`poisson_thinning_test`, acceptance
    ``exp(-sum_i max(0, D_i))``), rows whose remainder falls (``D_i < 0``) raise the
    acceptance, so moves are accepted more often for the same rows read; every drawn row
    is evaluated (no early stop, except on a kept row with ``f'_j = 0``).

    Parameters
    ----------
    rng, phi, psi_total, alias, psi, rtol, atol
        As in :func:`poisson_thinning_test`. The bound must hold for ``|D_i|`` (both
        directions of the move), which every bound of this module does.
    remainder_fn : callable
        ``remainder_fn(rows) -> D`` (the raw, signed differences).

    Returns
    -------
    ThinningResult
    """
    rate = float(phi) * float(psi_total)
    if rate == 0.0:
        return ThinningResult(True, 0, 0, 0.0)
    if not (rate > 0.0 and rate < math.inf) or alias is None:
        raise ValueError(
            f"the Poisson estimator needs 0 <= phi * Psi < inf and an alias table, got "
            f"phi={phi!r}, Psi={psi_total!r}."
        )
    k_total = int(rng.poisson(rate))
    if k_total == 0:
        return ThinningResult(True, 0, 0, rate)
    rows = alias.sample(rng, k_total)
    dif, n_read = _evaluate_rows(remainder_fn, rows)
    bound = _checked_bound(np.abs(dif), rows, float(phi), psi, rtol, atol)
    f = np.maximum(bound + np.minimum(0.0, dif), 0.0)
    fp = np.maximum(bound - np.maximum(0.0, dif), 0.0)
    kept = rng.random(k_total) * bound < f
    if not kept.any():
        return ThinningResult(True, k_total, n_read, rate)
    f, fp = f[kept], fp[kept]
    if np.any(fp <= 0.0):
        return ThinningResult(False, k_total, n_read, rate)
    log_r = float(np.sum(np.log(fp) - np.log(f)))
    accept = log_r >= 0.0 or rng.random() < math.exp(log_r)
    return ThinningResult(bool(accept), k_total, n_read, rate)


# ---------------------------------------------------------------------------------------
# SMH acceptance
# ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SMHResult:
    """Outcome of :func:`smh_test`.

    Attributes
    ----------
    accept : bool
        Whether the proposal is accepted.
    data_used : int
        Rows evaluated: ``N`` for the full-data fallback, else the thinning rows.
    poisson_rate : float
        ``phi * Psi``, the expected rows of the thinning test.
    fallback : bool
        True when the truncation rule (``phi * Psi >= R``) or ``force_full`` chose the
        full-data test (its rows are read only if the first factor accepted).
    n_poisson : int
        ``K`` of the thinning test (0 when it was not run).
    """

    accept: bool
    data_used: int
    poisson_rate: float
    fallback: bool
    n_poisson: int = 0


def smh_test(
    rng: np.random.Generator,
    log_ratio_first: float,
    phi: float,
    psi_total: float,
    alias: AliasTable | None,
    psi: np.ndarray,
    remainder_fn: Callable[[np.ndarray], np.ndarray],
    full_log_ratio_fn: Callable[[], float],
    *,
    truncation: float | None = None,
    force_full: bool = False,
    data_test: str = "factorised",
    rtol: float = 1e-8,
    atol: float = 1e-10,
    chunk_size: int = 256,
) -> SMHResult:
    """Truncated Scalable Metropolis-Hastings acceptance for one proposal.

    Implements the SMH-k acceptance probability (eq. 10) as a factorised MH test
    (eq. 2, with the factors of eq. 11), truncated as in TFMH (eq. 6):

    * the first, data-free factor ``min(1, exp(log_ratio_first))`` is tested first, in
      both cases below, so that a rejection there reads no data;
    * if ``phi * Psi >= R`` (``R = truncation``, default ``N`` as in the paper) or
      ``force_full``: the rest of the exact ratio, ``full_log_ratio_fn() -
      log_ratio_first`` (the sum of the remainders over all rows), as a second factor:
      accept iff ``U < exp(rest)``; ``data_used = N``, ``fallback = True``. Together
      this is a two-factor MH test (delayed acceptance, Christen & Fox 2005, "Markov
      chain Monte Carlo using an approximation"), exact like the paper's plain MH
      fallback and much cheaper when the surrogate rejects far proposals;
    * otherwise accept with probability
      ``min(1, exp(log_ratio_first)) * exp(-sum_i lambda_i)``: the first, data-free
      factor by its own uniform ``U_1`` (accept it iff ``U_1 < exp(log_ratio_first)``; no
      draw needed when ``log_ratio_first >= 0``), and the data factors
      ``prod_i min(1, exp(-lambda_i)) = exp(-sum_i lambda_i)`` by Poisson thinning
      (Algorithm 1, :func:`poisson_thinning_test`), which uses its own independent
      draws. The two tests are independent, so the acceptance probability is their
      product. The cheap first factor is tested first, so a rejection there touches no
      data.

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness.
    log_ratio_first : float
        Log of the first factor's ratio (eq. 10),
        ``log q(theta | theta') - log q(theta' | theta) - [U_0 + Uhat_k](theta')
        + [U_0 + Uhat_k](theta)``; 0 for a theta_hat-reversible proposal. NaN rejects.
    phi : float
        ``phi(theta, theta')`` from :func:`taylor_phi` (eq. 13).
    psi_total : float
        ``Psi = sum_i psi_i``.
    alias : AliasTable or None
        Alias table of ``psi`` (None allowed when ``Psi == 0``, e.g. SMH-2 on a Normal
        likelihood with known scale, where the remainders vanish).
    psi : ndarray, shape (N,)
        Bound constants ``psi_i = Ubar_{k,i}`` (eq. 12).
    remainder_fn : callable
        ``remainder_fn(rows) -> lambda_i`` for those rows (see
        :func:`poisson_thinning_test`).
    full_log_ratio_fn : callable
        ``full_log_ratio_fn() -> float``, the exact full-data log MH ratio
        ``log pi(theta') q(theta | theta') - log pi(theta) q(theta' | theta)``; only
        called on the truncation path. A NaN rejects.
    truncation : float, optional
        ``R``; default ``N = len(psi)``. ``math.inf`` never falls back.
    data_test : {"factorised", "poisson"}, default "factorised"
        How the data factor is tested: SMH's factorised test by Poisson thinning
        (:func:`poisson_thinning_test`, Cornish et al. 2019) or the Poisson auxiliary
        variables of MH-SS (:func:`poisson_estimator_test`, Prado et al. 2024). Both are
        exact and read ``phi * Psi`` rows on average.
    force_full : bool, default False
        Take the full-data test whatever the rate (e.g. a pair outside the region where
        region bounds hold; the rule must be symmetric in the pair).
    rtol, atol, chunk_size
        Passed to :func:`poisson_thinning_test`.

    Returns
    -------
    SMHResult

    Raises
    ------
    BoundViolationError
        If a drawn row violates ``lambda_i <= phi * psi_i``.
    """
    n_rows = len(psi)
    r_trunc = n_rows if truncation is None else truncation
    rate = float(phi) * float(psi_total)
    full = bool(force_full or rate >= r_trunc)
    lr = float(log_ratio_first)
    if not lr >= 0.0:  # first factor min(1, exp(lr)) < 1 (or NaN, which rejects)
        if lr != lr or not rng.random() < math.exp(lr):
            return SMHResult(False, 0, rate, full, 0)
    if full:
        # the rest of the ratio on all rows, as a second factor (delayed acceptance)
        log_r = float(full_log_ratio_fn()) - lr
        # NaN fails both comparisons and rejects.
        accept = log_r >= 0.0 or (log_r == log_r and rng.random() < math.exp(log_r))
        return SMHResult(bool(accept), n_rows, rate, True, 0)
    if data_test == "poisson":
        res = poisson_estimator_test(
            rng, phi, psi_total, alias, psi, remainder_fn, rtol=rtol, atol=atol
        )
    else:
        res = poisson_thinning_test(
            rng, phi, psi_total, alias, psi, remainder_fn,
            rtol=rtol, atol=atol, chunk_size=chunk_size,
        )
    return SMHResult(res.accept, res.data_used, rate, False, res.n_poisson)
