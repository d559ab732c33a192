"""The :class:`Proposal` base class and the factor of a Gaussian approximation's
covariance that several proposals whiten with."""

from __future__ import annotations

import copy
import math
from abc import ABC, abstractmethod
from typing import Any, Callable

import numpy as np
from scipy import linalg as sla

from ..kernels._validation import InvalidParameterError
from .adaptation import _RobbinsMonro
from .validation import _check_ndim, _check_target

#: optimal random-walk Metropolis scale ``l / sqrt(d)`` (Roberts, Gelman & Gilks 1997,
#: "Weak convergence and optimal scaling of random walk Metropolis algorithms")
_RW_OPTIMAL = 2.38
#: optimal MALA step ``h = 1.65^2 / d^(1/3)`` (Roberts & Rosenthal 1998, "Optimal scaling
#: of discrete approximations to Langevin diffusions")
_MALA_OPTIMAL = 1.65


class _CovFactor:
    """Square-root factor ``L`` (``L L^T = cov``) of a full or diagonal covariance.

    A 0-D or 1-D ``cov`` is taken as (isotropic or per-dimension) variances and
    handled in O(d); a 2-D ``cov`` gets a lower Cholesky factor and its inverse,
    precomputed once so that :meth:`mul` and :meth:`whiten` are single mat-vecs.
    """

    def __init__(self, cov: Any, ndim: int, name: str = "cov"):
        c = np.array(cov, dtype=float)
        self.ndim = ndim
        if c.ndim == 0:
            c = np.full(ndim, float(c))
        if c.ndim == 1:
            if c.shape != (ndim,):
                raise InvalidParameterError(
                    f"{name} given as variances has {c.shape[0]} entries, expected ndim={ndim}."
                )
            if not (np.all(np.isfinite(c)) and np.all(c > 0.0)):
                raise InvalidParameterError(f"{name} variances must be finite and positive.")
            self.diagonal = True
            self.sd = np.sqrt(c)
            self.inv_sd = 1.0 / self.sd
            self.L = None
            self.Linv = None
            self.cov = None
        elif c.ndim == 2:
            self._set_matrix(c, ndim, name)
        else:
            raise InvalidParameterError(
                f"{name} must be a scalar, a 1-D array of variances or a 2-D matrix.")

    def _set_matrix(self, c: np.ndarray, ndim: int, name: str) -> None:
        """Check a full covariance matrix and store its Cholesky factor and inverse."""
        if c.shape != (ndim, ndim):
            raise InvalidParameterError(f"{name} has shape {c.shape}, expected ({ndim}, {ndim}).")
        if not np.all(np.isfinite(c)):
            raise InvalidParameterError(f"{name} contains non-finite entries.")
        scale = float(np.max(np.abs(c))) if c.size else 0.0
        if not np.allclose(c, c.T, rtol=1e-8, atol=1e-10 * scale):
            raise InvalidParameterError(f"{name} must be a symmetric matrix.")
        c = 0.5 * (c + c.T)
        try:
            L = sla.cholesky(c, lower=True)
        except np.linalg.LinAlgError:
            raise InvalidParameterError(
                f"{name} is not positive definite (Cholesky failed). If it is the inverse "
                "Hessian at theta_hat, check that theta_hat is a mode (Hessian of U "
                "positive definite) or regularise it, e.g. add a small multiple of the "
                "identity."
            ) from None
        self.diagonal = False
        self.L = L
        self.cov = c
        self.Linv = sla.solve_triangular(L, np.eye(ndim), lower=True)
        self.sd = np.sqrt(np.einsum("ij,ij->i", L, L))
        self.inv_sd = None

    def mul(self, eps: np.ndarray) -> np.ndarray:
        """``L @ eps``."""
        return self.sd * eps if self.diagonal else self.L @ eps

    def whiten(self, x: np.ndarray) -> np.ndarray:
        """``L^{-1} @ x``."""
        return self.inv_sd * x if self.diagonal else self.Linv @ x

    def mul_t(self, g: np.ndarray) -> np.ndarray:
        """``L^T @ g``."""
        return self.sd * g if self.diagonal else self.L.T @ g

    def cov_mul(self, g: np.ndarray) -> np.ndarray:
        """``cov @ g`` (``= L L^T g``)."""
        return (self.sd * self.sd) * g if self.diagonal else self.cov @ g


class Proposal(ABC):
    """Base class of the built-in proposals.

    Subclasses implement ``_setup`` (read the step's information once), ``_reset_state``
    (re-create all mutable state), ``_tune``/``_finish_tuning`` (a proposal that tunes
    one scalar gets both from :class:`~pymc_subsample.proposals.adaptation._TunedScalar`)
    and :meth:`draw`.

    Lifecycle, as driven by a step method::

        prop.setup(ndim, scaling=..., grad_fn=..., n_total=..., mode=..., cov=...)
        prop.reset()                      # start of every chain
        q_new, log_ratio = prop.draw(q, rng)
        prop.tune(accepted, q=q_now)      # after every tuning step
        prop.stop_tuning()                # end of tuning; later tune() calls are no-ops

    Attributes
    ----------
    tuning : bool
        True between :meth:`reset` and :meth:`stop_tuning` when the proposal adapts.
    ndim : int or None
        Dimension given to :meth:`setup` (None before).
    """

    #: what the proposal needs from the step at :meth:`setup`: ``grad_fn`` is an unbiased
    #: minibatch gradient of the log posterior (``"minibatch"``) or the exact gradient of
    #: the data-free Taylor surrogate ``log prior + sum_i lhat_i`` (``"surrogate"``)
    gradient: str = "minibatch"
    #: ``mode`` is ``theta_hat``, the control variates' centre (``"center"``), or the mean of
    #: the Gaussian (Laplace) approximation there (``"gaussian_mean"``)
    reference_point: str = "center"
    #: what the proposal's tuning is fed after each transition: whether it accepted
    #: (``"accepted"``), or the acceptance probability of the data-free first factor of
    #: the factorised test under order-2 control variates (``"first_factor"``: the
    #: Hamiltonian error on the surrogate, as HMC tunes)
    tune_signal: str = "accepted"
    #: the gradient estimator (:mod:`pymc_subsample.kernels.variance.gradient_estimators`) the step
    #: builds for ``grad_fn`` (None: the plain minibatch gradient); with it, ``batch_size``
    #: rows per estimate
    estimator_name: str | None = None
    batch_size: int | None = None
    #: the attributes that ``_reset_state`` re-creates and tuning changes (besides
    #: ``tuning`` and the step-size adapter): the chain state of :meth:`get_state`
    _state_attrs: tuple[str, ...] = ()

    def __init__(self, *, adapt: bool = True, target_accept: float = 0.234,
                 adapt_gain: float = 1.0, adapt_t0: float = 10.0, adapt_kappa: float = 0.6):
        self.adapt = bool(adapt)
        self.target_accept = _check_target(target_accept)
        self._adapter = _RobbinsMonro(self.target_accept, adapt_gain, adapt_t0, adapt_kappa)
        self.ndim: int | None = None
        self.tuning = False

    # -- hooks called by the steps ------------------------------------------------------
    def setup(self, ndim: int, *, scaling: Any = None, grad_fn: Callable | None = None,
              n_total: int | None = None, mode: Any = None, cov: Any = None) -> "Proposal":
        """Give the proposal what the step knows; then :meth:`reset`.

        Parameters
        ----------
        ndim : int
            Length of the raveled unconstrained vector ``q``.
        scaling : float or array_like, optional
            The step's suggested starting value of this proposal's :attr:`scaling`
            (its meaning is class-specific, see each class). Ignored when the user
            fixed the value in the constructor.
        grad_fn : callable, optional
            ``grad_fn(q, rows) -> ndarray``: unbiased minibatch estimate of the gradient
            of the log posterior (used by :class:`~pymc_subsample.proposals.Langevin`).
        n_total : int, optional
            Number of data rows ``N`` (used by :class:`~pymc_subsample.proposals.Langevin`).
        mode : array_like, optional
            Centre of a Gaussian approximation (used by :class:`~pymc_subsample.proposals.PCN`).
        cov : array_like, optional
            Covariance of a Gaussian approximation, e.g. the inverse Hessian at
            ``theta_hat`` (used by
            :class:`~pymc_subsample.proposals.PreconditionedRandomWalk`,
            :class:`~pymc_subsample.proposals.PCN` and a preconditioned
            :class:`~pymc_subsample.proposals.Langevin`). A 1-D array means variances.

        Returns
        -------
        Proposal
            ``self``.
        """
        ndim = _check_ndim(ndim)
        self._setup(ndim, scaling=scaling, grad_fn=grad_fn, n_total=n_total, mode=mode, cov=cov)
        self.ndim = ndim
        self._shape = (ndim,)
        self.reset()
        return self

    def scaling_from_sd(self, sd: np.ndarray) -> float | None:
        """The scaling to start from when the step gives none, from the marginal sds
        ``sd`` of the Gaussian approximation; None leaves the step's default (most
        proposals read the covariance itself at :meth:`setup`)."""
        return None

    def reset(self) -> None:
        """Return to the state right after :meth:`setup` (called at each chain start).

        Tuned parameters, adaptation counters and estimated covariances are discarded,
        so two chains started from the same state with equally seeded generators
        produce identical draws.
        """
        self._require_setup()
        self.tuning = True
        self._reset_state()

    def get_state(self) -> dict:
        """A copy of the chain state (tuning flag, adaptation counters, tuned sizes and
        covariances), for the step's ``sampling_state``."""
        names = ("tuning", "_adapter", *self._state_attrs)
        return {k: copy.deepcopy(getattr(self, k)) for k in names if hasattr(self, k)}

    def set_state(self, state: dict) -> None:
        """Restore a chain state from :meth:`get_state`."""
        for k, v in state.items():
            setattr(self, k, copy.deepcopy(v))

    def tune(self, accepted: Any, q: np.ndarray | None = None) -> None:
        """Adapt after one tuning step (no-op after :meth:`stop_tuning`).

        Parameters
        ----------
        accepted : bool or float
            Whether the step accepted (or its acceptance probability in [0, 1]).
        q : ndarray, optional
            The chain's state after the step (used by
            ``RandomWalk(adapt_covariance=True)``).
        """
        if not self.tuning:
            return
        self._tune(accepted, q)

    def stop_tuning(self) -> None:
        """Freeze the tuned parameters; later :meth:`tune` calls do nothing."""
        if self.tuning and self.ndim is not None:
            self._finish_tuning()
        self.tuning = False

    @property
    def scaling(self) -> float:
        """Scalar summary of the current proposal size (class-specific, see the class;
        NaN for a proposal that has none)."""
        return math.nan

    @abstractmethod
    def draw(self, q: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, float]:
        """Propose ``q_new`` from ``q``; return ``(q_new, log_ratio)``.

        ``log_ratio = log q(q | q_new) - log q(q_new | q)``.
        """

    # -- internals: what each subclass supplies to the lifecycle above (a proposal
    # -- that does not adapt needs only _setup and draw) --------------------------------
    @abstractmethod
    def _setup(self, ndim, *, scaling, grad_fn, n_total, mode, cov) -> None:
        """Read the step's information once (called by :meth:`setup`)."""

    def _reset_state(self) -> None:
        """Re-create all mutable state (called by :meth:`reset`); none by default."""

    def _tune(self, accepted, q) -> None:
        """Adapt after one tuning step (called by :meth:`tune` while tuning); nothing
        by default."""

    def _finish_tuning(self) -> None:
        """Freeze the tuned parameters (called by :meth:`stop_tuning`); nothing by
        default."""

    def _require_setup(self) -> None:
        if self.ndim is None:
            raise RuntimeError(
                f"{type(self).__name__} is not set up: call setup(ndim, ...) before "
                "reset(), draw() or tune() (the step methods do this for you)."
            )

    def _check_q(self, q: Any) -> np.ndarray:
        if self.ndim is None:
            self._require_setup()
        q = np.asarray(q, dtype=np.float64)
        if q.shape != self._shape:
            raise InvalidParameterError(
                f"{type(self).__name__}.draw expects a 1-D vector of length ndim={self.ndim}, "
                f"got shape {q.shape}."
            )
        return q

    @property
    def tune_acceptance_rate(self) -> float:
        """Mean acceptance over the tuning steps seen since the last reset (nan if none)."""
        t = self._adapter.t
        return self._adapter.n_accepted / t if t else float("nan")

    def __repr__(self) -> str:
        state = "not set up" if self.ndim is None else f"ndim={self.ndim}, scaling={self.scaling:.4g}"
        return f"{type(self).__name__}({state}, tuning={self.tuning})"
