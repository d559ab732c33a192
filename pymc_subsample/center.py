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

from .kernels.variance.control_variates import TaylorProxy

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
    rider : object or None
        What a caller's rider (:func:`find_center`'s ``rider=``) collected in the pass
        that gave these sums, or None when that pass carried none.
    """

    theta: np.ndarray
    loglik_grad: np.ndarray
    loglik_hess: np.ndarray
    prior_grad: np.ndarray
    prior_hess: np.ndarray
    n_passes: int
    converged: bool
    method: str
    rider: object = None

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


#: rows of the warm start's first subsample (see :func:`find_center`)
WARM_ROWS = 20_000
#: the warm start's subsamples grow by this factor, up to ``N / WARM_FRACTION`` rows and
#: at most ``WARM_MAX`` (gathered once: 80 MB of float32 rows at d = 10). One full
#: Newton step from the last one's answer, about ``sqrt(N / n)`` sds from the mode, lands
#: within about ``sqrt(N) / n`` sds of it (quadratic convergence, with third derivatives
#: of order ``N^-1/2`` in sd units): 0.01 at N = 10^6, 0.005 at 10^8. Beyond
#: ``WARM_FLOOR`` rows a subsample of ``N / WARM_SPARSE`` is enough (0.016 sds at
#: N = 10^7 with 200,000 rows): a larger one costs more than the Newton step gains
#: (at N = 10^6, 20,000 rows left the centre one Hessian pass short of its tolerance)
WARM_GROWTH = 8
WARM_FRACTION = 10
WARM_SPARSE = 50
WARM_FLOOR = 100_000
WARM_MAX = 1 << 21
#: the predicted gain in log density at which a subsample's Newton stops (its mode is
#: needed only to well within a posterior sd of the next, larger subsample's)
WARM_TOL = 0.05


def warm_sizes(n_rows: int, warm_rows: int | None) -> list[int]:
    """Rows of the warm start's nested subsamples: ``warm_rows``, then ``WARM_GROWTH``
    times more each, up to ``min(N / WARM_FRACTION, max(N / WARM_SPARSE, WARM_FLOOR),
    WARM_MAX)`` (none when ``N <= 2 warm_rows``)."""
    if warm_rows is None or n_rows <= 2 * warm_rows:
        return []
    sizes = [int(warm_rows)]
    target = min(n_rows // WARM_FRACTION, max(n_rows // WARM_SPARSE, WARM_FLOOR), WARM_MAX)
    while sizes[-1] * WARM_GROWTH < target:
        sizes.append(sizes[-1] * WARM_GROWTH)
    if target > sizes[-1]:
        sizes.append(target)
    return sizes


def random_subset(rng, n: int, m: int) -> np.ndarray:
    """``m`` distinct rows of ``n``, uniformly at random and in random order (so every
    prefix is a uniform subset too). NumPy's ``choice(replace=False)`` permutes all ``n``
    rows once ``m`` is large (9 s for 2 million of 10^8 rows); here ``m`` draws with
    replacement are made distinct with ``unique`` (topped up until ``m`` remain), which is
    uniform given the set's size, then shuffled."""
    if m <= 50_000 or 4 * m > n:
        return rng.choice(n, size=m, replace=False)

    def distinct(x):
        x = np.sort(x)
        return x[np.concatenate([[True], x[1:] != x[:-1]])]

    rows = distinct(rng.integers(0, n, size=m + m // 8))
    while rows.size < m:
        rows = distinct(np.concatenate([rows, rng.integers(0, n, size=m)]))
    return rng.permutation(rows)[:m]


def find_center(engine, start=None, *, tol: float = 1e-5, max_iter: int = 40,
                progress=None, warm_rows: int | None = WARM_ROWS, rider=None) -> Center:
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
    converges quadratically. When the likelihood's Hessian passes are cheap
    (``cheap_hessian``: an ordinary GLM's NumPy row terms), Newton continues on nested
    subsamples ``WARM_GROWTH`` times larger, up to ``N / WARM_FRACTION`` rows (and at
    most ``N / WARM_SPARSE`` beyond ``WARM_FLOOR``; each a few
    hundredths of a pass, :func:`warm_sizes`), so that the full data start within about
    four to seven posterior sds of the mode: one full Newton step then lands within a few
    hundredths of an sd, and the next pass confirms it (two passes over all rows).
    Otherwise the full-data phase first takes Newton steps with the warm start's Hessian
    held fixed, each one gradient pass (about a sixth of a Hessian pass on a compiled
    graph): with a Hessian accurate to ``O(n^-1/2)`` these converge linearly at that rate.
    One Hessian pass at the end checks the decrement with the exact Hessian (and gives
    the centre's sums); exact Newton continues from there if it is not yet small.

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
    rider : callable, optional
        ``rider(q, sums) -> object or None``: work to fuse into a full Hessian pass at
        ``q`` (``sums``: ``(g_ll, h_ll, g_prior, h_prior)`` at the previous iterate), for a
        likelihood whose ``full_loglik_hessian`` takes ``rider=`` (e.g. ScalableMH's bound
        constants, which need a whitening from a Hessian). It rides on every full pass
        after the first; the one of the final pass is returned as ``Center.rider``.

    Returns
    -------
    Center
    """
    q = engine.initial_q() if start is None else np.asarray(start, dtype=np.float64).copy()
    n_rows = engine.n_rows
    grad_passes = 0
    sizes = warm_sizes(n_rows, warm_rows)
    if not engine.cheap_hessian:
        sizes = sizes[:1]
    ok_warm, sums_warm = False, None
    if sizes:
        # nested subsamples: the first rows of one random permutation (a fixed seed:
        # set-up, not sampling), each gathered once
        perm = random_subset(np.random.default_rng(0), n_rows, sizes[-1])
        for k, size in enumerate(sizes):
            q_warm, sums_warm, ok_warm = _subsample_newton(
                engine, q, np.sort(perm[:size]),
                tol=tol if len(sizes) == 1 else max(tol, WARM_TOL), max_iter=max_iter)
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
    previous = None
    if ok_warm and engine.cheap_hessian:
        # the first full step on a gradient pass with the warm start's Hessian (the
        # subsample's, scaled): the Hessian pass at its end, which the centre needs
        # anyway, checks it, and the rider rides on that pass already
        q, previous = _gradient_step(engine, q, sums_warm[1])
        grad_passes = 1
    q, sums, passes, ok = _newton(
        engine, q, engine.full_loglik_hessian, engine.full_loglik, tol=tol,
        max_iter=max_iter, progress=progress, rider=rider, previous=previous,
    )
    passes += grad_passes
    if ok:
        *sums, carried = sums
        return Center(q, *sums, passes, True, "newton", carried)
    return _lbfgs_center(engine, q if q is not None else engine.initial_q(), passes)


def _subsample_newton(engine, q, rows, *, tol, max_iter):
    """Newton on the log prior plus ``N / n`` times the log-likelihood of ``rows``: its
    answer, the sums there and whether it converged. The rows are gathered once when
    the likelihood offers it (``subsample``)."""
    scale = engine.n_rows / rows.size
    sub = engine.subsample(rows) if hasattr(engine, "subsample") else None

    def sub_hess(x):
        v, g, h = sub.hessian(x) if sub is not None else engine.loglik_hessian(x, rows)
        return scale * v, scale * g, scale * h

    def sub_ll(x):
        return scale * (sub.value(x) if sub is not None else engine.loglik_sum(x, rows))

    q_new, sums, _, ok = _newton(engine, q, sub_hess, sub_ll, tol=tol, max_iter=max_iter)
    return q_new, (None if sums is None else sums[:4]), ok


def _gradient_step(engine, q, h_ll):
    """One Newton step from ``q`` taken on a gradient pass, with ``h_ll`` standing for the
    likelihood's Hessian: ``(q + step, sums at q)`` (``(q, None)`` when the pass or the
    step leaves the support). The step is not accepted by itself: the caller's Newton
    iteration evaluates the exact sums at its end and goes on from there."""
    v_ll, g_ll = engine.full_loglik_grad(q)
    v_pr, g_pr, h_pr = engine.prior_hessian(q)
    if not (math.isfinite(v_ll + v_pr) and np.all(np.isfinite(g_ll + g_pr))):
        return q, None
    sums = (g_ll, h_ll, g_pr, h_pr)
    x = q + _newton_direction(g_ll + g_pr, -(h_ll + h_pr))
    return (x, sums) if math.isfinite(engine.prior(x)) else (q, sums)


def _newton(engine, q, ll_hess, ll_value, *, tol, max_iter, progress=None, rider=None,
            previous=None):
    """Damped Newton on ``prior + ll``; ``ll_hess(x) -> (value, grad, hess)``, ``ll_value(x)``.

    The full step is tried first with a Hessian pass at the new point (which the next
    iteration needs anyway); only a step that fails the Armijo condition costs extra
    ``ll_value`` passes to backtrack. Returns ``(q, (g_ll, h_ll, g_prior, h_prior,
    carried), passes, converged)``, ``carried`` what ``rider`` (:func:`find_center`)
    collected in the pass at ``q``; when it stops without converging, ``q`` is the last
    point reached (None if the start is not finite). ``previous``: sums at an earlier
    point (:func:`_gradient_step`), which let ``rider`` ride on the first pass already.
    """

    def evaluate(x, previous=None):
        carried = None if rider is None or previous is None else rider(x, previous[:4])
        if carried is None:
            v_ll, g_ll, h_ll = ll_hess(x)
        else:
            v_ll, g_ll, h_ll = ll_hess(x, rider=carried)
        v_pr, g_pr, h_pr = engine.prior_hessian(x)
        ok = math.isfinite(v_ll + v_pr) and np.all(np.isfinite(g_ll + g_pr)) and np.all(
            np.isfinite(h_ll))
        return (v_ll + v_pr if ok else -math.inf), (g_ll, h_ll, g_pr, h_pr, carried)

    passes = 1
    f, sums = evaluate(q, previous)
    if not math.isfinite(f):
        return None, None, passes, False
    for it in range(max_iter):
        g_ll, h_ll, g_pr, h_pr, _ = sums
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
            f_new, sums_new = evaluate(x, sums)
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
            f_new, sums_new = evaluate(x, sums)
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
