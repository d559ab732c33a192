"""Student-t rows with an unknown degrees of freedom ``nu``: ScalableMH's GLM families
``student_t_nu`` (``nu`` and the scale ``sigma`` sampled: three row coordinates) and
``student_t_nu_fixed_scale`` (``nu`` sampled, ``sigma`` fixed: two).

The row log density of ``y ~ StudentT(nu, mu=eta, sigma)`` is

    l = A(nu) - s + G(nu, T),   A(nu) = lgamma((nu+1)/2) - lgamma(nu/2) - log(nu pi)/2,
    G(nu, T) = -(nu+1)/2 log(1 + T^2/nu),   T = (y - eta) e^-s,

in the coordinates ``eta``, ``s = log sigma`` and ``t = log(nu - c)``, ``nu = c + e^t``
(``c >= 0`` a fixed shift: ``c = 0`` for ``nu ~ Gamma(2, 0.1)``, ``c = 1`` for
``nu = 1 + pm.Exponential(...)``). Each of ScalableMH's row constants (Cornish et al.
2019, "Scalable Metropolis-Hastings for exact Bayesian inference with large datasets",
eq. 12, in the path form of :func:`pymc_subsample.kernels.scalable.phi.path_phi`) needs the
suprema of the m-th partials (m = 2, 3) over a box of the three coordinates
(:func:`pymc_subsample.kernels.scalable.region.local_supd`). They are closed forms, evaluated
with interval arithmetic (:class:`~pymc_subsample.kernels.scalable.interval.Interval`).

Derivation (docs/engine.md, "Student-t with an unknown nu"). With ``u = T^2``,
``D = nu + u``, ``w = e^t`` and ``H_k = d^k G / dT^k`` at fixed ``nu``:

* ``eta`` and ``s`` enter through ``T`` only (and ``-s``, linear): ``dT/d eta = -e^-s``,
  ``dT/ds = -T``, so for a function ``K(T)`` the (a, b)-th partial in ``(eta, s)`` is
  ``(-e^-s)^a K_1`` (a + b = 1, with ``-T`` for ``s``), and at order 2 and 3
  ``e^-2s K2``, ``e^-s (K1 + T K2)``, ``T (K1 + T K2)``, ``-e^-3s K3``,
  ``-e^-2s (2 K2 + T K3)``, ``-e^-s (K1 + 3 T K2 + T^2 K3)``,
  ``-T (K1 + 3 T K2 + T^2 K3)``. The coefficients do not involve ``nu``, so a
  derivative in ``nu`` acts on the ``K``'s alone.
* ``t`` enters through ``nu = c + e^t``: ``d/dt F = w F'``,
  ``d^2/dt^2 F = w F' + w^2 F''``, ``d^3/dt^3 F = w F' + 3 w^2 F'' + w^3 F'''`` (``'`` in
  ``nu``).
* At fixed ``nu``: ``H1 = -(nu+1) T / D``, ``H2 = -(nu+1)(nu - u) / D^2``,
  ``H1 + T H2 = -2 nu (nu+1) T / D^2``, ``H3 = 2 (nu+1) T (3 nu - u) / D^3``,
  ``2 H2 + T H3 = 2 nu (nu+1)(3 u - nu) / D^3``,
  ``H1 + 3 T H2 + T^2 H3 = -4 nu (nu+1) T (nu - u) / D^3``.
* In ``nu``: ``dH1 = -T (u - 1) / D^2``, ``d^2 H1 = 2 T (u - 1) / D^3`` (so
  ``w dH1 + w^2 d^2 H1 = w T (u - 1)(2 w - D) / D^3``), ``dH2 = (u^2 - 3 u (nu+1) + nu) /
  D^3``, ``d(H1 + T H2) = 2 T (nu - u (2 nu + 1)) / D^3``; and, from
  ``G = -(nu+1) L / 2``, ``L = log D - log nu``:
  ``G' = -log(1 + u/nu)/2 + (nu+1) u / (2 nu D)``,
  ``G'' = u (u (nu - 1) - 2 nu) / (2 nu^2 D^2)``,
  ``G''' = u (3 nu^2 + 3 nu u + u^2 - 3 nu^2 u / 2 - nu u^2 / 2) / (nu^3 D^3)``.
* ``A' = (psi((nu+1)/2) - psi(nu/2))/2 - 1/(2 nu)``,
  ``A'' = (psi1((nu+1)/2) - psi1(nu/2))/4 + 1/(2 nu^2)``,
  ``A''' = (psi2((nu+1)/2) - psi2(nu/2))/8 - 1/nu^3`` (``psi_n`` the polygamma
  functions).
* The pure ``t`` partial ``d^m (A + G) / dt^m``: written as above, its terms
  ``w^p (A + G)^(p)`` are each much larger than their sum and interval evaluation
  overestimates it badly. ``G``'s part is instead written in ``tau = log nu``, where
  ``G = -(nu+1) S(log u - tau) / 2`` with ``S`` the softplus (derivatives: the logistic
  ``u / D`` and its derivatives, terms of the size of the result;
  :func:`_g_t`), then chained to ``t``; it is enclosed by the tighter of direct
  evaluation and the mean-value form in ``t`` (excess quadratic in the width).
  ``A``'s part depends on ``t`` alone: enclosed on a grid of 256 points per distinct
  interval with the mean value theorem, ``A'''' = (psi3((nu+1)/2) - psi3(nu/2))/16 +
  3/nu^4`` bounding the slope (:func:`_a_part`).

Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import numpy as np

from ..scalable.interval import Interval
from .location import _StudentTRows
from .partials import multi_indices

__all__ = ["StudentTNu", "StudentTNuFixedScale", "student_nu_partials"]

def _log1p(X: Interval) -> Interval:
    """``log(1 + x)`` on an interval of ``x > -1`` (increasing; no cancellation)."""
    return X._increasing(np.log1p)


def _a_derivative(p: int, NU: Interval) -> Interval:
    """``A^(p)(nu)`` (p = 1..4) on ``NU`` (module docstring)."""
    half = (NU + 1.0) * 0.5
    low = NU * 0.5
    if p == 1:
        return (half.polygamma(0) - low.polygamma(0)) * 0.5 - Interval(0.5) / NU
    if p == 2:
        return (half.polygamma(1) - low.polygamma(1)) * 0.25 + Interval(0.5) / NU**2
    if p == 3:
        return (half.polygamma(2) - low.polygamma(2)) * 0.125 - Interval(1.0) / NU**3
    return (half.polygamma(3) - low.polygamma(3)) * 0.0625 + Interval(3.0) / NU**4


#: Stirling numbers of the second kind: d^c/dt^c F(c0 + e^t) = sum_p S(c, p) w^p F^(p)
_STIRLING = {1: (1.0,), 2: (1.0, 1.0), 3: (1.0, 3.0, 1.0), 4: (1.0, 7.0, 6.0, 1.0)}


def _chain_t(c: int, W: Interval, F) -> Interval:
    """``d^c/dt^c`` of ``F(nu)``, ``nu = shift + e^t``, from the ``nu``-derivatives
    ``F(p)`` (a callable ``p -> Interval``): ``w F'``, ``w F' + w^2 F''``,
    ``w F' + 3 w^2 F'' + w^3 F'''``, ``w F' + 7 w^2 F'' + 6 w^3 F''' + w^4 F''''``
    (Faa di Bruno for ``nu = c + e^t``: Stirling numbers of the second kind)."""
    out = None
    for p, k in enumerate(_STIRLING[c], start=1):
        term = W**p * F(p)
        term = term if k == 1.0 else k * term
        out = term if out is None else out + term
    return out


#: grid points per distinct ``t`` interval for the enclosure of ``A``'s t-derivatives
_A_GRID = 256


def _a_part(c: int, T_box: Interval, shift: float) -> Interval:
    """``d^c A / dt^c`` over each row's ``t`` interval. ``A`` depends on ``t`` alone (the
    same for every row with the same interval: computed once per distinct interval), and
    its terms ``w^p A^(p)`` cancel (differences of polygamma functions), so rather than
    by interval evaluation over the interval it is enclosed on a grid: on each piece
    ``[t_k, t_k+1]``, ``F(t) in F(t_k) + [-h, h] sup |F'|`` (the mean value theorem, ``F'``
    by interval evaluation over the piece)."""
    lo, hi = np.broadcast_arrays(T_box.lo, T_box.hi)
    pairs, inverse = np.unique(np.stack([lo.ravel(), hi.ravel()], axis=1), axis=0,
                               return_inverse=True)
    inverse = np.asarray(inverse).ravel()
    k = np.arange(_A_GRID + 1) / _A_GRID
    out_lo = np.empty(len(pairs))
    out_hi = np.empty(len(pairs))

    def deriv(T, order):
        W = T.exp()
        NU = W + shift
        return _chain_t(order, W, lambda p: _a_derivative(p, NU))

    for r, (a, b) in enumerate(pairs):
        if b == a:
            val = deriv(Interval(np.array([a])), c)
        else:
            ends = a + (b - a) * k
            ends[-1] = b
            left = Interval(ends[:-1])
            h = (ends[1:] - ends[:-1]) * (1.0 + 1e-12)
            slope = deriv(Interval(ends[:-1], ends[1:]), c + 1).abs_sup()
            val = deriv(left, c) + Interval(-h * slope, h * slope)
        out_lo[r], out_hi[r] = val.lo.min(), val.hi.max()
    return Interval(out_lo[inverse].reshape(lo.shape), out_hi[inverse].reshape(lo.shape))


def _g_t(c: int, U: Interval, W: Interval, shift: float) -> Interval:
    """``d^c G / dt^c`` (c = 1..4), ``G = -(nu+1)/2 log(1 + u/nu)``, ``nu = shift + e^t``,
    in a form whose terms do not cancel much. In ``tau = log nu``, ``G = -(nu+1) S(x) / 2``
    with ``x = log u - tau`` and ``S`` the softplus, whose derivatives are those of the
    logistic ``sigma = u / D``: ``S' = u / D``, ``S'' = u nu / D^2``,
    ``S''' = u nu (nu - u) / D^3``, ``S'''' = u nu (nu^2 - 4 u nu + u^2) / D^4``; so
    ``d^k G / dtau^k = -((nu+1)(-1)^k S^(k) + sum_(j>=1) C(k, j) nu (-1)^(k-j) S^(k-j)) / 2``.
    Then ``tau(t) = log(shift + e^t)``: ``tau' = kappa = w / nu``,
    ``tau'' = kappa (1 - kappa)``, ``tau''' = kappa (1 - kappa)(1 - 2 kappa)``,
    ``tau'''' = kappa (1 - kappa)(1 - 6 kappa + 6 kappa^2)`` (a logistic in ``t``), and
    Faa di Bruno's formula (``tau = t`` when ``shift = 0``)."""
    from math import comb

    NU = W + shift
    D = U + NU
    S = [_log1p(U / NU), U / D, U * NU / D**2, U * NU * (NU - U) / D**3,
         U * NU * (NU**2 - 4.0 * (U * NU) + U**2) / D**4]

    def g_tau(k):
        total = (NU + 1.0) * S[k] * (-1.0) ** k
        for j in range(1, k + 1):
            total = total + (comb(k, j) * (-1.0) ** (k - j)) * (NU * S[k - j])
        return -0.5 * total

    if shift == 0.0:
        return g_tau(c)
    kap = W / NU
    one_k = Interval(shift) / NU
    t2 = kap * one_k
    t3 = t2 * ((shift - W) / NU)
    t4 = t2 * ((shift**2 - 4.0 * shift * W + W**2) / NU**2)
    if c == 1:
        return g_tau(1) * kap
    if c == 2:
        return g_tau(2) * kap**2 + g_tau(1) * t2
    if c == 3:
        return g_tau(3) * kap**3 + 3.0 * (g_tau(2) * kap * t2) + g_tau(1) * t3
    return (g_tau(4) * kap**4 + 6.0 * (g_tau(3) * kap**2 * t2)
            + g_tau(2) * (3.0 * t2**2 + 4.0 * (kap * t3)) + g_tau(1) * t4)


def _pure_t(c: int, U: Interval, T_box: Interval, shift: float) -> Interval:
    """``d^c l / dt^c = d^c (A + G) / dt^c`` over ``U x T_box``: :func:`_a_part` plus the
    ``G`` part, enclosed by the intersection of its direct interval evaluation and the
    mean-value form ``F(U, t_m) + F_t(U, T) [-h, h]`` (``t_m`` the middle, ``h`` the
    half-width). The terms ``w^p G^(p)`` cancel (each is much larger than their sum),
    so direct evaluation overestimates the range in proportion to the width; the
    mean-value form's excess is quadratic in it."""

    def at(T, order):
        return _g_t(order, U, T.exp(), shift)

    lo, hi = np.broadcast_arrays(T_box.lo, T_box.hi)
    mid = 0.5 * (lo + hi)
    half = np.maximum(hi - mid, mid - lo) * (1.0 + 1e-12)
    centred = at(Interval(mid), c) + at(T_box, c + 1) * Interval(-half, half)
    direct = at(T_box, c)
    g_part = Interval(np.maximum(centred.lo, direct.lo), np.minimum(centred.hi, direct.hi))
    return g_part + _a_part(c, T_box, shift)


def student_nu_partials(m: int, E: Interval, ES: Interval, T_box: Interval, y, *,
                        shift: float = 0.0, with_s: bool = True) -> dict:
    """Enclosures of the m-th partials ``d^m l / d eta^a ds^b dt^c`` of the Student-t row
    log density over a box (module docstring), keyed by ``(a, b, c)``.

    Parameters
    ----------
    m : int
        2 or 3.
    E : Interval
        ``eta``.
    ES : Interval
        ``e^-s`` (``1 / sigma``; a point interval for a fixed scale).
    T_box : Interval
        ``t = log(nu - shift)``.
    y : ndarray
        Responses.
    shift : float
        ``c >= 0`` in ``nu = c + e^t``.
    with_s : bool
        Include the partials with ``b > 0`` (False for a fixed scale).

    Returns
    -------
    dict of (int, int, int) -> Interval
    """
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m must be 2 or 3, got {m}.")
    T = (y - E) * ES
    U = T**2
    W = T_box.exp()
    NU = W + float(shift)
    D = U + NU
    n1 = NU + 1.0
    out = {}

    def keep(a, b, c, value):
        if with_s or b == 0:
            out[(a, b, c)] = value

    keep(0, 0, m, _pure_t(m, U, T_box, float(shift)))
    if m == 2:
        H2 = -(n1 * (NU - U)) / D**2
        P11 = -2.0 * (NU * n1 * T) / D**2
        dH1 = -(T * (U - 1.0)) / D**2
        keep(2, 0, 0, ES**2 * H2)
        keep(1, 1, 0, ES * P11)
        keep(0, 2, 0, T * P11)
        keep(1, 0, 1, -(ES * W * dH1))
        keep(0, 1, 1, -(T * W * dH1))
        return out
    H3 = 2.0 * (n1 * T * (3.0 * NU - U)) / D**3
    C2 = 2.0 * (NU * n1 * (3.0 * U - NU)) / D**3
    C3 = -4.0 * (NU * n1 * T * (NU - U)) / D**3
    keep(3, 0, 0, -(ES**3 * H3))
    keep(2, 1, 0, -(ES**2 * C2))
    keep(1, 2, 0, -(ES * C3))
    keep(0, 3, 0, -(T * C3))
    # one derivative in (eta, s), two in t: w dH1 + w^2 d2H1 = w T (u - 1)(2 w - D) / D^3
    K1tt = W * T * (U - 1.0) * (2.0 * W - D) / D**3
    keep(1, 0, 2, -(ES * K1tt))
    keep(0, 1, 2, -(T * K1tt))
    # two in (eta, s), one in t
    dH2 = (U**2 - 3.0 * (U * n1) + NU) / D**3
    dP11 = 2.0 * (T * (NU - U * (2.0 * NU + 1.0))) / D**3
    keep(2, 0, 1, ES**2 * W * dH2)
    keep(1, 1, 1, ES * W * dP11)
    keep(0, 2, 1, T * W * dP11)
    return out


def _shift(params) -> float:
    shift = float(params.get("nu_shift", 0.0) or 0.0)
    if not np.isfinite(shift) or shift < 0:
        raise ValueError(f"Student-t nu = c + e^t needs a shift c >= 0, got {shift}.")
    return shift


class StudentTNu(_StudentTRows):
    """Student-t regression with ``nu`` and ``sigma`` sampled: ``mu = eta``,
    ``sigma = e^s``, ``nu = c + e^t`` (module docstring); three row coordinates
    ``(eta, s, t)``, the path bound over boxes of all three."""

    name = "student_t_nu"
    aliases = ("student_t_nu_scale",)
    description = ("pm.StudentT(nu, mu=eta, sigma) with sigma a positive free variable and "
                   "nu one too (or c + one, c >= 0)")
    scale_param = "sigma"
    free_params = ("sigma", "nu")
    #: the third row coordinate: ``t = log(nu - nu_shift)`` (engine.glm)
    extra_coords = ("nu",)
    unbounded = "the derivatives in the log scale and log nu are unbounded"

    def box_partials(self, m, E, S, y, **params):
        """Not defined for two coordinates: :meth:`box_partials_d` takes the three."""
        raise TypeError("student_t_nu has three row coordinates (eta, log sigma, log nu): "
                        "use box_partials_d (region.local_supd).")

    def box_partials_d(self, m, boxes, y, **params):
        """Enclosures of the m-th partials over ``E x S x T`` in the order of
        :func:`pymc_subsample.kernels.scalable.region.multi_indices` ``(m, 3)``
        (:func:`student_nu_partials`)."""
        E, S, T_box = boxes
        parts = student_nu_partials(m, E, (-S).exp(), T_box, np.asarray(y, np.float64),
                                    shift=_shift(params))
        return [parts[j] for j in multi_indices(m, 3)]


class StudentTNuFixedScale(_StudentTRows):
    """Student-t regression with ``nu`` sampled and ``sigma`` fixed: ``mu = eta``,
    ``nu = c + e^t``; two row coordinates ``(eta, t)`` (the two-parameter box API, the
    second coordinate being ``t``)."""

    name = "student_t_nu_fixed_scale"
    description = ("pm.StudentT(nu, mu=eta, sigma) with sigma fixed and nu a positive free "
                   "variable (or c + one, c >= 0)")
    fixed_params = ("sigma",)
    scale_param = "nu"
    scale_transform = "log_shifted"
    free_params = ("nu",)
    unbounded = "the derivatives in log nu are unbounded"

    def box_partials(self, m, E, S, y, **params):
        """``d^m l / d eta^j dt^(m-j)``, ``j = 0..m``, over ``E x S`` (``S`` the interval of
        ``t = log(nu - c)``; :func:`student_nu_partials` with ``e^-s = 1 / sigma``)."""
        sigma = params.get("sigma")
        if sigma is None:
            raise TypeError("student_t_nu_fixed_scale needs sigma.")
        sigma = np.asarray(sigma, dtype=np.float64)
        if np.any(~np.isfinite(sigma) | (sigma <= 0)):
            raise ValueError("student_t_nu_fixed_scale: sigma must be finite and > 0.")
        parts = student_nu_partials(m, E, Interval(1.0 / sigma), S, np.asarray(y, np.float64),
                                    shift=_shift(params), with_s=False)
        return [parts[(j, 0, m - j)] for j in range(m + 1)]
