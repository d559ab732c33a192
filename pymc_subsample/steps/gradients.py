"""Gradient estimates of the log posterior from minibatches, for the Langevin moves.

:class:`GradientOracle` evaluates the rows' gradients through a step's engine and combines
them with an estimator of :mod:`pymc_subsample.kernels.variance.gradient_estimators` (built by
:func:`pymc_subsample.steps.setup.build_estimator`). Shared by :class:`~pymc_subsample.SGLD` and the MH-corrected ``Langevin(gradient=...)``
proposals of the other steps.
"""

from __future__ import annotations

import numpy as np

__all__ = ["GradientOracle"]


class GradientOracle:
    """Estimates of the log-posterior gradient ``grad log prior(q) + w G_hat(q)`` from an
    estimator of :mod:`pymc_subsample.kernels.variance.gradient_estimators` and a step's engine.

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

    def get_state(self):
        """The chain state of a stateful estimator (SAGA's store,
        :class:`~pymc_subsample.kernels.variance.control_variates.StoreState`), or None."""
        return self.estimator.store.get_state() if self.estimator.stateful else None

    def set_state(self, state) -> None:
        if state is not None:
            self.estimator.store.set_state(state)

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
