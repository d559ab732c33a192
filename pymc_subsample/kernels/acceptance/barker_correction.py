"""The correction distribution of the minibatch Barker test (Seita et al. 2017, Section 4).

The minibatch Barker test accepts a proposal iff ``Delta* + X_nc + X_corr > 0``
(Algorithm 1 of Seita, Pan, Chen & Canny 2017, "An Efficient Minibatch Acceptance
Test for Metropolis-Hastings"). ``Delta* + X_nc`` is approximately ``N(Delta, sigma^2)``
and the correction variable ``X_corr`` is chosen so that ``N(0, sigma^2) + X_corr`` has
(nearly) the standard logistic distribution, whose CDF is the Barker acceptance function
``S(x) = 1 / (1 + exp(-x))`` (Equations 12-13). No exact ``X_corr`` exists (the ratio
of the characteristic functions, ``pi t exp(sigma^2 t^2 / 2) / sinh(pi t)``, exceeds 1
for large ``t``), so it is found numerically by deconvolution on a grid (Equations 14-15,
Appendix C.1).

Representation
--------------
The table is a grid of ``n_points`` equally spaced cell centres ``c_j`` on
``[-half_width, half_width]`` (spacing ``h``) with probabilities ``p_j >= 0``,
``sum p_j = 1``. The distribution we sample and whose error we report is the
*histogram* distribution: mass ``p_j`` spread uniformly over the cell
``[c_j - h/2, c_j + h/2]``. Its CDF is piecewise linear between cell edges, so sampling
by inverse CDF with linear interpolation is exact for it, and the CDF of
``N(0, sigma^2) + X_corr`` has the closed form

    F(x) = sum_j p_j * A_h(x - c_j),
    A_h(z) = (sigma / h) * [G((z + h/2) / sigma) - G((z - h/2) / sigma)],
    G(u) = u Phi(u) + phi(u)          (an antiderivative of Phi),

i.e. ``A_h`` is ``Phi(. / sigma)`` averaged over one cell. The reported ``cdf_error`` is
``sup_x |F(x) - S(x)|`` evaluated on the lattice ``x in (c_0 + h Z) U (c_0 + h/2 + h Z)``
over ``[-x_eval, x_eval]`` (``x_eval = 30``; outside it both CDFs are within ``1e-13``
of 0 or 1 since the support of ``X_corr`` ends at ``half_width + h/2 = 20.005``).

Two builders
------------
``method="lstsq"``
    The paper's construction, Equation (15): ``u* = argmin ||M u - v||^2 + lam ||u||^2``
    with ``M_ij = A_h(x_i - c_j)`` on ``x_i`` with the same spacing over
    ``[-2 half_width, 2 half_width]`` and ``v_i = S(x_i)``, solved by the normal
    equations; negative entries are then clipped and the result renormalised to sum 1.
    With ``sigma=1, lam=10`` and 4001 points on ``[-20, 20]`` its error is about 1e-3
    (the paper reports 8.9e-4 for its grid).
``method="minimax"`` (default, used for the shipped table)
    Equation (14) itself, ``min ||Phi_sigma * C - S||_inf``, with the constraints the
    least-squares relaxation drops (``C >= 0``, ``sum C = 1``), is a linear programme.
    We impose symmetry ``p_j = p_{-j}`` (so ``E[X_corr] = 0`` exactly and the error is
    odd, so only ``x >= 0`` needs constraining) and, among all tables whose error on a
    constraint lattice (spacing ``dx``, ``0 <= x <= x_max``) is at most ``tol``, choose the
    smoothest one in the sense of the smallest integrated absolute second difference
    of the density (an L1 roughness penalty, which keeps the problem linear). Solved
    with HiGHS through :func:`scipy.optimize.linprog`. With the default settings
    (4001 points on ``[-20, 20]``, ``sigma=1``, ``tol=5e-6``) the achieved sup error is
    about 5.0e-6 (slightly above ``tol`` between constraint points), some 180 times
    below the paper's 8.9e-4, and the build takes 10-20 s.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.special import expit, ndtr

from .._validation import check_choice, check_real, is_int

__all__ = [
    "CorrectionDistribution",
    "build_correction",
    "default_correction",
    "DEFAULT_TABLE_PATH",
    "DEFAULT_BUILD_SETTINGS",
]

DEFAULT_TABLE_PATH = Path(__file__).resolve().parents[2] / "data" / "barker_correction.npz"

#: Settings used for the shipped table (``pymc_subsample/data/barker_correction.npz``).
DEFAULT_BUILD_SETTINGS = dict(
    method="minimax",
    half_width=20.0,
    n_points=4001,
    sigma=1.0,
    tol=5e-6,
    x_max=30.0,
    dx=0.05,
)

_X_EVAL = 30.0
_SQRT_2PI = np.sqrt(2.0 * np.pi)


def _gauss_antiderivative(u: np.ndarray) -> np.ndarray:
    """``G(u) = u Phi(u) + phi(u)``, with ``G' = Phi``."""
    return u * ndtr(u) + np.exp(-0.5 * u * u) / _SQRT_2PI


def _cell_normal_cdf(z: np.ndarray, h: float, sigma: float) -> np.ndarray:
    """``Phi(t / sigma)`` averaged over ``t in [z - h/2, z + h/2]``.

    The CDF of ``N(0, sigma^2) + U`` at ``z`` where ``U`` is uniform on a cell of width
    ``h`` centred at 0.
    """
    a = (z + 0.5 * h) / sigma
    b = (z - 0.5 * h) / sigma
    return (sigma / h) * (_gauss_antiderivative(a) - _gauss_antiderivative(b))


@dataclass(eq=False)
class CorrectionDistribution:
    """Correction variable ``X_corr`` with ``N(0, sigma^2) + X_corr ~ Logistic(0, 1)``.

    Implements the density ``C_sigma`` of Seita et al. (2017), Section 4, Equations (12)
    and (14), as a histogram on an equally spaced grid (see the module docstring).
    Build one with :func:`build_correction`, or load the shipped table with
    :meth:`load` / :func:`default_correction`.

    Parameters
    ----------
    lo : float
        Centre of the first cell.
    h : float
        Cell width (grid spacing).
    probs : array_like of float, shape (n_points,)
        Cell probabilities. Negative entries are clipped to 0 and the vector is
        renormalised to sum to exactly 1 (up to float64 rounding).
    sigma : float, default 1.0
        Standard deviation of the Gaussian the table was built for (Algorithm 1 uses
        ``C_1``, i.e. ``sigma = 1``).
    cdf_error : float, optional
        ``sup_x |P(N(0, sigma^2) + X_corr <= x) - S(x)|``; computed if not given.
    settings : dict, optional
        Build settings, kept as metadata.

    Attributes
    ----------
    grid : ndarray
        Cell centres.
    cdf_error : float
        Sup-norm CDF error against the standard logistic (see module docstring).
    mean, var : float
        Moments of ``X_corr`` (for a perfect correction, ``var = pi^2/3 - sigma^2``).
    """

    lo: float
    h: float
    probs: np.ndarray
    sigma: float = 1.0
    cdf_error: float | None = None
    settings: dict = field(default_factory=dict)

    def __post_init__(self):
        p = np.asarray(self.probs, dtype=np.float64).copy()
        if p.ndim != 1 or p.size < 2:
            raise ValueError("probs must be a 1-D array with at least 2 cells.")
        if not np.all(np.isfinite(p)):
            raise ValueError("probs must be finite.")
        if not (self.h > 0 and self.sigma > 0):
            raise ValueError("h and sigma must be positive.")
        p = np.clip(p, 0.0, None)
        total = p.sum()
        if total <= 0:
            raise ValueError("probs must have positive total mass.")
        p /= total
        # absorb the last rounding residual in the largest cell (the centre cell of a
        # symmetric table, so symmetry is kept) so that p.sum() == 1.0 where possible
        for _ in range(3):
            resid = 1.0 - p.sum()
            if resid == 0.0:
                break
            p[np.argmax(p)] += resid
        p.setflags(write=False)
        self.probs = p
        self.lo = float(self.lo)
        self.h = float(self.h)
        self.sigma = float(self.sigma)
        self.grid = self.lo + self.h * np.arange(p.size)
        #: the largest density of the histogram (``max probs / h``): the Lipschitz constant
        #: of ``x -> P(x + X_corr > 0)``
        self.max_density = float(p.max()) / self.h
        self.mean = float(np.dot(p, self.grid))
        # histogram variance: point-mass variance plus the within-cell h^2/12
        self.var = float(np.dot(p, (self.grid - self.mean) ** 2) + self.h**2 / 12.0)

        # Inverse-CDF knots: CDF at the cell edges, piecewise linear in between.
        # Trim the zero-mass tails and the interior knots strictly inside a zero-mass
        # run (keeping both ends of the run), so xp is non-decreasing and short.
        edges = self.lo - 0.5 * self.h + self.h * np.arange(p.size + 1)
        cdf = np.concatenate(([0.0], np.cumsum(p)))
        cdf[-1] = 1.0
        np.minimum(cdf, 1.0, out=cdf)
        pos = np.flatnonzero(p > 0)
        first, last = pos[0], pos[-1] + 1  # edge indices bounding the support
        keep = np.zeros(p.size + 1, dtype=bool)
        keep[first : last + 1] = True
        flat_left = np.zeros(p.size + 1, dtype=bool)
        flat_right = np.zeros(p.size + 1, dtype=bool)
        flat_left[1:] = p == 0  # cell to the left of the edge is empty
        flat_right[:-1] = p == 0  # cell to the right of the edge is empty
        keep &= ~(flat_left & flat_right)
        self._knot_cdf = np.ascontiguousarray(cdf[keep])
        self._knot_x = np.ascontiguousarray(edges[keep])
        self._knot_cdf[0] = 0.0
        self._knot_cdf[-1] = 1.0

        if self.cdf_error is None:
            self.cdf_error = self.compute_cdf_error()
        self.cdf_error = float(self.cdf_error)

    # ------------------------------------------------------------------ sampling
    def sample(self, rng: np.random.Generator, size=None):
        """Draw ``X_corr ~ C_sigma`` by inverse CDF with linear interpolation.

        Parameters
        ----------
        rng : numpy.random.Generator
            The only source of randomness (one uniform per draw).
        size : int or tuple of int, optional
            Output shape; ``None`` returns a Python float.

        Returns
        -------
        float or ndarray
        """
        u = rng.random(size)
        x = np.interp(u, self._knot_cdf, self._knot_x)
        return float(x) if size is None else x

    def ppf(self, q):
        """Inverse CDF (quantile function) of ``X_corr``."""
        return np.interp(q, self._knot_cdf, self._knot_x)

    def cdf(self, x):
        """CDF of ``X_corr`` (piecewise linear between cell edges)."""
        return np.interp(x, self._knot_x, self._knot_cdf, left=0.0, right=1.0)

    def pdf(self, x):
        """Density of ``X_corr`` (piecewise constant: ``p_j / h`` on cell ``j``)."""
        x = np.asarray(x, dtype=np.float64)
        j = np.floor((x - (self.lo - 0.5 * self.h)) / self.h).astype(np.int64)
        inside = (j >= 0) & (j < self.probs.size)
        out = np.zeros(x.shape)
        out[inside] = self.probs[j[inside]] / self.h
        return out

    # ------------------------------------------------------------------ accuracy
    def convolved_cdf(self, x, chunk: int = 512):
        """CDF of ``N(0, sigma^2) + X_corr`` at ``x`` (exact for the histogram table).

        ``F(x) = sum_j p_j A_h(x - c_j)``: the left-hand side of Equation (14).
        """
        x = np.asarray(x, dtype=np.float64)
        flat = x.ravel()
        out = np.empty(flat.size)
        for s in range(0, flat.size, chunk):
            z = flat[s : s + chunk, None] - self.grid[None, :]
            out[s : s + chunk] = _cell_normal_cdf(z, self.h, self.sigma) @ self.probs
        return out.reshape(x.shape)

    def compute_cdf_error(self, x_eval: float = _X_EVAL) -> float:
        """Sup-norm error ``sup_x |F(x) - S(x)|`` of Equation (14) for this table.

        Evaluated on the cell-centre lattice and the cell-edge lattice (spacing
        ``h / 2`` overall) over ``[-x_eval, x_eval]`` by direct discrete convolution.

        Returns
        -------
        float
        """
        p, h, n = self.probs, self.h, self.probs.size
        k_lo = int(np.floor((-x_eval - self.lo) / h))
        k_hi = int(np.ceil((x_eval - self.lo) / h))
        # F(lo + k h + s) = sum_j p_j A(k - j) ; d = k - j ranges over
        # [k_lo - (n-1), k_hi]
        d = np.arange(k_lo - (n - 1), k_hi + 1)
        err = 0.0
        for s in (0.0, 0.5 * h):
            kern = _cell_normal_cdf(d * h + s, h, self.sigma)
            full = np.convolve(p, kern, mode="full")
            # full[t] = sum_j p_j kern[t - j], kern index i <-> d = d[0] + i, so
            # t <-> k = d[0] + t; we need k in [k_lo, k_hi] -> t in [n - 1, n - 1 + k_hi - k_lo]
            F = full[n - 1 : n + k_hi - k_lo]
            xk = self.lo + np.arange(k_lo, k_hi + 1) * h + s
            err = max(err, float(np.max(np.abs(F - expit(xk)))))
        return err

    # ------------------------------------------------------------------ I/O
    def save(self, path) -> None:
        """Write the table to a compressed ``.npz`` file."""
        np.savez_compressed(
            path,
            probs=self.probs,
            lo=np.float64(self.lo),
            h=np.float64(self.h),
            sigma=np.float64(self.sigma),
            cdf_error=np.float64(self.cdf_error),
            settings=np.array(json.dumps(self.settings, sort_keys=True)),
        )

    @classmethod
    def from_file(cls, path) -> "CorrectionDistribution":
        """Read a table written by :meth:`save` (the stored ``cdf_error`` is trusted)."""
        with np.load(path, allow_pickle=False) as f:
            return cls(
                lo=float(f["lo"]),
                h=float(f["h"]),
                probs=f["probs"],
                sigma=float(f["sigma"]),
                cdf_error=float(f["cdf_error"]),
                settings=json.loads(str(f["settings"])),
            )

    @classmethod
    def load(cls, path=None) -> "CorrectionDistribution":
        """Load a table; ``path=None`` gives the shipped table (cached, shared).

        Parameters
        ----------
        path : str or os.PathLike, optional
            ``.npz`` file written by :meth:`save`. Default: the shipped
            ``pymc_subsample/data/barker_correction.npz``.
        """
        if path is None:
            return default_correction()
        return cls.from_file(os.fspath(path))


@functools.cache
def default_correction() -> CorrectionDistribution:
    """The shipped correction table ``C_1`` (``sigma = 1``), loaded once and cached.

    Rebuild it with ``python benchmarks/build_barker_correction.py`` (in the repository).
    """
    return CorrectionDistribution.from_file(DEFAULT_TABLE_PATH)


# ---------------------------------------------------------------------- building
def _check_grid(half_width: float, n_points: int) -> float:
    if not (is_int(n_points) and n_points >= 5 and n_points % 2 == 1):
        raise ValueError(
            f"n_points must be an odd int >= 5 (0 must be a cell centre), got {n_points!r}."
        )
    check_real("half_width", half_width, 0.0, np.inf, closed="right")
    return 2.0 * half_width / (n_points - 1)


def _build_lstsq(half_width, n_points, sigma, lam):
    """Regularised least-squares deconvolution, Seita et al. (2017) Equation (15)."""
    h = _check_grid(half_width, n_points)
    grid = np.linspace(-half_width, half_width, n_points)
    n_x = 2 * (n_points - 1) + 1
    x = np.linspace(-2.0 * half_width, 2.0 * half_width, n_x)
    M = _cell_normal_cdf(x[:, None] - grid[None, :], h, sigma)
    v = expit(x)
    lhs = M.T @ M
    lhs[np.diag_indices_from(lhs)] += lam
    u = np.linalg.solve(lhs, M.T @ v)
    return grid[0], h, u


def _build_minimax(half_width, n_points, sigma, tol, x_max, dx):
    """Equation (14) as a linear programme: smoothest symmetric table within ``tol``."""
    import scipy.sparse as sp
    from scipy.optimize import linprog

    h = _check_grid(half_width, n_points)
    K = (n_points - 1) // 2
    c = h * np.arange(K + 1)  # centres c_0 = 0, c_k = k h; full grid is -c_K..c_K
    x = np.arange(0.0, x_max + 0.5 * dx, dx)
    # Variables g_k (k = 0..K): density of the cells at +-c_k; masses p = h g.
    # F(x) = h [g_0 A(x) + sum_{k>=1} g_k (A(x - c_k) + A(x + c_k))]
    B = _cell_normal_cdf(x[:, None] - c[None, :], h, sigma)
    B[:, 1:] += _cell_normal_cdf(x[:, None] + c[None, 1:], h, sigma)
    B *= h
    v = expit(x)
    # Second differences of the (symmetric, zero-padded) density at centres j = 0..K,
    # divided by h^2 (a discrete second derivative):
    #   j = 0: 2 (g_1 - g_0);  0 < j < K: g_{j-1} - 2 g_j + g_{j+1};  j = K: g_{K-1} - 2 g_K
    rows = np.arange(K + 1)
    D = sp.lil_matrix((K + 1, K + 1))
    D[0, 0], D[0, 1] = -2.0, 2.0
    for j in range(1, K + 1):
        D[j, j - 1] = 1.0
        D[j, j] = -2.0
        if j < K:
            D[j, j + 1] = 1.0
    D = sp.csr_matrix(D) / h**2
    # Objective: integral of |g''| over the whole line = h (|r_0| + 2 sum_{j>=1} |r_j|)
    w_rows = np.where(rows == 0, 1.0, 2.0) * h
    n_g, n_r = K + 1, K + 1
    cost = np.concatenate([np.zeros(n_g), w_rows])
    Bs = sp.csr_matrix(B)
    I_r = sp.identity(n_r, format="csr")
    Z_xr = sp.csr_matrix((x.size, n_r))
    A_ub = sp.vstack(
        [
            sp.hstack([Bs, Z_xr]),  # F - S <= tol
            sp.hstack([-Bs, Z_xr]),  # S - F <= tol
            sp.hstack([D, -I_r]),  # g'' <= r
            sp.hstack([-D, -I_r]),  # -g'' <= r
        ],
        format="csr",
    )
    b_ub = np.concatenate([v + tol, tol - v, np.zeros(2 * n_r)])
    mass = np.where(rows == 0, 1.0, 2.0) * h  # total mass = sum_j p_j = 1
    A_eq = sp.csr_matrix(np.concatenate([mass, np.zeros(n_r)])[None, :])
    res = linprog(
        cost,
        A_ub=A_ub,
        b_ub=b_ub,
        A_eq=A_eq,
        b_eq=[1.0],
        bounds=(0.0, None),
        method="highs",
        options={"primal_feasibility_tolerance": 1e-9, "dual_feasibility_tolerance": 1e-9},
    )
    if res.status != 0:
        raise RuntimeError(
            f"minimax correction LP failed (status {res.status}: {res.message}); "
            f"try a larger tol (got {tol})."
        )
    g = np.clip(res.x[:n_g], 0.0, None)
    half = h * g
    probs = np.concatenate([half[:0:-1], half])  # -c_K..c_K, exactly symmetric
    return -c[-1], h, probs


def build_correction(
    method: str = "minimax",
    *,
    half_width: float = 20.0,
    n_points: int = 4001,
    sigma: float = 1.0,
    lam: float = 10.0,
    tol: float = 5e-6,
    x_max: float = 30.0,
    dx: float = 0.05,
) -> CorrectionDistribution:
    """Compute the correction distribution ``C_sigma`` by deconvolution.

    Implements Section 4 / Appendix C.1 of Seita et al. (2017): find ``C_sigma`` with
    ``Phi_sigma * C_sigma ~= S`` (Equation 14) on ``n_points`` cells over
    ``[-half_width, half_width]``. Negative values are clipped and the probabilities
    renormalised to sum to exactly 1; ``cdf_error`` is then computed for the result.

    Parameters
    ----------
    method : {"minimax", "lstsq"}
        ``"lstsq"``: the paper's ridge-regularised least squares, Equation (15).
        ``"minimax"``: Equation (14) solved directly as a linear programme with
        ``C >= 0``, ``sum C = 1`` and symmetry, returning the smoothest table (least
        integrated ``|C''|``) whose error on the constraint lattice is at most ``tol``.
    half_width : float, default 20.0
        The grid covers ``[-half_width, half_width]`` (the paper uses 20).
    n_points : int, default 4001
        Number of cells (odd, so that 0 is a cell centre); spacing
        ``h = 2 half_width / (n_points - 1)``.
    sigma : float, default 1.0
        Standard deviation of ``X_norm``; Algorithm 1 uses ``sigma = 1``. Must be
        below ``pi / sqrt(3)``, the logistic standard deviation.
    lam : float, default 10.0
        Ridge parameter ``lambda`` of Equation (15) (``method="lstsq"`` only).
    tol : float, default 5e-6
        Bound on ``|F(x) - S(x)|`` on the constraint lattice (``method="minimax"``
        only). The minimax LP is feasible down to about ``1e-7`` for ``sigma=1``;
        smaller values give rougher densities.
    x_max, dx : float
        Constraint lattice ``0, dx, ..., x_max`` (``method="minimax"`` only).

    Returns
    -------
    CorrectionDistribution
    """
    check_real("sigma", sigma, 0.0, np.pi / np.sqrt(3.0), interval_text="(0, pi/sqrt(3))")
    check_choice("method", method, ("minimax", "lstsq"))
    settings = dict(method=method, half_width=float(half_width), n_points=int(n_points), sigma=float(sigma))
    if method == "lstsq":
        check_real("lam", lam, 0.0, np.inf, closed="right")
        lo, h, probs = _build_lstsq(half_width, n_points, sigma, lam)
        settings["lam"] = float(lam)
    elif method == "minimax":
        check_real("tol", tol, 0.0, np.inf, closed="right")
        lo, h, probs = _build_minimax(half_width, n_points, sigma, tol, x_max, dx)
        settings.update(tol=float(tol), x_max=float(x_max), dx=float(dx))
    return CorrectionDistribution(lo=lo, h=h, probs=probs, sigma=sigma, settings=settings)
