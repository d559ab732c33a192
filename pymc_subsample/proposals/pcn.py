"""Preconditioned Crank-Nicolson proposal (:class:`PCN`)."""

from __future__ import annotations

import math

import numpy as np

from ..kernels._validation import InvalidParameterError, check_real
from .adaptation import _TunedScalar
from .base import _RW_OPTIMAL, Proposal, _CovFactor
from .validation import _start_value


class PCN(_TunedScalar, Proposal):
    """Preconditioned Crank-Nicolson proposal (Neal 1999, "Regression and classification
    using Gaussian process priors"; Cornish et al. 2019, "Scalable Metropolis-Hastings
    for exact Bayesian inference with large datasets", Sec. 3.2).

    ``theta' = m + sqrt(rho) (theta - m) + sqrt(1 - rho) L eps``, ``eps ~ N(0, I)``,
    ``L L^T = C``, ``0 <= rho < 1``; ``rho = 0`` is the independent proposal
    ``N(m, C)``. For ScalableMH (SMH-2) the step passes ``mode = m = theta_hat -
    H^{-1} grad U(theta_hat)`` and ``cov = C = H^{-1}``, the Gaussian ``exp(-Uhat_2)``.

    Log proposal ratio. Let ``pi0 = N(m, C)``. If ``theta ~ pi0`` then
    ``theta' - m = sqrt(rho) (theta - m) + sqrt(1 - rho) L eps`` is Gaussian with
    covariance ``rho C + (1 - rho) C = C``, and the pair ``(theta, theta')`` is jointly
    Gaussian with cross-covariance ``sqrt(rho) C``, which is symmetric. The joint law is
    therefore exchangeable: ``pi0(theta) q(theta'|theta) = pi0(theta') q(theta|theta')``
    (the kernel is ``pi0``-reversible). Hence, with ``z = L^{-1}(theta - m)``::

        log_ratio = log q(theta|theta') - log q(theta'|theta)
                  = log pi0(theta) - log pi0(theta')
                  = (|z'|^2 - |z|^2) / 2

    In whitened coordinates ``z' = sqrt(rho) z + sqrt(1 - rho) eps``, so the ratio costs
    one triangular mat-vec (``L^{-1}`` is precomputed). With the surrogate target
    ``exp(-U_0 - Uhat_2)`` equal to ``pi0`` (flat prior), the first factor of
    ``alpha_SMH`` is exactly 1.

    Parameters
    ----------
    rho : float, optional
        Autoregression parameter in ``[0, 1)``. Given: fixed (unless ``adapt=True``).
        None: tuned; started from ``sqrt(1 - rho) = scaling`` given to :meth:`setup`
        or else ``min(1, 2.38 / sqrt(d))``.
    adapt : bool, optional
        Whether to tune; default: tune iff ``rho`` is None.
    target_accept : float, default 0.234
    adapt_gain, adapt_t0, adapt_kappa : float
        Robbins-Monro gain parameters.

    Notes
    -----
    Tuning adapts ``log beta``, ``beta = sqrt(1 - rho)`` (the innovation scale), by the
    Robbins-Monro scheme of :mod:`pymc_subsample.proposals.adaptation`; for small
    ``beta`` pCN behaves like a random walk of scale ``beta L``, so this is the same
    scheme as for the random walks.
    The iterate is clipped to ``[log 1e-6, 0.5]`` and the proposal uses
    ``beta = min(exp(x), 1)``, so ``0 <= rho < 1``. The iterate may pass ``log 1 = 0``:
    when even the independent proposal (``beta = 1``, the most efficient pCN for a good
    Gaussian fit) accepts more often than the target, the averaged iterate then ends at
    ``beta = 1``. Clipped at 0 instead, its average would sit a few gain steps below the
    bound (``beta`` about 0.98, so ``sqrt(rho)`` about 0.2, and about 20% more
    autocorrelation than needed). ``scaling`` reports
    ``beta = sqrt(1 - rho)``; :attr:`rho` gives ``rho``. ``setup`` requires ``mode``
    and ``cov``.

    Near ``rho = 0`` pCN is an independence sampler with the Gaussian ``N(mode, cov)``.
    When the posterior's tail is heavier than that Gaussian's (a skewed posterior), the
    weight ``posterior / Gaussian`` is unbounded and the chain is not geometrically
    ergodic (Mengersen and Tweedie, "Rates of convergence of the Hastings and Metropolis
    algorithms", 1996): it stays long in the heavy tail, rarely, so batch-means errors
    and ArviZ's ESS of a single run can be too optimistic. It is still exact (checked
    from chains started at exact posterior draws in the tests). On such posteriors the
    reversible random walk (``proposal="reversible"``) or a random walk mixes more evenly.
    """

    _LOG_BETA_MIN = math.log(1e-6)
    _LOG_BETA_MAX = 0.5  # above log 1: see the Notes

    reference_point = "gaussian_mean"

    def __init__(self, rho: float | None = None, *, adapt: bool | None = None,
                 target_accept: float = 0.234, adapt_gain: float = 1.0, adapt_t0: float = 10.0,
                 adapt_kappa: float = 0.6):
        if adapt is None:
            adapt = rho is None
        super().__init__(adapt=adapt, target_accept=target_accept, adapt_gain=adapt_gain,
                         adapt_t0=adapt_t0, adapt_kappa=adapt_kappa)
        if rho is not None:
            r = check_real("rho", rho, 0.0, 1.0, closed="left")
            self._user_beta = math.sqrt(1.0 - r)
        else:
            self._user_beta = None

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        if mode is None or cov is None:
            raise InvalidParameterError(
                "PCN needs setup(..., mode=m, cov=C): the mean and covariance of the Gaussian "
                "approximation it is reversible for (for ScalableMH m = theta_hat - H^-1 grad "
                "U(theta_hat), C = H^-1)."
            )
        m = np.array(np.atleast_1d(mode), dtype=np.float64)
        if m.shape != (ndim,) or not np.all(np.isfinite(m)):
            raise InvalidParameterError(f"mode must be a finite vector of length ndim={ndim}.")
        self._mode = m
        self._factor = _CovFactor(cov, ndim, "cov")
        b0 = _start_value(self._user_beta, scaling, "scaling (PCN sqrt(1 - rho))",
                          min(1.0, _RW_OPTIMAL / math.sqrt(ndim)))
        if b0 > 1.0:  # only a step's scaling can be: the user's rho gives beta <= 1
            raise InvalidParameterError(
                f"PCN scaling = sqrt(1 - rho) must be in (0, 1], got {b0}.")
        self._beta0 = b0

    _state_attrs = ("_beta", "_a")

    def _reset_state(self):
        self._start_tuned(self._beta0, self._LOG_BETA_MIN, self._LOG_BETA_MAX)

    def _set_tuned(self, beta):
        """Set ``beta = min(beta, 1)`` and ``sqrt(rho) = sqrt(1 - beta^2)``."""
        beta = min(beta, 1.0)
        self._beta = beta
        self._a = math.sqrt(max(0.0, 1.0 - beta * beta))  # sqrt(rho)

    @property
    def rho(self) -> float:
        """Current ``rho = 1 - beta^2``."""
        self._require_setup()
        return 1.0 - self._beta**2

    @property
    def scaling(self) -> float:
        """``beta = sqrt(1 - rho)``."""
        self._require_setup()
        return self._beta

    @property
    def mode(self) -> np.ndarray:
        """Mean ``m`` of the reference Gaussian."""
        return self._mode

    def draw(self, q, rng):
        """pCN draw; ``log_ratio = log N(q; m, C) - log N(q'; m, C)``."""
        q = self._check_q(q)
        f = self._factor
        dq = q - self._mode
        z = f.whiten(dq)
        eps = rng.standard_normal(self.ndim)
        a, b = self._a, self._beta
        q_new = self._mode + a * dq + b * f.mul(eps)
        z_new = a * z + b * eps
        return q_new, 0.5 * (float(z_new @ z_new) - float(z @ z))
