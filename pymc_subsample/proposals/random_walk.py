"""Gaussian random walks: plain or adaptive (:class:`RandomWalk`), preconditioned by a
fixed covariance (:class:`PreconditionedRandomWalk`), and reversible with respect to a
first-order Taylor approximation of the target (:class:`ReversibleRandomWalk`)."""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy import linalg as sla

from ..kernels._validation import (
    InvalidParameterError,
    check_int,
    check_positive_int,
    check_real,
)
from ..kernels.variance.streaming import RunningMoments
from .adaptation import _TunedScalar
from .base import _RW_OPTIMAL, Proposal, _CovFactor
from .validation import _positive_scalar, _scale_vector, _start_value


class RandomWalk(_TunedScalar, Proposal):
    """Gaussian random-walk proposal, optionally with adaptive covariance.

    ``q' = q + s * eps`` with ``eps ~ N(0, I)`` and ``s`` a scalar or per-dimension
    standard deviation in the unconstrained space; with ``adapt_covariance=True``, once
    enough tuning draws are available, ``q' = q + c (2.38 / sqrt(d)) L eps`` with
    ``L L^T`` an estimate of the posterior covariance (adaptive Metropolis: Haario,
    Saksman & Tamminen 2001, "An adaptive Metropolis algorithm"; the ``2.38^2 / d``
    factor is the optimal scaling of Roberts, Gelman & Gilks 1997, "Weak convergence and
    optimal scaling of random walk Metropolis algorithms"). Symmetric: ``log_ratio = 0``.
    This is the proposal used in the experiments of Korattikara, Chen & Welling (2014),
    "Austerity in MCMC land: cutting the Metropolis-Hastings budget", and Seita et al.
    (2017), "An efficient minibatch acceptance test for Metropolis-Hastings".

    Parameters
    ----------
    scaling : float or array_like, optional
        Starting proposal standard deviation (scalar or one per dimension). When None,
        the ``scaling`` given to :meth:`setup` by the step is used (scalar or
        per-dimension standard deviation, e.g. ``2.38 / sqrt(d)`` times the square root
        of the inverse-Hessian diagonal), and without that
        ``0.1 * 2.38 / sqrt(ndim)`` in every dimension.
    adapt : bool, default True
        Tune a scalar multiplier ``c`` of the standard deviations during tuning by the
        Robbins-Monro scheme of :mod:`pymc_subsample.proposals.adaptation`, towards
        ``target_accept``. ``c`` starts at 1. The per-dimension *ratios* of ``scaling``
        are kept.
    adapt_covariance : bool, default False
        Also estimate the posterior covariance from the tuning states ``q`` passed to
        :meth:`tune` (Welford's online algorithm). Once ``cov_start`` states have been
        seen the proposal switches to ``c (2.38/sqrt(d)) L eps`` (``c`` restarts at 1),
        the estimator restarts (discarding the transient of the first window) and the
        factor is re-estimated every ``cov_update_interval`` tuning steps once the new
        window holds ``cov_start`` states, and once more at :meth:`stop_tuning`.
        Estimates are regularised by shrinking the off-diagonal part by
        ``n / (n + 5)`` plus a ``1e-10`` relative ridge; dimensions that never moved
        keep the current proposal variance. If tuning is shorter than ``cov_start``
        the proposal stays diagonal.
    target_accept : float, default 0.234
        Acceptance rate aimed at while tuning (Roberts, Gelman & Gilks 1997, "Weak
        convergence and optimal scaling of random walk Metropolis algorithms").
    cov_start : int, optional
        Number of tuning states before the covariance is used;
        default ``max(2 * ndim, 100)``.
    cov_update_interval : int, default 50
        Tuning steps between re-estimates of the covariance factor.
    adapt_gain, adapt_t0, adapt_kappa : float
        Robbins-Monro gain ``gamma_t = adapt_gain / (1 + t / adapt_t0) ** adapt_kappa``.
    max_scale_factor : float, default inf
        Tuning may not raise the scale above this multiple of its start. The approximate
        tests accept large moves too often, so an unbounded acceptance-rate tuner drives
        their scale (and their bias) up; the steps cap it.

    Notes
    -----
    When the step gives :meth:`setup` a ``cov`` (AustereMH and BarkerMinibatch with
    control variates: the Laplace approximation at the centre) and no scale was given,
    the proposal starts in the covariance form with it, ``q + c (2.38/sqrt(d)) L eps``;
    with ``adapt_covariance=True`` the estimate from the chain's draws then replaces it
    (Haario et al. 2001, "An adaptive Metropolis algorithm"), for posteriors the Laplace
    fit describes poorly.
    ``scaling`` reports the mean over dimensions of the marginal proposal standard
    deviation (``c * mean(s)`` for the diagonal form, ``mean(sqrt(diag(Cprop)))``
    with ``Cprop`` the proposal covariance for the adaptive form). ``setup``'s
    ``grad_fn``, ``n_total`` and ``mode`` are ignored.
    """


    def __init__(self, scaling: Any = None, *, adapt: bool = True, adapt_covariance: bool = False,
                 target_accept: float = 0.234, cov_start: int | None = None,
                 cov_update_interval: int = 50, adapt_gain: float = 1.0, adapt_t0: float = 10.0,
                 adapt_kappa: float = 0.6, max_scale_factor: float = math.inf):
        super().__init__(adapt=adapt, target_accept=target_accept, adapt_gain=adapt_gain,
                         adapt_t0=adapt_t0, adapt_kappa=adapt_kappa)
        check_real("max_scale_factor", max_scale_factor, 1.0, math.inf, closed="both")
        self._log_max_up = min(math.log(max_scale_factor), 40.0)
        self._user_scaling = None if scaling is None else _scale_vector(scaling, None, "scaling")
        self.adapt_covariance = bool(adapt_covariance)
        self._cov_start_arg = None if cov_start is None else check_int("cov_start", cov_start, 2)
        self.cov_update_interval = check_positive_int("cov_update_interval", cov_update_interval)
        self._warned_no_q = False

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        if self._user_scaling is not None:
            base = self._user_scaling
        elif scaling is not None:
            base = scaling
        else:
            base = 0.1 * _RW_OPTIMAL / math.sqrt(ndim)
        self._base_sd = _scale_vector(base, ndim, "scaling")
        self.cov_start = self._cov_start_arg if self._cov_start_arg is not None else max(2 * ndim, 100)
        # a covariance from the step (the Laplace approximation at the control variates'
        # centre) and no scale from anyone: start in the covariance form with it
        self._cov_L0 = None
        if cov is not None and self._user_scaling is None and scaling is None:
            f = _CovFactor(cov, ndim, "cov")
            self._cov_L0 = np.diag(f.sd) if f.diagonal else f.L

    _state_attrs = ("_mult", "_sd", "_cov_L", "_L_scaled", "_window", "_warned_no_q")

    def _reset_state(self):
        self._restart_multiplier()
        self._sd = self._base_sd.copy()
        # adaptive covariance
        self._cov_L = self._cov_L0  # Cholesky factor of the covariance (None: diagonal mode)
        self._L_scaled = None
        self._window = RunningMoments(self.ndim) if self.adapt_covariance else None
        self._refresh_scaled()

    def _restart_multiplier(self):
        """``c = 1``; Robbins-Monro on ``log c`` within ``[-40, log max_scale_factor]``."""
        self._start_tuned(1.0, -40.0, self._log_max_up)

    def _set_tuned(self, value):
        # the derived scales are refreshed once per hook, after the covariance update
        self._mult = value

    # -- draw ------------------------------------------------------------------------
    def draw(self, q, rng):
        """Gaussian random-walk draw; ``log_ratio`` is 0."""
        q = self._check_q(q)
        eps = rng.standard_normal(self.ndim)
        if self._L_scaled is None:
            return q + self._sd * eps, 0.0
        return q + self._L_scaled @ eps, 0.0

    @property
    def scaling(self) -> float:
        """Mean marginal proposal standard deviation (see Notes)."""
        self._require_setup()
        return self._scaling

    @property
    def proposal_cov(self) -> np.ndarray:
        """Current proposal covariance matrix (``d x d``)."""
        self._require_setup()
        if self._L_scaled is None:
            return np.diag(self._sd**2)
        return self._L_scaled @ self._L_scaled.T

    # -- tuning ----------------------------------------------------------------------
    def _refresh_scaled(self):
        if self._cov_L is None:
            self._sd = self._mult * self._base_sd
            self._scaling = float(np.mean(self._sd))
        else:
            self._L_scaled = (self._mult * _RW_OPTIMAL / math.sqrt(self.ndim)) * self._cov_L
            marginal = np.sqrt(np.einsum("ij,ij->i", self._L_scaled, self._L_scaled))
            self._scaling = float(np.mean(marginal))

    def _welford_add(self, q):
        q = np.asarray(q, dtype=np.float64).reshape(-1)
        if q.shape != (self.ndim,):
            raise InvalidParameterError(
                f"tune(q=...) needs a vector of length {self.ndim}, got shape {q.shape}.")
        self._window.add(q)

    def _estimate_factor(self):
        """Cholesky factor of the regularised covariance of the current window, or None."""
        n = self._window.n
        d = self.ndim
        S = self._window.m2 / (n - 1)
        S = 0.5 * (S + S.T)
        diag = np.diag(S).copy()
        cur_sd = np.sqrt(np.diag(self.proposal_cov))
        fallback = (cur_sd * math.sqrt(d) / _RW_OPTIMAL) ** 2
        bad = ~np.isfinite(diag) | (diag <= 1e-10 * fallback)
        if np.all(bad):
            return None
        if np.any(bad):
            S[bad, :] = 0.0
            S[:, bad] = 0.0
            diag[bad] = fallback[bad]
        shrink = n / (n + 5.0)
        S = shrink * S
        S[np.diag_indices(d)] = diag * (1.0 + 1e-10) + 1e-10 * float(np.mean(diag))
        try:
            return sla.cholesky(S, lower=True)
        except (np.linalg.LinAlgError, ValueError):
            return None

    def _tune(self, accepted, q):
        self._tune_scalar(accepted)
        if self.adapt_covariance:
            if q is None:
                if not self._warned_no_q:
                    warnings.warn(
                        "RandomWalk(adapt_covariance=True).tune() was called without q; the "
                        "covariance is only estimated from the states passed as tune(accepted, q=q).",
                        RuntimeWarning, stacklevel=2,
                    )
                    self._warned_no_q = True
            else:
                self._update_covariance(q)
        self._refresh_scaled()

    def _update_covariance(self, q):
        """Add ``q`` to the window; re-estimate the factor when it is due."""
        self._welford_add(q)
        n = self._window.n
        if n >= self.cov_start and (n - self.cov_start) % self.cov_update_interval == 0:
            L = self._estimate_factor()
            if L is not None:
                first = self._cov_L is None
                self._cov_L = L
                if first:
                    # switch to the covariance form: restart the scale and the window
                    if self.adapt:
                        self._restart_multiplier()
                    self._mult = 1.0
                    self._window = RunningMoments(self.ndim)

    def _finish_tuning(self):
        self._freeze_scalar()
        if self.adapt_covariance and self._cov_L is not None and self._window.n >= self.cov_start:
            L = self._estimate_factor()
            if L is not None:
                self._cov_L = L
        self._refresh_scaled()


class PreconditionedRandomWalk(_TunedScalar, Proposal):
    """Random walk preconditioned by a fixed covariance (Cornish et al. 2019, "Scalable
    Metropolis-Hastings for exact Bayesian inference with large datasets", eq. 16).

    ``theta' = theta + (l / sqrt(d)) L eps``, ``eps ~ N(0, I)``, ``L L^T = cov`` with
    ``cov`` given to :meth:`setup` (for ScalableMH the inverse Hessian of ``U`` at
    ``theta_hat``, so the proposal scales like ``N^(-1/2)`` automatically). Symmetric:
    ``log_ratio = 0``.

    Parameters
    ----------
    scaling : float, optional
        Starting ``l``. When None, the scalar ``scaling`` given to :meth:`setup`, else
        ``2.38`` (Roberts, Gelman & Gilks 1997, "Weak convergence and optimal scaling of
        random walk Metropolis algorithms").
    adapt : bool, default True
        Tune ``log l`` by the Robbins-Monro scheme of
        :mod:`pymc_subsample.proposals.adaptation`.
    target_accept : float, default 0.234
    adapt_gain, adapt_t0, adapt_kappa : float
        Robbins-Monro gain parameters.

    Notes
    -----
    ``scaling`` reports ``l``. ``setup`` requires ``cov`` (2-D matrix, or 1-D variances).
    """


    def __init__(self, scaling: float | None = None, *, adapt: bool = True,
                 target_accept: float = 0.234, adapt_gain: float = 1.0, adapt_t0: float = 10.0,
                 adapt_kappa: float = 0.6):
        super().__init__(adapt=adapt, target_accept=target_accept, adapt_gain=adapt_gain,
                         adapt_t0=adapt_t0, adapt_kappa=adapt_kappa)
        self._user_l = None if scaling is None else _positive_scalar(scaling, "scaling")

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        if cov is None:
            raise InvalidParameterError(
                "PreconditionedRandomWalk needs setup(..., cov=C) with C the inverse Hessian at "
                "theta_hat (or another covariance); use RandomWalk when none is available."
            )
        self._factor = _CovFactor(cov, ndim, "cov")
        self._l0 = _start_value(self._user_l, scaling, "scaling (PreconditionedRandomWalk l)",
                                _RW_OPTIMAL)

    _state_attrs = ("_l", "_sd_scaled", "_L_scaled")

    def _reset_state(self):
        x0 = math.log(self._l0)
        self._start_tuned(self._l0, x0 - 40.0, x0 + 40.0)

    def _set_tuned(self, l):
        """Set ``l`` and the scaled factor ``(l / sqrt(d)) L``."""
        self._l = l
        c = l / math.sqrt(self.ndim)
        f = self._factor
        if f.diagonal:
            self._sd_scaled = c * f.sd
            self._L_scaled = None
        else:
            self._sd_scaled = None
            self._L_scaled = c * f.L

    @property
    def scaling(self) -> float:
        """``l`` in ``(l / sqrt(d)) L eps``."""
        self._require_setup()
        return self._l

    def draw(self, q, rng):
        """Preconditioned random-walk draw; ``log_ratio`` is 0."""
        q = self._check_q(q)
        eps = rng.standard_normal(self.ndim)
        if self._L_scaled is None:
            return q + self._sd_scaled * eps, 0.0
        return q + self._L_scaled @ eps, 0.0


class ReversibleRandomWalk(PreconditionedRandomWalk):
    """Preconditioned random walk reversible with respect to the first-order Taylor
    approximation of the target at ``theta_hat``: the "theta_hat-reversible" proposal of
    Cornish et al. (2019), "Scalable Metropolis-Hastings for exact Bayesian inference
    with large datasets", Sec. 3.2, eq. 17, for SMH-1.

    To first order about ``theta_hat`` the target is ``pi_hat_1(theta) ∝ exp(g . theta)``
    with ``g`` the gradient of the log posterior at ``theta_hat`` (for ScalableMH the
    gradient of ``log prior + sum_i lhat_i``, its data-free surrogate). With
    ``c = l / sqrt(d)`` and ``L L' = C`` (``cov``):

        theta' = theta + (c^2 / 2) C g + c L eps,    eps ~ N(0, I).

    Writing ``delta = theta' - theta`` and ``b = (c^2 / 2) C g``,
    ``pi_hat_1(theta) q(theta' | theta) ∝ exp(g . (theta + theta') / 2 - delta' (c^2 C)^-1
    delta / 2)``, symmetric in ``theta`` and ``theta'``: the proposal is
    ``pi_hat_1``-reversible (eq. 17 takes ``C = I``; any fixed ``C`` keeps this), and

        log q(theta | theta') - log q(theta' | theta) = -g . delta,

    which cancels ``pi_hat_1``'s ratio in SMH's data-free factor: what is left of that
    factor is the prior's departure from its own tangent. The chain is exact for any
    ``g`` (the ratio above is exact); ``g`` only steers it. With ``theta_hat`` at the
    posterior mode (the steps' default centre) ``g = 0`` and this is the preconditioned
    walk of eq. 16; the drift matters for a centre that is only near the mode (given as
    ``center=``, e.g. from stochastic gradient descent, as in the paper).

    Parameters
    ----------
    scaling, adapt, target_accept, adapt_gain, adapt_t0, adapt_kappa
        As in :class:`PreconditionedRandomWalk`.

    Notes
    -----
    ``setup`` requires ``cov``, ``mode`` (``theta_hat``) and ``grad_fn``, the surrogate's
    gradient (``gradient = "surrogate"``); ``g = grad_fn(theta_hat)`` is read once.
    """

    gradient = "surrogate"

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        super()._setup(ndim, scaling=scaling, grad_fn=grad_fn, n_total=n_total, mode=mode,
                       cov=cov)
        if grad_fn is None or mode is None:
            raise InvalidParameterError(
                "ReversibleRandomWalk needs setup(..., grad_fn=, mode=theta_hat): the gradient "
                "of the target's first-order approximation at theta_hat."
            )
        g = np.asarray(grad_fn(np.asarray(mode, dtype=np.float64)), dtype=np.float64)
        if g.shape != (ndim,) or not np.all(np.isfinite(g)):
            raise ValueError(f"grad_fn(theta_hat) must give {ndim} finite values, got {g!r}.")
        self._g = g
        self._cov_g = self._factor.cov_mul(g)  # C g

    _state_attrs = PreconditionedRandomWalk._state_attrs + ("_drift",)

    def _set_tuned(self, l):
        """Set ``l``, the scaled factor and the drift ``(c^2 / 2) C g``."""
        super()._set_tuned(l)
        c = l / math.sqrt(self.ndim)
        self._drift = 0.5 * c * c * self._cov_g

    def draw(self, q, rng):
        """Draw ``theta'``; ``log_ratio = -g . (theta' - theta)``."""
        q_new, _ = super().draw(q, rng)
        q_new = q_new + self._drift
        return q_new, -float(self._g @ (q_new - q))
