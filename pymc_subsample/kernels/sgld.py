"""The stochastic-gradient Langevin update, its step-size schedules and its noise check.

Pure NumPy; nothing here imports PyMC or PyTensor.

The update (Welling & Teh 2011, "Bayesian learning via stochastic gradient Langevin
dynamics", eq. 4, with a fixed preconditioner ``M = F F'`` as in their Sec. 4):

    q' = q + (h / 2) M g_hat(q) + sqrt(h) F eps,     eps ~ N(0, I),

with ``g_hat`` an unbiased estimate of the gradient of the log posterior
(:mod:`pymc_subsample.kernels.variance.gradient_estimators`). El hanchi (2019, "Scaling up MCMC
for Bayesian inference using adaptive data subsampling", Algorithm 2) writes the same
update as ``theta' = theta - eps_EH grad U + N(0, 2 eps_EH)``: his step ``eps_EH`` is
``h / 2`` here, with ``M = I``.

Two errors remain without a Metropolis-Hastings correction:

- Discretisation. On a Gaussian target whose covariance is ``M`` the update is an AR(1)
  process, ``z' = (1 - h/2) z + sqrt(h) eps`` in whitened coordinates, whose stationary
  variance is ``h / (1 - (1 - h/2)^2) = 1 / (1 - h/4)`` instead of 1
  (:func:`gaussian_variance_inflation`); the mean is right.
- Gradient noise. The estimate's error adds ``(h/2)^2 Var(g_hat)`` to the ``h M`` the
  update injects. Welling & Teh (Sec. 4) ask that ``alpha = (h / 4) lambda_max(F' Var(g_hat)
  F)`` be small; :func:`noise_ratio` is that ``alpha``, the variance the gradient noise
  adds relative to the injected noise along the worst direction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .variance.gradient_estimators import largest_eigenvalue

__all__ = [
    "Schedule",
    "SCHEDULES",
    "langevin_update",
    "step_size_at",
    "gaussian_variance_inflation",
    "noise_ratio",
    "NoiseAverage",
]

#: step-size schedules
SCHEDULES = ("fixed", "decreasing")


def langevin_update(q, grad, h: float, eps, factor=None) -> np.ndarray:
    """``q + (h/2) M grad + sqrt(h) F eps`` with ``M = F F'``; ``factor`` is ``F`` as a
    ``(d, d)`` lower-triangular matrix, a ``(d,)`` vector (diagonal ``F``) or None
    (identity). Welling & Teh (2011), eq. 4."""
    if factor is None:
        return q + 0.5 * h * grad + math.sqrt(h) * eps
    if np.ndim(factor) == 1:
        return q + factor * (0.5 * h * factor * grad + math.sqrt(h) * eps)
    return q + factor @ (0.5 * h * (factor.T @ grad) + math.sqrt(h) * eps)


def step_size_at(t: int, h0: float, schedule: str = "fixed", *, t0: float = 100.0,
                 gamma: float = 0.55) -> float:
    """The step size of transition ``t`` (counted from 0).

    ``"fixed"``: ``h0``. ``"decreasing"``: ``h0 (1 + t / t0)^(-gamma)``, the polynomial
    decay of Welling & Teh (2011, Sec. 3: ``sum h_t = inf``, ``sum h_t^2 < inf`` for
    ``gamma`` in ``(0.5, 1]``), under which the discretisation and gradient-noise errors
    vanish as ``t`` grows, at the price of ever slower mixing.
    """
    if schedule == "fixed":
        return h0
    return h0 * (1.0 + t / t0) ** (-gamma)


def gaussian_variance_inflation(h: float) -> float:
    """Stationary variance of the update, relative to the target's, on a Gaussian target
    with covariance ``M`` and exact gradients: ``1 / (1 - h/4)`` (finite for ``h < 4``)."""
    return math.inf if h >= 4.0 else 1.0 / (1.0 - h / 4.0)


def noise_ratio(h: float, whitened_variance: float) -> float:
    """Welling & Teh's ``alpha = (h / 4) lambda_max(F' Var(g_hat) F)``: the variance the
    gradient noise adds to an update, relative to the injected ``h``, along the worst
    direction (``whitened_variance``: that largest eigenvalue, e.g.
    :func:`~pymc_subsample.kernels.variance.gradient_estimators.largest_eigenvalue` of an average
    of :meth:`~pymc_subsample.kernels.variance.gradient_estimators.Estimate.whitened_covariance`)."""
    return 0.25 * h * whitened_variance


class NoiseAverage:
    """Running average of the estimator's whitened covariance estimates, per chain, and
    its largest eigenvalue.

    One batch's covariance estimate is too noisy for its largest eigenvalue (biased
    upwards, see :func:`~pymc_subsample.kernels.variance.gradient_estimators.largest_eigenvalue`);
    the average over the last ``window`` or so transitions (an exponential window, the
    plain mean until ``window`` are in) is not.

    In up to :attr:`EXACT_DIM` dimensions every transition's estimate is folded in and
    the largest eigenvalue is exact (``eigvalsh``). Beyond, a full eigendecomposition
    (``O(d^3)``) and the ``(d, d)`` estimate (``O(m d^2)``) would cost many times the
    gradient itself (86% of a 2,000-column logistic regression's time): once ``window``
    estimates are in, one is folded in every :meth:`stride` transitions (the window
    still holds ``window`` estimates, spanning ``window x stride`` transitions: an
    average of fewer would leave its top eigenvalue biased upwards, 2.6x at
    ``d = 2,000`` with 25 estimates instead of 200), and the eigenvalue is tracked by power
    iteration warm-started at the previous eigenvector (Golub & Van Loan, "Matrix
    computations", Sec. 8.2.1; the average moves by ``1 / window`` per update, so a few
    iterations follow it): ``|C v|`` for the unit iterate ``v``, a lower bound of
    ``lambda_max`` that is within rounding of it once the iterate has converged.
    """

    #: dimensions up to which the eigenvalue is exact and every transition is folded in
    EXACT_DIM = 256
    #: power iterations: at most ``POWER_FIRST`` (all of them at the first update), at
    #: least ``POWER_NEXT`` (warm-started), stopping once ``|C v|`` moves by less than
    #: ``POWER_TOL`` relative (the young average moves by ``1 / n`` per update)
    POWER_FIRST, POWER_NEXT, POWER_TOL = 60, 3, 1e-5

    def __init__(self, window: int = 200):
        self.window = int(window)
        self.reset()

    def reset(self) -> None:
        self.n = 0
        self.cov = None
        self.top = 0.0
        self.calls = 0
        self._v = None

    @classmethod
    def stride(cls, d: int) -> int:
        """Transitions per folded estimate in ``d`` dimensions: 1 up to
        :attr:`EXACT_DIM`, else ``ceil(d / EXACT_DIM)``."""
        return 1 if d <= cls.EXACT_DIM else -(-int(d) // cls.EXACT_DIM)

    def due(self, d: int) -> bool:
        """Count a transition in ``d`` dimensions; True when it folds an estimate in:
        every transition until the window is full, then every :meth:`stride`."""
        self.calls += 1
        return self.n < self.window or (self.calls - 1) % self.stride(d) == 0

    def add(self, cov: np.ndarray) -> np.ndarray:
        """Fold in one estimate; returns the current average."""
        self.n += 1
        w = 1.0 / min(self.n, self.window)
        if self.cov is None:
            self.cov = np.array(cov, dtype=np.float64)
        else:  # in place: no (d, d) temporaries
            self.cov *= 1.0 - w
            self.cov += w * cov
        return self.cov

    def largest(self) -> float:
        """The largest eigenvalue of the average (0.0 before any estimate); kept as
        :attr:`top`."""
        cov = self.cov
        if cov is None or cov.shape[0] <= self.EXACT_DIM or not np.any(cov):
            self.top = 0.0 if cov is None else largest_eigenvalue(cov)
        else:
            self.top = self._power(cov)
        return self.top

    def _power(self, cov: np.ndarray) -> float:
        v, steps = self._v, self.POWER_NEXT
        if v is None:  # start along the coordinates' scales (no randomness needed)
            v, steps = np.sqrt(np.clip(np.diag(cov), 0.0, None)), self.POWER_FIRST
            if not np.any(v):
                v = np.ones(cov.shape[0])
            v = v / np.linalg.norm(v)
        lam = 0.0
        for k in range(self.POWER_FIRST):
            u = cov @ v
            lam, last = float(np.linalg.norm(u)), lam
            if not (lam > 0.0 and math.isfinite(lam)):
                return lam if math.isfinite(lam) else math.inf
            v = u / lam
            if k + 1 >= steps and abs(lam - last) <= self.POWER_TOL * lam:
                break
        self._v = v
        return lam


@dataclass(frozen=True)
class Schedule:
    """The step size of the chain's transitions: ``h0`` while tuning, then
    :func:`~pymc_subsample.kernels.sgld.step_size_at` of the sampling transitions so far."""

    h0: float
    schedule: str
    t0: float
    gamma: float

    def at(self, t: int) -> float:
        return step_size_at(t, self.h0, self.schedule, t0=self.t0, gamma=self.gamma)
