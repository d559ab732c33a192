"""Zero-inflated Poisson rows with a log link, ``psi`` fixed or sampled (logit scale).

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np
from scipy.special import expit, log_expit

from ..scalable.interval import Interval
from .partials import (
    _ZI_ETA_MAX,
    _LogitPsi,
    _ZeroInflated,
    _logit_psi,
    _per_row_box,
    _pieces,
    _rows_where,
)


def _zip_zero_partials(m, E, R):
    """Enclosures of the m-th partials of a zero row of the zero-inflated Poisson,
    ``l = softplus(r - x) - softplus(r)`` with ``x = e^eta``, ``r = logit psi``, over the
    box ``E x R``, in the order ``d^m l / d eta^j d r^(m-j)``, ``j = 0..m``.

    With ``z = r - x``, ``W = sigmoid(z)``, ``V = 1 - W``, ``P = sigmoid(r)``,
    ``Q = 1 - P`` (``softplus' = sigmoid``, ``sigmoid' = W V``,
    ``sigmoid'' = W V (V - W)``, and ``dz/d eta = -x``, ``d^2 z / d eta^2 = -x``):

    * m = 2: ``l_rr = W V - P Q``, ``l_er = -x W V``, ``l_ee = x W (x V - 1)``;
    * m = 3: ``l_rrr = W V (V - W) - P Q (Q - P)``, ``l_err = -x W V (V - W)``,
      ``l_eer = x W V (x (V - W) - 1)``,
      ``l_eee = -x W (x^2 V (V - W) - 3 x V + 1)``.
    """
    E = Interval(np.minimum(E.lo, _ZI_ETA_MAX), np.minimum(E.hi, _ZI_ETA_MAX))
    X = E.exp()
    Z = R - X
    W, V = Z.expit(), (-Z).expit()
    P, Q = R.expit(), (-R).expit()
    WV = W * V
    if m == 2:
        return [WV - P * Q, -(X * WV), X * W * (X * V - 1.0)]
    VW = V - W
    return [WV * VW - P * Q * (Q - P), -(X * WV * VW), X * WV * (X * VW - 1.0),
            -(X * W * (X**2 * (V * VW) - 3.0 * (X * V) + 1.0))]


def _zip_count_partials(m, E, R):
    """The m-th partials of a count row (``y > 0``) of the zero-inflated Poisson,
    ``l = log sigmoid(r) + y eta - e^eta``: ``l_ee = l_eee = -e^eta``, the mixed ones 0,
    ``l_rr = -P Q``, ``l_rrr = -P Q (Q - P)`` (:func:`_zip_zero_partials`' notation)."""
    X = E.exp()
    P, Q = R.expit(), (-R).expit()
    zero = Interval(np.zeros(np.broadcast(E.lo, R.lo).shape))
    if m == 2:
        return [-(P * Q), zero, -X]
    return [-(P * Q * (Q - P)), zero, zero, -X]


class _ZIPRows(_ZeroInflated):
    """What the zero-inflated Poisson families share: ``pm.ZeroInflatedPoisson(psi,
    mu=pm.math.exp(eta))``, its Poisson component read through ``mu`` with a log link.
    Not registered itself: the families below state whether ``psi`` is fixed or free."""

    label = "ZeroInflatedPoisson"
    component = "PoissonRV"
    derived_params = ("psi", "mu")
    link, link_param = "log", "mu"


class ZeroInflatedPoissonLog(_ZIPRows):
    """Zero-inflated Poisson with a log link and a fixed ``psi`` in (0, 1):
    ``p(0) = 1 - psi + psi e^-mu``, ``p(y) = psi Poisson(y | mu)`` for ``y > 0``,
    ``mu = e^eta``. PyMC builds it as a ``Mixture`` of ``DiracDelta(0)`` and the Poisson
    with weights ``(1 - psi, psi)``.

    Count rows (``y > 0``): ``f = -l = e^eta - y eta - log psi``, the Poisson row:
    ``f'' = f''' = e^eta``, increasing, so the supremum over ``[lo, hi]`` is ``exp(hi)``
    (no global bound). Zero rows: with ``r = logit psi`` and ``x = e^eta``,
    ``l = log(1 - psi + psi e^-x) = softplus(r - x) - softplus(r)``, whose derivatives in
    ``eta`` are bounded (they carry ``e^-x`` as ``x`` grows and ``x`` as it shrinks):
    ``l'' = x W (x V - 1)``, ``l''' = -x W (x^2 V (V - W) - 3 x V + 1)``,
    ``W = sigmoid(r - x)``, ``V = 1 - W``. Their suprema over ``[lo, hi]`` are enclosed
    by interval arithmetic (:mod:`~pymc_subsample.kernels.scalable.interval`) on sub-intervals of
    width at most 0.05: an upper bound, not the exact supremum (docs/engine.md,
    "Zero-inflated Poisson")."""

    name = "zeroinflated_poisson_log"
    aliases = ("zip", "zeroinflated_poisson", "zero_inflated_poisson")
    description = "pm.ZeroInflatedPoisson(psi, mu=pm.math.exp(eta)) with psi fixed"
    fixed_params = ("psi",)
    unbounded = ("zero-inflated Poisson with log link: the count rows' derivatives, "
                 "exp(eta), are unbounded")

    def local_sup(self, m, lo, hi, *, y=None, **params):
        """Region bound: ``exp(hi)`` for count rows, interval enclosures of ``|l^(m)|``
        for zero rows (class docstring)."""
        if y is None or params.get("psi") is None:
            raise TypeError(f"{self.name} needs y and psi.")
        y = np.asarray(y, dtype=np.float64)
        r = _logit_psi(params["psi"], self.name)
        zero = y == 0
        out = np.exp(hi)
        if np.any(zero):
            R = Interval(np.broadcast_to(r, lo.shape))
            best = np.zeros_like(lo)
            for a, b in _pieces(lo, hi):
                part = _zip_zero_partials(m, Interval(a, b), R)[m]
                best = np.maximum(best, part.abs_sup())
            out = np.where(zero, best, out)
        return out

    def row_loglik(self, eta, y, params, derivatives=2):
        """Count rows: ``l = log psi + y eta - e^eta``, ``l' = y - e^eta``,
        ``l'' = -e^eta``; zero rows: ``l = softplus(r - x) - softplus(r)``,
        ``l' = -x W``, ``l'' = x W (x V - 1)`` (class docstring; Cornish et al. 2019,
        eq. 10)."""
        r = _logit_psi(params["psi"], self.name)
        eta = np.asarray(eta, dtype=np.float64)
        zero = np.asarray(y) == 0
        with np.errstate(over="ignore"):  # a far point: the test rejects it
            x = np.exp(eta)
        x0 = np.exp(np.minimum(eta, _ZI_ETA_MAX))  # zero rows (see _ZI_ETA_MAX)
        z = r - x0
        l_zero = np.logaddexp(0.0, z) - np.logaddexp(0.0, r)
        l_count = log_expit(r) + y * eta - x
        l0 = np.where(zero, l_zero, l_count)
        if derivatives == 0:
            return (l0,)
        xw = x0 * expit(z)
        l1 = np.where(zero, -xw, y - x)
        l2 = np.where(zero, xw * (x0 * expit(-z) - 1.0), -x)
        return (l0, l1, l2)


class ZeroInflatedPoissonLogit(_LogitPsi, _ZIPRows):
    """Zero-inflated Poisson with a log link and ``psi`` a free variable in (0, 1),
    sampled on the logit scale (:class:`~.partials._LogitPsi`): rows of
    ``(eta, r = logit psi)``, both affine in the step's variables. The partials
    over a box of ``(eta, r)`` are :func:`_zip_count_partials` (``y > 0``) and
    :func:`_zip_zero_partials` (``y = 0``); none is bounded in ``eta`` alone for count
    rows, so region bounds (the path bound) are needed."""

    name = "zeroinflated_poisson_logit"
    description = ("pm.ZeroInflatedPoisson(psi, mu=pm.math.exp(eta)) with psi a free "
                   "variable in (0, 1) (logit-transformed)")
    unbounded = "the count rows' derivatives, exp(eta), are unbounded"

    def box_partials(self, m, E, S, y, **params):
        """Count rows :func:`_zip_count_partials`, zero rows :func:`_zip_zero_partials`
        (``S``: the interval of ``r = logit psi``)."""
        E, S, y, _ = _per_row_box(E, S, y)
        zero = y == 0
        count = _zip_count_partials(m, E, S)
        if not np.any(zero):
            return count
        return [_rows_where(zero, a, b) for a, b in zip(_zip_zero_partials(m, E, S), count)]
