"""Censored Normal rows, ``mu = eta``, bounds fixed, with a fixed or a sampled scale.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_ndtr

from ..scalable.interval import Interval
from .base import GLMFamily
from .location import _FixedScale, _SampledScale
from .partials import (
    _PROBIT_SUP3,
    _location_scale,
    _logphi_enclosure,
    _per_row_box,
    _positive,
    _rows_where,
    probit_lambda,
)


def _censored_rows(y, lower, upper, shape):
    """``(at_lower, at_upper, c)`` per row: whether the row is censored at its lower bound
    (``y <= lower``, PyMC's rule, the lower bound first) or at its upper bound
    (``y >= upper``), and the bound it is censored at (0 for the other rows)."""
    if y is None:
        raise TypeError("censored rows need y (the responses), to tell which rows are "
                        "censored.")
    y = np.broadcast_to(np.asarray(y, dtype=np.float64), shape)
    lower = np.broadcast_to(np.asarray(-np.inf if lower is None else lower,
                                       dtype=np.float64), shape)
    upper = np.broadcast_to(np.asarray(np.inf if upper is None else upper,
                                       dtype=np.float64), shape)
    at_lower = np.isfinite(lower) & (y <= lower)
    at_upper = ~at_lower & np.isfinite(upper) & (y >= upper)
    c = np.where(at_lower, lower, np.where(at_upper, upper, 0.0))
    return at_lower, at_upper, c


class _CensoredNormalRows(GLMFamily):
    """What the censored Normal families share: ``pm.Censored(pm.Normal.dist(mu=eta,
    sigma), lower, upper)`` read through the Normal inside (its ``mu`` and ``sigma``), the
    responses needed to tell which rows are censored. Not registered itself: the
    families below state whether ``sigma`` is fixed or free."""

    label = "Censored Normal"
    distribution = "CensoredRV"
    dist_params = ("dist", "lower", "upper")
    param_reader = "censored"
    component = "NormalRV"
    derived_params = ("mu", "sigma")
    link, link_param = "identity", "mu"
    link_hint = "a Normal distribution inside (pm.Censored(pm.Normal.dist(mu=eta, sigma), ...))"
    needs_y = True
    param_labels = {"sigma": "scale sigma", "lower": "lower bound", "upper": "upper bound"}


class CensoredNormal(_CensoredNormalRows, _FixedScale):
    """Censored Normal regression with fixed ``sigma > 0``:
    ``pm.Censored(pm.Normal.dist(mu=eta, sigma), lower, upper)``, bounds fixed (numbers
    or one per row; either may be None or infinite). With ``g = log Phi`` and
    ``lambda = g' = phi / Phi``, a row's ``U_i = -l_i`` is

    * uncensored (``lower < y < upper``): ``(y - eta)^2 / (2 sigma^2)``, so
      ``|f''| = 1 / sigma^2`` and ``f''' = 0``;
    * censored at the lower bound (``y = lower``): ``-g(t)``, ``t = (lower - eta) / sigma``;
    * censored at the upper bound (``y = upper``): ``-g(t)``, ``t = (eta - upper) / sigma``
      (``1 - Phi(-t) = Phi(t)``).

    For a censored row ``|f^(m)(eta)| = |g^(m)(t)| / sigma^m``, and from the probit family
    (:class:`BernoulliProbit`) ``|g''| < 1`` and ``0 < g''' <= g'''(t*) ~= 0.2957188``:

        sup |f''| = 1 / sigma^2,    sup |f'''| = 0.2957188 / sigma^3

    over the whole line and every row (Cornish et al. 2019, eq. 12; ``f''' = 0`` when no
    row can be censored). Over an interval of ``eta`` (:meth:`local_sup`) each row takes
    the supremum of its own type: ``|g''|`` decreases in ``t`` and ``g'''`` has one peak."""

    name = "censored_normal"
    aliases = ("censored",)
    description = ("pm.Censored(pm.Normal.dist(mu=eta, sigma), lower, upper) with sigma, "
                   "lower and upper fixed")
    fixed_params = ("sigma", "lower", "upper")

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: class docstring (the largest over the row types:
        the responses are not read here)."""
        sigma = _positive("sigma", params["sigma"], self.name)
        if m == 2:
            return 1.0 / (sigma * sigma)
        lower = np.asarray(params.get("lower", -np.inf), dtype=np.float64)
        upper = np.asarray(params.get("upper", np.inf), dtype=np.float64)
        if np.all(np.isneginf(lower)) and np.all(np.isposinf(upper)):
            return 0.0  # no row can be censored: a Normal likelihood
        return _PROBIT_SUP3 / sigma**3

    def local_sup(self, m, lo, hi, *, y=None, sigma=None, lower=None, upper=None,
                  **params):
        """Region bound, per row type (class docstring): ``t`` runs over
        ``[(lower - hi), (lower - lo)] / sigma`` (censored below) or
        ``[(lo - upper), (hi - upper)] / sigma`` (censored above); the supremum of
        ``|g''|`` is at the interval's left end, that of ``g'''`` at ``t*`` if inside, else
        at an end (:func:`_logphi_enclosure`)."""
        if sigma is None:
            raise TypeError("censored_normal needs sigma.")
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        at_lower, at_upper, c = _censored_rows(y, lower, upper, lo.shape)
        sig = np.broadcast_to(np.asarray(sigma, dtype=np.float64), lo.shape)
        cens = at_lower | at_upper
        tl = np.where(at_lower, c - hi, np.where(at_upper, lo - c, 0.0)) / sig
        th = np.where(at_lower, c - lo, np.where(at_upper, hi - c, 0.0)) / sig
        # the rounding of the differences and the division: a relative widening
        tl = tl - 1e-12 * (1.0 + np.abs(tl))
        th = th + 1e-12 * (1.0 + np.abs(th))
        g_lo, g_hi = _logphi_enclosure(m, tl, th)
        if m == 2:
            val = np.where(cens, -g_lo, 1.0)  # g'' < 0: |g''| largest at the low end
        else:
            val = np.where(cens, g_hi, 0.0)
        return val / sig**m

    def row_loglik(self, eta, y, params, derivatives=2):
        """Uncensored rows: ``l = -r^2 / (2 sigma^2)``, ``l' = r / sigma^2``,
        ``l'' = -1 / sigma^2`` (``r = y - eta``); censored rows: ``l = log Phi(t)``,
        ``l' = -+lambda(t) / sigma``, ``l'' = -lambda (t + lambda) / sigma^2``
        (``t = (lower - eta) / sigma`` or ``(eta - upper) / sigma``; Cornish et al. 2019,
        eq. 10)."""
        eta = np.asarray(eta, dtype=np.float64)
        y = np.asarray(y, dtype=np.float64)
        shape = np.broadcast(eta, y).shape
        sigma = np.asarray(params["sigma"], dtype=np.float64)
        at_lower, at_upper, c = _censored_rows(y, params.get("lower"), params.get("upper"),
                                               shape)
        cens = at_lower | at_upper
        sgn = np.where(at_lower, -1.0, 1.0)
        r = y - eta
        t = np.where(cens, sgn * (eta - c) / sigma, 0.0)
        l0 = np.where(cens, log_ndtr(t), -0.5 * r * r / sigma**2)
        if derivatives == 0:
            return (l0,)
        lam = probit_lambda(t)
        l1 = np.where(cens, sgn * lam / sigma, r / sigma**2)
        l2 = np.where(cens, -lam * (t + lam), -1.0) / sigma**2
        return (l0, l1, l2)


def _censored_partials(m, T, es):
    """Partials of a censored row ``l = g(T)``, ``g = log Phi``, in ``(eta, s)``:
    ``T = (lower - eta) e^-s`` (censored below) or ``(eta - upper) e^-s`` (above), so
    ``dT/d eta = -+e^-s``, ``dT/ds = -T``; with ``G_k = g^(k)(T)`` and up to signs (only
    their absolute values are used):

    * m = 2: ``l_ss = T (G1 + T G2)``, ``l_es = e^-s (G1 + T G2)``, ``l_ee = e^-2s G2``;
    * m = 3: ``l_sss = -T K``, ``l_ess = e^-s K``, ``l_ees = -e^-2s (2 G2 + T G3)``,
      ``l_eee = e^-3s G3``, ``K = G1 + 3 T G2 + T^2 G3``,

    in the order ``d^m / d eta^j d s^(m-j)``, ``j = 0..m``. ``T`` and ``es = e^-s`` are
    intervals; ``G_k`` are enclosed over ``T`` by :func:`_logphi_enclosure`."""
    G1, G2, G3 = (Interval(*_logphi_enclosure(k, T.lo, T.hi)) for k in (1, 2, 3))
    if m == 2:
        B = G1 + T * G2
        return [T * B, es * B, es**2 * G2]
    K = G1 + 3.0 * (T * G2) + T**2 * G3
    return [T * K, es * K, es**2 * (2.0 * G2 + T * G3), es**3 * G3]


class CensoredNormalScale(_SampledScale, _CensoredNormalRows):
    """Censored Normal regression with a sampled scale: ``mu = eta``, ``sigma = e^s``,
    bounds fixed. Uncensored rows are :class:`NormalScale`'s; censored rows are
    ``l = log Phi(T)`` (:func:`_censored_partials`). Their control variates stay in the
    step's space (no :meth:`standard_logpdf`: a censored row is not ``-s + H(t)``)."""

    name = "censored_normal_scale"
    description = ("pm.Censored(pm.Normal.dist(mu=eta, sigma), lower, upper) with lower and "
                   "upper fixed and sigma a positive free variable")
    fixed_params = ("lower", "upper")

    def box_partials(self, m, E, S, y, lower=None, upper=None, **params):
        """Uncensored rows: :func:`_location_scale` (Normal); censored rows:
        :func:`_censored_partials`."""
        E, S, y, n = _per_row_box(E, S, y)
        normal = _location_scale(m, E, S, y, None)
        at_lower, at_upper, c = _censored_rows(y, lower, upper, n)
        cens = at_lower | at_upper
        if not np.any(cens):
            return normal
        below, above = c - E, E - c  # T e^s for rows censored below / above
        D = Interval(np.where(at_lower, below.lo, np.where(at_upper, above.lo, 0.0)),
                     np.where(at_lower, below.hi, np.where(at_upper, above.hi, 0.0)))
        es = (-S).exp()
        parts = _censored_partials(m, D * es, es)
        return [_rows_where(cens, p, q) for p, q in zip(parts, normal)]
