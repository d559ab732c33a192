"""Derivative bounds of multinomial-logit (softmax) rows, for ScalableMH's constants.

A categorical row with class probabilities ``p = softmax(eta_i)`` has

    U_i = -log softmax(eta_i)_{y_i} = lse(eta_i) - eta_{i, y_i},
    lse(eta) = log sum_k exp(eta_k),

with ``eta_i = c_i + J_i q`` affine in the step's vector ``q`` (``J_i``: K x d, its rows
``J^k_i`` the Jacobians of the K class predictors). The second term is linear, so for
``m >= 2`` the m-th derivative form of ``U_i`` along ``v`` is that of ``lse`` along
``u = J_i v``. The derivatives of ``lse`` are the cumulants of the class index under
``p`` (the softmax is an exponential family with log partition ``lse``): with
``ubar = sum_k p_k u_k``,

    D^2 lse(eta)[u, u]    = sum_k p_k (u_k - ubar)^2               (a variance)
    D^3 lse(eta)[u, u, u] = sum_k p_k (u_k - ubar)^3               (a third central moment)

and, mixed, ``D^2 lse[a, b] = Cov_p(a, b)``,
``D^3 lse[a, b, c] = E_p[(a - abar)(b - bbar)(c - cbar)]``.
Both are invariant under ``u -> u + t 1``: only the differences ``u_k - u_l`` matter.

Whitened bound (the default of ScalableMH; the path step factor
:func:`pymc_subsample.kernels.scalable.phi.path_phi`, which needs ``M_i`` with
``|D^m U_i[v, ..., v]| <= M_i ||v||^m`` for the whitened point ``z``,
``q = q_hat + L z``). Let ``A_i = J_i L`` (K x d) and

    d_ikl = ||(J^k_i - J^l_i) L||_2,   Delta_i = max_{k, l} d_ikl.

For a unit ``v`` and ``u = A_i v``, ``|u_k - u_l| <= d_ikl`` (Cauchy-Schwarz), so ``u``
lies in an interval of length ``Delta_i``, and equality is reached by ``v`` along the
pair's difference. Over all ``p`` in the simplex:

* ``m = 2``: a variance of a variable in an interval of length ``r`` is at most
  ``r^2 / 4`` (Popoviciu's inequality), reached by half the mass at each end:
  ``M_i = Delta_i^2 / 4``. (Boehning's bound ``(1/2)(I - 1 1'/K)`` gives
  ``||u||^2 / 2 - (sum u)^2 / (2K)``, larger: it does not see that only the pair matters.)
* ``m = 3``: the third central moment of a variable in ``[0, r]`` is at most
  ``r^3 / (6 sqrt 3)`` in absolute value. Proof: for a fixed mean ``mu`` it is linear in
  the distribution; the distributions on ``[0, r]`` with mean ``mu`` form a convex
  compact set whose extreme points have at most two support points (Winkler 1988,
  "Extreme points of moment sets"), so the supremum is that of two-point laws, mass
  ``1 - s`` at ``x_1`` and ``s`` at ``x_2``: ``s (1 - s)(1 - 2 s)(x_2 - x_1)^3``, largest for
  ``x_2 - x_1 = r`` and ``s = 1/2 - 1/(2 sqrt 3)``: ``r^3 / (6 sqrt 3)``.
  So ``M_i = Delta_i^3 / (6 sqrt 3)`` (about ``0.0962 Delta_i^3``).

Both suprema are sharp: the sup over ``p`` is approached when ``eta`` puts the mass on the
pair ``(k, l)`` of largest ``d_ikl`` in the stated ratio, and the sup over ``v`` is reached.

Region bound (ScalableMH's ``region``: the whitened ball ``||z|| <= R``). In the ball
``eta_l - eta_k >= (eta_hat_l - eta_hat_k) - d_ikl R``, so

    p_k <= P_ik = 1 / (1 + sum_{l != k} exp(eta_hat_l - eta_hat_k - d_ikl R)).

With ``e_k = |u_k - ubar| <= sum_l p_l |u_k - u_l|``, so
``e_k <= E_ik = min(Delta_i, sum_{l != k} P_il d_ikl)``:

    D^2 = (1/2) sum_{k, l} p_k p_l (u_k - u_l)^2 <= (1/2) sum_{k != l} P_ik P_il d_ikl^2,
    |D^3| <= sum_k p_k e_k^3 <= sum_k P_ik E_ik^3,

and the region constant is the smaller of these and the global one: much smaller for a row
whose class the model predicts confidently in the whole ball.

Cornish et al. (2019), "Scalable Metropolis-Hastings for exact Bayesian inference with
large datasets", eq. 12 (``bound_form="cornish"``: every (k+1)-th partial derivative in
``q``). The partial ``d^m U_i / dq_j1 ... dq_jm`` is the mixed form along the columns
``J_i[:, j]``; with ``r_i = max_j (max_k J^k_ij - min_k J^k_ij)`` each column's centred
values are at most ``r_i`` in size and have variance at most ``r_i^2 / 4``, so by
Cauchy-Schwarz ``|Cov_p(a, b)| <= r_i^2 / 4`` and
``|E_p[a~ b~ c~]| <= max |a~| E_p|b~ c~| <= r_i^3 / 4``.

Everything works on chunks of rows; nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["SOFTMAX_THIRD", "cornish_constants", "lse_derivative", "pair_distances",
           "softmax_constants", "softmax_global_constants", "softmax_region_constants"]

#: ``sup |third central moment| / r^3`` over laws on an interval of length ``r``
SOFTMAX_THIRD = 1.0 / (6.0 * math.sqrt(3.0))

#: relative margin for rounding in the norms (the Jacobian columns of an affine
#: predictor are exact differences up to rounding)
_MARGIN = 1e-7


def _check_m(m):
    m = int(m)
    if m not in (2, 3):
        raise ValueError(f"Derivative order m = k + 1 must be 2 or 3, got {m}.")
    return m


def _check_jacobian(J, name="J"):
    J = np.asarray(J, dtype=np.float64)
    if J.ndim != 3 or J.shape[1] < 2:
        raise ValueError(
            f"{name} must have shape (rows, K, d) with K >= 2 classes (the Jacobian of each "
            f"row's K class predictors), got shape {J.shape}.")
    if not np.all(np.isfinite(J)):
        raise ValueError(f"{name} has non-finite entries: the class predictors must be "
                         "finite affine functions of the parameters.")
    return J


def lse_derivative(eta, u, m: int) -> np.ndarray:
    """``D^m lse(eta)[u, ..., u]`` exactly (m = 2: the variance, m = 3: the third central
    moment of ``u`` under ``p = softmax(eta)``), row by row: for checks.

    Parameters
    ----------
    eta, u : array_like, shape (..., K)
    m : int
        2 or 3.

    Returns
    -------
    ndarray, shape (...)
    """
    m = _check_m(m)
    eta = np.asarray(eta, dtype=np.float64)
    u = np.asarray(u, dtype=np.float64)
    e = eta - eta.max(axis=-1, keepdims=True)
    p = np.exp(e)
    p /= p.sum(axis=-1, keepdims=True)
    c = u - (p * u).sum(axis=-1, keepdims=True)
    return (p * c**m).sum(axis=-1)


def pair_distances(A) -> np.ndarray:
    """``d_ikl = ||A^k_i - A^l_i||_2`` for every row and pair of classes.

    Parameters
    ----------
    A : array_like, shape (n, K, d)
        Whitened Jacobians ``J_i L`` of each row's K class predictors.

    Returns
    -------
    ndarray, shape (n, K, K)
        Symmetric, zero diagonal, rounded up by a relative ``1e-7``.
    """
    A = _check_jacobian(A, "A")
    n, K, _ = A.shape
    D = np.zeros((n, K, K))
    for k in range(K):
        for l in range(k + 1, K):
            D[:, k, l] = D[:, l, k] = np.linalg.norm(A[:, k] - A[:, l], axis=1)
    return D * (1.0 + _MARGIN)


def softmax_global_constants(D, m: int) -> np.ndarray:
    """``M_i = sup_{eta, ||v|| = 1} |D^m U_i[v, ..., v]|`` over the whole space:
    ``Delta_i^2 / 4`` (m = 2) or ``Delta_i^3 / (6 sqrt 3)`` (m = 3), with
    ``Delta_i = max_{k,l} d_ikl`` (module docstring; sharp).

    Parameters
    ----------
    D : array_like, shape (n, K, K)
        :func:`pair_distances`.
    m : int
        2 or 3.
    """
    m = _check_m(m)
    delta = np.asarray(D, dtype=np.float64).max(axis=(1, 2))
    return delta**2 / 4.0 if m == 2 else delta**3 * SOFTMAX_THIRD


def softmax_region_constants(D, eta_hat, radius, m: int) -> np.ndarray:
    """``M_i`` over the whitened ball of radius ``radius`` about the centre, where row
    ``i``'s predictors are ``eta_hat_i``: the smaller of the global constant and the
    bound from the class probabilities' caps ``P_ik`` (module docstring).

    Parameters
    ----------
    D : array_like, shape (n, K, K)
        :func:`pair_distances`.
    eta_hat : array_like, shape (n, K)
        The class predictors at the centre.
    radius : float
        ``R`` (>= 0).
    m : int
        2 or 3.
    """
    m = _check_m(m)
    D = np.asarray(D, dtype=np.float64)
    eta_hat = np.asarray(eta_hat, dtype=np.float64)
    if eta_hat.shape != D.shape[:2]:
        raise ValueError(f"eta_hat must have shape {D.shape[:2]} (rows, K), got {eta_hat.shape}.")
    radius = float(radius)
    if not (radius >= 0.0 and math.isfinite(radius)):
        raise ValueError(f"radius must be finite and >= 0, got {radius!r}.")
    glob = softmax_global_constants(D, m)
    # lower bound of eta_l - eta_k in the ball, less a rounding margin
    low = (eta_hat[:, None, :] - eta_hat[:, :, None]) - D * radius
    low -= 1e-9 * (1.0 + np.abs(eta_hat[:, None, :]) + np.abs(eta_hat[:, :, None]))
    K = D.shape[1]
    off = ~np.eye(K, dtype=bool)
    with np.errstate(over="ignore"):
        s = np.where(off, np.exp(np.minimum(low, 700.0)), 0.0).sum(axis=2)
    P = np.minimum(1.0, (1.0 / (1.0 + s)) * (1.0 + 1e-12))  # (n, K): caps on p_k
    if m == 2:
        local = 0.5 * np.einsum("ik,il,ikl->i", P, P, D**2)
    else:
        delta = D.max(axis=(1, 2))
        E = np.minimum(delta[:, None], np.einsum("il,ikl->ik", P, D))
        local = (P * E**3).sum(axis=1)
    return np.minimum(glob, local * (1.0 + 1e-9))


def cornish_constants(J, m: int) -> np.ndarray:
    """Eq. 12 constants of Cornish et al. (2019): ``r_i^2 / 4`` (m = 2) or ``r_i^3 / 4``
    (m = 3) bound every m-th partial derivative of ``U_i`` in ``q``, with
    ``r_i = max_j (max_k J^k_ij - min_k J^k_ij)`` (module docstring).

    Parameters
    ----------
    J : array_like, shape (n, K, d)
    m : int
    """
    m = _check_m(m)
    J = _check_jacobian(J)
    r = (J.max(axis=1) - J.min(axis=1)).max(axis=1) * (1.0 + _MARGIN)
    return r**m / 4.0


def softmax_constants(order: int, J, eta_hat, *, whiten=None, radius=None) -> np.ndarray:
    """ScalableMH's row constants of a chunk of softmax rows.

    Parameters
    ----------
    order : int
        Taylor order ``k`` (1 or 2); the bound is on the (k+1)-th derivatives.
    J : array_like, shape (n, K, d)
        Exact Jacobians of each row's class predictors in ``q``.
    eta_hat : array_like, shape (n, K)
        The class predictors at the centre (used with ``radius``).
    whiten : array_like, shape (d, d), optional
        ``L``: the constants ``M_i`` of the path step factor in whitened coordinates
        (:func:`softmax_global_constants`, :func:`softmax_region_constants`); None: the
        eq. 12 constants in ``q`` (:func:`cornish_constants`).
    radius : float, optional
        With ``whiten``: constants valid on the whitened ball of this radius only.

    Returns
    -------
    ndarray of float64, shape (n,)
    """
    if order not in (1, 2):
        raise ValueError(f"order must be 1 or 2 (the Taylor order k), got {order!r}.")
    m = order + 1
    J = _check_jacobian(J)
    if whiten is None:
        if radius is not None:
            raise ValueError("region bounds (radius) need the whitening matrix.")
        return cornish_constants(J, m)
    L = np.asarray(whiten, dtype=np.float64)
    if L.shape != (J.shape[2], J.shape[2]):
        raise ValueError(f"whiten must be ({J.shape[2]}, {J.shape[2]}), got {L.shape}.")
    D = pair_distances(J @ L)
    if radius is None:
        return softmax_global_constants(D, m)
    return softmax_region_constants(D, eta_hat, radius, m)
