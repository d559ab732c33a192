"""Derivative bounds of generalised linear rows over an interval of the linear predictor.

ScalableMH's default bounds hold on a *region* around ``theta_hat``: the whitened ball
``||L^-1 (theta - theta_hat)|| <= R`` (``L L' =`` the Laplace covariance). When the
current and the proposed point both lie in it, so does the segment between them, and row
``i``'s linear predictor stays in ``[eta_hat_i - s_i R, eta_hat_i + s_i R]``
(``s_i = ||J_i L||``, Cauchy-Schwarz). The constant of the whitened bound
(:func:`pymc_subsample.kernels.phi.whitened_phi`) then only needs the supremum of
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

from .bounds import PROBIT_PEAK3, probit_lambda

from .interval import Interval

__all__ = ["REGION_FAMILIES", "TWO_PARAM_FAMILIES", "local_sup", "local_sup2", "path_constant"]

REGION_FAMILIES = ("bernoulli_logit", "bernoulli_probit", "student_t", "normal", "poisson_log")
TWO_PARAM_FAMILIES = ("normal_scale", "student_t_scale", "gamma_log", "negbinomial_log")

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


def _probit_derivatives(t):
    """``(|g''|, g''')`` of ``g = log Phi`` at ``t`` (``lambda = phi / Phi``)."""
    t = np.asarray(t, dtype=np.float64)
    lam = probit_lambda(t)
    return lam * (t + lam), lam * (t + lam) * (t + 2.0 * lam) - lam


def local_sup(family: str, m: int, lo, hi, *, y=None, nu=None, sigma=None) -> np.ndarray:
    """``sup |f^(m)(eta)|`` over ``eta in [lo_i, hi_i]`` for each row's GLM term.

    Families (``U_i = f(eta_i)``, derivatives in ``eta``):

    * ``"bernoulli_logit"``: ``|f''| = s (1 - s)``, peak at ``eta = 0``;
      ``|f'''| = |s (1 - s)(1 - 2 s)|``, peaks at ``eta = +-log(2 + sqrt 3)``
      (``s = sigmoid(eta)``; see :func:`pymc_subsample.kernels.bounds.glm_sup_derivative`).
    * ``"bernoulli_probit"``: ``|f^(m)(eta)| = |g^(m)(s eta)|``, ``g = log Phi``,
      ``s = 2 y - 1`` (:func:`pymc_subsample.kernels.bounds.glm_sup_derivative`). ``|g''|``
      decreases in ``t``, so over both signs of ``s`` its supremum on an interval is
      ``|g''(-max(|lo|, |hi|))|``; ``g'''`` has one peak, at ``t* = 1.00237``: the larger
      of its suprema over ``[lo, hi]`` and ``[-hi, -lo]`` (taken at ``max(t, -8)``, where
      the closed form is accurate: an upper bound, as ``g'''`` rises up to ``t*``).
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
    if family == "bernoulli_probit":
        if m == 2:
            return _sup(lambda e: _probit_derivatives(-np.abs(e))[0], lo, hi, ())
        # g''' rises on (-inf, t*]; below -8 its formula loses digits to cancellation, so
        # it is read at -8 there (larger, hence still a bound: 0.004 against 0.296)
        g3 = lambda t: _probit_derivatives(np.maximum(t, -8.0))[1]  # noqa: E731
        return np.maximum(_sup(g3, lo, hi, (PROBIT_PEAK3,)), _sup(g3, -hi, -lo, (PROBIT_PEAK3,)))
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


# ---------------------------------------------------------------------------------------
# rows with two parameters: a linear predictor eta and a log scale / log shape s
# ---------------------------------------------------------------------------------------


def _location_scale(m, E, S, y, nu):
    """Partials of ``l = -s + H((y - eta) e^-s)`` (H the log density of the standard
    Normal or Student-t), by the chain rule with ``t = (y - eta) e^-s``,
    ``dt/d eta = -e^-s``, ``dt/ds = -t`` (``H1, H2, H3``: derivatives of H):

    * m = 2: ``l_ee = e^-2s H2``, ``l_es = e^-s (H1 + t H2)``, ``l_ss = t (H1 + t H2)``;
    * m = 3: ``l_eee = -e^-3s H3``, ``l_ees = -e^-2s (2 H2 + t H3)``,
      ``l_ess = -e^-s (H1 + 3 t H2 + t^2 H3)``, ``l_sss = -t (H1 + 3 t H2 + t^2 H3)``.

    Normal: ``H1 = -t``, ``H2 = -1``, ``H3 = 0``. Student-t with ``D = nu + t^2``:
    ``H2 = -(nu+1)(nu - t^2) / D^2``, ``H1 + t H2 = -2 nu (nu+1) t / D^2``,
    ``H3 = 2 (nu+1) t (3 nu - t^2) / D^3``,
    ``2 H2 + t H3 = -2 nu (nu+1)(nu - 3 t^2) / D^3``,
    ``H1 + 3 t H2 + t^2 H3 = -4 nu (nu+1) t (nu - t^2) / D^3``.
    Returned in the order ``d^m / d eta^j d s^(m-j)``, ``j = 0..m``.
    """
    es = (-S).exp()
    T = (y - E) * es
    if nu is None:  # Normal
        if m == 2:
            return [2.0 * T**2, 2.0 * T * es, es**2]
        return [4.0 * T**2, 4.0 * T * es, 2.0 * es**2, Interval(0.0 * T.lo)]
    D = T**2 + nu
    if m == 2:
        k2 = -2.0 * nu * (nu + 1.0) * T / D**2
        h2 = -(nu + 1.0) * (nu - T**2) / D**2
        return [T * k2, es * k2, es**2 * h2]
    h3 = 2.0 * (nu + 1.0) * T * (3.0 * nu - T**2) / D**3
    c2 = -2.0 * nu * (nu + 1.0) * (nu - 3.0 * T**2) / D**3
    c3 = -4.0 * nu * (nu + 1.0) * T * (nu - T**2) / D**3
    return [T * c3, es * c3, es**2 * c2, es**3 * h3]


def _gamma_log(m, E, S, y):
    """Partials of the Gamma log density with shape ``a = e^s`` and mean ``e^eta``:
    ``l = A(a) + a c(eta) + const``, ``A(a) = a log a - lgamma(a)``,
    ``c = log v - v``, ``v = y e^-eta``. With ``d/ds = a d/da``:

    * m = 2: ``l_ee = -a v``, ``l_es = a (v - 1)``,
      ``l_ss = a (log a - psi(a) + 2 - a psi1(a) + c)``;
    * m = 3: ``l_eee = a v``, ``l_ees = -a v``, ``l_ess = a (v - 1)``,
      ``l_sss = a (log a - psi(a) + 3 - 3 a psi1(a) - a^2 psi2(a) + c)``

    (``psi1``, ``psi2``: the trigamma and tetragamma functions).
    """
    a = S.exp()
    v = y * (-E).exp()
    c = v.log() - v
    if m == 2:
        ss = a * (S - a.polygamma(0) + 2.0 - a * a.polygamma(1) + c)
        return [ss, a * (v - 1.0), a * v]
    sss = a * (S - a.polygamma(0) + 3.0 - 3.0 * a * a.polygamma(1)
               - a**2 * a.polygamma(2) + c)
    return [sss, a * (v - 1.0), a * v, a * v]


def _negbinomial_log(m, E, S, y):
    """Partials of the NegativeBinomial log density with mean ``mu = e^eta`` and shape
    ``a = e^s``: ``l = lgamma(y + a) - lgamma(a) + a log a + y eta - (y + a) log(a + mu)``.
    With ``p = mu / (a + mu) = expit(eta - s)``, ``q = 1 - p``, ``dp/d eta = pq = -dp/ds``,
    ``T = psi(y + a) - psi(a) + 1``, ``T1 = psi1(y + a) - psi1(a)``,
    ``T2 = psi2(y + a) - psi2(a)``:

    * m = 2: ``l_ee = -(y + a) p q``, ``l_es = p ((y + a) q - a)``,
      ``l_ss = a (T + log q) + a^2 T1 + a p - a q - (y + a) p q``;
    * m = 3: ``l_eee = -(y + a) p q (1 - 2p)``, ``l_ees = p q ((y + a)(1 - 2p) - a)``,
      ``l_ess = p q ((y + a)(2p - 1) + a) - a p^2``,
      ``l_sss = a (T + log q) + 3 a^2 T1 + a^3 T2 + a p + a p^2 - a q - 2 a p q
      + (y + a) p q (1 - 2p)``.
    """
    a = S.exp()
    x = E - S
    p = x.expit()
    q = (-x).expit()
    logq = (-x).log_expit()
    ya = a + y
    pq = p * q
    T = ya.polygamma(0) - a.polygamma(0) + 1.0
    T1 = ya.polygamma(1) - a.polygamma(1)
    base = a * (T + logq) - a * q
    if m == 2:
        ss = base + a**2 * T1 + a * p - ya * pq
        return [ss, p * (ya * q - a), -(ya * pq)]
    T2 = ya.polygamma(2) - a.polygamma(2)
    one_2p = 1.0 - 2.0 * p
    sss = (base + 3.0 * a**2 * T1 + a**3 * T2 + a * p + a * p**2 - 2.0 * a * pq
           + ya * pq * one_2p)
    return [sss, pq * (-(ya * one_2p) + a) - a * p**2, pq * (ya * one_2p - a),
            -(ya * pq * one_2p)]


def local_sup2(family: str, m: int, eta_lo, eta_hi, s_lo, s_hi, *, y, nu=None,
               pieces=(1, 1)) -> np.ndarray:
    """Suprema of every m-th partial derivative of a two-parameter row over a box.

    For a row log density ``l(eta, s)`` (``eta`` the linear predictor, ``s`` the log
    scale or log shape), returns ``G[:, j] >= sup |d^m l / d eta^j d s^(m-j)|`` over
    ``[eta_lo, eta_hi] x [s_lo, s_hi]``, ``j = 0..m``, by interval evaluation of the
    closed-form partials (:class:`~pymc_subsample.kernels.interval.Interval`; a
    relative margin of ``1e-9`` covers rounding). Interval evaluation overestimates the
    range by an amount proportional to the box's width when a formula cancels large
    terms; ``pieces=(p_eta, p_s)`` splits each box into a grid of sub-boxes and takes
    the largest of their bounds, which shrinks that excess ``p``-fold. Families:

    * ``"normal_scale"``, ``"student_t_scale"`` (``nu`` fixed): ``mu = eta``,
      ``sigma = e^s``;
    * ``"gamma_log"``: shape ``e^s``, mean ``e^eta``;
    * ``"negbinomial_log"``: mean ``e^eta``, shape (``alpha``) ``e^s``.

    Parameters
    ----------
    family : str
        One of :data:`TWO_PARAM_FAMILIES`.
    m : int
        Derivative order ``k + 1``: 2 or 3.
    eta_lo, eta_hi, s_lo, s_hi : array_like, shape (n,)
        The box of each row.
    y : array_like, shape (n,)
        Responses.
    nu : float, optional
        Student-t degrees of freedom.
    pieces : (int, int), default (1, 1)
        Sub-boxes per row along ``eta`` and along ``s``.

    Returns
    -------
    ndarray of float64, shape (n, m + 1)
    """
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m = k + 1 must be 2 or 3, got {m}.")
    eta_lo, eta_hi, s_lo, s_hi = (np.asarray(v, dtype=np.float64)
                                  for v in (eta_lo, eta_hi, s_lo, s_hi))
    pe, ps = (int(p) for p in pieces)
    if pe < 1 or ps < 1:
        raise ValueError(f"pieces must be positive integers, got {pieces!r}.")
    G = None
    for i in range(pe):
        e0 = eta_lo + (eta_hi - eta_lo) * (i / pe)
        e1 = eta_hi if i == pe - 1 else eta_lo + (eta_hi - eta_lo) * ((i + 1) / pe)
        for j in range(ps):
            s0 = s_lo + (s_hi - s_lo) * (j / ps)
            s1 = s_hi if j == ps - 1 else s_lo + (s_hi - s_lo) * ((j + 1) / ps)
            part = _box_sup(family, m, Interval(e0, e1), Interval(s0, s1), y, nu)
            G = part if G is None else np.maximum(G, part)
    return G * (1.0 + 1e-9)


def _box_sup(family, m, E, S, y, nu):
    y = np.asarray(y, dtype=np.float64)
    if family == "normal_scale":
        parts = _location_scale(m, E, S, y, None)
    elif family == "student_t_scale":
        if nu is None:
            raise TypeError("student_t_scale needs nu.")
        parts = _location_scale(m, E, S, y, float(nu))
    elif family == "gamma_log":
        parts = _gamma_log(m, E, S, y)
    elif family == "negbinomial_log":
        parts = _negbinomial_log(m, E, S, y)
    else:
        raise ValueError(
            f"local_sup2: unknown family {family!r}; supported: {TWO_PARAM_FAMILIES}.")
    n = np.broadcast(E.lo, S.lo, y).shape
    return np.column_stack([np.broadcast_to(p.abs_sup(), n) for p in parts])


def path_constant(G: np.ndarray, a, b) -> np.ndarray:
    """``M_i`` of :func:`pymc_subsample.kernels.phi.path_phi` from the partials' suprema.

    A row depends on the whitened point ``z`` through ``eta = eta_hat + p . z`` and
    ``s = s_hat + c . z``; with ``a = ||p||``, ``b = ||c||`` and ``G[:, j]`` bounding
    ``|d^m l / d eta^j d s^(m-j)|`` (:func:`local_sup2`), for every unit ``v``

        |D^m l[v, ..., v]| <= sum_j binom(m, j) G_j a^j b^(m-j) = M_i.

    Parameters
    ----------
    G : ndarray, shape (n, m + 1)
    a, b : array_like, shape (n,)

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    G = np.asarray(G, dtype=np.float64)
    m = G.shape[1] - 1
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return sum(math.comb(m, j) * G[:, j] * a**j * b ** (m - j) for j in range(m + 1))
