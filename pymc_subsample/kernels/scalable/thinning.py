"""Poisson thinning and the Poisson-estimator test: the data factor of an exact MH test.

Pure NumPy kernels for the data part of Scalable Metropolis-Hastings (Cornish, Vanetti,
Bouchard-Cote, Deligiannidis & Doucet 2019, "Scalable Metropolis-Hastings for Exact
Bayesian Inference with Large Datasets"; equation numbers below refer to that paper) and
of MH with scalable subsampling (Prado, Nemeth & Sherlock 2024). The step factors
``phi`` live in :mod:`pymc_subsample.kernels.scalable.phi`, the row sampler in
:mod:`pymc_subsample.kernels.sampling.inverse_cdf` and the whole SMH acceptance in
:mod:`pymc_subsample.kernels.scalable.smh`.

Notation (target ``pi(theta) ∝ exp(-U(theta))``, ``U = U_0 + sum_i U_i``):

* ``lambda_i(theta, theta') = max(0, (U_i - Uhat_{k,i})(theta') - (U_i - Uhat_{k,i})(theta))``
  is the negative log of the i-th data factor of the SMH acceptance (eq. 10/11);
* ``phi(theta, theta') * psi_i`` bounds it (eq. 3, with eq. 13 for ``phi`` and eq. 12,
  ``psi_i = Ubar_{k,i}``, for the constants); ``Psi = sum_i psi_i``;
* Algorithm 1 (Poisson thinning) accepts the factorised data part with probability
  exactly ``exp(-sum_i lambda_i)`` while touching ``phi * Psi`` rows on average.

Nothing here imports PyMC or PyTensor. Randomness comes only from the ``rng`` argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..sampling.alias import AliasTable
from ..sampling.inverse_cdf import InverseCDFTable

__all__ = [
    "BoundViolationError",
    "ThinningResult",
    "poisson_estimator_test",
    "poisson_thinning_test",
]


class BoundViolationError(ValueError):
    """A drawn row has ``lambda_i > phi * psi_i``: its bound (equation 3 or 12) is wrong.

    Poisson thinning (Algorithm 1) is only valid when every factor satisfies
    ``lambda_i(theta, theta') <= phi(theta, theta') * psi_i``. A violation means the
    bound constants ``psi_i`` (``Ubar_{k,i}``), the expansion point ``theta_hat`` and its
    derivatives, or the remainder function disagree (bounds or a centre given by hand,
    or data changed after the step computed its bounds from them); continuing would
    sample a wrong posterior, so the test stops.

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
            "theta_hat / its Taylor coefficients do not match the remainder function, and "
            "Scalable MH would not sample the posterior. Likely causes: (1) the data changed "
            "after the step was built (a data file written, truncated or replaced on disk, "
            "an array modified in place): build the step again on the final data; "
            "(2) bounds= or center= given by hand that do not hold for this model: fix "
            "them or use bounds='auto'; (3) a model outside the families whose bounds "
            "ScalableMH derives: fall back to full-data MH."
        )

    def __reduce__(self):
        # pickled by its constructor's arguments, so that the error raised in a worker of
        # pm.sample(cores>1) reaches the parent as itself, not as a TypeError of unpickling
        return (type(self), (self.row, self.lam, self.phi, self.psi))


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
    remainder_sum : float
        An estimate of ``sum_i d_i`` over all rows, ``d_i = R_i(theta') - R_i(theta)``
        the signed remainder differences that ``remainder_fn`` returns (before any
        clipping), from the rows read: ``K / m * sum_j d_j / (phi psi_j)`` over the ``m``
        rows evaluated (unbiased when all ``K`` are read; 0 when ``K = 0``), for the
        step's ``accept`` stat.
    """

    accept: bool
    n_poisson: int
    data_used: int
    poisson_rate: float
    remainder_sum: float = 0.0


_MAX_CHUNK = 1 << 16


def _evaluate_rows(remainder_fn, rows):
    """``remainder_fn`` at the drawn rows, each distinct row evaluated once.

    Returns the values for every entry of ``rows`` (repeats copied) and the number of
    distinct rows read. Poisson draws repeat rows when ``phi * Psi`` nears ``N``; reading a
    row once keeps ``data_used`` a count of rows (never above ``N`` within one call).
    """
    if len(rows) <= 1:
        uniq = ask = rows
    else:
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


def _candidate_count(rng, phi, psi_total, table, psi, test: str) -> tuple[float, int]:
    """``(phi * Psi, K)``, ``K ~ Poisson(phi * Psi)`` the number of candidate rows of both
    data tests (step 1 of Algorithm 1 of Cornish et al. 2019), after checking the rate
    and the row table (``test`` names the test in the errors). A zero rate draws
    nothing from ``rng`` and gives ``K = 0``."""
    rate = float(phi) * float(psi_total)
    if not rate > 0.0:
        if rate == 0.0:
            return 0.0, 0
        raise ValueError(
            f"{test} needs phi * Psi >= 0, got phi={phi!r}, Psi={psi_total!r}."
        )
    if rate == math.inf:
        raise ValueError(
            f"{test}: the rate phi * Psi is infinite; use the truncated test "
            "(smh_test falls back to full-data MH for large rates)."
        )
    if table is None:
        raise ValueError(f"{test} needs a row table when phi * Psi > 0.")
    if table.n != len(psi):
        raise ValueError(f"the row table has {table.n} rows but psi has {len(psi)}.")
    return rate, int(rng.poisson(rate))


def poisson_thinning_test(
    rng: np.random.Generator,
    phi: float,
    psi_total: float,
    table: InverseCDFTable | AliasTable | None,
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
        ``phi(theta, theta')`` (eq. 13; see
        :func:`~pymc_subsample.kernels.scalable.phi.taylor_phi`), >= 0.
    psi_total : float
        ``Psi = sum_i psi_i``.
    table : InverseCDFTable or AliasTable or None
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
    ``P(accept) = exp(-sum_i lambda_i)`` up to the row table's grid rounding, which
    shifts ``log P(accept)`` by at most about ``phi * Psi * 2**-bits`` (see
    :class:`~pymc_subsample.kernels.sampling.inverse_cdf.InverseCDFTable`). Expected rows evaluated: at most
    ``phi * Psi``.
    """
    rate, k_total = _candidate_count(rng, phi, psi_total, table, psi, "Poisson thinning")
    if k_total == 0:
        return ThinningResult(True, 0, 0, rate)

    phi = float(phi)
    remaining = k_total
    used = 0
    weighted = 0.0  # sum_j lambda_j / bound_j over the rows evaluated
    chunk = max(1, int(chunk_size))
    while remaining:
        m = remaining if remaining <= chunk else chunk
        rows = table.sample(rng, m)
        lam, n_read = _evaluate_rows(remainder_fn, rows)
        used += n_read
        bound = _checked_bound(lam, rows, phi, psi, rtol, atol)
        weighted += float(np.sum(lam / bound))
        # B_j = 1 iff u_j < lambda_j / bound_j (bound_j > 0: psi_i = 0 rows are never drawn).
        u = rng.random(m)
        remaining -= m
        if (u * bound < lam).any():
            return ThinningResult(False, k_total, used, rate,
                                  weighted * k_total / (k_total - remaining))
        if chunk < _MAX_CHUNK:
            chunk = min(2 * chunk, _MAX_CHUNK)
    return ThinningResult(True, k_total, used, rate, weighted)


def poisson_estimator_test(
    rng: np.random.Generator,
    phi: float,
    psi_total: float,
    table: InverseCDFTable | AliasTable | None,
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
    rng, phi, psi_total, table, psi, rtol, atol
        As in :func:`poisson_thinning_test`. The bound must hold for ``|D_i|`` (both
        directions of the move), which every bound of this module does.
    remainder_fn : callable
        ``remainder_fn(rows) -> D`` (the raw, signed differences).

    Returns
    -------
    ThinningResult
    """
    rate, k_total = _candidate_count(rng, phi, psi_total, table, psi, "the Poisson estimator")
    if k_total == 0:
        return ThinningResult(True, 0, 0, rate)
    rows = table.sample(rng, k_total)
    dif, n_read = _evaluate_rows(remainder_fn, rows)
    bound = _checked_bound(np.abs(dif), rows, float(phi), psi, rtol, atol)
    estimate = float(np.sum(dif / bound))
    f = np.maximum(bound + np.minimum(0.0, dif), 0.0)
    fp = np.maximum(bound - np.maximum(0.0, dif), 0.0)
    kept = rng.random(k_total) * bound < f
    if not kept.any():
        return ThinningResult(True, k_total, n_read, rate, estimate)
    f, fp = f[kept], fp[kept]
    if np.any(fp <= 0.0):
        return ThinningResult(False, k_total, n_read, rate, estimate)
    log_r = float(np.sum(np.log(fp) - np.log(f)))
    accept = log_r >= 0.0 or rng.random() < math.exp(log_r)
    return ThinningResult(bool(accept), k_total, n_read, rate, estimate)
