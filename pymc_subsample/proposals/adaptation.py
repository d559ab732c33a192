"""Adaptation used while tuning: the Robbins-Monro recursion on a scalar, the mixin
that tunes one scalar of a proposal with it, and running moments of tuning states.

Robbins-Monro recursion
-----------------------
A scalar log-parameter ``x`` (log scale, log step size, or ``log sqrt(1 - rho)``) is
adapted towards a target acceptance rate ``a*`` (Robbins & Monro 1951, "A stochastic
approximation method"; Andrieu & Thoms 2008, "A tutorial on adaptive MCMC", Sec. 5):

    ``x_{t+1} = clip(x_t + gamma_t (a_t - a*))``,  ``gamma_t = gain / (1 + t / t0)^kappa``

with ``a_t`` the acceptance indicator (or acceptance probability) of tuning step ``t``,
``gain = 1``, ``t0 = 10``, ``kappa = 0.6`` by default. Steps are bounded by ``gain`` and
the gain decays (``sum gamma_t = inf``, ``sum gamma_t^2 < inf``), so the recursion is
stable; ``x`` is also clipped to a wide box around its start. During tuning the current
iterate is used; at the end of tuning the parameter is frozen at the weighted running
average ``xbar_t = w_t x_t + (1 - w_t) xbar_{t-1}``, ``w_t = t^(-0.75)`` (the averaging
of Nesterov's dual averaging as used by Hoffman & Gelman 2014, "The No-U-Turn sampler:
adaptively setting path lengths in Hamiltonian Monte Carlo", Sec. 3.2), which removes
most of the noise of the last iterates.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from ..kernels._validation import check_real
from .validation import _check_target, _positive_scalar
from ..kernels.variance.streaming import RunningMoments


class _RobbinsMonro:
    """Robbins-Monro recursion on a scalar log-parameter with iterate averaging.

    ``x <- clip(x + gamma_t (a_t - target), lo, hi)``, ``gamma_t = gain / (1 + t/t0)^kappa``;
    ``xbar`` is the running average with weights ``t^(-avg_kappa)``.
    """

    def __init__(self, target: float, gain: float = 1.0, t0: float = 10.0,
                 kappa: float = 0.6, avg_kappa: float = 0.75):
        self.target = _check_target(target)
        self.gain = _positive_scalar(gain, "adapt_gain")
        self.t0 = _positive_scalar(t0, "adapt_t0")
        self.kappa = check_real("adapt_kappa", kappa, 0.5, 1.0, closed="right")
        self.avg_kappa = float(avg_kappa)
        self.start(0.0)

    def start(self, x0: float, lo: float = -math.inf, hi: float = math.inf) -> None:
        """Restart from ``x0`` with the iterate clipped to ``[lo, hi]``."""
        self.x = float(x0)
        self.xbar = float(x0)
        self.lo = float(lo)
        self.hi = float(hi)
        self.t = 0
        self.n_accepted = 0.0

    def update(self, accepted: Any) -> float:
        """One step with acceptance ``accepted`` (bool or probability); the new iterate."""
        a = float(accepted)
        gamma = self.gain / (1.0 + self.t / self.t0) ** self.kappa
        x = self.x + gamma * (a - self.target)
        x = min(max(x, self.lo), self.hi)
        self.t += 1
        self.n_accepted += a
        w = self.t ** (-self.avg_kappa)
        self.xbar = w * x + (1.0 - w) * self.xbar
        self.x = x
        return x


class _TunedScalar(ABC):
    """Mixin for a :class:`~pymc_subsample.proposals.Proposal` that tunes one positive
    scalar ``s`` (a scale, a step size, ``sqrt(1 - rho)``) on the log scale.

    The proposal's ``_adapter`` (a :class:`_RobbinsMonro`) runs on ``log s``; every
    value it produces goes to the class's :meth:`_set_tuned`, which stores ``s`` and
    whatever depends on it. While tuning, ``s = exp(x_t)`` (if ``adapt``); at the end of
    tuning ``s = exp(xbar_t)`` (if ``adapt`` and at least one tuning step was seen).
    The mixin supplies the ``_tune`` and ``_finish_tuning`` hooks of the base class;
    a class that adapts more than the scalar calls :meth:`_tune_scalar` and
    :meth:`_freeze_scalar` from its own hooks. List it before ``Proposal`` among the
    bases (``class P(_TunedScalar, Proposal)``), so that its hooks come first.
    """

    @abstractmethod
    def _set_tuned(self, value: float) -> None:
        """Store the tuned scalar ``value`` and what depends on it."""

    def _start_tuned(self, value: float, lo: float, hi: float) -> None:
        """Set the scalar to ``value`` and restart the recursion at ``log value``,
        clipped to ``[lo, hi]`` (bounds on the log scale)."""
        self._adapter.start(math.log(value), lo, hi)
        self._set_tuned(value)

    def _tune_scalar(self, accepted: Any) -> None:
        """One Robbins-Monro step on ``log s`` (when ``adapt``)."""
        if self.adapt:
            self._set_tuned(math.exp(self._adapter.update(accepted)))

    def _freeze_scalar(self) -> None:
        """Fix ``s`` at the exponential of the averaged iterate."""
        if self.adapt and self._adapter.t > 0:
            self._set_tuned(math.exp(self._adapter.xbar))

    def _tune(self, accepted, q) -> None:
        self._tune_scalar(accepted)

    def _finish_tuning(self) -> None:
        self._freeze_scalar()


def shrunk_covariance(window: RunningMoments, min_n: int):
    """The covariance of a window of tuning states (a vector
    :class:`~pymc_subsample.kernels.variance.streaming.RunningMoments`), shrunk towards its
    diagonal (``n / (n + 5)``, as Stan regularises its metric), or None with fewer than
    ``min_n`` states or a dimension that never moved."""
    if window.n < min_n:
        return None
    S = window.m2 / (window.n - 1)
    diag = np.diag(S).copy()
    if not np.all(np.isfinite(diag)) or np.any(diag <= 0.0):
        return None
    S = (window.n / (window.n + 5.0)) * 0.5 * (S + S.T)
    S[np.diag_indices_from(S)] = diag + 1e-3 * (5.0 / (window.n + 5.0)) * diag
    return S
