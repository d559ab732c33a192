"""Gradient estimates of the log posterior from minibatches, for the Langevin moves.

:func:`build_estimator` runs the set-up passes an estimator of
:mod:`pymc_subsample.kernels.gradient_estimators` needs (per-row gradients at the centre,
importance weights) and refuses SAGA's store when it would not fit in memory;
:class:`GradientOracle` evaluates the rows' gradients through a step's engine and combines
them. Shared by :class:`~pymc_subsample.SGLD` and the MH-corrected ``Langevin(gradient=...)``
proposals of the other steps.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ..kernels.control_variates import importance_weights
from ..kernels.gradient_estimators import make_estimator, saga_bytes

__all__ = ["GradientOracle", "build_estimator"]


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


def build_estimator(step, name: str, batch_size: int, *, defensive: float = 0.1,
                    max_memory=None):
    """The gradient estimator ``name`` (validated by the caller: ``SGLD`` or ``Langevin``)
    for a step with an engine and a centre
    (``step.center``; None is allowed only for ``"minibatch"``): the set-up passes it
    needs (per-row gradients at the centre for SAGA, importance weights) run here.

    SAGA's store is refused, before anything is allocated, when it would exceed
    ``max_memory`` bytes (default: half the memory available now, at most 4 GiB).
    """
    eng = step.engine
    n, d = eng.n_rows, eng.ndim
    if name in ("saga", "is_saga"):
        need = saga_bytes(n, d)
        limit = (min(4 * 2**30, 0.5 * _available_memory()) if max_memory is None
                 else float(max_memory))
        if need > limit:
            raise MemoryError(
                f"{type(step).__name__}(gradient={name!r}) stores {n:,} x {d} per-row gradients "
                f"per chain ({need / 2**30:.2f} GiB with its starting copy), over the limit of "
                f"{limit / 2**30:.2f} GiB (max_memory=). Use gradient='cv' (Taylor control "
                "variates, which store nothing per row), or raise max_memory= if the memory "
                "is really there."
            )
    if name == "minibatch":
        return make_estimator(name, n, batch_size)
    if getattr(step, "center", None) is None:
        raise ValueError(
            f"the gradient estimator {name!r} needs a centre (the posterior mode), and "
            f"{type(step).__name__} has none here (control_variate=0?). Use control "
            "variates, or gradient='minibatch'."
        )
    c = step.center.theta
    if name == "cv":
        return make_estimator(name, n, batch_size, grad_sum_center=step.center.loglik_grad)
    grads_c = weights = None
    if name in ("saga", "is_saga"):
        grads_c = eng.loglik_rows_grad(c, np.arange(n), chunk=8192)[1]
    if name in ("is", "is_saga"):
        # El hanchi (2019) Sec. 5.1: ||h_i|| + L_i s, with the Lipschitz term measured over
        # one Laplace-scale move (a fixed seed: set-up, not sampling)
        z = np.random.default_rng(0).standard_normal(d)
        moved = c + step._laplace_chol @ z
        weights = np.empty(n)
        for start in range(0, n, 65536):
            rows = np.arange(start, min(n, start + 65536))
            g = grads_c[rows] if grads_c is not None else eng.loglik_rows_grad(c, rows, chunk=8192)[1]
            weights[rows] = importance_weights(g, eng.loglik_rows_grad(moved, rows, chunk=8192)[1])
    return make_estimator(name, n, batch_size, grads_center=grads_c, weights=weights,
                          defensive=defensive)


class GradientOracle:
    """Estimates of the log-posterior gradient ``grad log prior(q) + w G_hat(q)`` from an
    estimator of :mod:`pymc_subsample.kernels.gradient_estimators` and a step's engine.

    Used by :class:`SGLD` and, through ``Langevin(gradient=...)``, by the MH-corrected
    Langevin proposals of AustereMH and BarkerMinibatch. ``oracle(q, rows)`` returns the
    gradient estimate; the per-row gradients of the last call are kept for
    :meth:`update` (SAGA's store) and the last :class:`~pymc_subsample.kernels.
    gradient_estimators.Estimate` for the noise check.
    """

    def __init__(self, engine, estimator, center=None, loglik_weight: float = 1.0):
        self.engine = engine
        self.estimator = estimator
        self.center = None if center is None else np.asarray(center, dtype=np.float64)
        self.loglik_weight = float(loglik_weight)
        self.reset()

    @property
    def batch_size(self) -> int:
        return self.estimator.batch_size

    def reset(self) -> None:
        """Start of a chain: the estimator's store back to its start."""
        self.estimator.reset()
        self.last = None
        self._rows, self._seen = None, []

    def draw_rows(self, rng: np.random.Generator) -> np.ndarray:
        """The rows of the next estimates (kept for :meth:`update`)."""
        self._rows, self._seen = self.estimator.draw_rows(rng), []
        return self._rows

    def __call__(self, q, rows):
        eng = self.engine
        if self.estimator.needs_center:
            grads, grads_c = eng.loglik_rows_grad_pair(q, self.center, rows)
        else:
            grads, grads_c = eng.loglik_rows_grad(q, rows, chunk=max(256, len(rows)))[1], None
        self._seen.append((q, grads))
        est = self.estimator.estimate(rows, grads, grads_c)
        self.last = est
        _, g_prior = eng.prior_and_grad(q)
        return g_prior + self.loglik_weight * est.grad

    def update(self, q_now) -> int:
        """After a transition: a stateful estimator (SAGA) stores the rows' gradients at
        the chain's new state ``q_now``, when one of the calls since :meth:`draw_rows`
        evaluated them there (SGLD: the state it moved from; an MH-corrected Langevin
        proposal: the current or the proposed point, whichever the test kept)."""
        if self.estimator.stateful:
            for q, grads in self._seen:
                if q is q_now or np.array_equal(q, q_now):
                    self.estimator.update(self._rows, grads)
                    break
        self._seen = []
        return 0 if self._rows is None else int(self._rows.size)
