"""The error that the normal approximation of a minibatch test makes in its acceptance
probability: one-term Edgeworth estimates, and the skewness they need pooled over many
transitions. Pure NumPy/SciPy; nothing here imports PyMC or PyTensor.

Both minibatch tests treat the mean of ``n`` terms drawn without replacement from the
``N`` terms ``l_i`` as normal: Algorithm 1 of Korattikara, Chen & Welling, "Austerity in
MCMC Land: Cutting the Metropolis-Hastings Budget" (the t statistic of eq. 5 as Student-t)
and Algorithm 1 of Seita, Pan, Chen & Canny, "An Efficient Minibatch Acceptance Test for
Metropolis-Hastings" (``Delta*`` of eq. 8 as ``N(Delta, s^2)``). The first correction to
that approximation is the skewness term of the Edgeworth expansion (Hall, "The Bootstrap
and Edgeworth Expansion", Sec. 2.6, for the i.i.d. studentized mean; Babu & Singh,
"Edgeworth expansions for sampling without replacement from finite populations", for
the finite population). With ``gamma = mu_3 / sigma^3`` the skewness of the ``N`` terms,
``a = gamma / sqrt(n)`` and ``f = n / N``, the cumulants of the without-replacement mean
(``kappa_3 = mu_3 (1 - f)(1 - 2f) / n^2``, ``Cov(mean, s^2) = mu_3 (1 - f) / n``) give by
the delta method

* for the studentized mean ``T = (lbar - mu) / (s_l sqrt((1 - f) / n))``:
  ``P(T <= x) = Phi(x) + q(x)``, ``q(x) = a ((2 + f) x^2 + 1 - 4 f) phi(x) / (6 sqrt(1 - f))``
  (Hall's ``a (2 x^2 + 1) phi(x) / 6`` at ``f = 0``);
* for Barker's noise ``Y = (Delta* - Delta) + X_nc`` (``X_nc ~ N(0, sigma^2 - s_hat^2)``
  with the *estimated* ``s_hat^2``): mean 0, variance ``sigma^2`` and third cumulant
  ``kappa_3(Y) = -s^3 a (2 + f) / sqrt(1 - f)``.

The estimates are per transition; a single batch estimates ``gamma`` badly when the
terms are heavy-tailed (a batch that misses the rare large terms looks normal, and one
that holds one shows a skewness near its ceiling ``sqrt(n)``), so the steps use the
skewness pooled over the first batches of many transitions (:class:`PooledSkewness`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

__all__ = [
    "edgeworth_q",
    "austere_clt_weight",
    "barker_clt_weight",
    "logistic_density_d2",
    "PooledSkewness",
]

_SQRT_2PI = math.sqrt(2.0 * math.pi)
#: nodes of the trapezoid rule over the standardised distance (austere_clt_weight)
_NODES = 401
#: |x| beyond which phi(c + |x|) is negligible (below 1e-14 of its peak)
_X_MAX = 8.0


def edgeworth_q(x, skew: float, n: int, n_total: int | None = None):
    """One-term Edgeworth correction of the studentized without-replacement mean.

    ``P(T <= x) ~= Phi(x) + q(x)`` with ``T = (lbar - mu) / (s_l sqrt((1 - f) / n))`` the
    t statistic of eq. 5 of Korattikara et al. ("Austerity in MCMC Land") and

        q(x) = gamma / sqrt(n) * ((2 + f) x^2 + 1 - 4 f) phi(x) / (6 sqrt(1 - f)),

    ``f = n / N`` (0 without ``n_total``: i.i.d. draws). At ``f = 0`` this is the i.i.d.
    term of Hall ("The Bootstrap and Edgeworth Expansion", eq. 2.55); the ``f`` terms
    follow from the cumulants of the finite-population mean (module docstring).

    Parameters
    ----------
    x : float or ndarray
    skew : float
        ``gamma``, the skewness of the population of terms.
    n : int
        Terms in the mean.
    n_total : int, optional
        ``N``, the population size (without replacement).

    Returns
    -------
    float or ndarray
    """
    f = 0.0 if n_total is None else min(n / n_total, 1.0)
    if f >= 1.0:
        return np.zeros_like(np.asarray(x, dtype=np.float64))
    x = np.asarray(x, dtype=np.float64)
    phi = np.exp(-0.5 * x * x) / _SQRT_2PI
    return skew / math.sqrt(n) * ((2.0 + f) * x * x + 1.0 - 4.0 * f) * phi / (
        6.0 * math.sqrt(1.0 - f))


def austere_clt_weight(n: int, n_total: int | None, sd_log_ratio: float,
                       log_ratio: float, crit: float) -> float:
    """Error of AustereMH's acceptance probability per unit skewness (one-term Edgeworth).

    The t-test of Korattikara et al. ("Austerity in MCMC Land", Algorithm 1) decides at
    a stage iff ``|t| > c`` (``c`` the Student-t critical value of ``epsilon``), with
    ``t = T + A``, ``A = (Delta + E) / S``: ``Delta`` the log MH ratio, ``E = -log u ~
    Exp(1)``, ``S`` the standard deviation of the estimate ``N lbar`` of its data part.
    When the true mean lies above the threshold (``A > 0``) the skewness changes the
    acceptance probability through the wrong-way tail ``P(T < -c - A)``, and below it
    through ``P(T > c - A) = P(T > c + |A|)``: either way by ``-q(c + |A|)``
    (:func:`edgeworth_q`; later stages, at larger ``n``, are neglected). Averaged over
    ``u``,

        err = E_E |q(c + |A|)| = |gamma| * w,
        w = E_E[ |(2 + f) x^2 + 1 - 4 f| phi(x) ]_{x = c + |A|} / (6 sqrt(n) sqrt(1 - f)),

    computed by the trapezoid rule in ``A`` (density ``S exp(-(S A - Delta))`` on
    ``A >= Delta / S``). ``w`` vanishes when ``S`` is small and ``Delta`` far from 0 (no
    ``u`` brings the decision near the test's boundary); it is at most about
    ``0.11 / sqrt(n)`` at ``epsilon = 0.05``.

    Parameters
    ----------
    n : int
        Terms the test used.
    n_total : int or None
        ``N`` (None: i.i.d. draws, ``f = 0``).
    sd_log_ratio : float
        ``S = N s``, ``s`` the standard error of eq. 4.
    log_ratio : float
        The test's estimate of ``Delta`` (data-free part plus ``N lbar``).
    crit : float
        The critical value ``c`` of the t-test at the last stage.

    Returns
    -------
    float
        ``w`` (0 when the decision did not use the normal approximation).
    """
    f = 0.0 if n_total is None else n / n_total
    S = float(sd_log_ratio)
    if not (n >= 2 and f < 1.0 and S > 0.0 and math.isfinite(S)
            and math.isfinite(log_ratio) and math.isfinite(crit)):
        return 0.0
    a0 = log_ratio / S
    lo = max(a0, -_X_MAX)
    hi = min(_X_MAX, a0 + 40.0 / S)  # exp(-40): the rest of the exponential's mass
    if not lo < hi:
        return 0.0
    a = np.linspace(lo, hi, _NODES)
    x = crit + np.abs(a)
    g = np.abs((2.0 + f) * x * x + 1.0 - 4.0 * f) * np.exp(-0.5 * x * x) / _SQRT_2PI
    dens = S * np.exp(-(S * a - log_ratio))
    y = g * dens
    h = (hi - lo) / (_NODES - 1)
    integral = h * (float(y.sum()) - 0.5 * (y[0] + y[-1]))
    return integral / (6.0 * math.sqrt(n) * math.sqrt(1.0 - f))


def logistic_density_d2(x: float) -> float:
    """Second derivative of the standard logistic density, ``l''(x) = p (1 - p)
    (1 - 6 p + 6 p^2)`` with ``p = 1 / (1 + exp(-x))``; ``|l''| <= 1/8``, at 0."""
    p = float(expit(x))
    return p * (1.0 - p) * (1.0 - 6.0 * p + 6.0 * p * p)


def barker_clt_weight(n: int, n_total: int, s2: float, log_ratio: float) -> float:
    """Error of the minibatch Barker test's acceptance probability per unit skewness.

    Seita et al. ("An Efficient Minibatch Acceptance Test for Metropolis-Hastings",
    Algorithm 1) accept iff ``Delta + Y + X_corr > 0`` with ``Y = (Delta* - Delta) +
    X_nc``, ``X_nc ~ N(0, sigma^2 - s_hat^2)``; the test is exact when ``Y`` is
    ``N(0, sigma^2)``, since ``N(0, sigma^2) + X_corr`` is logistic (eqs 12-13). The
    one-term Edgeworth expansion of ``Y`` (third cumulant ``kappa_3(Y) = -s^3 gamma (2 +
    f) / (sqrt(n) sqrt(1 - f))``, module docstring) changes ``P(Y > x)`` by
    ``kappa_3(Y) / 6 * phi_sigma''(x)``; averaged over the symmetric ``X_corr`` this is the
    second derivative of the logistic density ``phi_sigma * C_sigma``, so

        P_test(accept) - P_Barker(accept) ~= kappa_3(Y) / 6 * l''(Delta),
        err = |gamma| * w,   w = s^3 (2 + f) |l''(Delta)| / (6 sqrt(n) sqrt(1 - f)).

    ``w <= s^3 (2 + f) / (48 sqrt(n) sqrt(1 - f))``, and the test only decides with
    ``s^2 < sigma^2``.

    Parameters
    ----------
    n, n_total : int
        Terms used and ``N``.
    s2 : float
        ``s^2``, the variance of ``Delta*`` the test used.
    log_ratio : float
        The test's ``Delta*`` (the estimate stands in for ``Delta``).

    Returns
    -------
    float
        ``w`` (0 for an exact decision).
    """
    f = n / n_total
    if not (n >= 2 and f < 1.0 and s2 > 0.0 and math.isfinite(s2)
            and math.isfinite(log_ratio)):
        return 0.0
    return (s2 ** 1.5 * (2.0 + f) * abs(logistic_density_d2(log_ratio))
            / (6.0 * math.sqrt(n) * math.sqrt(1.0 - f)))


def _robust_scale(x: np.ndarray) -> float:
    """Interquartile range / 1.349 (the sd for normal terms), or the mean absolute
    deviation * sqrt(pi / 2) when more than half the terms tie (sparse data); a scale that
    one extreme term in the batch does not inflate."""
    k = x.size
    lo, hi = (k - 1) // 4, (3 * (k - 1)) // 4
    part = np.partition(x, (lo, hi))
    r = float(part[hi] - part[lo]) / 1.349
    if r > 0.0:
        return r
    return float(np.abs(x - x.mean()).mean()) * 1.2533141373155


class PooledSkewness:
    """The skewness of the per-row terms, pooled over the batches of many transitions.

    Each transition's terms have their own scale (the move's size and direction), so each
    batch's central moments are divided by a robust scale ``R`` of the batch (the
    interquartile range / 1.349, which one large term does not inflate) and then
    averaged over the batches:

        gamma_pooled = mean_t(|m3_t| / R_t^3) / mean_t(m2_t / R_t^2)^(3/2),

    with ``m_k`` the batch's central moments (divisor ``n``). For terms that share a shape
    this is a ratio of unbiased means of the population moments in units of ``R``: a
    term that appears in a share ``n / N`` of the batches contributes to both means in
    proportion, where one batch's skewness cannot exceed ``sqrt(n)``. ``|m3|`` (the move's
    direction flips its sign) gives a floor of about ``0.8 sqrt(6 / n)`` for normal terms.
    """

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self._m2 = 0.0
        self._m3 = 0.0

    def add(self, batch) -> None:
        """Record one batch of terms (drawn uniformly; non-finite or constant batches,
        and batches of fewer than 4 terms, are skipped)."""
        x = np.asarray(batch, dtype=np.float64).ravel()
        if x.size < 4:
            return
        r = _robust_scale(x)
        if not (r > 0.0 and math.isfinite(r)):
            return
        d = (x - x.mean()) * (1.0 / r)
        d2 = d * d
        m2 = float(d2.sum()) / x.size
        d2 *= d
        m3 = abs(float(d2.sum())) / x.size
        if math.isfinite(m2) and math.isfinite(m3):
            self.n += 1
            self._m2 += m2
            self._m3 += m3

    @property
    def gamma(self) -> float:
        """The pooled skewness (NaN before any batch)."""
        if self.n == 0 or self._m2 <= 0.0:
            return math.nan
        return (self._m3 / self.n) / (self._m2 / self.n) ** 1.5
