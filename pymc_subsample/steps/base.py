"""The PyMC plumbing shared by all subsampling step methods.

:class:`SubsampleStep` is an ``ArrayStepShared`` subclass that owns a
:class:`~pymc_subsample.engine.LikelihoodEngine` (data rows -> log-likelihood) and does
the PyMC work every step needs: variable validation, the engine and its data checks,
the refusal of stale data and changed files, pickling for worker processes, recorded
settings, progress-bar columns (:mod:`pymc_subsample.steps.progress`), and the draw loop
(:meth:`SubsampleStep.astep`, which runs ``steps_per_draw`` transitions of
:meth:`SubsampleStep._transition`). It knows no proposal and no acceptance test: the
Metropolis-Hastings layer is :mod:`pymc_subsample.steps.mh`, whose steps hold one
transition kernel (:mod:`pymc_subsample.steps.kernel`), and SGLD
(:mod:`pymc_subsample.steps.sgld`) sits on this class directly. The per-chain state and the sample stats are in
:mod:`pymc_subsample.steps.state`; the set-up passes (centre, per-row gradients,
importance weights) in :mod:`pymc_subsample.steps.setup`.
"""

from __future__ import annotations

import math
from abc import abstractmethod

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence

from ..engine import LikelihoodEngine
from ..engine.analysis import model_logp
from ..engine.groups import NotFound
from ..kernels._validation import check_choice, check_positive_int
from ..out_of_core import keep_observations_on_disk
from .data import DataGuard
from .progress import fit_progress_columns, progress_columns, progress_update_functions
from .variables import step_value_vars
from .watch import WatchedChain
from .state import (
    BASE_STATS,
    DRAW_STATS,
    SETTING_PREFIX,
    ChainState,
    SubsampleStepState,
    one_thread,
    setting_stats,
    summarise,
)

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors

__all__ = ["SubsampleStep"]

class SubsampleStep(DataGuard, WatchedChain, ChainState, ArrayStepShared):
    """Base class of the subsampling step methods: the PyMC plumbing.

    Subclasses implement :meth:`_setup` (the set-up passes, once per step object; it may
    set ``kernel``, a :class:`~pymc_subsample.steps.kernel.TransitionKernel`, whose
    declared stats are then the step's, with the draw's) and :meth:`_transition` (one
    Markov transition from ``q``, returning the new state and its stats), and declare
    their extra sample stats in ``stats_dtypes_shapes``.

    Parameters
    ----------
    vars : list of variables, optional
        The continuous variables this step samples (default: all continuous free
        variables of the model).
    tune : bool, default True
        Adapt during PyMC's tuning phase.
    model : pymc.Model, optional
    init : {"laplace", "model"}, default "laplace"
        Where each chain's warm-up starts: a draw of the Laplace approximation at the
        step's centre (steps that have one), or PyMC's initial point.
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
    #: settings recorded with the draws, as stats ``setting_<name>`` (see :meth:`settings`)
    SETTINGS: tuple[str, ...] = ("steps_per_draw",)
    stats_dtypes_shapes = {**BASE_STATS, **setting_stats(SETTINGS)}
    loglik_weight = 1.0  # 1 / temperature for tempered targets
    #: the group structure the step found (a :class:`~pymc_subsample.engine.groups.
    #: GroupStructure`: it runs the blocked sweep), a :class:`~pymc_subsample.engine.
    #: groups.NotFound` saying why not, or None (the step looks for none)
    hierarchy = None

    #: the engine checks every row when it is built (:meth:`~pymc_subsample.engine.
    #: likelihood.LikelihoodEngine.validate`); a step that sets this False must call
    #: ``self.engine.validate`` first thing in its ``_setup``
    ENGINE_CHECKS_ROWS = True

    def __init__(self, vars=None, *, tune=True, model=None, blocked=True, rng=None,
                 initial_point=None, init="laplace", steps_per_draw=1, compile_kwargs=None,
                 progressbar=None):
        self.init = check_choice("init", init, ("laplace", "model"))
        self.steps_per_draw = check_positive_int(
            "steps_per_draw", steps_per_draw, strict=True,
            what="a positive integer (Markov transitions per PyMC draw)")
        #: mean and Cholesky factor of the Laplace approximation (set by steps with a centre)
        self._laplace_mean = self._laplace_chol = None
        model = pm.modelcontext(model)
        keep_observations_on_disk(model)  # observed_data: the file, not a copy
        if initial_point is None:
            initial_point = model.initial_point()
        vars = step_value_vars(type(self).__name__, vars, model)
        shared = make_shared_replacements(initial_point, vars, model)
        self.engine = LikelihoodEngine(model, vars, shared, compile_kwargs=compile_kwargs,
                                       initial_point=initial_point,
                                       check=self.ENGINE_CHECKS_ROWS)
        # before the set-up passes read the data: a file changed while they run is then
        # caught when a chain starts
        self._watch_files()
        self.n_rows = self.engine.n_rows
        self.ndim = self.engine.ndim
        self.adapt = bool(tune)
        self.tune = bool(tune)
        with self.engine.showing_progress(progressbar, label=type(self).__name__):
            self._setup()
        self._declare_kernel_stats()
        self._remember_data()
        super().__init__(vars, shared, blocked=blocked, rng=rng)
        self._reset_chain()

    def _declare_kernel_stats(self):
        """The step's sample stats: those of its kernel and of the draw (``scaling``,
        ``warning``, the settings), in the order the class declares them (the class's
        own when the kernel emits all the others, or there is none)."""
        if self.kernel is None:
            return
        declared = type(self).stats_dtypes_shapes
        emitted = self.kernel.stats_dtypes_shapes
        stats = {k: v for k, v in declared.items()
                 if k in DRAW_STATS or k.startswith(SETTING_PREFIX) or k in emitted}
        if len(stats) != len(declared):
            self.stats_dtypes_shapes = stats
            self.stats_dtypes = [{k: dtype for k, (dtype, _) in stats.items()}]

    @abstractmethod
    def _setup(self):
        """The set-up, once per step object (centre, sums, proposal, compiled functions)."""

    # ------------------------------------------------------------------ other steps
    def likelihood_vars_of_other_steps(self) -> list[str]:
        """Names of the variables the likelihood depends on that this step does not sample.

        Control variates and bounds computed once at a centre hold these at their initial
        values; if another step of a ``CompoundStep`` (NUTS, a Gibbs step) moves them, the
        precomputed sums no longer match the likelihood.
        """
        model = self.engine.model
        # the per-row terms the engine's analysis built (model_logp: the same graphs, not
        # a second derivation, which hashes every data constant again)
        terms = model_logp(model, model.observed_RVs, sum=False)
        used = set(ancestors(list(terms)))
        mine = set(self.engine.vars)
        return [
            model.values_to_rvs[v].name for v in model.value_vars if v not in mine and v in used
        ]

    def _other_steps_message(self, what: str, advice: str) -> str | None:
        """The refusal of sums kept at a centre when another step samples a variable of
        the likelihood (:meth:`likelihood_vars_of_other_steps`), or None."""
        others = self.likelihood_vars_of_other_steps()
        if not others:
            return None
        names = ", ".join(repr(o) for o in others)
        return (f"{what} needs every variable the likelihood depends on in this step's "
                f"vars=, but {names} is sampled by another step: the sums kept at the "
                f"centre would go stale. {advice}")

    def _set_laplace(self, mean, cov):
        """Store the Laplace approximation (mean, Cholesky factor of ``cov``) that the
        warm-up start and the steps' checks draw on."""
        self._laplace_mean, self._laplace_chol = mean, np.linalg.cholesky(cov)
        self._check_proper(mean, cov)

    # ------------------------------------------------------------------ recorded settings
    def settings(self) -> dict:
        """The settings recorded with every draw, ``{name: value}`` for the names in
        ``SETTINGS`` (the values in effect: defaults resolved, a ``max_error`` design
        applied). Subclasses extend it."""
        return {"steps_per_draw": self.steps_per_draw}

    def _setting_stats(self) -> dict:
        """:meth:`settings` as the draw's stats ``setting_<name>`` (built once per chain)."""
        cached = getattr(self, "_settings_cache", None)
        if cached is None:
            values = self.settings()
            cached = {SETTING_PREFIX + name: values[name] for name in self.SETTINGS}
            self._settings_cache = cached
        return cached

    # ------------------------------------------------------------------ progress bar
    #: progress-bar columns, the most useful first: (sample stat, field, header, format
    #: of its running mean). Short headers: a column is as wide as its header or
    #: :data:`PROGRESS_VALUE_WIDTH`, whichever is wider (:func:`progress_columns`).
    PROGRESS_COLUMNS = (
        ("data_used", "pms_rows", "Rows", "{:.0f}"),
        ("accepted", "pms_accept", "Acc", "{:.2f}"),
    )

    @classmethod
    def _progressbar_config(cls, n_chains=1):
        """PyMC's progress-bar hook: one fixed-width column per entry of
        ``PROGRESS_COLUMNS`` that fits beside PyMC's own columns
        (:func:`fit_progress_columns`)."""
        return progress_columns(fit_progress_columns(cls.PROGRESS_COLUMNS), n_chains)

    @classmethod
    def _make_progressbar_update_functions(cls):
        """PyMC's progress-bar hook: running means of the shown columns' stats."""
        return progress_update_functions(fit_progress_columns(cls.PROGRESS_COLUMNS))

    @staticmethod
    def competence(var, has_grad):
        # Never chosen automatically: users opt in with step=...
        return Competence.INCOMPATIBLE

    # ------------------------------------------------------------------ the draw
    def astep(self, q0: RaveledVars):
        """One draw: ``steps_per_draw`` transitions. With ``init="laplace"`` the first
        tuning draw of a chain first moves the chain to a draw of the Laplace
        approximation at the step's centre (steps that have one).

        PyMC's default initial point can lie tens of posterior sd from a tall-data
        posterior, where a proposal tuned to the posterior's scale moves slowly, a pCN
        proposal, like an independence sampler, is rejected wherever the posterior's
        tails are heavier than the Gaussian fit, and ScalableMH's bounds (which grow with
        the distance from the centre) make every test read many rows. Like NUTS's
        jittered initialisation, this changes only where warm-up starts (tuning draws are
        discarded); the kernel is unchanged. Without tuning the chain starts where PyMC
        puts it. One thread at a time (:func:`~pymc_subsample.steps.state.one_thread`).
        """
        with one_thread(self):
            return self._draw(q0)

    def _draw(self, q0: RaveledVars):
        if self._data_files is not None:
            self._data_files.check_stat()  # files unchanged? (os.stat, before rows are read)
        q = q0.data
        if self.chain.start_pending:
            self.chain.start_pending = False
            q = self._chain_start(q)
        self._start_draw()
        transitions = []
        for _ in range(self.steps_per_draw):
            q, stats = self._transition(q)
            transitions.append(stats)
        self._check_collapse(q)
        stats = summarise(transitions)
        self._watch_chain(q0.data, q, stats)
        stats["accepted"] = stats["accepted"] / self.steps_per_draw
        stats["accept"] = stats["accept"] / self.steps_per_draw
        stats["scaling"] = self._scaling()
        pending = self.chain.warnings.pending
        stats["warning"] = pending.pop(0) if pending else None
        stats.update(self._setting_stats())
        return RaveledVars(q, q0.point_map_info), [stats]

    def _chain_start(self, q):
        """Where a chain starts (its first draw): with tuning and ``init="laplace"``, a
        draw of the Laplace approximation at the centre (steps that have one); then the
        kernel's start (:meth:`~pymc_subsample.steps.kernel.TransitionKernel.init`)."""
        warm = self.tune and self.init == "laplace"
        if warm and self._laplace_mean is not None:
            z = self.rng.standard_normal(self.ndim)
            q = self._laplace_mean + self._laplace_chol @ z
        if self.kernel is not None:
            q = self.kernel.init(q, warm_start=warm)
        return q

    #: a log-scale coordinate below this (a scale under 6e-6) counts as collapsed
    COLLAPSE_LOG = -12.0

    def _collapse_coords(self):
        """``(positions in q, names)`` of the step's variables sampled on the log scale
        (scales: ``HalfNormal``, ``Exponential``, ...), found once."""
        found = getattr(self, "_collapse_cache", None)
        if found is None:
            model, idx, names = self.engine.model, [], []
            for v, pos in self.engine.var_slices().items():
                rv = model.values_to_rvs[v]
                tr = model.rvs_to_transforms.get(rv)
                if tr is not None and type(tr).__name__ == "LogTransform":
                    idx += list(pos)
                    names += [rv.name] * pos.size
            found = self._collapse_cache = (np.asarray(idx, dtype=int), names)
        return found

    def _check_collapse(self, q):
        """Warn (once per chain) when a scale sampled on the log scale has collapsed
        toward 0: the degenerate mode of a centred hierarchical model, where a chain
        freezes (within-chain sd near 0) far from the posterior."""
        idx, names = self._collapse_coords()
        if idx.size == 0:
            return
        low = q[idx] < self.COLLAPSE_LOG
        if not np.any(low):
            return
        k = int(np.argmax(low))
        sweep_runs = self.hierarchy is not None and not isinstance(self.hierarchy, NotFound)
        advice = ("The blocked sweep runs and should not do this: please report it."
                  if sweep_runs else
                  "If it is the scale of group effects, this is the degenerate mode of a "
                  "centred hierarchical model, where a chain freezes. The default "
                  "hierarchical='auto' of the MH steps samples these models with a "
                  "blocked sweep when it recognises them (a GLM with one Normal random "
                  f"intercept gathered by integer group indices; here: {self.hierarchy_text()}).")
        self.warn_once("collapse", f"'{names[k]}' has collapsed to "
                       f"{np.exp(q[idx][k]):.3g} (log {q[idx][k]:.1f}): the draws are not "
                       f"from the posterior. {advice}")

    def hierarchy_text(self) -> str:
        """Whether the step runs a blocked hierarchical sweep, or why not."""
        found = self.hierarchy
        if found is None:
            return "this step has no blocked sweep"
        return found.reason if isinstance(found, NotFound) else "recognised"

    def _start_draw(self):
        """Before a draw's transitions (a step's caches that other steps of a
        ``CompoundStep`` may invalidate between draws)."""

    @abstractmethod
    def _transition(self, q):
        """One Markov transition from ``q``: the new state and the transition's stats
        (``accepted`` 0.0 or 1.0, ``accept``, ``data_used``, ``n_batches``, ...)."""

    def _scaling(self) -> float:
        """The ``scaling`` stat of a draw (the kernel's: the proposal's scale; SGLD's step
        size)."""
        return math.nan if self.kernel is None else self.kernel.scaling
