"""Optimal design of the Austerity MH sequential test (Sec. 5.2).

Section 5.2 of Korattikara, Chen & Welling (2014), "Austerity in MCMC Land: Cutting the
Metropolis-Hastings Budget": choose the first batch size ``m`` and the per-test level
``epsilon`` of :func:`pymc_subsample.kernels.acceptance.austere.austere_test` that use the least
data on average subject to a bound on the error of the whole sequential test (eq. 8,
worst case, or eq. 7, averaged over pairs of a trial run), with the error and data use
of each grid point from the dynamic programme of
:func:`pymc_subsample.kernels.acceptance.austere_dp.sequential_test_dp` (Sec. 5.1). Pure
NumPy/SciPy; no PyMC.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import check_epsilon, check_int, check_real
from .austere_dp import sequential_test_dp

__all__ = [
    "AusterityDesign",
    "design_austerity_test",
    "DEFAULT_BATCH_SIZES",
    "DEFAULT_EPSILONS",
]

DEFAULT_BATCH_SIZES = (100, 200, 500, 1000, 2000, 5000, 10000)
DEFAULT_EPSILONS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3)


@dataclass(frozen=True)
class AusterityDesign:
    """Result of :func:`design_austerity_test`.

    Attributes
    ----------
    batch_size, epsilon : int, float
        The chosen design (``epsilon == 0`` means no grid point met the bound and exact
        MH is the design).
    expected_data_use : float
        Expected fraction of ``N`` used per test under the criterion's averaging.
    error : float
        The constrained error of the chosen design (0 for exact MH).
    criterion : str
        ``"worst-case"`` (eq. 8), ``"average-decision"`` (mean of ``E(mu_std)`` over the
        supplied samples) or ``"average-acceptance"`` (mean ``|Delta|`` of eq. 6-7).
    max_error : float
        The bound.
    n_total : int
    batch_sizes, epsilons : numpy.ndarray
        The grid searched.
    error_grid, data_use_grid : numpy.ndarray
        Shape ``(len(batch_sizes), len(epsilons))``.
    feasible : bool
        False when no grid point met the bound (the exact test is returned).

    Two designs are equal (and hash alike) when the choice, its error and data use, the
    criterion, the bound and ``N`` are: the grid arrays are left out of the comparison,
    as they are of the repr.
    """

    batch_size: int
    epsilon: float
    expected_data_use: float
    error: float
    criterion: str
    max_error: float
    n_total: int
    batch_sizes: np.ndarray = field(repr=False, compare=False)
    epsilons: np.ndarray = field(repr=False, compare=False)
    error_grid: np.ndarray = field(repr=False, compare=False)
    data_use_grid: np.ndarray = field(repr=False, compare=False)
    feasible: bool = True


def design_austerity_test(
    n_total: int,
    *,
    max_error: float = 0.05,
    mu_std=None,
    pair_stats=None,
    batch_sizes=None,
    epsilons=None,
    merge_step: float = 0.05,
) -> AusterityDesign:
    """Optimal sequential test design by grid search (Sec. 5.2, eqs 7-8).

    Picks ``(batch_size m, epsilon)`` on a grid minimising the expected data use subject
    to an error bound (batch increment = ``m``, as in Algorithm 1):

    * **worst case** (neither ``mu_std`` nor ``pair_stats``; eq. 8): minimise
      ``pi_bar(0, m, epsilon)`` s.t. ``E(0, m, epsilon) <= max_error``. ``E(0)`` bounds
      the error of every test and needs no trial run, but is conservative.
    * **average, from standardised means** (``mu_std``: samples of ``mu_std`` over
      ``(theta, theta', u)`` from a trial run, see :func:`~pymc_subsample.kernels.acceptance.austere_error.standardized_mean`): minimise
      the sample mean of ``pi_bar(mu_std)`` s.t. the sample mean of ``E(mu_std)`` (the
      average probability that the decision differs from exact MH, an upper bound on the
      average ``|Delta|`` of eq. 6) is ``<= max_error``.
    * **average, eq. 7** (``pair_stats=(l_mean, l_sd, log_ratio_o1)``, arrays over the
      trial-run pairs; ``l_sd`` with ``ddof=0``): minimise the pair average of
      ``E_u[pi_bar]`` s.t. the pair average of ``|Delta(theta, theta')|`` (eq. 6, with
      ``u`` integrated out exactly) is ``<= max_error``.

    If no grid point meets the bound, the exact test (``epsilon = 0``) is returned with
    ``feasible=False``.

    Parameters
    ----------
    n_total : int
        ``N``.
    max_error : float, default 0.05
        Bound on the chosen error measure, in ``(0, 1)``.
    mu_std : array_like, optional
        Standardised means for the average design.
    pair_stats : tuple of array_like, optional
        ``(l_mean, l_sd, log_ratio_o1)`` per trial pair for the eq. 7 design.
    batch_sizes : sequence of int, optional
        Grid of ``m`` (default :data:`DEFAULT_BATCH_SIZES`, those below ``N``).
    epsilons : sequence of float, optional
        Grid of ``epsilon`` in ``(0, 0.5)`` (default :data:`DEFAULT_EPSILONS`).
    merge_step : float
        Passed to :func:`~pymc_subsample.kernels.acceptance.austere_dp.sequential_test_dp`.

    Returns
    -------
    AusterityDesign
    """
    n_total = check_int("n_total", n_total, 2)
    max_error = check_real("max_error", max_error, 0.0, 1.0)
    if mu_std is not None and pair_stats is not None:
        raise ValueError("give at most one of mu_std and pair_stats.")
    if batch_sizes is None:
        ms = [m for m in DEFAULT_BATCH_SIZES if m < n_total] or [max(2, n_total // 2)]
    else:
        ms = [check_int("batch_sizes", m, 2) for m in np.atleast_1d(batch_sizes)]
        if not ms:
            raise ValueError("batch_sizes must not be empty.")
    if epsilons is None:
        eps = list(DEFAULT_EPSILONS)
    else:
        eps = [check_epsilon(e) for e in np.atleast_1d(epsilons)]
        if not eps:
            raise ValueError("epsilons must not be empty.")
        if any(e == 0 for e in eps):
            raise ValueError("epsilons must be positive (epsilon = 0 is the exact fallback).")

    if mu_std is not None:
        z = np.asarray(mu_std, dtype=float).ravel()
        if z.size == 0 or np.any(np.isnan(z)):
            raise ValueError("mu_std must be a non-empty array without NaN.")
        criterion = "average-decision"
    elif pair_stats is not None:
        try:
            l_mean, l_sd, o1 = pair_stats
        except (TypeError, ValueError):
            raise ValueError("pair_stats must be a tuple (l_mean, l_sd, log_ratio_o1).") from None
        criterion = "average-acceptance"
    else:
        criterion = "worst-case"

    err = np.zeros((len(ms), len(eps)))
    use = np.ones((len(ms), len(eps)))
    for i, m in enumerate(ms):
        for j, e in enumerate(eps):
            dp = sequential_test_dp(n_total, m, e, merge_step=merge_step)
            if criterion == "worst-case":
                ee, uu = dp.evaluate(0.0)
                err[i, j], use[i, j] = float(ee), float(uu)
            elif criterion == "average-decision":
                ee, uu = dp.interpolate(z)
                err[i, j], use[i, j] = ee.mean(), uu.mean()
            else:
                dd, uu = dp.acceptance_error(l_mean, l_sd, o1)
                err[i, j], use[i, j] = np.abs(dd).mean(), uu.mean()

    feasible = err <= max_error
    if feasible.any():
        score = np.where(feasible, use, np.inf)
        best = np.flatnonzero(score == score.min())
        i, j = np.unravel_index(best[np.argmin(err.ravel()[best])], err.shape)
        return AusterityDesign(
            batch_size=int(ms[i]), epsilon=float(eps[j]), expected_data_use=float(use[i, j]),
            error=float(err[i, j]), criterion=criterion, max_error=max_error,
            n_total=n_total, batch_sizes=np.asarray(ms), epsilons=np.asarray(eps),
            error_grid=err, data_use_grid=use, feasible=True,
        )
    return AusterityDesign(
        batch_size=int(max(ms)), epsilon=0.0, expected_data_use=1.0, error=0.0,
        criterion=criterion, max_error=max_error, n_total=n_total,
        batch_sizes=np.asarray(ms), epsilons=np.asarray(eps), error_grid=err,
        data_use_grid=use, feasible=False,
    )
