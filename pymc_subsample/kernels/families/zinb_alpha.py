"""Zero-inflated NegativeBinomial with ``psi`` fixed and the shape ``alpha`` sampled.

``pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha)`` with ``alpha`` a
positive free variable (``pm.Exponential("alpha", 1)``, sampled on the log scale) and
``psi`` fixed: rows of ``(eta, s = log alpha)``, two-parameter rows whose m-th partials
over a box (:meth:`ZeroInflatedNegBinomialAlpha.box_partials`) feed ScalableMH's path
bound (Cornish et al. 2019, "Scalable Metropolis-Hastings for exact Bayesian inference
with large datasets", eq. 12 over a region; :func:`pymc_subsample.kernels.scalable.region.
path_constants`). The derivation is in docs/engine.md, "Zero-inflated NegativeBinomial
with a sampled shape".

With ``mu = e^eta``, ``a = e^s``, ``r = logit psi`` (a constant), ``x = eta - s``,
``p = sigmoid(x)``, ``q = 1 - p``:

* count rows (``y > 0``): ``l = log psi + NB(y | mu, a)``, the partials of
  :class:`~pymc_subsample.kernels.families.NegBinomialLog` (``log psi`` drops out);
* zero rows: ``l = softplus(r + g) - softplus(r)`` with
  ``g = log p0 = -a log(1 + mu / a) = -a softplus(x)``.

Nothing here imports PyMC or PyTensor. The family is registered in
:mod:`pymc_subsample.kernels.families` (its ``__init__``).
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit

from ..scalable.interval import Interval
from .counts import NegBinomialLog, _LogShape
from .partials import _logit_psi, _per_row_box, _rows_where
from .zinb import ZINBMeanFamily

__all__ = ["ZeroInflatedNegBinomialAlpha", "softplus_minus_sigmoid"]

#: below this ``x`` the series of :func:`softplus_minus_sigmoid` is used
_H_SERIES_BELOW = -2.0
#: terms of that series (``u = e^x <= e^-2``: the remainder is below ``1e-21`` relative)
_H_TERMS = 26
#: relative (and absolute) widening of the enclosure of ``h`` (rounding of its closed form)
_H_REL = 1e-12
_H_ABS = 1e-300


def softplus_minus_sigmoid(x) -> np.ndarray:
    """``h(x) = softplus(x) - sigmoid(x) = log(1 + e^x) - e^x / (1 + e^x)``, accurate to a
    few units in the last place for every ``x``.

    ``h' = sigmoid - sigmoid (1 - sigmoid) = p^2 > 0`` and ``h(-inf) = 0``: ``h`` is
    positive and increasing. For ``x < -2`` the two terms cancel (``h ~ e^(2x) / 2``), so
    it is summed from its series in ``u = e^x``,
    ``h = sum_{k >= 2} (-1)^k (k - 1) / k u^k`` (of ``log(1 + u) = sum (-1)^(k+1) u^k / k``
    and ``u / (1 + u) = sum (-1)^(k+1) u^k``).
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    small = x < _H_SERIES_BELOW
    u = np.exp(x[small])
    acc = np.zeros_like(u)
    for k in range(_H_TERMS, 1, -1):  # Horner in u of sum_k (-1)^k (k-1)/k u^(k-2)
        acc = acc * u + ((-1.0) ** k) * (k - 1.0) / k
    out[small] = acc * u * u
    big = ~small
    out[big] = np.logaddexp(0.0, x[big]) - expit(x[big])
    return out


def _h_enclosure(X: Interval) -> Interval:
    """An enclosure of :func:`softplus_minus_sigmoid` over ``X`` (it increases: its values
    at the ends, widened for rounding). Monotone enclosures of ``h`` avoid the cancellation
    of ``softplus(X) - sigmoid(X)`` taken as two intervals (width ~ ``e^x`` against a value
    ~ ``e^(2x)``)."""
    lo = softplus_minus_sigmoid(X.lo)
    hi = softplus_minus_sigmoid(X.hi)
    return Interval(np.maximum(lo * (1.0 - _H_REL), 0.0), hi * (1.0 + _H_REL) + _H_ABS)


def _log_p0_partials(E: Interval, S: Interval):
    """``g = log p(0) = -a softplus(x)`` of a NegativeBinomial with mean ``e^eta`` and shape
    ``a = e^s`` (``x = eta - s``), and its partials up to order 3 as intervals, keyed by
    the derivative's letters (``"e"``: eta, ``"s"``: s). With ``p = sigmoid(x)``,
    ``q = 1 - p``, ``h = softplus(x) - p`` (``d/ds`` of ``a F(x)`` is ``a (F - F')``):

    * ``g_e = -a p``, ``g_s = -a h``;
    * ``g_ee = -a p q``, ``g_es = -a p^2``, ``g_ss = -a (h - p^2)``;
    * ``g_eee = -a p q (q - p)``, ``g_ees = -2 a p^2 q``, ``g_ess = -a p^2 (p - q)``,
      ``g_sss = -a (h - 2 p^3)``.
    """
    a = S.exp()
    X = E - S
    p, q = X.expit(), (-X).expit()
    H = _h_enclosure(X)
    p2 = p**2
    g = -(a * (-(-X).log_expit()))  # -a softplus(x) = a log sigmoid(-x)
    d = {
        "e": -(a * p),
        "s": -(a * H),
        "ee": -(a * (p * q)),
        "es": -(a * p2),
        "ss": -(a * (H - p2)),
        "eee": -(a * (p * q * (q - p))),
        "ees": -(2.0 * (a * (p2 * q))),
        "ess": -(a * (p2 * (p - q))),
        "sss": -(a * (H - 2.0 * p**3)),
    }
    return g, d


def zinb_alpha_zero_partials(m: int, E: Interval, S: Interval, r) -> list:
    """Enclosures of the m-th partials of a zero row ``l = softplus(z) - softplus(r)``,
    ``z = r + g(eta, s)`` (:func:`_log_p0_partials`), over the box ``E x S``, in the order
    ``d^m l / d eta^j d s^(m-j)``, ``j = 0..m``.

    With ``W = sigmoid(z)``, ``V = 1 - W`` (``softplus' = W``, ``W' = W V``,
    ``W'' = W V (V - W)``), Faa di Bruno's formula for ``softplus(r + g)``:

    * ``l_ij = W V g_i g_j + W g_ij``;
    * ``l_ijk = W V (V - W) g_i g_j g_k + W V (g_ij g_k + g_ik g_j + g_jk g_i) + W g_ijk``.
    """
    g, d = _log_p0_partials(E, S)
    Z = g + np.asarray(r, dtype=np.float64)
    W, V = Z.expit(), (-Z).expit()
    WV = W * V
    ge, gs = d["e"], d["s"]
    if m == 2:
        return [WV * gs**2 + W * d["ss"],
                WV * (ge * gs) + W * d["es"],
                WV * ge**2 + W * d["ee"]]
    S3 = WV * (V - W)
    return [S3 * gs**3 + 3.0 * (WV * (gs * d["ss"])) + W * d["sss"],
            S3 * (ge * gs**2) + WV * (2.0 * (d["es"] * gs) + d["ss"] * ge) + W * d["ess"],
            S3 * (ge**2 * gs) + WV * (d["ee"] * gs + 2.0 * (d["es"] * ge)) + W * d["ees"],
            S3 * ge**3 + 3.0 * (WV * (ge * d["ee"])) + W * d["eee"]]


_NB = NegBinomialLog()


class ZeroInflatedNegBinomialAlpha(_LogShape, ZINBMeanFamily):
    """Zero-inflated NegativeBinomial with a log link, ``psi`` in (0, 1) fixed and the
    shape ``alpha`` a positive free variable sampled on the log scale: rows of
    ``(eta, s = log alpha)``. Count rows have the partials of
    :class:`~pymc_subsample.kernels.families.NegBinomialLog`, zero rows those of
    :func:`zinb_alpha_zero_partials` (module docstring; docs/engine.md). With ``psi``
    sampled too (three row coordinates): :mod:`~pymc_subsample.kernels.families.zinb_both`."""

    name = "zeroinflated_negbinomial_alpha"
    aliases = ("zinb_alpha",)
    description = ("pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha) with "
                   "psi fixed and alpha a positive free variable")
    fixed_params = ("psi",)
    scale_param = "n"
    free_params = ("n",)
    support = "count"  # the non-negative integers (GLMFamily.support, where declared)

    def box_partials(self, m, E, S, y, psi=None, **params):
        """Count rows: :meth:`NegBinomialLog.box_partials`; zero rows:
        :func:`zinb_alpha_zero_partials` (``S``: the interval of ``s = log alpha``;
        ``psi``: fixed, one number or one per row)."""
        if psi is None:
            raise TypeError(f"{self.name} needs psi (the probability of the count "
                            "component), fixed.")
        r = _logit_psi(psi, self.name)
        E, S, y, n = _per_row_box(E, S, y)
        count = _NB.box_partials(m, E, S, y)
        zero = y == 0
        if not np.any(zero):
            return count
        parts = zinb_alpha_zero_partials(m, E, S, np.broadcast_to(r, n))
        return [_rows_where(zero, a, b) for a, b in zip(parts, count)]

