"""The centre of the control variates: the posterior mode and the data sums there.

One search shared by the three step methods and the benchmarks. Damped Newton steps with
the engine's exact Hessian, one chunked pass over the data per iteration, converge in a
handful of passes on tall-data posteriors (locally quadratic by the Bernstein-von Mises
theorem); the pass at the final iterate already gives ``sum_i grad log p(x_i | c)`` and
``sum_i hess log p(x_i | c)``, so the control variates cost no extra pass. Where Newton
stalls (a non-concave log posterior far from the mode) the search falls back to L-BFGS and
one Hessian pass.

For an ordinary GLM the steps pass a
:class:`~pymc_subsample.engine.predictor.PredictorLikelihood` instead of the engine: its passes
use NumPy row terms, so no Hessian graph is compiled on first use, and since its Hessian
pass costs about a gradient pass (``cheap_hessian``) the search takes exact Newton steps
straight from the warm start.

Nothing here imports PyMC: the functions take any :class:`BatchLikelihood`, the one
interface that both back-ends implement (:class:`~pymc_subsample.engine.LikelihoodEngine`
and :class:`~pymc_subsample.engine.predictor.PredictorLikelihood`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
import scipy.linalg as sla
import scipy.optimize

from .kernels.control_variates import TaylorProxy

__all__ = ["BatchLikelihood", "Center", "find_center", "center_at", "parse_point"]


@runtime_checkable
class BatchLikelihood(Protocol):
    """The log posterior of a model in the step's raveled space ``q``, by batches of rows
    and by passes over all rows: what the mode search, the centre's sums and the steps
    read of a likelihood back-end.

    Implemented by the compiled engine
    (:class:`~pymc_subsample.engine.LikelihoodEngine`) and by the NumPy row terms of an
    ordinary GLM (:class:`~pymc_subsample.engine.predictor.PredictorLikelihood`).
    """

    n_rows: int
    ndim: int
    #: a Hessian pass costs about a gradient pass (exact Newton steps from the warm start)
    cheap_hessian: bool

    def initial_q(self) -> np.ndarray: ...
    def prior(self, q) -> float: ...
    def prior_and_grad(self, q): ...
    def prior_hessian(self, q): ...
    def loglik_sum(self, q, rows) -> float: ...
    def loglik_hessian(self, q, rows): ...
    def full_loglik(self, q) -> float: ...
    def full_loglik_grad(self, q): ...
    def full_loglik_hessian(self, q): ...


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


#: rows of the warm start's subsample (see :func:`find_center`)
WARM_ROWS = 20_000


def find_center(engine, start=None, *, tol: float = 1e-5, max_iter: int = 40,
                progress=None, warm_rows: int | None = WARM_ROWS) -> Center:
    """Posterior mode by damped Newton with the exact Hessian (L-BFGS fallback).

    Each iteration is one chunked pass for the log-likelihood sum, gradient and Hessian
    (:meth:`~pymc_subsample.engine.LikelihoodEngine.full_loglik_hessian`), a Newton step
    on the log posterior (Hessian made positive definite where it is not), and a
    backtracking (Armijo) line search of log-likelihood passes. It stops when half the
    squared Newton decrement ``g' H^-1 g / 2`` (the predicted gain in log density) is below
    ``tol``; the last pass then gives the sums at the returned centre.

    Warm start: when ``N > 2 warm_rows``, Newton first runs on ``warm_rows`` rows drawn once
    (a fixed seed: set-up, not sampling), their log-likelihood scaled by ``N / n``. Its
    answer lies within about ``sqrt(N / n)`` posterior sds of the mode, where Newton
    converges quadratically. The full-data phase first takes Newton steps with the warm
    start's Hessian held fixed, each one gradient pass (about a sixth of a Hessian pass
    on a GLM): with a Hessian accurate to ``O(n^-1/2)`` these converge linearly at that
    rate. One Hessian pass at the end checks the decrement with the exact Hessian (and
    gives the centre's sums); exact Newton continues from there if it is not yet small.

    Parameters
    ----------
    engine : LikelihoodEngine
    start : array_like, optional
        Starting point (default: the model's initial point).
    tol : float, default 1e-5
        Stop when the predicted gain in log posterior density is below this: the point
        is then within about ``sqrt(2 tol)`` posterior sds of the mode, and the Laplace
        mean ``c + H^-1 grad`` (:meth:`Center.laplace`) takes one more Newton step from
        it. A centre need not be the exact mode: the control-variate identity and
        ScalableMH's bounds hold at any centre.
    max_iter : int, default 40
        Newton iterations before falling back to L-BFGS.
    progress : callable, optional
        ``progress(iteration, log_density, decrement)`` after each full-data iteration.
    warm_rows : int or None, default 20,000
        Rows of the warm start; None turns it off.

    Returns
    -------
    Center
    """
    q = engine.initial_q() if start is None else np.asarray(start, dtype=np.float64).copy()
    n_rows = engine.n_rows
    grad_passes = 0
    if warm_rows is not None and n_rows > 2 * warm_rows:
        rows = np.sort(np.random.default_rng(0).choice(n_rows, size=warm_rows, replace=False))
        scale = n_rows / warm_rows

        def sub_hess(x):
            v, g, h = engine.loglik_hessian(x, rows)
            return scale * v, scale * g, scale * h

        def sub_ll(x):
            return scale * engine.loglik_sum(x, rows)

        q_warm, sums_warm, _, ok_warm = _newton(engine, q, sub_hess, sub_ll, tol=tol,
                                                 max_iter=max_iter)
        if q_warm is not None:
            q = q_warm
        # Newton with the warm start's likelihood Hessian held fixed: gradient passes,
        # cheaper than Hessian passes unless the likelihood says they cost the same
        if ok_warm and not engine.cheap_hessian:
            h_warm = sums_warm[1]

            def grad_fixed_hess(x):
                v, g = engine.full_loglik_grad(x)
                return v, g, h_warm

            q_fixed, _, grad_passes, _ = _newton(engine, q, grad_fixed_hess, engine.full_loglik,
                                                 tol=tol, max_iter=10)
            if q_fixed is not None:
                q = q_fixed
    q, sums, passes, ok = _newton(
        engine, q, engine.full_loglik_hessian, engine.full_loglik, tol=tol,
        max_iter=max_iter, progress=progress,
    )
    passes += grad_passes
    if ok:
        return Center(q, *sums, passes, True, "newton")
    return _lbfgs_center(engine, q if q is not None else engine.initial_q(), passes)


def _newton(engine, q, ll_hess, ll_value, *, tol, max_iter, progress=None):
    """Damped Newton on ``prior + ll``; ``ll_hess(x) -> (value, grad, hess)``, ``ll_value(x)``.

    The full step is tried first with a Hessian pass at the new point (which the next
    iteration needs anyway); only a step that fails the Armijo condition costs extra
    ``ll_value`` passes to backtrack. Returns ``(q, (g_ll, h_ll, g_prior, h_prior),
    passes, converged)``; when it stops without converging, ``q`` is the last point
    reached (None if the start is not finite).
    """

    def evaluate(x):
        v_ll, g_ll, h_ll = ll_hess(x)
        v_pr, g_pr, h_pr = engine.prior_hessian(x)
        ok = math.isfinite(v_ll + v_pr) and np.all(np.isfinite(g_ll + g_pr)) and np.all(
            np.isfinite(h_ll))
        return (v_ll + v_pr if ok else -math.inf), (g_ll, h_ll, g_pr, h_pr)

    passes = 1
    f, sums = evaluate(q)
    if not math.isfinite(f):
        return None, None, passes, False
    for it in range(max_iter):
        g_ll, h_ll, g_pr, h_pr = sums
        g = g_ll + g_pr
        step = _newton_direction(g, -(h_ll + h_pr))
        dec = float(g @ step)
        if progress is not None:
            progress(it, f, dec)
        if 0.5 * dec < tol:
            return q, sums, passes, True
        x = q + step
        f_new, sums_new = (-math.inf, None)
        if math.isfinite(engine.prior(x)):
            passes += 1
            f_new, sums_new = evaluate(x)
        if not f_new >= f + 1e-4 * dec:  # backtrack on value passes, then one Hessian pass
            t = 0.5
            for _ in range(40):
                x = q + t * step
                lp = engine.prior(x)
                if math.isfinite(lp):
                    passes += 1
                    if lp + ll_value(x) >= f + 1e-4 * t * dec:
                        break
                t *= 0.5
            else:
                return q, None, passes, False  # no ascent along the Newton direction
            passes += 1
            f_new, sums_new = evaluate(x)
            if not math.isfinite(f_new):
                return q, None, passes, False
        q, f, sums = x, f_new, sums_new
    return q, None, passes, False


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
