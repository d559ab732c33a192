"""The minibatch Barker acceptance test (Seita, Pan, Chen & Canny 2017, Algorithm 1).

"An Efficient Minibatch Acceptance Test for Metropolis-Hastings", UAI 2017. The
exact Barker test accepts iff ``Delta + X_log > 0`` with ``X_log`` standard logistic
(Equation 10). The minibatch test replaces ``Delta`` by its minibatch estimate
``Delta*`` (Equation 8), which is approximately ``N(Delta, s^2)``, adds
``X_nc ~ N(0, sigma^2 - s^2)`` to make the Gaussian part have variance ``sigma^2`` and
``X_corr ~ C_sigma`` so that ``N(0, sigma^2) + X_corr`` is logistic (Equations 12-13),
and grows the minibatch until ``s^2 < sigma^2`` and the CLT error bound of Corollary 1
is at most ``delta`` (then, by Corollary 2, the acceptance probability is within
``delta`` of the exact Barker test's, plus the table's ``cdf_error``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._validation import InvalidParameterError, check_choice, check_int, check_real
from .barker_correction import CorrectionDistribution, default_correction
from .nonfinite import undecidable
from .outcome import AcceptanceOutcome
from ..sampling.rows import RowSampler
from ..variance.streaming import batch_moments, merge_moments

__all__ = ["BarkerResult", "barker_test", "clt_error_bound", "BE_CONST_3", "BE_CONST_1"]

#: Constants of the Berry-Esseen-type bound of Lemma 3 (Equation 17):
#: ``sup_x |P(t < x) - Phi(x)| <= (6.4 E|X|^3 + 2 E|X|) / sqrt(n)``, unit-variance ``X``.
BE_CONST_3 = 6.4
BE_CONST_1 = 2.0


@dataclass(frozen=True, slots=True)
class BarkerResult(AcceptanceOutcome):
    """Outcome of one minibatch Barker test: an
    :class:`~pymc_subsample.kernels.acceptance.outcome.AcceptanceOutcome` whose
    ``data_used`` counts the distinct rows evaluated (``n`` at the decision; ``N`` if
    exact), and

    Attributes
    ----------
    n_batches : int
        Number of calls made to ``loglik_diff`` (0 if decided without data).
    clt_error : float
        The CLT error estimate ``eps`` of Corollary 1 at the decision (0.0 when the
        decision involved no normal approximation: exact test or non-finite terms).
    delta_var : float
        The variance estimate ``s^2`` of ``Delta*`` used for ``X_nc`` (0.0 if exact).
    exact : bool
        True iff the minibatch grew to all ``N`` rows and the exact Barker test
        (Equation 10) was used.
    delta_star : float
        The log acceptance ratio estimate ``Delta*`` (equal to ``Delta`` if exact).
    lemma3_error : float
        The paper's own bound at the decision: Lemma 3 / Corollary 1 (Equations 17 and
        19) on the batch, reported beside ``clt_error`` whichever ``error`` was
        compared with ``delta`` (0.0 when no normal approximation was used).
    noise : float
        The noise the decision added to ``Delta*``: ``X_nc + X_corr``, or ``X_log`` for
        the exact test (NaN when decided without noise). The exact decision for the same
        randomness is ``Delta + noise > 0`` (used by the steps' decision audit).
    nonfinite : bool
        The test met a NaN or ``+inf`` term (or data-free ratio) and rejected.
    """

    n_batches: int
    clt_error: float
    delta_var: float
    exact: bool
    delta_star: float
    lemma3_error: float = 0.0
    noise: float = math.nan
    nonfinite: bool = False


def clt_error_bound(l: np.ndarray, mean: float | None = None, sd: float | None = None) -> float:
    """CLT error estimate of Lemma 3 / Corollary 1 (Equations 17 and 19), standardised.

    ``eps = (6.4 * m3 + 2 * m1) / sqrt(n)`` with
    ``m_k = (1/n) sum_i |l_i - mean|^k / sd^k`` the sample estimates of ``E|Z|^k`` for
    the standardised terms ``Z = (l - mu) / sigma_l`` (Lemma 3 is stated for
    unit-variance terms; the bound is invariant to the scale of ``l`` this way).

    Parameters
    ----------
    l : ndarray, shape (n,)
        The minibatch terms (tempered log-likelihood differences).
    mean, sd : float, optional
        Sample mean and standard deviation (``n - 1`` divisor) of ``l``; computed if
        omitted.

    Returns
    -------
    float
        ``inf`` if ``n < 2`` or ``sd == 0`` (no variability seen: no bound possible).
    """
    n = l.size
    if n < 2:
        return math.inf
    if mean is None:
        mean = float(l.mean())
    if sd is None:
        sd = float(l.std(ddof=1))
    if not sd > 0:
        return math.inf
    m1, m3 = _abs_moments(l, mean, sd)
    return (BE_CONST_3 * m3 + BE_CONST_1 * m1) / math.sqrt(n)


def _abs_moments(l: np.ndarray, mean: float, sd: float) -> tuple[float, float]:
    """``(m1, m3)``: the standardised first and third absolute moments of the batch,
    ``m_k = (1/n) sum_i |l_i - mean|^k / sd^k``, from one pass."""
    # Plain sums, not np.dot: OpenBLAS runs 1-D dot products of more than 10^4 elements on
    # several threads, which costs milliseconds per call on a busy machine (this is called
    # once per growth step once the batch is large).
    d = np.abs(l - mean)
    d *= 1.0 / sd
    m1 = float(d.sum())
    d3 = d * d
    d3 *= d
    return m1 / l.size, float(d3.sum()) / l.size


def _check_args(n_total, batch_size, batch_increment, delta, temperature):
    own = "barker_test"
    check_int("n_total", n_total, 1, strict=True, owner=own)
    check_int("batch_size", batch_size, 1, maximum=n_total, maximum_text=f"n_total={n_total}",
              strict=True, owner=own)
    if batch_increment is not None:
        check_int("batch_increment", batch_increment, 1, strict=True, owner=own)
    check_real("delta", delta, 0.0, math.inf, closed="right", strict=True, owner=own)
    check_real("temperature", temperature, 0.0, math.inf, strict=True, owner=own)


def barker_test(
    rng: np.random.Generator,
    loglik_diff,
    n_total: int,
    log_ratio_o1: float,
    *,
    batch_size: int = 100,
    batch_increment: int | None = None,
    delta: float = 0.01,
    temperature: float = 1.0,
    correction: CorrectionDistribution | None = None,
    sampler: RowSampler | None = None,
    error: str = "acceptance",
    check: bool = True,
) -> BarkerResult:
    """Minibatch Barker acceptance test, Algorithm 1 ("MHminibatch") of Seita et al. 2017.

    With ``l_i = log p(x_i | theta') - log p(x_i | theta)`` and temperature ``T``, the
    target is the tempered posterior of the paper's Section 6.1,
    ``p(theta) prod_i p(x_i | theta)^(1/T)``: **the likelihood is tempered, the prior
    is not**, so the exact log acceptance ratio (Equation 6, with the proposal ratio) is

        Delta = sum_{i=1}^N l_i / T + log_ratio_o1.

    For a minibatch ``B`` of ``n`` rows drawn uniformly **without replacement**, with
    ``lt_i = l_i / T``, ``lbar`` their mean and ``s_l^2 = sum_B (lt_i - lbar)^2 / (n - 1)``:

    * estimate (Equation 8): ``Delta* = N * lbar + log_ratio_o1``;
    * its variance, with the finite-population correction for sampling without
      replacement (``s_l^2`` is unbiased for the population variance with divisor
      ``N - 1``, and ``Var(lbar) = (1 - n/N) S^2 / n``):
      ``s^2 = N^2 * (1 - n/N) * s_l^2 / n``;
    * CLT error (Lemma 3, Equation 17, and Corollary 1, Equation 19, applied to the
      standardised terms ``Z_i = (lt_i - mu) / sigma_l``, since Lemma 3's constants are
      for unit variance):
      ``eps = (6.4 * m3 + 2 * m1) / sqrt(n)``, ``m_k = mean_B |lt_i - lbar|^k / s_l^k``.
      As in the paper the rate uses ``n`` (no finite-population factor). Because
      ``m3 >= ((n-1)/n)^{3/2}`` the bound is at least about ``6.4 / sqrt(n)``, so
      ``eps <= delta`` needs ``n >= (6.4 / delta)^2`` at the very least
      (``~4.1e5`` for ``delta = 0.01``; ``~140 / delta^2`` for Gaussian terms):
      with small ``delta`` and ``N`` below that, the test uses all the data and is exact.

    With ``error="acceptance"`` (the default) the quantity compared with ``delta`` is a
    bound on the error of the **acceptance probability** itself, built from the same
    ingredients (Lemma 3's standardised third absolute moment, estimated on the batch):
    with ``Z = X_nc + X_corr`` (density ``r``, ``sup r <= r_max``, the largest density of
    the correction table) and ``G ~ N(Delta, s^2)``, the map ``x -> P(x + Z > 0)`` is
    ``r_max``-Lipschitz, so ``|P(Delta* + Z > 0) - P(G + Z > 0)| <= r_max W_1(Delta*, G)``,
    and the Wasserstein CLT bound for standardised sums (``W_1 <= E|Z_i|^3 / sqrt(n)``,
    constant 1; Goldstein 2010) gives

        eps = r_max * s * m3 / sqrt(n).

    It shrinks with ``s`` (at most 1) as well as ``n``, so ``delta = 0.01`` is reached with
    batches of hundreds to a few thousand rows. ``error="lemma3"`` uses the sup-norm bound
    of Lemma 3 / Corollary 1 above as the paper states it (Corollary 2 carries it to the
    acceptance test unchanged), which needs ``n >= (6.4 / delta)^2``.

    Starting from ``batch_size`` rows, the batch grows by ``batch_increment`` rows while
    ``s^2 >= sigma^2`` (``sigma = correction.sigma``, 1 for the shipped ``C_1``) or
    ``eps > delta``. Then ``X_nc ~ N(0, sigma^2 - s^2)`` and ``X_corr ~ C_sigma`` are
    drawn and the proposal is accepted iff ``Delta* + X_nc + X_corr > 0``.
    If the batch reaches all ``N`` rows, ``Delta* = Delta`` and the exact Barker test
    (Equation 10) is used instead: accept iff ``Delta + X_log > 0`` with ``X_log``
    standard logistic (``exact=True``, ``data_used=N``).

    If every term seen so far is equal (``s_l = 0``, e.g. ``theta' = theta``, or a
    parameter the likelihood does not depend on) the bound is undefined and the batch
    keeps growing, so such a test ends exact.

    Non-finite values decide at once and always reject: ``log_ratio_o1`` equal to
    ``-inf`` (zero prior density at ``theta'``) or a minibatch term equal to ``-inf``
    (zero likelihood at ``theta'``: ``Delta = -inf``) is the exact decision
    (``exact=True``); NaN or ``+inf`` (zero density at the *current* state, or an
    overflow) cannot be decided and rejects with ``nonfinite=True``, so the chain never
    moves to a point whose density was not evaluated (the step warns).

    Parameters
    ----------
    rng : numpy.random.Generator
        The only source of randomness (rows, ``X_nc``, ``X_corr``, ``X_log``).
    loglik_diff : callable
        ``loglik_diff(rows) -> ndarray`` of ``l_i`` for an int64 array of row indices.
    n_total : int
        Number of data rows ``N``.
    log_ratio_o1 : float
        The data-free part of ``Delta``: ``log p(theta') - log p(theta)`` plus the log
        proposal ratio ``log q(theta | theta') - log q(theta' | theta)``. Not tempered.
    batch_size : int, default 100
        Initial minibatch size ``m`` (``1 <= batch_size <= n_total``).
    batch_increment : int, optional
        Rows added per growth step; ``None`` uses ``batch_size`` (as in Algorithm 1).
    delta : float, default 0.01
        Bound ``delta`` on the CLT error ``eps``; ``inf`` disables that condition
        (only ``s^2 < sigma^2`` is then required).
    temperature : float, default 1.0
        Temperature ``T`` dividing the log-likelihood (not the prior).
    correction : CorrectionDistribution, optional
        The correction table; default :func:`default_correction` (``sigma = 1``).
    sampler : RowSampler, optional
        A fresh sampler over ``n_total`` rows to draw from; default
        ``RowSampler(n_total, rng)``.
    error : {"acceptance", "lemma3"}, default "acceptance"
        Which CLT error estimate is compared with ``delta`` (see above).
    check : bool, default True
        Validate the arguments. The step validates its own once, at construction, and
        passes False (this runs once per transition).

    Returns
    -------
    BarkerResult

    Raises
    ------
    ValueError
        For invalid arguments, or if ``loglik_diff`` returns the wrong number of values.
    """
    if check:
        _check_args(n_total, batch_size, batch_increment, delta, temperature)
        check_choice("error", error, ("acceptance", "lemma3"), owner="barker_test")
    o1 = float(log_ratio_o1)
    if not math.isfinite(o1):
        bad = undecidable(o1)
        return BarkerResult(False, 0, 0, 0.0, 0.0, not bad, o1, nonfinite=bad)
    N = int(n_total)
    corr = default_correction() if correction is None else correction
    sampler = _fresh_sampler(sampler, N, rng, check)
    return _grow_and_decide(
        rng, loglik_diff, sampler, N, o1, corr, batch_size=int(batch_size),
        step=int(batch_size if batch_increment is None else batch_increment),
        inv_t=1.0 / float(temperature), delta=delta, error=error,
    )


def _fresh_sampler(sampler, n_total, rng, check):
    """The row sampler: ``RowSampler(n_total, rng)`` by default; a given one is checked
    (with ``check``) to be fresh and over ``n_total`` rows."""
    if sampler is None:
        return RowSampler(n_total, rng)
    if check and (getattr(sampler, "n_total", n_total) != n_total
                  or getattr(sampler, "n_drawn", 0) != 0):
        raise InvalidParameterError(
            f"The 'sampler' parameter of barker_test must be a fresh RowSampler over "
            f"n_total={n_total} rows."
        )
    return sampler


def _read_terms(sampler, loglik_diff, m, inv_t):
    """The tempered terms ``l_i / T`` of ``m`` new rows, as float64."""
    rows = sampler.draw(m)
    lt = np.asarray(loglik_diff(rows), dtype=np.float64)
    if lt.shape != rows.shape:
        raise ValueError(
            f"loglik_diff must return one value per row: got shape {lt.shape} for "
            f"{rows.size} rows."
        )
    if inv_t != 1.0:
        lt = lt * inv_t
    return lt


def _append(buf, n, lt, n_total):
    """``buf`` holding its first ``n`` terms and then ``lt`` (grown by doubling, at most
    ``n_total`` long)."""
    k = lt.size
    if n + k > buf.size:
        new = np.empty(min(n_total, max(2 * buf.size, n + k)), dtype=np.float64)
        new[:n] = buf[:n]
        buf = new
    buf[n : n + k] = lt
    return buf


def _grow_and_decide(rng, loglik_diff, sampler, N, o1, corr, *, batch_size, step, inv_t,
                     delta, error):
    """The loop of Algorithm 1: grow the minibatch until it is non-finite
    (:func:`undecidable`), holds all ``N`` rows (the exact test, Equation 10) or passes
    :func:`_minibatch_stage`."""
    sigma2 = corr.sigma * corr.sigma
    r_max = corr.max_density if error == "acceptance" else 0.0
    buf = np.empty(min(N, max(batch_size, 256)), dtype=np.float64)
    n = 0
    n_batches = 0
    mean = 0.0  # running mean and sum of squared deviations of the terms
    m2 = 0.0
    m = batch_size
    while True:
        lt = _read_terms(sampler, loglik_diff, m, inv_t)
        n_batches += 1
        k = lt.size
        buf = _append(buf, n, lt, N)
        lsum = float(lt.sum())
        if not math.isfinite(lsum):  # some l_i is +-inf or nan: reject
            bad = undecidable(lt)
            total = -math.inf if not bad else math.nan
            return BarkerResult(False, n + k, n_batches, 0.0, 0.0, not bad, total, nonfinite=bad)
        bmean, bm2 = batch_moments(lt, lsum)
        n, mean, m2 = merge_moments(n, mean, m2, k, bmean, bm2)

        if n >= N:  # all rows: exact Barker test, Equation (10)
            delta_exact = float(buf[:n].sum()) + o1
            x_log = float(rng.logistic())
            return BarkerResult(bool(delta_exact + x_log > 0.0), N, n_batches, 0.0, 0.0, True,
                                delta_exact, noise=x_log)
        if n >= 2:
            result = _minibatch_stage(rng, buf[:n], n, n_batches, N, mean, m2, o1, corr,
                                      sigma2, r_max, delta, error)
            if result is not None:
                return result
        m = step


def _minibatch_stage(rng, terms, n, n_batches, N, mean, m2, o1, corr, sigma2, r_max, delta,
                     error):
    """One stage of Algorithm 1 on ``n >= 2`` terms: the decision ``Delta* + X_nc +
    X_corr > 0`` (Equations 8, 12-13) once ``s^2 < sigma^2`` and the CLT error is at most
    ``delta``, else ``None`` (grow the batch)."""
    var_l = m2 / (n - 1)
    s2_delta = N * N * (1.0 - n / N) * var_l / n
    # m3 >= ((n-1)/n)^1.5 (power means), which gives a lower bound of eps:
    # skip the O(n) moment pass while that lower bound already exceeds delta.
    m3_lo = ((n - 1) / n) ** 1.5 / math.sqrt(n) * (1.0 - 1e-12)
    if error == "acceptance":
        eps_lo = r_max * math.sqrt(s2_delta) * m3_lo
    else:
        eps_lo = BE_CONST_3 * m3_lo
    if not (s2_delta < sigma2 and var_l > 0.0 and eps_lo <= delta):
        return None
    m1, m3 = _abs_moments(terms, mean, math.sqrt(var_l))
    lemma3 = (BE_CONST_3 * m3 + BE_CONST_1 * m1) / math.sqrt(n)
    if error == "acceptance":
        eps = r_max * math.sqrt(s2_delta) * m3 / math.sqrt(n)
    else:
        eps = lemma3
    if not eps <= delta:
        return None
    delta_star = N * mean + o1
    x_nc = math.sqrt(sigma2 - s2_delta) * rng.standard_normal()
    noise = x_nc + float(corr.sample(rng))
    return BarkerResult(bool(delta_star + noise > 0.0), n, n_batches, eps,
                        s2_delta, False, delta_star, lemma3, noise)
