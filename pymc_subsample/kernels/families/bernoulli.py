"""Bernoulli rows with a logit or a probit link (one-parameter rows, global bounds).

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_expit, log_ndtr

from .base import GLMFamily
from .partials import (
    _LOGIT_PEAK3,
    _LOGIT_SUP3,
    _PROBIT_SUP3,
    PROBIT_PEAK3,
    _probit_derivatives,
    _sup,
    probit_lambda,
)


class _BernoulliRows(GLMFamily):
    """What the Bernoulli families share: ``pm.Bernoulli`` read through its ``p``, responses
    in {0, 1}, and suprema of ``|f''|`` and ``|f'''|`` over the whole line that depend on
    no response (:attr:`_sups`, derived in each family's docstring). Not registered
    itself: the families below state their link."""

    label = "Bernoulli"
    distribution = "BernoulliRV"
    dist_params = ("p",)
    link_param = "p"
    support = "binary"
    #: ``(sup |f''|, sup |f'''|)`` over the whole line (the family's docstring)
    _sups: tuple

    def sup_derivative(self, m, **params):
        """Cornish et al. (2019), eq. 12: the constants :attr:`_sups` (class docstring)."""
        sup2, sup3 = self._sups
        return sup2 if m == 2 else sup3


class BernoulliLogit(_BernoulliRows):
    """Bernoulli with a logit link: ``f(eta) = log(1 + exp(eta)) - y eta`` (``y`` in
    {0, 1}; with ``y`` in {-1, 1}, ``log(1 + exp(-y eta))``, the same derivatives up to
    sign). With ``s = sigmoid(eta)``: ``|f''| = s (1 - s)``, ``|f'''| = |s (1 - s)(1 - 2 s)|``
    (the linear term drops out). ``s (1 - s) <= 1/4`` (at ``s = 1/2``); for
    ``g(s) = s (1 - s)(1 - 2 s)``, ``g'(s) = 6 s^2 - 6 s + 1 = 0`` at
    ``s = 1/2 -+ 1/(2 sqrt 3)``, where ``s (1 - s) = 1/6`` and ``|1 - 2 s| = 1/sqrt 3``:

        sup |f''| = 1/4,    sup |f'''| = 1 / (6 sqrt 3) ~= 0.0962250,

    peaks at ``eta = 0`` and ``eta = +-log(2 + sqrt 3)``."""

    name = "bernoulli_logit"
    aliases = ("logistic", "logit", "bernoulli")
    description = "pm.Bernoulli(logit_p=eta) (or p=pm.math.invlogit(eta))"
    link = "logit"
    link_hint = "a logit link (logit_p=eta)"
    _sups = (0.25, _LOGIT_SUP3)

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound. Both ``|f''| = p q`` and ``|f'''| = p q |p - q|`` (``p = s``,
        ``q = 1 - s``) are even in ``eta``; in ``|eta|``, ``|f''|`` decreases from 0 and
        ``|f'''|`` rises to its peak at ``log(2 + sqrt 3)`` and then falls. So each
        supremum over ``[lo, hi]`` is the value at one point: the ``|eta|`` of the
        interval nearest 0 (``m = 2``) or nearest the peak (``m = 3``), evaluated with
        one ``expit`` of ``-|eta|`` (accurate in the tails)."""
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        alo, ahi = np.abs(lo), np.abs(hi)
        # the |eta| reached on [lo, hi]: [near, far]
        near = np.minimum(alo, ahi)
        near[(lo <= 0.0) & (hi >= 0.0)] = 0.0
        if m == 2:
            t = near
        else:
            t = np.maximum(alo, ahi)
            np.minimum(t, _LOGIT_PEAK3, out=t)
            np.maximum(t, near, out=t)
        q = expit(-t)
        p = 1.0 - q
        p *= q  # p q
        if m == 2:
            return p
        q *= -2.0
        q += 1.0  # p - q = 1 - 2 q
        p *= q
        return p

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = y eta - log(1 + e^eta)``, ``l' = y - s``, ``l'' = -s (1 - s)``
        (Bardenet et al. 2017, Sec. 7.1; Cornish et al. 2019, eq. 10)."""
        # log p = y eta - log(1 + e^eta) = log s(eta) - (1 - y) eta, s the logistic function
        if derivatives == 0:
            return (log_expit(eta) - (1.0 - y) * eta,)
        # with the derivatives s is needed anyway, and log(s) costs a sixth of log_expit
        # (the set-up's passes over all rows). Both are within an ulp or two of
        # log s in absolute terms; below eta = -700, where s loses precision to
        # subnormals, log s = eta - log1p(e^eta) is eta to double precision.
        s = expit(eta)
        with np.errstate(divide="ignore"):
            le = np.log(s)
        if np.min(eta, initial=0.0) < -700.0:
            le = np.where(eta < -700.0, eta, le)[()]  # [()]: a scalar stays a scalar
        l0 = le - (1.0 - y) * eta
        d2 = s - 1.0
        d2 *= s  # -s (1 - s)
        return (l0, y - s, d2)


class BernoulliProbit(_BernoulliRows):
    """Bernoulli with a probit link: ``f(eta) = -log Phi(s eta)`` with ``s = 2 y - 1``, so
    ``|f^(m)(eta)| = |g^(m)(s eta)|`` for ``g = log Phi``. With ``lambda = phi / Phi`` (the
    inverse Mills ratio, ``lambda' = -lambda (t + lambda)``): ``g'' = -lambda (t + lambda)``
    and ``g''' = lambda (t + lambda)(t + 2 lambda) - lambda``. ``-g''`` is the variance
    reduction of a normal truncated above, in ``(0, 1)``, tending to 1 as ``t -> -inf``
    (Sampford 1953, "Some inequalities on Mill's ratio and related functions"); ``g'''`` is
    positive with one peak, at ``t* = 1.00237`` (a root of ``g''''``, found numerically;
    the tests check both facts on a fine grid):

        sup |f''| = 1,    sup |f'''| = g'''(t*) ~= 0.2957188."""

    name = "bernoulli_probit"
    aliases = ("probit",)
    description = "pm.Bernoulli(p=pm.math.invprobit(eta))"
    link = "probit"
    link_hint = "a probit link (p=pm.math.invprobit(eta))"
    _sups = (1.0, _PROBIT_SUP3)

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound. ``|g''|`` decreases in ``t``, so over both signs of ``s`` its
        supremum is ``|g''(-max(|lo|, |hi|))|``; ``g'''`` has one peak, at ``t*``: the
        larger of its suprema over ``[lo, hi]`` and ``[-hi, -lo]`` (taken at
        ``max(t, -8)``, where the closed form is accurate: an upper bound, as ``g'''``
        rises up to ``t*``)."""
        if m == 2:
            return _sup(lambda e: _probit_derivatives(-np.abs(e))[0], lo, hi, ())
        # g''' rises on (-inf, t*]; below -8 its formula loses digits to cancellation, so
        # it is read at -8 there (larger, hence still a bound: 0.004 against 0.296)
        g3 = lambda t: _probit_derivatives(np.maximum(t, -8.0))[1]  # noqa: E731
        return np.maximum(_sup(g3, lo, hi, (PROBIT_PEAK3,)), _sup(g3, -hi, -lo, (PROBIT_PEAK3,)))

    def row_loglik(self, eta, y, params, derivatives=2):
        """``l = log Phi(s eta)``, ``l' = s lambda``, ``l'' = -lambda (t + lambda)``
        (Cornish et al. 2019, eq. 10)."""
        # log p = log Phi(s eta), s = 2 y - 1; lambda = phi / Phi, lambda' = -lambda (t + lambda)
        sgn = 2.0 * y - 1.0
        t = sgn * eta
        lam = probit_lambda(t)
        return (log_ndtr(t), sgn * lam, -lam * (t + lam))
