"""The PyMC side shared by all subsampling step methods.

A step method here is a thin ``ArrayStepShared`` subclass: it owns a
:class:`~pymc_subsample.engine.LikelihoodEngine` (data rows -> log-likelihood), a proposal
from :mod:`pymc_subsample.proposals`, and calls a pure acceptance kernel from
:mod:`pymc_subsample.kernels` once per step. This module holds what the three steps have
in common: variable validation, the engine, the proposal and its tuning, per-chain state
and randomness (PyMC 5 ``set_rng`` and PyMC 6 ``setup_chain``), and the sample stats.
"""

from __future__ import annotations

import copy
import math
import numbers
import warnings
import weakref
from abc import abstractmethod
import numpy as np

import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.stats.convergence import SamplerWarning, WarningType
from pymc.util import get_random_generator, get_value_vars_from_user_vars

from ..center import center_at, find_center, parse_point
from ..engine import LikelihoodEngine
from ..kernels.control_variates import (
    ORDERS,
    StoredGradients,
    VarianceCheck,
    importance_weights,
    residuals,
)
from ..kernels.rows import ImportanceSampler, RowSampler
from ..kernels.thinning import AliasTable
from ..engine.predictor import curved_predictor_map
from ..proposals import Langevin, SurrogateHMC, as_proposal

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors

__all__ = ["SubsampleStep", "GrowingBatchStep", "check_batch_size"]

BASE_STATS = {
    # share of the draw's transitions that accepted (0.0 or 1.0 with one transition per
    # draw); float64, as pm.Metropolis declares it, so that the steps compose with it
    "accepted": (np.float64, []),
    "data_used": (np.int64, []),
    "n_batches": (np.int64, []),
    "scaling": (np.float64, []),
    # PyMC's sampler-warning mechanism (as NUTS): logged by pm.sample in the main
    # process, dropped from the returned trace unless keep_warning_stat=True
    "warning": (SamplerWarning, None),
}

#: stats of the steps that decide on growing minibatches with control variates
GROWING_STATS = {
    **BASE_STATS,
    "exact": (bool, []),
    "cv_active": (bool, []),
    # 1.0 / 0.0: the audited decision agreed / disagreed with the exact full-data
    # decision for the same proposal and randomness; NaN: not audited
    "audit": (np.float64, []),
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


#: stats that a draw of several transitions sums (anything numeric else: the largest)
_SUMMED = frozenset({"data_used", "n_batches", "accepted"})


def _summarise(transitions: list[dict]) -> dict:
    """One draw's stats from its transitions' (see ``steps_per_draw``): counts add,
    flags are true if any transition set them, the audit's agreement is the mean over
    the audited transitions (NaN if none), error bounds and variances are the largest
    (NaN where no transition set them)."""
    if len(transitions) == 1:
        return dict(transitions[0])
    out = {}
    for key in {k for t in transitions for k in t}:
        vals = [t[key] for t in transitions if key in t]
        if key in _SUMMED:
            out[key] = sum(vals)
        elif isinstance(vals[0], (bool, np.bool_)):
            out[key] = any(vals)
        else:
            finite = [v for v in vals if v == v]
            if key == "audit":
                out[key] = float(np.mean(finite)) if finite else np.nan
            else:
                out[key] = max(finite) if finite else vals[-1]
    return out


@dataclass_state
class SubsampleStepState(StepMethodState):
    """What a chain of a subsampling step changes, for PyMC's ``sampling_state``: the
    tuning flag, the proposal's tuned state and the step's per-chain attributes
    (``CHAIN_ATTRS``: warnings issued, control-variate checks, a re-centred centre)."""

    tune: bool
    proposal_state: dict
    chain_state: dict


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
    steps_per_draw : int, default 1
        Markov transitions per PyMC draw (each one a proposal and a test; the draw
        keeps the last state). Every transition leaves the target invariant, so their
        composition does too; a value above 1 thins the chain inside the step, which
        pays when one transition costs less than PyMC's bookkeeping of a draw. Sample
        stats then summarise the draw's transitions: ``accepted`` is the share that
        accepted, ``data_used`` and ``n_batches`` are totals, error bounds and
        variances are the largest, flags are true if any transition set them, and
        ``scaling`` is the last.
    compile_kwargs : dict, optional
        Keyword arguments of ``pytensor.function`` for the functions of the sampling loop
        and the data passes (as PyMC's own steps take them), e.g. ``{"mode": ...}``.
    progressbar : bool, optional
        Show a progress bar on the set-up's passes over the data (mode search, sums,
        bounds). Default: for data of 5,000,000 rows or more.
    """

    name = "subsample"
    default_blocked = True
    _state_class = SubsampleStepState
    #: per-chain attributes of :attr:`chain_state` (what ``_reset_chain`` re-creates)
    CHAIN_ATTRS: tuple[str, ...] = ("_warned", "_pending", "_start_pending")
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
        init="laplace",
        steps_per_draw=1,
        compile_kwargs=None,
        progressbar=None,
    ):
        if init not in ("laplace", "model"):
            raise ValueError(f"init must be 'laplace' or 'model', got {init!r}.")
        if (isinstance(steps_per_draw, bool) or not isinstance(steps_per_draw, numbers.Integral)
                or steps_per_draw < 1):
            raise ValueError(
                f"steps_per_draw must be a positive integer (Markov transitions per PyMC "
                f"draw), got {steps_per_draw!r}."
            )
        self.steps_per_draw = int(steps_per_draw)
        self.init = init
        #: mean and Cholesky factor of the Laplace approximation (set by steps with a centre)
        self._laplace_mean = self._laplace_chol = None
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
        self.engine = LikelihoodEngine(model, vars, shared, compile_kwargs=compile_kwargs)
        self.n_rows = self.engine.n_rows
        self.ndim = self.engine.ndim
        self.adapt = bool(tune)
        self.tune = bool(tune)
        if scaling is not None:
            scaling = self._check_scaling(scaling)
        self.user_scaling = scaling
        self._proposal_kwargs = dict(proposal_kwargs or {})
        self.proposal = self._choose_proposal(proposal, scaling)
        with self.engine.showing_progress(progressbar, label=type(self).__name__):
            self._setup_proposal(scaling)
        self._remember_data()
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

    def likelihood_vars_of_other_steps(self) -> list[str]:
        """Names of the variables the likelihood depends on that this step does not sample.

        Control variates and bounds computed once at a centre hold these at their initial
        values; if another step of a ``CompoundStep`` (NUTS, a Gibbs step) moves them, the
        precomputed sums no longer match the likelihood.
        """
        model = self.engine.model
        ll = model.logp(vars=model.observed_RVs, sum=True)
        used = set(ancestors([ll]))
        mine = set(self.engine.vars)
        return [
            model.values_to_rvs[v].name for v in model.value_vars if v not in mine and v in used
        ]

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

    def _choose_proposal(self, proposal, scaling):
        """The proposal object (``default_proposal`` when ``proposal`` is None)."""
        kwargs = self._proposal_kwargs
        if proposal is None and self.default_proposal == "random_walk":
            kwargs.setdefault("max_scale_factor", self.max_scale_factor)
        return as_proposal(proposal if proposal is not None else self.default_proposal, **kwargs)

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

    # ------------------------------------------------------------------ stale data
    #: whether the step keeps sums, bounds or fits computed from the data at construction
    #: (then a later pm.set_data must be refused, not sampled with stale sums)
    keeps_data_sums = True

    def _remember_data(self):
        """Record what the data looked like when the step's sums were computed."""
        if not self.keeps_data_sums:
            return
        self._data_fingerprint = self.engine.data_fingerprint()
        self._data_refs = [weakref.ref(a) for a in self.engine.data_arrays()]

    def _check_data_unchanged(self):
        """Refuse to sample when the data changed (``pm.set_data``) since construction.

        In the process that built the step, any replaced data array counts as a change
        (``pm.set_data`` always installs a new array, even with equal values); in a
        worker that unpickled the step (``mp_ctx="spawn"`` / ``"forkserver"``) identities
        are lost, and the shapes and a digest of 65,536 evenly spread rows are compared.
        """
        if not self.keeps_data_sums:
            return
        refs = getattr(self, "_data_refs", None)
        arrays = self.engine.data_arrays()
        if refs is not None and len(refs) == len(arrays):
            changed = [r.name for r, ref, a in zip(self.engine.rows, refs, arrays)
                       if ref() is not a]
        else:
            now = self.engine.data_fingerprint()
            changed = [old[0] for old, new in zip(self._data_fingerprint, now) if old != new]
        if changed:
            raise ValueError(
                f"{type(self).__name__}: {', '.join(changed)} changed since this step was "
                "built (pm.set_data?). Its control-variate sums, "
                "bounds and Gaussian fit were computed on the old values and would sample the "
                "wrong posterior: build the step again after pm.set_data."
            )

    # ------------------------------------------------------------------ sampling_state
    @property
    def proposal_state(self) -> dict:
        """The proposal's chain state (:meth:`~pymc_subsample.proposals.Proposal.get_state`)."""
        get = getattr(self.proposal, "get_state", None)
        return get() if get is not None else {}

    @proposal_state.setter
    def proposal_state(self, state: dict) -> None:
        if state:
            self.proposal.set_state(state)

    @property
    def chain_state(self) -> dict:
        """The step's per-chain attributes (``CHAIN_ATTRS``), copied."""
        return {k: copy.deepcopy(getattr(self, k)) for k in self.CHAIN_ATTRS if hasattr(self, k)}

    @chain_state.setter
    def chain_state(self, state: dict) -> None:
        for k, v in state.items():
            setattr(self, k, copy.deepcopy(v))

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_data_refs"] = None  # weak references do not pickle; the digest remains
        return state

    # ------------------------------------------------------------------ per-chain state
    def _reset_chain(self):
        """Reset everything a chain changes (proposal tuning, warnings issued)."""
        self._check_data_unchanged()
        if hasattr(self.proposal, "reset"):
            self.proposal.reset()
        self._warned = set()
        self._pending = []
        self.tune = self.adapt
        self._start_pending = True

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

    def warn_once(self, key, message, kind=WarningType.BAD_PARAMS):
        """Issue a sampler warning at most once per chain.

        It travels in the ``warning`` sample stat of the next draw (PyMC's
        :class:`~pymc.stats.convergence.SamplerWarning`, as NUTS reports divergences), so
        ``pm.sample`` logs it in the main process whatever the number of cores.
        """
        if key in self._warned:
            return
        self._warned.add(key)
        self._pending.append(SamplerWarning(kind, f"{type(self).__name__}: {message}", "warn"))

    # ------------------------------------------------------------------ progress bar
    #: progress-bar columns: (sample stat, field, header, format of its running mean)
    PROGRESS_COLUMNS = (
        ("data_used", "pms_rows", "Rows/draw", "{:,.0f}"),
        ("accepted", "pms_accept", "Accept", "{:.2f}"),
    )

    @classmethod
    def _progressbar_config(cls, n_chains=1):
        """PyMC's progress-bar hook: one column per entry of ``PROGRESS_COLUMNS``."""
        from rich.progress import TextColumn
        from rich.table import Column

        columns = [
            TextColumn(f"{{task.fields[{field}]}}", table_column=Column(header, ratio=1))
            for _, field, header, _ in cls.PROGRESS_COLUMNS
        ]
        return columns, {field: ["-"] * n_chains for _, field, _, _ in cls.PROGRESS_COLUMNS}

    @classmethod
    def _make_progressbar_update_functions(cls):
        """PyMC's progress-bar hook: the running means of the columns' stats over the
        draws so far. PyMC passes a draw's stats without its chain, so the means pool the
        chains (which run the same kernel); tuning draws count too."""
        totals = {stat: 0.0 for stat, *_ in cls.PROGRESS_COLUMNS}
        count = [0]

        def update_stats(step_stats):
            count[0] += 1
            out = {}
            for stat, field, _, fmt in cls.PROGRESS_COLUMNS:
                totals[stat] += float(step_stats.get(stat, 0.0))
                out[field] = fmt.format(totals[stat] / count[0])
            return out

        return (update_stats,)

    @staticmethod
    def competence(var, has_grad):
        # Never chosen automatically: users opt in with step=...
        return Competence.INCOMPATIBLE

    # ------------------------------------------------------------------ the step
    def _set_laplace(self, mean, cov):
        """Store the Laplace approximation (mean, Cholesky factor of ``cov``) that the
        warm-up start and the steps' checks draw on."""
        self._laplace_mean, self._laplace_chol = mean, np.linalg.cholesky(cov)

    def astep(self, q0: RaveledVars):
        """One step; with ``init="laplace"`` the first tuning step of a chain first moves
        the chain to a draw of the Laplace approximation at the step's centre (steps
        that have one).

        PyMC's default initial point can lie tens of posterior sd from a tall-data
        posterior, where a proposal tuned to the posterior's scale moves slowly, a pCN
        proposal, like an independence sampler, is rejected wherever the posterior's
        tails are heavier than the Gaussian fit, and ScalableMH's bounds (which grow with
        the distance from the centre) make every test read many rows. Like NUTS's
        jittered initialisation, this changes only where warm-up starts (tuning draws are
        discarded); the kernel is unchanged. Without tuning the chain starts where PyMC
        puts it.
        """
        if self._start_pending:
            self._start_pending = False
            if self.tune and self.init == "laplace" and self._laplace_mean is not None:
                z = self.rng.standard_normal(self.ndim)
                q0 = RaveledVars(self._laplace_mean + self._laplace_chol @ z, q0.point_map_info)
        q = q0.data
        transitions = []
        # the log prior of the current state, reused by the draw's transitions (other
        # steps of a CompoundStep may change the variables it depends on between draws)
        self._prior_now = None
        for _ in range(self.steps_per_draw):
            q, stats = self._transition(q)
            transitions.append(stats)
        stats = _summarise(transitions)
        stats["accepted"] = stats["accepted"] / self.steps_per_draw
        stats["scaling"] = float(getattr(self.proposal, "scaling", np.nan))
        stats["warning"] = self._pending.pop(0) if self._pending else None
        return RaveledVars(q, q0.point_map_info), [stats]

    def _transition(self, q):
        """One Markov transition from ``q``: a proposal and its test. Returns the new
        state and the transition's stats (``accepted`` 0.0 or 1.0)."""
        q_prop, log_qratio = self.proposal.draw(q, self.rng)
        q_prop = np.asarray(q_prop, dtype=np.float64)
        log_qratio = float(log_qratio)
        stats = {"data_used": 0, "n_batches": 0}
        if not np.all(np.isfinite(q_prop)) or np.isnan(log_qratio) or log_qratio == -np.inf:
            accepted = False
        else:
            if self._prior_now is None or self._prior_now[0] is not q:
                self._prior_now = (q, self.engine.prior(q))
            prior_q = self._prior_now[1]
            prior_p = self.engine.prior(q_prop)
            log_prior_ratio = prior_p - prior_q
            if np.isnan(log_prior_ratio) or prior_p == -np.inf:
                accepted = False
            else:
                accepted, extra = self._decide(q, q_prop, log_prior_ratio, log_qratio)
                stats.update(extra)
                if accepted:
                    self._prior_now = (q_prop, prior_p)
        if self.tune and self.adapt and hasattr(self.proposal, "tune"):
            self.proposal.tune(self._tune_signal(accepted), q=q_prop if accepted else q)
        stats["accepted"] = float(bool(accepted))
        return (q_prop if accepted else q), stats

    #: ``(q, log prior at q)`` of the current state, reused within a draw (see astep)
    _prior_now = None

    #: predictor coordinates (:mod:`pymc_subsample.engine.predictor`), when the control
    #: variates live there
    _vmap = None
    proxy = None

    def _tune_signal(self, accepted):
        """What the proposal's tuning sees after a step: whether it accepted, or for
        :class:`~pymc_subsample.proposals.SurrogateHMC` (order-2 control variates) the
        data-free factor's acceptance probability, the Hamiltonian error on the
        surrogate, as HMC tunes."""
        p, self._first_prob = getattr(self, "_first_prob", 0.0), 0.0
        if isinstance(self.proposal, SurrogateHMC) and getattr(self.proxy, "order", 0) == 2:
            return p
        return bool(accepted)

    def coordinates(self, q) -> np.ndarray:
        """Where the control variates live: ``v(q)`` in predictor coordinates, else
        ``q``."""
        return q if self._vmap is None else self._vmap.v(q)

    def _proposal_grad_fn(self):
        """The gradient the proposal declares it needs (``Proposal.gradient``): the data-free
        surrogate's, or an unbiased minibatch estimate of the log posterior's."""
        if getattr(self.proposal, "gradient", "minibatch") == "surrogate":
            return self._surrogate_grad
        return self._minibatch_grad

    def _wants_gaussian_mean(self) -> bool:
        """Whether the proposal's reference point is the Gaussian approximation's mean
        rather than the centre ``theta_hat`` (``Proposal.reference_point``)."""
        return getattr(self.proposal, "reference_point", "center") == "gaussian_mean"

    def _surrogate_grad(self, q):
        """Gradient of the data-free surrogate ``log prior + w sum_i lhat_i`` (the
        target of :class:`~pymc_subsample.proposals.SurrogateHMC`)."""
        _, g_prior = self.engine.prior_and_grad(q)
        w = self.loglik_weight
        if self._vmap is None:
            return g_prior + w * self.proxy.grad(q)
        return g_prior + w * self._vmap.vjp(q, self.proxy.grad(self._vmap.v(q)))

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
    (AustereMH, BarkerMinibatch).

    It holds what both share: validated ``batch_size`` / ``batch_increment``, a
    without-replacement :class:`~pymc_subsample.kernels.rows.RowSampler` per chain, and
    the Taylor control variates of :mod:`pymc_subsample.kernels.control_variates`. With
    control variates (the default) the step finds the posterior mode once
    (:func:`pymc_subsample.center.find_center`), the closed-form proxy difference enters
    the test's data-free part exactly and the minibatch estimates only the residual sum;
    the default proposal is then preconditioned by the Laplace approximation there.
    For a one-parameter GLM whose linear predictor is affine in data-free parameter
    expressions but not in the sampled variables (a non-centred hierarchical model), the
    proxy is taken in those predictor coordinates (:mod:`pymc_subsample.engine.predictor`) and
    the default proposal is :class:`~pymc_subsample.proposals.SurrogateHMC`.

    Subclasses implement :meth:`_run_test` (the acceptance kernel on a row function and a
    data-free log ratio) and :meth:`_exact_decision` (for the audit).
    """

    #: the proposal used when ``proposal=None``, by control-variate order
    DEFAULT_PROPOSALS = {0: "random_walk", 1: "preconditioned", 2: "pcn"}
    #: steps between verdicts of the variance check while tuning
    CV_WINDOW = 100
    CHAIN_ATTRS = SubsampleStep.CHAIN_ATTRS + (
        "cv_active", "_vcheck", "_cv_verdict", "_cv_ratio", "_n_steps", "center", "proxy",
        "_mean_n", "_mean_q", "_rows_tuning", "_first_prob",
    )

    def __init__(
        self,
        vars=None,
        *,
        batch_size,
        batch_increment=None,
        control_variate=None,
        center=None,
        recenter=False,
        audit=0.0,
        sampling="uniform",
        **kwargs,
    ):
        if control_variate is not None and (
            isinstance(control_variate, bool) or control_variate not in ORDERS
        ):
            raise ValueError(
                f"control_variate must be 2 (second-order Taylor control variates), 1 (first "
                f"order), 'saga' (stored per-row gradients), 0 (none: the paper's plain test) "
                f"or None (2 where possible, the default), got {control_variate!r}."
            )
        self._cv_arg = control_variate
        # cv: 0 (none), 1 or 2 (Taylor order) or "saga"; cv_order is truthy iff a centre
        # is used (1 for "saga": its stored gradients start at the centre's)
        self.cv = 2 if control_variate is None else control_variate
        self.cv_order = 1 if self.cv == "saga" else int(self.cv)
        if self.cv_order == 0 and center is not None:
            raise ValueError("center= is the centre of the control variates: it needs "
                             "control_variate=1 or 2 (or 'saga').")
        self._center_arg = center
        self.recenter = bool(recenter)
        if isinstance(audit, bool) or not isinstance(audit, numbers.Real) or not 0 <= audit <= 1:
            raise ValueError(
                f"audit must be the share of steps, in [0, 1], on which the exact full-data "
                f"decision is also taken (e.g. 0.01), got {audit!r}."
            )
        self.audit = float(audit)
        if sampling not in ("uniform", "importance"):
            raise ValueError(f"sampling must be 'uniform' or 'importance', got {sampling!r}.")
        self.sampling = sampling
        super().__init__(vars, **kwargs)
        self._set_batches(batch_size, batch_increment)

    @property
    def keeps_data_sums(self) -> bool:
        """A centre (control variates, stored gradients or importance weights) and the
        Laplace fit come from the data; without them the test reads the live data."""
        return bool(self.cv_order)

    def _set_batches(self, batch_size, batch_increment):
        """Validate and store the batch sizes (``batch_increment=None``: same as
        ``batch_size``, resolved by the kernels)."""
        self.batch_size = check_batch_size(batch_size, "batch_size", self.n_rows)
        self.batch_increment = check_batch_size(
            batch_increment, "batch_increment", self.n_rows, allow_none=True
        )

    # ------------------------------------------------------------------ set-up
    def _choose_proposal(self, proposal, scaling):
        """Decide the control-variate order (the engine now exists), then the proposal:
        by default preconditioned by the Laplace approximation at the centre; a random
        walk when the user gave ``scaling`` (documented as its standard deviation)."""
        others = self.likelihood_vars_of_other_steps()
        if others and self.cv_order:
            names = ", ".join(repr(o) for o in others)
            if self._cv_arg is not None:
                raise ValueError(
                    f"control_variate={self._cv_arg} needs every variable the likelihood "
                    f"depends on in this step's vars=, but {names} is sampled by another step: "
                    "the control variates' sums are computed once at a centre and would go "
                    "stale. Add them to vars=, or pass control_variate=0."
                )
            warnings.warn(
                f"{type(self).__name__}: the likelihood depends on {names}, sampled by another "
                "step, so the Taylor control variates are off (plain differences, which read "
                "more rows per step). Add them to vars= to use control variates.",
                UserWarning, stacklevel=5,
            )
            self.cv, self.cv_order = 0, 0
        self._proposal_is_default = proposal is None and scaling is None
        if proposal is None:
            order = 0 if scaling is not None else self.cv_order
            self.default_proposal = self.DEFAULT_PROPOSALS[order]
        if self.sampling == "importance" and self.cv_order == 0:
            # the importance weights come from per-row gradients at the centre
            self.cv_order = -1  # a centre, but no control variate
        return super()._choose_proposal(proposal, scaling)

    def _setup_proposal(self, scaling):
        self.saga = None
        self.is_table = None
        if self.cv_order == 0:
            self.center = self.proxy = None
            self.engine.compile("ll_diff")  # the per-step function, compiled before forking
            return super()._setup_proposal(scaling)
        eng = self.engine
        if self._center_arg is None:
            self.center = find_center(eng)
            if not self.center.converged:
                self._setup_warning = (
                    "the search for the posterior mode (the control variates' centre) did not "
                    "converge; the control variates may not reduce the variance. Pass center= "
                    "(e.g. from pm.find_MAP) or set recenter=True."
                )
        else:
            self.center = center_at(eng, parse_point(self._center_arg, eng, "center"))
        self.proxy = self.center.proxy(self.cv) if self.cv in (1, 2) else None
        self._vmap = None
        if self.cv in (1, 2) and self.sampling == "uniform":
            # a curved predictor (non-centred hierarchical): control variates in the
            # predictor coordinates, where the rows are an ordinary GLM
            self._vmap = curved_predictor_map(eng, self.center.theta)
            if self._vmap is not None:
                self.proxy = self._vmap.proxy(self._vmap.v(self.center.theta), self.cv)
                if self._proposal_is_default:
                    self.proposal = SurrogateHMC()
        self._center0, self._proxy0 = self.center, self.proxy
        self._attach_proposal(scaling)
        if self.cv == "saga" or self.sampling == "importance":
            self._setup_row_terms()
        if self.cv in (1, 2) and self._vmap is None:
            eng.compile(f"cv{self.cv}")  # the per-step function, compiled before forking

    #: largest memory, in bytes, for SAGA's stored per-row gradients (two copies)
    SAGA_MEMORY = 4 * 2**30

    def _setup_row_terms(self):
        """One pass of per-row gradients at the centre: SAGA's starting store and/or the
        importance weights of El hanchi (2019, Sec. 5.1)."""
        n, d = self.n_rows, self.ndim
        if self.cv == "saga" and 2 * n * d * 8 > self.SAGA_MEMORY:
            raise MemoryError(
                f"control_variate='saga' stores {n:,} x {d} per-row gradients per chain "
                f"({2 * n * d * 8 / 2**30:.1f} GiB with the initial copy), over the "
                f"{self.SAGA_MEMORY / 2**30:.0f} GiB limit: use control_variate=2 (Taylor), "
                "which stores nothing per row."
            )
        eng, c = self.engine, self.center.theta
        rows = np.arange(n)
        _, g = eng.loglik_rows_grad(c, rows, chunk=8192)
        if self.cv == "saga":
            self.saga = StoredGradients(g)
        if self.sampling == "importance":
            z = np.random.default_rng(0).standard_normal(d)  # set-up, not sampling
            _, g_moved = eng.loglik_rows_grad(c + self._laplace_chol @ z, rows, chunk=8192)
            self.is_table = AliasTable(importance_weights(g, g_moved))
            self._is_scale = n * self.is_table.probabilities()  # N p_i, once

    def _attach_proposal(self, scaling):
        """Set the proposal up with the Laplace approximation at the current centre."""
        mean, cov = self.center.laplace(self.loglik_weight)
        self._set_laplace(mean, cov)
        if scaling is None and isinstance(self.proposal, Langevin):
            sd = np.sqrt(np.diag(cov))
            scaling = float(np.min(sd) ** 2 * 1.65**2 / self.ndim ** (1 / 3))
        self.proposal.setup(
            self.ndim, scaling=scaling, grad_fn=self._proposal_grad_fn(), n_total=self.n_rows,
            mode=mean if self._wants_gaussian_mean() else self.center.theta, cov=cov,
        )

    def _reset_chain(self):
        super()._reset_chain()
        if self.is_table is not None:
            self._sampler = ImportanceSampler(self.is_table, self.rng)
        else:
            self._sampler = RowSampler(self.n_rows, self.rng)
        if self.saga is not None:
            self.saga.reset()
        self.cv_active = self.cv != 0
        self._vcheck = VarianceCheck(min_steps=self.CV_WINDOW // 2)
        self._cv_verdict = None
        self._n_steps = 0
        if self.cv_order:  # a re-centred chain must not hand its centre to the next one
            self.center, self.proxy = self._center0, self._proxy0
            self._mean_n, self._mean_q, self._rows_tuning = 0, np.zeros(self.ndim), 0
        msg = getattr(self, "_setup_warning", None)
        if msg:
            self.warn_once("center", msg)

    #: warn when the tuning mean lies more than this many Laplace sds from its mean
    LAPLACE_WARN_SD = 3.0

    def _check_laplace_fit(self):
        """Warn when the chain's mean over tuning is far from the Laplace approximation
        that the default proposal and the control variates are built on (e.g. a funnel of
        a hierarchical model): the draws may then not have mixed, and nothing else would
        say so, since the step's own stats can look normal."""
        if not self.cv_order or self._mean_n < 50:
            return
        rows = self._rows_tuning / self._mean_n
        if self.cv_active and rows > 2 * self.batch_size and rows > 0.1 * self.n_rows:
            self.warn_once(
                "cv_rows",
                f"with control variates the test still read {rows:,.0f} rows per step during "
                f"tuning ({100 * rows / self.n_rows:.0f}% of the data): the Taylor proxy "
                "about the centre leaves large residuals, so the Laplace fit there is poor "
                "(a funnel-shaped hierarchical posterior, for instance) and the chain may not "
                "mix. Check R-hat and ESS. For a hierarchical model whose groups each hold "
                "many rows, write it in the centred form (a ~ Normal(mu, tau), a[g]); "
                "otherwise consider recenter=True or NUTS.",
                kind=WarningType.CONVERGENCE,
            )
        sd = np.sqrt(np.einsum("ij,ij->i", self._laplace_chol, self._laplace_chol))
        z = np.abs(self._mean_q - self._laplace_mean) / sd
        if np.max(z) > self.LAPLACE_WARN_SD:
            self.warn_once(
                "laplace",
                f"the chain's mean over tuning lies {np.max(z):.1f} Laplace sds from the "
                f"Laplace approximation at the centre (coordinate {int(np.argmax(z))} of the "
                "step's unconstrained space): the Gaussian fit that the default proposal and "
                "control variates rely on is poor here (a funnel-shaped hierarchical "
                "posterior, for instance), and the chain may not mix. Check R-hat and ESS. "
                "For a hierarchical model whose groups each hold many rows, write it in the "
                "centred form (a ~ Normal(mu, tau), a[g]), whose joint mode lies in the "
                "posterior's bulk; otherwise consider recenter=True, proposal='random_walk' "
                "with proposal_kwargs={'adapt_covariance': True}, or NUTS.",
                kind=WarningType.CONVERGENCE,
            )

    def stop_tuning(self):
        super().stop_tuning()
        self._check_laplace_fit()
        if self.cv_active and self._cv_verdict is False:
            self.cv_active = False
            self.warn_once(
                "cv_off",
                "the Taylor control variates did not reduce the variance of the per-row terms "
                f"at the end of tuning (residual/plain variance {self._cv_ratio:.3g}); this chain "
                "falls back to plain differences, which read more rows per step. A multimodal "
                "or heavy-tailed likelihood, or a centre far from the posterior, causes this.",
            )
        if self.recenter and self.cv_active and self.proxy is not None and self._mean_n > 0:
            self.center = center_at(self.engine, self._mean_q)
            self.proxy = (self.center.proxy(self.cv) if self._vmap is None
                          else self._vmap.proxy(self._vmap.v(self._mean_q), self.cv))

    # ------------------------------------------------------------------ the step
    def cv_sum(self, q, q_prop, coords=None) -> float:
        """The control variate's exact sum over all rows (0 without control variates).
        ``coords``: ``(coordinates(q), coordinates(q_prop))`` when already computed."""
        if not self.cv_active:
            return 0.0
        if self.saga is not None:
            return self.saga.sum_diff(q, q_prop)
        v, v_prop = coords if coords is not None else (self.coordinates(q),
                                                       self.coordinates(q_prop))
        return self.proxy.sum_diff(v, v_prop)

    def diff_fn(self, q, q_prop, coords=None):
        """``rows -> terms`` for the kernel: the control-variate residuals (or the plain
        differences), divided by ``N p_i`` for importance-sampled rows. The first call of
        a step feeds the variance check (every step while tuning, every 10th after)."""
        eng, cv = self.engine, self.cv if self.cv_active else 0
        # the variance check reads every tuning step, and every 10th step after tuning
        first = [self.cv_active and (self.tune or self._n_steps % 10 == 0)]
        scale = None if self.is_table is None else self._is_scale

        vterms = None
        if cv in (1, 2) and self._vmap is not None:
            v, v_prop = coords if coords is not None else (self.coordinates(q),
                                                           self.coordinates(q_prop))
            vterms = self._vmap.terms_fn(v, v_prop, self.proxy.center, cv)

        def terms(rows):
            if vterms is not None:
                plain, r = vterms(rows)
            elif cv in (1, 2):
                t = eng.loglik_diff_taylor(q, q_prop, self.proxy.center, rows, cv)
                plain, r = t[0], residuals(t)
            else:
                plain = r = eng.loglik_diff(q, q_prop, rows)
                if cv == "saga":
                    r = self.saga.residuals(plain, rows, q, q_prop)
            if first[0]:
                first[0] = False
                self._vcheck.add(plain, r)
            return r if scale is None else r / scale[rows]

        return terms

    def _decide(self, q, q_prop, log_prior_ratio, log_qratio):
        o1 = log_prior_ratio + log_qratio
        # the control variates' coordinates of q, q' once, for the closed-form sum and the
        # rows' terms (v(q) in predictor coordinates, else q itself)
        coords = ((self.coordinates(q), self.coordinates(q_prop))
                  if self.cv_active and self.saga is None else None)
        cv_sum = self.cv_sum(q, q_prop, coords)
        # the control variate's exact sum over all N rows enters the data-free part
        o1 += self.loglik_weight * cv_sum
        self._first_prob = math.exp(min(0.0, o1)) if o1 == o1 else 0.0
        eng = self.engine

        def exact_sum():  # sum_i of the terms over all rows (i.i.d. draws reached N)
            return eng.full_loglik_diff(q, q_prop) - cv_sum

        audited = self.audit > 0 and self.rng.random() < self.audit
        res, stats = self._run_test(self.diff_fn(q, q_prop, coords), o1, exact_sum)
        accept = bool(res.accept)
        stats["cv_active"] = self.cv_active
        stats["audit"] = np.nan
        if audited:
            full = log_prior_ratio + log_qratio + self.loglik_weight * (
                eng.full_loglik_diff(q, q_prop)
            )
            stats["audit"] = float(self._exact_decision(res, full) == accept)
        q_now = q_prop if accept else q
        if self.saga is not None and self.cv_active and res.data_used < self.n_rows:
            rows = np.unique(self._sampler.drawn())
            if rows.size:
                self.saga.update(rows, eng.loglik_rows_grad(q_now, rows)[1])
        self._after_step(q_now, res.data_used)
        return accept, stats

    def _after_step(self, q_now, data_used):
        """The chain's running mean and rows read over tuning (for ``recenter`` and the
        checks of the Laplace fit) and the variance-check windows."""
        if self.cv_order and self.tune:
            self._mean_n += 1
            self._mean_q += (q_now - self._mean_q) / self._mean_n
            self._rows_tuning += data_used
        if not self.cv_active:
            return
        self._n_steps += 1
        if self.tune:
            if self._n_steps % self.CV_WINDOW == 0:
                self._cv_verdict, self._cv_ratio = self._vcheck.verdict(), self._vcheck.ratio
                self._vcheck.reset()
        elif self._vcheck.verdict() is False:
            self.warn_once(
                "cv_poor",
                "the Taylor control variates do not reduce the variance of the per-row terms "
                f"(residual/plain variance {self._vcheck.ratio:.3g}): the test reads more rows "
                "than plain differences would. Consider control_variate=0 or recenter=True.",
            )

    def _report_test(self, res, checked: bool, clt_doubt: str | None):
        """Warnings about one test, each once per chain: a doubtful normal approximation
        (``clt_doubt``, when the CLT was ``checked``, on the first kept draw) and
        non-finite terms (the test rejected)."""
        if clt_doubt is not None:
            self.warn_once("clt", clt_doubt)
        if checked:
            self._warned.add("clt")  # checked once per chain
        if res.nonfinite:
            self.warn_once(
                "nonfinite",
                "a NaN or +inf log-likelihood difference was met and the proposal rejected; "
                "check the model at the current and proposed values.",
            )

    @abstractmethod
    def _run_test(self, terms_fn, log_ratio_o1, exact_sum):
        """Run the acceptance kernel; return ``(result, stats)``. ``exact_sum()`` gives the
        terms' sum over all rows (for i.i.d. importance-sampled rows)."""

    @abstractmethod
    def _exact_decision(self, result, full_log_ratio) -> bool:
        """The exact full-data decision for the randomness ``result`` used (audit)."""
