"""Austerity MH: the approximate Metropolis-Hastings test as a sequential t-test.

Implements the accept/reject rule of Korattikara, Chen & Welling (2014), "Austerity in
MCMC Land: Cutting the Metropolis-Hastings Budget" (Algorithm 1, eqs 2-5), as a pure
function of a random generator and a callable that evaluates data rows. Nothing here
imports PyMC or PyTensor.

The exact MH rule, rewritten as in eqs 2-3 of the paper: draw ``u ~ U(0, 1)`` and accept
iff the population mean ``mu = (1/N) sum_i l_i`` of the per-row log-likelihood
differences ``l_i = log p(x_i | theta') - log p(x_i | theta)`` exceeds

    mu_0 = (log u - log_ratio_o1) / N,

with ``log_ratio_o1 = log p(theta') - log p(theta) + log q(theta | theta') -
log q(theta' | theta)`` the data-free part of the log MH ratio. Algorithm 1 estimates
``mu`` from a growing sample of rows drawn without replacement and stops as soon as a
one-sample t-test separates the sample mean from ``mu_0`` at level ``epsilon``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special

from .._validation import (
    InvalidParameterError,
    check_callable,
    check_epsilon,
    check_float,
    check_int,
    check_real,
)
from .nonfinite import undecidable
from .outcome import AcceptanceOutcome
from ..sampling.rows import RowSampler
from ..variance.streaming import batch_moments, merge_moments

__all__ = ["AustereResult", "austere_test"]


@dataclass(frozen=True, slots=True)
class AustereResult(AcceptanceOutcome):
    """Outcome of one approximate MH test (Algorithm 1 of Korattikara et al. 2014): an
    :class:`~pymc_subsample.kernels.acceptance.outcome.AcceptanceOutcome` whose
    ``data_used`` counts the distinct rows whose ``l_i`` were evaluated (``n`` when the
    test stopped), and

    Attributes
    ----------
    n_batches : int
        Number of calls made to ``loglik_diff``.
    exact : bool
        True when the decision is certainly the exact MH decision for this ``u``: all
        ``N`` rows were used, ``log_ratio_o1`` was ``-inf``, or some ``l_i`` was ``-inf``
        (the full-data log ratio is then ``-inf`` whatever the unseen rows hold).
    mean : float
        Sample mean ``l_bar`` of the ``l_i`` used (NaN when no row was used).
    mu_0 : float
        The threshold of eq. 2 (NaN when ``log_ratio_o1`` is not finite).
    sd : float
        Estimated standard deviation ``s`` of ``l_bar`` at the last stage, eq. 4 (0 when
        all rows were used, NaN when not computed).
    t : float
        Test statistic of eq. 5 at the last stage (NaN when not computed).
    delta : float
        ``1 - Phi_{n-1}(|t|)`` at the last stage (NaN when not computed).
    log_u : float
        Log of the uniform variate the decision was made for.
    nonfinite : bool
        True when the test stopped on a non-finite input it cannot decide on
        (NaN or ``+inf`` ``log_ratio_o1``, NaN or ``+inf`` among the ``l_i``) and
        rejected defensively. The step method should warn.
    first_batch : numpy.ndarray or None
        The ``l_i`` of the first batch, when requested with ``return_first_batch=True``
        (the step pools them: :class:`~pymc_subsample.kernels.acceptance.clt_error.PooledSkewness`).
    """

    n_batches: int
    exact: bool
    mean: float
    mu_0: float
    sd: float
    t: float
    delta: float
    log_u: float
    nonfinite: bool = False
    first_batch: np.ndarray | None = None


def _contiguous_rows(n_total: int):
    """Row source for epsilon = 0: every row is read, so order does not matter."""
    state = {"start": 0}

    def draw(m: int) -> np.ndarray:
        start = state["start"]
        stop = min(start + int(m), n_total)
        state["start"] = stop
        return np.arange(start, stop, dtype=np.int64)

    return draw


_NAN = float("nan")


def austere_test(
    rng: np.random.Generator,
    loglik_diff: Callable[[np.ndarray], np.ndarray],
    n_total: int,
    log_ratio_o1: float,
    *,
    epsilon: float = 0.05,
    batch_size: int = 500,
    batch_increment: int | None = None,
    log_u: float | None = None,
    sampler: RowSampler | None = None,
    return_first_batch: bool = False,
    fpc: bool = True,
    exact_sum: Callable[[], float] | None = None,
    check: bool = True,
) -> AustereResult:
    """Approximate MH test as a sequential t-test (Algorithm 1, eqs 2-5).

    Draws ``u ~ U(0, 1)`` (Algorithm 1, line 3) unless ``log_u`` is given, sets
    ``mu_0 = (log u - log_ratio_o1) / N`` (eq. 2), then repeatedly draws a mini-batch of
    rows without replacement, updates the sample mean ``l_bar`` and standard deviation
    ``s_l`` of the ``l_i`` seen so far, and computes (eqs 4-5)

        s = s_l / sqrt(n) * sqrt(1 - (n - 1) / (N - 1)),    t = (l_bar - mu_0) / s,
        delta = 1 - Phi_{n-1}(|t|)

    with ``Phi_{n-1}`` the Student-t cdf with ``n - 1`` degrees of freedom. It stops when
    ``delta < epsilon`` and accepts iff ``l_bar > mu_0`` (Algorithm 1, lines 9-11).
    When all ``N`` rows have been used the decision is the exact MH decision
    ``log u < log_ratio_o1 + sum_i l_i`` (no t-test), so ``epsilon = 0`` reproduces exact
    MH draw for draw for the same ``u``.

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness (``u``, then the rows).
    loglik_diff : callable
        ``loglik_diff(rows) -> ndarray``: ``l_i`` for an int64 array of row indices, same
        shape.
    n_total : int
        Number of data rows ``N``.
    log_ratio_o1 : float
        Data-free part of the log MH ratio: log prior ratio (with Jacobian) plus log
        proposal ratio ``log q(theta | theta') - log q(theta' | theta)``.
    epsilon : float, default 0.05
        Level of each individual t-test, in ``[0, 0.5)``; ``0`` gives exact MH. Note the
        error of the whole sequential test is larger (Sec. 5.1; see
        :mod:`pymc_subsample.kernels.acceptance.austere_design`).
    batch_size : int, default 500
        Size ``m`` of the first mini-batch. The paper recommends ``m ~ 500`` so that the
        CLT holds for the mean.
    batch_increment : int, optional
        Rows added per further stage (default ``batch_size``, as in Algorithm 1).
    log_u : float, optional
        ``log u`` to use instead of drawing ``u`` (in ``[-inf, 0]``). When omitted,
        ``log u = log(1 - rng.random())`` (``u`` in ``(0, 1]``), the first draw from ``rng``.
    sampler : RowSampler, optional
        A fresh :class:`~pymc_subsample.kernels.sampling.rows.RowSampler` over ``n_total`` rows to
        draw from (e.g. to inspect the rows used afterwards). Default: a new one on
        ``rng``. When ``epsilon == 0`` and no sampler is given, rows are read in order
        (every row is read, so no sampling is needed).
    return_first_batch : bool, default False
        Store the first batch's ``l_i`` in the result (for the step's pooled check of
        the normal approximation, :mod:`pymc_subsample.kernels.acceptance.clt_error`).
    fpc : bool, default True
        Apply the finite-population correction of eq. 4 (rows drawn without
        replacement). ``False`` for i.i.d. draws, e.g. the importance-sampled terms
        ``l_i / (N p_i)`` of El hanchi (2019, Sec. 5), whose mean estimates ``mu`` too.
    exact_sum : callable, optional
        ``exact_sum() -> sum_i l_i`` over all ``N`` rows. With i.i.d. draws, ``N`` draws
        do not cover every row: once ``N`` values have been drawn the decision is taken
        on this full-data sum instead (the exact MH decision for this ``u``).
    check : bool, default True
        Whether to validate the arguments here; AustereMH passes False, having checked
        its settings when it was built.

    Returns
    -------
    AustereResult

    Notes
    -----
    Non-finite inputs are decided without statistics:

    * ``log_ratio_o1`` is ``-inf`` (zero prior or zero reverse-proposal density at
      ``theta'``): reject, no data used; this is the exact MH decision (``exact=True``).
    * ``log_ratio_o1`` is NaN: reject, no data used, ``nonfinite=True``.
    * ``log_ratio_o1`` is ``+inf``: **reject**, no data used, ``nonfinite=True``. A
      ``+inf`` data-free ratio can only come from a current state with zero prior
      density or from a proposal density that underflowed at the proposed point; both
      are bugs upstream. Accepting would move the chain to a point whose likelihood was
      never evaluated (it may be zero, after which every later test is NaN), while
      rejecting leaves a visible, diagnosable stuck chain. The step method warns.
    * some ``l_i`` is ``-inf`` (zero likelihood at ``theta'`` for a row): reject; the
      full-data ratio is ``-inf``, so this is the exact decision (``exact=True``).
    * some ``l_i`` is NaN or ``+inf`` (zero likelihood at the current state): reject,
      ``nonfinite=True``, for the same reasons as a ``+inf`` ``log_ratio_o1``.

    A sample with zero spread (all ``l_i`` equal) and ``l_bar != mu_0`` gives ``|t| =
    inf`` and an immediate decision, as Algorithm 1 would; this is exactly the sparse-data
    failure the paper warns about.
    """
    if check:
        n_total, epsilon, batch_size, batch_increment, log_ratio_o1 = _check_args(
            loglik_diff, n_total, log_ratio_o1, epsilon, batch_size, batch_increment)
    increment = batch_size if batch_increment is None else batch_increment
    o1 = log_ratio_o1
    lu = _draw_log_u(rng, log_u)
    draw = _row_source(rng, n_total, epsilon, sampler)
    if not math.isfinite(o1):
        # Decided without touching the data (see Notes).
        bad = undecidable(o1)
        return AustereResult(
            accept=False, data_used=0, n_batches=0, exact=not bad,
            mean=_NAN, mu_0=_NAN, sd=_NAN, t=_NAN, delta=_NAN, log_u=lu, nonfinite=bad,
        )
    return _sequential_test(
        draw, loglik_diff, n_total, o1, lu, epsilon=epsilon, batch_size=batch_size,
        increment=increment, return_first_batch=return_first_batch, fpc=fpc,
        exact_sum=exact_sum,
    )


def _check_args(loglik_diff, n_total, log_ratio_o1, epsilon, batch_size, batch_increment):
    """The arguments of :func:`austere_test`, checked: ``(n_total, epsilon, batch_size,
    batch_increment, log_ratio_o1)`` as ``int``/``float``."""
    n_total = check_int("n_total", n_total, 1)
    epsilon = check_epsilon(epsilon)
    batch_size = check_int("batch_size", batch_size, 1)
    if batch_increment is not None:
        batch_increment = check_int("batch_increment", batch_increment, 1)
    check_callable("loglik_diff", loglik_diff, signature="loglik_diff(rows) -> ndarray")
    log_ratio_o1 = check_float("log_ratio_o1", log_ratio_o1)
    return n_total, epsilon, batch_size, batch_increment, log_ratio_o1


def _draw_log_u(rng, log_u):
    """``log u`` of Algorithm 1, line 3: ``log(1 - U)`` with ``U = rng.random()``, so
    ``u`` lies in ``(0, 1]``; or the given ``log_u``, checked to lie in ``[-inf, 0]``."""
    if log_u is None:
        return math.log1p(-rng.random())
    return check_real("log_u", log_u, -math.inf, 0.0, closed="both",
                      what="a float in [-inf, 0]")


def _row_source(rng, n_total, epsilon, sampler):
    """``draw(m) -> rows``: the given fresh ``sampler``'s, rows in order for the exact test
    (``epsilon == 0``: every row is read), else a new :class:`RowSampler` on ``rng``."""
    if sampler is not None:
        if getattr(sampler, "n_total", None) != n_total:
            raise InvalidParameterError(
                f"sampler draws from {getattr(sampler, 'n_total', None)} rows, but "
                f"n_total={n_total}."
            )
        if getattr(sampler, "n_drawn", 0) != 0:
            raise InvalidParameterError("sampler must be fresh (no rows drawn yet).")
        return sampler.draw
    if epsilon == 0.0:
        return _contiguous_rows(n_total)
    return RowSampler(n_total, rng).draw


def _read_batch(draw, loglik_diff, size):
    """The ``l_i`` of ``size`` new rows (fewer at the end of the data), as float64."""
    rows = draw(size)
    lvals = np.asarray(loglik_diff(rows), dtype=np.float64)
    if lvals.shape != rows.shape:
        raise ValueError(
            f"loglik_diff returned shape {lvals.shape} for {rows.shape[0]} rows."
        )
    if rows.shape[0] == 0:
        raise ValueError("sampler returned no rows before all n_total rows were drawn.")
    return lvals


def _sequential_test(draw, loglik_diff, n_total, o1, lu, *, epsilon, batch_size, increment,
                     return_first_batch, fpc, exact_sum):
    """The loop of Algorithm 1 (lines 4-12) for a finite ``log_ratio_o1``: read batches,
    merge their moments, stop on a non-finite batch (:func:`undecidable`), on all ``N``
    rows (:func:`_all_rows_result`) or when the t-test decides (:func:`_t_test_stage`)."""
    mu0 = (lu - o1) / n_total  # eq. 2
    n = 0
    k = 0
    mean = 0.0
    m2 = 0.0
    total = 0.0
    first = None
    size = batch_size
    while True:
        lvals = _read_batch(draw, loglik_diff, size)
        k += 1
        if return_first_batch and k == 1:
            first = lvals.copy()
        nb = lvals.shape[0]
        bsum = float(lvals.sum())
        if not math.isfinite(bsum):  # -inf only: exact reject; NaN or +inf: undecidable
            bad = undecidable(lvals)
            return AustereResult(
                accept=False, data_used=n + nb, n_batches=k, exact=not bad,
                mean=_NAN, mu_0=mu0, sd=_NAN, t=_NAN, delta=_NAN,
                log_u=lu, nonfinite=bad, first_batch=first,
            )
        # running mean and sum of squared deviations, merged batch by batch (Chan et al.)
        bmean, bm2 = batch_moments(lvals, bsum)
        n, mean, m2 = merge_moments(n, mean, m2, nb, bmean, bm2)
        total += bsum
        if n >= n_total:
            return _all_rows_result(n, k, mean, total, n_total, o1, lu, mu0, first, exact_sum)
        if epsilon > 0.0 and n >= 2:
            result = _t_test_stage(n, k, mean, m2, n_total, mu0, lu, epsilon, fpc, first)
            if result is not None:
                return result
        size = increment


def _all_rows_result(n, k, mean, total, n_total, o1, lu, mu0, first, exact_sum):
    """All data seen: the exact MH decision ``log u < log_ratio_o1 + sum_i l_i``, no t-test
    (Algorithm 1 with ``s = 0``); with ``exact_sum`` (i.i.d. draws), on its full-data sum."""
    if exact_sum is not None:
        full = float(exact_sum())
        return AustereResult(
            accept=bool(lu < o1 + full), data_used=n_total, n_batches=k, exact=True,
            mean=full / n_total, mu_0=mu0, sd=0.0, t=_NAN, delta=_NAN, log_u=lu,
            first_batch=first,
        )
    return AustereResult(
        accept=bool(lu < o1 + total), data_used=n, n_batches=k, exact=True,
        mean=mean, mu_0=mu0, sd=0.0, t=_NAN, delta=_NAN, log_u=lu,
        first_batch=first,
    )


def _t_test_stage(n, k, mean, m2, n_total, mu0, lu, epsilon, fpc, first):
    """One t-test of Algorithm 1 (lines 7-11) on ``n >= 2`` rows: the result when
    ``delta = 1 - Phi_{n-1}(|t|) < epsilon``, else ``None`` (read more rows)."""
    # eq. 4: standard error of l_bar with the finite population correction.
    corr = (1.0 - (n - 1) / (n_total - 1)) if fpc else 1.0
    sd = math.sqrt(m2 / (n - 1) / n * corr)
    diff = mean - mu0
    if sd > 0.0:
        t = diff / sd  # eq. 5
    elif diff != 0.0:
        t = math.copysign(math.inf, diff)
    else:
        t = _NAN
    if t != t:  # NaN: no decision at this stage
        return None
    delta = float(special.stdtr(n - 1, -abs(t)))  # 1 - Phi_{n-1}(|t|)
    if delta < epsilon:
        return AustereResult(
            accept=diff > 0.0, data_used=n, n_batches=k, exact=False,
            mean=mean, mu_0=mu0, sd=sd, t=t, delta=delta, log_u=lu,
            first_batch=first,
        )
    return None
