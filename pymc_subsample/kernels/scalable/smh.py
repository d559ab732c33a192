"""The truncated Scalable Metropolis-Hastings (SMH) acceptance test.

Cornish, Vanetti, Bouchard-Cote, Deligiannidis & Doucet (2019), "Scalable
Metropolis-Hastings for Exact Bayesian Inference with Large Datasets"; equation numbers
below refer to that paper. The data-free first factor of the SMH acceptance (eq. 10) is
tested here; the data factors by :mod:`pymc_subsample.kernels.scalable.thinning`. Truncation
(eq. 6, TFMH) replaces the factorised test by the ordinary full-data MH test whenever
``phi * Psi >= R``.

Nothing here imports PyMC or PyTensor. Randomness comes only from the ``rng`` argument.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..acceptance.outcome import AcceptanceOutcome
from ..sampling.alias import AliasTable
from ..sampling.inverse_cdf import InverseCDFTable
from .thinning import poisson_estimator_test, poisson_thinning_test

__all__ = ["SMHResult", "smh_test"]


@dataclass(frozen=True, slots=True)
class SMHResult(AcceptanceOutcome):
    """Outcome of :func:`smh_test`: an
    :class:`~pymc_subsample.kernels.acceptance.outcome.AcceptanceOutcome` whose
    ``data_used`` counts ``N`` for the full-data fallback, else the thinning rows, and

    Attributes
    ----------
    poisson_rate : float
        ``phi * Psi``, the expected rows of the thinning test.
    fallback : bool
        True when the truncation rule (``phi * Psi >= R``) or ``force_full`` chose the
        full-data test (its rows are read only if the first factor accepted).
    n_poisson : int
        ``K`` of the thinning test (0 when it was not run).
    log_ratio : float
        The log MH ratio as far as the test saw it: exact after the full-data test,
        else ``log_ratio_first`` minus the data test's estimate of the signed remainder
        differences' sum ``sum_i R_i(theta') - R_i(theta)`` (minus nothing when no row
        was read): the MH log ratio, estimated, for the step's ``accept`` stat. The
        factorised test accepts with a probability at most ``min(1, exp(log_ratio))``.
    """

    poisson_rate: float
    fallback: bool
    n_poisson: int = 0
    log_ratio: float = math.nan


def smh_test(
    rng: np.random.Generator,
    log_ratio_first: float,
    phi: float,
    psi_total: float,
    table: InverseCDFTable | AliasTable | None,
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
      (Algorithm 1, :func:`~pymc_subsample.kernels.scalable.thinning.poisson_thinning_test`), which uses its own independent
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
        ``phi(theta, theta')`` from :func:`~pymc_subsample.kernels.scalable.phi.taylor_phi`
        (eq. 13).
    psi_total : float
        ``Psi = sum_i psi_i``.
    table : InverseCDFTable or AliasTable or None
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
            return SMHResult(False, 0, rate, full, 0, lr)
    if full:
        # the rest of the ratio on all rows, as a second factor (delayed acceptance)
        full_lr = float(full_log_ratio_fn())
        log_r = full_lr - lr
        # NaN fails both comparisons and rejects.
        accept = log_r >= 0.0 or (log_r == log_r and rng.random() < math.exp(log_r))
        return SMHResult(bool(accept), n_rows, rate, True, 0, full_lr)
    if data_test == "poisson":
        res = poisson_estimator_test(
            rng, phi, psi_total, table, psi, remainder_fn, rtol=rtol, atol=atol
        )
    else:
        res = poisson_thinning_test(
            rng, phi, psi_total, table, psi, remainder_fn,
            rtol=rtol, atol=atol, chunk_size=chunk_size,
        )
    return SMHResult(res.accept, res.data_used, rate, False, res.n_poisson,
                     lr - res.remainder_sum)
