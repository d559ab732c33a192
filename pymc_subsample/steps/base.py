"""The PyMC side shared by all subsampling step methods.

A step method here is a thin ``ArrayStepShared`` subclass: it owns a
:class:`~pymc_subsample.engine.LikelihoodEngine` (data rows -> log-likelihood), a proposal
from :mod:`pymc_subsample.proposals`, and calls a pure acceptance kernel from
:mod:`pymc_subsample.kernels` once per step. This module holds what the three steps have
in common: variable validation, the engine, the proposal and its tuning, per-chain state
and randomness (PyMC 5 ``set_rng`` and PyMC 6 ``setup_chain``), and the sample stats.
"""

from __future__ import annotations

import math
import numbers
from abc import abstractmethod
import warnings

import numpy as np

import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.util import get_random_generator, get_value_vars_from_user_vars

from ..engine import LikelihoodEngine
from ..kernels.rows import RowSampler
from ..proposals import Langevin, as_proposal

__all__ = ["SubsampleStep", "GrowingBatchStep", "check_batch_size"]

BASE_STATS = {
    "accepted": (bool, []),
    "data_used": (np.int64, []),
    "n_batches": (np.int64, []),
    "scaling": (np.float64, []),
}


def check_batch_size(value, name: str, n_rows: int, *, allow_none: bool = False):
    """Validate a batch-size argument: a positive integer, capped at the ``N`` rows.

    A batch larger than the data means "all rows" and is capped at ``N``; zero, negative
    and non-integer values raise with a message naming the argument.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer number of rows, got {value!r}.")
    if value < 1:
        raise ValueError(
            f"{name}={value} is out of range: it must be a positive number of rows "
            f"(at most the N={n_rows} rows of the data)."
        )
    return min(int(value), n_rows)


class SubsampleStep(ArrayStepShared):
    """Base class of the subsampling Metropolis-Hastings step methods.

    Subclasses implement :meth:`_decide` (one accept/reject decision from a few data
    rows) and declare their extra sample stats in ``stats_dtypes_shapes``.

    Parameters
    ----------
    vars : list of variables, optional
        The continuous variables this step samples (default: all continuous free
        variables of the model).
    proposal : str or object, optional
        A proposal name (``"random_walk"``, ``"langevin"``, ...) or an object with
        ``draw(q, rng) -> (q_new, log_ratio)``.
    scaling : float or array, optional
        Standard deviation of the random-walk proposal in the step's unconstrained space
        (scalar or one per dimension). ``None`` picks a start from the curvature of the
        log posterior at the initial point and tunes it during tuning.
    tune : bool, default True
        Adapt the proposal during PyMC's tuning phase.
    model : pymc.Model, optional
    """

    name = "subsample"
    default_blocked = True
    stats_dtypes_shapes = dict(BASE_STATS)
    default_proposal = "random_walk"
    loglik_weight = 1.0  # 1 / temperature for tempered targets (used by default_scaling)
    #: cap of the default random walk's tuned scale, as a multiple of its start (the
    #: approximate tests accept large moves too often: tuning would inflate their bias)
    max_scale_factor = math.inf

    def __init__(
        self,
        vars=None,
        *,
        proposal=None,
        scaling=None,
        tune=True,
        model=None,
        blocked=True,
        rng=None,
        initial_point=None,
        proposal_kwargs=None,
    ):
        model = pm.modelcontext(model)
        if initial_point is None:
            initial_point = model.initial_point()
        if vars is None:
            vars = model.continuous_value_vars
            if not vars:
                raise ValueError(
                    f"{type(self).__name__}: the model has no continuous free variables to sample."
                )
        vars = get_value_vars_from_user_vars(vars, model)
        self._check_continuous(vars, model)
        shared = make_shared_replacements(initial_point, vars, model)
        self.engine = LikelihoodEngine(model, vars, shared)
        self.n_rows = self.engine.n_rows
        self.ndim = self.engine.ndim
        self.adapt = bool(tune)
        self.tune = bool(tune)
        if scaling is not None:
            scaling = self._check_scaling(scaling)
        self.user_scaling = scaling
        proposal_kwargs = dict(proposal_kwargs or {})
        if proposal is None and self.default_proposal == "random_walk":
            proposal_kwargs.setdefault("max_scale_factor", self.max_scale_factor)
        self.proposal = as_proposal(
            proposal if proposal is not None else self.default_proposal, **proposal_kwargs
        )
        self._setup_proposal(scaling)
        super().__init__(vars, shared, blocked=blocked, rng=rng)
        self._reset_chain()

    # ------------------------------------------------------------------ validation
    @staticmethod
    def _check_continuous(vars, model):
        bad = [v for v in vars if v.dtype in pm.discrete_types]
        if bad:
            names = ", ".join(f"'{model.values_to_rvs[v].name}'" for v in bad)
            raise ValueError(
                f"Discrete variable(s) {names} cannot be sampled by a continuous subsampling "
                "step. Leave them out of vars= and let PyMC assign them a discrete step "
                "(e.g. pm.BinaryGibbsMetropolis or pm.CategoricalGibbsMetropolis)."
            )

    def _check_scaling(self, scaling):
        arr = np.asarray(scaling, dtype=np.float64)
        if arr.ndim > 1 or (arr.ndim == 1 and arr.size != self.ndim):
            raise ValueError(
                f"scaling must be a scalar or have one value per dimension of the step's "
                f"unconstrained space ({self.ndim}), got shape {arr.shape}."
            )
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"scaling must be positive and finite, got {scaling!r}.")
        return arr if arr.ndim else float(arr)

    # ------------------------------------------------------------------ set-up
    def default_scaling(self, n_rows_probe: int = 2000):
        """Start value of the random-walk scaling: ``2.38 / sqrt(d)`` times the posterior sd
        from the curvature of the log posterior at the initial point.

        The Hessian of the log-likelihood is estimated on a random subset of at most
        ``n_rows_probe`` rows (fixed seed: a set-up computation, not sampling) and scaled by
        ``N / n``. Dimensions where the estimate is not concave fall back to 0.1.
        """
        eng = self.engine
        q0 = eng.initial_q()
        n = min(eng.n_rows, n_rows_probe)
        rows = np.sort(np.random.default_rng(0).choice(eng.n_rows, size=n, replace=False))
        try:
            _, _, h_ll = eng.loglik_hessian(q0, rows)
            _, _, h_pr = eng.prior_hessian(q0)
            diag = -(np.diag(h_pr) + np.diag(h_ll) * (eng.n_rows / n) * self.loglik_weight)
        except Exception:  # pragma: no cover - defensive: fall back to a fixed start
            diag = np.full(eng.ndim, np.nan)
        sd = np.where(np.isfinite(diag) & (diag > 0), 1.0 / np.sqrt(np.abs(diag)), 0.1)
        return 2.38 / np.sqrt(eng.ndim) * sd

    def _setup_proposal(self, scaling):
        if scaling is None:
            scaling = self.default_scaling()
            if isinstance(self.proposal, Langevin):
                # Langevin takes a scalar step size h: from the smallest posterior sd
                sd = scaling * np.sqrt(self.ndim) / 2.38
                scaling = float(np.min(sd) ** 2 * 1.65**2 / self.ndim ** (1 / 3))
        self.proposal.setup(
            self.ndim, scaling=scaling, grad_fn=self._minibatch_grad, n_total=self.n_rows
        )

    def _minibatch_grad(self, q, rows):
        """Unbiased estimate of the log-posterior gradient from ``rows`` (Langevin proposals)."""
        _, g_prior = self.engine.prior_and_grad(q)
        _, g_ll = self.engine.loglik_sum_grad(q, rows)
        return g_prior + (self.n_rows / len(rows)) * g_ll

    # ------------------------------------------------------------------ per-chain state
    def _reset_chain(self):
        """Reset everything a chain changes (proposal tuning, warnings issued)."""
        if hasattr(self.proposal, "reset"):
            self.proposal.reset()
        self._warned = set()
        self.tune = self.adapt

    def set_rng(self, rng):  # PyMC 5: once per chain
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    def setup_chain(self, rng, tune, draws):  # PyMC 6: once per chain
        self.rng = get_random_generator(rng, copy=False)
        self._reset_chain()

    def reset_tuning(self):
        self.tune = self.adapt

    def stop_tuning(self):
        self.tune = False
        if hasattr(self.proposal, "stop_tuning"):
            self.proposal.stop_tuning()

    def warn_once(self, key, message):
        """Emit a sampler warning at most once per chain."""
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(message, UserWarning, stacklevel=2)

    @staticmethod
    def competence(var, has_grad):
        # Never chosen automatically: users opt in with step=...
        return Competence.INCOMPATIBLE

    # ------------------------------------------------------------------ the step
    def astep(self, q0: RaveledVars):
        q = q0.data
        q_prop, log_qratio = self.proposal.draw(q, self.rng)
        q_prop = np.asarray(q_prop, dtype=np.float64)
        log_qratio = float(log_qratio)
        stats = {"data_used": 0, "n_batches": 0}
        if not np.all(np.isfinite(q_prop)) or np.isnan(log_qratio) or log_qratio == -np.inf:
            accepted = False
        else:
            prior_q = self.engine.prior(q)
            prior_p = self.engine.prior(q_prop)
            log_prior_ratio = prior_p - prior_q
            if np.isnan(log_prior_ratio) or prior_p == -np.inf:
                accepted = False
            else:
                accepted, extra = self._decide(q, q_prop, log_prior_ratio, log_qratio)
                stats.update(extra)
        if self.tune and self.adapt and hasattr(self.proposal, "tune"):
            self.proposal.tune(bool(accepted), q=q_prop if accepted else q)
        stats["accepted"] = bool(accepted)
        stats["scaling"] = float(getattr(self.proposal, "scaling", np.nan))
        q_new = q_prop if accepted else q
        return RaveledVars(q_new, q0.point_map_info), [stats]

    @abstractmethod
    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        """One accept/reject decision. Returns ``(accepted, stats)``."""

    def loglik_diff_fn(self, q, q_prop):
        """``rows -> l_i`` for the kernels: both points evaluated in one engine call."""
        eng = self.engine

        def loglik_diff(rows):
            return eng.loglik_diff(q, q_prop, rows)

        return loglik_diff


class GrowingBatchStep(SubsampleStep):
    """Base of the steps that decide on a minibatch grown until a test is confident
    (AustereMH, BarkerMinibatch): validated ``batch_size`` / ``batch_increment`` and a
    without-replacement :class:`~pymc_subsample.kernels.rows.RowSampler` per chain."""

    def _set_batches(self, batch_size, batch_increment):
        """Validate and store the batch sizes (``batch_increment=None``: same as
        ``batch_size``, resolved by the kernels); call after ``SubsampleStep.__init__``."""
        self.batch_size = check_batch_size(batch_size, "batch_size", self.n_rows)
        self.batch_increment = check_batch_size(
            batch_increment, "batch_increment", self.n_rows, allow_none=True
        )

    def _reset_chain(self):
        super()._reset_chain()
        self._sampler = RowSampler(self.n_rows, self.rng)
