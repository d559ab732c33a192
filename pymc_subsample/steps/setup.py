"""The set-up passes every step shares, written once: locating the centre, the per-row
gradients there, importance weights, the SAGA store (with its memory check), the
gradient estimators of the Langevin moves (and the oracle they are read through), and
the control variate a step holds.

Each function takes the engine (or the duck-typed likelihood the mode search runs on)
and plain arguments, and returns what it built; the steps decide when to call them.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..center import center_at, find_center, parse_point
from ..engine.glm import detect_glm
from ..engine.predictor import affine_likelihood
from ..kernels._validation import InvalidParameterError
from ..kernels.variance.control_variates import (
    NoControlVariate,
    PredictorTaylorControlVariate,
    SagaControlVariate,
    StoredGradients,
    TaylorControlVariate,
    importance_weights,
)
from ..kernels.variance.gradient_estimators import make_estimator, saga_bytes
from .gradients import GradientOracle

__all__ = [
    "mode_likelihood",
    "locate_center",
    "row_gradients",
    "importance_weights_at",
    "check_store_memory",
    "build_estimator",
    "gradient_oracle",
    "control_variate",
]

#: rows per block of the set-up's per-row gradient passes
_BLOCK = 65536


def mode_likelihood(engine):
    """The likelihood the mode search runs on: for an ordinary GLM (a registered family
    whose predictor coordinates are affine in ``q``) its NumPy row terms
    (:class:`~pymc_subsample.engine.predictor.PredictorLikelihood`: a Hessian pass is one
    matrix product ``X' W X`` per chunk, and no Hessian graph is compiled), else the
    engine."""
    try:
        spec = detect_glm(engine.model)
    except ValueError:
        return engine
    return affine_likelihood(engine, spec, engine.initial_q())[1]


#: the mode search's tolerance for a centre (:func:`~pymc_subsample.center.find_center`'s
#: ``tol``, the predicted gain in log density): within about ``sqrt(2 * CENTER_TOL) =
#: 0.06`` posterior sds of the mode, which changes neither the control variates'
#: variance nor the bounds noticeably (the Laplace mean takes one more Newton step from
#: there), and on an ordinary GLM is usually reached by one full Newton step from the
#: warm start
CENTER_TOL = 2e-3
#: ScalableMH's tolerance: within about ``sqrt(2 * 0.05) = 0.3`` posterior sds of the
#: mode (in the Laplace metric, over all dimensions together). Its bounds and the
#: control-variate identity hold at any centre; the distance only adds to the draws'
#: own, ``E ||theta - centre||^2 = d + 0.1`` instead of ``d`` in sd units. At N = 10^6
#: the tolerance 2e-3 needed a second Hessian pass (4 NumPy passes' time, its bound
#: constants recomputed) on three datasets out of three; this one did not
SCALABLE_CENTER_TOL = 0.05


def locate_center(lik, engine, center_arg, what: str, advice: str, *, rider=None,
                  tol: float = CENTER_TOL):
    """The centre: ``center_arg`` as given (a point dict or a raveled vector), else the
    posterior mode by :func:`~pymc_subsample.center.find_center` on ``lik`` (the engine,
    or a cheaper duck-typed likelihood of the same model), to ``tol`` (default
    ``CENTER_TOL``), with
    ``rider`` fused into its last pass (:func:`~pymc_subsample.center.find_center`).

    Returns
    -------
    center : Center
    warning : str or None
        A message for every chain when the mode search did not converge, naming
        ``what`` the centre is for and giving ``advice``.
    """
    if center_arg is not None:
        return center_at(lik, parse_point(center_arg, engine, "center")), None
    center = find_center(lik, tol=tol, rider=rider)
    if center.converged:
        return center, None
    return center, f"the search for the posterior mode ({what}) did not converge; {advice}"


def row_gradients(engine, theta) -> np.ndarray:
    """Every row's log-likelihood gradient at ``theta``, shape ``(N, d)`` (one pass)."""
    return engine.loglik_rows_grad(theta, np.arange(engine.n_rows), chunk=8192)[1]


def importance_weights_at(engine, theta, chol, grads=None) -> np.ndarray:
    """The row weights ``||h_i|| + L_i s`` of El hanchi (2019, "Scaling up MCMC for
    Bayesian inference using adaptive data subsampling", Sec. 5.1,
    :func:`~pymc_subsample.kernels.variance.control_variates.importance_weights`), with the
    Lipschitz term measured over one move of the Laplace approximation's scale ``chol``
    (a fixed seed: set-up, not sampling), ``_BLOCK`` rows at a time. ``grads``: the
    per-row gradients at ``theta`` when already computed."""
    n, d = engine.n_rows, engine.ndim
    z = np.random.default_rng(0).standard_normal(d)
    moved = theta + chol @ z
    weights = np.empty(n)
    for start in range(0, n, _BLOCK):
        rows = np.arange(start, min(n, start + _BLOCK))
        g = (grads[rows] if grads is not None
             else engine.loglik_rows_grad(theta, rows, chunk=8192)[1])
        weights[rows] = importance_weights(g, engine.loglik_rows_grad(moved, rows,
                                                                      chunk=8192)[1])
    return weights


def _available_memory() -> float:
    """Bytes of memory available to new allocations (``MemAvailable``), or inf."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return 1024.0 * float(line.split()[1])
    except OSError:  # pragma: no cover - not Linux
        pass
    try:  # pragma: no cover
        return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover
        return math.inf


def check_store_memory(n: int, d: int, max_memory, *, what: str, advice: str) -> None:
    """Refuse SAGA's per-row gradient store (:func:`~pymc_subsample.kernels.
    gradient_estimators.saga_bytes`: the store and its starting copy) before anything is
    allocated when it exceeds ``max_memory`` bytes (default: half the memory available
    now, at most 4 GiB). ``what`` names the argument that asked for it (e.g.
    ``"AustereMH(control_variate='saga')"``); ``advice`` says what to use instead."""
    need = saga_bytes(n, d)
    limit = (min(4 * 2**30, 0.5 * _available_memory()) if max_memory is None
             else float(max_memory))
    if need > limit:
        raise MemoryError(
            f"{what} stores {n:,} x {d} per-row gradients per chain ({need / 2**30:.2f} GiB "
            f"with its starting copy), over the limit of {limit / 2**30:.2f} GiB "
            f"(max_memory=). {advice}"
        )


def build_estimator(engine, name: str, batch_size: int, *, center=None, chol=None,
                    defensive: float = 0.1, max_memory=None, owner: str = "the step"):
    """The gradient estimator ``name`` of :mod:`pymc_subsample.kernels.variance.gradient_estimators`
    (validated by the caller: ``SGLD`` or ``Langevin``), with the set-up passes it needs:
    per-row gradients at the centre for SAGA, importance weights for ``"is"``.

    ``center`` (a :class:`~pymc_subsample.center.Center`) is needed by every estimator but
    ``"minibatch"``; ``chol`` (the Laplace covariance's Cholesky factor) by the
    importance-sampling ones.
    """
    n, d = engine.n_rows, engine.ndim
    if name in ("saga", "is_saga"):
        # the store is what 'saga' and 'is_saga' add: the advice names the estimators
        # without it ('cv', the default, and for 'is_saga' its importance sampling alone)
        alone = " or gradient='is' (its importance sampling alone)" if name == "is_saga" else ""
        check_store_memory(n, d, max_memory, what=f"{owner}(gradient={name!r})",
                           advice="Use gradient='cv' (Taylor control variates, the default, "
                                  f"which store nothing per row){alone}, or raise "
                                  "max_memory= if the memory is really there.")
    if name == "minibatch":
        return make_estimator(name, n, batch_size)
    if center is None:
        raise InvalidParameterError(
            f"the gradient estimator {name!r} needs a centre (the posterior mode), and "
            f"{owner} has none here (control_variate=0?). Use control variates, or "
            "gradient='minibatch'."
        )
    if name == "cv":
        return make_estimator(name, n, batch_size, grad_sum_center=center.loglik_grad)
    grads_c = row_gradients(engine, center.theta) if name in ("saga", "is_saga") else None
    weights = None
    if name in ("is", "is_saga"):
        weights = importance_weights_at(engine, center.theta, chol, grads_c)
    return make_estimator(name, n, batch_size, grads_center=grads_c, weights=weights,
                          defensive=defensive)


def gradient_oracle(engine, name: str, batch_size: int, *, center=None, chol=None,
                    loglik_weight: float = 1.0, defensive: float = 0.1, max_memory=None,
                    owner: str = "the step") -> GradientOracle:
    """The log-posterior gradient estimates of a Langevin move (SGLD's update, or a
    ``Langevin(gradient=...)`` proposal): a
    :class:`~pymc_subsample.steps.gradients.GradientOracle` over the estimator ``name``
    of :func:`build_estimator` (same arguments), with the control variates' centre
    ``center.theta`` and the likelihood's weight ``loglik_weight`` (a tempered
    target's)."""
    est = build_estimator(engine, name, batch_size, center=center, chol=chol,
                          defensive=defensive, max_memory=max_memory, owner=owner)
    return GradientOracle(engine, est, None if center is None else center.theta,
                          loglik_weight)


def control_variate(kind, engine, center=None, *, vmap=None, proxy=None, grads=None):
    """The control variate a step holds (:class:`~pymc_subsample.kernels.variance.control_variates.
    ControlVariate`).

    Parameters
    ----------
    kind : ControlVariateKind
        An entry of :data:`~pymc_subsample.kernels.variance.control_variates.CONTROL_VARIATES`:
        ``"none"``, a Taylor proxy (``"taylor1"``, ``"taylor2"``: of its ``taylor_order``)
        or ``"saga"`` (stored per-row gradients).
    engine : LikelihoodEngine
    center : Center, optional
        The centre (Taylor proxies in ``q``: ``center.proxy(kind)``).
    vmap : PredictorMap, optional
        Predictor coordinates: the Taylor proxy ``proxy`` lives there.
    proxy : TaylorProxy, optional
        The proxy, when it is not the centre's (predictor coordinates).
    grads : ndarray, optional
        SAGA's starting store (per-row gradients at the centre; computed when None).
    """
    if kind.name == "none":
        return NoControlVariate(engine)
    if kind.name == "saga":
        return SagaControlVariate(engine, StoredGradients(
            row_gradients(engine, center.theta) if grads is None else grads))
    if vmap is not None:
        return PredictorTaylorControlVariate(vmap, proxy)
    return TaylorControlVariate(
        engine, center.proxy(kind.taylor_order) if proxy is None else proxy)
