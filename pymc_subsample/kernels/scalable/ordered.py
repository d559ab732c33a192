"""Derivative bounds of ordered-logistic rows, for ScalableMH's ``bounds="auto"``.

Cornish et al. (2019), "Scalable Metropolis-Hastings for exact Bayesian inference with
large datasets", eq. 12, in the whitened region form of the path step factor
(:func:`pymc_subsample.kernels.scalable.phi.path_phi`): for every row we need ``M_i`` with
``|D^m l_i(z)[v, ..., v]| <= M_i`` for unit ``v`` and every whitened point ``z`` of the
ball ``||z|| <= R`` (``q = q_hat + L z``), ``m = k + 1`` in ``{2, 3}``.

The row
-------
Row ``i`` with category ``y_i in {0, ..., K-1}`` has log-likelihood

    l_i = log(F(a_i) - F(b_i)),   a_i = c_{y_i} - eta_i,   b_i = c_{y_i - 1} - eta_i,

``c_{-1} = -inf``, ``c_{K-1} = +inf``, ``F`` the logistic cdf. With ``sp(x) = log(1 + e^x)``
and ``d = a - b = c_y - c_{y-1}`` (``e^a - e^b = e^b expm1(d)``,
``1 - F(x) = e^{-sp(x)}``, ``F(x) = e^{x - sp(x)}``):

    middle  (1 <= y <= K-2):  l = h(d) + b - sp(a) - sp(b),   h(d) = log expm1(d),
    y = 0:                    l = -sp(-a),
    y = K-1:                  l = -sp(b).

So the row is a sum of scalar functions of three scalars ``a``, ``b`` and ``d``, and the
singular part (``h`` as ``d -> 0``, where ``a -> b``) depends on the *data-free* gap
``d = c_y - c_{y-1}`` only. Its derivatives (``d > 0``):

    h'(d)   = 1 / (1 - e^{-d}),          decreasing, > 1
    h''(d)  = -1 / (4 sinh^2(d/2)),       |h''| decreasing
    h'''(d) = cosh(d/2) / (4 sinh^3(d/2)), decreasing

so their suprema over ``[d_lo, d_hi]`` are at ``d_lo`` (infinite when ``d_lo <= 0``: the
constant is then ``+inf`` and the step takes its exact full-data fallback, see
:func:`ordered_constants`). For ``sp``: ``sp' = s``, ``sp'' = s (1 - s)``,
``sp''' = s (1 - s)(1 - 2 s)`` (``s`` the logistic function): ``sp'`` increases (sup at the
upper end), ``sp''`` peaks at 0, ``|sp'''|`` peaks at ``+-log(2 + sqrt 3)`` (value
``1 / (6 sqrt 3)``): each supremum over an interval is the largest of the ends and the
peaks inside (:func:`sp_sup`).

The coordinates
---------------
``eta_i`` is affine in ``q``; the cutpoints are data-free and of the form

    c(q) = c_hat + P (q - q_hat) + B (exp(q_S) - exp(q_hat_S))

(the ordered transform: ``c_0 = q_0``, ``c_k = q_0 + sum_{j<=k} exp(q_j)``; a cumulative sum
of log-transformed positive increments; fixed or affine cutpoints: ``B = 0``), so
``a``, ``b``, ``d`` are curved in ``q`` through ``exp(q_S)`` only. With ``w = L u``
(``u`` a unit whitened direction), ``rho_j = ||L_j||`` (row ``j`` of ``L``, so
``|w_j| <= rho_j`` and ``q_j in [q_hat_j -+ rho_j R]`` on the ball) and
``E_j = exp(q_hat_j + rho_j R)``, a scalar ``t(q) = t_hat + p (q - q_hat) +
beta . (exp(q_S) - exp(q_hat_S))`` has, on the ball,

    |D t[u]|       <= T1 = ||(p + beta diag(exp(q_hat_S))) L|| + sum_j |beta_j| e^{q_hat_j} expm1(rho_j R) rho_j
    |D^2 t[u, u]|  <= T2 = sum_j |beta_j| E_j rho_j^2,
    |D^3 t[u,u,u]| <= T3 = sum_j |beta_j| E_j rho_j^3,

(``exp(q_j) - exp(q_hat_j)`` is at most ``e^{q_hat_j} expm1(rho_j R)`` in size) and
``t in [t_hat - T1 R, t_hat + T1 R]`` (mean value theorem along the ray from the centre;
for ``d`` also the interval sum of its affine and exponential parts, whichever is tighter).

Composition (Faa di Bruno): for a scalar ``f`` of such a ``t``,
``|D^2 f(t)| <= S2 T1^2 + S1 T2`` and ``|D^3 f(t)| <= S3 T1^3 + 3 S2 T1 T2 + S1 T3``,
``S_k = sup |f^(k)|`` over ``t``'s interval; the linear term ``b`` contributes ``T_m``.
``M_i`` is the sum of its terms' bounds (triangle inequality).

Ordered probit
--------------
``F = Phi`` (``a``, ``b`` and the cutpoints already divided by the fixed ``sigma``). The end
rows are ``log Phi(a)`` and ``log Phi(-b)``: ``g = log Phi`` has ``g' = lambda`` (the
inverse Mills ratio ``phi / Phi``, decreasing: sup at the lower end) and the closed-form
suprema of ``|g''|`` and ``|g'''|`` of :class:`~pymc_subsample.kernels.families.BernoulliProbit`.
A middle row does not separate; with ``D = Phi(a) - Phi(b)``, ``r = phi(a) / D``,
``s = phi(b) / D`` (``phi'(x) = -x phi(x)``):

    l_a = r,  l_b = -s,
    l_aa = -a r - r^2,  l_ab = r s,  l_bb = b s - s^2,
    l_aaa = r (a^2 - 1) + 3 a r^2 + 2 r^3,   l_aab = -a r s - 2 r^2 s,
    l_abb = 2 r s^2 - b r s,                 l_bbb = s (1 - b^2) + 3 b s^2 - 2 s^3,

enclosed over the box ``a in A``, ``b in B`` with the gap ``a - b >= d_lo > 0``
(:func:`probit_partials`): ``inf phi(A) / D_hi <= r <= sup phi(A) / D_lo`` and the same
for ``s`` with ``B`` (``D_hi = Phi(a_hi) - Phi(b_lo)``, ``D``'s maximum),
``D_lo`` the exact minimum of ``D`` over the feasible set (``D`` increases in ``a`` and
decreases in ``b``; on the edge ``a = b + d_lo`` it is unimodal in ``b``, so the minimum
is at a corner of the feasible set), then interval evaluation of the polynomials
(:mod:`pymc_subsample.kernels.scalable.interval`). ``d_lo <= 0`` gives ``+inf``. The chain rule for
two scalars (:func:`compose2`, Faa di Bruno):
``|D^2 l| <= G_aa A1^2 + 2 G_ab A1 B1 + G_bb B1^2 + G_a A2 + G_b B2`` and
``|D^3 l| <= sum_j binom(3, j) G_(j) A1^j B1^(3-j) + 3 (G_aa A1 A2 + G_ab (A1 B2 + A2 B1)
+ G_bb B1 B2) + G_a A3 + G_b B3``.

Everything here is an upper bound by a proven monotonicity or a closed-form supremum
(or interval evaluation, for the probit's middle rows); rounding is covered by
relative margins. Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr, ndtr

from ..families import probit_lambda
from .interval import Interval
from .region import local_sup

__all__ = ["ORDERED_LINKS", "SP_THIRD_PEAK", "compose", "compose2", "cut_scalars", "h_sup",
           "ordered_constants", "ordered_loglik", "probit_partials", "sp_sup"]

#: links with closed-form bounds here
ORDERED_LINKS = ("logit", "probit")

#: ``log(2 + sqrt 3)``: where ``|sp'''|`` peaks
SP_THIRD_PEAK = math.log(2.0 + math.sqrt(3.0))

_MARGIN = 1e-7


def _sig(x):
    return 0.5 * (1.0 + np.tanh(0.5 * x))


def _sp_k(x, k):
    s = _sig(x)
    if k == 1:
        return s
    if k == 2:
        return s * (1.0 - s)
    return np.abs(s * (1.0 - s) * (1.0 - 2.0 * s))


def sp_sup(k: int, lo, hi) -> np.ndarray:
    """``sup |sp^(k)(x)|`` over ``x in [lo, hi]``, ``sp(x) = log(1 + e^x)``, ``k = 1, 2, 3``
    (module docstring): the largest of the ends and the peaks inside."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    if k == 1:
        return _sig(hi)
    out = np.maximum(_sp_k(lo, k), _sp_k(hi, k))
    if k == 2:
        return np.where((lo <= 0.0) & (hi >= 0.0), 0.25, out)
    peak = 1.0 / (6.0 * math.sqrt(3.0))
    inside = ((lo <= SP_THIRD_PEAK) & (hi >= SP_THIRD_PEAK)) | (
        (lo <= -SP_THIRD_PEAK) & (hi >= -SP_THIRD_PEAK))
    return np.where(inside, peak, out)


def h_sup(k: int, d_lo) -> np.ndarray:
    """``sup |h^(k)(d)|`` over ``d >= d_lo``, ``h(d) = log expm1(d)`` (decreasing in
    ``d > 0``, module docstring); ``+inf`` where ``d_lo <= 0``."""
    d = np.asarray(d_lo, dtype=np.float64)
    pos = d > 0.0
    dd = np.where(pos, d, 1.0)
    with np.errstate(over="ignore"):
        if k == 1:
            v = 1.0 / -np.expm1(-dd)
        else:
            sh = np.sinh(0.5 * dd)
            v = 1.0 / (4.0 * sh * sh) if k == 2 else np.cosh(0.5 * dd) / (4.0 * sh**3)
    return np.where(pos, v, np.inf)


def compose(m: int, S, T) -> np.ndarray:
    """Bound of ``|D^m f(t)|`` from ``S = (S1, S2, S3)`` (suprema of ``|f^(k)|``) and
    ``T = (T1, T2, T3)`` (bounds of ``|D^k t|``): ``S2 T1^2 + S1 T2`` (m = 2) or
    ``S3 T1^3 + 3 S2 T1 T2 + S1 T3`` (m = 3). A zero factor times an infinite one is 0
    (a term that is absent)."""
    S1, S2, S3 = S
    T1, T2, T3 = T

    def mul(*f):
        out = 1.0
        for x in f:
            x = np.asarray(x, dtype=np.float64)
            with np.errstate(invalid="ignore"):
                out = np.where((out == 0) | (x == 0), 0.0, out * x)
        return out

    if m == 2:
        return mul(S2, T1, T1) + mul(S1, T2)
    return mul(S3, T1, T1, T1) + 3.0 * mul(S2, T1, T2) + mul(S1, T3)


def cut_scalars(p, beta, L, q_hat_s, rows_s, radius):
    """Base gradient and curvature bounds of data-free scalars ``t = p q + beta . exp(q_S)``
    (module docstring, "The coordinates").

    Parameters
    ----------
    p : array_like, shape (n, d)
        Their linear parts in ``q``.
    beta : array_like, shape (n, s)
        Their coefficients of ``exp(q_S)``.
    L : array_like, shape (d, d)
        The whitening matrix.
    q_hat_s : array_like, shape (s,)
        ``q_hat`` on ``S``.
    rows_s : array_like of int, shape (s,)
        The indices ``S`` (rows of ``L``).
    radius : float

    Returns
    -------
    g : ndarray (n, d)
        The whitened gradients at the centre, ``(p + beta diag(exp(q_hat_S))) L``.
    extra1, T2, T3 : ndarray (n,)
        The growth of ``||gradient||`` over the ball and the bounds ``T2``, ``T3``.
    """
    p = np.asarray(p, dtype=np.float64)
    beta = np.asarray(beta, dtype=np.float64).reshape(p.shape[0], -1)
    L = np.asarray(L, dtype=np.float64)
    rows_s = np.asarray(rows_s, dtype=np.int64)
    eq = np.exp(np.asarray(q_hat_s, dtype=np.float64))
    grad_q = p.copy()
    if rows_s.size:
        grad_q[:, rows_s] += beta * eq
    g = grad_q @ L
    rho = np.linalg.norm(L[rows_s], axis=1) if rows_s.size else np.zeros(0)
    E = eq * np.exp(rho * radius)
    ab = np.abs(beta)
    extra1 = ab @ (eq * np.expm1(rho * radius) * rho)
    T2 = ab @ (E * rho**2)
    T3 = ab @ (E * rho**3)
    return g, extra1, T2, T3


def ordered_loglik(link, y, eta, cuts) -> np.ndarray:
    """``l_i = log(F(c_{y_i} - eta_i) - F(c_{y_i-1} - eta_i))`` (for checks).

    Parameters
    ----------
    link : {"logit", "probit"}
        (probit: ``eta`` and ``cuts`` already divided by ``sigma``)
    y : array_like of int, shape (n,)
    eta : array_like, shape (n,)
    cuts : array_like, shape (K - 1,) or (n, K - 1)
    """
    _check_link(link)
    y = np.asarray(y, dtype=np.int64)
    eta = np.asarray(eta, dtype=np.float64)
    cuts = np.broadcast_to(np.asarray(cuts, dtype=np.float64), eta.shape + (np.shape(cuts)[-1],))
    K = cuts.shape[-1] + 1
    ext = np.concatenate([np.full(eta.shape + (1,), -np.inf), cuts,
                          np.full(eta.shape + (1,), np.inf)], axis=-1)
    a = np.take_along_axis(ext, (y + 1)[:, None], axis=1)[:, 0] - eta
    b = np.take_along_axis(ext, y[:, None], axis=1)[:, 0] - eta
    if link == "probit":
        with np.errstate(invalid="ignore", divide="ignore"):
            mid = np.log(_phi_diff(a, b))
        return np.where(y == 0, log_ndtr(a), np.where(y == K - 1, log_ndtr(-b), mid))
    sp = np.logaddexp(0.0, a), np.logaddexp(0.0, b)
    with np.errstate(invalid="ignore", divide="ignore"):
        mid = np.log(np.expm1(a - b)) + b - sp[0] - sp[1]
    return np.where(y == 0, -np.logaddexp(0.0, -a), np.where(y == K - 1, -sp[1], mid))


def _check_link(link):
    if link not in ORDERED_LINKS:
        raise ValueError(f"ordered rows: link must be one of {ORDERED_LINKS}, got {link!r}.")


def _middle_gaps(link, m, P, B, c_hat, L, q_hat_s, rows_s, radius):
    """The gap ``d = c_k - c_{k-1}`` of the middle categories ``k = 1..K-2`` over the
    whitened ball: its lower end per category and, for the logit link, the bound ``Md``
    of the data-free term ``h(d)`` (module docstring); ``Md`` is None for the probit."""
    K = c_hat.size + 1
    Md = None
    kk = np.arange(1, K - 1)
    dp, db = P[kk] - P[kk - 1], B[kk] - B[kk - 1]
    gd, exd, T2d, T3d = cut_scalars(dp, db, L, q_hat_s, rows_s, radius)
    d_hat = c_hat[kk] - c_hat[kk - 1]
    T1d = np.linalg.norm(gd, axis=1) * (1 + _MARGIN) + exd
    # range of d: the ray bound, or the interval of its affine and exp parts
    lo_ray = d_hat - T1d * radius
    rs = np.asarray(rows_s, dtype=np.int64)
    eq = np.exp(np.asarray(q_hat_s, dtype=np.float64))
    if rs.size:
        rho = np.linalg.norm(np.asarray(L, dtype=np.float64)[rs], axis=1)
        lo_e = np.minimum(db * eq * np.expm1(rho * radius), db * eq * np.expm1(-rho * radius))
        aff = np.linalg.norm(dp @ L, axis=1) * (1 + _MARGIN) * radius
        lo_int = d_hat - aff + lo_e.sum(axis=1)
    else:
        lo_int = d_hat - np.linalg.norm(dp @ L, axis=1) * (1 + _MARGIN) * radius
    d_low = np.maximum(lo_ray, lo_int) - 1e-9 * (1.0 + np.abs(d_hat))
    if link == "logit":
        Sd = [h_sup(k, d_low) for k in (1, 2, 3)]
        Md = compose(m, Sd, (T1d, T2d, T3d))
    return Md, d_low


def ordered_constants(link, order, y, eta_hat, G_eta, c_hat, P, B, q_hat_s, rows_s, L,
                      radius) -> np.ndarray:
    """Per-row constants ``M_i`` (module docstring) of a chunk of ordered rows.

    Parameters
    ----------
    link : {"logit", "probit"}
    order : int
        Taylor order ``k`` (1 or 2): the bound is on the ``(k+1)``-th derivatives.
    y : array_like of int, shape (n,)
        Categories in ``0..K-1``.
    eta_hat : array_like, shape (n,)
        The predictors at the centre.
    G_eta : array_like, shape (n, d)
        ``J_eta_i L``: the whitened Jacobians of the (affine) predictors.
    c_hat : array_like, shape (K - 1,)
        The cutpoints at the centre.
    P : array_like, shape (K - 1, d)
        Linear part of the cutpoints in ``q``.
    B : array_like, shape (K - 1, s)
        Coefficients of ``exp(q_S)`` in the cutpoints.
    q_hat_s, rows_s : array_like, shape (s,)
        ``q_hat`` on ``S`` and the indices ``S``.
    L : array_like, shape (d, d)
        The whitening matrix.
    radius : float
        ``R`` of the whitened ball.

    Returns
    -------
    ndarray of float64, shape (n,)
        ``+inf`` for rows whose cutpoint gap may reach 0 in the ball.
    """
    _check_link(link)
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2 (the Taylor order k), got {order!r}.")
    radius = float(radius)
    if not (radius >= 0.0 and math.isfinite(radius)):
        raise ValueError(f"radius must be finite and >= 0, got {radius!r}.")
    m = order + 1
    y = np.asarray(y, dtype=np.int64)
    eta_hat = np.asarray(eta_hat, dtype=np.float64)
    G_eta = np.asarray(G_eta, dtype=np.float64)
    c_hat = np.asarray(c_hat, dtype=np.float64).reshape(-1)
    P = np.asarray(P, dtype=np.float64)
    B = np.asarray(B, dtype=np.float64).reshape(c_hat.size, -1)
    K = c_hat.size + 1
    if y.size and (y.min() < 0 or y.max() > K - 1):
        raise ValueError(f"ordered rows: categories must lie in 0..{K - 1}, got "
                         f"{int(y.min())}..{int(y.max())}.")
    if not (np.all(np.isfinite(G_eta)) and np.all(np.isfinite(eta_hat))):
        raise ValueError("ordered rows: the predictors and their Jacobians must be finite.")
    gc, ex1, T2c, T3c = cut_scalars(P, B, L, q_hat_s, rows_s, radius)
    n = y.size
    out = np.zeros(n)

    def scalar(k, sign_eta=True):
        """``t = c_k - eta`` for the rows: (centre, T1, T2, T3) with k per row."""
        kk = np.clip(k, 0, K - 2)
        T1 = np.linalg.norm(gc[kk] - G_eta, axis=1) * (1 + _MARGIN) + ex1[kk]
        return c_hat[kk] - eta_hat, T1, T2c[kk], T3c[kk]

    upper = y <= K - 2  # a exists
    lower = y >= 1  # b exists
    a0, A1, A2, A3 = scalar(y)
    b0, B1, B2, B3 = scalar(y - 1)
    wa, wb = A1 * radius, B1 * radius
    marg = 1e-9 * (1.0 + np.abs(a0)), 1e-9 * (1.0 + np.abs(b0))
    a_lo, a_hi = a0 - wa - marg[0], a0 + wa + marg[0]
    b_lo, b_hi = b0 - wb - marg[1], b0 + wb + marg[1]
    mid = upper & lower
    # the gap d = c_y - c_{y-1} of middle rows, per category: its lower end, and (logit)
    # the bound of the data-free term h(d)
    Md = d_low = None
    if np.any(mid) and K >= 3:
        Md, d_low = _middle_gaps(link, m, P, B, c_hat, L, q_hat_s, rows_s, radius)
    cat = np.clip(y - 1, 0, max(K - 3, 0))
    if link == "probit":
        # y = 0: log Phi(a); y = K - 1: log Phi(-b)
        ones = np.ones(n)
        S = [probit_lambda(a_lo), local_sup("bernoulli_probit", 2, a_lo, a_hi, y=ones),
             local_sup("bernoulli_probit", 3, a_lo, a_hi, y=ones)]
        out += np.where(upper & ~lower, compose(m, S, (A1, A2, A3)), 0.0)
        S = [probit_lambda(-b_hi), local_sup("bernoulli_probit", 2, -b_hi, -b_lo, y=ones),
             local_sup("bernoulli_probit", 3, -b_hi, -b_lo, y=ones)]
        out += np.where(lower & ~upper, compose(m, S, (B1, B2, B3)), 0.0)
        if d_low is not None:
            idx = np.flatnonzero(mid)
            G = None
            # sub-boxes: the enclosure of r and s loses a factor exp(|a| width) over a
            # wide box (sup phi and min D at different corners); the sup over the box is
            # the largest over its pieces (infeasible pieces give 0)
            for i in range(PROBIT_PIECES):
                for j in range(PROBIT_PIECES):
                    al, ah = _piece(a_lo[idx], a_hi[idx], i)
                    bl, bh = _piece(b_lo[idx], b_hi[idx], j)
                    part = probit_partials(Interval(al, ah), Interval(bl, bh),
                                           d_low[cat[idx]])
                    G = part if G is None else {k: np.maximum(G[k], v) for k, v in part.items()}
            out[idx] += compose2(m, G, (A1[idx], A2[idx], A3[idx]),
                                 (B1[idx], B2[idx], B3[idx]))
        return out * (1.0 + 1e-9)
    # logit. y = 0: -sp(-a), derivatives of sp at -a, interval [-a_hi, -a_lo]
    S = [sp_sup(k, -a_hi, -a_lo) for k in (1, 2, 3)]
    out += np.where(upper & ~lower, compose(m, S, (A1, A2, A3)), 0.0)
    # sp(a) term of middle rows
    S = [sp_sup(k, a_lo, a_hi) for k in (1, 2, 3)]
    out += np.where(mid, compose(m, S, (A1, A2, A3)), 0.0)
    # sp(b) term of middle and last rows, and the linear b of middle rows
    S = [sp_sup(k, b_lo, b_hi) for k in (1, 2, 3)]
    out += np.where(lower, compose(m, S, (B1, B2, B3)), 0.0)
    out += np.where(mid, B2 if m == 2 else B3, 0.0)
    if Md is not None:
        out += np.where(mid, Md[cat], 0.0)
    return out * (1.0 + 1e-9)


#: sub-boxes per axis of the probit's middle rows (:func:`ordered_constants`)
PROBIT_PIECES = 6


def _piece(lo, hi, i):
    """The ``i``-th of :data:`PROBIT_PIECES` equal pieces of ``[lo, hi]`` (the last ends at
    ``hi`` exactly)."""
    p = PROBIT_PIECES
    a = lo + (hi - lo) * (i / p)
    b = hi if i == p - 1 else lo + (hi - lo) * ((i + 1) / p)
    return a, b


def _phi_diff(x, y):
    """``Phi(x) - Phi(y)`` for ``x >= y``, from the tail where both are small."""
    with np.errstate(invalid="ignore"):
        return np.where(y > 0.0, ndtr(-y) - ndtr(-x), ndtr(x) - ndtr(y))


def _phi_sup(lo, hi):
    """``sup phi(x)`` over ``[lo, hi]``: at the point nearest 0."""
    t = np.where(lo > 0.0, lo, np.where(hi < 0.0, hi, 0.0))
    return np.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)


def _phi_inf(lo, hi):
    """``inf phi(x)`` over ``[lo, hi]``: at the end farther from 0."""
    t = np.maximum(np.abs(lo), np.abs(hi))
    return np.exp(-0.5 * t * t) / math.sqrt(2.0 * math.pi)


def probit_partials(A: Interval, Bi: Interval, d_lo):
    """Suprema of ``|d^j l / da^p db^q|`` (``j = 1..3``) of ``l = log(Phi(a) - Phi(b))`` over
    the box ``a in A``, ``b in Bi`` where ``a - b >= d_lo`` (module docstring, "Ordered
    probit"): a dict keyed ``"a"``, ``"b"``, ``"aa"``, ``"ab"``, ``"bb"``, ``"aaa"``, ``"aab"``,
    ``"abb"``, ``"bbb"`` of arrays; ``+inf`` where ``d_lo <= 0``."""
    a_lo, a_hi = np.asarray(A.lo, dtype=np.float64), np.asarray(A.hi, dtype=np.float64)
    b_lo, b_hi = np.asarray(Bi.lo, dtype=np.float64), np.asarray(Bi.hi, dtype=np.float64)
    d_lo = np.asarray(d_lo, dtype=np.float64)
    ok = d_lo > 0.0
    dd = np.where(ok, d_lo, 1.0)
    feasible = b_lo <= a_hi - dd  # some point of the box has a - b >= d_lo
    # D's minimum over the feasible set: at b = b_hi' or at the edge's corner
    bh = np.maximum(np.minimum(b_hi, a_hi - dd), b_lo)
    cands = [bh, np.clip(a_lo - dd, b_lo, bh)]
    D_lo = np.min([_phi_diff(np.maximum(a_lo, b + dd), b) for b in cands], axis=0)
    D_lo = D_lo * (1.0 - 1e-6)
    ok &= D_lo > 0.0
    D_lo = np.where(ok, D_lo, 1.0)
    # and D's maximum, at the corner (a_hi, b_lo): r >= inf phi(A) / D_hi > 0
    D_hi = np.maximum(_phi_diff(a_hi, b_lo) * (1.0 + 1e-6), 1e-300)
    r_hi = _phi_sup(a_lo, a_hi) / D_lo * (1.0 + 1e-9)
    s_hi = _phi_sup(b_lo, b_hi) / D_lo * (1.0 + 1e-9)
    # (min: pieces without a feasible point, whose result is discarded)
    r = Interval(np.minimum(_phi_inf(a_lo, a_hi) / D_hi * (1.0 - 1e-9), r_hi), r_hi)
    s = Interval(np.minimum(_phi_inf(b_lo, b_hi) / D_hi * (1.0 - 1e-9), s_hi), s_hi)
    a, b = Interval(a_lo, a_hi), Interval(b_lo, b_hi)
    parts = {
        "a": r, "b": s,
        "aa": a * r + r**2, "ab": r * s, "bb": b * s - s**2,
        "aaa": r * (a**2 - 1.0) + 3.0 * a * r**2 + 2.0 * r**3,
        "aab": a * r * s + 2.0 * r**2 * s,
        "abb": 2.0 * r * s**2 - b * r * s,
        "bbb": s * (1.0 - b**2) + 3.0 * b * s**2 - 2.0 * s**3,
    }
    return {k: np.where(ok | ~feasible & (d_lo > 0.0),
                        np.where(feasible, v.abs_sup() * (1.0 + 1e-9), 0.0), np.inf)
            for k, v in parts.items()}


def compose2(m: int, G, TA, TB) -> np.ndarray:
    """Bound of ``|D^m l(a, b)|`` (module docstring, "Ordered probit") from the partials'
    suprema ``G`` (:func:`probit_partials`) and the scalars' derivative bounds
    ``TA = (A1, A2, A3)``, ``TB = (B1, B2, B3)``."""
    A1, A2, A3 = TA
    B1, B2, B3 = TB
    if m == 2:
        terms = [G["aa"] * A1**2, 2 * G["ab"] * A1 * B1, G["bb"] * B1**2, G["a"] * A2,
                 G["b"] * B2]
    else:
        terms = [G["aaa"] * A1**3, 3 * G["aab"] * A1**2 * B1, 3 * G["abb"] * A1 * B1**2,
                 G["bbb"] * B1**3,
                 3 * (G["aa"] * A1 * A2 + G["ab"] * (A1 * B2 + A2 * B1) + G["bb"] * B1 * B2),
                 G["a"] * A3, G["b"] * B3]
    with np.errstate(invalid="ignore"):
        out = sum(np.where(np.isinf(t) | np.isnan(t), np.where(t == t, t, 0.0), t)
                  for t in terms)
    return out
