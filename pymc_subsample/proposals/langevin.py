"""Langevin proposal from minibatch gradients (:class:`Langevin`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..kernels._validation import InvalidParameterError, check_choice, check_positive_int
from ..kernels.variance.gradient_estimators import ESTIMATORS
from .adaptation import _TunedScalar
from .base import _MALA_OPTIMAL, _RW_OPTIMAL, Proposal, _CovFactor
from .validation import _positive_scalar


class Langevin(_TunedScalar, Proposal):
    """Langevin proposal from minibatch gradients (SGLD proposal + MH test).

    Korattikara, Chen & Welling (2014), "Austerity in MCMC land: cutting the
    Metropolis-Hastings budget", Sec. 6.4; Welling & Teh (2011), "Bayesian learning via
    stochastic gradient Langevin dynamics":

        ``q' = q + (h / 2) M g_S(q) + sqrt(h) L eps``,  ``eps ~ N(0, I)``, ``L L^T = M``

    where ``g_S(q) = grad_fn(q, S)`` is an unbiased estimate of the gradient of the log
    posterior from a minibatch ``S`` of ``m = batch_size`` rows drawn uniformly
    without replacement (``rng.choice(N, m, replace=False)``), and ``M`` a fixed
    preconditioner (identity by default).

    Validity. The minibatch ``S`` is an auxiliary variable drawn independently of the
    state, used for the forward and the reverse move and then discarded. The proposal
    is therefore the mixture ``q(q'|q) = sum_S P(S) q_S(q'|q)`` of the Gaussian kernels
    ``q_S(q'|q) = N(q'; q + (h/2) M g_S(q), h M)``. If the acceptance test makes each
    component kernel reversible with respect to the posterior, i.e. it uses

        ``log_ratio = log q_S(q | q') - log q_S(q' | q)``

    with the *same* ``S`` in both terms, then every component and hence the mixture
    satisfies detailed balance (the argument of Korattikara et al. 2014, Sec. 6.4).
    This ratio is what :meth:`draw` returns; it costs two gradient calls on ``m`` rows.
    With ``r = (sqrt(h) / 2) L^T (g_S(q) + g_S(q')) + eps`` it equals
    ``(|eps|^2 - |r|^2) / 2``.

    Parameters
    ----------
    step_size : float, optional
        Starting step size ``h``. When None: ``1.65^2 / ndim^(1/3)`` if preconditioned
        (optimal MALA scale in the preconditioner's units: Roberts & Rosenthal 1998,
        "Optimal scaling of discrete approximations to Langevin diffusions"), else the
        scalar ``scaling`` given to :meth:`setup` (interpreted as ``h``), else
        ``(0.1 * 2.38 / sqrt(ndim))^2`` (noise of the ``RandomWalk`` fallback).
    batch_size : int, default 100
        Minibatch size ``m``; if ``m >= N`` all rows are used (exact MALA).
    adapt : bool, default True
        Tune ``log h`` by the Robbins-Monro scheme of
        :mod:`pymc_subsample.proposals.adaptation`.
    target_accept : float, default 0.574
        Acceptance target (optimal for MALA: Roberts & Rosenthal 1998, "Optimal scaling
        of discrete approximations to Langevin diffusions").
    precondition : bool, "diag" or array_like, default False
        ``False``: ``M = I``. ``True``: ``M = cov`` from :meth:`setup`. ``"diag"``: the
        diagonal of that ``cov``. An array: ``M`` itself (1-D = diagonal variances).
    adapt_gain, adapt_t0, adapt_kappa : float
        Robbins-Monro gain parameters.
    gradient : {None, "cv", "minibatch", "saga", "is", "is_saga"}, default None
        The gradient estimator, one of those of :class:`pymc_subsample.SGLD`
        (:mod:`pymc_subsample.kernels.variance.gradient_estimators`), built by the step:
        ``"cv"`` Taylor control variates about the centre (Baker, Fearnhead, Fox & Nemeth
        2019, "Control variates for stochastic gradient MCMC"), ``"saga"``, ``"is"``,
        ``"is_saga"`` (El hanchi 2019, "Scaling up MCMC for Bayesian inference using
        adaptive data subsampling", Sec. 4-5) or ``"minibatch"``; the minibatch ``S``
        comes from the estimator (importance-sampled rows for ``"is"``). ``None``: the
        step's plain minibatch gradient on rows drawn here. The estimate is a function of
        ``(q, S)`` for a fixed centre, weights and SAGA store, so the same-``S`` ratio
        below holds for each; SAGA's store is updated after the test, at the state the
        chain keeps (from the gradients the draw already evaluated), which makes the
        proposal adaptive: each transition leaves the target invariant given the store.

    Notes
    -----
    :meth:`setup` requires ``grad_fn(q, rows) -> ndarray`` returning the gradient of
    ``log prior(q) + (N / len(rows)) * sum_{i in rows} log p(x_i | q)`` (with the
    Jacobian of the transform), and ``n_total = N``. ``rows`` is a sorted int64 array.
    If a gradient is not finite, :meth:`draw` returns ``(q.copy(), -inf)`` (a certain
    rejection; the condition is symmetric in ``q, q'`` so reversibility holds).
    ``scaling`` reports the step size ``h``.
    """


    def __init__(self, step_size: float | None = None, *, batch_size: int = 100,
                 adapt: bool = True, target_accept: float = 0.574, precondition: Any = False,
                 adapt_gain: float = 1.0, adapt_t0: float = 10.0, adapt_kappa: float = 0.6,
                 gradient: str | None = None):
        check_choice("gradient", gradient, tuple(sorted(ESTIMATORS)), allow_none=True)
        #: the gradient estimator the step builds for this proposal (None: the step's
        #: plain minibatch gradient)
        self.estimator_name = gradient
        super().__init__(adapt=adapt, target_accept=target_accept, adapt_gain=adapt_gain,
                         adapt_t0=adapt_t0, adapt_kappa=adapt_kappa)
        self._user_h = None if step_size is None else _positive_scalar(step_size, "step_size")
        self.batch_size = check_positive_int("batch_size", batch_size)
        if isinstance(precondition, str):
            check_choice("precondition", precondition, ("diag",),
                         what="False, True, 'diag' or an array")
        elif not isinstance(precondition, (bool, np.bool_)):
            precondition = np.array(precondition, dtype=float)
        self.precondition = precondition

    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov):
        if grad_fn is None or not callable(grad_fn):
            raise InvalidParameterError(
                "Langevin needs setup(..., grad_fn=f, n_total=N) with f(q, rows) returning the "
                "minibatch gradient of the log posterior; use a step method that provides "
                "gradients or another proposal (e.g. 'random_walk')."
            )
        check_positive_int("n_total", n_total,
                           what="the number of rows N >= 1 (Langevin needs setup(..., n_total=N))")
        if self.estimator_name is not None and not hasattr(grad_fn, "draw_rows"):
            raise InvalidParameterError(
                f"Langevin(gradient={self.estimator_name!r}) needs a step that builds gradient "
                "estimators (AustereMH, BarkerMinibatch, ScalableMH); this grad_fn has no "
                "draw_rows. Use gradient=None."
            )
        self._grad_fn = grad_fn
        self.n_total = int(n_total)
        self._m = min(self.batch_size, self.n_total)
        self._all_rows = np.arange(self.n_total, dtype=np.int64) if self._m == self.n_total else None
        self._pre = self._preconditioner(ndim, cov)
        self._h0 = self._start_step(ndim, scaling)

    def scaling_from_sd(self, sd):
        """A scalar step size ``h`` from the smallest posterior sd: ``h = 1.65^2
        sd_min^2 / d^(1/3)``, the optimal MALA scaling of Roberts & Rosenthal ("Optimal
        scaling of discrete approximations to Langevin diffusions", 1998)."""
        sd = np.asarray(sd, dtype=np.float64)
        return float(np.min(sd) ** 2 * 1.65**2 / sd.size ** (1 / 3))

    def _preconditioner(self, ndim, cov):
        """The factor of ``M`` (None for the identity)."""
        pre = self.precondition
        if isinstance(pre, np.ndarray):
            return _CovFactor(pre, ndim, "precondition")
        if isinstance(pre, str) or bool(pre):
            if cov is None:
                raise InvalidParameterError(
                    "Langevin(precondition=True/'diag') needs setup(..., cov=...); the step did "
                    "not provide one. Pass the preconditioner explicitly, e.g. "
                    "Langevin(precondition=variances_or_matrix), or use precondition=False."
                )
            c = np.asarray(cov, dtype=float)
            if isinstance(pre, str) and c.ndim == 2:
                c = np.diag(c).copy()
            return _CovFactor(c, ndim, "cov")
        return None

    def _start_step(self, ndim, scaling):
        """The starting ``h`` (see the ``step_size`` parameter)."""
        if self._user_h is not None:
            return self._user_h
        if self._pre is not None:
            return _MALA_OPTIMAL**2 / ndim ** (1.0 / 3.0)
        if scaling is not None and np.ndim(scaling) == 0:
            return _positive_scalar(scaling, "scaling (Langevin step size h)")
        if scaling is not None:
            raise InvalidParameterError(
                "Langevin interprets setup(scaling=...) as the scalar step size h; got an "
                "array. Use precondition=... for per-dimension scales."
            )
        return (0.1 * _RW_OPTIMAL / math.sqrt(ndim)) ** 2

    _state_attrs = ("_h", "_sqrt_h", "_half_h", "_half_sqrt_h")

    def _reset_state(self):
        x0 = math.log(self._h0)
        self._start_tuned(self._h0, x0 - 60.0, x0 + 60.0)

    def _set_tuned(self, h):
        """Set ``h`` and the constants of :meth:`draw` that depend on it."""
        self._h = h
        self._sqrt_h = math.sqrt(h)
        self._half_h = 0.5 * h
        self._half_sqrt_h = 0.5 * self._sqrt_h

    @property
    def step_size(self) -> float:
        """Current step size ``h``."""
        self._require_setup()
        return self._h

    @property
    def scaling(self) -> float:
        """The step size ``h``."""
        return self.step_size

    def _grad(self, q, rows):
        g = np.asarray(self._grad_fn(q, rows), dtype=np.float64)
        if g.shape != self._shape:
            raise ValueError(
                f"grad_fn(q, rows) returned shape {g.shape}; expected ({self.ndim},), the "
                "gradient of the log posterior w.r.t. the raveled unconstrained vector."
            )
        return g

    def draw_rows(self, rng: np.random.Generator) -> np.ndarray:
        """The auxiliary minibatch ``S``: ``batch_size`` sorted rows without replacement
        (or the gradient estimator's rows)."""
        if self.estimator_name is not None:
            return self._grad_fn.draw_rows(rng)
        if self._all_rows is not None:
            return self._all_rows
        rows = rng.choice(self.n_total, self._m, replace=False)
        rows.sort()
        return rows

    def draw(self, q, rng):
        """Langevin draw with the same-minibatch MH log proposal ratio (see class docs)."""
        q = self._check_q(q)
        rows = self.draw_rows(rng)
        g = self._grad(q, rows)
        if not np.all(np.isfinite(g)):
            return q.copy(), -math.inf
        eps = rng.standard_normal(self.ndim)
        pre = self._pre
        if pre is None:
            q_new = q + self._half_h * g + self._sqrt_h * eps
        else:
            q_new = q + self._half_h * pre.cov_mul(g) + self._sqrt_h * pre.mul(eps)
        g_new = self._grad(q_new, rows)
        if not np.all(np.isfinite(g_new)):
            return q.copy(), -math.inf
        gs = g + g_new
        if pre is None:
            r = self._half_sqrt_h * gs + eps
        else:
            r = self._half_sqrt_h * pre.mul_t(gs) + eps
        log_ratio = 0.5 * (float(eps @ eps) - float(r @ r))
        if not math.isfinite(log_ratio):
            return q.copy(), -math.inf
        return q_new, log_ratio
