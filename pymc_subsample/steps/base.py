"""The PyMC plumbing shared by all subsampling step methods.

A step method here is a thin ``ArrayStepShared`` subclass: it owns a
:class:`~pymc_subsample.engine.LikelihoodEngine` (data rows -> log-likelihood), a proposal
from :mod:`pymc_subsample.proposals`, and calls a pure acceptance kernel from
:mod:`pymc_subsample.kernels` once per step. :class:`SubsampleStep` holds what the three
steps have in common: variable validation, the engine, the proposal's set-up and tuning,
the refusal of stale data, pickling for worker processes, and the step itself
(:meth:`SubsampleStep.astep`). The per-chain state and the sample stats are in
:mod:`pymc_subsample.steps.state`; the minibatch-test layer of AustereMH and
BarkerMinibatch in :mod:`pymc_subsample.steps.growing`.
"""

from __future__ import annotations

import math
import numbers
import weakref
from abc import abstractmethod

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.pytensorf import make_shared_replacements
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence
from pymc.util import get_value_vars_from_user_vars

from .. import _memmap
from ..center import center_at, find_center, parse_point
from ..engine import LikelihoodEngine
from ..out_of_core import keep_observations_on_disk
from ..proposals import as_proposal
from .gradients import GradientOracle, build_estimator
from .state import (
    BASE_STATS,
    SETTING_PREFIX,
    ChainState,
    SubsampleStepState,
    progressbar_config,
    progressbar_update_functions,
    setting_stats,
    summarise,
)

try:  # PyTensor >= 2.31 moved graph traversal helpers
    from pytensor.graph.traversal import ancestors
except ImportError:  # pragma: no cover
    from pytensor.graph.basic import ancestors

__all__ = ["SubsampleStep"]


class SubsampleStep(ChainState, ArrayStepShared):
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
    #: settings recorded with the draws, as stats ``setting_<name>`` (see :meth:`settings`)
    SETTINGS: tuple[str, ...] = ("steps_per_draw",)
    stats_dtypes_shapes = {**BASE_STATS, **setting_stats(SETTINGS)}
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
        keep_observations_on_disk(model)  # observed_data: the file, not a copy
        if initial_point is None:
            initial_point = model.initial_point()
        if vars is None:
            vars = model.continuous_value_vars
            if not vars:
                raise ValueError(
                    f"{type(self).__name__}: the model has no continuous free variables to sample."
                )
        vars = get_value_vars_from_user_vars(vars, model)
        self._check_unique(vars, model)
        self._check_continuous(vars, model)
        shared = make_shared_replacements(initial_point, vars, model)
        self.engine = LikelihoodEngine(model, vars, shared, compile_kwargs=compile_kwargs)
        # before the set-up passes read the data: a file changed while they run is then
        # caught when a chain starts
        self._watch_files()
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
    def _check_unique(vars, model):
        seen, twice = set(), []
        for v in vars:
            if v in seen and v not in twice:
                twice.append(v)
            seen.add(v)
        if twice:
            names = ", ".join(f"'{model.values_to_rvs[v].name}'" for v in twice)
            raise ValueError(
                f"vars= names {names} more than once; give each variable once."
            )

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
            # the marginal sds behind the random-walk default (its 2.38 / sqrt(d) factor
            # undone), for proposals that start from a scaling of their own
            own = self.proposal.scaling_from_sd(scaling * np.sqrt(self.ndim) / 2.38)
            scaling = scaling if own is None else own
        grad_fn = (self._proposal_grad_fn()
                   if getattr(self.proposal, "estimator_name", None) else self._minibatch_grad)
        self.proposal.setup(self.ndim, scaling=scaling, grad_fn=grad_fn, n_total=self.n_rows)

    def _locate_center(self, what: str, advice: str):
        """The centre: ``center=`` as given (``self._center_arg``), else the posterior mode
        by :func:`~pymc_subsample.center.find_center`. A search that did not converge
        leaves a warning for every chain (``_setup_warning``), naming ``what`` the centre
        is for and giving ``advice``."""
        eng = self.engine
        if self._center_arg is not None:
            return center_at(eng, parse_point(self._center_arg, eng, "center"))
        center = find_center(eng)
        if not center.converged:
            self._setup_warning = (
                f"the search for the posterior mode ({what}) did not converge; {advice}"
            )
        return center

    def _minibatch_grad(self, q, rows):
        """Unbiased estimate of the log-posterior gradient from ``rows`` (Langevin proposals)."""
        _, g_prior = self.engine.prior_and_grad(q)
        _, g_ll = self.engine.loglik_sum_grad(q, rows)
        return g_prior + (self.n_rows / len(rows)) * g_ll

    # ------------------------------------------------------------------ stale data
    #: whether the step keeps sums, bounds or fits computed from the data at construction
    #: (then a later pm.set_data must be refused, not sampled with stale sums)
    keeps_data_sums = True
    #: the files behind file-backed rows (set by :meth:`_remember_data`)
    _data_files = None

    def _watch_files(self):
        """Record the files behind file-backed rows (every step reads rows from them
        while sampling: :class:`~pymc_subsample.out_of_core.DataFileWatcher`)."""
        from ..out_of_core import DataFileWatcher

        self._data_files = DataFileWatcher(
            zip([r.name for r in self.engine.rows], self.engine.data_arrays()),
            owner=type(self).__name__)

    def _remember_data(self):
        """Record what the data looked like when the step's sums were computed (a step
        that keeps sums; the set-up decides whether it does)."""
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

        First, in any step, the files behind file-backed rows are compared with what they
        were when the step was built (size, modification time, inode and a digest of
        spread blocks); a file written, truncated or replaced since raises
        :class:`~pymc_subsample.out_of_core.DataFileChangedError`.
        """
        if self._data_files is not None:
            self._data_files.check()
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

    # ------------------------------------------------------------------ pickling
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_data_refs"] = None  # weak references do not pickle; the digest remains
        return state

    def __reduce_ex__(self, protocol):
        """Pickle file-backed data by reference when the data has any.

        ``pm.sample`` pickles the step for its workers unless they are forked
        (``mp_ctx="spawn"``, ``"forkserver"``, macOS): a ``numpy.memmap`` would arrive as
        an in-memory copy in every worker. With a file-backed data array, the step is
        pickled by :func:`pymc_subsample._memmap.dumps`, which writes every file-backed
        array it reaches (the engine's rows, the model graph's constants) as its file,
        offset, dtype, shape and strides, mapped again on unpickling.
        """
        if any(_memmap.is_file_backed(a) for a in self.engine.data_arrays()):
            return (_memmap.loads, (_memmap.dumps(self, as_state=True),))
        return super().__reduce_ex__(protocol)

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
    #: progress-bar columns: (sample stat, field, header, format of its running mean)
    PROGRESS_COLUMNS = (
        ("data_used", "pms_rows", "Rows/draw", "{:,.0f}"),
        ("accepted", "pms_accept", "Accept", "{:.2f}"),
    )

    @classmethod
    def _progressbar_config(cls, n_chains=1):
        """PyMC's progress-bar hook: one column per entry of ``PROGRESS_COLUMNS``."""
        return progressbar_config(cls.PROGRESS_COLUMNS, n_chains)

    @classmethod
    def _make_progressbar_update_functions(cls):
        """PyMC's progress-bar hook: running means of the ``PROGRESS_COLUMNS`` stats."""
        return progressbar_update_functions(cls.PROGRESS_COLUMNS)

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
        if self._data_files is not None:
            self._data_files.check_stat()  # files unchanged? (os.stat, before rows are read)
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
        stats = summarise(transitions)
        stats["accepted"] = stats["accepted"] / self.steps_per_draw
        stats["accept"] = stats["accept"] / self.steps_per_draw
        stats["scaling"] = float(getattr(self.proposal, "scaling", np.nan))
        stats["warning"] = self._pending.pop(0) if self._pending else None
        stats.update(self._setting_stats())
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
        if self._oracle is not None:  # a Langevin proposal's estimator: its rows count
            stats["data_used"] += self._oracle.update(q_prop if accepted else q)
        stats["accepted"] = float(bool(accepted))
        # a step whose _decide gives no estimate reports the decision itself (unbiased)
        stats.setdefault("accept", stats["accepted"])
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
        if (self.proposal.tune_signal == "first_factor"
                and getattr(self.proxy, "order", 0) == 2):
            return p
        return bool(accepted)

    def coordinates(self, q) -> np.ndarray:
        """Where the control variates live: ``v(q)`` in predictor coordinates, else
        ``q``."""
        return q if self._vmap is None else self._vmap.v(q)

    def _proposal_grad_fn(self):
        """The gradient the proposal declares it needs (``Proposal.gradient``): the data-free
        surrogate's, or an unbiased minibatch estimate of the log posterior's, from the
        gradient estimator the proposal names (``estimator_name``, a
        :class:`~pymc_subsample.steps.gradients.GradientOracle`) or plain."""
        if getattr(self.proposal, "gradient", "minibatch") == "surrogate":
            return self._surrogate_grad
        name = getattr(self.proposal, "estimator_name", None)
        if name is not None:
            est = build_estimator(self, name, self.proposal.batch_size)
            center = getattr(self, "center", None)
            self._oracle = GradientOracle(self.engine, est,
                                          None if center is None else center.theta,
                                          self.loglik_weight)
            return self._oracle
        return self._minibatch_grad

    #: the gradient estimates of a Langevin proposal with ``gradient=`` (per chain state:
    #: SAGA's store)
    _oracle = None

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

