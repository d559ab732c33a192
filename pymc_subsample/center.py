"""The centre of the control variates: the posterior mode and the data sums there.

One search shared by the three step methods and the benchmarks. Damped Newton steps with
the engine's exact Hessian, one chunked pass over the data per iteration, converge in a
handful of passes on tall-data posteriors (locally quadratic by the Bernstein-von Mises
theorem); the pass at the final iterate already gives ``sum_i grad log p(x_i | c)`` and
``sum_i hess log p(x_i | c)``, so the control variates cost no extra pass. Where Newton
stalls (a non-concave log posterior far from the mode) the search falls back to L-BFGS and
one Hessian pass.

Nothing here imports PyMC: the functions take a
:class:`~pymc_subsample.engine.LikelihoodEngine` (or any object with its
``full_loglik_hessian``, ``full_loglik``, ``full_loglik_grad``, ``prior_hessian``,
``prior_and_grad``, ``prior`` and ``initial_q`` methods).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla
import scipy.optimize

from .kernels.control_variates import TaylorProxy

__all__ = ["Center", "find_center", "center_at", "parse_point"]


@dataclass(frozen=True)
class Center:
    """A point and the full-data derivatives there.

    Attributes
    ----------
    theta : numpy.ndarray
        The centre ``c`` (raveled, unconstrained).
    loglik_grad, loglik_hess : numpy.ndarray
        ``sum_i grad log p(x_i | c)`` and ``sum_i hess log p(x_i | c)``.
    prior_grad, prior_hess : numpy.ndarray
        Gradient and Hessian of the log prior (with Jacobians) at ``c``.
    n_passes : int
        Full passes over the data the search used.
    converged : bool
        The Newton decrement fell below the tolerance (False for a user centre that is
        not a mode, or a search that stopped early).
    method : str
        ``"newton"``, ``"lbfgs"`` or ``"given"``.
    """

    theta: np.ndarray
    loglik_grad: np.ndarray
    loglik_hess: np.ndarray
    prior_grad: np.ndarray
    prior_hess: np.ndarray
    n_passes: int
    converged: bool
    method: str

    def proxy(self, order: int) -> TaylorProxy:
        """The Taylor proxy of order 1 or 2 about this centre."""
        return TaylorProxy(
            self.theta, self.loglik_grad, self.loglik_hess if order == 2 else None, order
        )

    def laplace(self, loglik_weight: float = 1.0):
        """Mean and covariance of the Gaussian ``exp(2nd-order Taylor of the log posterior)``.

        ``H = -(prior_hess + w loglik_hess)`` (made positive definite by an eigenvalue
        floor if needed), covariance ``H^-1`` and mean ``c + H^-1 grad``: the Laplace
        approximation when ``c`` is the mode (``w`` tempers the likelihood).
        """
        grad = self.prior_grad + loglik_weight * self.loglik_grad
        cov = inverse_pd(-(self.prior_hess + loglik_weight * self.loglik_hess))
        return self.theta + cov @ grad, cov


def inverse_pd(h):
    """Inverse of a symmetric matrix, made positive definite by an eigenvalue floor."""
    h = 0.5 * (h + h.T)
    w, v = np.linalg.eigh(h)
    if np.all(w > 0) and w.min() > 1e-12 * w.max():
        inv = np.linalg.inv(h)
        return 0.5 * (inv + inv.T)
    floor = max(np.max(np.abs(w)) * 1e-8, 1e-12)
    w = np.maximum(np.abs(w), floor)
    return (v / w) @ v.T


def _newton_direction(grad, neg_hess):
    """``H^-1 g`` with ``H`` made positive definite (eigenvalue floor) where it is not."""
    try:
        cho = sla.cho_factor(neg_hess, lower=True)
        return sla.cho_solve(cho, grad)
    except (np.linalg.LinAlgError, ValueError):
        return inverse_pd(neg_hess) @ grad


def center_at(engine, theta, *, method: str = "given", n_passes: int = 0, converged=False):
    """:class:`Center` at a given point: one Hessian pass over the data."""
    theta = np.asarray(theta, dtype=np.float64)
    _, g_ll, h_ll = engine.full_loglik_hessian(theta)
    _, g_pr, h_pr = engine.prior_hessian(theta)
    return Center(theta, g_ll, h_ll, g_pr, h_pr, n_passes + 1, converged, method)


def find_center(engine, start=None, *, tol: float = 1e-9, max_iter: int = 40,
                progress=None) -> Center:
    """Posterior mode by damped Newton with the exact Hessian (L-BFGS fallback).

    Each iteration is one chunked pass for the log-likelihood sum, gradient and Hessian
    (:meth:`~pymc_subsample.engine.LikelihoodEngine.full_loglik_hessian`), a Newton step
    on the log posterior (Hessian made positive definite where it is not), and a
    backtracking (Armijo) line search of log-likelihood passes. It stops when half the
    squared Newton decrement ``g' H^-1 g / 2`` (the predicted gain in log density) is below
    ``tol``; the last pass then gives the sums at the returned centre.

    Parameters
    ----------
    engine : LikelihoodEngine
    start : array_like, optional
        Starting point (default: the model's initial point).
    tol : float, default 1e-9
        Stop when the predicted gain in log posterior density is below this.
    max_iter : int, default 40
        Newton iterations before falling back to L-BFGS.
    progress : callable, optional
        ``progress(iteration, log_density, decrement)`` after each iteration.

    Returns
    -------
    Center
    """
    q = engine.initial_q() if start is None else np.asarray(start, dtype=np.float64).copy()
    passes = 0

    def logp(x):
        nonlocal passes
        lp = engine.prior(x)
        if not math.isfinite(lp):
            return -math.inf
        passes += 1
        return lp + engine.full_loglik(x)

    for it in range(max_iter):
        v_ll, g_ll, h_ll = engine.full_loglik_hessian(q)
        v_pr, g_pr, h_pr = engine.prior_hessian(q)
        passes += 1
        f = v_ll + v_pr
        g = g_ll + g_pr
        if not (math.isfinite(f) and np.all(np.isfinite(g)) and np.all(np.isfinite(h_ll))):
            break
        step = _newton_direction(g, -(h_ll + h_pr))
        dec = float(g @ step)
        if progress is not None:
            progress(it, f, dec)
        if 0.5 * dec < tol:
            return Center(q, g_ll, h_ll, g_pr, h_pr, passes, True, "newton")
        t = 1.0
        for _ in range(40):
            f_new = logp(q + t * step)
            if f_new >= f + 1e-4 * t * dec:
                break
            t *= 0.5
        else:
            break  # no ascent along the Newton direction: fall back
        q = q + t * step
    return _lbfgs_center(engine, q, passes)


def _lbfgs_center(engine, start, passes) -> Center:
    """Fallback: L-BFGS on the full data, then one Hessian pass at its answer."""
    count = [passes]

    def neg_logp(x):
        count[0] += 1
        lp, g = engine.prior_and_grad(x)
        ll, gl = engine.full_loglik_grad(x)
        val = -(lp + ll)
        if not np.isfinite(val):
            return 1e300, np.zeros_like(x)
        return val, -(g + gl)

    res = scipy.optimize.minimize(
        neg_logp, start, jac=True, method="L-BFGS-B", options={"maxiter": 2000, "gtol": 1e-9}
    )
    if not np.all(np.isfinite(res.x)):
        raise RuntimeError(
            "The search for the posterior mode failed (non-finite point). Pass center= "
            "(e.g. the result of pm.find_MAP) to the step."
        )
    return center_at(engine, res.x, method="lbfgs", n_passes=count[0], converged=bool(res.success))


def parse_point(point, engine, name: str = "center") -> np.ndarray:
    """A user's point (dict as from ``pm.find_MAP``, or raveled vector) as the raveled
    unconstrained vector of the step's variables; clear errors otherwise."""
    labels = ", ".join(repr(v.name) for v in engine.vars)
    if isinstance(point, dict):
        missing = [v.name for v in engine.vars if v.name not in point]
        if missing:
            raise ValueError(
                f"{name} is missing {', '.join(repr(m) for m in missing)}: a point dict must "
                f"give the step's value variables in the unconstrained space (keys {labels}), "
                "as pm.find_MAP returns them."
            )
        q = np.concatenate(
            [np.ravel(np.asarray(point[v.name], dtype=np.float64)) for v in engine.vars]
        )
    else:
        q = np.asarray(point, dtype=np.float64).ravel()
    if q.size != engine.ndim or not np.all(np.isfinite(q)):
        raise ValueError(
            f"{name} must give {engine.ndim} finite values in the step's unconstrained space "
            f"(variables {labels}), got {q.size}."
        )
    return q
