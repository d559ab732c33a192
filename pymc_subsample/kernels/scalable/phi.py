"""Step factors ``phi(theta, theta')`` of ScalableMH's bounds ``lambda_i <= phi * psi_i``.

The SMH acceptance test (:mod:`pymc_subsample.kernels.scalable.thinning`) needs, for the pair of
current and proposed points, one number ``phi`` that multiplies every row's constant
``psi_i``. Three forms, each matched to the constants that go with it:

* :func:`taylor_phi`: eq. 13 of Cornish et al. (2019), "Scalable Metropolis-Hastings for
  Exact Bayesian Inference with Large Datasets", for the global constants of their eq. 12;
* :func:`whitened_phi`: a sharp supremum over directions, for rows that depend on the
  parameters through one linear predictor;
* :func:`path_phi`: a bound along the segment between the two points, for rows that
  depend on them through several affine functions (a linear predictor and a log scale).

Every form is symmetric in the pair to the last bit, as truncation (their eq. 6) needs.
Nothing here imports PyMC or PyTensor.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["path_phi", "region_phi", "taylor_phi", "whitened_phi"]


def _pair(z, z_prop, order, name):
    """Check the Taylor order (1 or 2) and put the pair in a fixed order (by bytes), so
    that phi is exactly symmetric."""
    if order not in (1, 2):
        raise ValueError(f"{name} supports Taylor orders 1 and 2, got {order!r}.")
    z = np.asarray(z, dtype=np.float64)
    zp = np.asarray(z_prop, dtype=np.float64)
    return (zp, z) if z.tobytes() > zp.tobytes() else (z, zp)

def taylor_phi(q: np.ndarray, q_prop: np.ndarray, mode: np.ndarray, order: int) -> float:
    """``phi(theta, theta')`` of the SMH-k bound (eq. 13).

    ``phi = (||theta - theta_hat||_1^(k+1) + ||theta' - theta_hat||_1^(k+1)) / (k+1)!``;
    with ``psi_i = Ubar_{k,i}`` (eq. 12) it bounds ``lambda_i <= phi * psi_i`` by Taylor's
    theorem and the multinomial theorem (Proposition D.1). Symmetric in the pair, so
    truncation by ``phi * Psi`` keeps the kernel reversible.

    Parameters
    ----------
    q, q_prop : ndarray, shape (d,)
        Current and proposed points ``theta``, ``theta'``.
    mode : ndarray, shape (d,)
        Expansion point ``theta_hat``.
    order : int
        Taylor order ``k`` (1 or 2 in SMH; any k >= 1 is accepted).

    Returns
    -------
    float
    """
    m = int(order) + 1
    if m < 2:
        raise ValueError(f"Taylor order must be >= 1, got {order!r}.")
    a = float(np.abs(np.subtract(q, mode)).sum())
    b = float(np.abs(np.subtract(q_prop, mode)).sum())
    return (a**m + b**m) / math.factorial(m)


#: grid points on the half circle for the supremum in :func:`whitened_phi`
_PHI_GRID = 256
_PHI_T = np.linspace(0.0, math.pi, _PHI_GRID, endpoint=False)
_PHI_COS, _PHI_SIN = np.cos(_PHI_T), np.sin(_PHI_T)


def whitened_phi(z: np.ndarray, z_prop: np.ndarray, order: int) -> float:
    """``phi`` of the whitened bound for rows ``U_i = f_i(eta_i)``, ``eta_i`` affine in theta.

    A tighter alternative to :func:`taylor_phi` for generalised linear rows, in the
    spirit of the bounds of Prado, Nemeth & Sherlock (2024, "Metropolis-Hastings with
    Scalable Subsampling", which bound the remainder's difference by the step length),
    derived here as follows. With ``eta_i`` affine, the Taylor proxy of ``U_i`` about
    ``theta_hat`` is the Taylor polynomial of ``f_i`` about ``eta_hat_i``, so
    ``R_i = U_i - Uhat_{k,i}`` has derivative ``R_i'(s) = f_i'(s) - T_{k-1}[f_i'](s)``,
    ``|R_i'(s)| <= C |s - eta_hat_i|^k / k!`` (``C = sup |f^(k+1)|`` over the segment).
    Integrating from ``e = eta_i(theta) - eta_hat_i`` to ``e' = eta_i(theta') - eta_hat_i``
    (``|s|^k >= 0``, so the integral of the bound is the bound of the integral):

        |R_i(theta') - R_i(theta)| <= C |e'|e'|^k - e|e|^k| / (k + 1)!

    (k = 2: ``|e'^3 - e^3| / 6``; k = 1: ``|e'|e'| - e|e|| / 2``). With ``L L' =`` the
    Laplace covariance, ``e = s_i (x . z)`` for ``z = L^-1 (theta - theta_hat)``,
    ``s_i = ||J_i L||`` and the unit vector ``x = L' J_i' / s_i``; so
    ``lambda_i <= psi_i * phi`` with ``psi_i = C s_i^(k+1)`` and

        phi = sup_{||x|| = 1} |g(x . z') - g(x . z)| / (k + 1)!,   g(e) = e |e|^k.

    Only the part of ``x`` in the plane of ``z`` and ``z'`` matters, so the supremum is
    over a half circle: it is taken on a grid of 256 angles plus the grid spacing times
    a Lipschitz bound of the function of the angle (``|d/dt g(x . z)| <= (k+1) ||z||^(k+1)``),
    which makes the value an upper bound. The pair is put in a fixed order first, so
    ``phi(theta, theta') = phi(theta', theta)`` exactly, as truncation needs.

    For two independent posterior draws (a pCN step near ``rho = 0``) this is several
    times smaller than bounding each factor by Cauchy-Schwarz.

    Parameters
    ----------
    z, z_prop : ndarray, shape (d,)
        Whitened current and proposed points.
    order : int
        Taylor order ``k``: 1 or 2.

    Returns
    -------
    float
    """
    z, zp = _pair(z, z_prop, order, "whitened_phi")
    na, nb = math.sqrt(float(z @ z)), math.sqrt(float(zp @ zp))
    if na == 0.0 and nb == 0.0:
        return 0.0
    if na > 0.0:
        b1 = float(zp @ z) / na
        a1 = na
    else:  # z = 0: the plane is spanned by z' alone
        b1, a1 = nb, 0.0
    b2 = math.sqrt(max(0.0, nb * nb - b1 * b1))
    # the angle's cosine and sine against z's direction: e = x . z, e' = x . z'
    e = a1 * _PHI_COS
    ep = b1 * _PHI_COS + b2 * _PHI_SIN
    m = order + 1
    if order == 2:
        g = np.abs(ep * ep * ep - e * e * e)
    else:
        g = np.abs(ep * np.abs(ep) - e * np.abs(e))
    lip = m * (na**m + nb**m)
    sup = float(g.max()) + 0.5 * (math.pi / _PHI_GRID) * lip
    return sup / math.factorial(m)



def path_phi(z: np.ndarray, z_prop: np.ndarray, order: int) -> float:
    """``phi`` of the path bound, for rows ``U_i = g_i(u_i)`` with ``u_i = B_i theta + c_i``.

    Used by ScalableMH for rows that depend on the parameters through two affine
    functions, e.g. a linear predictor and a log scale (Normal or Student-t with unknown
    sigma, Gamma or NegativeBinomial with a log link and unknown shape). Derived here
    in the spirit of the remainder-difference bounds of Prado, Nemeth & Sherlock (2024,
    "Metropolis-Hastings with Scalable Subsampling"). In whitened coordinates
    ``z = L^-1 (theta - theta_hat)`` let ``R_i(z)`` be the remainder of the k-th order
    Taylor expansion about ``z = 0``, and let ``M_i`` bound the (k+1)-th derivative form:
    ``|D^(k+1) R_i(w)[v, ..., v]| <= M_i ||v||^(k+1)`` on the region (for a symmetric
    form the same ``M_i`` bounds ``|D^(k+1) R_i[w, ..., w, v]|`` for unit ``w``, ``v``).
    Then ``|grad R_i(w) . v| <= M_i ||w||^k ||v|| / k!`` (Taylor's theorem for the
    gradient, whose expansion to order k - 1 vanishes) and, along the segment
    ``w_t = z + t (z' - z)``,

        |R_i(z') - R_i(z)| <= M_i ||z' - z|| int_0^1 ||w_t||^k dt / k!.

    Also ``|R_i(z)| <= M_i ||z||^(k+1) / (k+1)!``, so the sum of the two remainders is a
    second bound; ``phi`` is the smaller of the two (the second wins for nearly
    independent points, the first for short moves). For ``k = 2`` the integral is
    ``||z||^2 + z . (z' - z) + ||z' - z||^2 / 3``; for ``k = 1`` it is bounded by the
    square root of that (Jensen's inequality, the square root being concave).

    The segment lies in any ball that holds both points, so region constants (suprema
    over the ball) apply.

    The parameters and the return value are those of :func:`whitened_phi`.
    """
    z, zp = _pair(z, z_prop, order, "path_phi")
    delta = zp - z
    dd = float(delta @ delta)
    zz = float(z @ z)
    second = float(zp @ zp)
    quad = max(0.0, zz + float(z @ delta) + dd / 3.0)  # int_0^1 ||w_t||^2 dt
    m = order + 1
    if order == 2:
        along = math.sqrt(dd) * quad / 2.0
    else:
        along = math.sqrt(dd) * math.sqrt(quad)
    ends = (zz ** (m / 2.0) + second ** (m / 2.0)) / math.factorial(m)
    return min(along, ends)


def region_phi(z: np.ndarray, z_prop: np.ndarray, order: int, *, region: float | None = None,
               path: bool = False) -> tuple[float, bool]:
    """The step factor of a pair in whitened coordinates, and whether the pair leaves the
    region where the bound constants hold.

    Region bounds (Cornish et al., "Scalable Metropolis-Hastings for exact Bayesian
    inference with large datasets", Sec. 3.3: bounds that hold on a subset) apply only
    when both points lie in the ball ``||z|| <= region``; a pair with a point outside it
    takes the exact full-data test. A pair too far for the factor's arithmetic gets
    ``phi = inf`` (the exact test as well, through truncation).

    Parameters
    ----------
    z, z_prop, order
        As in :func:`whitened_phi`.
    region : float or None
        The ball's radius; None for global bounds.
    path : bool
        :func:`path_phi` (rows with two affine inputs) instead of :func:`whitened_phi`.

    Returns
    -------
    phi : float
    outside : bool
    """
    with np.errstate(over="ignore", invalid="ignore"):
        far = max(float(z @ z), float(z_prop @ z_prop))
        outside = region is not None and far > region**2
        if outside or not far < 1e200:
            return math.inf, outside
        return (path_phi if path else whitened_phi)(z, z_prop, order), False
