"""Helpers shared by the GLM families: suprema over intervals, the probit link's
derivatives and their enclosures, the location-scale partials, the per-row box
arithmetic of families whose rows differ by type (zero rows, censored rows), and the
declarations the zero-inflated families share (:class:`_ZeroInflated`,
:class:`_LogitPsi`).

Every interval here is an :class:`~pymc_subsample.kernels.scalable.interval.Interval`; the
order of partials is that of :func:`multi_indices`.

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from scipy.special import log_ndtr

from .._validation import check_finite_positive
from ..scalable.interval import Interval
from .base import GLMFamily


#: sup_s |s (1 - s)(1 - 2 s)| over s in (0, 1), attained at s = 1/2 -+ 1/(2 sqrt 3).
_LOGIT_SUP3 = 1.0 / (6.0 * math.sqrt(3.0))
#: sup_x |x (x^2 - 3)| / (1 + x^2)^3, attained at x = sqrt(2) - 1.
_T_SUP3 = (3.0 + 2.0 * math.sqrt(2.0)) / 8.0
#: the peak of g''' for g = log Phi (the standard normal log cdf), a root of g'''' found
#: by Brent's method: g''' > 0 rises on (-inf, t*] and falls on [t*, inf)
PROBIT_PEAK3 = 1.0023693410546552
#: sup_t |g'''(t)| = g'''(PROBIT_PEAK3) = 0.295718819193..., with a 1e-6 relative margin
_PROBIT_SUP3 = 0.29571881919312326 * (1.0 + 1e-6)
#: where |s (1 - s)(1 - 2 s)| peaks: s = 1/2 + 1/(2 sqrt 3), eta = log(2 + sqrt 3)
_LOGIT_PEAK3 = math.log(2.0 + math.sqrt(3.0))


def probit_lambda(t):
    """The inverse Mills ratio ``lambda(t) = phi(t) / Phi(t)`` (``g' `` for ``g = log Phi``),
    from ``log_ndtr`` so that it stays finite far in the left tail."""
    t = np.asarray(t, dtype=np.float64)
    return np.exp(-0.5 * t * t - 0.5 * math.log(2.0 * math.pi) - log_ndtr(t))


def _sup(g, lo, hi, critical):
    """``max |g|`` over ``[lo, hi]`` (per row) from the ends and the interior critical
    points (``critical``: scalars or per-row arrays)."""
    val = np.maximum(np.abs(g(lo)), np.abs(g(hi)))
    for c in critical:
        inside = (lo <= c) & (c <= hi)
        if np.any(inside):
            # a scalar critical point: |g(c)| once, not once per row
            gc = np.abs(g(np.float64(c) if np.ndim(c) == 0 else c))
            val = np.where(inside, np.maximum(val, gc), val)
    return val


def _probit_derivatives(t):
    """``(|g''|, g''')`` of ``g = log Phi`` at ``t`` (``lambda = phi / Phi``)."""
    t = np.asarray(t, dtype=np.float64)
    lam = probit_lambda(t)
    return lam * (t + lam), lam * (t + lam) * (t + 2.0 * lam) - lam


def _positive(name: str, value, family: str) -> float:
    return check_finite_positive(name, value, label=f"{family}: parameter {name}")


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


#: eta above which a zero row's terms are evaluated at this value: they carry a factor
#: ``e^(r - x)``, ``x = e^eta >= 4.8e8``, below the smallest float there (for any
#: ``r = logit psi < 10^8``), and ``x^3`` would overflow far beyond it
_ZI_ETA_MAX = 20.0
#: sub-interval width and most sub-intervals for the interval suprema of zero rows
_ZI_PIECE = 0.05
_ZI_MAX_PIECES = 16


def _logit_psi(psi, family: str) -> np.ndarray:
    """``r = log(psi / (1 - psi))`` of a fixed zero-inflation probability, checked to lie
    in (0, 1)."""
    psi = np.asarray(psi, dtype=np.float64)
    if not np.all((psi > 0.0) & (psi < 1.0)):
        raise ValueError(
            f"{family}: psi (the probability of the count component) must lie strictly "
            "between 0 and 1; with psi = 1 use pm.Poisson.")
    return np.log(psi) - np.log1p(-psi)


class _ZeroInflated(GLMFamily):
    """What the zero-inflated families share: PyMC's zero-inflated distributions are a
    ``Mixture`` of ``DiracDelta(0)`` and a count distribution with weights
    ``(1 - psi, psi)``, read as its weights, zero and count components (the parameter
    reader ``"zero_inflated"``), the count component with a log mean; their zero rows
    and count rows differ, so the responses are needed. Not registered itself."""

    distribution = "MixtureRV"
    dist_params = ("w", "zero", "count")
    param_reader = "zero_inflated"
    link_hint = "a log link (use mu=pm.math.exp(eta))"
    needs_y = True
    param_labels = {"psi": "zero-inflation probability psi"}


class _LogitPsi(GLMFamily):
    """A zero-inflated family whose ``psi`` is a free variable in (0, 1), sampled on the
    logit scale (PyMC's default for ``pm.Beta``, ``pm.Uniform(0, 1)``): the second row
    coordinate is ``r = logit psi``."""

    scale_param = "psi"
    scale_transform = "logit"
    free_params = ("psi",)


def _rows_where(mask, a: Interval, b: Interval) -> Interval:
    """Row by row: ``a`` where ``mask``, else ``b``."""
    return Interval(np.where(mask, a.lo, b.lo), np.where(mask, a.hi, b.hi))


def _per_row_box(E: Interval, S: Interval, y):
    """``(E, S, y, shape)``: the box's intervals and the responses broadcast to one entry
    per row (the shape of the three together), for partials that treat rows by type."""
    y = np.asarray(y, dtype=np.float64)
    n = np.broadcast(E.lo, S.lo, y).shape
    return (Interval(np.broadcast_to(E.lo, n), np.broadcast_to(E.hi, n)),
            Interval(np.broadcast_to(S.lo, n), np.broadcast_to(S.hi, n)), y, n)


def _pieces(lo, hi):
    """Sub-intervals of ``[lo_i, hi_i]`` (at most ``_ZI_MAX_PIECES``, of width about
    ``_ZI_PIECE``): interval evaluation's excess shrinks with the width."""
    width = float(np.max(hi - lo)) if np.size(lo) else 0.0
    k = int(min(_ZI_MAX_PIECES, max(1, math.ceil(width / _ZI_PIECE))))
    for i in range(k):
        a = lo + (hi - lo) * (i / k)
        b = hi if i == k - 1 else lo + (hi - lo) * ((i + 1) / k)
        yield a, b


#: below this ``t`` the closed forms of ``g''`` and ``g'''`` (``g = log Phi``) lose digits
#: to cancellation (``t + lambda`` is small): they are bounded by their value here instead
_LOGPHI_TAIL = -8.0


def _logphi_enclosure(k, tl, th):
    """An enclosure ``[lo, hi]`` (per row) of ``g^(k)`` over ``t in [tl, th]``,
    ``g = log Phi``, ``k`` in {1, 2, 3}, from the shapes of these functions (the
    :class:`BernoulliProbit` docstring; checked on dense grids in the tests):
    ``g' = lambda > 0`` decreases; ``g'' = -lambda (t + lambda)`` increases from -1 to 0;
    ``g''' > 0`` rises up to ``t* =`` :data:`PROBIT_PEAK3` and falls after it. Below
    :data:`_LOGPHI_TAIL` the monotone ends are read at the tail point (``g''`` is then
    enclosed by ``[-1, g''(-8)]``, ``g'''`` by ``[0, g'''(-8)]``); every end is widened by
    a relative margin covering the rounding of the closed forms."""
    tl = np.asarray(tl, dtype=np.float64)
    th = np.asarray(th, dtype=np.float64)
    if k == 1:
        # lambda = exp(-t^2/2 - log sqrt(2 pi) - log Phi(t)): the exponent's rounding grows
        # with t^2 in the left tail
        lo = probit_lambda(th) * (1.0 - 1e-10 - 1e-15 * th * th)
        hi = probit_lambda(tl) * (1.0 + 1e-10 + 1e-15 * tl * tl)
        return np.maximum(lo, 0.0), hi
    tail = _LOGPHI_TAIL
    if k == 2:
        lo = np.where(tl < tail, -1.0,
                      -_probit_derivatives(np.maximum(tl, tail))[0] * (1.0 + 1e-9))
        hi = -_probit_derivatives(np.maximum(th, tail))[0] * (1.0 - 1e-9)
        return np.maximum(lo, -1.0), np.minimum(hi, 0.0)

    def up(t):
        return _probit_derivatives(np.maximum(t, tail))[1] * (1.0 + 1e-8)

    def down(t):
        return np.where(t < tail, 0.0,
                        _probit_derivatives(np.maximum(t, tail))[1] * (1.0 - 1e-8))

    peak = (tl <= PROBIT_PEAK3) & (PROBIT_PEAK3 <= th)
    hi = np.where(peak, _PROBIT_SUP3, np.maximum(up(tl), up(th)))
    lo = np.maximum(np.minimum(down(tl), down(th)), 0.0)
    return lo, hi


def multi_indices(m: int, d: int) -> tuple:
    """The multi-indices ``j = (j_1, ..., j_d)``, ``j_k >= 0``, ``|j| = m``, in ascending
    lexicographic order: the order of the columns of
    :func:`pymc_subsample.kernels.scalable.region.local_supd`. For ``d = 2`` they are
    ``(0, m), (1, m - 1), ..., (m, 0)``: column ``j`` is the partial with ``j``
    derivatives in the first coordinate, the order of
    :meth:`~pymc_subsample.kernels.families.GLMFamily.box_partials`."""
    return tuple(j for j in itertools.product(range(m + 1), repeat=d) if sum(j) == m)
