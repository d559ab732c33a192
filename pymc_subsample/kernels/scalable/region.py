"""Derivative bounds of generalised linear rows over an interval of the linear predictor.

ScalableMH's default bounds hold on a *region* around ``theta_hat``: the whitened ball
``||L^-1 (theta - theta_hat)|| <= R`` (``L L' =`` the Laplace covariance). When the
current and the proposed point both lie in it, so does the segment between them, and row
``i``'s linear predictor stays in ``[eta_hat_i - s_i R, eta_hat_i + s_i R]``
(``s_i = ||J_i L||``, Cauchy-Schwarz). The constant of the whitened bound
(:func:`pymc_subsample.kernels.scalable.phi.whitened_phi`) then only needs the supremum of
``|f_i^(k+1)|`` over that interval, not over the whole line: much smaller for rows whose
fitted predictor lies in a tail (logistic regression), and finite for likelihoods whose
derivatives are unbounded (Poisson with a log link). Pairs with a point outside the ball
take the exact full-data MH test, so the chain stays exact; the decision depends on the
pair symmetrically, as truncation does in Cornish et al. (2019, eq. 6).

Each supremum is exact: the larger of ``|f^(m)|`` at the interval's ends and at the
critical points of ``|f^(m)|`` inside it, derived for each family in its
:meth:`~pymc_subsample.kernels.families.GLMFamily.local_sup` (and, for rows with two
parameters, its :meth:`~pymc_subsample.kernels.families.GLMFamily.box_partials`): the
functions below dispatch through the registry :mod:`pymc_subsample.kernels.families`.
Vectorised over rows; nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..families import family_names, require
from ..families.partials import multi_indices
from .interval import Interval

__all__ = ["REGION_FAMILIES", "TWO_PARAM_FAMILIES", "local_sup", "local_sup2", "local_supd",
           "multi_indices", "path_constant", "path_constant_d", "path_constants"]

#: sub-box width and most sub-boxes per axis for the region suprema of rows with
#: several coordinates; at most _MAX_BOXES sub-boxes per row in all (8 x 8 for two)
_PIECE_WIDTH = 0.1
_MAX_PIECES = 8
_MAX_BOXES = 64


def __getattr__(name):
    """``REGION_FAMILIES`` (one-parameter rows with interval suprema) and
    ``TWO_PARAM_FAMILIES`` (rows with a log scale or log shape too), read from the
    registry when asked for."""
    if name == "REGION_FAMILIES":
        return family_names("interval_bound")
    if name == "TWO_PARAM_FAMILIES":
        return family_names("two_param")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _derivative_order(m) -> int:
    """The derivative order ``m = k + 1`` of the bounds (``k`` the Taylor order, 1 or 2),
    as an int; any other order is refused."""
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m = k + 1 must be 2 or 3, got {m}.")
    return m


def local_sup(family, m: int, lo, hi, *, y=None, nu=None, sigma=None, **params) -> np.ndarray:
    """``sup |f^(m)(eta)|`` over ``eta in [lo_i, hi_i]`` for each row's GLM term.

    Families (``U_i = f(eta_i)``, derivatives in ``eta``; the derivations are in
    :mod:`pymc_subsample.kernels.families`):

    * ``"bernoulli_logit"``: ``|f''| = s (1 - s)``, peak at ``eta = 0``;
      ``|f'''| = |s (1 - s)(1 - 2 s)|``, peaks at ``eta = +-log(2 + sqrt 3)``
      (``s = sigmoid(eta)``).
    * ``"bernoulli_probit"``: ``|f^(m)(eta)| = |g^(m)(s eta)|``, ``g = log Phi``,
      ``s = 2 y - 1``. ``|g''|`` decreases in ``t``, so over both signs of ``s`` its
      supremum on an interval is ``|g''(-max(|lo|, |hi|))|``; ``g'''`` has one peak, at
      ``t* = 1.00237``: the larger of its suprema over ``[lo, hi]`` and ``[-hi, -lo]``.
    * ``"student_t"`` (``nu``, ``sigma`` fixed; ``y`` needed): with ``r = y - eta``,
      ``c = nu sigma^2``, ``a = (nu + 1) / 2``: ``f'' = 2 a (c - r^2) / (c + r^2)^2``,
      critical at ``r = 0, +-sqrt(3 c)``; ``f''' = 4 a r (r^2 - 3 c) / (c + r^2)^3``,
      critical at ``r^2 = c (3 -+ 2 sqrt 2)``.
    * ``"normal"`` (``sigma`` fixed): ``f'' = 1 / sigma^2``, ``f''' = 0``.
    * ``"poisson_log"``: ``f = exp(eta) - y eta``, ``f'' = f''' = exp(eta)``, increasing:
      the supremum is ``exp(hi)``.

    Parameters
    ----------
    family : str or GLMFamily
        One of :data:`REGION_FAMILIES` (a registered one-parameter family with
        :meth:`~pymc_subsample.kernels.families.GLMFamily.local_sup`).
    m : int
        Derivative order ``k + 1``: 2 or 3.
    lo, hi : array_like, shape (n,)
        Interval of each row's linear predictor (``lo <= hi``).
    y : array_like, optional
        Responses (Student-t).
    nu, sigma : float or array_like, optional
        Student-t degrees of freedom and scale; Normal scale (per row or scalars).
    **params
        Fixed parameters of other families.

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    m = _derivative_order(m)
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    fam = require(family, "interval_bound",
                  "local_sup: unknown family {family!r}; supported: {supported}.")
    params.update({k: v for k, v in (("nu", nu), ("sigma", sigma)) if v is not None})
    return fam.local_sup(m, lo, hi, y=y, **params)


# ---------------------------------------------------------------------------------------
# rows with two parameters: a linear predictor eta and a log scale / log shape s
# ---------------------------------------------------------------------------------------


def local_sup2(family, m: int, eta_lo, eta_hi, s_lo, s_hi, *, y, nu=None,
               pieces=(1, 1), **params) -> np.ndarray:
    """Suprema of every m-th partial derivative of a two-parameter row over a box.

    For a row log density ``l(eta, s)`` (``eta`` the linear predictor, ``s`` the log
    scale or log shape), returns ``G[:, j] >= sup |d^m l / d eta^j d s^(m-j)|`` over
    ``[eta_lo, eta_hi] x [s_lo, s_hi]``, ``j = 0..m``, by interval evaluation of the
    closed-form partials (:class:`~pymc_subsample.kernels.scalable.interval.Interval`; a
    relative margin of ``1e-9`` covers rounding). Interval evaluation overestimates the
    range by an amount proportional to the box's width when a formula cancels large
    terms; ``pieces=(p_eta, p_s)`` splits each box into a grid of sub-boxes and takes
    the largest of their bounds, which shrinks that excess ``p``-fold. Families (the
    partials are each family's
    :meth:`~pymc_subsample.kernels.families.GLMFamily.box_partials`):

    * ``"normal_scale"``, ``"student_t_scale"`` (``nu`` fixed): ``mu = eta``,
      ``sigma = e^s``;
    * ``"gamma_log"``: shape ``e^s``, mean ``e^eta``;
    * ``"negbinomial_log"``: mean ``e^eta``, shape (``alpha``) ``e^s``.

    Parameters
    ----------
    family, m, y, nu, **params
        As for :func:`local_supd` (``family`` one of :data:`TWO_PARAM_FAMILIES`).
    eta_lo, eta_hi, s_lo, s_hi : array_like, shape (n,)
        The box of each row.
    pieces : (int, int), default (1, 1)
        Sub-boxes per row along ``eta`` and along ``s``.

    Returns
    -------
    ndarray of float64, shape (n, m + 1)
    """
    m = _derivative_order(m)
    lows = [np.asarray(v, dtype=np.float64) for v in (eta_lo, s_lo)]
    highs = [np.asarray(v, dtype=np.float64) for v in (eta_hi, s_hi)]
    pe, ps = (int(p) for p in pieces)
    if pe < 1 or ps < 1:
        raise ValueError(f"pieces must be positive integers, got {pieces!r}.")
    fam = require(family, "box_bound",
                  "local_sup2: unknown family {family!r}; supported: {supported}.")
    if nu is not None:
        params["nu"] = nu
    y = np.asarray(y, dtype=np.float64)
    return _subbox_sup(lambda boxes: fam.box_partials(m, *boxes, y, **params), fam.name,
                       m, lows, highs, y, (pe, ps))


def _subbox_sup(partials, name, m, lows, highs, y, pieces) -> np.ndarray:
    """The suprema of :func:`local_supd` (and :func:`local_sup2`): the box of each row
    split into ``prod(pieces)`` sub-boxes (``pieces[k]`` equal parts of axis ``k``), the
    largest over them of the enclosures ``partials(boxes)`` (a list of
    :class:`~pymc_subsample.kernels.scalable.interval.Interval` per partial, in the order
    of :func:`multi_indices` ``(m, d)``), times ``1 + 1e-9`` for rounding. ``name``
    names the family in the error for a wrong number of partials."""
    d = len(lows)
    G = None
    for cell in itertools.product(*(range(p) for p in pieces)):
        boxes = []
        for k, (i, p) in enumerate(zip(cell, pieces)):
            lo, hi = lows[k], highs[k]
            a = lo + (hi - lo) * (i / p)
            b = hi if i == p - 1 else lo + (hi - lo) * ((i + 1) / p)
            boxes.append(Interval(a, b))
        parts = partials(boxes)
        n = np.broadcast(*(bx.lo for bx in boxes), y).shape
        part = np.column_stack([np.broadcast_to(p.abs_sup(), n) for p in parts])
        if part.shape[1] != len(multi_indices(m, d)):
            raise ValueError(f"family {name!r} returned {part.shape[1]} partials of order "
                             f"{m}, expected {len(multi_indices(m, d))}.")
        G = part if G is None else np.maximum(G, part)
    return G * (1.0 + 1e-9)


def path_constant(G: np.ndarray, a, b) -> np.ndarray:
    """``M_i`` of :func:`pymc_subsample.kernels.scalable.phi.path_phi` from the partials' suprema.

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
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    # multi_indices(m, 2) is (0, m), (1, m - 1), ..., (m, 0): G[:, j] is the j-th
    return path_constant_d(G, np.stack(np.broadcast_arrays(a, b), axis=-1))


def path_constants(family, order, J, base, y, *, whiten, radius, nu=None, **params):
    """Path-bound constants ``M_i`` of a chunk of rows ``l(c^1_i, ..., c^d_i)`` on the
    whitened ball of radius ``radius`` (the constants of
    :func:`pymc_subsample.kernels.scalable.phi.path_phi`).

    ``J = (J^1, ..., J^d)``: the exact Jacobians of the row's affine coordinates (rows x
    step coordinates): ``(J^eta, J^s)`` for a two-parameter row (linear predictor and
    log scale), ``(J^eta, J^s, J^t)`` with a log degrees of freedom too; ``base``: their
    values at the centre; ``whiten``: ``L``. With ``a^k_i = ||J^k_i L||``, the ball keeps
    row ``i`` in the box ``prod_k [c^k_hat_i -+ a^k_i R]``, over which :func:`local_supd`
    bounds the partials and :func:`path_constant_d` combines them. ``nu`` and
    ``params``: the family's fixed parameters. Used in ``q`` and in the predictor
    coordinates alike.
    """
    J, base = tuple(J), tuple(base)
    if len(J) != len(base) or len(J) < 2:
        raise ValueError(f"path_constants: J and base need one entry per row coordinate "
                         f"(at least 2), got {len(J)} and {len(base)}.")
    # rounding margin: the differences of an affine function are exact
    A = np.column_stack([np.linalg.norm(Jk @ whiten, axis=1) * (1.0 + 1e-7) for Jk in J])
    base = [np.asarray(c, dtype=np.float64) for c in base]
    widths = [A[:, k] * radius + 1e-9 * (1.0 + np.abs(c)) for k, c in enumerate(base)]
    G = local_supd(family, order + 1, [c - w for c, w in zip(base, widths)],
                   [c + w for c, w in zip(base, widths)], y=y, nu=nu,
                   pieces=_pieces_for(widths), **params)
    return path_constant_d(G, A)


def _pieces_for(widths):
    """Sub-boxes per axis: width <= :data:`_PIECE_WIDTH` (at most :data:`_MAX_PIECES` per
    axis and :data:`_MAX_BOXES` in all: over budget, a piece is taken off the axis whose
    pieces it widens least).
    Interval evaluation's excess shrinks with the width; boxes narrow as N grows, so
    large data sets take one piece."""
    want = [float(np.max(w)) * 2.0 if np.size(w) else 0.0 for w in widths]
    pieces = [int(min(_MAX_PIECES, max(1, math.ceil(w / _PIECE_WIDTH)))) for w in want]
    while math.prod(pieces) > _MAX_BOXES:
        k = min((i for i in range(len(pieces)) if pieces[i] > 1),
                key=lambda i: want[i] / (pieces[i] - 1))
        pieces[k] -= 1
    return tuple(pieces)


# ---------------------------------------------------------------------------------------
# rows with d coordinates (a linear predictor, a log scale, a log degrees of freedom, ...)
# ---------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _multinomial(j) -> int:
    out, rest = 1, 0
    for jk in j:
        rest += jk
        out *= math.comb(rest, jk)
    return out


def local_supd(family, m: int, lows, highs, *, y, nu=None, pieces=None,
               **params) -> np.ndarray:
    """Suprema of every m-th partial derivative of a row with ``d`` coordinates over a box.

    For a row log density ``l(c^1, ..., c^d)``, returns ``G[:, r] >= sup |d^m l /
    (dc^1)^(j_1) ... (dc^d)^(j_d)|`` over the box ``prod_k [lows[k], highs[k]]``, ``j``
    the ``r``-th multi-index of :func:`multi_indices` ``(m, d)``, by interval evaluation
    of the family's closed-form partials (:meth:`box_partials_d` of a family with
    ``n_coords`` coordinates, or :meth:`~pymc_subsample.kernels.families.GLMFamily.
    box_partials` for two), with a relative margin of ``1e-9`` for rounding.
    ``pieces[k]`` splits axis ``k`` into sub-boxes and keeps the largest of their
    bounds, which shrinks interval evaluation's overestimate (the dependency effect)
    about ``pieces[k]``-fold. :func:`local_sup2` is the case ``d = 2``.

    Parameters
    ----------
    family : str or GLMFamily
        A registered family with partials over a box and ``n_coords = d`` row
        coordinates (:data:`TWO_PARAM_FAMILIES` for two).
    m : int
        Derivative order ``k + 1``: 2 or 3.
    lows, highs : sequence of d array_like, shape (n,)
        The box of each row.
    y : array_like, shape (n,)
        Responses.
    nu : float, optional
        Student-t degrees of freedom (families with a fixed ``nu``).
    pieces : sequence of d int, optional
        Sub-boxes per axis (default one).
    **params
        Fixed parameters of the family.

    Returns
    -------
    ndarray of float64, shape (n, len(multi_indices(m, d)))
    """
    m = _derivative_order(m)
    lows = [np.asarray(v, dtype=np.float64) for v in lows]
    highs = [np.asarray(v, dtype=np.float64) for v in highs]
    d = len(lows)
    if len(highs) != d or d < 2:
        raise ValueError(f"local_supd: lows and highs need the same number (>= 2) of "
                         f"coordinates, got {len(lows)} and {len(highs)}.")
    pieces = (1,) * d if pieces is None else tuple(int(p) for p in pieces)
    if len(pieces) != d or any(p < 1 for p in pieces):
        raise ValueError(f"pieces must be {d} positive integers, got {pieces!r}.")
    fam = require(family, "box_bound",
                  "local_supd: unknown family {family!r}; supported: {supported}.")
    if fam.n_coords != d:
        raise ValueError(f"local_supd: family {fam.name!r} has {fam.n_coords} row coordinates, "
                         f"got a box of {d}.")
    if nu is not None:
        params["nu"] = nu
    y = np.asarray(y, dtype=np.float64)
    return _subbox_sup(lambda boxes: fam.box_partials_d(m, boxes, y, **params), fam.name,
                       m, lows, highs, y, pieces)


def path_constant_d(G: np.ndarray, A) -> np.ndarray:
    """``M_i`` of :func:`pymc_subsample.kernels.scalable.phi.path_phi` for a row of ``d`` coordinates.

    A row depends on the whitened point ``z`` through ``c^k = c^k_hat + p_k . z``
    (``k = 1..d``). For a unit ``v``, ``D^m l[v, ..., v] = sum_j multinomial(m; j)
    d^j l prod_k (p_k . v)^(j_k)`` over the multi-indices ``|j| = m``, and
    ``|p_k . v| <= a_k = ||p_k||`` (Cauchy-Schwarz), so with ``G[:, r]`` bounding the
    ``r``-th partial (:func:`local_supd`)

        |D^m l[v, ..., v]| <= sum_j multinomial(m; j) G_j prod_k a_k^(j_k) = M_i.

    Parameters
    ----------
    G : ndarray, shape (n, len(multi_indices(m, d)))
    A : array_like, shape (n, d)
        ``a_k`` per row.

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    G = np.asarray(G, dtype=np.float64)
    A = np.asarray(A, dtype=np.float64)
    if A.ndim != 2:
        raise ValueError(f"path_constant_d: A must be (rows, d), got shape {A.shape}.")
    d = A.shape[1]
    m = next((k for k in range(2, 8) if len(multi_indices(k, d)) == G.shape[1]), None)
    if m is None:
        raise ValueError(f"path_constant_d: {G.shape[1]} partials match no order for d = {d}.")
    out = np.zeros(np.broadcast_shapes(G.shape[:1], A.shape[:1]))
    for r, j in enumerate(multi_indices(m, d)):
        term = _multinomial(j) * G[:, r]
        for k, jk in enumerate(j):
            if jk:
                term = term * A[:, k] ** jk
        out = out + term
    return out
