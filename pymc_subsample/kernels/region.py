"""Derivative bounds of generalised linear rows over an interval of the linear predictor.

ScalableMH's default bounds hold on a *region* around ``theta_hat``: the whitened ball
``||L^-1 (theta - theta_hat)|| <= R`` (``L L' =`` the Laplace covariance). When the
current and the proposed point both lie in it, so does the segment between them, and row
``i``'s linear predictor stays in ``[eta_hat_i - s_i R, eta_hat_i + s_i R]``
(``s_i = ||J_i L||``, Cauchy-Schwarz). The constant of the whitened bound
(:func:`pymc_subsample.kernels.thinning.whitened_phi`) then only needs the supremum of
``|f_i^(k+1)|`` over that interval, not over the whole line: much smaller for rows whose
fitted predictor lies in a tail (logistic regression), and finite for likelihoods whose
derivatives are unbounded (Poisson with a log link). Pairs with a point outside the ball
take the exact full-data MH test, so the chain stays exact; the decision depends on the
pair symmetrically, as truncation does in Cornish et al. (2019, eq. 6).

Each supremum is exact: the larger of ``|f^(m)|`` at the interval's ends and at the
critical points of ``|f^(m)|`` inside it (derived for each family below). Vectorised
over rows; nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit

__all__ = ["REGION_FAMILIES", "local_sup"]

REGION_FAMILIES = ("bernoulli_logit", "student_t", "normal", "poisson_log")

#: where |s (1 - s)(1 - 2 s)| peaks: s = 1/2 + 1/(2 sqrt 3), eta = log(2 + sqrt 3)
_LOGIT_PEAK3 = math.log(2.0 + math.sqrt(3.0))


def _sup(g, lo, hi, critical):
    """``max |g|`` over ``[lo, hi]`` (per row) from the ends and the interior critical
    points (``critical``: scalars or per-row arrays)."""
    val = np.maximum(np.abs(g(lo)), np.abs(g(hi)))
    for c in critical:
        c = np.broadcast_to(c, np.shape(lo))
        inside = (lo <= c) & (c <= hi)
        if np.any(inside):
            val = np.where(inside, np.maximum(val, np.abs(g(c))), val)
    return val


def local_sup(family: str, m: int, lo, hi, *, y=None, nu=None, sigma=None) -> np.ndarray:
    """``sup |f^(m)(eta)|`` over ``eta in [lo_i, hi_i]`` for each row's GLM term.

    Families (``U_i = f(eta_i)``, derivatives in ``eta``):

    * ``"bernoulli_logit"``: ``|f''| = s (1 - s)``, peak at ``eta = 0``;
      ``|f'''| = |s (1 - s)(1 - 2 s)|``, peaks at ``eta = +-log(2 + sqrt 3)``
      (``s = sigmoid(eta)``; see :func:`pymc_subsample.kernels.bounds.glm_sup_derivative`).
    * ``"student_t"`` (``nu``, ``sigma`` fixed; ``y`` needed): with ``r = y - eta``,
      ``c = nu sigma^2``, ``a = (nu + 1) / 2``: ``f'' = 2 a (c - r^2) / (c + r^2)^2``,
      critical at ``r = 0, +-sqrt(3 c)``; ``f''' = 4 a r (r^2 - 3 c) / (c + r^2)^3``,
      critical at ``r^2 = c (3 -+ 2 sqrt 2)``.
    * ``"normal"`` (``sigma`` fixed): ``f'' = 1 / sigma^2``, ``f''' = 0``.
    * ``"poisson_log"``: ``f = exp(eta) - y eta``, ``f'' = f''' = exp(eta)``, increasing:
      the supremum is ``exp(hi)``.

    Parameters
    ----------
    family : str
        One of :data:`REGION_FAMILIES`.
    m : int
        Derivative order ``k + 1``: 2 or 3.
    lo, hi : array_like, shape (n,)
        Interval of each row's linear predictor (``lo <= hi``).
    y : array_like, optional
        Responses (Student-t).
    nu, sigma : float or array_like, optional
        Student-t degrees of freedom and scale; Normal scale (per row or scalars).

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m = k + 1 must be 2 or 3, got {m}.")
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if family == "bernoulli_logit":
        if m == 2:
            return _sup(lambda e: expit(e) * expit(-e), lo, hi, (0.0,))

        def g3(e):
            s = expit(e)
            return s * (1.0 - s) * (1.0 - 2.0 * s)

        return _sup(g3, lo, hi, (-_LOGIT_PEAK3, _LOGIT_PEAK3))
    if family == "student_t":
        if y is None or nu is None or sigma is None:
            raise TypeError("student_t needs y, nu and sigma.")
        y = np.asarray(y, dtype=np.float64)
        c = np.asarray(nu, dtype=np.float64) * np.asarray(sigma, dtype=np.float64) ** 2
        a = (np.asarray(nu, dtype=np.float64) + 1.0) / 2.0
        r_lo, r_hi = y - hi, y - lo  # r = y - eta reverses the interval
        if m == 2:
            rc = np.sqrt(3.0 * c)
            return _sup(lambda r: 2.0 * a * (c - r * r) / (c + r * r) ** 2, r_lo, r_hi,
                        (0.0, rc, -rc))
        r1 = np.sqrt(c * (3.0 - 2.0 * math.sqrt(2.0)))
        r2 = np.sqrt(c * (3.0 + 2.0 * math.sqrt(2.0)))
        return _sup(lambda r: 4.0 * a * r * (r * r - 3.0 * c) / (c + r * r) ** 3, r_lo, r_hi,
                    (r1, -r1, r2, -r2))
    if family == "normal":
        if sigma is None:
            raise TypeError("normal needs sigma.")
        val = 1.0 / np.asarray(sigma, dtype=np.float64) ** 2 if m == 2 else 0.0
        return np.broadcast_to(np.asarray(val, dtype=np.float64), lo.shape).copy()
    if family == "poisson_log":
        return np.exp(hi)
    raise ValueError(f"local_sup: unknown family {family!r}; supported: {REGION_FAMILIES}.")
