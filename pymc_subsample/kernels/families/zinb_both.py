"""Zero-inflated NegativeBinomial with both ``psi`` and the shape ``alpha`` sampled.

``pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha)`` with ``psi`` a free
variable in (0, 1) (``pm.Beta("psi", 2, 2)``, sampled on the logit scale) and ``alpha`` a
positive free variable (``pm.Gamma("alpha", 2, 1)``, sampled on the log scale). Each row
depends on the step's unconstrained vector ``q`` through three affine coordinates

    eta (the linear predictor),   r = logit psi,   s = log alpha,

in that order (the columns of :func:`pymc_subsample.kernels.scalable.region.multi_indices`
``(m, 3)`` are ``(j_eta, j_r, j_s)``). ScalableMH's row constants (Cornish et al. 2019,
"Scalable Metropolis-Hastings for exact Bayesian inference with large datasets", eq. 12
in its whitened region form; the path bound of
:func:`pymc_subsample.kernels.scalable.region.path_constant_d`) need the suprema of every m-th
partial (m = 2, 3) over a box of the three coordinates
(:func:`pymc_subsample.kernels.scalable.region.local_supd`), enclosed here with interval
arithmetic (:class:`~pymc_subsample.kernels.scalable.interval.Interval`). The derivation is in
docs/engine.md, "Zero-inflated NegativeBinomial with psi and alpha sampled".

Derivation. With ``mu = e^eta``, ``a = e^s``, ``P = sigmoid(r)`` (= psi), ``Q = 1 - P``:

* count rows (``y > 0``): ``l = log sigmoid(r) + NB(y | mu, a)``, a sum of a function of
  ``r`` and one of ``(eta, s)``. The mixed partials with ``r`` vanish; the pure ``r``
  ones are ``-P Q`` (m = 2) and ``-P Q (Q - P)`` (m = 3); the ``(eta, s)`` ones are
  :meth:`~pymc_subsample.kernels.families.NegBinomialLog.box_partials`.
* zero rows: ``l = softplus(z) - softplus(r)``, ``z = r + g(eta, s)``, with
  ``g = log p(0) = -a softplus(eta - s)`` and its partials in ``(eta, s)`` to order 3
  from :func:`pymc_subsample.kernels.families.zinb_alpha._log_p0_partials`. Treat ``r`` as
  a third coordinate of ``z``: ``z_r = 1`` and every higher partial of ``z`` involving
  ``r`` is 0. With ``W = sigmoid(z)``, ``V = 1 - W`` (``softplus' = W``, ``W' = W V``,
  ``(W V)' = W V (V - W)``), Faa di Bruno's formula gives, for coordinates ``i, j, k``,

      l_ij  = W V z_i z_j + W z_ij - [i = j = r] P Q,
      l_ijk = W V (V - W) z_i z_j z_k + W V (z_ij z_k + z_ik z_j + z_jk z_i) + W z_ijk
              - [i = j = k = r] P Q (Q - P),

  i.e. ``l_rr = W V - P Q``, ``l_re = W V g_e``, ``l_rs = W V g_s``,
  ``l_rrr = W V (V - W) - P Q (Q - P)``, ``l_rre = W V (V - W) g_e``,
  ``l_res = W V (V - W) g_e g_s + W V g_es``, ... and, without ``r``, the partials of
  :func:`pymc_subsample.kernels.families.zinb_alpha.zinb_alpha_zero_partials` (psi fixed);
  with ``s`` fixed they are those of the fixed-shape family
  (:class:`~pymc_subsample.kernels.families.ZeroInflatedNegBinomialLogit`).

Every partial is bounded over a bounded box (the ``a``-weighted terms are finite on it)
but not over the whole space, so only region bounds apply. Nothing here imports PyMC or
PyTensor.
"""

from __future__ import annotations

import numpy as np

from ..scalable.interval import Interval
from .counts import NegBinomialLog
from .messages import auto_refusal
from .partials import _LogitPsi, _rows_where, multi_indices
from .zinb import ZINBMeanFamily
from .zinb_alpha import _log_p0_partials

__all__ = ["ZeroInflatedNegBinomialBoth", "zinb_both_partials"]

#: the row coordinates, in the order of the step's coordinates (eta, logit psi, log alpha)
_COORDS = ("e", "r", "s")

_NB = NegBinomialLog()


def _z_partial(key: str, d: dict):
    """The partial of ``z = r + g(eta, s)`` along the coordinates in ``key`` (letters of
    :data:`_COORDS`, any order): ``z_r = 1``, 0 for any other partial involving ``r``, and
    ``g``'s partials (``d``, keyed by sorted letters ``"e" < "s"``) otherwise. None: 0."""
    if "r" in key:
        return 1.0 if key == "r" else None
    return d["".join(sorted(key))]


def _times(*factors):
    """Product of intervals and numbers, None when a factor is None (a zero)."""
    out = 1.0
    for f in factors:
        if f is None:
            return None
        out = f * out if isinstance(f, Interval) else out * f
    return out


def _sum(terms, shape):
    """Sum of the non-None terms (an :class:`Interval` of ``shape``; zeros when none)."""
    out = None
    for t in terms:
        if t is None:
            continue
        t = t if isinstance(t, Interval) else Interval(np.full(shape, float(t)))
        out = t if out is None else out + t
    return Interval(np.zeros(shape)) if out is None else out


def _zero_row_partials(m: int, E: Interval, R: Interval, S: Interval) -> list:
    """Enclosures of the m-th partials of a zero row over ``E x R x S`` in the order of
    ``multi_indices(m, 3)`` (module docstring: Faa di Bruno for ``softplus(r + g)``)."""
    g, d = _log_p0_partials(E, S)
    Z = R + g
    W, V = Z.expit(), (-Z).expit()
    P, Q = R.expit(), (-R).expit()
    WV = W * V
    S3 = WV * (V - W) if m == 3 else None
    shape = np.broadcast(E.lo, R.lo, S.lo).shape
    out = []
    for j in multi_indices(m, 3):
        key = "".join(c * n for c, n in zip(_COORDS, j))  # e.g. "ers"
        z1 = [_z_partial(c, d) for c in key]
        if m == 2:
            terms = [_times(WV, z1[0], z1[1]), _times(W, _z_partial(key, d))]
            if key == "rr":
                terms.append(-(P * Q))
        else:
            i, k, n = key
            # W V multiplies the sum of the three products once (fewer occurrences of
            # an interval: a tighter enclosure, the dependency effect)
            pairs = [_times(_z_partial(i + k, d), z1[2]), _times(_z_partial(i + n, d), z1[1]),
                     _times(_z_partial(k + n, d), z1[0])]
            terms = [_times(S3, z1[0], z1[1], z1[2]),
                     None if all(t is None for t in pairs) else WV * _sum(pairs, shape),
                     _times(W, _z_partial(key, d))]
            if key == "rrr":
                terms.append(-(P * Q * (Q - P)))
        out.append(_sum(terms, shape))
    return out


def _count_row_partials(m: int, E: Interval, R: Interval, S: Interval, y) -> list:
    """Enclosures of the m-th partials of a count row, ``log sigmoid(r) + NB(y | e^eta,
    e^s)``, in the order of ``multi_indices(m, 3)``: the NegativeBinomial's partials in
    ``(eta, s)``, ``log sigmoid``'s in ``r`` and 0 for the mixed ones."""
    nb = _NB.box_partials(m, E, S, y)  # d^m / d eta^j ds^(m-j), j = 0..m
    P, Q = R.expit(), (-R).expit()
    pure_r = -(P * Q) if m == 2 else -(P * Q * (Q - P))
    shape = np.broadcast(E.lo, R.lo, S.lo, y).shape
    out = []
    for je, jr, js in multi_indices(m, 3):
        if jr == m:
            out.append(pure_r)
        elif jr == 0:
            out.append(nb[je])
        else:
            out.append(Interval(np.zeros(shape)))
    return out


def zinb_both_partials(m: int, E: Interval, R: Interval, S: Interval, y) -> list:
    """Enclosures of the m-th partials ``d^m l / d eta^j_e d r^j_r d s^j_s`` of the
    zero-inflated NegativeBinomial row log density over the box ``E x R x S``
    (``r = logit psi``, ``s = log alpha``), in the order of
    :func:`pymc_subsample.kernels.scalable.region.multi_indices` ``(m, 3)``.

    Parameters
    ----------
    m : int
        2 or 3.
    E, R, S : Interval
        The box (one interval per row, or broadcastable).
    y : array_like
        The responses (non-negative integers).

    Returns
    -------
    list of Interval
    """
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m must be 2 or 3, got {m}.")
    y = np.asarray(y, dtype=np.float64)
    n = np.broadcast(E.lo, R.lo, S.lo, y).shape

    def full(X):
        return Interval(np.broadcast_to(X.lo, n), np.broadcast_to(X.hi, n))

    E, R, S, y = full(E), full(R), full(S), np.broadcast_to(y, n)
    count = _count_row_partials(m, E, R, S, y)
    zero = y == 0
    if not np.any(zero):
        return count
    parts = _zero_row_partials(m, E, R, S)
    return [_rows_where(zero, a, b) for a, b in zip(parts, count)]


class ZeroInflatedNegBinomialBoth(_LogitPsi, ZINBMeanFamily):
    """Zero-inflated NegativeBinomial with a log link, ``psi`` a free variable in (0, 1)
    sampled on the logit scale and the shape ``alpha`` a positive free variable sampled
    on the log scale: three row coordinates ``(eta, logit psi, log alpha)``, the path
    bound over boxes of all three (:func:`zinb_both_partials`; module docstring).

    It matches when both ``psi`` and ``alpha`` are free (:attr:`free_params`); the
    families with ``alpha`` fixed (``zeroinflated_negbinomial_logit``), ``psi`` fixed
    (``zeroinflated_negbinomial_alpha``) or both fixed (``zeroinflated_negbinomial_log``)
    cover the other three cases."""

    name = "zeroinflated_negbinomial_both"
    aliases = ("zinb_both",)
    description = ("pm.ZeroInflatedNegativeBinomial(psi, mu=pm.math.exp(eta), alpha) with "
                   "psi a free variable in (0, 1) and alpha a positive free variable")
    free_params = ("psi", "n")
    #: the third row coordinate: ``s = log alpha`` (engine.glm)
    extra_coords = ("n",)
    support = "count"
    unbounded = "the derivatives in logit psi and log alpha need region bounds"

    def box_partials(self, m, E, S, y, **params):
        """Not defined for two coordinates: :meth:`box_partials_d` takes the three."""
        raise TypeError(f"{self.name} has three row coordinates (eta, logit psi, log "
                        "alpha): use box_partials_d (region.local_supd).")

    def box_partials_d(self, m, boxes, y, n_shift=0.0, **params):
        """Enclosures of the m-th partials over ``E x R x S`` (``R``: ``logit psi``,
        ``S``: ``log alpha``) in the order of
        :func:`pymc_subsample.kernels.scalable.region.multi_indices` ``(m, 3)``
        (:func:`zinb_both_partials`). ``n_shift``: the ``c`` of ``alpha = c + x`` found by
        recognition; only ``c = 0`` is supported."""
        if float(n_shift or 0.0) != 0.0:
            raise ValueError(auto_refusal(
                "a zero-inflated NegativeBinomial's alpha = c + a free variable with c > 0; "
                "use a positive free variable for alpha."))
        E, R, S = boxes
        return zinb_both_partials(m, E, R, S, y)

