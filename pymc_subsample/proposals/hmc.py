"""Hamiltonian moves on a data-free surrogate of the posterior (:class:`SurrogateHMC`)."""

from __future__ import annotations

import math

import numpy as np

from ..kernels._validation import InvalidParameterError, check_positive_int
from ..kernels.variance.streaming import RunningMoments
from .adaptation import _TunedScalar, shrunk_covariance
from .base import Proposal, _CovFactor
from .validation import _positive_scalar, _start_value

#: first tuning window of SurrogateHMC's mass-matrix adaptation
_MASS_WINDOW = 100


class SurrogateHMC(_TunedScalar, Proposal):
    """Hamiltonian trajectory on a data-free surrogate of the posterior, as a proposal.

    ``grad_fn(q)`` (from :meth:`setup`) is the gradient of a surrogate log density
    ``log pi_hat`` that costs no data: for ScalableMH, the log prior plus the Taylor
    proxy's closed-form sum (the first factor of the factorised test). A draw refreshes a
    momentum ``r ~ N(0, I)`` in whitened coordinates ``q = m + L x`` (``L L' = cov``), runs
    ``n = ceil(path_length / h)`` leapfrog steps of size ``h`` (jittered by a factor in [0.8, 1.2] each draw) and
    returns the end point with ``log_ratio = (|r|^2 - |r'|^2) / 2``.

    Why the step stays exact: leapfrog composed with a momentum flip is an involution
    that preserves volume whatever force it integrates (each half step is a shear), so
    the extended target ``pi(q) N(r)`` is kept invariant by the MH test with ratio
    ``pi(q') N(r') / (pi(q) N(r))`` (Neal 2011, "MCMC using Hamiltonian dynamics",
    Sec. 3.2). ScalableMH splits that ratio into the factors of its factorised test
    (Cornish et al. 2019, "Scalable Metropolis-Hastings for exact Bayesian inference
    with large datasets", eq. 10): the surrogate part ``pi_hat(q') N(r') / (pi_hat(q)
    N(r))``, which this ``log_ratio`` plus the step's prior and proxy terms give exactly,
    and the data factors of the remainders, read by Poisson thinning. The surrogate only
    guides the trajectory; the ``N`` rows' likelihood is never approximated. This is the
    idea of Dang, Quiroz, Kohn, Tran & Villani (2019), "Hamiltonian Monte Carlo with
    energy conserving subsampling", with SMH's exact correction in place of a
    pseudo-marginal one.

    The trajectory follows curved posteriors (a non-centred hierarchical model's funnel
    ridge) that a Gaussian random walk or pCN proposal crosses only in small steps.

    Parameters
    ----------
    step_size : float, optional
        Starting leapfrog step ``h`` in whitened units (default ``min(1, 1.5 /
        ndim^(1/4))``). Tuned toward ``target_accept`` while tuning.
    max_steps : int, default 64
        At most this many leapfrog steps per draw (the integration time shortens when
        tuning makes ``h`` small).
    adapt_mass : bool, default True
        While tuning, replace the whitening covariance by the covariance of the tuning
        states in windows of 100, 200, 400, ... steps (Stan's doubling windows): the
        Laplace fit at the joint mode of a hierarchical model can be far from the
        posterior's bulk.
    path_length : float, default 5.0
        Integration time ``n h`` in whitened units (a unit Gaussian's period is ``2 pi``).
        Long enough to travel along the curved ridge of a non-centred hierarchical
        posterior: on a 20-group logistic model (N = 10^4) the ESS of the group scale was
        65, 142 and 293 per 4,000 draws with 1.6, 3 and 5.
    adapt : bool, default True
    target_accept : float, default 0.8
    adapt_gain, adapt_t0, adapt_kappa : float
        Robbins-Monro gain parameters (on ``log h``).

    Notes
    -----
    ``scaling`` reports ``h``. ``setup`` requires ``grad_fn(q) -> ndarray`` (a
    full-vector gradient, not the minibatch gradient of ``Langevin``) and ``cov``.
    """

    gradient = "surrogate"
    tune_signal = "first_factor"

    def __init__(self, step_size: float | None = None, *, path_length: float = 5.0,
                 max_steps: int = 64, adapt: bool = True, adapt_mass: bool = True,
                 target_accept: float = 0.8, adapt_gain: float = 1.0,
                 adapt_t0: float = 10.0, adapt_kappa: float = 0.6):
        super().__init__(adapt=adapt, target_accept=target_accept, adapt_gain=adapt_gain,
                         adapt_t0=adapt_t0, adapt_kappa=adapt_kappa)
        self._user_h = None if step_size is None else _positive_scalar(step_size, "step_size")
        self.path_length = _positive_scalar(path_length, "path_length")
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.adapt_mass = bool(adapt_mass)

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        if grad_fn is None or cov is None:
            raise InvalidParameterError(
                "SurrogateHMC needs setup(..., grad_fn=g, cov=C): g(q) the gradient of the "
                "data-free surrogate log density, C a covariance for the whitening (the "
                "inverse Hessian at theta_hat).")
        self._grad = grad_fn
        self._factor0 = _CovFactor(cov, ndim, "cov")
        self._h0 = _start_value(self._user_h, scaling, "scaling (SurrogateHMC step size)",
                                min(1.0, 1.5 / ndim**0.25))

    def _restart_adapter(self, h):
        """``h``; Robbins-Monro on ``log h`` from there, within ``[1e-4, path_length]``."""
        self._start_tuned(h, math.log(1e-4), math.log(self.path_length))

    def _set_tuned(self, h):
        self._h = h

    _state_attrs = ("_h", "_cache", "_mass", "_window", "_next_mass")

    def _reset_state(self):
        self._restart_adapter(self._h0)
        self._cache = (None, None)
        self._mass = self._factor0
        self._window = RunningMoments(self.ndim)
        self._next_mass = _MASS_WINDOW

    @property
    def scaling(self) -> float:
        """The leapfrog step ``h`` (whitened units)."""
        self._require_setup()
        return self._h

    def _grad_x(self, q):
        """Gradient in the whitened coordinates, ``L' grad(q)``; remembers the last."""
        key, val = self._cache
        if key is not None and np.array_equal(key, q):
            return val
        g = self._mass.mul_t(np.asarray(self._grad(q), dtype=np.float64))
        self._cache = (q.copy(), g)
        return g

    def draw(self, q, rng):
        """Leapfrog trajectory; ``log_ratio`` is the kinetic energy's change (``-inf``,
        a sure rejection, when the trajectory diverges to non-finite gradients)."""
        q = self._check_q(q)
        with np.errstate(all="ignore"):
            return self._trajectory(q, rng)

    def _trajectory(self, q, rng):
        f = self._mass
        h = self._h * rng.uniform(0.8, 1.2)
        n = min(self.max_steps, max(1, int(math.ceil(self.path_length / h))))
        r0 = rng.standard_normal(self.ndim)
        g = self._grad_x(q)
        if not np.all(np.isfinite(g)):
            return q, -math.inf
        r = r0 + 0.5 * h * g
        x = np.zeros(self.ndim)
        q_new = q
        for i in range(n):
            x = x + h * r
            q_new = q + f.mul(x)
            g = self._grad_x(q_new)
            if not np.all(np.isfinite(g)):
                return q_new, -math.inf
            r = r + (h if i < n - 1 else 0.5 * h) * g
        return q_new, 0.5 * (float(r0 @ r0) - float(r @ r))

    def _tune(self, accepted, q):
        self._tune_scalar(accepted)
        if self.adapt_mass and q is not None:
            self._adapt_mass(q)

    def _adapt_mass(self, q):
        """Add ``q`` to the window; at a window's end, whiten with its covariance."""
        self._window.add(q)
        if self._adapter.t < self._next_mass:
            return
        # windows of 100, 200, 400, ... tuning steps (Stan's doubling windows)
        self._next_mass = 2 * self._adapter.t + _MASS_WINDOW
        cov = shrunk_covariance(self._window, min_n=max(2 * self.ndim, 50))
        self._window = RunningMoments(self.ndim)
        if cov is None:
            return
        try:
            self._mass = _CovFactor(cov, self.ndim, "estimated covariance")
        except ValueError:
            return
        self._cache = (None, None)
        if self.adapt:
            self._restart_adapter(self._h)
