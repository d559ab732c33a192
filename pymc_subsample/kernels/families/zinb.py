"""Zero-inflated NegativeBinomial rows with a log link and the shape ``alpha`` fixed,
``psi`` fixed or sampled (logit scale).

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import expit, log_expit

from ..scalable.interval import Interval
from .partials import _LogitPsi, _ZeroInflated, _logit_psi, _per_row_box, _pieces, _rows_where


def _zi_zero_partials(m, R, Z, g):
    """Enclosures of the m-th partials of a zero row ``l = softplus(z) - softplus(r)``,
    ``z = r + g(eta)`` (``g = log p(0 | eta)`` of the count distribution), from the
    intervals of ``r``, ``z`` and ``g = [g', g'', g''']``, in the order
    ``d^m l / d eta^j d r^(m-j)``, ``j = 0..m``. With ``W = sigmoid(z)``, ``V = 1 - W``,
    ``P = sigmoid(r)``, ``Q = 1 - P``:

    * m = 2: ``l_rr = W V - P Q``, ``l_er = W V g'``, ``l_ee = W V g'^2 + W g''``;
    * m = 3: ``l_rrr = W V (V - W) - P Q (Q - P)``, ``l_err = W V (V - W) g'``,
      ``l_eer = W V (V - W) g'^2 + W V g''``,
      ``l_eee = W V (V - W) g'^3 + 3 W V g' g'' + W g'''``

    (the Poisson's ``g = -e^eta`` gives :func:`_zip_zero_partials`).
    """
    W, V = Z.expit(), (-Z).expit()
    P, Q = R.expit(), (-R).expit()
    WV = W * V
    g1, g2 = g[0], g[1]
    if m == 2:
        return [WV - P * Q, WV * g1, WV * g1**2 + W * g2]
    S3 = WV * (V - W)
    return [S3 - P * Q * (Q - P), S3 * g1, S3 * g1**2 + WV * g2,
            S3 * g1**3 + 3.0 * (WV * (g1 * g2)) + W * g[2]]


def _nb_zero_log_p0(E, alpha):
    """``g = log p(0) = -a softplus(eta - log a)`` of a NegativeBinomial with mean
    ``e^eta`` and fixed shape ``a``, and ``[g', g'', g''']`` (intervals):
    ``g' = -a p``, ``g'' = -a p q``, ``g''' = -a p q (q - p)``,
    ``p = sigmoid(eta - log a)``, ``q = 1 - p``."""
    a = np.asarray(alpha, dtype=np.float64)
    T = E - np.log(a)
    p, q = T.expit(), (-T).expit()
    g = a * (-T).log_expit()  # -a softplus(T) = a log sigmoid(-T)
    pq = p * q
    return g, [-(a * p), -(a * pq), -(a * (pq * (q - p)))]


def _nb_count_partials(m, E, R, y, alpha):
    """The m-th partials of a count row (``y > 0``) of the zero-inflated NegativeBinomial
    with fixed shape ``a``, ``l = log sigmoid(r) + y eta - (y + a) log(a + e^eta) + c``:
    ``l_ee = -(y + a) p q``, ``l_eee = -(y + a) p q (q - p)``, the mixed ones 0,
    ``l_rr = -P Q``, ``l_rrr = -P Q (Q - P)``."""
    a = np.asarray(alpha, dtype=np.float64)
    T = E - np.log(a)
    p, q = T.expit(), (-T).expit()
    P, Q = R.expit(), (-R).expit()
    ya = y + a
    zero = Interval(np.zeros(np.broadcast(E.lo, R.lo).shape))
    if m == 2:
        return [-(P * Q), zero, -(ya * (p * q))]
    return [-(P * Q * (Q - P)), zero, zero, -(ya * (p * q * (q - p)))]


def _zinb_partials(m, E, R, y, alpha):
    """All rows' m-th partials in ``(eta, r)`` (zero rows :func:`_zi_zero_partials`,
    count rows :func:`_nb_count_partials`)."""
    E, R, y, _ = _per_row_box(E, R, y)
    count = _nb_count_partials(m, E, R, y, alpha)
    zero = y == 0
    if not np.any(zero):
        return count
    g, dg = _nb_zero_log_p0(E, alpha)
    parts = _zi_zero_partials(m, R, R + g, dg)
    return [_rows_where(zero, a, b) for a, b in zip(parts, count)]


def _positive_alpha(params, family):
    alpha = params.get("n")
    if alpha is None:
        raise TypeError(f"{family} needs alpha (the NegativeBinomial's n).")
    alpha = np.asarray(alpha, dtype=np.float64)
    if not np.all((alpha > 0) & np.isfinite(alpha)):
        raise ValueError(f"{family}: alpha must be finite and > 0.")
    return alpha


class ZINBMeanFamily(_ZeroInflated):
    """What the four zero-inflated NegativeBinomial families share: the PyMC mixture
    ``pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha)`` read as its
    weights, zero and NegativeBinomial components (:class:`~.partials._ZeroInflated`),
    with a log mean. Not registered itself: the families below (and in
    :mod:`.zinb_alpha`, :mod:`.zinb_both`) state which of ``psi`` and ``alpha`` are fixed
    or free."""

    label = "ZeroInflatedNegativeBinomial"
    component = "NegBinomialRV"
    derived_params = ("psi", "n", "p")
    link = "log_mean_negbinomial"
    param_labels = {**_ZeroInflated.param_labels, "n": "shape alpha"}


class ZeroInflatedNegBinomialLog(ZINBMeanFamily):
    """Zero-inflated NegativeBinomial with a log link, ``psi`` in (0, 1) and shape
    ``alpha`` fixed: ``p(0) = 1 - psi + psi (a / (a + mu))^a``, ``p(y) = psi NB(y | mu, a)``
    for ``y > 0``, ``mu = e^eta``. Count rows: ``f'' = (y + a) p q``,
    ``f''' = (y + a) p q (q - p)`` with ``p = sigmoid(eta - log a)`` (bounded, as the
    NegativeBinomial with fixed shape); zero rows: :func:`_zi_zero_partials` with
    ``g = -a softplus(eta - log a)``, bounded too. Suprema over an interval by interval
    arithmetic on sub-intervals (as :class:`ZeroInflatedPoissonLog`)."""

    name = "zeroinflated_negbinomial_log"
    aliases = ("zinb",)
    description = ("pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha) with "
                   "psi and alpha fixed")
    fixed_params = ("psi", "n")
    unbounded = "region bounds only (the suprema are taken over intervals)"

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: interval enclosures of ``|l^(m)|`` over sub-intervals."""
        if y is None or params.get("psi") is None:
            raise TypeError(f"{self.name} needs y and psi.")
        alpha = _positive_alpha(params, self.name)
        r = _logit_psi(params["psi"], self.name)
        R = Interval(np.broadcast_to(r, lo.shape))
        best = np.zeros_like(lo)
        for a, b in _pieces(lo, hi):
            part = _zinb_partials(m, Interval(a, b), R, y, alpha)[m]
            best = np.maximum(best, part.abs_sup())
        return best

    def row_loglik(self, eta, y, params, derivatives=2):
        """Count rows: ``l = log psi + y eta - (y + a) log(a + e^eta)``,
        ``l' = y - (y + a) p``, ``l'' = -(y + a) p q``; zero rows:
        ``l = softplus(r + g) - softplus(r)``, ``l' = W g'``, ``l'' = W V g'^2 + W g''``
        (up to constants per row; Cornish et al. 2019, eq. 10)."""
        a = float(np.ravel(_positive_alpha(params, self.name))[0])
        r = _logit_psi(params["psi"], self.name)
        eta = np.asarray(eta, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        zero = y == 0
        t = eta - math.log(a)
        sp = np.logaddexp(0.0, t)  # softplus(t) = log(1 + mu / a)
        z = r - a * sp
        l_zero = np.logaddexp(0.0, z) - np.logaddexp(0.0, r)
        l_count = log_expit(r) + y * eta - (y + a) * (math.log(a) + sp)
        l0 = np.where(zero, l_zero, l_count)
        if derivatives == 0:
            return (l0,)
        p, q = expit(t), expit(-t)
        w, v = expit(z), expit(-z)
        g1, g2 = -a * p, -a * p * q
        l1 = np.where(zero, w * g1, y - (y + a) * p)
        l2 = np.where(zero, w * v * g1 * g1 + w * g2, -(y + a) * p * q)
        return (l0, l1, l2)


class ZeroInflatedNegBinomialLogit(_LogitPsi, ZINBMeanFamily):
    """Zero-inflated NegativeBinomial with a log link, fixed shape ``alpha`` and ``psi`` a
    free variable in (0, 1) sampled on the logit scale: rows of ``(eta, r = logit psi)``
    with the partials of :func:`_zinb_partials`."""

    name = "zeroinflated_negbinomial_logit"
    description = ("pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha) with "
                   "alpha fixed and psi a free variable in (0, 1) (logit-transformed)")
    fixed_params = ("n",)
    unbounded = "the derivatives in logit psi need region bounds"

    def box_partials(self, m, E, S, y, **params):
        """:func:`_zinb_partials` (``S``: the interval of ``r = logit psi``)."""
        return _zinb_partials(m, E, S, y, _positive_alpha(params, self.name))
